//! The occupancy audit's test rig: an XDP program run only through
//! `BPF_PROG_TEST_RUN`, as the agent runs its repairs (`crate::repair`),
//! that makes a drift on purpose ([`op::INJECT`]) with the binder's own
//! steps, so the tests can watch the agent's audit find and repair it. It
//! lives in the lab's object, loaded with the running binder's pinned maps
//! (`srap_harness::drift`); the agents' object does not carry it.

use core::ptr::read_volatile;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use srap_common::{
    binder::{SocketRecord, slot_word},
    occupancy::{self, Row as _, Word as _},
    repair::{op, result},
};

use crate::{
    binder::{MapRow, record::remember, release_slot},
    repair::request_of,
};

/// Makes a drift on purpose ([`op::INJECT`]): claims one flow
/// of a slot and records it for a cookie that is no socket, as a connect
/// that never closes would (with cookie 0, records nothing: a count no
/// record holds).
#[xdp]
pub fn srap_occupancy_inject(ctx: XdpContext) -> u32 {
    let Some(request) = request_of(&ctx) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: `request_of` checked the packet holds a whole request.
    unsafe {
        let (what, before) = if read_volatile(&raw const (*request).op) == op::INJECT {
            inject(
                read_volatile(&raw const (*request).receiver),
                read_volatile(&raw const (*request).slot),
                read_volatile(&raw const (*request).cookie),
            )
        } else {
            (result::NONE, 0)
        };
        (*request).result = what;
        (*request).before = before;
    }
    xdp_action::XDP_PASS
}

/// Claims one flow of slot (`receiver`, `slot`) and records it for
/// `cookie`, or records nothing for cookie 0 (see [`srap_occupancy_inject`]).
#[inline(always)]
fn inject(receiver: u32, slot: u32, cookie: u64) -> (u32, u64) {
    let Some(row) = MapRow::of(receiver) else {
        return (result::MISSING, 0);
    };
    let Some(word) = row.slot_word(slot) else {
        return (result::MISSING, 0);
    };
    let seen = word.load();
    if !occupancy::set_flows(&row, slot, seen, slot_word::flows(seen) + 1) {
        return (result::CHANGED, seen);
    }
    if cookie == 0 {
        // A count with no record at all.
        return (result::DONE, seen);
    }
    let held = SocketRecord {
        receiver,
        slot,
        local: SocketRecord::NONE,
        _pad: 0,
    };
    if !remember(cookie, held) {
        release_slot(receiver, slot);
        return (result::MISSING, seen);
    }
    (result::DONE, seen)
}
