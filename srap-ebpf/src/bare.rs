//! Bare programs of each hook the receive observer and the binder use: they
//! only let the packet (or socket) through, or, for the connect hook, do
//! the one thing the binder's hook cannot avoid, the kernel's own bind of
//! a port. `cargo xtask bench` runs them next to the real programs in the
//! same run, so each one's cost is reported as what it adds over the hook
//! itself, not over nothing.

use core::ptr::{read_volatile, write_volatile};

use aya_ebpf::{
    bindings::{TC_ACT_OK, xdp_action},
    helpers::bpf_bind,
    macros::{cgroup_sock_addr, classifier, map, sock_ops, xdp},
    maps::Array,
    programs::{SockAddrContext, SockOpsContext, TcContext, XdpContext},
};
use srap_common::binder::{BARE_BIND_PORT_BASE, BARE_BIND_PORTS, bare_bind};

use crate::sockaddr::{EADDRINUSE, SockaddrIn};

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

/// The bare connect hook's rotation ([`bare_bind::TURN`]) and the source
/// address it binds ([`bare_bind::SOURCE`]), which the benchmark writes.
#[map]
static SRAP_BARE_BIND: Array<u32> = Array::with_max_entries(bare_bind::ROWS, 0);

/// Ports the bare connect hook tries before it leaves the connect to the
/// kernel's own port choice.
const BARE_ATTEMPTS: u32 = 4;

/// `connect4` baseline: `bpf_bind()` to the benchmark's source address and
/// the next port of a plain rotation, the kernel's bind that the binder's
/// hook does for every connect it steers (a connect without it binds its
/// port inside `connect()` instead). Always lets the connect go on.
#[cgroup_sock_addr(connect4)]
pub fn srap_bare_connect4(ctx: SockAddrContext) -> i32 {
    let (Some(turn), Some(&source)) = (
        SRAP_BARE_BIND.get_ptr_mut(bare_bind::TURN),
        SRAP_BARE_BIND.get(bare_bind::SOURCE),
    ) else {
        return 1;
    };
    for _ in 0..BARE_ATTEMPTS {
        // SAFETY: valid, aligned map memory. Not atomic: two CPUs that
        // read the same turn try the same port, and one takes the next.
        let n = unsafe { read_volatile(turn) };
        // SAFETY: as above.
        unsafe { write_volatile(turn, n.wrapping_add(1)) };
        let port = BARE_BIND_PORT_BASE + (n % BARE_BIND_PORTS) as u16;
        let mut addr = SockaddrIn::new(source, port);
        // SAFETY: a valid sockaddr_in of the size given.
        let bound = unsafe {
            bpf_bind(
                ctx.sock_addr.cast(),
                core::ptr::from_mut(&mut addr).cast(),
                size_of::<SockaddrIn>() as i32,
            )
        };
        if bound != -EADDRINUSE {
            break;
        }
    }
    1
}
