//! The hooks the observer can run on, which of them to try in which order,
//! and how one attempt on a hook fails: what the parent's attaching code
//! and the seam's traits both speak of. Names and orders only: loading,
//! attaching and reading the flow maps must not come here.

use std::fmt;

use super::error::ObserverError;

/// Where the observer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Native (driver) XDP.
    XdpDriver,
    /// Generic XDP, run by the kernel's network stack.
    XdpGeneric,
    /// tc ingress through a tcx link (Linux ≥ 6.6, no qdisc needed).
    TcxIngress,
    /// tc ingress through a filter on a `clsact` qdisc (netlink; older kernels).
    ClsactIngress,
    /// `sock_ops` on a cgroup: once per accepted connection, never per packet.
    SockOps,
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::XdpDriver => "xdp (driver)",
            Self::XdpGeneric => "xdp (generic)",
            Self::TcxIngress => "tc ingress (tcx)",
            Self::ClsactIngress => "tc ingress (clsact)",
            Self::SockOps => "sock_ops (cgroup)",
        })
    }
}

impl Hook {
    /// Whether the hook records the NIC's own RSS hash (`skb->hash`,
    /// [`FlowStats::nic_hash`]): only tc ingress sees the skb with it. XDP
    /// has no skb (the `bpf_xdp_metadata_rx_hash` kfunc is beyond aya 0.14),
    /// and the socket hook's `sk_rxhash` passed through RPS/RFS first.
    ///
    /// [`FlowStats::nic_hash`]: srap_common::observer::FlowStats::nic_hash
    pub fn reads_nic_hash(self) -> bool {
        matches!(self, Self::TcxIngress | Self::ClsactIngress)
    }
}

/// Hooks tried by [`HookChoice::Auto`], best first: only hooks whose
/// attaching changes nothing on the device. The socket hook first: it does
/// no per-packet work (tc ingress does, ~tens of ns per skb); tc where
/// there is no cgroup2 and on a veth (see [`QueueReading::SocketPeerTxQueue`]).
/// XDP is never chosen for the user: on virtio_net (6.1) attaching it
/// re-sends the queue-pair count and QEMU turns RSS off; mlx5 refuses it
/// while HW-GRO/LRO is on and rebuilds its receive rings; a non-frags
/// program cannot attach at 9000-byte MTU.
///
/// [`QueueReading::SocketPeerTxQueue`]: super::QueueReading::SocketPeerTxQueue
pub const AUTO_ORDER: [Hook; 3] = [Hook::SockOps, Hook::TcxIngress, Hook::ClsactIngress];

/// Which hooks to try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookChoice {
    /// [`AUTO_ORDER`]: the first that attaches.
    #[default]
    Auto,
    /// XDP only, as an explicit choice: driver mode, then generic.
    Xdp,
    /// tc ingress only: tcx, then a `clsact` filter.
    Tc,
    /// The socket hook only.
    Sock,
    /// Exactly this hook.
    Only(Hook),
}

impl HookChoice {
    pub(super) fn order(&self) -> &[Hook] {
        match self {
            Self::Auto => &AUTO_ORDER,
            Self::Xdp => &[Hook::XdpDriver, Hook::XdpGeneric],
            Self::Tc => &[Hook::TcxIngress, Hook::ClsactIngress],
            Self::Sock => &[Hook::SockOps],
            Self::Only(hook) => std::slice::from_ref(hook),
        }
    }
}

/// An attempt that failed: either this hook is unavailable (try the next) or
/// something is wrong with the object itself (stop).
pub(super) enum AttachFailure {
    /// This hook is unavailable here, and why.
    Refused(String),
    /// The object itself is wrong: no other hook would do better.
    Fatal(ObserverError),
}
