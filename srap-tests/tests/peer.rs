//! Peer mode end to end on a real kernel: `srap-agent receiver --rss FILE`
//! serves the receiver's description in one namespace, `srap-agent sender
//! --peer` follows it in another, and a workload under `srap exec` connects
//! across a 32-queue veth whose sender end runs the RSS-NIC emulator, so the
//! receive queue of every flow is a real observation (the observer, XDP on
//! the receiver's end) and is checked against srap-common's model and the
//! plan the sender reports.
//!
//! The agents are processes killed by PID in drop guards; the binder is
//! detached on every path. The workload is the helper binary
//! `srap-test-workload` (`srap_tests::test_workload`).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write as _,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use aya::maps::{Array, MapData};
use srap_common::{
    binder::{ENTRIES_MAP, SLOTS_MAP, SlotRow, outcome},
    port_range::PortRange,
    rss::{FlowTuple, RssDescription, RssModel, embedded_default},
};
use srap_daemon::{
    observer::{HookChoice, Observer},
    receiver_client::plan_report,
    sender::{Plan, local::ReceiverSources},
};
use srap_harness::emulator::Emulator;
use srap_tests::{
    TwoHosts, VethConfig, built_binary,
    flows::Server,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts},
    relay::{Attack, Relay, Rewrite},
    require_privileged,
    test_workload::Workload,
    unique_name,
};

/// Upper bound on every wait here.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The promise under test: a changed description is steering within this.
const REPLAN_BUDGET: Duration = Duration::from_secs(2);
const QUEUES: u32 = 32;
const FLOWS: usize = 16;
/// The workload's service port on the receiver.
const DPORT: u16 = 5201;
/// The receiver agent's port.
const PEER_PORT: u16 = 7447;
const PORT_RANGE: &str = "32768-60999";
/// Ports reserved in the sender's namespace before the agent starts: they
/// are not SRAP's, so they must survive every re-plan and the detach (and
/// they make the sysctl longer than one small read).
const FOREIGN_RESERVED: &str = "1000,1002,1004,1006,1008,1010,1012,1014,1016,1018,1020";

// ---------------------------------------------------------------------------
// The fixture.

/// A 32-queue NIC: the embedded description, or the same key with another
/// table. `queue_cpu` is the identity: one CPU per queue.
fn description(indir: Option<Vec<u32>>) -> RssDescription {
    let base = embedded_default();
    RssDescription {
        indir: indir.unwrap_or(base.indir.clone()),
        queue_cpu: Some((0..QUEUES).collect()),
        ..base
    }
}

/// A table under which the first plan collides: the first table's CPUs
/// 2k and 2k+1 both land on queue k (first half of the table) or 16+k
/// (second half). Not a relabelling of the queues, so steering that missed
/// the change puts two flows on one queue.
fn second_table() -> Vec<u32> {
    (0..128u32)
        .map(|i| (i % QUEUES) / 2 + QUEUES / 2 * (i / 64))
        .collect()
}

/// Field order is drop order: the agents (the sender detached) before the
/// observer and emulator come off, all before the namespaces go.
struct Peer {
    sender: Option<SenderAgent>,
    receiver: Option<ReceiverAgent>,
    observer: Option<Observer>,
    emulator: Option<Emulator>,
    model: RssModel,
    psk_path: PathBuf,
    wrong_psk_path: PathBuf,
    hosts: TwoHosts,
}

impl Peer {
    fn new() -> Self {
        let hosts = TwoHosts::new(VethConfig {
            tx_queues: QUEUES,
            rx_queues: QUEUES,
            ..VethConfig::default()
        })
        .expect("two namespaces joined by a 32-queue veth");
        let name = unique_name("p");
        let tmp = std::env::temp_dir();
        let desc = description(None);
        let mut peer = Self {
            sender: None,
            receiver: None,
            observer: None,
            emulator: None,
            model: RssModel::from_description(&desc).expect("model"),
            psk_path: tmp.join(format!("srap-test-{name}.psk")),
            wrong_psk_path: tmp.join(format!("srap-test-{name}-wrong.psk")),
            hosts,
        };
        write_private(&peer.psk_path, "peer-test key shared by both agents");
        write_private(&peer.wrong_psk_path, "a different key the receiver lacks");
        peer.set_nic(desc);
        let iface = peer.hosts.receiver_end.ifname.clone();
        let observer = peer
            .hosts
            .receiver
            .run(|| Observer::attach(&iface, HookChoice::Xdp))
            .expect("receiver netns")
            .expect("observer");
        peer.observer = Some(observer);
        peer
    }

