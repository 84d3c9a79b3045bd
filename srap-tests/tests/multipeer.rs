//! One sender agent following two receiver agents (`--peer` twice) on a
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
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener},
    path::PathBuf,
    process::Stdio,
    sync::mpsc,
    time::{Duration, Instant},
};

use srap_common::{
    binder::outcome,
    rss::{FlowTuple, RssDescription, RssModel, embedded_default},
};
use srap_daemon::sender::{PinLayout, read_stats};
use srap_host::status::{SenderStatus, sender::ReceiverRow};
use srap_tests::{
    NetNs, built_binary,
    cgroup::{CgroupDir, ChildGuard, command_in},
    flows::{Server, line_channel},
    require_privileged, unique_name,
    workload::Workload,
};

const TIMEOUT: Duration = Duration::from_secs(20);
const DPORT: u16 = 5201;
const PEER_PORT: u16 = 7447;
/// This test's subnets: receiver `r` is on `10.199.SUBNETS[r].0/24`.
const SUBNETS: [u8; 2] = [89, 90];

/// Not a test on its own: the workload process (`Workload::spawn`).
#[test]
fn workload_process() {
    srap_tests::workload::serve_if_asked();
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

/// One receiver host. Field order is drop order: the agent before the
/// namespace.
struct Receiver {
    agent: Option<ChildGuard>,
    log: Option<mpsc::Receiver<String>>,
    model: RssModel,
    rss_path: PathBuf,
    control: PathBuf,
    subnet: u8,
    ns: NetNs,
}

impl Receiver {
    /// Its namespace, joined to `sender` by a veth on its subnet.
    fn new(sender: &NetNs, r: usize) -> Self {
        let ns = NetNs::new().expect("receiver netns");
        let subnet = SUBNETS[r];
        let (ours, theirs) = (unique_name("m"), unique_name("n"));
        sender
            .ip([
                "link",
                "add",
                &ours,
                "type",
                "veth",
                "peer",
                "name",
                &theirs,
                "netns",
                ns.name(),
            ])
            .expect("veth");
        for (host, ifname, side) in [(1, &ours, sender), (2, &theirs, &ns)] {
            side.ip([
                "addr",
                "add",
                &format!("10.199.{subnet}.{host}/24"),
                "dev",
                ifname,
            ])
            .expect("address");
            side.ip(["link", "set", ifname, "up"]).expect("link up");
        }
        let name = unique_name("mp");
        let tmp = std::env::temp_dir();
        let desc = description(r);
        let rss_path = tmp.join(format!("srap-test-{name}.json"));
        std::fs::write(&rss_path, desc.to_json_pretty()).expect("write rss file");
        let mut receiver = Self {
            agent: None,
            log: None,
            model: RssModel::from_description(&desc).expect("model"),
            rss_path,
            control: tmp.join(format!("srap-test-{name}.sock")),
            subnet,
            ns,
        };
        receiver.start(&theirs);
        receiver
    }

    fn ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 199, self.subnet, 2))
    }

    /// The sender's address on this receiver's wire.
    fn sender_ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 199, self.subnet, 1))
    }

    fn peer(&self) -> String {
        format!("{}:{PEER_PORT}", self.ip())
    }

    fn start(&mut self, ifname: &str) {
        let mut child = command_in(&self.ns, built_binary("srap-agent"))
            .expect("receiver netns")
            .args(["receiver", "--iface", ifname, "--no-verify"])
            .arg("--control")
            .arg(&self.control)
            .arg("--rss")
            .arg(&self.rss_path)
            .args(["--listen", &self.peer()])
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

    /// SIGTERM by PID (the agent removes its control socket), SIGKILL if
    /// it lingers.
    fn stop(&mut self) {
        let Some(mut agent) = self.agent.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(agent.id()) {
            // SAFETY: kill(2) on the PID of our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if agent.wait(Duration::from_secs(3)).is_err() {
            agent.kill();
        }
    }

    fn listen(&self) -> Server {
        let addr = SocketAddr::new(self.ip(), DPORT);
        let listener = self
            .ns
            .run(|| TcpListener::bind(addr))
            .expect("receiver netns")
            .expect("listen");
        Server::new(listener, TIMEOUT)
    }

    /// Flows per receiver CPU of the accepted `ports`, by this receiver's
    /// own model.
    fn cpus_of(&self, ports: &[u16]) -> BTreeMap<u32, usize> {
        let mut cpus = BTreeMap::new();
        for &port in ports {
            let tuple = FlowTuple::new(self.sender_ip(), port, self.ip(), DPORT).expect("v4 tuple");
            *cpus.entry(self.model.landing(&tuple).cpu).or_insert(0) += 1;
        }
        cpus
    }

    fn cpus(&self) -> usize {
        self.model.queue_cpu().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.rss_path);
        let _ = std::fs::remove_file(&self.control);
    }
}

