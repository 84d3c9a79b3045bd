//! Record the socket: the socket table holds each steered socket's record of the slots it
//! claimed, so that closing it releases exactly those.
//!
//! One record per socket, whatever path brought it to `connect()`. A
//! socket its application bound with port 0 first (its own address,
//! `IP_BIND_ADDRESS_NO_PORT`) has a record from the bind hook
//! ([`SocketRecord::BOUND_AT_BIND`]); a steered connect takes it out before
//! it claims ([`drop_bind_record`]) and makes the socket's one record
//! ([`hold`]). Two records for one socket leaked: closing forgot the first
//! it found, and the claim in the other stayed counted for good.

use core::ptr::{addr_of_mut, read_volatile};

use aya_ebpf::programs::SockAddrContext;
use srap_common::binder::{
    LOCAL_ROW, SOCKET_PROBES, SocketRecord, SocketRow, socket_home, steered_protocol,
};

use super::{
    claim::{exchange, release_slot},
    config,
    context::{cookie_of, field, is_subflow},
    maps::{SRAP_SOCKETS, count},
    sockopt::{SO_MAX_PACING_RATE, set_socket_option},
};

/// The row of `cookie`'s `probe`-th place in the socket table of
/// `mask + 1` rows ([`socket_mask`]).
#[inline(always)]
fn socket_row(cookie: u64, probe: u32, mask: u32) -> Option<*mut SocketRow> {
    let index = socket_home(cookie, mask).wrapping_add(probe) & mask;
    SRAP_SOCKETS.get_ptr_mut(index)
}

/// The socket table's rows less one, as the agent sized it
/// (`--max-sockets`); 0 before the agent wrote its config (one row: a
/// record then finds its row taken sooner, nothing worse).
#[inline(always)]
fn socket_mask() -> u32 {
    config::socket_mask()
}

/// Records `held` for the socket `cookie`: the first free row of its places,
/// taken with one compare-and-exchange. False when all are taken.
#[inline(always)]
pub(crate) fn remember(cookie: u64, held: SocketRecord) -> bool {
    let mask = socket_mask();
    for probe in 0..SOCKET_PROBES {
        let Some(row) = socket_row(cookie, probe, mask) else {
            return false;
        };
        // SAFETY: valid, aligned map memory.
        let cookie_word = unsafe { addr_of_mut!((*row).cookie) };
        if exchange(cookie_word, 0, cookie) {
            // SAFETY: the row is this socket's now; only its own hooks
            // touch it until it is freed.
            unsafe { (*row).held = held };
            return true;
        }
    }
    false
}

/// The record of socket `cookie`, if any.
#[inline(always)]
pub(super) fn recalled(cookie: u64) -> Option<(*mut SocketRow, SocketRecord)> {
    let mask = socket_mask();
    for probe in 0..SOCKET_PROBES {
        let row = socket_row(cookie, probe, mask)?;
        // SAFETY: valid map memory.
        if unsafe { read_volatile(&raw const (*row).cookie) } == cookie {
            // SAFETY: as above.
            return Some((row, unsafe { read_volatile(&raw const (*row).held) }));
        }
    }
    None
}

#[inline(never)]
pub(super) fn drop_bind_record(ctx: &SockAddrContext) {
    let _ = forget(cookie_of(ctx));
}

/// Takes the record of socket `cookie` out of the table.
#[inline(always)]
pub(crate) fn forget(cookie: u64) -> Option<SocketRecord> {
    let (row, held) = recalled(cookie)?;
    // SAFETY: valid, aligned map memory.
    exchange(unsafe { addr_of_mut!((*row).cookie) }, cookie, 0).then_some(held)
}

/// Records a socket of a steered protocol (TCP) the application binds
/// with port 0: the kernel chooses its port now, before any destination is
/// known, so its connect is counted as [`outcome::PORT_AT_BIND`], not as
/// an application's port.
#[inline(always)]
pub(super) fn note_port_zero_bind(ctx: &SockAddrContext) {
    let sa = ctx.sock_addr;
    // SAFETY: field addresses within the context.
    let (sock_type, protocol, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).protocol),
            field(&raw const (*sa).user_port),
        )
    };
    if steered_protocol(sock_type, protocol).is_err() || user_port != 0 {
        return;
    }
    // Under `--mptcp off` no program sees a subflow close (a kernel socket:
    // no release hook), so the path manager's binds are not recorded.
    if !config::steers_mptcp() && is_subflow(ctx) {
        return;
    }
    let _ = remember(cookie_of(ctx), SocketRecord::BOUND_AT_BIND);
}

/// Remembers the socket's slots so closing it frees them; with the map
/// full, frees them now (the flow goes uncounted rather than leaked).
pub(super) fn hold(ctx: &SockAddrContext, held: SocketRecord) {
    if !remember(cookie_of(ctx), held) {
        release_slot(held.receiver, held.slot);
        if held.local != SocketRecord::NONE {
            release_slot(LOCAL_ROW, held.local);
        }
    }
}

/// Applies the configured pacing rate, if any; failure only loses pacing.
pub(super) fn pace(ctx: &SockAddrContext) {
    let rate = config::pacing_rate();
    if rate == 0 {
        return;
    }
    // The kernel takes an int here: rates above 4 GB/s (34 Gbit/s) saturate.
    let rate = rate.min(u64::from(u32::MAX)) as u32;
    let _ = set_socket_option(ctx, SO_MAX_PACING_RATE, rate);
}

/// Frees the slots of socket `cookie` and forgets it, once: of the hooks
/// that see one socket close (its release hook, its TCP close), only the
/// first finds its record ([`forget`] takes it out with one
/// compare-and-exchange), the others find none. A receiver slot freed
/// counts `released`, the event of the hook that freed it
/// (`event::RELEASED`, `event::RELEASED_AT_CLOSE`).
#[inline(always)]
pub(super) fn release(cookie: u64, released: u32) {
    let Some(held) = forget(cookie) else {
        return;
    };
    if held.receiver != SocketRecord::NONE {
        release_slot(held.receiver, held.slot);
        count(released);
    }
    if held.local != SocketRecord::NONE {
        release_slot(LOCAL_ROW, held.local);
    }
}
