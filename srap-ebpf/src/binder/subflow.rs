//! A further subflow of an MPTCP connection, steered at its bind.
//!
//! The kernel's path manager opens each subflow after the first from a
//! worker: it binds the new socket to the endpoint's address with port 0
//! (`kernel_bind`), which runs the bind hook and picks the port there, and
//! only then connects it, when `bpf_bind()` can no longer change the port.
//! At that bind the subflow's own destination is not set yet, but its
//! MPTCP socket's is: the connection's remote address and port, where the
//! path manager sends every subflow unless the peer announced another
//! address (`ADD_ADDR`). So the bind hook steers toward that destination,
//! through the connect's own steps ([`super::classify::classify`],
//! [`super::connect::bind_steered`]: the same tables for the endpoint's
//! address, the same claim, the same record), and takes the port by
//! rewriting the one the `bind()` asks for. The subflow's connect then
//! finds its record and counts `subflow_steered`; its TCP close releases
//! it ([`super::sock_ops`]).
//!
//! Its destination comes from the path manager's own call when the agent
//! could trace it ([`super::path_manager`]: exactly the address it
//! connects the subflow to, of either family, whichever path manager
//! chose it). Without the trace (the kernel refused the tracing programs:
//! the agent's log names why; counted `subflow_untraced`) it is read from
//! the subflow's MPTCP socket as the in-kernel path manager chooses it
//! ([`connection_dest`]): a subflow bound to an address (an endpoint's,
//! `subflow`) goes to the connection's remote address, one bound to none
//! to the address the peer announced last (`ADD_ADDR`: the worker lets
//! the route pick the source). A subflow bound to no address is steered
//! with the plan's entry for an unbound source, as a connect without
//! `bind()` is; a destination the plan does not list is left to the
//! kernel (`subflow_unplanned`, then `miss` at its connect).

use aya_ebpf::{helpers::generated::bpf_skc_to_mptcp_sock, programs::SockAddrContext};
use srap_common::{
    binder::{SubflowDest, event, outcome},
    family::Family,
};

use super::{
    classify::classify,
    connect::bind_steered,
    context::{Connecting, Peer, V4_MAPPED_WORD, field, is_subflow, sock_of},
    maps::count,
    path_manager::{AF_INET, AF_INET6, SKC_DPORT, known_layout, read_addr_info, traced_dest},
    tuple::TCP,
};
use crate::kernel_memory::read_at;

/// Steers the port of an MPTCP subflow the kernel binds with port 0
/// after its connection is established; true when it chose one (and
/// recorded the socket), false when the bind is left as it was: not such a
/// subflow, a destination or source the plan does not steer, or no port.
/// `INET6`: the bind6 hook's.
#[inline(always)]
pub(super) fn steer_at_bind<const INET6: bool>(ctx: &SockAddrContext) -> bool {
    let Some(binding) = subflow_binding::<INET6>(ctx) else {
        return false;
    };
    let peer = binding.peer;
    let dest = match classify(ctx, &binding) {
        Ok((_, dest)) => dest,
        Err(verdict) => {
            if verdict == outcome::MISS || verdict == outcome::SOURCE_UNPLANNED {
                count(event::SUBFLOW_UNPLANNED);
            }
            return false;
        }
    };
    let family = if INET6 { Family::Inet6 } else { Family::Inet };
    // A subflow is a TCP socket of its MPTCP connection.
    let result = bind_steered::<true, TCP>(ctx, family, &dest, peer, false);
    result == outcome::STEERED || result == outcome::RETRIED
}

/// The bind of a further subflow, as a connect toward its destination
/// from the address it binds: `None` for any other bind (a port asked
/// for, not an MPTCP subflow, or the first subflow before its connection
/// has a remote end) and for one whose destination is unknown.
#[inline(always)]
fn subflow_binding<const INET6: bool>(ctx: &SockAddrContext) -> Option<Connecting> {
    let sa = ctx.sock_addr;
    // SAFETY: field addresses within the kernel's bpf_sock_addr.
    let (sock_type, protocol, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).protocol),
            field(&raw const (*sa).user_port),
        )
    };
    if user_port != 0 || !is_subflow(ctx) {
        return None;
    }
    let src = bound_source::<INET6>(ctx);
    let mut dest = SubflowDest::default();
    let found = match traced_dest() {
        Some(traced) => {
            count(event::SUBFLOW_TRACED);
            dest = traced;
            true
        }
        None => connection_dest::<INET6>(ctx, src == [0; 4], &mut dest),
    };
    // Scalars, not a `Peer` from each branch: a copy of a struct with a
    // padding byte lets the compiler store any register there, a pointer
    // too, which the kernel's verifier refuses.
    let v4 = dest.family == AF_INET;
    if !found || dest.port == 0 || !usable::<INET6>(v4, &src) {
        return None;
    }
    Some(Connecting {
        sock_type,
        protocol,
        peer: Peer {
            addr: dest.addr,
            port: dest.port,
            v4,
        },
        src: key_source(&src),
        sport: 0,
    })
}

