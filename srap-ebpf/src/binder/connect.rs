//! A connect, step by step: read the context, classify the socket and its
//! destination, claim a CPU slot, bind a port of it, record the socket.
//! The steps' work is in their own files; this one sequences them, gives
//! back what a step claimed when a later one fails, and returns the
//! connect's one verdict (counted by the hook, `super::srap_connect4`).
//! After classification the socket's protocol is a const generic of every
//! step: each steered protocol's path is compiled apart.

use aya_ebpf::programs::SockAddrContext;
use srap_common::{
    binder::{DestValue, MAX_SLOTS, SocketRecord, event, outcome, steers},
    family::Family,
    local_nics::policy,
    protocol::Protocol,
    receiver_nics,
};

use super::{
    bind::{bind_for_ends, bind_port, port_sharing},
    claim::{claim_slot, note_dry, release_slot, slot_word_of},
    classify::classify,
    config,
    context::{Peer, connecting},
    maps::{SRAP_LAYOUTS, SRAP_RECEIVERS, SRAP_SLOTS, SRAP_TABLES, count},
    nic::choose_nic,
    ports::PlanRows,
    record::{drop_bind_record, hold, pace},
    spread::{chosen_receiver, chosen_route, spread_dest},
    tuple::{TCP, UDP},
};

/// Binds a steered port if the socket and its destination are steered;
/// returns the connect's verdict (an `outcome`). Inlined so each program
/// keeps only its own family's path.
#[inline(always)]
pub(super) fn connect(ctx: &SockAddrContext, family: Family) -> u32 {
    // Read what the kernel hands the hook.
    let connecting = connecting(ctx, family);
    // Taken here, not after `drop_bind_record`: read from `connecting`
    // across that subprogram's call, they would go through the stack, and
    // the kernel's verifier would walk `connect6` past its million
    // instructions.
    let (peer, bound_addr) = (connecting.peer, connecting.bound_addr());
    // Classify the socket and its destination.
    let (protocol, dest) = match classify(ctx, &connecting) {
        Ok(classified) => classified,
        Err(verdict) => return verdict,
    };
    // The protocol a constant from here on: a protocol `STEERED` does not
    // name compiles to nothing (classify refused it already), and the
    // kernel's verifier walks each steered protocol's path once.
    match protocol {
        Protocol::Tcp if const { steers(Protocol::Tcp) } => {
            steer::<TCP>(ctx, family, dest, peer, bound_addr)
        }
        Protocol::Udp if const { steers(Protocol::Udp) } => {
            steer::<UDP>(ctx, family, dest, peer, bound_addr)
        }
        _ => outcome::PROTOCOL_NOT_STEERED,
    }
}

/// The steps after classification of a `PROTOCOL` connect toward `dest`:
/// the receiver's NIC, this host's, then the slot, its port and the record.
#[inline(always)]
fn steer<const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    dest: DestValue,
    peer: Peer,
    bound_addr: bool,
) -> u32 {
    drop_bind_record(ctx);
    // The receiver's NIC, then this host's, unless the application bound
    // an address. Each choice is a load-time setting: the verifier walks
    // only the ones configured.
    let (dest, peer) = if config::receiver_nics() == receiver_nics::mode::SPREAD {
        match spread_then_nic::<PROTOCOL>(ctx, family, dest, peer) {
            Some(chosen) => chosen,
            None => return outcome::MAPS_UNFILLED,
        }
    } else if config::local_nics() != policy::ROUTE {
        match choose_nic(ctx, family, dest) {
            Some(dest) => (dest, peer),
            None => return outcome::MAPS_UNFILLED,
        }
    } else {
        (dest, peer)
    };
    // Claim a slot, pick and bind its port, record the socket.
    let result = bind_steered::<false, PROTOCOL>(ctx, family, &dest, peer, bound_addr);
    if bound_addr && (result == outcome::STEERED || result == outcome::RETRIED) {
        count(event::SOURCE_KEPT);
    }
    result
}

/// The receiver address the connect is sent to ([`super::spread`]), then
/// this host's NIC toward it ([`super::nic`]): the destination's entry and
/// address after both choices, in `connect4` and `connect6` alike.
#[inline(always)]
fn spread_then_nic<const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    dest: DestValue,
    peer: Peer,
) -> Option<(DestValue, Peer)> {
    let chosen = spread_dest::<PROTOCOL>(ctx, family, &dest, &peer)?;
    let (table, local_table) = chosen_route(chosen);
    let route = DestValue {
        table,
        local_table,
        ..dest
    };
    let dest = choose_nic(ctx, family, route)?;
    Some(chosen_receiver(chosen, dest, peer))
}

/// Claims a slot of the destination's receiver, binds a port of it whose
/// tuple is free and records the socket; gives the claim
/// back when no port binds. A failed bind clears the socket's address: when the
/// application had bound one and no port binds, it is bound again (port 0:
/// the address alone), so the kernel's port goes with the application's
/// address. `AT_BIND`: from a bind hook, which takes the port by rewriting
/// the one its `bind()` asks for ([`super::subflow`]; `bound_addr` false
/// there: nothing was bound yet). `PROTOCOL`: the socket's, whose tuple
/// lookup the bind makes ([`super::tuple`]).
#[inline(always)]
pub(super) fn bind_steered<const AT_BIND: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    dest: &DestValue,
    peer: Peer,
    bound_addr: bool,
) -> u32 {
    let Some(table) = SRAP_TABLES.get(dest.table) else {
        return outcome::MAPS_UNFILLED;
    };
    let Some(layout) = SRAP_LAYOUTS.get(table.layout) else {
        return outcome::MAPS_UNFILLED;
    };
    let Some(state) = SRAP_RECEIVERS.get_ptr_mut(dest.receiver) else {
        return outcome::MAPS_UNFILLED;
    };
    let slots = layout.slots;
    if slots == 0 || slots > MAX_SLOTS {
        return outcome::MAPS_UNFILLED;
    }
    let (slot, turn) = match claim_slot(state, dest.receiver) {
        Ok(claimed) => claimed,
        Err(verdict) => return verdict,
    };
    // Past this layout's slots only while a re-plan shrinks the receiver:
    // the ports of another slot, the claim's count kept where it was made.
    let found = (
        SRAP_SLOTS.get(layout.slot_base.wrapping_add(slot % slots)),
        slot_word_of(dest.receiver, slot),
    );
    let (Some(row), Some(word)) = found else {
        release_slot(dest.receiver, slot);
        return outcome::MAPS_UNFILLED;
    };
    let rows = PlanRows {
        table,
        layout,
        row,
        word,
    };
    let (result, local) = match port_sharing(ctx) {
        Some(sharing) => {
            bind_for_ends::<AT_BIND, PROTOCOL>(ctx, family, dest, &rows, peer, turn, sharing)
        }
        None => (outcome::OPTION_UNREADABLE, SocketRecord::NONE),
    };
    if result == outcome::STEERED || result == outcome::RETRIED {
        let held = SocketRecord {
            receiver: dest.receiver,
            slot,
            local,
            _pad: 0,
        };
        hold(ctx, held);
        pace(ctx);
        return result;
    }
    release_slot(dest.receiver, slot);
    if result == outcome::NO_FREE_PORT {
        note_dry(state, slot);
    }
    if bound_addr {
        let _ = bind_port(ctx, family, table, 0);
    }
    result
}
