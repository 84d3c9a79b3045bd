//! [`Status`]: what the receiver agent knows of where flows land, as served
//! on the control socket (`{"get":"status"}`) and read by `srap status`.
//!
//! Plain data with serde on both sides, so the agent and the CLI cannot
//! disagree on the format. Rates are computed over the last sample interval;
//! `packets` and `bytes` of queues and CPUs are counters since the agent
//! started (they never go down, which is what Prometheus wants).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// One snapshot of the receiver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The receiving interface (`--iface`).
    pub iface: String,
    /// Whether and how the receive observer runs (`observer` in the JSON of
    /// agents from before the name changed, still read).
    #[serde(alias = "observer")]
    pub observer: ObserverState,
    /// Version of the RSS description served to senders.
    pub rss_version: u64,
    /// Wall-clock time of the sample, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// How often the agent samples the observer.
    pub interval_ms: u64,
    /// A flow with no packet for this long is no longer active.
    pub idle_after_ms: u64,
    /// Active flows, all queues together.
    pub active_flows: usize,
    /// Receive rate of the active flows, all together.
    pub gbps: f64,
    /// One row per receive queue (every queue of the description, and any
    /// other the observer saw).
    pub queues: Vec<QueueRow>,
    /// One row per CPU that ran the observer for some flow.
    pub cpus: Vec<CpuRow>,
    /// One row per CPU that the description's `queue_cpu` gives the flows'
    /// observed queues (the CPU a real NIC's IRQ or RPS sends them to).
    pub rss_cpus: Vec<CpuRow>,
    /// Active flows, by observed queue then source.
    pub flows: Vec<FlowRow>,
    pub collisions: Collisions,
    pub accuracy: Accuracy,
    /// Whether recent flows land where the served description says (the
    /// closed loop's verdict, also sent to every sender).
    #[serde(default)]
    pub landings: Landings,
    /// Sender agents connected now.
    pub peers: Vec<PeerRow>,
    /// Which CPU a flow is received on: what `srap status` compares with
    /// the sender's plan and counts collisions by.
    #[serde(default)]
    pub receive_cpu: ReceiveCpu,
    /// Who may connect: keys, allow-list, or nothing (`--open`).
    #[serde(default)]
    pub access: Access,
    /// Where the served key comes from, and what the landings taught.
    #[serde(default)]
    pub learning: LearningRow,
    /// The NIC's own hash of the active flows against the served key.
    #[serde(default)]
    pub nic_hash: NicHashCounts,
    /// Every NIC served (`--iface`, in order), each with its own flows,
    /// CPUs and rate; the first is `iface`, whose flows the rest of this
    /// status describes. Empty from agents before several NICs.
    #[serde(default)]
    pub nics: Vec<NicRow>,
    /// Per listening TCP port, the served addresses that accept it (read
    /// from the kernel's sock_diag; what senders of protocol 8 are told).
    #[serde(default)]
    pub listeners: Vec<ListenerRow>,
}

/// One NIC the receiver serves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NicRow {
    pub name: String,
    /// Its addresses (not link-local).
    pub addrs: Vec<std::net::IpAddr>,
    /// Its NUMA node, when the platform says.
    pub numa_node: Option<u32>,
    pub link: srap_common::wire::NicLink,
    pub speed_mbps: Option<u32>,
    /// The version of its RSS description (`None`: it has none; `error`
    /// says why).
    pub rss_version: Option<u64>,
    /// Why it has no description or no observer.
    pub error: Option<String>,
    /// The receive observer's hook on it, when one runs.
    pub hook: Option<String>,
    /// The verifier's verdict on its description.
    pub landings: Landings,
    /// Its active flows (those to its addresses) and their rate.
    pub active_flows: usize,
    pub gbps: f64,
    /// The receive CPUs of its active flows, each once, ascending.
    pub cpus: Vec<u32>,
    /// The CPUs offered to senders' flows through it.
    pub offered: Vec<u32>,
}

/// The served addresses a listener on `port` accepts on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRow {
    pub port: u16,
    pub addrs: Vec<std::net::IpAddr>,
}

/// Active flows by what the NIC's own RSS hash (`skb->hash`, read by the tc
/// hook only) says of the served description: the hash `agree`s with the
/// model's Toeplitz hash of the flow's tuple, `differ`s from it (the key or
/// the hashed fields are not what the device uses), or there is `none`
/// (the hook does not read it, or the driver hands none over: `ethtool -K
/// DEV rxhash on`). Exact per flow, whatever the table, IRQs and CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicHashCounts {
    /// Whether the observer's hook reads the NIC's hash at all (tc ingress
    /// does; XDP and the socket hook do not).
    pub read: bool,
    pub agree: usize,
    pub differ: usize,
    pub none: usize,
}

