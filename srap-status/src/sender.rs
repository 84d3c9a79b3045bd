//! What the sender agent reports about itself (`srap status --sender`):
//! every receiver it follows, the description version and grant it steers
//! with, and the binder's counters. Served on the sender agent's own
//! control socket ([`super::control`], default
//! [`DEFAULT_SENDER_CONTROL_PATH`]).

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
};

use serde::{Deserialize, Serialize};
use srap_common::wire::LandingVerdict;

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
    /// The binder's outcome counters, by name, in the binder's order
    /// (every one, zero or not).
    pub binder: Vec<(String, u64)>,
    /// The binds the kernel refused (`bind_refused`), by errno: what the
    /// kernel said, e.g. `Cannot assign requested address (os error 99)`.
    #[serde(default)]
    pub bind_errnos: Vec<(String, u64)>,
    /// Source ports reserved for the plan: 0 since the binder chooses by
    /// 4-tuple among the whole range (kept for older `srap` clients).
    pub reserved_ports: usize,
    pub receivers: Vec<ReceiverRow>,
    /// This host's own NIC, with `--steer local|both` (`None`: the
    /// receivers' CPUs only).
    #[serde(default)]
    pub local: Option<LocalRow>,
    /// The steered cgroup's open connections, each with where it lands at
    /// both ends (with `--steer local|both`, where the socket hook sees
    /// them).
    #[serde(default)]
    pub flows: Vec<SenderFlowRow>,
    /// The MPTCP connections among `flows`, each with its subflows.
    #[serde(default)]
    pub mptcp: Vec<MptcpRow>,
    /// The occupancy audit: what it checked and repaired since the agent
    /// started.
    #[serde(default)]
    pub occupancy: OccupancyRow,
    /// The bonds the routes toward the receivers leave by, each member with
    /// its flows and what its own counters say it sent.
    #[serde(default)]
    pub bonds: Vec<BondRow>,
    /// This host's NICs: every interface holding an address a flow could
    /// leave from, and every `--local-iface`, by name (empty: an older
    /// agent).
    #[serde(default)]
    pub local_nics: Vec<LocalNicRow>,
    /// `--local-nics`: `route`, `numa` or `balance` (empty: an older
    /// agent).
    #[serde(default)]
    pub local_nics_policy: String,
    /// Re-plans made because this host's NICs changed (a link down or up,
    /// an address added or removed, a NIC added or gone) since start.
    #[serde(default)]
    pub local_nic_replans: u64,
    /// What this host's routing lacks for flows to leave and come back by
    /// the NIC of their source address (with `--local-nics numa|balance`
    /// and several `--local-iface`), and the source rules the agent
    /// installed (an older agent: not checked).
    #[serde(default)]
    pub local_routing: LocalRoutingRow,
    /// Receiver addresses a moved connect's SYN got no answer from
    /// (`--receiver-nics spread`): new connects keep the address asked for
    /// until each is re-admitted (empty: none, or an older agent).
    #[serde(default)]
    pub spread_failing: Vec<SpreadFailingRow>,
    /// The binder's start: how long from the agent's start of the binder
    /// to its hooks attached, and what each program loaded cost the
    /// kernel's verifier (empty: an older agent).
    #[serde(default)]
    pub start: StartRow,
    /// SRAP as the namespace's MPTCP path manager (`--mptcp
    /// follow-reader`); `None` in the other modes (and from an older
    /// agent).
    #[serde(default)]
    pub path_manager: Option<PathManagerRow>,
}

/// The path manager that follows each MPTCP connection's reader: what it
/// has done since it started, and each connection it follows now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathManagerRow {
    /// The namespace's path manager before SRAP's (`kernel`,
    /// `userspace`): what a clean stop and `srap-agent detach` restore.
    pub before: String,
    /// The namespace's MPTCP connections now, SRAP's or not.
    pub connections: usize,
    /// Reader moves followed, backup flags changed, subflows asked for
    /// and subflows or announcements the kernel refused, since start.
    pub moves: u64,
    pub flips: u64,
    pub subflows_made: u64,
    pub refused: u64,
    /// The connections whose reader SRAP follows (of the steered cgroup,
    /// or open when the agent started), by token.
    pub followed: Vec<FollowedRow>,
}

