//! One sender agent following two receiver agents (two `[[peer]]` tables
//! of its `--config`, each with the key of its receiver) on a
//! real kernel: a sender namespace joined by its own veth to each of two
//! receiver namespaces, each receiver with its own description (different
//! NICs: 16 and 8 queues, different tables) and its own `srap-agent
//! receiver`. The flows a workload opens under `srap exec` toward each
//! receiver are judged from the (address, port) pairs that receiver
//! accepted, hashed with that receiver's own model: each receiver's flows
//! spread over its CPUs. Then one receiver agent is stopped: flows toward
//! both are still steered (the other's plan untouched, the stopped one's
//! last plan kept). `srap status --sender` on the agent's control socket
//! lists both receivers with their version, grant and open flows, and the
//! binder's counters, before and after.
//!
//! Agents and workloads are processes killed by PID in drop guards; the
//! binder is detached on every path; the namespaces go last.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    path::PathBuf,
    time::Duration,
};

use srap_common::{
    binder::outcome,
    rss::{RssDescription, RssModel, embedded_default},
    wire::Psk,
};
use srap_harness::keyfile::KeyFile;
use srap_status::{SenderStatus, sender::ReceiverRow};
use srap_tests::{
    NetNs, VethConfig, VethEnd, built_binary,
    flows::Server,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts, landings, poll_until},
    require_privileged,
    subnet::Subnet,
    test_workload::Workload,
    unique_name, veth,
};

const TIMEOUT: Duration = Duration::from_secs(20);
const DPORT: u16 = 5201;
const PEER_PORT: u16 = 7447;

/// Receiver 0: the embedded description's key, 16 queues round robin.
/// Receiver 1: another NIC — its own key, 8 queues — so ports planned with
/// one receiver's model land anywhere on the other. One CPU per queue.
fn description(r: usize) -> RssDescription {
    let base = embedded_default();
    let (queues, key) = match r {
        0 => (16u32, base.key.clone()),
        // The same 40 bytes in reverse order.
        _ => (8, base.key.split(':').rev().collect::<Vec<_>>().join(":")),
    };
    RssDescription {
        key,
        indir: (0..128).map(|i| i % queues).collect(),
        queue_cpu: Some((0..queues).collect()),
        ..base
    }
}

/// One receiver host: its namespace, wired to the sender's, and its agent.
struct Receiver {
    agent: ReceiverAgent,
    /// Its own key: the sender names it in this receiver's `[[peer]]`.
    key: KeyFile,
    model: RssModel,
    /// The sender's end of the wire (`.1`) and the receiver's (`.2`).
    wire: (VethEnd, VethEnd),
    ns: NetNs,
    /// The wire's subnet, leased until the namespace is gone.
    _subnet: Subnet,
}

impl Receiver {
    /// Its namespace, joined to `sender` by a veth on its subnet.
    fn new(sender: &NetNs, r: usize) -> Self {
        let ns = NetNs::new().expect("receiver netns");
        let subnet = Subnet::lease().expect("a subnet for the wire");
        let (ours, theirs) = (
            VethEnd::on_subnet(&subnet, 1, "m"),
            VethEnd::on_subnet(&subnet, 2, "n"),
        );
        veth::link(sender, &ours, &ns, &theirs, VethConfig::default(), false).expect("veth");
        let desc = description(r);
        let key = KeyFile::create(
            std::env::temp_dir().join(format!("srap-test-{}.psk", unique_name("mp"))),
        )
        .expect("a key file");
        let opts = ReceiverOpts::new(
            built_binary("srap-agent"),
            &theirs.ifname,
            SocketAddr::new(theirs.ipv4.into(), PEER_PORT),
        )
        .rss(desc.clone())
        .no_verify()
        .arg("--psk-file")
        .arg(key.path());
        Self {
            agent: ReceiverAgent::start(&ns, opts).expect("the receiver agent"),
            key,
            model: RssModel::from_description(&desc).expect("model"),
            wire: (ours, theirs),
            ns,
            _subnet: subnet,
        }
    }

    fn ip(&self) -> IpAddr {
        self.wire.1.ipv4.into()
    }

    fn peer(&self) -> String {
        self.agent.peer()
    }

    fn listen(&self) -> Server {
        Server::bind(&self.ns, SocketAddr::new(self.ip(), DPORT), TIMEOUT)
    }

