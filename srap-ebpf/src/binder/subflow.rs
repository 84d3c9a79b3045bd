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
//! IPv4 only: the MPTCP socket's IPv4 remote address sits at the start of
//! its `sock_common`, a layout the kernel has kept since long before MPTCP
//! (`skc_daddr` at byte 0, `skc_dport` at byte 12); its IPv6 one sits past
//! fields whose size depends on the kernel's configuration. An IPv6
//! subflow, or one toward an announced address, keeps the kernel's port
//! (`port_at_bind`).

use aya_ebpf::{
    helpers::generated::{bpf_probe_read_kernel, bpf_skc_to_mptcp_sock},
    programs::SockAddrContext,
};
use srap_common::{binder::outcome, family::Family};

use super::{
    classify::classify,
    connect::bind_steered,
    context::{Connecting, Peer, field, sock_of},
};

/// Steers the port of an IPv4 MPTCP subflow the kernel binds with port 0
/// after its connection is established; true when it chose one (and
/// recorded the socket), false when the bind is left as it was: not such a
/// subflow, a destination or source the plan does not steer, or no port.
#[inline(always)]
pub(super) fn steer_at_bind(ctx: &SockAddrContext) -> bool {
    let Some(binding) = subflow_binding(ctx) else {
        return false;
    };
    let peer = binding.peer;
    let Ok(dest) = classify(ctx, &binding) else {
        return false;
    };
    let result = bind_steered::<true>(ctx, Family::Inet, &dest, peer, false);
    result == outcome::STEERED || result == outcome::RETRIED
}

/// The bind of a further subflow, as a connect toward its connection's
/// destination from the address it binds: `None` for any other bind (a
/// port asked for, no address, not an MPTCP subflow, or the first subflow
/// before its connection has a remote end).
#[inline(always)]
fn subflow_binding(ctx: &SockAddrContext) -> Option<Connecting> {
    let sa = ctx.sock_addr;
    // SAFETY: field addresses within the kernel's bpf_sock_addr.
    let (sock_type, protocol, user_port, user_ip4) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).protocol),
            field(&raw const (*sa).user_port),
            field(&raw const (*sa).user_ip4),
        )
    };
    if user_port != 0 || user_ip4 == 0 {
        return None;
    }
    let peer = connection_remote(ctx)?;
    Some(Connecting {
        sock_type,
        protocol,
        peer,
        src: [user_ip4, 0, 0, 0],
        sport: 0,
    })
}

/// The IPv4 remote end of the MPTCP connection the bound socket is a
/// subflow of, `None` when it is none or has none yet. Not inlined: its
/// buffer stays out of the hook's frame.
#[inline(never)]
fn connection_remote(ctx: &SockAddrContext) -> Option<Peer> {
    // SAFETY: the context's socket, which the helper checks is a subflow.
    let msk = unsafe { bpf_skc_to_mptcp_sock(sock_of(ctx).cast()) };
    if msk.is_null() {
        return None;
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
    if read != 0 || head[0] == 0 || port == 0 {
        return None;
    }
    Some(Peer {
        addr: [head[0], 0, 0, 0],
        port,
        v4: true,
    })
}