impl PathManagerRow {
    /// Followed connections with no subflow on their reader's node.
    pub fn unplaced(&self) -> usize {
        self.followed
            .iter()
            .filter(|f| f.unplaced.is_some())
            .count()
    }
}

/// One followed MPTCP connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowedRow {
    /// The connection's local token, as `ss -tni` prints it.
    pub token: u32,
    /// This host accepted it (SRAP announces its NICs' addresses; the
    /// peer makes the subflows).
    pub server_side: bool,
    /// The NUMA node that reads it now; `None` until it has been read.
    pub reader_node: Option<u32>,
    /// Reader moves followed, and how long the last one took: from the
    /// first 100 ms sample read on the new node to its flags sent.
    pub moves: u64,
    pub last_move_ms: Option<u64>,
    /// Its subflows, each with its backup flag and this host's NIC.
    pub subflows: Vec<FollowedSubflowRow>,
    /// Why no subflow is on the reader's node, while none is.
    pub unplaced: Option<String>,
}

/// A subflow of a [`FollowedRow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowedSubflowRow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Marked backup: the peer sends on it only while no other subflow
    /// is up.
    pub backup: bool,
    /// This host's NIC holding `local`, of the followed NICs.
    pub nic: Option<String>,
}

/// How the binder started: what was loaded for these settings and how
/// long until steering was active.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRow {
    /// From planning to the last hook attached, in milliseconds.
    pub to_steering_ms: u64,
    /// Each program loaded for these settings, in attach order.
    pub programs: Vec<ProgramRow>,
}

/// One program of the binder, as the kernel verified it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramRow {
    pub name: String,
    /// Instructions the kernel's verifier walked (`verified_insns`; 0:
    /// a kernel before 5.16 does not say).
    pub verified_insns: u32,
    /// How long its load took, in milliseconds.
    pub load_ms: u64,
}

/// A receiver address marked failing: a connect toward `asked` sent to
/// `used` got no answer to its SYN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpreadFailingRow {
    /// The address the application asked for.
    pub asked: IpAddr,
    /// The address its SYN went to, which no connect is sent to now.
    pub used: IpAddr,
    /// The port asked for.
    pub port: u16,
    /// Moved connects whose SYN got no answer there while marked.
    pub syns: u32,
    /// Milliseconds until it is re-admitted.
    pub readmit_in_ms: u64,
}

/// The routing check of this host's NICs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRoutingRow {
    /// Whether it ran (false with `--local-nics route` or one NIC).
    #[serde(default)]
    pub checked: bool,
    /// `--source-rules`: `check` or `install`.
    #[serde(default)]
    pub source_rules: String,
    /// Each thing missing, with the command that fixes it.
    #[serde(default)]
    pub findings: Vec<String>,
    /// The source rules the agent installed, as commands.
    #[serde(default)]
    pub installed: Vec<String>,
    /// Why a source rule could not be installed.
    #[serde(default)]
    pub not_installed: Vec<String>,
}

impl SenderStatus {
    /// Counts each open flow (`flows`) on the NIC that holds its source
    /// address, into `local_nics`: the NIC it leaves by when the route
    /// follows the source address. A flow whose address no NIC holds is
    /// counted on none.
    pub fn count_local_nic_flows(&mut self) {
        for nic in &mut self.local_nics {
            nic.flows = self
                .flows
                .iter()
                .filter_map(|f| f.src)
                .filter(|src| nic.addresses.contains(&src.ip()))
                .count() as u32;
        }
    }
}

