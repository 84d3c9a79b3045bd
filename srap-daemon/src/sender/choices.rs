//! The sender's enum-valued settings, each defined once: clap's
//! `ValueEnum` derive gives the command line its values (and `--help` and
//! the man pages their text), serde gives the `--config` file the same
//! words (`crate::setting`), and where the hooks see a setting its
//! discriminant is the number they are loaded with. Plain values, beneath
//! everything else of the sender; the modules that act on them name them
//! too (`ends`, `spread`, `local::bond`).

use srap_common::{
    binder::{mptcp, placement},
    local_nics::policy as nic_policy,
};

/// `--steer`: which ends' NICs a steered flow is placed on (their CPUs:
/// the receiver's, this host's, or both at once).
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum PlacedEnds {
    /// The receiver's (the data this host sends).
    #[default]
    Remote,
    /// This host's own (the reverse tuple: what this host receives).
    Local,
    /// One port for both.
    Both,
}

impl PlacedEnds {
    /// The receiver's CPUs are planned.
    pub fn remote(self) -> bool {
        self != Self::Local
    }

    /// This host's CPUs are planned.
    pub fn local(self) -> bool {
        self != Self::Remote
    }
}

/// `--local-placement`: which of this host's CPUs a steered flow's local
/// end (what this host receives on it) is placed on.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
#[repr(u32)]
pub enum LocalPlacement {
    /// The least-occupied offered CPU: flows spread over this host's CPUs.
    #[default]
    #[value(name = "spread")]
    #[serde(rename = "spread")]
    LeastOccupied = placement::LEAST_OCCUPIED,
    /// The connecting thread's CPU, else its nearest offered CPU (SMT
    /// sibling, last-level cache, NUMA node).
    ///
    /// Holds for the CPU at `connect()`: a thread that moves later leaves
    /// its flow behind.
    Reader = placement::READER,
}

impl LocalPlacement {
    /// As the hook's config holds it (`srap_common::binder::placement`).
    pub fn as_config(self) -> u32 {
        self as u32
    }
}

/// `--local-nics`: which of this host's NICs a steered flow leaves and
/// arrives by, where several can reach its destination: the connect hook
/// binds the chosen NIC's address when the application bound none
/// (`srap_common::local_nics`), and places the flow by the route where
/// that NIC cannot take it (counted as `nic_fallback`).
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
#[repr(u32)]
pub enum LocalNicsPolicy {
    /// The route's NIC (its source address), as the kernel chooses.
    #[default]
    Route = nic_policy::ROUTE,
    /// The NIC on the connecting CPU's NUMA node.
    Numa = nic_policy::NUMA,
    /// Flows spread evenly over the NICs (egress bandwidth).
    Balance = nic_policy::BALANCE,
}

impl LocalNicsPolicy {
    /// As the hook's config holds it (`srap_common::local_nics::policy`).
    pub fn as_config(self) -> u32 {
        self as u32
    }
}

/// `--source-rules`: whether the agent only says which source rules the
/// NICs of `--local-nics numa|balance` need, or also installs them (and
/// removes them on detach and on a clean stop).
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum SourceRules {
    /// Say what is missing; change nothing.
    #[default]
    Check,
    /// Install each missing source rule and its table's route; remove them
    /// on detach.
    Install,
}

/// `--bond-members`: whether the plan balances flows over the members of
/// a bond the route leaves by.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BondMembers {
    /// Each flow on an even share of the bond's usable members, as well as
    /// on a free receiver CPU.
    #[default]
    Balance,
    /// Leave the members to the bond's hash: the receiver's CPUs only (the
    /// bond is still shown, with its members' counters).
    Ignore,
}

/// `--receiver-nics`: which of a receiver's addresses a steered connect
/// goes to.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
#[repr(u32)]
pub enum ReceiverNicsMode {
    /// The address the application asked for (the kernel's behaviour).
    #[default]
    Asked = srap_common::receiver_nics::mode::ASKED,
    /// The receiver's addresses that accept the port, in turn.
    Spread = srap_common::receiver_nics::mode::SPREAD,
}

impl ReceiverNicsMode {
    /// As the hook's config holds it (`srap_common::receiver_nics::mode`).
    pub fn as_config(self) -> u32 {
        self as u32
    }
}

/// What the binder does with MPTCP connections.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[repr(u32)]
pub enum MptcpMode {
    /// Left to the kernel: a subflow keeps the kernel's port, and the
    /// MPTCP programs are not loaded (nothing is verified or run for it).
    #[default]
    Off = mptcp::OFF,
    /// Every subflow steered to a receiver CPU of its own: the first at
    /// its connect, each further one at the bind its path manager makes,
    /// each released at its TCP close.
    Subflows = mptcp::SUBFLOWS,
    /// As `subflows`, and SRAP is the namespace's MPTCP path manager: a
    /// subflow from each `--local-iface` (or its address announced, for a
    /// connection this host accepted), every one but the reader's node's
    /// NIC's marked backup, following the reading thread as it moves;
    /// other cgroups' connections get the kernel's endpoints.
    FollowReader = mptcp::FOLLOW_READER,
}

impl MptcpMode {
    /// The number the hooks are loaded with (`LoadConfig::mptcp`).
    pub fn as_config(self) -> u32 {
        self as u32
    }
}

crate::setting::display_as_word!(
    PlacedEnds,
    LocalPlacement,
    LocalNicsPolicy,
    SourceRules,
    BondMembers,
    ReceiverNicsMode,
    MptcpMode,
);