/// Who the receiver serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// Ids of the pre-shared keys accepted (`--psk-file`; two during a
    /// rollover); empty when no key is asked for.
    pub keys: Vec<String>,
    /// Networks senders may connect from (`--allow`); empty: any.
    pub allow: Vec<String>,
    /// Listening beyond loopback with neither a key nor an allow-list,
    /// because `--open` said so: anyone who reaches the port is served.
    pub open: bool,
}

/// Which of a flow's two CPUs is its receive CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiveCpu {
    /// The CPU the observer ran on ([`FlowRow::cpu`], [`Status::cpus`]): on
    /// a device with RSS of its own, the CPU that processed the flow's
    /// packets (the IRQ's, or RPS's).
    #[default]
    Observed,
    /// The description's `queue_cpu` of the observed queue
    /// ([`FlowRow::rss_cpu`], [`Status::rss_cpus`]): the device has no RSS
    /// of its own (the lab's veth), so the CPUs the description names are
    /// emulated, one per queue, and the CPU the observer ran on is the
    /// machine's, which no plan is about.
    Emulated,
}

impl Status {
    /// One row per receive CPU (see [`ReceiveCpu`]).
    pub fn receive_cpus(&self) -> &[CpuRow] {
        match self.receive_cpu {
            ReceiveCpu::Observed => &self.cpus,
            ReceiveCpu::Emulated => &self.rss_cpus,
        }
    }

    /// Receive CPUs with more than one active flow.
    pub fn cpu_collisions(&self) -> usize {
        match self.receive_cpu {
            ReceiveCpu::Observed => self.collisions.cpus,
            ReceiveCpu::Emulated => self.collisions.rss_cpus,
        }
    }
}

impl FlowRow {
    /// The flow's receive CPU, on `basis` (None: its queue is unknown, or
    /// the description does not place it).
    pub fn receive_cpu(&self, basis: ReceiveCpu) -> Option<u32> {
        match basis {
            ReceiveCpu::Observed => Some(self.cpu),
            ReceiveCpu::Emulated => self.rss_cpu,
        }
    }
}

/// The receiver's key learning (see `srap_daemon::receiver::learning`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearningRow {
    /// Where the served key comes from (reported, the kernel's default,
    /// learned, unknown), in words.
    pub key_source: String,
    /// The same as a name (`reported`, `kernel-default`, `learned`,
    /// `unknown`): the label of `srap_key_source`.
    #[serde(default)]
    pub source: srap_common::rss::KeySource,
    /// Landings taken since learning last started over.
    pub landings: u32,
    /// Landings that contradicted the others.
    pub conflicts: u32,
    /// Independent equations over the key bits they gave.
    pub rank: u32,
    /// Whether the discovered key satisfies every landing.
    pub candidate_agrees: bool,
    /// The learned model's revision: grows each time a newly learned key
    /// is served or one is withdrawn (0: nothing learned this run).
    #[serde(default)]
    pub revision: u32,
    /// How far the landings back the served key: what senders are told
    /// with the description.
    #[serde(default)]
    pub confidence: srap_common::rss::KeyConfidence,
    /// `sender → receiver:port` whose every source port the landings
    /// determine: where the served key is exact.
    pub covered: Vec<String>,
    /// The learner's last word (confirmed, learned, why not).
    pub note: String,
}

/// The observer's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverState {
    /// The hook it runs on (`xdp (driver)`, `tc ingress (tcx)`, …), when it runs.
    pub hook: Option<String>,
    /// Why it does not run (`--no-verify`, or the attach error).
    pub error: Option<String>,
    /// What it runs without (a kernel without sock_diag for TCP, say), and
    /// what that costs.
    #[serde(default)]
    pub limits: Vec<ObserverLimit>,
}

/// Something the observer runs without.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverLimit {
    /// A short name (`sock_diag`), the label of `srap_observer_limited`.
    pub missing: String,
    /// What exactly is missing, and what it costs.
    pub detail: String,
}

/// Load of one receive queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueRow {
    pub queue: u32,
    /// The CPU the description's `queue_cpu` gives this queue.
    pub cpu: Option<u32>,
    /// Active flows whose last packet arrived here.
    pub flows: usize,
    pub gbps: f64,
    /// Counted since the agent started.
    pub packets: u64,
    /// Counted since the agent started.
    pub bytes: u64,
    /// More than one active flow.
    pub collision: bool,
}