/// One of this host's NICs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalNicRow {
    pub name: String,
    /// The NUMA node of its device (a bond's: its members' when they
    /// agree); `None` when unknown, never 0 for unknown.
    #[serde(default)]
    pub node: Option<u32>,
    /// Its addresses a flow could leave from.
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// Operationally up.
    #[serde(default)]
    pub up: bool,
    /// A bond's members (empty: not a bond).
    #[serde(default)]
    pub members: Vec<String>,
    /// Given with `--local-iface`.
    #[serde(default)]
    pub given: bool,
    /// Its receive queues' CPUs (queue → CPU), when given and described.
    #[serde(default)]
    pub queue_cpu: Option<Vec<u32>>,
    /// The steered cgroup's open flows whose source address it holds.
    #[serde(default)]
    pub flows: u32,
    /// With flows placed on this host's queues (`--steer local|both`):
    /// the NIC whose RSS description places the flows from its addresses
    /// (its own, or with `fallback` the first `--local-iface`'s;
    /// `--local-rss` for a file). `None`: not placed, or an older agent.
    #[serde(default)]
    pub placed_with: Option<String>,
    /// Why its flows are placed with another NIC's description.
    #[serde(default)]
    pub fallback: Option<String>,
}

/// A bond on the route toward a receiver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BondRow {
    pub name: String,
    /// `balance-xor`, `802.3ad`, …
    pub mode: String,
    /// `xmit_hash_policy` as sysfs names it.
    pub policy: String,
    /// The plan places each flow on a member too.
    pub balanced: bool,
    /// Why it does not, when it does not.
    #[serde(default)]
    pub why_not: Option<String>,
    /// The members' own counters against the driver's hash, at the last
    /// sample that sent enough to judge: `agree`, or `contradict: …`
    /// (which pauses the balancing); `None` before any.
    #[serde(default)]
    pub counters: Option<String>,
    /// Samples whose members' counters were judged (agree or contradict)
    /// since the agent started: a reader that saw it rise knows
    /// `counters` speaks of flows since, not of an older round.
    #[serde(default)]
    pub counters_judged: u64,
    /// Every member in enslavement order.
    pub members: Vec<MemberRow>,
}

/// One member of a bond.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRow {
    pub name: String,
    /// It can send now (up; in 802.3ad, distributing in the active
    /// aggregator).
    pub usable: bool,
    /// The steered cgroup's open connections the driver's hash puts on it.
    pub flows: u32,
    /// Its own `tx_bytes` counter.
    pub tx_bytes: u64,
    /// Bytes a second it sent since the agent's previous status sample
    /// (its counter's rise), `None` on the first.
    #[serde(default)]
    pub tx_bytes_per_s: Option<u64>,
}

/// The occupancy audit of a sender agent: at every interval it compares
/// the binder's per-CPU flow counts with its socket records and the
/// kernel's open sockets, and repairs what stays wrong. A repair is a bug
/// report: on a healthy binder `repaired` stays 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccupancyRow {
    /// Audits run.
    pub audits: u64,
    /// Repairs made (`occupancy_repaired`): `stale_records` +
    /// `count_mismatches`.
    pub repaired: u64,
    /// Socket records whose socket was closed, forgotten and their slots
    /// freed.
    pub stale_records: u64,
    /// Slot counts set to the records that hold them.
    pub count_mismatches: u64,
    /// The last repair, as the agent logged it.
    #[serde(default)]
    pub last: Option<String>,
}

/// This host's own NIC as the plan and the closed loop see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRow {
    /// `local` or `both`.
    pub steer: String,
    /// The interface (`--local-iface`) or file (`--local-rss`).
    pub nic: String,
    /// The CPUs offered to steered flows, NUMA node first.
    pub cpus: Vec<u32>,
    /// The socket hook watches where connections land (false: steering
    /// unverified).
    pub watching: bool,
    /// Whether recent connections land where this host's description says.
    pub verdict: LandingVerdict,
    /// Of the `judged` most recent connections, `matched` landed on the
    /// queue the description computes.
    pub matched: u32,
    pub judged: u32,
    /// Local steering is paused (the landings contradict the description).
    pub paused: bool,
    /// Where the key planned with comes from (the driver, the kernel's
    /// default, learned from this host's own landings), the learned
    /// model's revision and how far the landings back it: the receiver's
    /// protocol 6 fields, for this host's NIC (`None`: an older agent).
    #[serde(default)]
    pub key: Option<srap_common::rss::KeyProvenance>,
    /// The version of this host's description the landings are judged
    /// against: 1, then +1 for every model a learned key made.
    #[serde(default)]
    pub version: u64,
    /// `--local-placement`: `spread` or `reader` (empty: an older agent).
    #[serde(default)]
    pub placement: String,
}

