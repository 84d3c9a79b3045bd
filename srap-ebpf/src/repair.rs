//! The occupancy audit's repairs, in kernel context (see
//! `srap_common::repair`): XDP programs never attached to a device, run
//! by the sender agent through `BPF_PROG_TEST_RUN` on a packet that is one
//! `RepairRequest`, which they answer in place.
//!
//! Why not a map update from user space: the hooks change slot words and
//! socket records by compare-and-exchange only, and a plain update would
//! overwrite a claim or release made between the agent's read and its
//! write. These programs change them the way the hooks do, with the hooks'
//! own functions (the socket table's `forget` and `remember`, the
//! occupancy's `release` and `set_flows`), so a repair and a live connect
//! or close never undo each other: whichever takes a record first frees
//! its slot, once.

use core::ptr::read_volatile;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use srap_common::{
    binder::{LOCAL_ROW, SocketRecord, slot_word},
    occupancy::{self, Row as _},
    repair::{RepairRequest, op, result},
};

use crate::binder::{MapRow, forget, release_slot};

/// Repairs one finding of the occupancy audit: forgets a stale socket
/// record and frees its slots ([`op::FORGET`]), or sets a slot's flow count
/// if its word is still what the agent read ([`op::SET_FLOWS`]). Returns
/// `XDP_PASS` when the request was read, `XDP_ABORTED` when not.
#[xdp]
pub fn srap_occupancy_repair(ctx: XdpContext) -> u32 {
    let Some(request) = request_of(&ctx) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: `request_of` checked the packet holds a whole request.
    let (what, outcome) = unsafe {
        let op = read_volatile(&raw const (*request).op);
        match op {
            op::FORGET => forget_record(read_volatile(&raw const (*request).cookie)),
            op::SET_FLOWS => set_flows(
                read_volatile(&raw const (*request).receiver),
                read_volatile(&raw const (*request).slot),
                read_volatile(&raw const (*request).expected),
                read_volatile(&raw const (*request).value),
            ),
            _ => (result::NONE, 0),
        }
    };
    // SAFETY: as above; the packet is the program's to write.
    unsafe {
        (*request).result = what;
        (*request).before = outcome;
    }
    xdp_action::XDP_PASS
}

/// The request the packet holds, when it holds a whole one.
#[inline(always)]
pub(crate) fn request_of(ctx: &XdpContext) -> Option<*mut RepairRequest> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if start + size_of::<RepairRequest>() > end {
        return None;
    }
    Some(start as *mut RepairRequest)
}

/// Forgets socket `cookie`'s record and frees the slots it holds, as
/// `srap_sock_release` does for a closed socket; returns the result and
/// the freed record's receiver (low half) and slot. A record already gone
/// (the socket's own close took it first) is [`result::CHANGED`].
#[inline(always)]
fn forget_record(cookie: u64) -> (u32, u64) {
    let Some(held) = forget(cookie) else {
        return (result::CHANGED, 0);
    };
    if held.receiver != SocketRecord::NONE {
        release_slot(held.receiver, held.slot);
    }
    if held.local != SocketRecord::NONE {
        release_slot(LOCAL_ROW, held.local);
    }
    (
        result::DONE,
        u64::from(held.receiver) | (u64::from(held.slot) << 32),
    )
}

/// Sets slot (`receiver`, `slot`)'s flow count to `value` when its word is
/// still `expected` (`srap_common::occupancy::set_flows`).
#[inline(always)]
fn set_flows(receiver: u32, slot: u32, expected: u64, value: u64) -> (u32, u64) {
    let Some(row) = MapRow::of(receiver) else {
        return (result::MISSING, 0);
    };
    if row.slot_word(slot).is_none() {
        return (result::MISSING, 0);
    }
    let flows = (value & slot_word::FLOWS) as u32;
    if occupancy::set_flows(&row, slot, expected, flows) {
        (result::DONE, expected)
    } else {
        (result::CHANGED, expected)
    }
}
