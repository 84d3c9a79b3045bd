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
//! Its destination comes from the path manager's own call
//! ([`super::path_manager`]: the address it connects the subflow to, an
//! address the peer announced included, IPv4 or IPv6), so both bind hooks
//! steer. Without that trace (the kernel refused the tracing programs: the
//! agent's log names why; counted `subflow_untraced`), an IPv4 subflow is
//! steered toward its MPTCP socket's remote address, which sits at the
//! start of its `sock_common` (`skc_daddr` at byte 0, `skc_dport` at byte
//! 12, a layout the kernel has kept since long before MPTCP), and an IPv6
//! one keeps the kernel's port (`port_at_bind`): its MPTCP socket's IPv6
//! address sits past fields whose size depends on the kernel's
//! configuration.
//!
//! A subflow the path manager binds to no address (an announced address
//! with no local endpoint: the route chooses the source at connect) is
//! steered with the plan's entry for an unbound source, as a connect
//! without `bind()` is.

use aya_ebpf::{
    helpers::generated::{bpf_probe_read_kernel, bpf_skc_to_mptcp_sock},
    programs::SockAddrContext,
};
use srap_common::{
    binder::{event, outcome},
    family::Family,
};

use super::{
    classify::classify,
    connect::bind_steered,
    context::{Connecting, Peer, V4_MAPPED_WORD, field, sock_of},
    maps::count,
    path_manager::traced_dest,
};

/// `AF_INET`, as `srap_common::binder::SubflowDest::family` holds it.
const AF_INET: u16 = 2;

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
        Ok(dest) => dest,
        Err(verdict) => {
            if verdict == outcome::MISS || verdict == outcome::SOURCE_UNPLANNED {
                count(event::SUBFLOW_UNPLANNED);
            }
            return false;
        }
    };
    let family = if INET6 { Family::Inet6 } else { Family::Inet };
    let result = bind_steered::<true>(ctx, family, &dest, peer, false);
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
    // Scalars, not a `Peer` from each branch: a copy of a struct with a
    // padding byte lets the compiler store any register there, a pointer
    // too, which the kernel's verifier refuses.
    let (addr, port, v4) = match traced_dest() {
        Some(traced) => {
            count(event::SUBFLOW_TRACED);
            let v4 = traced.family == AF_INET;
            if !traced_usable::<INET6>(v4, &src) {
                return None;
            }
            (traced.addr, traced.port, v4)
        }
        None => {
            count(event::SUBFLOW_UNTRACED);
            // Without the trace, the IPv4 address a subflow binds says it
            // is one the path manager opens from an endpoint.
            if INET6 || src[0] == 0 {
                return None;
            }
            let remote = connection_remote(ctx);
            let port = (remote >> 32) as u16;
            if port == 0 {
                return None;
            }
            ([remote as u32, 0, 0, 0], port, true)
        }
    };
    Some(Connecting {
        sock_type,
        protocol,
        peer: Peer { addr, port, v4 },
        src: key_source(&src),
        sport: 0,
    })
}

/// Whether the bound socket is an MPTCP subflow of a connection
/// (`bpf_skc_to_mptcp_sock` finds its MPTCP socket).
#[inline(always)]
fn is_subflow(ctx: &SockAddrContext) -> bool {
    // SAFETY: the context's socket; the helper checks what it is.
    !unsafe { bpf_skc_to_mptcp_sock(sock_of(ctx).cast()) }.is_null()
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

/// Whether a traced destination (`v4`: an IPv4 one) can be steered from
/// the bind: not an IPv6 destination of an IPv4 socket (the kernel
/// connects none such). An IPv4 destination of an IPv6 socket is steered
/// with the IPv4 plan, as a dual-stack connect is, when the bind asks for
/// a v4-mapped address or none.
#[inline(always)]
fn traced_usable<const INET6: bool>(v4: bool, src: &[u32; 4]) -> bool {
    if !INET6 {
        return v4;
    }
    !v4 || mapped(src) || *src == [0; 4]
}

/// The IPv4 remote end of the MPTCP connection the bound socket is a
/// subflow of, as `address | port << 32` (the address in network byte
/// order, the port in host order; 0 when it is none or has none yet): the
/// fallback when the path manager's call is not traced. Not inlined: its
/// buffer stays out of the hook's frame; a scalar, not an `Option<Peer>`:
/// the kernel refuses the BTF the compiler writes for that `Option` (a
/// union member past byte 0) once it describes a subprogram's return.
#[inline(never)]
fn connection_remote(ctx: &SockAddrContext) -> u64 {
    // SAFETY: the context's socket, which the helper checks is a subflow.
    let msk = unsafe { bpf_skc_to_mptcp_sock(sock_of(ctx).cast()) };
    if msk.is_null() {
        return 0;
    }
    // `sock_common`'s first 16 bytes: skc_daddr, skc_rcv_saddr, skc_hash,
    // skc_dport and skc_num.
    let mut head = [0u32; 4];
    // SAFETY: a kernel read of 16 bytes at the start of the MPTCP socket
    // (its `sock_common`) into a buffer of that size; a failed read
    // returns non-zero.
    let read = unsafe {
        bpf_probe_read_kernel(
            head.as_mut_ptr().cast(),
            size_of::<[u32; 4]>() as u32,
            msk.cast(),
        )
    };
    // skc_dport in network byte order, the word's low half on this
    // little-endian target.
    let port = u16::from_be(head[3] as u16);
    if read != 0 || head[0] == 0 {
        return 0;
    }
    u64::from(head[0]) | (u64::from(port) << 32)
}