    fn sender_ip(&self) -> IpAddr {
        self.hosts.sender_end.ip(false)
    }

    fn receiver_ip(&self) -> IpAddr {
        self.hosts.receiver_end.ip(false)
    }

    fn server_addr(&self) -> SocketAddr {
        SocketAddr::new(self.receiver_ip(), DPORT)
    }

    fn receiver(&self) -> &ReceiverAgent {
        self.receiver.as_ref().expect("the receiver agent runs")
    }

    fn sender(&self) -> &SenderAgent {
        self.sender.as_ref().expect("the sender agent runs")
    }

    /// The receiver agent serves `desc` from now on (a new version).
    fn write_rss(&self, desc: &RssDescription) {
        self.receiver().set_rss(desc).expect("write rss file");
    }

    /// The "NIC" follows `desc`: the emulator is replaced.
    fn set_nic(&mut self, desc: RssDescription) {
        self.model = RssModel::from_description(&desc).expect("model");
        drop(self.emulator.take());
        let iface = self.hosts.sender_end.ifname.clone();
        let model = self.model.clone();
        let emulator = self
            .hosts
            .sender
            .run(|| Emulator::attach(&iface, &model, QUEUES))
            .expect("sender netns")
            .expect("emulator");
        self.emulator = Some(emulator);
    }

    fn start_receiver(&mut self) {
        let listen = SocketAddr::new(self.receiver_ip(), PEER_PORT);
        let opts = ReceiverOpts::new(
            built_binary("srap-agent"),
            &self.hosts.receiver_end.ifname,
            listen,
        )
        .rss(description(None))
        // The test runs its own observer.
        .no_verify()
        .arg("--psk-file")
        .arg(&self.psk_path);
        let agent = ReceiverAgent::start(&self.hosts.receiver, opts).expect("the receiver agent");
        self.receiver = Some(agent);
    }

    /// The sender agent, reaching the receiver agent at `peer` with the key
    /// in `psk`, not started.
    fn sender_agent(&self, peer: &str, psk: &Path) -> SenderAgent {
        let opts = SenderOpts::new(built_binary("srap-agent"))
            .peer(peer)
            .port_range(PORT_RANGE)
            .args(["--receiver".to_owned(), self.receiver_ip().to_string()])
            .arg("--psk-file")
            .arg(psk)
            .report_port(DPORT);
        SenderAgent::new(&self.hosts.sender, opts).expect("a sender agent")
    }

    /// Starts the sender agent and waits until it steers.
    fn start_sender(&mut self) {
        let peer = format!("{}:{PEER_PORT}", self.receiver_ip());
        self.start_sender_via(&peer);
    }

    /// Starts the sender agent toward the receiver agent at `peer` (the
    /// receiver address it steers toward stays the receiver's).
    fn start_sender_via(&mut self, peer: &str) {
        let mut agent = self.sender_agent(peer, &self.psk_path);
        agent.launch().expect("the sender agent steers");
        self.sender = Some(agent);
    }

    fn listen(&self) -> Server {
        Server::bind(&self.hosts.receiver, self.server_addr(), TIMEOUT)
    }

    fn workload(&self) -> Workload {
        let dst = self.server_addr();
        Workload::spawn(&self.hosts.sender, Some(self.sender().cgroup()), dst)
    }

