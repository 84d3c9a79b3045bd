//! What the sender agent reports about itself (`srap status --sender`):
//! every receiver it follows, the description version and grant it steers
//! with, and the binder's counters. Served on the sender agent's own
//! control socket ([`super::control`], default
//! [`DEFAULT_SENDER_CONTROL_PATH`]).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Where the sender agent listens unless told otherwise (`--control`):
/// not the receiver's path, so both agents can run on one host.
pub const DEFAULT_SENDER_CONTROL_PATH: &str = "/run/srap/sender.sock";

/// One snapshot of the sender agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SenderStatus {
    /// The steered cgroup.
    pub cgroup: String,
    /// The binder's pin directory.
    pub pin_dir: String,
    /// The binder's outcome counters, by name, in the binder's order.
    pub binder: Vec<(String, u64)>,
    /// Source ports reserved for the plan: 0 since the binder chooses by
    /// 4-tuple among the whole range (kept for older `srap` clients).
    pub reserved_ports: usize,
    pub receivers: Vec<ReceiverRow>,
}

/// One followed receiver agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverRow {
    /// `HOST:PORT` as given to `--peer`.
    pub peer: String,
    /// `connected`, `connecting` or `away`.
    pub link: String,
    /// Why it is away (the last attempt's error).
    pub reason: Option<String>,
    /// The description version the plan toward it was made with (`None`:
    /// no description yet, not steered toward).
    pub version: Option<u64>,
    /// The receiver addresses steered toward, with their binder rows.
    pub addresses: Vec<AddressRow>,
    /// The grant in force: its epoch and the granted CPUs (`None`: no
    /// grant, every CPU slot usable).
    pub grant: Option<GrantRow>,
    /// Steering toward it is paused (its landings contradict its
    /// description).
    pub paused: bool,
    /// Where the key of its description comes from, the learned model's
    /// revision and how far its landings back it, as it said (`None`: no
    /// description yet).
    #[serde(default)]
    pub key: Option<srap_common::rss::KeyProvenance>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressRow {
    pub addr: Option<IpAddr>,
    /// Row in the binder's per-receiver maps.
    pub row: u32,
    /// CPU slots the plan has toward it.
    pub slots: u32,
    /// Steered flows open toward it now.
    pub open_flows: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantRow {
    pub epoch: u64,
    pub cpus: Vec<u32>,
}