    /// Flows per receiver CPU of the accepted `ports`, by this receiver's
    /// own model.
    fn cpus_of(&self, ports: &[u16]) -> BTreeMap<u32, usize> {
        let clients: Vec<SocketAddr> = ports
            .iter()
            .map(|&port| SocketAddr::new(self.wire.0.ipv4.into(), port))
            .collect();
        let server = SocketAddr::new(self.ip(), DPORT);
        let mut cpus = BTreeMap::new();
        for landing in landings(&self.model, &clients, server).expect("v4 tuples") {
            *cpus.entry(landing.cpu).or_insert(0) += 1;
        }
        cpus
    }

    fn cpus(&self) -> usize {
        self.model.queue_cpu().len()
    }
}

/// The sender host: its namespace and agent (detached on drop, in the
/// namespace that reserved its ports), and its `--config` file.
struct SenderHost {
    agent: Option<SenderAgent>,
    config: PathBuf,
    ns: NetNs,
}

impl SenderHost {
    fn new() -> Self {
        Self {
            agent: None,
            config: std::env::temp_dir().join(format!("srap-test-{}.toml", unique_name("mp"))),
            ns: NetNs::new().expect("sender netns"),
        }
    }

    /// Starts `srap-agent sender --config` with one `[[peer]]` per
    /// receiver, each with that receiver's key, and waits until it steers.
    fn start(&mut self, receivers: &[Receiver]) {
        let tables: String = receivers
            .iter()
            .map(|r| {
                format!(
                    "[[peer]]\naddress = \"{}\"\npsk-file = \"{}\"\n\n",
                    r.peer(),
                    r.key.path().display()
                )
            })
            .collect();
        std::fs::write(&self.config, tables).expect("write the sender's TOML");
        let opts = SenderOpts::new(built_binary("srap-agent"))
            .arg("--config")
            .arg(&self.config)
            .report_port(DPORT);
        self.agent = Some(SenderAgent::start(&self.ns, opts).expect("the sender agent steers"));
    }

    fn agent(&self) -> &SenderAgent {
        self.agent.as_ref().expect("the sender agent runs")
    }

    /// `srap status --sender --json` of the agent.
    fn status(&self) -> SenderStatus {
        let out = std::process::Command::new(built_binary("srap"))
            .args(["status", "--sender", "--json", "--control"])
            .arg(self.agent().control())
            .output()
            .expect("run srap status --sender");
        assert!(
            out.status.success(),
            "srap status --sender: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("srap status --sender --json")
    }

    /// The status once `done` holds for it (bounded).
    #[track_caller]
    fn status_when(&self, what: &str, done: impl Fn(&SenderStatus) -> bool) -> SenderStatus {
        poll_until(TIMEOUT, Duration::from_millis(100), || {
            let status = self.status();
            if done(&status) {
                ControlFlow::Break(status)
            } else {
                ControlFlow::Continue(status)
            }
        })
        .unwrap_or_else(|status| panic!("no {what} within {TIMEOUT:?}: {status:#?}"))
    }

    fn steered(&self) -> u64 {
        let stats = self.agent().stats().expect("binder stats");
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED)
    }
}

impl Drop for SenderHost {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Its row for `receiver`, checked against what the receiver granted and
/// what is open toward it.
#[track_caller]
fn assert_row(status: &SenderStatus, receiver: &Receiver, link: &str, open: u64) {
    let row: &ReceiverRow = status
        .receivers
        .iter()
        .find(|r| r.peer == receiver.peer())
        .unwrap_or_else(|| panic!("no row for {} in {status:#?}", receiver.peer()));
    assert_eq!(row.link, link, "{row:#?}");
    assert_eq!(row.version, Some(1), "{row:#?}");
    assert!(!row.paused, "{row:#?}");
    let grant = row.grant.as_ref().expect("a grant");
    assert_eq!(
        grant.cpus.len(),
        receiver.cpus(),
        "every CPU granted: {row:#?}"
    );
    let [address] = row.addresses.as_slice() else {
        panic!("one address: {row:#?}");
    };
    assert_eq!(address.addr, Some(receiver.ip()));
    assert_eq!(address.slots as usize, receiver.cpus());
    assert_eq!(address.open_flows, open, "{row:#?}");
}

/// Open flows over every receiver of the snapshot.
fn total_open(status: &SenderStatus) -> u64 {
    status
        .receivers
        .iter()
        .flat_map(|r| &r.addresses)
        .map(|a| a.open_flows)
        .sum()
}

fn counter(status: &SenderStatus, name: &str) -> u64 {
    status
        .binder
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, c)| *c)
}

/// Opens `n` flows and returns the source ports the receiver accepted.
fn open_flows(workload: &mut Workload, server: &mut Server, n: usize) -> Vec<u16> {
    let opened = workload.open(n);
    let mut accepted = server.accept(n);
    let mut opened_sorted = opened.clone();
    opened_sorted.sort_unstable();
    accepted.sort_unstable();
    assert_eq!(
        accepted, opened_sorted,
        "the receiver accepted the workload's flows"
    );
    accepted
}

