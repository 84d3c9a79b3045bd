//! Classify the connect: is the socket of a protocol the binder steers, is its
//! destination steered, and is the port SRAP's to choose (the application
//! may have bound one, or its address only).

use aya_ebpf::programs::SockAddrContext;
use srap_common::{
    binder::{DestKey, DestValue, SocketRecord, outcome, steered_protocol},
    family::Family,
    protocol::Protocol,
};

use super::{
    config,
    context::{Connecting, cookie_of, is_subflow},
    maps::SRAP_DESTS,
    record::recalled,
};

/// The protocol of a connect SRAP steers and the plan's entry for it, or
/// the verdict that leaves it to the kernel: a protocol the binder does
/// not steer (a UDP `connect()`), a destination the plan has no table for
/// (for the bound source address, or for any), a port the application
/// already has.
#[inline(always)]
pub(super) fn classify(
    ctx: &SockAddrContext,
    connecting: &Connecting,
) -> Result<(Protocol, DestValue), u32> {
    let protocol = steered_protocol(connecting.sock_type, connecting.protocol)?;
    let peer = &connecting.peer;
    let family = if peer.v4 { Family::Inet } else { Family::Inet6 };
    let key = DestKey::new(protocol, family, peer.port, peer.addr, connecting.src);
    let Some(dest) = dest_of(key) else {
        if connecting.bound_addr() && dest_of(DestKey { src: [0; 4], ..key }).is_some() {
            return Err(outcome::SOURCE_UNPLANNED);
        }
        return Err(outcome::MISS);
    };
    if connecting.sport != 0 {
        return Err(bound_port_outcome(ctx));
    }
    // An MPTCP subflow is steered only under `--mptcp subflows`: without
    // the MPTCP programs nothing would release its claim (a subflow is a
    // kernel socket, which the release hook never sees).
    if !config::steers_mptcp() && is_subflow(ctx) {
        return Err(outcome::PROTOCOL_NOT_STEERED);
    }
    Ok((protocol, dest))
}

/// The destination's plan entry, in one lookup when every destination
/// port of the receiver is steered: the any-port key is looked up first,
/// and only a receiver steered on named ports (its any-port entry says
/// [`DestValue::BY_PORT`]) takes a second lookup, for the port.
#[inline(always)]
pub(super) fn dest_of(key: DestKey) -> Option<DestValue> {
    let any = DestKey { port: 0, ..key };
    // SAFETY: values are copied out at once.
    let dest = unsafe { SRAP_DESTS.get(any) }.copied()?;
    if dest.table != DestValue::BY_PORT {
        return Some(dest);
    }
    if key.port == 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe { SRAP_DESTS.get(key) }.copied()
}

/// Why a socket already has a port: an MPTCP subflow's steered at its bind
/// (its record holds a claim: `super::subflow`), `bind(addr, 0)`, or the
/// application's own choice.
fn bound_port_outcome(ctx: &SockAddrContext) -> u32 {
    // A record without a receiver is the bind hook's mark
    // (`SocketRecord::BOUND_AT_BIND`); one with a receiver, a claim.
    match recalled(cookie_of(ctx)) {
        Some((_, held)) if held.receiver != SocketRecord::NONE => outcome::SUBFLOW_STEERED,
        Some(_) => outcome::PORT_AT_BIND,
        None => outcome::APP_BOUND,
    }
}
