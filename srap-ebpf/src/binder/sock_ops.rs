//! `sock_ops` on the steered cgroup (`srap_tcp_close`): frees what a
//! socket claimed or marked when its TCP connection closes, for the
//! sockets [`super::sock_release`] never sees. The kernel runs the release
//! hook for user sockets only, and every subflow of an MPTCP connection,
//! the first included, is a kernel socket: its claim (the first subflow's
//! connect is steered) and its bind mark (the path manager binds each
//! further subflow with port 0) stayed counted until the agent's audit
//! repaired them. Subflows are put in their MPTCP socket's cgroup, so this
//! program sees them.
//!
//! A socket the spread step moved to another address of its receiver
//! (`--receiver-nics spread`) also asks, at its connect, for retransmit
//! timeouts: one whose SYN is still unanswered at the first marks that
//! address failing ([`super::spread`]).
//!
//! No callback per packet: the kernel makes its few callbacks per
//! connection whatever a program asks (five for a plain TCP connect; this
//! one returns at once from all but one). As a socket's SYN leaves
//! (`BPF_SOCK_OPS_TCP_CONNECT_CB`, after the connect hook made its record)
//! an MPTCP subflow with a record asks for state callbacks too (one per TCP
//! state change), and at its `TCP_CLOSE` it is released through the
//! release hook's own step ([`super::record::release`]), which frees a
//! socket once whichever hook comes first. A plain TCP socket asks for
//! none: it is a user socket, whose release hook frees it, and its two
//! state callbacks (established, closed) cost about a third of this
//! program's time per connect. Only subflows are kernel sockets in a
//! steered cgroup: the kernel puts a kernel socket in the cgroup of the
//! task that creates it, a worker's (the root) for the kernel's own
//! clients, except for the subflows MPTCP moves into their connection's.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{
        BPF_SOCK_OPS_RTO_CB, BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG,
        BPF_SOCK_OPS_TCP_CONNECT_CB, BPF_TCP_CLOSE,
    },
    helpers::{bpf_get_socket_cookie, generated::bpf_skc_to_mptcp_sock},
    macros::sock_ops,
    programs::SockOpsContext,
};
use srap_common::binder::event;

use super::{
    record::{recalled, release},
    spread::{syn_timed_out, watch_syn},
};

/// `sock_ops` return value: carry on (the program changes no reply).
const SOCK_OPS_OK: u32 = 1;

/// Watches the steered sockets' connections until they close, and
/// releases them there.
#[sock_ops]
pub fn srap_tcp_close(ctx: SockOpsContext) -> u32 {
    let op = ctx.op();
    if op == BPF_SOCK_OPS_TCP_CONNECT_CB {
        watch_until_closed(&ctx);
        watch_syn(&ctx, cookie_of(&ctx));
    } else if op == BPF_SOCK_OPS_RTO_CB {
        syn_timed_out(&ctx, cookie_of(&ctx));
    } else if op == BPF_SOCK_OPS_STATE_CB && ctx.arg(1) == BPF_TCP_CLOSE {
        release_at_close(&ctx);
    }
    SOCK_OPS_OK
}

/// A connecting MPTCP subflow with a record (a claim or a bind mark) asks
/// for state callbacks, keeping the flags another program asked for. A
/// plain TCP socket, or one without a record, is never called back.
#[inline(always)]
fn watch_until_closed(ctx: &SockOpsContext) {
    if !is_subflow(ctx) || recalled(cookie_of(ctx)).is_none() {
        return;
    }
    // Refused only for a socket that is not a full one, which a
    // connecting socket is: then the audit repairs it, as it does any
    // record a close left behind.
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
}

/// The connection closed: release the socket unless its release hook did.
#[inline(always)]
fn release_at_close(ctx: &SockOpsContext) {
    release(cookie_of(ctx), event::RELEASED_AT_CLOSE);
}

/// The socket's cookie: its key in `SRAP_SOCKETS`, the same the connect
/// and bind hooks read.
#[inline(always)]
fn cookie_of(ctx: &SockOpsContext) -> u64 {
    // SAFETY: the context pointer is the kernel's `bpf_sock_ops`.
    unsafe { bpf_get_socket_cookie(ctx.ops.cast::<c_void>()) }
}

/// Whether the socket is a subflow of an MPTCP connection (the kernel's
/// own test, `bpf_skc_to_mptcp_sock`: one helper call, no map).
#[inline(always)]
fn is_subflow(ctx: &SockOpsContext) -> bool {
    // SAFETY: the context pointer is the kernel's `bpf_sock_ops`; its
    // `sk` is a full socket or null, as the helper accepts.
    let sk = unsafe { (*ctx.ops).__bindgen_anon_2.sk };
    if sk.is_null() {
        return false;
    }
    // SAFETY: a socket pointer from the context, checked by the helper.
    !unsafe { bpf_skc_to_mptcp_sock(sk.cast()) }.is_null()
}
