//! The receiver-granted CPU slots set-up, shared by `tests/grants.rs` and
//! `benches/grants.rs`: one receiver namespace (a 16-queue description, a
//! bridge, a receiver agent) reached by sender namespaces, each with its own
//! `srap-agent sender --peer` and, for the test, a workload under
//! `srap exec`.
//!
//! Agents and workloads are processes killed by PID in drop guards; every
//! sender's binder is detached; the namespaces (and the bridge and veths in
//! them) go last. Addresses are a leased `10.199.<subnet>.0/24` on the bridge: the
//! receiver is `.1`, sender `i` is `.10 + i`.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    path::PathBuf,
    time::Duration,
};

use srap_common::{
    binder::{MAX_SLOTS, SlotGrant},
    rss::{RssDescription, RssModel, embedded_default},
};
use srap_harness::{
    Bridge, ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts, keyfile::KeyFile, landings,
    poll_until, unique_name,
};

use crate::{built_binary, flows::Server, test_workload::Workload};

/// Queues (one CPU each) of the receiver's description.
pub const QUEUES: u32 = 16;
/// The port the workload connects to (and senders report demand for).
pub const DPORT: u16 = 5201;
const PEER_PORT: u16 = 7447;
/// Bound on every wait: an agent's start, a settle, a workload's answer.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A 16-queue NIC, one CPU per queue.
fn description() -> RssDescription {
    RssDescription {
        indir: (0..128).map(|i| i % QUEUES).collect(),
        queue_cpu: Some((0..QUEUES).collect()),
        ..embedded_default()
    }
}

/// One sender host's agent and workload. Field order is drop order: the
/// workload before the agent (whose drop detaches its binder).
pub struct Sender {
    pub workload: Option<Workload>,
    agent: SenderAgent,
}

impl Sender {
    /// Kills the agent (its binder stays attached through its pins).
    pub fn stop_agent(&mut self) {
        self.agent.kill();
    }

    /// The agent's output so far.
    pub fn log(&self) -> String {
        self.agent.log().text()
    }

    /// The grant pinned for receiver 0 (this set-up's only receiver
    /// address), read from the binder's `SRAP_GRANTS` map.
    pub fn pinned_grant(&self) -> Option<SlotGrant> {
        self.agent
            .grant(srap_common::binder::FIRST_RECEIVER_ROW)
            .ok()
    }

    /// Stops the workload and the agent, detaches its binder and removes
    /// its pins and state file, so the agent can start again as a new
    /// sender.
    pub fn detach(&mut self) {
        drop(self.workload.take());
        self.agent.reset();
    }

    /// Its agent's control socket (`srap status --sender --control`).
    pub fn control(&self) -> PathBuf {
        self.agent.control()
    }
}

/// The slots `grant` allows (none without an active grant).
pub fn granted_slots(grant: &SlotGrant) -> BTreeSet<u32> {
    if grant.active == 0 {
        return BTreeSet::new();
    }
    (0..MAX_SLOTS).filter(|s| grant.allows(*s)).collect()
}

/// The receiver namespace (the hub of a bridge) with its agent and the
/// workload's server, and the sender hosts on the bridge. Field order is
/// drop order: the senders (detached) first, the namespaces last.
pub struct Cluster {
    pub senders: Vec<Sender>,
    receiver: ReceiverAgent,
    server: Server,
    model: RssModel,
    bridge: Bridge,
    /// The key the receiver asks every sender for.
    key: KeyFile,
}

