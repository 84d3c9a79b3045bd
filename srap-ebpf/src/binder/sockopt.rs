//! `SOL_SOCKET` options of the connecting socket, read and set through the
//! kernel's `bpf_getsockopt`/`bpf_setsockopt` (the binder shares ports by
//! `SO_REUSEADDR` and paces by `SO_MAX_PACING_RATE`).

use aya_ebpf::{
    helpers::{bpf_getsockopt, bpf_setsockopt},
    programs::SockAddrContext,
};

pub(super) const SOL_SOCKET: i32 = 1;

pub(super) const SO_REUSEADDR: i32 = 2;

pub(super) const SO_REUSEPORT: i32 = 15;

pub(super) const SO_MAX_PACING_RATE: i32 = 47;

/// A `SOL_SOCKET` option of the connecting socket (`None`: unreadable).
#[inline(always)]
pub(super) fn socket_option(ctx: &SockAddrContext, name: i32) -> Option<u32> {
    let mut value = 0u32;
    // SAFETY: a valid u32 of the size given.
    let read = unsafe {
        bpf_getsockopt(
            ctx.sock_addr.cast(),
            SOL_SOCKET,
            name,
            core::ptr::from_mut(&mut value).cast(),
            size_of::<u32>() as i32,
        )
    };
    (read == 0).then_some(value)
}

/// Sets a `SOL_SOCKET` option of the connecting socket.
#[inline(always)]
pub(super) fn set_socket_option(ctx: &SockAddrContext, name: i32, value: u32) -> i64 {
    let mut value = value;
    // SAFETY: a valid u32 of the size given.
    unsafe {
        bpf_setsockopt(
            ctx.sock_addr.cast(),
            SOL_SOCKET,
            name,
            core::ptr::from_mut(&mut value).cast(),
            size_of::<u32>() as i32,
        )
    }
}
