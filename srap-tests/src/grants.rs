//! The receiver-granted CPU slots set-up, shared by `tests/grants.rs` and
//! `benches/grants.rs`: one receiver namespace (a 16-queue description, a
//! bridge, a receiver agent) reached by sender namespaces, each with its own
//! `srap-agent sender --peer` and, for the test, a workload under
//! `srap exec`.
//!
//! Agents and workloads are processes killed by PID in drop guards; every
//! sender's binder is detached; the namespaces (and the bridge and veths in
//! them) go last. Addresses are `10.199.<subnet>.0/24` on the bridge: the
//! receiver is `.1`, sender `i` is `.10 + i`.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    sync::mpsc,
    time::{Duration, Instant},
};

use srap_common::{
    binder::{MAX_SLOTS, SlotGrant},
    rss::{FlowTuple, RssDescription, RssModel, embedded_default},
};
use srap_daemon::sender::PinLayout;

use crate::{
    NetNs, built_binary,
    cgroup::{CgroupDir, ChildGuard, command_in},
    flows::{Server, line_channel},
    unique_name,
    workload::Workload,
};

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

/// Every line `rx` has buffered, without waiting.
fn drain(rx: Option<&mpsc::Receiver<String>>) -> Vec<String> {
    rx.map(|l| l.try_iter().collect()).unwrap_or_default()
}

/// One sender host. Field order is drop order: the workload and agent go
/// before the binder is detached, the namespace last.
pub struct Sender {
    pub workload: Option<Workload>,
    agent: Option<ChildGuard>,
    /// The agent's stdout, kept read so its prints never hit a closed pipe.
    out: Option<mpsc::Receiver<String>>,
    log: Option<mpsc::Receiver<String>>,
    pin_dir: PathBuf,
    cgroup: CgroupDir,
    ns: NetNs,
}

