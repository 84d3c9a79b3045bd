//! Who holds a tuple: the lookup a bind makes before it takes a port that
//! another socket uses, by the connecting socket's protocol. The kernel's
//! `connect()` refuses a tuple in use, and a bind that succeeds onto one
//! would make it fail, so the exact tuple is looked up first: TCP's with
//! the kernel's TCP lookup (`bpf_skc_lookup_tcp`, which finds listeners
//! and TIME_WAIT too), UDP's with its UDP lookup (`bpf_sk_lookup_udp`,
//! which finds a socket bound to the port, connected or not; UDP has no
//! TIME_WAIT).
//!
//! The protocol is a const generic (its kernel number), as it is for every
//! step after classification: each steered protocol's bind path is its own,
//! with its own lookup, so the kernel's verifier walks no dispatch inside
//! the port-attempt loops, and a protocol not steered leaves no code.

use core::ptr::read_volatile;

use aya_ebpf::{
    bindings::{
        bpf_sock, bpf_sock_tuple, bpf_sock_tuple__bindgen_ty_1__bindgen_ty_1 as Tuple4,
        bpf_sock_tuple__bindgen_ty_1__bindgen_ty_2 as Tuple6,
    },
    helpers::generated::{
        bpf_probe_read_kernel, bpf_sk_lookup_udp, bpf_sk_release, bpf_skc_lookup_tcp,
        bpf_skc_to_tcp_timewait_sock,
    },
    programs::SockAddrContext,
};
use srap_common::{binder::TableRow, protocol::Protocol};

use super::{config, context::Peer, maps::SRAP_TUPLE_SCRATCH};

/// The const generic of TCP's steps.
pub(super) const TCP: u8 = Protocol::Tcp.as_u8();
/// The const generic of UDP's steps.
pub(super) const UDP: u8 = Protocol::Udp.as_u8();

/// `bpf_sock.state` of a TCP socket in TIME_WAIT and of a listening one.
const TCP_TIME_WAIT: u32 = 6;
const TCP_LISTEN: u32 = 10;
/// `bpf_sock.state` of a connected UDP socket (the kernel marks it
/// `TCP_ESTABLISHED`; an unconnected one is `TCP_CLOSE`).
const UDP_CONNECTED: u32 = 1;

/// `BPF_F_CURRENT_NETNS`: look the tuple up in the socket's own namespace.
const CURRENT_NETNS: u64 = u64::MAX;

/// Who, if anyone, has the tuple (source address, `port`, receiver).
pub(super) enum Holder {
    Nobody,
    /// A TCP TIME_WAIT socket with a TCP timestamp: the `connect()` of a
    /// socket bound to the port takes the tuple over.
    TimeWait,
    /// A socket with this exact tuple: established, connecting, a request,
    /// TIME_WAIT without a timestamp, or a UDP socket connected to it.
    Tuple,
    /// A socket that receives everything to the port: a TCP listener (the
    /// lookup falls back to listeners), a UDP socket bound and unconnected.
    Listener,
}

/// Who holds the tuple of a `PROTOCOL` socket binding `port` toward
/// `peer` from `table`'s source address: the lookup of that protocol,
/// chosen at compile time.
#[inline(always)]
pub(super) fn tuple_holder<const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    table: &TableRow,
    peer: &Peer,
    port: u16,
) -> Holder {
    match const { Protocol::known(PROTOCOL) } {
        Protocol::Tcp => tcp_tuple_holder(ctx, table, peer, port),
        Protocol::Udp => udp_tuple_holder(ctx, table, peer, port),
    }
}