impl Cluster {
    /// The receiver namespace on a leased subnet's `.1`, its agent
    /// listening. Not a `Default`: it makes namespaces and starts an agent.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let bridge = Bridge::new().expect("the receiver's namespace and bridge");
        let desc = description();
        let key = KeyFile::create(
            std::env::temp_dir().join(format!("srap-test-{}.psk", unique_name("g"))),
        )
        .expect("a key file");
        let receiver = ReceiverAgent::start(
            &bridge.hub,
            ReceiverOpts::new(
                built_binary("srap-agent"),
                "br0",
                SocketAddr::new(bridge.hub_ip(), PEER_PORT),
            )
            .rss(desc.clone())
            .no_verify()
            .arg("--psk-file")
            .arg(key.path()),
        )
        .expect("the receiver agent");
        let server = Server::bind(
            &bridge.hub,
            SocketAddr::new(bridge.hub_ip(), DPORT),
            TIMEOUT,
        );
        Self {
            senders: Vec::new(),
            receiver,
            server,
            model: RssModel::from_description(&desc).expect("model"),
            bridge,
            key,
        }
    }

    /// The key file the receiver asks senders for (`--psk-file`).
    pub fn key(&self) -> &KeyFile {
        &self.key
    }

    /// The receiver agent (its log, its peer address).
    pub fn receiver(&self) -> &ReceiverAgent {
        &self.receiver
    }

    /// Sender host `i`'s namespace.
    pub fn host(&self, i: usize) -> &srap_harness::NetNs {
        self.bridge.host(i)
    }

    /// Sender host `i`'s address on the bridge.
    pub fn host_ip(&self, i: usize) -> IpAddr {
        self.bridge.host_ip(i)
    }

    /// The receiver's address on the bridge.
    pub fn receiver_ip(&self) -> IpAddr {
        self.bridge.hub_ip()
    }

    /// The receiver agent's control socket (for `srap status --control`).
    pub fn control(&self) -> PathBuf {
        self.receiver.control()
    }

    /// A sender namespace on the bridge, with no agent yet; returns its
    /// index.
    pub fn add_host(&mut self) -> usize {
        let i = self.bridge.add_host().expect("a sender host on the bridge");
        let opts = SenderOpts::new(built_binary("srap-agent"))
            .peer(self.receiver.peer())
            .arg("--psk-file")
            .arg(self.key.path())
            .report_port(DPORT);
        self.senders.push(Sender {
            workload: None,
            agent: SenderAgent::new(self.bridge.host(i), opts).expect("a sender agent"),
        });
        i
    }

    /// Starts sender `i`'s agent, following the receiver, and waits until
    /// it steers (its binder attached, its first grant asked for).
    pub fn start_agent(&mut self, i: usize) {
        if let Err(err) = self.senders[i].agent.launch() {
            panic!(
                "sender {i} did not start: {err:#}\nthe receiver's log:\n{}",
                self.receiver.log().tail()
            );
        }
    }

    /// Sender `i`'s workload, under `srap exec` in its cgroup (test
    /// binaries only: the workload is the test binary re-run).
    pub fn start_workload(&mut self, i: usize) {
        let dst = SocketAddr::new(self.receiver_ip(), DPORT);
        let sender = &mut self.senders[i];
        sender.workload = Some(Workload::spawn(
            self.bridge.host(i),
            Some(sender.agent.cgroup()),
            dst,
        ));
    }

    /// A sender host with its agent and workload running.
    pub fn add_sender(&mut self) -> usize {
        let i = self.add_host();
        self.start_agent(i);
        self.start_workload(i);
        i
    }

    /// The receiver agent's view of its peers (`srap status --once --json`).
    pub fn peers(&self) -> Vec<serde_json::Value> {
        let out = std::process::Command::new(built_binary("srap"))
            .args(["status", "--once", "--json", "--control"])
            .arg(self.receiver.control())
            .output()
            .expect("run srap status");
        if !out.status.success() {
            eprintln!(
                "srap status failed: {}\nreceiver log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.receiver.log().tail()
            );
            return Vec::new();
        }
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("srap status --json");
        status["peers"].as_array().cloned().unwrap_or_default()
    }

    /// Prints every sender's buffered log (on a failed wait).
    fn print_sender_logs(&self) {
        for (i, s) in self.senders.iter().enumerate() {
            eprintln!("sender {i} log:\n{}", s.log());
        }
    }

    /// Waits until `n` senders are connected, have applied their latest
    /// grant, and have reported `flows` open flows in all.
    pub fn wait_settled(&self, n: usize, flows: u64) -> Vec<serde_json::Value> {
        self.wait_settled_among(|_| true, n, flows)
    }

    /// [`Cluster::wait_settled`] over the peers `among` accepts (the
    /// receiver's status rows) only.
    pub fn wait_settled_among(
        &self,
        among: impl Fn(&serde_json::Value) -> bool,
        n: usize,
        flows: u64,
    ) -> Vec<serde_json::Value> {
        poll_until(TIMEOUT, Duration::from_millis(20), || {
            let peers: Vec<serde_json::Value> = self.peers().into_iter().filter(&among).collect();
            let settled = peers.len() == n
                && peers.iter().all(|p| p["grant_applied"] == true)
                && peers
                    .iter()
                    .filter_map(|p| p["flows"].as_u64())
                    .sum::<u64>()
                    == flows;
            if settled {
                ControlFlow::Break(peers)
            } else {
                ControlFlow::Continue(peers)
            }
        })
        .unwrap_or_else(|peers| {
            self.print_sender_logs();
            panic!("grants did not settle for {n} senders and {flows} flows: {peers:#?}")
        })
    }

    /// Waits (polling every `poll`, at most [`TIMEOUT`]) until the pinned
    /// grant maps of the senders `running` hold idle senders' balanced
    /// grants: each active, pairwise disjoint, together every slot of the
    /// 16 CPUs, sizes within one of each other. Every sender plans from the
    /// same description, so a slot names the same CPU in each.
    pub fn wait_pinned_balanced(&self, running: &[usize], poll: Duration) {
        let done = poll_until(TIMEOUT, poll, || {
            let grants: Vec<BTreeSet<u32>> = running
                .iter()
                .map(|i| {
                    self.senders[*i]
                        .pinned_grant()
                        .map(|g| granted_slots(&g))
                        .unwrap_or_default()
                })
                .collect();
            if balanced(&grants) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(grants)
            }
        });
        if let Err(grants) = done {
            self.print_sender_logs();
            panic!("pinned grants of senders {running:?} not balanced: {grants:?}");
        }
    }

    /// Sender `i` opens `n` flows; returns the receiver CPUs they land on.
    pub fn open(&mut self, i: usize, n: usize) -> Vec<u32> {
        let opened = self.senders[i].workload.as_mut().expect("workload").open(n);
        let accepted = self.server.accept_peers(n);
        let ports: BTreeSet<u16> = accepted.iter().map(SocketAddr::port).collect();
        assert_eq!(
            ports,
            opened.iter().copied().collect(),
            "the workload's own flows"
        );
        let server = SocketAddr::new(self.receiver_ip(), DPORT);
        landings(&self.model, &accepted, server)
            .expect("same-family tuples")
            .iter()
            .map(|landing| landing.cpu)
            .collect()
    }
}

