//! The socket receive observer: a `sock_ops` program on the receiver's
//! cgroup that records, per accepted TCP connection, the receive queue and
//! the CPU of the packet that completed the handshake, and the final counts
//! at close. It runs twice per connection and never per packet (no
//! per-packet callback flag is ever set), so it costs the receive CPUs
//! nothing measurable however fast the flow is, at any MTU, without touching
//! the NIC.
//!
//! Why the handshake's last ACK is enough: the passive-established callback
//! runs in the softirq that processed that ACK, on the CPU RSS (and RPS)
//! chose for the 4-tuple, and the kernel has just copied that skb's
//! recorded receive queue into the new socket (`sk_rx_queue_mapping`). Every
//! later packet of the flow hashes the same way.
//!
//! The same hook on a *sender's* steered cgroup (`srap_obs_local`)
//! records the connections it opens: the active-established callback runs
//! in the softirq that processed the SYN-ACK, on the CPU this host's RSS
//! (and RPS) chose for the reverse tuple, after the kernel copied that
//! skb's receive queue into the socket. That is where the flow's reverse
//! packets land: the data of a download, the ACKs of an upload. It also
//! records, as the SYN leaves (`BPF_SOCK_OPS_TCP_CONNECT_CB`, run inside
//! `connect()` on the calling thread), the CPU of the thread that
//! connected: against the CPU that processed the SYN-ACK it says whether
//! the flow's data arrives where its reader ran at connect time. Three
//! callbacks per opened connection, none per packet.
//!
//! TCP only, by the kernel's design: `sock_ops` callbacks are made from the
//! TCP stack (handshake, state changes), so every key it writes is a TCP
//! flow's. A UDP flow's landing would need another hook (the tc or XDP
//! observer sees its packets, but those parse TCP only too).

use core::ptr::read_volatile;

use aya_ebpf::{
    bindings::{
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB,
        BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB,
        BPF_TCP_CLOSE,
    },
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{map, sock_ops},
    maps::LruHashMap,
    programs::SockOpsContext,
};
use srap_common::{
    family::Family,
    observer::{CPU_UNKNOWN, FLOWS_MAX_ENTRIES, FlowKey, SockFlow},
    protocol::Protocol,
};

/// Per-connection landing records, read by user space (`srap_agent::observer`).
#[map]
static SRAP_SOCK_FLOWS: LruHashMap<FlowKey, SockFlow> =
    LruHashMap::with_max_entries(FLOWS_MAX_ENTRIES, 0);

/// Per-connection landing records of the connections a sender opens
/// (`srap_daemon::sender::landings`), keyed with this host as the source.
#[map]
static SRAP_LOCAL_FLOWS: LruHashMap<FlowKey, SockFlow> =
    LruHashMap::with_max_entries(FLOWS_MAX_ENTRIES, 0);

/// Which connections a program records, and how its keys are oriented.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Accepted connections; the remote end (the sender) is the source.
    Accepted,
    /// Opened connections; this host (the sender) is the source.
    Opened,
}

/// `sock_ops` return value: carry on (the program only observes).
const SOCK_OPS_OK: u32 = 1;

/// Records accepted connections once established and once closed.
#[sock_ops]
pub fn srap_obs_sock(ctx: SockOpsContext) -> u32 {
    record(&ctx, Side::Accepted);
    SOCK_OPS_OK
}

/// Records the connections this host opens, once established and once
/// closed.
#[sock_ops]
pub fn srap_obs_local(ctx: SockOpsContext) -> u32 {
    record(&ctx, Side::Opened);
    SOCK_OPS_OK
}

#[inline(always)]
fn record(ctx: &SockOpsContext, side: Side) {
    let established_op = match side {
        Side::Accepted => BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB,
        Side::Opened => BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB,
    };
    let op = ctx.op();
    if side == Side::Opened && op == BPF_SOCK_OPS_TCP_CONNECT_CB {
        connecting(ctx);
    } else if op == established_op {
        established(ctx, side);
        // Only the state callback: no per-packet (RTT, header option,
        // data) callback is ever asked for.
        let _ = ctx.set_cb_flags(BPF_SOCK_OPS_STATE_CB_FLAG as i32);
    } else if op == BPF_SOCK_OPS_STATE_CB && ctx.arg(1) == BPF_TCP_CLOSE {
        closed(ctx, side);
    }
}

/// The program's map.
#[inline(always)]
fn flows(side: Side) -> &'static LruHashMap<FlowKey, SockFlow> {
    match side {
        Side::Accepted => &SRAP_SOCK_FLOWS,
        Side::Opened => &SRAP_LOCAL_FLOWS,
    }
}

