//! Receiver-granted CPU slots on a real kernel: one receiver namespace
//! (a 16-queue description, a bridge) reached by up to four sender
//! namespaces, each with its own `srap-agent sender --peer` and a workload
//! under `srap exec`. Where a flow lands is judged from the (source address,
//! port) pairs the receiver accepted, hashed with the model.
//!
//! Agents and workloads are processes killed by PID in drop guards; every
//! sender's binder is detached; the namespaces (and the bridge and veths in
//! them) go last. Subnet 66.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener},
    path::PathBuf,
    process::Stdio,
    sync::mpsc,
    time::{Duration, Instant},
};

use srap_common::rss::{FlowTuple, RssDescription, RssModel, embedded_default};
use srap_tests::{
    NetNs, built_binary,
    cgroup::{CgroupDir, ChildGuard, command_in},
    flows::{Server, line_channel},
    require_privileged, unique_name,
    workload::Workload,
};

const SUBNET: u8 = 66;
const QUEUES: u32 = 16;
const FLOWS: usize = 5;
const DPORT: u16 = 5201;
const PEER_PORT: u16 = 7447;
const TIMEOUT: Duration = Duration::from_secs(20);

/// Not a test on its own: the workload process (tests/support/workload.rs).
#[test]
fn workload_process() {
    srap_tests::workload::serve_if_asked();
}

fn receiver_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 199, SUBNET, 1))
}

/// A 16-queue NIC, one CPU per queue.
fn description() -> RssDescription {
    RssDescription {
        indir: (0..128).map(|i| i % QUEUES).collect(),
        queue_cpu: Some((0..QUEUES).collect()),
        ..embedded_default()
    }
}

/// One sender host. Field order is drop order: the workload and agent go
/// before the binder is detached, the namespace last.
struct Sender {
    workload: Option<Workload>,
    agent: Option<ChildGuard>,
    out: Option<mpsc::Receiver<String>>,
    log: Option<mpsc::Receiver<String>>,
    pin_dir: PathBuf,
    cgroup: CgroupDir,
    ns: NetNs,
}

impl Sender {
    fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        drop(self.workload.take());
        self.stop_agent();
        if self.pin_dir.exists()
            && let Ok(mut cmd) = command_in(&self.ns, built_binary("srap-agent"))
        {
            let _ = cmd
                .args(["detach", "--pin-dir"])
                .arg(&self.pin_dir)
                .output();
        }
        if let Ok(entries) = std::fs::read_dir(&self.pin_dir) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
            let _ = std::fs::remove_dir(&self.pin_dir);
        }
        let _ = std::fs::remove_file(srap_daemon::sender::state::path_for(&self.pin_dir));
    }
}

/// The receiver namespace with its bridge, agent and the workload's server.
struct Cluster {
    senders: Vec<Sender>,
    agent: Option<ChildGuard>,
    log: Option<mpsc::Receiver<String>>,
    server: Option<Server>,
    model: RssModel,
    rss_path: PathBuf,
    control: PathBuf,
    receiver: NetNs,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.senders.clear();
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
        let _ = std::fs::remove_file(&self.rss_path);
        let _ = std::fs::remove_file(&self.control);
    }
}

impl Cluster {
    fn new() -> Self {
        let receiver = NetNs::new().expect("receiver netns");
        receiver
            .ip(["link", "add", "br0", "type", "bridge"])
            .expect("bridge");
        receiver
            .ip([
                "addr",
                "add",
                &format!("{}/24", receiver_ip()),
                "dev",
                "br0",
            ])
            .expect("bridge address");
        receiver
            .ip(["link", "set", "br0", "up"])
            .expect("bridge up");
        let desc = description();
        let name = unique_name("g");
        let tmp = std::env::temp_dir();
        let rss_path = tmp.join(format!("srap-test-{name}.json"));
        std::fs::write(&rss_path, desc.to_json_pretty()).expect("write rss file");
        let mut cluster = Self {
            senders: Vec::new(),
            agent: None,
            log: None,
            server: None,
            model: RssModel::from_description(&desc).expect("model"),
            control: rss_path.with_extension("sock"),
            rss_path,
            receiver,
        };
        cluster.start_receiver();
        let addr = SocketAddr::new(receiver_ip(), DPORT);
        let listener = cluster
            .receiver
            .run(|| TcpListener::bind(addr))
            .expect("receiver netns")
            .expect("listen");
        cluster.server = Some(Server::new(listener, TIMEOUT));
        cluster
    }