/// One MPTCP connection of the steered cgroup: its subflows, grouped by the
/// token the kernel gives each of them (sock_diag's `mptcp` upper-layer
/// attribute, what `ss -tni` prints as `token:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MptcpRow {
    /// The connection's local token.
    pub token: u32,
    /// Its open subflows, the first one included, by local address id.
    pub subflows: Vec<MptcpSubflowRow>,
}

impl MptcpRow {
    /// Receiver CPUs its subflows were seen on, or planned for where not
    /// seen, each once: as many as subflows when none shares a CPU.
    pub fn receiver_cpus(&self) -> BTreeSet<u32> {
        self.subflows
            .iter()
            .filter_map(|s| s.receiver_cpu_seen.or(s.receiver_cpu_planned))
            .collect()
    }
}

/// One subflow of an [`MptcpRow`]: its tuple, address ids, the receiver CPU
/// planned and seen (as its row in `flows` says), and the NIC of this host
/// that holds its source address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MptcpSubflowRow {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The address ids MPTCP gave each end (0: the first subflow's).
    pub local_id: u8,
    pub remote_id: u8,
    pub receiver_cpu_planned: Option<u32>,
    pub receiver_cpu_seen: Option<u32>,
    /// Of `local_nics`; `None` when no NIC listed there holds the address.
    pub local_nic: Option<String>,
}

/// One open connection of the steered cgroup at both ends: the CPU each
/// NIC's description plans for its tuple, and the CPU it was seen on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SenderFlowRow {
    /// This host's address and port.
    pub src: Option<SocketAddr>,
    /// The server's address and port.
    pub dst: Option<SocketAddr>,
    /// The receiver address the application connected to, when the hook
    /// sent the flow to another address of that receiver
    /// (`--receiver-nics spread`; `dst` is the one used). `None`: the
    /// address asked for is `dst`'s.
    #[serde(default)]
    pub asked: Option<std::net::IpAddr>,
    /// The receiver's CPU by its description (`None`: not planned for it).
    pub receiver_cpu_planned: Option<u32>,
    /// The receiver's CPU as its observer saw it (`None`: not reported;
    /// `receiver_seen_unknown` says why).
    pub receiver_cpu_seen: Option<u32>,
    /// The receive queue its observer saw.
    #[serde(default)]
    pub receiver_queue_seen: Option<u32>,
    /// Both receiver CPUs are known and differ: the flow is not where it
    /// was planned.
    #[serde(default)]
    pub receiver_cpu_off_plan: bool,
    /// Why `receiver_cpu_seen` is unknown (an older receiver, a flow its
    /// observer has not reported, no receiver agent).
    #[serde(default)]
    pub receiver_seen_unknown: Option<String>,
    /// This host's queue and CPU by its description, for the reverse tuple.
    pub local_queue_planned: Option<u32>,
    pub local_cpu_planned: Option<u32>,
    /// The queue the handshake's answer arrived on (`None`: the device
    /// recorded none) and that queue's CPU by the description.
    pub local_queue_seen: Option<u32>,
    pub local_cpu_seen: Option<u32>,
    /// The CPU that processed it (after RPS): where this host receives
    /// the flow's data.
    pub local_softirq_cpu: Option<u32>,
    /// The CPU of the thread that opened it, at `connect()` (`None`: not
    /// recorded, an older agent).
    #[serde(default)]
    pub connecting_cpu: Option<u32>,
}