/// The tuple as the kernel's lookups take it, in this CPU's scratch row,
/// and its size (`None`: no scratch row). The lookup is the receive
/// path's: "source" is the remote end.
#[inline(always)]
fn lookup_tuple(table: &TableRow, peer: &Peer, port: u16) -> Option<(*mut bpf_sock_tuple, u32)> {
    let tuple = SRAP_TUPLE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: `tuple` is this CPU's scratch row, valid for this run; each
    // branch writes every byte the lookup reads (the size it passes).
    let size = unsafe {
        let fields = &mut (*tuple).__bindgen_anon_1;
        if peer.v4 {
            fields.ipv4.saddr = peer.addr[0];
            fields.ipv4.daddr = table.src_addr[0];
            fields.ipv4.sport = peer.port.to_be();
            fields.ipv4.dport = port.to_be();
            size_of::<Tuple4>()
        } else {
            fields.ipv6.saddr = peer.addr;
            fields.ipv6.daddr = table.src_addr6;
            fields.ipv6.sport = peer.port.to_be();
            fields.ipv6.dport = port.to_be();
            size_of::<Tuple6>()
        }
    };
    Some((tuple, size as u32))
}

/// Looks the exact TCP tuple up as the kernel's `connect()` will check it.
/// Not inlined, so its frame stays out of the callers' (the kernel allows
/// 512 bytes of stack along a call chain).
#[inline(never)]
fn tcp_tuple_holder(ctx: &SockAddrContext, table: &TableRow, peer: &Peer, port: u16) -> Holder {
    let Some((tuple, size)) = lookup_tuple(table, peer, port) else {
        // Cannot look: the port counts as taken, the next one is tried.
        return Holder::Tuple;
    };
    // SAFETY: a tuple of the size given, in a map value.
    let sk = unsafe { bpf_skc_lookup_tcp(ctx.sock_addr.cast(), tuple, size, CURRENT_NETNS, 0) };
    if sk.is_null() {
        return Holder::Nobody;
    }
    // SAFETY: a socket the lookup returned, released once read.
    let state = unsafe { read_volatile(&raw const (*sk).state) };
    let holder = match state {
        TCP_LISTEN => Holder::Listener,
        TCP_TIME_WAIT if time_wait_has_timestamp(sk) => Holder::TimeWait,
        _ => Holder::Tuple,
    };
    // SAFETY: as above.
    unsafe { bpf_sk_release(sk.cast()) };
    holder
}

/// Looks the exact UDP tuple up: a socket connected to it holds it, and
/// one bound to the port unconnected would share its datagrams. Not
/// inlined, as [`tcp_tuple_holder`].
#[inline(never)]
fn udp_tuple_holder(ctx: &SockAddrContext, table: &TableRow, peer: &Peer, port: u16) -> Holder {
    let Some((tuple, size)) = lookup_tuple(table, peer, port) else {
        return Holder::Tuple;
    };
    // SAFETY: a tuple of the size given, in a map value.
    let sk = unsafe { bpf_sk_lookup_udp(ctx.sock_addr.cast(), tuple, size, CURRENT_NETNS, 0) };
    if sk.is_null() {
        return Holder::Nobody;
    }
    // SAFETY: a socket the lookup returned, released once read.
    let state = unsafe { read_volatile(&raw const (*sk).state) };
    let holder = match state {
        UDP_CONNECTED => Holder::Tuple,
        _ => Holder::Listener,
    };
    // SAFETY: as above.
    unsafe { bpf_sk_release(sk.cast()) };
    holder
}

/// Whether a TIME_WAIT socket's connection carried TCP timestamps
/// (`tw_ts_recent_stamp` non-zero, read at the offset the agent found in
/// the kernel's BTF): then the kernel lets a bound socket reuse its tuple.
#[inline(always)]
fn time_wait_has_timestamp(sk: *mut bpf_sock) -> bool {
    let offset = config::tw_stamp_offset();
    if offset == 0 {
        return false;
    }
    // SAFETY: `sk` is a live socket the caller holds a reference to.
    let tw = unsafe { bpf_skc_to_tcp_timewait_sock(sk.cast()) };
    if tw.is_null() {
        return false;
    }
    let mut stamp = 0u32;
    // SAFETY: a kernel read of four bytes inside the TIME_WAIT socket
    // (the offset is its field's, from BTF); a failed read leaves zero.
    let read = unsafe {
        bpf_probe_read_kernel(
            core::ptr::from_mut(&mut stamp).cast(),
            size_of::<u32>() as u32,
            tw.cast::<u8>().wrapping_add(offset as usize).cast(),
        )
    };
    read == 0 && stamp != 0
}