/// The sender host: its namespace, agent and binder (detached on drop,
/// in the namespace that reserved its ports; the namespace goes last).
struct SenderHost {
    agent: Option<ChildGuard>,
    out: Option<mpsc::Receiver<String>>,
    log: Option<mpsc::Receiver<String>>,
    pin_dir: PathBuf,
    control: PathBuf,
    cgroup: CgroupDir,
    ns: NetNs,
}

impl SenderHost {
    fn new() -> Self {
        Self {
            agent: None,
            out: None,
            log: None,
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/srap-test-{}", unique_name("mp"))),
            control: std::env::temp_dir().join(format!("srap-test-{}.sock", unique_name("mp"))),
            cgroup: CgroupDir::unique().expect("cgroup2 mount"),
            ns: NetNs::new().expect("sender netns"),
        }
    }

    /// Starts `srap-agent sender` with one `--peer` per receiver.
    fn start(&mut self, receivers: &[Receiver]) {
        let agent = self;
        let mut cmd = command_in(&agent.ns, built_binary("srap-agent")).expect("sender netns");
        cmd.arg("sender");
        for r in receivers {
            cmd.args(["--peer", &r.peer()]);
        }
        let mut child = cmd
            .args(["--report-port", &DPORT.to_string()])
            .arg("--cgroup")
            .arg(agent.cgroup.path())
            .arg("--pin-dir")
            .arg(&agent.pin_dir)
            .arg("--control")
            .arg(&agent.control)
            .args(["--port-range", "32768-60999", "--interval", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn srap-agent sender");
        agent.out = Some(line_channel(child.stdout.take().expect("stdout")));
        agent.log = Some(line_channel(child.stderr.take().expect("stderr")));
        agent.agent = Some(ChildGuard::new(child));
    }

    /// `srap status --sender --json` of the agent.
    fn status(&self) -> SenderStatus {
        let out = std::process::Command::new(built_binary("srap"))
            .args(["status", "--sender", "--json", "--control"])
            .arg(&self.control)
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
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {TIMEOUT:?}: {status:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn steered(&self) -> u64 {
        let stats = read_stats(&PinLayout::new(&self.pin_dir)).expect("binder stats");
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED)
    }
}

impl Drop for SenderHost {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
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
        let _ = std::fs::remove_file(&self.control);
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
fn one_sender_steers_toward_two_receivers_each_by_its_own_description() {
    if !require_privileged("multipeer: one sender, two receiver agents") {
        return;
    }
    let mut agent = SenderHost::new();
    let mut receivers = [Receiver::new(&agent.ns, 0), Receiver::new(&agent.ns, 1)];
    agent.start(&receivers);
    let out = agent.out.as_ref().expect("sender stdout");
    wait_line(out, "`steering active`", |l| {
        l.starts_with("steering active")
    });
    // Each receiver is told the plan toward it, and only that: one table
    // per local address of the sender (it has one on each wire), not the
    // other receiver's two as well.
    for r in &receivers {
        let log = r.log.as_ref().expect("receiver log");
        let line = wait_line(log, "the plan for version 1", |l| {
            l.contains("plan for version 1:")
        });
        assert!(line.contains("plan for version 1: 2 table(s)"), "{line}");
    }
    let mut servers: Vec<Server> = receivers.iter().map(Receiver::listen).collect();
    let mut workloads: Vec<Workload> = receivers
        .iter()
        .map(|r| {
            Workload::spawn(
                &agent.ns,
                Some(agent.cgroup.path()),
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

    // Receiver 0's agent goes away: both keep steering.
    receivers[0].stop();
    let log = agent.log.as_ref().expect("sender log");
    wait_line(log, "the `away` notice", |l| {
        l.contains(&format!("receiver {} is away", receivers[0].peer()))
    });
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
