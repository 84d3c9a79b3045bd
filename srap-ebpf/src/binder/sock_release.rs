//! `cgroup/sock_release`: an application's socket closed. Runs for user
//! sockets only (the kernel's `inet_release` skips its kernel sockets,
//! MPTCP's subflows among them: [`super::sock_ops`] releases those).

use core::ffi::c_void;

use aya_ebpf::{helpers::bpf_get_socket_cookie, macros::cgroup_sock, programs::SockContext};
use srap_common::binder::event;

use super::{record::release, spread::forget_asked};

/// Frees the slots of a steered socket when its application closes it,
/// and forgets it (and the address it asked for, when it was moved).
#[cgroup_sock(sock_release)]
pub fn srap_sock_release(ctx: SockContext) -> i32 {
    let cookie = cookie_of(&ctx);
    release(cookie, event::RELEASED);
    forget_asked(cookie);
    1
}

/// The closing socket's cookie: its key in `SRAP_SOCKETS`.
#[inline(always)]
fn cookie_of(ctx: &SockContext) -> u64 {
    // SAFETY: the context pointer is the kernel's socket.
    unsafe { bpf_get_socket_cookie(ctx.sock.cast::<c_void>()) }
}
