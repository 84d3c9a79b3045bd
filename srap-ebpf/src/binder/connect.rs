//! A connect, step by step: read the context, classify the destination,
//! claim a CPU slot, bind a port of it, record the socket. The steps' work
//! is in their own files; this one sequences them and gives back what a
//! step claimed when a later one fails.

use aya_ebpf::programs::SockAddrContext;
use srap_common::{
    binder::{DestKey, DestValue, MAX_SLOTS, SocketRecord, event, outcome},
    family::Family,
};

use super::{
    bind::{COUNTED, bind_for_ends, bind_port, port_sharing},
    claim::{claim_slot, note_dry, release_slot, slot_word_of},
    classify::{bound_port_outcome, dest_of},
    context::{Peer, SOCK_STREAM, V4_MAPPED_WORD, bound_source, field},
    count,
    maps::{SRAP_LAYOUTS, SRAP_RECEIVERS, SRAP_SLOTS, SRAP_TABLES},
    ports::PlanRows,
    record::{drop_bind_record, hold, pace},
};

/// Binds a steered port if the destination is steered; returns the
/// connect's verdict. Inlined so each program keeps only its own family's
/// path. Steps 1 and 2 are written out here rather than returned as a
/// struct from a function of their own: the kernel's verifier lost track of
/// the fields' values through the stack and walked `connect6` past its
/// limit.
#[inline(always)]
pub(super) fn steer(ctx: &SockAddrContext, family: Family) -> u32 {
    // Step 1: the context.
    let sa = ctx.sock_addr;
    // SAFETY: the kernel passes a valid bpf_sock_addr.
    let (sock_type, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).user_port),
        )
    };
    if sock_type != SOCK_STREAM {
        return outcome::MISS;
    }
    // user_port holds the port in network byte order in its low 16 bits.
    let dport = u16::from_be(user_port as u16);
    // SAFETY: as above.
    let addr = unsafe {
        if family == Family::Inet {
            [field(&raw const (*sa).user_ip4), 0, 0, 0]
        } else {
            [
                field(&raw const (*sa).user_ip6[0]),
                field(&raw const (*sa).user_ip6[1]),
                field(&raw const (*sa).user_ip6[2]),
                field(&raw const (*sa).user_ip6[3]),
            ]
        }
    };
    // A dual-stack AF_INET6 socket connecting to an IPv4 receiver (the JDK's
    // default): steer it with the receiver's IPv4 plan, bind `::ffff:src`.
    let mapped =
        family == Family::Inet6 && addr[0] == 0 && addr[1] == 0 && addr[2] == V4_MAPPED_WORD;
    let (src, sport) = bound_source(ctx, family, mapped);
    let peer = if mapped {
        Peer {
            addr: [addr[3], 0, 0, 0],
            port: dport,
            v4: true,
        }
    } else {
        Peer {
            addr,
            port: dport,
            v4: family == Family::Inet,
        }
    };
    let key = DestKey {
        family: if peer.v4 {
            Family::Inet.as_u32()
        } else {
            Family::Inet6.as_u32()
        },
        port: u32::from(dport),
        addr: peer.addr,
        src,
    };
    let bound_addr = src != [0; 4];
    // Step 2: classify.
    let Some(dest) = dest_of(key) else {
        if bound_addr && dest_of(DestKey { src: [0; 4], ..key }).is_some() {
            return outcome::SOURCE_UNPLANNED;
        }
        return outcome::MISS;
    };
    if sport != 0 {
        return bound_port_outcome(ctx);
    }
    drop_bind_record(ctx);
    // Steps 3 to 6.
    let result = bind_steered(ctx, family, &dest, peer, bound_addr);
    if bound_addr && (result == outcome::STEERED || result == outcome::RETRIED) {
        count(event::SOURCE_KEPT);
    }
    result
}

/// Claims a slot of the destination's receiver (step 3), binds a port of it
/// whose tuple is free (4, 5) and records the socket (6); gives the claim
/// back when no port binds. A failed bind clears the socket's address: when the
/// application had bound one and no port binds, it is bound again (port 0:
/// the address alone), so the kernel's port goes with the application's
/// address.
#[inline(always)]
pub(super) fn bind_steered(
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
    let Some((slot, turn)) = claim_slot(state, dest.receiver) else {
        return COUNTED;
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
        Some(sharing) => bind_for_ends(ctx, family, dest, &rows, peer, turn, sharing),
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
