//! `srap-harness`: SRAP on one machine, for whoever runs it there — the lab
//! (`srap-lab`), the integration tests and the benchmarks (`srap-tests`).
//! One harness for "agents in network namespaces" and for QEMU guests:
//!
//! * **hosts**: namespaces ([`NetNs`]) joined by a veth ([`TwoHosts`],
//!   [`veth::link`]) or a bridge ([`Bridge`]), or two hosts with a sender
//!   agent prepared on one ([`SenderPair`]), each wire on a subnet leased
//!   for it ([`Subnet::lease`]: no test picks an address), and the RSS-NIC
//!   emulator on a veth's egress ([`emulator`]), from the lab's own eBPF
//!   object ([`lab_ebpf_object`]: the emulator, the benchmarks' bare
//!   programs and the audit tests' [`drift`] injector, which the agents'
//!   object does not carry);
//! * **guests**: QEMU guests with a real RSS device (virtio-net, igb) or a
//!   bond of them, judged by the guest's own tools ([`guest`]);
//! * **machines**: a booted Debian under a real systemd (`systemd-nspawn`)
//!   in a namespace of the test's, for what only a service manager shows:
//!   unit ordering, readiness, the units' sandboxing ([`nspawn`]);
//! * **agents**: `srap-agent receiver` and `srap-agent sender` started in a
//!   namespace ([`ReceiverAgent`], [`SenderAgent`]) from options that take
//!   any further flag ([`AgentOpts::arg`]), each
//!   with a directory of its own (its log, its description file, its control
//!   socket, its pre-shared key: [`keyfile`]); their logs are waited on
//!   ([`SenderAgent::wait_for_log`]), named in every error and printed when
//!   a test panics;
//! * **workloads**: commands run in a namespace ([`in_netns`]), steered
//!   through `srap exec` ([`srap_exec`]), or sockets made in the steered
//!   cgroup by this process ([`InCgroup`]); the built binaries, `iperf3`
//!   servers and clients behind process guards ([`programs`]); reading
//!   threads pinned per CPU ([`readers`], the `srap-readers` client) and
//!   MPTCP readers that move between NUMA nodes ([`moving_readers`]);
//! * **ground truth**: the source addresses a [`Listener`] accepted,
//!   hashed with the receiver's model ([`landings`]), never SRAP's own
//!   report;
//! * **cleanup**: every agent is killed by PID, its binder detached and its
//!   files removed when it drops; a namespace goes when its last handle
//!   does; what a killed process left behind is swept ([`orphans`]);
//! * **support**: the one bounded wait ([`poll_until`]), scratch directory
//!   ([`TempDir`]), cgroup removal ([`remove_cgroup`]), names unique to this
//!   process ([`unique_name`]), the interrupt flag every wait checks
//!   ([`interrupt`]) and the one check for root ([`privilege`]).
//!
//! Every object gets a name unique to this process (pid + counter) and is
//! removed on drop, so a failing run (a panic unwinds through the guards)
//! leaves nothing behind. Traffic stays inside namespaces made here:
//! addresses are `10.199.<subnet>.0/24` and `fd00:5a:0:<subnet>::/64`,
//! configured only on these veth ends.
//!
//! Nothing here may be linked into `srap-agent`, the root daemon the
//! packages ship (`cargo xtask test` checks its dependency graph reaches
//! neither this crate nor the lab); and nothing the agents need at run time
//! may live only here: the harness drives the agents, it is not one.

pub mod command;
pub mod drift;
pub mod emulator;
pub mod guest;
pub mod interrupt;
pub mod keyfile;
pub mod moving_readers;
pub mod names;
pub mod netns;
pub mod nspawn;
pub mod orphans;
pub mod privilege;
pub mod programs;
pub mod readers;
pub mod subnet;
pub mod veth;

mod agent;
mod exec;
mod hosts;
mod lab_object;
mod pair;
mod sockets;
mod support;
mod truth;

pub use agent::{
    AgentLog, AgentOpts, LAB_PORT_RANGE, PEER_PORT, ReceiverAgent, ReceiverOpts, ReceiverRole,
    SenderAgent, SenderOpts, SenderRole,
};
pub use exec::{InCgroup, in_netns, in_netns_bounded, srap_exec, srap_exec_with};
pub use hosts::Bridge;
pub use lab_object::lab_ebpf_object;
pub use names::unique_name;
pub use netns::{NetNs, NsGuard};
pub use pair::SenderPair;
pub use subnet::Subnet;
pub use support::{TempDir, poll_until, remove_cgroup};
pub use truth::{Listener, landings};
pub use veth::{TwoHosts, VethConfig, VethEnd};