    fn start_receiver(&mut self) {
        let mut child = command_in(&self.receiver, built_binary("srap-agent"))
            .expect("receiver netns")
            .args(["receiver", "--iface", "br0", "--no-verify"])
            .arg("--control")
            .arg(&self.control)
            .arg("--rss")
            .arg(&self.rss_path)
            .args(["--listen", &format!("{}:{PEER_PORT}", receiver_ip())])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn srap-agent receiver");
        let log = line_channel(child.stderr.take().expect("stderr"));
        self.agent = Some(ChildGuard::new(child));
        wait_line(&log, "`receiver listening`", |l| {
            l.contains("receiver listening")
        });
        self.log = Some(log);
    }

    /// A sender namespace on the bridge, its agent following the receiver
    /// (steering) and its workload started.
    fn add_sender(&mut self) -> usize {
        let i = self.senders.len();
        let ns = NetNs::new().expect("sender netns");
        let port = format!("s{i}");
        self.receiver
            .ip([
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns.name(),
            ])
            .expect("veth");
        self.receiver
            .ip(["link", "set", &port, "master", "br0", "up"])
            .expect("veth on the bridge");
        let ip = format!("10.199.{SUBNET}.{}/24", 10 + i);
        ns.ip(["addr", "add", &ip, "dev", "eth0"]).expect("address");
        ns.ip(["link", "set", "eth0", "up"]).expect("up");
        ns.ip(["link", "set", "lo", "up"]).expect("lo up");
        let mut sender = Sender {
            workload: None,
            agent: None,
            out: None,
            log: None,
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/srap-test-{}", unique_name("g"))),
            cgroup: CgroupDir::unique().expect("cgroup2 mount"),
            ns,
        };
        let mut child = command_in(&sender.ns, built_binary("srap-agent"))
            .expect("sender netns")
            .args([
                "sender",
                "--peer",
                &format!("{}:{PEER_PORT}", receiver_ip()),
            ])
            .args(["--report-port", &DPORT.to_string()])
            .arg("--cgroup")
            .arg(sender.cgroup.path())
            .arg("--pin-dir")
            .arg(&sender.pin_dir)
            .args(["--port-range", "32768-60999", "--interval", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn srap-agent sender");
        let out = line_channel(child.stdout.take().expect("stdout"));
        let log = line_channel(child.stderr.take().expect("stderr"));
        sender.agent = Some(ChildGuard::new(child));
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_line(&out, "`steering active`", |l| {
                l.starts_with("steering active")
            })
        }));
        if started.is_err() {
            let lines: Vec<String> = log.try_iter().collect();
            let receiver: Vec<String> = self
                .log
                .as_ref()
                .map(|l| l.try_iter().collect())
                .unwrap_or_default();
            panic!(
                "sender {i} did not start; its log:\n{}\nthe receiver's:\n{}",
                lines.join("\n"),
                receiver.join("\n")
            );
        }
        sender.out = Some(out);
        sender.log = Some(log);
        sender.workload = Some(Workload::spawn(
            &sender.ns,
            Some(sender.cgroup.path()),
            SocketAddr::new(receiver_ip(), DPORT),
        ));
        self.senders.push(sender);
        i
    }

    /// The receiver agent's view of its peers (`srap status --once --json`).
    fn peers(&self) -> Vec<serde_json::Value> {
        let out = std::process::Command::new(built_binary("srap"))
            .args(["status", "--once", "--json", "--control"])
            .arg(&self.control)
            .output()
            .expect("run srap status");
        if !out.status.success() {
            let log: Vec<String> = self
                .log
                .as_ref()
                .map(|l| l.try_iter().collect())
                .unwrap_or_default();
            eprintln!(
                "srap status failed: {}\nreceiver log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                log.join("\n")
            );
            return Vec::new();
        }
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("srap status --json");
        status["peers"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `n` senders are connected, have applied their latest
    /// grant, and have reported `flows` open flows in all.
    fn wait_settled(&self, n: usize, flows: u64) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let peers = self.peers();
            let settled = peers.len() == n
                && peers.iter().all(|p| p["grant_applied"] == true)
                && peers
                    .iter()
                    .filter_map(|p| p["flows"].as_u64())
                    .sum::<u64>()
                    == flows;
            if settled {
                return peers;
            }
            if Instant::now() >= deadline {
                for (i, s) in self.senders.iter().enumerate() {
                    let lines: Vec<String> = s
                        .log
                        .as_ref()
                        .map(|l| l.try_iter().collect())
                        .unwrap_or_default();
                    eprintln!("sender {i} log:\n{}", lines.join("\n"));
                }
            }
            assert!(
                Instant::now() < deadline,
                "grants did not settle for {n} senders and {flows} flows: {peers:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sender `i` opens `n` flows; returns the receiver CPUs they land on.
    fn open(&mut self, i: usize, n: usize) -> Vec<u32> {
        let opened = self.senders[i].workload.as_mut().expect("workload").open(n);
        let accepted = self.server.as_mut().expect("server").accept_peers(n);
        let ports: BTreeSet<u16> = accepted.iter().map(SocketAddr::port).collect();
        assert_eq!(
            ports,
            opened.iter().copied().collect(),
            "the workload's own flows"
        );
        let server = SocketAddr::new(receiver_ip(), DPORT);
        accepted
            .iter()
            .map(|client| {
                let tuple = FlowTuple::from_sockets(*client, server).expect("tuple");
                self.model.landing(&tuple).cpu
            })
            .collect()
    }
}

#[track_caller]
fn wait_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!(
                "no {what} within {TIMEOUT:?}; lines seen:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// Flows per CPU over all 16 CPUs (CPUs without flows count as 0).
fn per_cpu(cpus: &[u32]) -> BTreeMap<u32, u32> {
    let mut load: BTreeMap<u32, u32> = (0..QUEUES).map(|c| (c, 0)).collect();
    for cpu in cpus {
        *load.entry(*cpu).or_insert(0) += 1;
    }
    load
}

fn granted_cpus(peer: &serde_json::Value) -> BTreeSet<u32> {
    let list = peer["granted"].as_str().unwrap_or_default();
    srap_daemon::receiver::grants::parse_cpu_list(list).unwrap_or_default()
}

#[test]
fn three_senders_land_on_fifteen_cpus_and_a_fourth_stays_balanced() {
    if !require_privileged("grants across sender namespaces") {
        return;
    }
    let mut cluster = Cluster::new();
    for _ in 0..3 {
        cluster.add_sender();
    }
    let peers = cluster.wait_settled(3, 0);
    let grants: Vec<BTreeSet<u32>> = peers.iter().map(granted_cpus).collect();
    let all: BTreeSet<u32> = grants.iter().flatten().copied().collect();
    assert_eq!(
        grants.iter().map(BTreeSet::len).sum::<usize>(),
        all.len(),
        "idle senders hold disjoint grants: {grants:?}"
    );
    assert_eq!(all.len(), QUEUES as usize, "covering every CPU: {grants:?}");

    let mut landed = Vec::new();
    for i in 0..3 {
        landed.extend(cluster.open(i, FLOWS));
    }
    let distinct: BTreeSet<u32> = landed.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        3 * FLOWS,
        "15 flows from three senders on 15 distinct CPUs: {landed:?}"
    );

    cluster.wait_settled(3, 3 * FLOWS as u64);
    let fourth = cluster.add_sender();
    cluster.wait_settled(4, 3 * FLOWS as u64);
    landed.extend(cluster.open(fourth, FLOWS));
    let load = per_cpu(&landed);
    let (max, min) = (
        load.values().max().copied().unwrap_or(0),
        load.values().min().copied().unwrap_or(0),
    );
    assert!(
        max - min <= 1,
        "20 flows on 16 CPUs: max {max} min {min} per CPU: {load:?}"
    );

    // The fourth leaves (its flows closed, its agent gone): its CPUs go
    // back to the others, disjoint again.
    cluster.senders[fourth]
        .workload
        .as_mut()
        .expect("workload")
        .close(FLOWS);
    cluster.senders[fourth].stop_agent();
    let peers = cluster.wait_settled(3, 3 * FLOWS as u64);
    let grants: Vec<BTreeSet<u32>> = peers.iter().map(granted_cpus).collect();
    let all: BTreeSet<u32> = grants.iter().flatten().copied().collect();
    assert_eq!(all.len(), QUEUES as usize, "re-granted: {grants:?}");
    assert_eq!(
        grants.iter().map(BTreeSet::len).sum::<usize>(),
        all.len(),
        "disjoint again: {grants:?}"
    );
}