    /// Source port → receiver CPU, as the sender agent plans (and reports)
    /// it for the current model.
    fn planned_cpus(&self) -> BTreeMap<u16, u32> {
        let range: PortRange = PORT_RANGE.parse().expect("range");
        let plan = Plan::build(
            &self.model,
            &[ReceiverSources::routed(
                self.receiver_ip(),
                self.sender_ip(),
            )],
            &[],
            range,
        )
        .expect("plan");
        let report = plan_report(0, &plan, &[DPORT]);
        report
            .tables
            .iter()
            .flat_map(|t| &t.cpus)
            .flat_map(|c| c.ports.iter().map(move |p| (*p, c.cpu)))
            .collect()
    }

    /// Checks `ports` (one new flow each): the observer saw each on the
    /// queue the current model predicts, with the CPU the plan meant for
    /// its port, and no two on one queue.
    #[track_caller]
    fn assert_steered(&self, ports: &[u16]) {
        let planned = self.planned_cpus();
        let flows = self
            .observer
            .as_ref()
            .expect("observer")
            .flows()
            .expect("read the observer's map");
        let server = self.server_addr();
        let mut queues = BTreeMap::new();
        for &port in ports {
            let client = SocketAddr::new(self.sender_ip(), port);
            let flow = flows
                .iter()
                .find(|f| f.src == client && f.dst == server)
                .unwrap_or_else(|| panic!("the observer saw no {client} -> {server}"));
            let landing = self
                .model
                .landing(&FlowTuple::from_sockets(client, server).expect("tuple"));
            let observed = flow.stats.rx_queue();
            assert_eq!(
                observed,
                Some(landing.queue),
                "{client}: observed queue vs. the model's"
            );
            assert_eq!(
                planned.get(&port),
                Some(&landing.cpu),
                "{client}: not a port the sender planned for this CPU"
            );
            if let Some(other) = queues.insert(landing.queue, port) {
                panic!("ports {other} and {port} share queue {}", landing.queue);
            }
        }
    }

    /// The pinned slots of the sender's plan, each with its indirection
    /// entries (the first layout's): they change with the receiver's table.
    fn pinned_slots(&self) -> Vec<(SlotRow, Vec<u32>)> {
        let layout = self.sender().layout();
        let open = |name| {
            let data = MapData::from_pin(layout.map(name)).expect("pinned map");
            aya::maps::Map::from_map_data(data).expect("map")
        };
        let slots: Array<_, SlotRow> = Array::try_from(open(SLOTS_MAP)).expect("array of slots");
        let entries: Array<_, u32> = Array::try_from(open(ENTRIES_MAP)).expect("array of entries");
        (0..QUEUES)
            .map(|i| {
                let row = slots.get(&i, 0).expect("slot row");
                let mine = (row.first..row.first + row.count)
                    .map(|e| entries.get(&e, 0).expect("entry row"))
                    .collect();
                (row, mine)
            })
            .collect()
    }

