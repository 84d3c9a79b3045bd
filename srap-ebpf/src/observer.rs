//! The receive observer: per TCP flow, where (receive queue, CPU) its packets
//! actually land. This is the proof that a predicted RSS placement happened.
//!
//! The tc ingress variant is the default: attaching it reconfigures no NIC
//! (XDP makes virtio_net re-send its queue count, which turns QEMU's RSS
//! off, and makes mlx5 rebuild its rings), it runs after GRO and RPS (one
//! event per aggregate, on the CPU that processes the flow) and at any MTU.
//! The XDP variant is an explicit choice. Both always let the packet
//! through: the observer only observes.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, TC_ACT_OK, xdp_action},
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{classifier, map, xdp},
    maps::LruHashMap,
    programs::{TcContext, XdpContext},
};
use srap_common::observer::{FLOWS_MAX_ENTRIES, FlowKey, FlowStats, NIC_HASH_NONE};

use crate::packet::{MAX_HEADER_LEN, parse_tcp_flow};

/// Per-flow landing records, read by user space (`srap_daemon::observer`).
#[map]
static SRAP_FLOWS: LruHashMap<FlowKey, FlowStats> =
    LruHashMap::with_max_entries(FLOWS_MAX_ENTRIES, 0);

/// XDP receive observer: records the frame, then `XDP_PASS`.
#[xdp]
pub fn srap_obs_xdp(ctx: XdpContext) -> u32 {
    let (data, data_end) = (ctx.data(), ctx.data_end());
    if let Some(key) = parse_tcp_flow(data, data_end) {
        // XDP has no skb and so no `skb->hash`; on 6.3+ drivers the
        // `bpf_xdp_metadata_rx_hash` kfunc would give it, which aya 0.14
        // cannot call. Only the tc program records the NIC's hash.
        record(
            &key,
            ctx.rx_queue_index(),
            (data_end - data) as u64,
            NIC_HASH_NONE,
        );
    }
    xdp_action::XDP_PASS
}

/// tc ingress receive observer: records the skb, then `TC_ACT_OK`.
#[classifier]
pub fn srap_obs_tc(ctx: TcContext) -> i32 {
    // Headers may sit partly outside the linear area; pulling is best effort
    // (it fails only for packets shorter than asked, which then fail to parse).
    let want = MAX_HEADER_LEN.min(ctx.len() as usize);
    if ctx.data_end() - ctx.data() < want {
        let _ = ctx.pull_data(want as u32);
    }
    if let Some(key) = parse_tcp_flow(ctx.data(), ctx.data_end()) {
        // SAFETY: `ctx.skb.skb` is the kernel-provided context pointer.
        let queue_mapping = unsafe { (*ctx.skb.skb).queue_mapping };
        // Recorded raw: what it means depends on the driver (real drivers
        // store queue + 1, veth the sending side's tx queue), which user
        // space knows and this program does not.
        let rx_queue = queue_mapping;
        // SAFETY: as above. `__sk_buff.hash` is a plain load of `skb->hash`,
        // the driver's own RSS hash (0 with `rxhash off`). Read it, not
        // `bpf_get_hash_recalc`, which replaces an L3-marked hardware hash
        // (igb's) by a software jhash.
        let nic_hash = unsafe { (*ctx.skb.skb).hash };
        record(&key, rx_queue, u64::from(ctx.len()), nic_hash);
    }
    TC_ACT_OK
}

/// Adds one packet of `bytes` to `key`'s record, creating it if needed.
/// `nic_hash` is stored only when the record is created (the flow's first
/// packet, its SYN): every packet of a flow carries the same hash, and
/// storing it once adds nothing to the per-packet path.
///
/// Plain read-modify-write, not atomics: see [`FlowStats`] for why that is
/// exact when one flow is handled by one CPU at a time, as RSS arranges.
#[inline(always)]
fn record(key: &FlowKey, rx_queue: u32, bytes: u64, nic_hash: u32) {
    // SAFETY: helpers without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    // SAFETY: as above.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(stats) = SRAP_FLOWS.get_ptr_mut(key) {
        update(stats, rx_queue, cpu, bytes, now);
        return;
    }
    let fresh = FlowStats {
        rx_queue,
        cpu,
        packets: 1,
        bytes,
        first_seen_ns: now,
        last_seen_ns: now,
        moves: 0,
        nic_hash,
    };
    if SRAP_FLOWS
        .insert(key, fresh, u64::from(BPF_NOEXIST))
        .is_err()
    {
        // Another CPU created it first: account on top of theirs.
        if let Some(stats) = SRAP_FLOWS.get_ptr_mut(key) {
            update(stats, rx_queue, cpu, bytes, now);
        }
    }
}

#[inline(always)]
fn update(stats: *mut FlowStats, rx_queue: u32, cpu: u32, bytes: u64, now: u64) {
    // SAFETY: `stats` points at a live map value (from a successful lookup)
    // that stays valid for the rest of this program run.
    let stats = unsafe { &mut *stats };
    stats.packets = stats.packets.wrapping_add(1);
    stats.bytes = stats.bytes.wrapping_add(bytes);
    if stats.rx_queue != rx_queue || stats.cpu != cpu {
        stats.moves = stats.moves.wrapping_add(1);
        stats.rx_queue = rx_queue;
        stats.cpu = cpu;
    }
    stats.last_seen_ns = now;
}