impl SenderFlowRow {
    /// Received on the CPU of the thread that opened it: `None` when
    /// either is unknown.
    pub fn on_reader(&self) -> Option<bool> {
        Some(self.connecting_cpu? == self.local_softirq_cpu?)
    }
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
    /// Every NIC the receiver serves, as it said (protocol 8).
    #[serde(default)]
    pub nics: Vec<ReceiverNicRow>,
    /// Why `nics` is empty (an older receiver, none said yet, away).
    #[serde(default)]
    pub nics_unknown: Option<String>,
    /// Per listening port of the receiver, its addresses that accept it.
    #[serde(default)]
    pub ports: Vec<crate::snapshot::ListenerRow>,
}

/// One NIC of a followed receiver, as the receiver describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverNicRow {
    pub name: String,
    pub addrs: Vec<IpAddr>,
    pub numa_node: Option<u32>,
    pub link: srap_common::wire::NicLink,
    pub speed_mbps: Option<u32>,
    /// Its RSS queue → CPU (`None`: it described no RSS).
    pub queue_cpu: Option<Vec<u32>>,
    /// Its indirection table's size (0: no RSS described).
    pub indir_entries: usize,
    /// Its verifier's verdict (`None`: no observer on it).
    pub verdict: Option<LandingVerdict>,
    pub matched: u32,
    pub judged: u32,
    /// The CPUs offered through it.
    pub cpus: Vec<u32>,
    /// This sender's grant of its CPUs, when the receiver grants each NIC
    /// apart (protocol 9; `None`: the receiver's one grant covers it).
    #[serde(default)]
    pub granted: Option<Vec<u32>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An older agent's snapshot (no NICs, no policy) still reads, and a
    /// NIC row of a newer one round-trips with an unknown node as null.
    #[test]
    fn local_nics_are_optional_in_the_json_and_round_trip() {
        let old = r#"{"cgroup":"/sys/fs/cgroup/srap","pin_dir":"/sys/fs/bpf/srap",
            "binder":[],"reserved_ports":0,"receivers":[]}"#;
        let status: SenderStatus = serde_json::from_str(old).expect("an older snapshot reads");
        assert!(status.local_nics.is_empty() && status.local_nics_policy.is_empty());
        assert_eq!(
            status.local_routing,
            LocalRoutingRow::default(),
            "not checked"
        );
        let routing = LocalRoutingRow {
            checked: true,
            source_rules: "install".into(),
            installed: vec!["ip rule add from 10.0.2.1 table 23043".into()],
            ..LocalRoutingRow::default()
        };
        let text = serde_json::to_string(&routing).expect("json");
        assert_eq!(
            serde_json::from_str::<LocalRoutingRow>(&text).expect("reads"),
            routing
        );
        let row = LocalNicRow {
            name: "veth0".into(),
            addresses: vec!["10.0.0.1".parse().expect("ip")],
            up: true,
            ..LocalNicRow::default()
        };
        let text = serde_json::to_string(&row).expect("json");
        assert!(text.contains("\"node\":null"), "{text}");
        assert_eq!(
            serde_json::from_str::<LocalNicRow>(&text).expect("reads"),
            row
        );
    }

    #[test]
    fn flows_count_on_the_nic_holding_their_source_address() {
        let flow = |src: &str| SenderFlowRow {
            src: src.parse().ok(),
            ..SenderFlowRow::default()
        };
        let nic = |name: &str, ip: &str| LocalNicRow {
            name: name.into(),
            addresses: vec![ip.parse().expect("ip")],
            ..LocalNicRow::default()
        };
        let mut status = SenderStatus {
            flows: vec![
                flow("10.0.0.1:40000"),
                flow("10.1.0.1:40001"),
                flow("10.1.0.1:40002"),
                flow("10.7.0.1:40003"),
            ],
            local_nics: vec![nic("eth0", "10.0.0.1"), nic("eth1", "10.1.0.1")],
            ..SenderStatus::default()
        };
        status.count_local_nic_flows();
        let counts: Vec<u32> = status.local_nics.iter().map(|n| n.flows).collect();
        assert_eq!(counts, [1, 2]);
    }
}