impl Sender {
    /// Kills the agent (its binder stays attached through its pins).
    pub fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
    }

    /// The agent's buffered log lines.
    pub fn log(&self) -> Vec<String> {
        drain(self.log.as_ref())
    }

    /// The grant pinned for receiver 0 (this set-up's only receiver
    /// address), read from the binder's `SRAP_GRANTS` map.
    pub fn pinned_grant(&self) -> Option<SlotGrant> {
        srap_daemon::sender::read_grant(&PinLayout::new(&self.pin_dir), 0).ok()
    }

    /// Stops the agent, detaches its binder and removes its pins and state
    /// file, so the agent can start again as a new sender.
    pub fn detach(&mut self) {
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
        let _ = std::fs::remove_file(self.control());
    }

    /// Its agent's control socket (`srap status --sender --control`).
    pub fn control(&self) -> PathBuf {
        std::env::temp_dir().join(format!(
            "{}.sock",
            self.pin_dir
                .file_name()
                .map_or_else(|| "srap-test-sender".into(), |n| n.to_string_lossy())
        ))
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The slots `grant` allows (none without an active grant).
pub fn granted_slots(grant: &SlotGrant) -> BTreeSet<u32> {
    if grant.active == 0 {
        return BTreeSet::new();
    }
    (0..MAX_SLOTS).filter(|s| grant.allows(*s)).collect()
}

/// The receiver namespace with its bridge, agent and the workload's server.
pub struct Cluster {
    pub senders: Vec<Sender>,
    agent: Option<ChildGuard>,
    log: Option<mpsc::Receiver<String>>,
    server: Option<Server>,
    model: RssModel,
    subnet: u8,
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
    /// The receiver namespace on `10.199.<subnet>.1`, its agent listening.
    pub fn new(subnet: u8) -> Self {
        let receiver = NetNs::new().expect("receiver netns");
        let ip = IpAddr::V4(Ipv4Addr::new(10, 199, subnet, 1));
        receiver
            .ip(["link", "add", "br0", "type", "bridge"])
            .expect("bridge");
        receiver
            .ip(["addr", "add", &format!("{ip}/24"), "dev", "br0"])
            .expect("bridge address");
        receiver
            .ip(["link", "set", "br0", "up"])
            .expect("bridge up");
        let desc = description();
        let name = unique_name("g");
        let rss_path = std::env::temp_dir().join(format!("srap-test-{name}.json"));
        std::fs::write(&rss_path, desc.to_json_pretty()).expect("write rss file");
        let mut cluster = Self {
            senders: Vec::new(),
            agent: None,
            log: None,
            server: None,
            model: RssModel::from_description(&desc).expect("model"),
            subnet,
            control: rss_path.with_extension("sock"),
            rss_path,
            receiver,
        };
        cluster.start_receiver();
        let addr = SocketAddr::new(ip, DPORT);
        let listener = cluster
            .receiver
            .run(|| TcpListener::bind(addr))
            .expect("receiver netns")
            .expect("listen");
        cluster.server = Some(Server::new(listener, TIMEOUT));
        cluster
    }

    /// The receiver's address on the bridge.
    pub fn receiver_ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 199, self.subnet, 1))
    }

    /// The receiver agent's control socket (for `srap status --control`).
    pub fn control(&self) -> &Path {
        &self.control
    }

    fn start_receiver(&mut self) {
        let mut child = command_in(&self.receiver, built_binary("srap-agent"))
            .expect("receiver netns")
            .args(["receiver", "--iface", "br0", "--no-verify"])
            .arg("--control")
            .arg(&self.control)
            .arg("--rss")
            .arg(&self.rss_path)
            .args(["--listen", &format!("{}:{PEER_PORT}", self.receiver_ip())])
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

    /// A sender namespace on the bridge, with no agent yet; returns its
    /// index.
    pub fn add_host(&mut self) -> usize {
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
        let ip = format!("10.199.{}.{}/24", self.subnet, 10 + i);
        ns.ip(["addr", "add", &ip, "dev", "eth0"]).expect("address");
        ns.ip(["link", "set", "eth0", "up"]).expect("up");
        ns.ip(["link", "set", "lo", "up"]).expect("lo up");
        self.senders.push(Sender {
            workload: None,
            agent: None,
            out: None,
            log: None,
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/srap-test-{}", unique_name("g"))),
            cgroup: CgroupDir::unique().expect("cgroup2 mount"),
            ns,
        });
        i
    }

    /// Starts sender `i`'s agent, following the receiver, and waits until
    /// it steers (its binder attached, its first grant asked for).
    pub fn start_agent(&mut self, i: usize) {
        let receiver_ip = self.receiver_ip();
        let sender = &mut self.senders[i];
        let mut child = command_in(&sender.ns, built_binary("srap-agent"))
            .expect("sender netns")
            .args(["sender", "--peer", &format!("{receiver_ip}:{PEER_PORT}")])
            .args(["--report-port", &DPORT.to_string()])
            .arg("--cgroup")
            .arg(sender.cgroup.path())
            .arg("--pin-dir")
            .arg(&sender.pin_dir)
            .arg("--control")
            .arg(sender.control())
            .args(["--port-range", "32768-60999", "--interval", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn srap-agent sender");
        let out = line_channel(child.stdout.take().expect("stdout"));
        sender.log = Some(line_channel(child.stderr.take().expect("stderr")));
        sender.agent = Some(ChildGuard::new(child));
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_line(&out, "`steering active`", |l| {
                l.starts_with("steering active")
            })
        }));
        if started.is_err() {
            self.senders[i].out = Some(out);
            panic!(
                "sender {i} did not start; its log:\n{}\nthe receiver's:\n{}",
                self.senders[i].log().join("\n"),
                drain(self.log.as_ref()).join("\n")
            );
        }
        self.senders[i].out = Some(out);
    }

    /// Sender `i`'s workload, under `srap exec` in its cgroup (test
    /// binaries only: the workload is the test binary re-run).
    pub fn start_workload(&mut self, i: usize) {
        let dst = SocketAddr::new(self.receiver_ip(), DPORT);
        let sender = &mut self.senders[i];
        sender.workload = Some(Workload::spawn(&sender.ns, Some(sender.cgroup.path()), dst));
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
            .arg(&self.control)
            .output()
            .expect("run srap status");
        if !out.status.success() {
            eprintln!(
                "srap status failed: {}\nreceiver log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                drain(self.log.as_ref()).join("\n")
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
            eprintln!("sender {i} log:\n{}", s.log().join("\n"));
        }
    }

    /// Waits until `n` senders are connected, have applied their latest
    /// grant, and have reported `flows` open flows in all.
    pub fn wait_settled(&self, n: usize, flows: u64) -> Vec<serde_json::Value> {
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
                self.print_sender_logs();
            }
            assert!(
                Instant::now() < deadline,
                "grants did not settle for {n} senders and {flows} flows: {peers:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (polling every `poll`, at most [`TIMEOUT`]) until the pinned
    /// grant maps of the senders `running` hold idle senders' balanced
    /// grants: each active, pairwise disjoint, together every slot of the
    /// 16 CPUs, sizes within one of each other. Every sender plans from the
    /// same description, so a slot names the same CPU in each.
    pub fn wait_pinned_balanced(&self, running: &[usize], poll: Duration) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
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
                return;
            }
            if Instant::now() >= deadline {
                self.print_sender_logs();
                panic!("pinned grants of senders {running:?} not balanced: {grants:?}");
            }
            std::thread::sleep(poll);
        }
    }

    /// Sender `i` opens `n` flows; returns the receiver CPUs they land on.
    pub fn open(&mut self, i: usize, n: usize) -> Vec<u32> {
        let opened = self.senders[i].workload.as_mut().expect("workload").open(n);
        let accepted = self.server.as_mut().expect("server").accept_peers(n);
        let ports: BTreeSet<u16> = accepted.iter().map(SocketAddr::port).collect();
        assert_eq!(
            ports,
            opened.iter().copied().collect(),
            "the workload's own flows"
        );
        let server = SocketAddr::new(self.receiver_ip(), DPORT);
        accepted
            .iter()
            .map(|client| {
                let tuple = FlowTuple::from_sockets(*client, server).expect("tuple");
                self.model.landing(&tuple).cpu
            })
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

/// The first line of `rx` that `pred` accepts; panics after [`TIMEOUT`]
/// with the lines seen.
#[track_caller]
pub fn wait_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
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