/// The address the bind asks for, as `user_ip4` or `user_ip6` hold it
/// (zero: none, the route chooses at connect).
#[inline(always)]
fn bound_source<const INET6: bool>(ctx: &SockAddrContext) -> [u32; 4] {
    let sa = ctx.sock_addr;
    // SAFETY: field addresses within the kernel's bpf_sock_addr.
    unsafe {
        if INET6 {
            [
                field(&raw const (*sa).user_ip6[0]),
                field(&raw const (*sa).user_ip6[1]),
                field(&raw const (*sa).user_ip6[2]),
                field(&raw const (*sa).user_ip6[3]),
            ]
        } else {
            [field(&raw const (*sa).user_ip4), 0, 0, 0]
        }
    }
}

/// Whether an IPv6 bind's address is v4-mapped (`::ffff:a.b.c.d`).
#[inline(always)]
fn mapped(src: &[u32; 4]) -> bool {
    src[0] == 0 && src[1] == 0 && src[2] == V4_MAPPED_WORD
}

/// The bound address in the plan key's form: a v4-mapped one as its IPv4
/// word.
#[inline(always)]
fn key_source(src: &[u32; 4]) -> [u32; 4] {
    if mapped(src) { [src[3], 0, 0, 0] } else { *src }
}

/// Whether a subflow's destination (`v4`: an IPv4 one) can be steered from
/// the bind: not an IPv6 destination of an IPv4 socket (the kernel
/// connects none such). An IPv4 destination of an IPv6 socket is steered
/// with the IPv4 plan, as a dual-stack connect is, when the bind asks for
/// a v4-mapped address or none.
#[inline(always)]
fn usable<const INET6: bool>(v4: bool, src: &[u32; 4]) -> bool {
    if !INET6 {
        return v4;
    }
    !v4 || mapped(src) || *src == [0; 4]
}

/// The subflow's destination as the kernel's in-kernel path manager
/// chooses it, read from its MPTCP socket when the path manager's call is
/// not traced: toward the connection's remote address when the subflow
/// is bound to an address (an endpoint's: `subflow`), toward the address
/// the peer announced last when it is bound to none (the worker then
/// lets the route pick the source: `ADD_ADDR`). False when it is not a
/// subflow, a read fails, or the agent found no field it needs. The IPv4
/// remote address needs none (`sock_common`'s head, `skc_daddr` at byte
/// 0 and `skc_dport` at 12, a layout older than MPTCP); the IPv6 one and
/// the announced one are read at the offsets the agent found in the
/// kernel's BTF. Counted `subflow_untraced` once found (an application's
/// own `bind()` of an MPTCP socket reaches here too, before it has a
/// destination). Not inlined: its reads stay out of the hook's frame, and
/// the count's branch out of the hook's walk.
#[inline(never)]
fn connection_dest<const INET6: bool>(
    ctx: &SockAddrContext,
    unbound: bool,
    dest: &mut SubflowDest,
) -> bool {
    let found = read_connection_dest::<INET6>(ctx, unbound, dest);
    if found {
        count(event::SUBFLOW_UNTRACED);
    }
    found
}

/// [`connection_dest`]'s reads.
#[inline(always)]
fn read_connection_dest<const INET6: bool>(
    ctx: &SockAddrContext,
    unbound: bool,
    dest: &mut SubflowDest,
) -> bool {
    // SAFETY: the context's socket, which the helper checks is a subflow.
    let msk: *const u8 = unsafe { bpf_skc_to_mptcp_sock(sock_of(ctx).cast()) }.cast();
    if msk.is_null() {
        return false;
    }
    if !unbound && !INET6 {
        let (Some(addr), Some(port)) = (read_at::<u32>(msk, 0), read_at::<u16>(msk, SKC_DPORT))
        else {
            return false;
        };
        dest.family = AF_INET;
        dest.addr = [addr, 0, 0, 0];
        dest.port = u16::from_be(port);
        return addr != 0;
    }
    let Some(layout) = known_layout() else {
        return false;
    };
    if unbound {
        let info = msk.wrapping_add(layout.pm_remote as usize);
        return read_addr_info(layout, info, msk, dest);
    }
    let (Some(addr), Some(port)) = (
        read_at::<[u32; 4]>(msk, layout.v6_daddr),
        read_at::<u16>(msk, SKC_DPORT),
    ) else {
        return false;
    };
    dest.family = AF_INET6;
    dest.addr = addr;
    dest.port = u16::from_be(port);
    addr != [0; 4]
}
