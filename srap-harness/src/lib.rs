//! One harness for "agents in network namespaces", used by the lab, the
//! integration tests and the benchmarks alike:
//!
//! * **hosts**: namespaces joined by a veth ([`TwoHosts`], [`veth::link`])
//!   or a bridge ([`Bridge`]), or two hosts with a sender agent prepared
//!   on one ([`SenderPair`]), each wire on a subnet leased for it
//!   ([`Subnet::lease`]: no test picks an address);
//! * **agents**: `srap-agent receiver` and `srap-agent sender` started in a
//!   namespace ([`ReceiverAgent`], [`SenderAgent`]) from options that take
//!   any further flag ([`AgentOpts::arg`]), each
//!   with a directory of its own (its log, its description file, its control
//!   socket); their logs are waited on ([`SenderAgent::wait_for_log`]),
//!   named in every error and printed when a test panics;
//! * **workloads**: commands run in a namespace ([`in_netns`]), steered
//!   through `srap exec` ([`srap_exec`]), or sockets made in the steered
//!   cgroup by this process ([`super::binder::InCgroup`]);
//! * **ground truth**: the source addresses a [`Listener`] accepted,
//!   hashed with the receiver's model ([`landings`]), never SRAP's own
//!   report;
//! * **cleanup**: every agent is killed by PID, its binder detached and its
//!   files removed when it drops; a namespace goes when its last handle does;
//! * **support**: the one bounded wait ([`poll_until`]), scratch directory
//!   ([`TempDir`]) and cgroup removal ([`remove_cgroup`]) of every test.
//!
//! [`TwoHosts`]: super::TwoHosts
//! [`veth::link`]: super::veth::link

mod agent;
mod exec;
mod hosts;
mod pair;
mod support;
mod truth;

pub use crate::subnet::Subnet;
pub use agent::{
    AgentLog, AgentOpts, ReceiverAgent, ReceiverOpts, ReceiverRole, SenderAgent, SenderOpts,
    SenderRole,
};
pub use exec::{in_netns, in_netns_bounded, srap_exec};
pub use hosts::Bridge;
pub use pair::SenderPair;
pub use support::{TempDir, poll_until, remove_cgroup};
pub use truth::{Listener, landings};
