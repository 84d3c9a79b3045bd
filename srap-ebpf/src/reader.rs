//! The reader tracepoint (`srap_reader`, raw tracepoint on
//! `sock:sock_recv_length`): for each MPTCP connection the agent follows,
//! the bytes its reading threads took, counted under the NUMA node of the
//! CPU that read them (`srap_common::reader` says what the agent does with
//! them).
//!
//! It runs on every `recvmsg` of the host, so it returns after two kernel
//! reads and a hash lookup for any socket that is not a followed MPTCP
//! connection, and changes nothing the kernel does.

use core::{
    intrinsics::{AtomicOrdering, atomic_xadd},
    ptr::addr_of_mut,
};

use aya_ebpf::{
    helpers::{bpf_get_numa_node_id, bpf_get_smp_processor_id},
    macros::{map, raw_tracepoint},
    maps::{Array, HashMap},
    programs::RawTracePointContext,
};
use srap_common::reader::{
    IPPROTO_MPTCP, MAX_FOLLOWED, MSG_PEEK, READER_NODES, ReadCounts, ReaderLayout,
};

use crate::kernel_memory::read_at;

/// The followed connections' counts, by MPTCP token; rows are the agent's
/// to add and remove.
#[map]
static SRAP_READS: HashMap<u32, ReadCounts> = HashMap::with_max_entries(MAX_FOLLOWED, 0);

/// Where `sk_protocol` and the MPTCP token lie in this kernel.
#[map]
static SRAP_READER_LAYOUT: Array<ReaderLayout> = Array::with_max_entries(1, 0);

/// `TP_PROTO(struct sock *sk, int ret, int flags)`.
#[raw_tracepoint(tracepoint = "sock_recv_length")]
pub fn srap_reader(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let ret: u64 = ctx.arg(1);
    let flags: u64 = ctx.arg(2);
    let (read, flags) = (ret as i32, flags as i32);
    if read > 0 && flags & MSG_PEEK == 0 {
        count_read(sk, read as u64);
    }
    0
}

/// Adds a read of `bytes` from `sk` to its connection's row, if `sk` is an
/// MPTCP socket the agent follows.
#[inline(always)]
fn count_read(sk: *const u8, bytes: u64) -> Option<()> {
    let layout = SRAP_READER_LAYOUT.get(0).filter(|l| l.known != 0)?;
    if read_at::<u16>(sk, layout.sk_protocol)? != IPPROTO_MPTCP {
        return None;
    }
    let token = read_at::<u32>(sk, layout.msk_token)?;
    let counts = SRAP_READS.get_ptr_mut(token)?;
    // SAFETY: `bpf_get_numa_node_id` and `bpf_get_smp_processor_id` take
    // no arguments and always succeed.
    let (node, cpu) = unsafe { (bpf_get_numa_node_id() as u32, bpf_get_smp_processor_id()) };
    // SAFETY: `counts` points into the map's value, valid for this run;
    // readers on other CPUs may add to the same row at once, hence the
    // atomic adds (the last read's fields are plain stores: any recent
    // reader's are right).
    unsafe {
        let slot = if (node as usize) < READER_NODES {
            // Masked after the opaque copy, so the verifier sees the bound
            // on the very register the address is made from (LLVM would
            // drop a mask the branch already implies).
            let index = core::hint::black_box(node as usize) & (READER_NODES - 1);
            addr_of_mut!((*counts).bytes[index])
        } else {
            addr_of_mut!((*counts).beyond)
        };
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, bytes);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(addr_of_mut!((*counts).reads), 1);
        (*counts).last_cpu = cpu;
        (*counts).last_node = node;
    }
    Some(())
}
