//! Bare programs of each hook the receive observer uses: they only let the packet
//! (or socket) through. `cargo xtask bench` runs them next to the receive observer
//! in the same run, so the observer's cost is reported as what it adds over
//! the hook itself, not over nothing.

use aya_ebpf::{
    bindings::{TC_ACT_OK, xdp_action},
    macros::{classifier, sock_ops, xdp},
    programs::{SockOpsContext, TcContext, XdpContext},
};

/// XDP baseline: `XDP_PASS`.
#[xdp]
pub fn srap_bare_xdp(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// tc baseline: `TC_ACT_OK`.
#[classifier]
pub fn srap_bare_tc(_ctx: TcContext) -> i32 {
    TC_ACT_OK
}

/// `sock_ops` baseline: carry on.
#[sock_ops]
pub fn srap_bare_sock(_ctx: SockOpsContext) -> u32 {
    1
}
