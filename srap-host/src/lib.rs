//! SRAP's host-side library: the kernel access both `srap` and the daemon
//! need of the local host, without the eBPF build (so `srap` builds on
//! stable alone).
//!
//! It must NOT hold the agents' status (snapshot, control socket,
//! `/metrics`: that is `srap-status`) nor daemon logic (loading or driving
//! eBPF programs, the receiver's service, the sender's loop: `srap-daemon`).
//!
//! * [`discovery`]: this host's RSS configuration (ethtool ioctls, netlink,
//!   IRQ affinity, RPS) as an [`srap_common::rss::RssDescription`];
//! * [`cgroup`]: the cgroup2 mount and the steered cgroup `srap exec` joins;
//! * [`cpus`]: the CPUs a receiver offers its senders (`--cpus`, NUMA node
//!   first), in the kernel's [`cpulist`] syntax;
//! * [`reserved`]: `ip_local_reserved_ports` and `ip_local_port_range` (the
//!   binder's default source ports; it reserves none, but releases what an
//!   older agent reserved);
//! * [`btf`]: where a field of a kernel struct lies, from the kernel's BTF;
//! * [`kernel`]: the running kernel's version;
//! * [`route`] and [`local`]: the source address toward a receiver and the
//!   host's own addresses;
//! * [`fib`]: the policy routing (rules, every table's routes, `rp_filter`
//!   and ARP settings) as values, and the source rules a sender installs;
//! * [`link`] and [`netlink`]: network devices as the caller's namespace
//!   has them, and the netlink layer every kernel conversation goes through;
//! * [`numa`]: the NUMA node of an interface's device (a bond's: its
//!   members') and of each CPU;
//! * [`bpffs`]: the BPF filesystem the daemon pins to;
//! * [`mptcp_pm`]: the MPTCP path manager a daemon in user space drives
//!   (subflows, backup flags, announcements, events) and which one a
//!   namespace runs;
//! * [`report`]: how the binaries print the error that ends them.

pub mod bond;
pub mod bpf_sys;
pub mod bpffs;
pub mod btf;
pub mod cgroup;
pub mod cpulist;
pub mod cpus;
pub mod discovery;
mod error;
pub mod fib;
pub mod kernel;
pub mod link;
pub mod link_events;
pub mod local;
pub mod mptcp_pm;
pub mod netlink;
pub mod numa;
pub mod report;
pub mod reserved;
pub mod route;
pub mod topology;

pub use error::{BtfError, HostError, PortListError};
