//! Step 2: is the destination steered, and is the port SRAP's to choose
//! (the application may have bound one, or its address only).

use aya_ebpf::programs::SockAddrContext;
use srap_common::binder::{DestKey, DestValue, SocketRecord, outcome};

use super::{context::cookie_of, maps::SRAP_DESTS, record::recalled};

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

/// Why a socket already has a port: `bind(addr, 0)`, or the application's
/// own choice.
pub(super) fn bound_port_outcome(ctx: &SockAddrContext) -> u32 {
    if recalled(cookie_of(ctx)).is_some_and(|(_, held)| held == SocketRecord::BOUND_AT_BIND) {
        outcome::PORT_AT_BIND
    } else {
        outcome::APP_BOUND
    }
}