/// The flow key with the sender as source: the remote end of an accepted
/// connection, this host for an opened one.
#[inline(always)]
fn flow_key(ctx: &SockOpsContext, side: Side) -> Option<FlowKey> {
    let mut key = FlowKey::default();
    match ctx.family() {
        2 => {
            key.family = Family::Inet.as_u8();
            key.src_addr[..4].copy_from_slice(&ctx.remote_ip4().to_ne_bytes());
            key.dst_addr[..4].copy_from_slice(&ctx.local_ip4().to_ne_bytes());
        }
        10 => {
            key.family = Family::Inet6.as_u8();
            // Word by word at constant offsets: the kernel's verifier only
            // accepts context reads at a fixed offset from the context.
            // SAFETY: `ops` is the kernel's context, valid for this run.
            let (remote, local) = unsafe {
                let ops = ctx.ops;
                (
                    [
                        read_volatile(&raw const (*ops).remote_ip6[0]),
                        read_volatile(&raw const (*ops).remote_ip6[1]),
                        read_volatile(&raw const (*ops).remote_ip6[2]),
                        read_volatile(&raw const (*ops).remote_ip6[3]),
                    ],
                    [
                        read_volatile(&raw const (*ops).local_ip6[0]),
                        read_volatile(&raw const (*ops).local_ip6[1]),
                        read_volatile(&raw const (*ops).local_ip6[2]),
                        read_volatile(&raw const (*ops).local_ip6[3]),
                    ],
                )
            };
            key.src_addr = words_to_bytes(remote);
            key.dst_addr = words_to_bytes(local);
        }
        _ => return None,
    }
    // remote_port: the network-order port in the upper half on little-endian
    // hosts; local_port: host order.
    // sock_ops runs for TCP sockets only.
    key.protocol = Protocol::Tcp.as_u8();
    key.src_port = u16::from_be((ctx.remote_port() >> 16) as u16);
    key.dst_port = ctx.local_port() as u16;
    if side == Side::Opened {
        core::mem::swap(&mut key.src_addr, &mut key.dst_addr);
        core::mem::swap(&mut key.src_port, &mut key.dst_port);
    }
    Some(key)
}

/// Four network-order words (as `sock_ops` gives IPv6 addresses) as bytes.
#[inline(always)]
fn words_to_bytes(words: [u32; 4]) -> [u8; 16] {
    let [a, b, c, d] = words.map(u32::to_ne_bytes);
    [
        a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], c[0], c[1], c[2], c[3], d[0], d[1], d[2],
        d[3],
    ]
}

/// The socket's recorded receive queue, `u32::MAX` when there is none.
#[inline(always)]
fn rx_queue(ctx: &SockOpsContext) -> u32 {
    // SAFETY: `ops` is the kernel's context; `sk` is checked for null
    // before use, as the kernel's verifier requires.
    unsafe {
        let sk = (*ctx.ops).__bindgen_anon_2.sk;
        if sk.is_null() {
            return u32::MAX;
        }
        (*sk).rx_queue_mapping as u32
    }
}

/// A connection this host opens, as its SYN leaves: the callback runs in
/// `connect()`, on the calling thread's CPU, once the source port is bound.
#[inline(always)]
fn connecting(ctx: &SockOpsContext) {
    let Some(key) = flow_key(ctx, Side::Opened) else {
        return;
    };
    let flow = SockFlow {
        rx_queue: u32::MAX,
        // SAFETY: a helper without preconditions.
        connect_cpu: unsafe { bpf_get_smp_processor_id() },
        ..SockFlow::default()
    };
    let _ = SRAP_LOCAL_FLOWS.insert(key, flow, 0);
}

#[inline(always)]
fn established(ctx: &SockOpsContext, side: Side) {
    let Some(key) = flow_key(ctx, side) else {
        return;
    };
    // SAFETY: helpers without preconditions.
    let (cpu, now) = unsafe { (bpf_get_smp_processor_id(), bpf_ktime_get_ns()) };
    // The connecting CPU of the record `connecting` made for this one.
    let connect_cpu = match side {
        // SAFETY: a read of a live map value.
        Side::Opened => match unsafe { SRAP_LOCAL_FLOWS.get(key) } {
            Some(seen) if seen.established_ns == 0 => seen.connect_cpu,
            _ => CPU_UNKNOWN,
        },
        Side::Accepted => CPU_UNKNOWN,
    };
    let flow = SockFlow {
        rx_queue: rx_queue(ctx),
        cpu,
        established_ns: now,
        connect_cpu,
        ..SockFlow::default()
    };
    // A reused 4-tuple (a new connection after the old one closed) replaces
    // the old record: BPF_ANY.
    let _ = flows(side).insert(key, flow, 0);
}

#[inline(always)]
fn closed(ctx: &SockOpsContext, side: Side) {
    let Some(key) = flow_key(ctx, side) else {
        return;
    };
    let Some(flow) = flows(side).get_ptr_mut(key) else {
        return;
    };
    // SAFETY: `flow` points at a live map value for the rest of this run;
    // the context fields are readable in every callback.
    unsafe {
        let flow = &mut *flow;
        flow.closed_ns = bpf_ktime_get_ns();
        flow.close_cpu = bpf_get_smp_processor_id();
        flow.bytes = (*ctx.ops).bytes_received;
        flow.segs_in = u64::from((*ctx.ops).segs_in);
    }
}
