//! Where the kernel's path manager sends each further MPTCP subflow.
//!
//! The path manager opens a subflow in `__mptcp_subflow_connect(sk, local,
//! remote)`: it creates the socket, binds it (`kernel_bind`, which runs the
//! bind hook, [`super::subflow`]) and connects it to `remote`, all on the
//! calling task (the MPTCP worker, or the netlink caller of the userspace
//! path manager). A program on that call's entry writes `remote` (family,
//! port, address) under the task into `SRAP_SUBFLOW_DESTS`, one on its exit
//! removes it, and the bind hook in between reads it: the subflow's own
//! destination, the address the peer announced (`ADD_ADDR`) included, of
//! either family. No other bind runs on that task within the call.
//!
//! `remote` is the kernel's `struct mptcp_addr_info`, read with
//! `bpf_probe_read_kernel` at the offsets the agent found in the kernel's
//! BTF ([`AddrInfoLayout`]): its layout changed in the kernel's history.
//! A port of 0 (an announcement without one) is the connection's own,
//! `skc_dport` of the MPTCP socket (at byte 12 of its `sock_common`, a
//! layout older than MPTCP).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_probe_read_kernel},
    macros::map,
    maps::Array,
};
use srap_common::binder::{AddrInfoLayout, SubflowDest};

use super::maps::SRAP_SUBFLOW_DESTS;

/// `AF_INET` and `AF_INET6`.
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// `skc_dport`'s offset in `struct sock_common`.
const SKC_DPORT: usize = 12;

/// The agent's reading of `struct mptcp_addr_info` (one row; not pinned).
#[map]
static SRAP_ADDR_INFO_LAYOUT: Array<AddrInfoLayout> = Array::with_max_entries(1, 0);

/// On entry: records the subflow's destination, `remote` of the MPTCP
/// socket `sk`, under the current task. Nothing when the layout is not
/// written yet or a read fails (the bind then counts `subflow_untraced`).
#[inline(always)]
pub(super) fn note_remote(sk: *const u8, remote: *const u8) {
    let Some(layout) = SRAP_ADDR_INFO_LAYOUT.get(0) else {
        return;
    };
    if layout.known == 0 {
        return;
    }
    let Some(family) = read_at::<u16>(remote, layout.family) else {
        return;
    };
    let mut dest = SubflowDest {
        family,
        ..SubflowDest::default()
    };
    let read = match family {
        AF_INET => read_at::<u32>(remote, layout.addr).map(|a| dest.addr[0] = a),
        AF_INET6 => read_at::<[u32; 4]>(remote, layout.addr).map(|a| dest.addr = a),
        _ => None,
    };
    let port = match read_at::<u16>(remote, layout.port) {
        Some(0) => read_at::<u16>(sk, SKC_DPORT as u32),
        port => port,
    };
    let (Some(()), Some(port)) = (read, port) else {
        return;
    };
    dest.port = u16::from_be(port);
    let _ = SRAP_SUBFLOW_DESTS.insert(bpf_get_current_pid_tgid(), dest, 0);
}

/// On exit: forgets the task's record.
#[inline(always)]
pub(super) fn forget_remote() {
    let _ = SRAP_SUBFLOW_DESTS.remove(bpf_get_current_pid_tgid());
}

/// The destination the current task's path manager is connecting the
/// subflow it binds to, if it is inside `__mptcp_subflow_connect`.
#[inline(always)]
pub(super) fn traced_dest() -> Option<SubflowDest> {
    // SAFETY: the value is copied out at once.
    unsafe { SRAP_SUBFLOW_DESTS.get(bpf_get_current_pid_tgid()) }.copied()
}

/// A `T` read from kernel memory at `base + offset`; `None` when the read
/// fails.
#[inline(always)]
fn read_at<T: Copy + Default>(base: *const u8, offset: u32) -> Option<T> {
    let mut value = T::default();
    // SAFETY: a kernel read into a local of its size; a failed read
    // returns non-zero and leaves nothing used.
    let read = unsafe {
        bpf_probe_read_kernel(
            core::ptr::from_mut(&mut value).cast(),
            size_of::<T>() as u32,
            base.wrapping_add(offset as usize).cast(),
        )
    };
    (read == 0).then_some(value)
}