    fn binder_steered(&self) -> u64 {
        let stats = self.sender().stats().expect("binder stats");
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED)
    }

    fn sysctl(&self, name: &str) -> String {
        let path = format!("/proc/sys/net/ipv4/{name}");
        let out = self.hosts.sender.exec("cat", [&path]).expect("read sysctl");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn reserve_foreign(&self) {
        self.hosts
            .sender
            .exec(
                "sh",
                [
                    "-c",
                    &format!(
                        "echo {FOREIGN_RESERVED} > /proc/sys/net/ipv4/ip_local_reserved_ports"
                    ),
                ],
            )
            .expect("reserve foreign ports");
    }

    fn stop_receiver(&mut self) {
        if let Some(mut agent) = self.receiver.take() {
            agent.stop();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The sender (detached) and the receiver first.
        drop(self.sender.take());
        self.stop_receiver();
        for path in [&self.psk_path, &self.wrong_psk_path] {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create key file");
    file.write_all(text.as_bytes()).expect("write key file");
}

/// Opens `n` flows and returns the source ports the receiver accepted,
/// after checking they are the workload's own.
fn open_flows(workload: &mut Workload, server: &mut Server, n: usize) -> Vec<u16> {
    let opened = workload.open(n);
    let accepted = server.accept(n);
    assert_eq!(
        accepted.iter().collect::<BTreeSet<_>>(),
        opened.iter().collect::<BTreeSet<_>>(),
        "the receiver accepted the workload's connections"
    );
    // Give the data packets time to pass the observer.
    thread::sleep(Duration::from_millis(100));
    accepted
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn sender_follows_the_receiver_agent() {
    require_privileged("peer: sender follows the receiver agent");
    let mut peer = Peer::new();
    peer.reserve_foreign();
    let foreign = peer.sysctl("ip_local_reserved_ports");
    peer.start_receiver();
    peer.start_sender();
    peer.receiver()
        .wait_for_log("the plan for version 1", |l| {
            l.contains("plan for version 1: 1 table(s), 28232 source ports")
        })
        .expect("the receiver hears the plan");

    let mut server = peer.listen();
    let mut workload = peer.workload();
    let first = open_flows(&mut workload, &mut server, FLOWS);
    peer.assert_steered(&first);
    assert_eq!(peer.binder_steered(), FLOWS as u64);

    // The receiver's NIC changes: its description and the emulated NIC.
    let changed_at = Instant::now();
    let second = description(Some(second_table()));
    peer.write_rss(&second);
    peer.set_nic(second);
    let line = peer
        .sender()
        .wait_for_log_within("`replanned for version 2`", REPLAN_BUDGET, |l| {
            l.starts_with("replanned for version 2")
        })
        .expect("the sender replans in time");
    let took = changed_at.elapsed();
    assert!(took <= REPLAN_BUDGET, "{line} after {took:?}");
    peer.receiver()
        .wait_for_log("the plan for version 2", |l| {
            l.contains("plan for version 2: 1 table(s), 28232 source ports")
        })
        .expect("the receiver hears the new plan");

    // The first 16 stay open (their ports are not reused); 16 more go to
    // the other 16 CPUs, each where the new table sends it.
    let again = open_flows(&mut workload, &mut server, FLOWS);
    peer.assert_steered(&again);
    assert_eq!(peer.binder_steered(), 2 * FLOWS as u64);

    drop(workload);
    let sender = peer.sender.as_mut().expect("the sender agent runs");
    sender.kill();
    let out = sender.detach().expect("run srap-agent detach");
    assert!(
        out.status.success(),
        "detach: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sender.pin_dir().exists(), "pins left");
    assert_eq!(
        peer.sysctl("ip_local_reserved_ports"),
        foreign,
        "only SRAP's ports were released"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn receiver_gone_keeps_the_last_plan() {
    require_privileged("peer: the receiver agent killed");
    let mut peer = Peer::new();
    peer.start_receiver();
    peer.start_sender();
    peer.stop_receiver();
    peer.sender()
        .wait_for_log("the `away` notice", |l| {
            l.contains("is away") && l.contains("steering on with the plan for version 1")
        })
        .expect("the sender notices");
    let mut server = peer.listen();
    let mut workload = peer.workload();
    let ports = open_flows(&mut workload, &mut server, FLOWS);
    peer.assert_steered(&ports);
    assert_eq!(peer.binder_steered(), FLOWS as u64);
    assert!(
        !peer.sender().exited(),
        "the sender agent keeps running without its receiver"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn wrong_key_sets_nothing_up() {
    require_privileged("peer: a sender with the wrong key");
    let mut peer = Peer::new();
    let reserved = peer.sysctl("ip_local_reserved_ports");
    peer.start_receiver();
    let started = Instant::now();
    let peer_addr = format!("{}:{PEER_PORT}", peer.receiver_ip());
    let sender = peer.sender_agent(&peer_addr, &peer.wrong_psk_path);
    let out = sender
        .command(&["--peer-wait", "2"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run srap-agent sender");
    assert!(started.elapsed() < TIMEOUT, "the wait is bounded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is not one this receiver accepts: give both hosts the same key file"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was set up"), "{stderr}");
    assert!(!sender.pin_dir().exists(), "no pins for a wrong key");
    assert!(!sender.cgroup().exists(), "no cgroup for a wrong key");
    assert!(
        !srap_daemon::sender::state::path_for(sender.pin_dir()).exists(),
        "no state file"
    );
    assert_eq!(peer.sysctl("ip_local_reserved_ports"), reserved);
}

/// A receiver and a sender steering through a relay in the sender's
/// namespace (one session let through), once the receiver heard the first
/// plan; and the plan the sender pinned.
fn steering_through_relay() -> (Peer, Relay, Vec<(SlotRow, Vec<u32>)>) {
    let mut peer = Peer::new();
    peer.start_receiver();
    let upstream = SocketAddr::new(peer.receiver_ip(), PEER_PORT);
    let relay = Relay::start(&peer.hosts.sender, upstream).expect("relay in the sender netns");
    relay.allow(1);
    peer.start_sender_via(&relay.addr().to_string());
    peer.receiver()
        .wait_for_log("the plan for version 1", |l| {
            l.contains("plan for version 1:")
        })
        .expect("the receiver hears the plan");
    let planned = peer.pinned_slots();
    (peer, relay, planned)
}

/// A man in the middle attacks the next description the receiver agent
/// sends (after the sender steers with the first): the sender drops the
/// connection naming the cause, tells the receiver, keeps its pinned plan,
/// and once the relay lets it through again reconnects and follows the
/// genuine description.
fn attacked_session_keeps_the_plan(attack: Attack, cause: &str) {
    let (peer, relay, planned) = steering_through_relay();

    relay.arm(attack);
    peer.write_rss(&description(Some(second_table())));
    let dropped = peer
        .sender()
        .wait_for_log("the dropped connection", |l| l.contains(cause))
        .expect("the sender drops the connection");
    assert!(dropped.contains("retrying"), "{dropped}");
    assert_eq!(relay.attacks(), 1);
    // The receiver hears why.
    peer.receiver()
        .wait_for_log("the sender's report", |l| {
            l.contains("the peer reported an error") && l.contains(cause)
        })
        .expect("the receiver hears why");
    // Still the first plan: nothing of the attacked frame was applied.
    assert!(
        peer.sender()
            .log()
            .find(|l| l.starts_with("replanned"))
            .is_none(),
        "replanned from an attacked frame"
    );
    assert_eq!(peer.pinned_slots(), planned, "the pinned plan changed");

    // Let it reconnect: the genuine second description is followed.
    relay.allow(1);
    peer.sender()
        .wait_for_log("`replanned for version 2`", |l| {
            l.starts_with("replanned for version 2")
        })
        .expect("the sender follows the genuine description");
    assert_ne!(peer.pinned_slots(), planned, "the new plan is pinned");
    drop(relay);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_flipped_byte_mid_session_drops_the_connection_and_keeps_the_plan() {
    require_privileged("peer: a byte flipped by a man in the middle");
    attacked_session_keeps_the_plan(Attack::FlipByte, "failed authentication");
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_replayed_frame_drops_the_connection_and_keeps_the_plan() {
    require_privileged("peer: a frame replayed by a man in the middle");
    attacked_session_keeps_the_plan(Attack::ReplayFirst, "a replay of an earlier frame");
}

/// A man in the middle rewrites the version negotiation between two agents
/// of this release to force the session down to protocol 6: the sender
/// finds it in the receiver's authenticated challenge, refuses the session
/// with an error naming the downgrade, tells the receiver (whose log says
/// it), and sets nothing up; a connection from its host goes through
/// untouched.
fn a_downgrade_is_refused(rewrite: Rewrite, cause: &str) {
    let mut peer = Peer::new();
    peer.start_receiver();
    let upstream = SocketAddr::new(peer.receiver_ip(), PEER_PORT);
    let relay = Relay::start(&peer.hosts.sender, upstream).expect("relay in the sender netns");
    relay.rewrite(rewrite);
    // Every retry within the wait.
    relay.allow(1000);
    let sender = peer.sender_agent(&relay.addr().to_string(), &peer.psk_path);
    // `--once`: an agent that took the downgrade exits too (and fails
    // the test) instead of steering on.
    let out = sender
        .command(&["--peer-wait", "2", "--once"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run srap-agent sender");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(relay.rewrites() >= 1, "the relay rewrote nothing");
    assert!(stderr.contains(cause), "{stderr}");
    assert!(
        stderr.contains("or tunnel it (WireGuard, IPsec)"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was set up"), "{stderr}");
    peer.receiver()
        .wait_for_log("the sender's report of the downgrade", |l| {
            l.contains("the peer reported an error")
                && l.contains(cause)
                && l.contains("(WireGuard, IPsec)")
        })
        .expect("the receiver hears why, whole");
    assert!(!sender.pin_dir().exists(), "no pins for a refused session");
    assert!(!sender.cgroup().exists(), "no cgroup for a refused session");
    // Fails open: the sender's host connects as if SRAP were not there.
    let mut server = peer.listen();
    let mut workload = Workload::spawn(&peer.hosts.sender, None, peer.server_addr());
    open_flows(&mut workload, &mut server, 2);
    drop(relay);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_hello_rewritten_to_protocol_6_is_a_refused_downgrade() {
    require_privileged("peer: a Hello rewritten to protocol 6 on the path");
    let ours = srap_common::wire::PROTOCOL_VERSION;
    a_downgrade_is_refused(
        Rewrite::HelloVersion,
        &format!(
            "protocol downgrade by something on the path: the Hello offering {ours} reached the \
             receiver (of {ours}) as 6"
        ),
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn an_answer_rewritten_to_protocol_6_is_a_refused_downgrade() {
    require_privileged("peer: the receiver's answer rewritten to protocol 6 on the path");
    let ours = srap_common::wire::PROTOCOL_VERSION;
    a_downgrade_is_refused(
        Rewrite::AnswerHeader,
        &format!(
            "protocol version rewritten by something on the path: the receiver proved {ours} but \
             its answer came as 6"
        ),
    );
}

/// A sender that already steers and meets a downgrade when it reconnects
/// refuses each forced-down session, saying why, and steers on with the
/// plan it has, as after any failed reconnection: connections stay steered,
/// nothing of the refused sessions is applied.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_downgrade_on_reconnection_keeps_the_plan() {
    require_privileged("peer: a downgrade when a steering sender reconnects");
    let (peer, relay, planned) = steering_through_relay();

    // The session is cut (a flipped byte), and every one after it is
    // forced down to protocol 6.
    relay.rewrite(Rewrite::HelloVersion);
    relay.allow(1000);
    relay.arm(Attack::FlipByte);
    peer.write_rss(&description(Some(second_table())));
    peer.sender()
        .wait_for_log("the refused downgrade", |l| {
            l.contains("protocol downgrade by something on the path")
        })
        .expect("the sender refuses the forced-down session");
    assert!(relay.rewrites() >= 1, "the relay rewrote nothing");
    assert_eq!(peer.pinned_slots(), planned, "the pinned plan changed");
    let mut server = peer.listen();
    let mut workload = peer.workload();
    let ports = open_flows(&mut workload, &mut server, FLOWS);
    peer.assert_steered(&ports);
    assert!(
        !peer.sender().exited(),
        "the sender agent keeps running and retrying"
    );
}

/// An expected failure — a receiver that does not answer — is one line
/// naming the receiver once and what happened, with no backtrace whatever
/// RUST_BACKTRACE says; nothing is set up.
#[test]
fn an_unreachable_receiver_is_one_line_without_a_backtrace() {
    use std::process::{Command, Stdio};

    // Port 1 of loopback: nothing listens, the kernel refuses at once.
    let peer = "127.0.0.1:1";
    let dir = srap_tests::harness::TempDir::new("unreach").expect("temp dir");
    let name = unique_name("u");
    let out = Command::new(built_binary("srap-agent"))
        .args(["sender", "--peer", peer, "--peer-wait", "1"])
        .arg("--control")
        .arg(dir.join("sender.sock"))
        .args(["--pin-dir", &format!("/sys/fs/bpf/{name}")])
        .args(["--cgroup", &format!("/sys/fs/cgroup/{name}")])
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .expect("run srap-agent sender");
    drop(dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("srap-agent: error: "), "{stderr}");
    assert_eq!(stderr.matches(peer).count(), 1, "{stderr}");
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    assert!(!Path::new(&format!("/sys/fs/bpf/{name}")).exists());
}