/// Idle senders' grants: non-empty, disjoint, covering all [`QUEUES`]
/// slots, sizes within one.
fn balanced(grants: &[BTreeSet<u32>]) -> bool {
    let all: BTreeSet<u32> = grants.iter().flatten().copied().collect();
    let sizes: Vec<usize> = grants.iter().map(BTreeSet::len).collect();
    let (max, min) = (
        sizes.iter().max().copied().unwrap_or(0),
        sizes.iter().min().copied().unwrap_or(0),
    );
    min > 0
        && max - min <= 1
        && sizes.iter().sum::<usize>() == all.len()
        && all.len() == QUEUES as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        cpus.into_iter().collect()
    }

    #[test]
    fn balanced_means_disjoint_covering_and_even() {
        assert!(balanced(&[set(0..6), set(6..11), set(11..16)]));
        assert!(balanced(&[set(0..4), set(4..8), set(8..12), set(12..16)]));
        // The three-sender grants while a fourth has none yet.
        assert!(!balanced(&[set(0..6), set(6..11), set(11..16), set([])]));
        // Overlapping, uneven, or short of the 16 CPUs.
        assert!(!balanced(&[set(0..8), set(4..12), set(12..16)]));
        assert!(!balanced(&[set(0..10), set(10..13), set(13..16)]));
        assert!(!balanced(&[set(0..4), set(4..8), set(8..12)]));
    }
}
