//! The lab's RSS-NIC emulator (tc egress on the sender's veth): hashes each
//! TCP packet as the receiver's NIC would and sets `skb->hash` so veth
//! delivers it on the queue the indirection table names. See
//! `srap_common::emulator`.

use aya_ebpf::{
    bindings::TC_ACT_OK,
    helpers::bpf_set_hash,
    macros::{classifier, map},
    maps::{Array, PerCpuArray},
    programs::TcContext,
};
use srap_common::{
    emulator::{EmulatorConfig, MAX_INDIR, TOEPLITZ_ENTRIES, counter},
    family::Family,
    observer::FlowKey,
};

use crate::packet::{MAX_HEADER_LEN, parse_tcp_flow};

#[map]
static SRAP_EMU_TOEPLITZ: Array<u32> = Array::with_max_entries(TOEPLITZ_ENTRIES, 0);
#[map]
static SRAP_EMU_INDIR: Array<u32> = Array::with_max_entries(MAX_INDIR, 0);
#[map]
static SRAP_EMU_CONFIG: Array<EmulatorConfig> = Array::with_max_entries(1, 0);
#[map]
static SRAP_EMU_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Never drops or changes a packet's bytes: only its hash, hence its queue.
#[classifier]
pub fn srap_rss_nic(ctx: TcContext) -> i32 {
    let steered = steer(&ctx).is_some();
    let which = if steered {
        counter::STEERED
    } else {
        counter::PASSED
    };
    if let Some(count) = SRAP_EMU_STATS.get_ptr_mut(which) {
        // SAFETY: per-CPU slot, valid map memory.
        unsafe { *count += 1 };
    }
    TC_ACT_OK
}

fn steer(ctx: &TcContext) -> Option<()> {
    let want = MAX_HEADER_LEN.min(ctx.len() as usize);
    if ctx.data_end() - ctx.data() < want {
        let _ = ctx.pull_data(want as u32);
    }
    let key = parse_tcp_flow(ctx.data(), ctx.data_end())?;
    let config = *SRAP_EMU_CONFIG.get(0)?;
    if config.indir_len == 0 || config.indir_len > MAX_INDIR || config.queues == 0 {
        return None;
    }
    let hash = toeplitz(&key)?;
    let queue = *SRAP_EMU_INDIR.get(hash % config.indir_len)?;
    // SAFETY: the context's own skb.
    unsafe { bpf_set_hash(ctx.skb.skb, config.hash_for_queue(queue)) };
    Some(())
}

/// Toeplitz over `src | dst | sport | dport`, one table lookup per byte.
#[inline(always)]
fn toeplitz(key: &FlowKey) -> Option<u32> {
    let addr_len: u32 = if key.family == Family::Inet.as_u8() {
        4
    } else {
        16
    };
    let mut hash = 0u32;
    let mut position = 0u32;
    for half in [&key.src_addr, &key.dst_addr] {
        for (i, byte) in half.iter().enumerate() {
            if i as u32 >= addr_len {
                break;
            }
            hash ^= byte_share(position, *byte)?;
            position += 1;
        }
    }
    for port in [key.src_port, key.dst_port] {
        for byte in port.to_be_bytes() {
            hash ^= byte_share(position, byte)?;
            position += 1;
        }
    }
    Some(hash)
}

#[inline(always)]
fn byte_share(position: u32, byte: u8) -> Option<u32> {
    SRAP_EMU_TOEPLITZ
        .get(position * 256 + u32::from(byte))
        .copied()
}