/// `per` flows on every CPU of the receiver, and none elsewhere.
#[track_caller]
fn assert_even(receiver: &Receiver, ports: &[u16], per: usize, what: &str) {
    let cpus = receiver.cpus_of(ports);
    assert_eq!(
        cpus.len(),
        receiver.cpus(),
        "{what}: flows on {} of the receiver's {} CPUs: {cpus:?}",
        cpus.len(),
        receiver.cpus()
    );
    assert!(
        cpus.values().all(|&n| n == per),
        "{what}: not {per} flows per CPU: {cpus:?}"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn one_sender_steers_toward_two_receivers_each_by_its_own_description() {
    require_privileged("multipeer: one sender, two receiver agents");
    let mut agent = SenderHost::new();
    let mut receivers = [Receiver::new(&agent.ns, 0), Receiver::new(&agent.ns, 1)];
    agent.start(&receivers);
    // Each receiver authenticated the sender with its own key.
    for r in &receivers {
        let id = Psk::from_file_contents(r.key.key().expect("the key").as_bytes())
            .expect("a key")
            .id();
        r.agent
            .wait_for_log("the sender, authenticated with this receiver's key", |l| {
                l.contains(&format!("(authenticated, key {id})"))
            })
            .expect("the receiver authenticates the sender");
    }
    // Each receiver is told the plan toward it, and only that: one table
    // per local address of the sender (it has one on each wire), not the
    // other receiver's two as well.
    for r in &receivers {
        let line = r
            .agent
            .wait_for_log("the plan for version 1", |l| {
                l.contains("plan for version 1:")
            })
            .expect("the receiver hears the plan");
        assert!(line.contains("plan for version 1: 2 table(s)"), "{line}");
    }
    let mut servers: Vec<Server> = receivers.iter().map(Receiver::listen).collect();
    let mut workloads: Vec<Workload> = receivers
        .iter()
        .map(|r| {
            Workload::spawn(
                &agent.ns,
                Some(agent.agent().cgroup()),
                SocketAddr::new(r.ip(), DPORT),
            )
        })
        .collect();
    let mut opened = 0;
    for (n, r) in receivers.iter().enumerate() {
        let ports = open_flows(&mut workloads[n], &mut servers[n], r.cpus());
        assert_even(r, &ports, 1, &format!("receiver {n}"));
        opened += ports.len();
    }
    assert_eq!(agent.steered(), opened as u64);
    // The snapshot is refreshed every second and after every event.
    let status = agent.status_when("both receivers granted, the flows counted", |s| {
        s.receivers.iter().all(|r| r.grant.is_some()) && total_open(s) == opened as u64
    });
    assert_eq!(status.receivers.len(), 2);
    for r in &receivers {
        assert_row(&status, r, "connected", r.cpus() as u64);
    }
    assert_eq!(counter(&status, "steered"), opened as u64);
    // The log says each receiver's grant, the one that came before the
    // binder existed as well as a later one.
    for r in &receivers {
        let from = format!(" from {}: ", r.peer());
        agent
            .agent()
            .wait_for_log("the receiver's grant line", |l| {
                l.starts_with("grant ") && l.contains(&from)
            })
            .expect("a grant line per receiver");
    }

    // Receiver 0's agent goes away: both keep steering.
    receivers[0].agent.stop();
    let away = format!("receiver {} is away", receivers[0].peer());
    agent
        .agent()
        .wait_for_log("the `away` notice", |l| l.contains(&away))
        .expect("the sender notices");
    for (n, r) in receivers.iter().enumerate() {
        // The first round stays open: a second flow on every CPU.
        let ports = open_flows(&mut workloads[n], &mut servers[n], r.cpus());
        assert_even(r, &ports, 1, &format!("receiver {n} after receiver 0 left"));
        opened += ports.len();
    }
    assert_eq!(agent.steered(), opened as u64);
    let status = agent.status_when("receiver 0 away, the flows counted", |s| {
        s.receivers.first().is_some_and(|r| r.link == "away") && total_open(s) == opened as u64
    });
    assert_row(
        &status,
        &receivers[0],
        "away",
        2 * receivers[0].cpus() as u64,
    );
    assert_row(
        &status,
        &receivers[1],
        "connected",
        2 * receivers[1].cpus() as u64,
    );
    assert!(status.receivers[0].reason.is_some(), "{status:#?}");
    drop(workloads);
    drop(receivers);
    drop(agent);
}