/// Load of one CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuRow {
    pub cpu: u32,
    pub flows: usize,
    pub gbps: f64,
    pub packets: u64,
    pub bytes: u64,
    pub collision: bool,
}

/// One active flow (src is the sender).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Receive queue of the last packet (None: the hook cannot tell).
    pub queue: Option<u32>,
    /// CPU that ran the observer for the last packet.
    pub cpu: u32,
    /// `queue_cpu` of the observed queue.
    pub rss_cpu: Option<u32>,
    /// Queue and CPU the RSS model computes for the 4-tuple.
    pub predicted_queue: Option<u32>,
    pub predicted_cpu: Option<u32>,
    /// The receiver CPU a sender's plan report gave this source port.
    pub planned_cpu: Option<u32>,
    /// Rate over the last interval (0 on the first sample of a flow).
    pub gbps: f64,
    /// Coefficient of variation (σ/μ) of the recent rates; None until two
    /// rates are known or while the mean is zero.
    pub rate_cov: Option<f64>,
    pub packets: u64,
    pub bytes: u64,
    /// Packets that arrived on another (queue, CPU) than the packet before.
    pub moves: u32,
    /// A sender agent's own connection to this receiver agent (its
    /// keepalives and plan reports, from outside any steered cgroup):
    /// listed, but not counted in the queues' and CPUs' loads nor in
    /// collisions, which are about the workload's flows.
    #[serde(default)]
    pub agent_link: bool,
    /// The NIC's own RSS hash of the flow's first packet (tc hook only;
    /// None: no hash, see [`NicHashCounts`]).
    #[serde(default)]
    pub nic_hash: Option<u32>,
    /// Whether `nic_hash` equals the model's Toeplitz hash of the 4-tuple
    /// (None: no hash or no model).
    #[serde(default)]
    pub nic_hash_agrees: Option<bool>,
}

/// CPUs and queues with more than one active flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collisions {
    pub queues: usize,
    /// By the CPU the observer ran on.
    pub cpus: usize,
    /// By `queue_cpu` of the observed queue.
    pub rss_cpus: usize,
}

/// The closed loop's verdict on the served description.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landings {
    pub verdict: srap_common::wire::LandingVerdict,
    /// Of the `judged` most recent flows, `matched` landed on the queue the
    /// description computes.
    pub matched: u32,
    pub judged: u32,
}

/// How often flows land where they were expected to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Observed queue == the model's queue, over flows with a known queue.
    pub queue: Ratio,
    /// The receive CPU ([`Status::receive_cpu`]) == the sender's planned
    /// CPU, over flows a sender reported a plan for.
    pub plan: Ratio,
}

/// `matched` of `total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub matched: usize,
    pub total: usize,
}

impl Ratio {
    /// matched / total, None when there is nothing to judge.
    pub fn value(&self) -> Option<f64> {
        (self.total > 0).then(|| self.matched as f64 / self.total as f64)
    }
}

/// A sender's grant on one NIC of the receiver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicGrantRow {
    pub nic: String,
    /// The CPUs granted there, as a cpulist (`2-3`).
    pub cpus: String,
}

/// A connected sender agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRow {
    pub addr: String,
    /// What it said it runs, e.g. `srap-agent 0.1.0`.
    pub agent: String,
    /// When it connected, ms since the Unix epoch.
    pub connected_unix_ms: u64,
    /// When its last plan report arrived, ms since the Unix epoch.
    pub last_plan_unix_ms: Option<u64>,
    /// The description version its last plan was made against.
    pub plan_version: Option<u64>,
    /// The receiver CPUs granted to its flows, as a cpulist (`0-4`).
    #[serde(default)]
    pub granted: String,
    /// The open flows it reported.
    #[serde(default)]
    pub flows: u32,
    /// The epoch of its grant, and whether its binder applied it.
    #[serde(default)]
    pub grant_epoch: u64,
    #[serde(default)]
    pub grant_applied: bool,
    /// Its grant on each NIC served, when there are several (protocol 9
    /// senders are told each; an older one holds the first NIC's only).
    #[serde(default)]
    pub granted_nics: Vec<NicGrantRow>,
    /// The id of the pre-shared key it authenticated with (during a key
    /// rollover: which senders still use the old one).
    #[serde(default)]
    pub key: Option<String>,
}
