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
//! BTF (`srap_common::binder::MptcpLayout`): its layout changed in the
//! kernel's history.
//! A port of 0 (an announcement without one) is the connection's own,
//! `skc_dport` of the MPTCP socket (at byte 12 of its `sock_common`, a
//! layout older than MPTCP).
//!
//! Why a trace, and what else was weighed (docs/binder.md, "MPTCP and the
//! kernel's own sockets", has the measurements):
//!
//! * **The trace** (this module): the destination the kernel really
//!   connects to, for every path manager (in-kernel, `fullmesh`
//!   endpoints, the userspace one) and both families; costs a hash
//!   update and delete per subflow opened, nothing per connect. Needs the
//!   kernel to allow tracing programs (`CAP_BPF` and `CAP_PERFMON`, no
//!   policy refusing them) and the function not inlined (a global one in
//!   6.1 and 6.18). Optional: the agent attaches it when it can.
//! * **The MPTCP socket's own fields** (`super::subflow`'s fallback):
//!   its remote address (IPv4 at a fixed offset, IPv6 at `skc_v6_daddr`)
//!   and `pm.remote`, the address the peer announced last. Right for the
//!   in-kernel path manager's two cases (an endpoint's subflow toward the
//!   connection's address, an announced address from no address), wrong
//!   for a `fullmesh` endpoint toward an announced address (bound to an
//!   address, sent to `pm.remote`) and blind to the userspace path
//!   manager. Kept as the fallback: it needs no tracing.
//! * **SRAP as the userspace path manager** (`MPTCP_PM_CMD_SUBFLOW_CREATE`
//!   takes a local port): exact, but takes over subflow creation for the
//!   whole namespace (`net.mptcp.pm_type=1`) from the user's endpoints and
//!   `mptcpd`, and puts an agent round trip in every subflow's opening.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use srap_common::binder::{MptcpLayout, SubflowDest};

use super::maps::{SRAP_MPTCP_LAYOUT, SRAP_SUBFLOW_DESTS};
use crate::kernel_memory::read_at;

/// `AF_INET` and `AF_INET6`.
pub(super) const AF_INET: u16 = 2;
pub(super) const AF_INET6: u16 = 10;

/// `skc_dport`'s offset in `struct sock_common`.
pub(super) const SKC_DPORT: u32 = 12;

/// On entry: records the subflow's destination, `remote` of the MPTCP
/// socket `sk`, under the current task. Nothing when the layout is not
/// written yet or a read fails (the bind then counts `subflow_untraced`).
#[inline(always)]
pub(super) fn note_remote(sk: *const u8, remote: *const u8) {
    let Some(layout) = known_layout() else {
        return;
    };
    let mut dest = SubflowDest::default();
    if read_addr_info(layout, remote, sk, &mut dest) {
        let _ = SRAP_SUBFLOW_DESTS.insert(bpf_get_current_pid_tgid(), dest, 0);
    }
}

/// The agent's reading of the kernel's MPTCP fields, once it found them.
#[inline(always)]
pub(super) fn known_layout() -> Option<&'static MptcpLayout> {
    SRAP_MPTCP_LAYOUT.get(0).filter(|layout| layout.known != 0)
}

/// Reads the `struct mptcp_addr_info` at `info` into `dest`; a port of 0
/// is the MPTCP socket `msk`'s own (`skc_dport`). False when a read fails
/// or the family is neither IPv4 nor IPv6.
#[inline(always)]
pub(super) fn read_addr_info(
    layout: &MptcpLayout,
    info: *const u8,
    msk: *const u8,
    dest: &mut SubflowDest,
) -> bool {
    let Some(family) = read_at::<u16>(info, layout.family) else {
        return false;
    };
    dest.family = family;
    let read = match family {
        AF_INET => read_at::<u32>(info, layout.addr).map(|a| dest.addr[0] = a),
        AF_INET6 => read_at::<[u32; 4]>(info, layout.addr).map(|a| dest.addr = a),
        _ => None,
    };
    let port = match read_at::<u16>(info, layout.port) {
        Some(0) => read_at::<u16>(msk, SKC_DPORT),
        port => port,
    };
    let (Some(()), Some(port)) = (read, port) else {
        return false;
    };
    dest.port = u16::from_be(port);
    true
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
