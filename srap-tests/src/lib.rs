//! Helpers for SRAP's integration tests, beside the harness they share with
//! the lab ([`harness`], the `srap-harness` crate: hosts in network
//! namespaces, agents, QEMU guests, workloads, ground truth, and the
//! privilege check that fails a kernel test run without root; they are
//! `#[ignore]`d unless asked for): the test workload (run as the helper
//! binary `srap-test-workload`, never shipped), cgroups, a man in the
//! middle, all real kernel objects behind drop guards.
//!
//! Every object gets a name unique to this process and test (pid + counter), so
//! tests run in parallel, and is removed on drop, so a failing test (a panic
//! unwinds through the guards) leaves nothing behind. Traffic stays inside
//! namespaces the test made: addresses are `10.199.<subnet>.0/24` and
//! `fd00:5a:0:<subnet>::/64` of a subnet leased for the test
//! ([`subnet::Subnet::lease`]), configured only on the test's own veth
//! ends.

pub mod binaries;
pub mod caps;
pub mod cgroup;
pub mod flows;
pub mod grafana;
pub mod grants;
pub mod greedy;
pub mod promtool;
pub mod relay;
pub mod socket_patterns;
pub mod test_workload;
pub mod tools;
pub mod two_links;

pub use binaries::{built_binary, guest_image, two_nic_receiver};
pub use srap_harness::{
    self as harness, NetNs, NsGuard, TwoHosts, VethConfig, VethEnd, netns, privilege,
    privilege::{privileged_or_skip, require_privileged},
    subnet, unique_name, veth,
};
