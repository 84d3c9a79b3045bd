//! `srap-lab`: SRAP's main job on one machine. Two hosts made of
//! network namespaces, a multi-queue veth whose sender side emulates a
//! receiver NIC's RSS, the binder on the sender, the receive observer on the
//! receiver, and a workload run twice — with kernel-chosen ports and with
//! SRAP's — or one of the paper's experiments (`--experiment` for placement,
//! `--experiment throughput` with `--queue-rate` capacity per receive
//! queue), or what a balanced bond buys (`--bond N` with `--member-rate`
//! per member, [`bond_throughput`]), or the bytes reaching pinned readers
//! through the far NUMA node's NIC (`--experiment numa-nics`,
//! [`numa_nics`]), or MPTCP connections over two capped links
//! (`--experiment mptcp`, [`mptcp_throughput`]), or a request/response
//! server whose threads move between NUMA nodes, the kernel's path manager
//! beside SRAP following them (`--experiment follow-reader`,
//! [`follow_reader`]), with their reports and plots.
//!
//! It stands on `srap_harness` (hosts in network namespaces, agents,
//! QEMU guests, workloads, ground truth), which the integration tests and
//! benchmarks build on too; what is here is the lab's own: its command
//! line ([`args`]), its two-host network ([`topology`]) and agents
//! ([`agents`], [`binder`]), the experiments and what they print and draw.
//!
//! The `srap-lab` binary (`src/main.rs`, what `cargo xtask lab` runs) is
//! thin over [`run::run`]. Nothing here may be linked into `srap-agent`, the
//! root daemon the packages ship (`cargo xtask test` checks its dependency
//! graph); and nothing the agents need at run time may live only here: the
//! lab drives the agents, it is not one.

pub mod agents;
pub mod args;
pub mod binder;
pub mod bond_throughput;
pub mod capacity;
pub mod direction;
pub mod experiment;
pub mod follow_reader;
pub mod mptcp_throughput;
pub mod numa_nics;
pub mod plot;
pub mod receiver_nics;
pub mod report;
pub mod run;
pub mod throughput;
pub mod topology;
pub mod veth_readers;
pub mod virtio;
pub mod virtio_pull;
pub mod virtio_readers;

pub use args::LabArgs;
pub use direction::Direction;
pub use run::run;
