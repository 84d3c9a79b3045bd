//! The transparent port binder on a real kernel: `srap-agent sender` attaches
//! the real eBPF programs to a real cgroup, a workload started with
//! `srap exec` connects over a veth from the sender's network namespace to
//! the receiver's, and where each flow lands is judged from the source ports
//! the receiver actually accepted, hashed with srap-common's RSS model.
//!
//! The binaries come from the target directory (`cargo test` at the
//! workspace root builds them; `cargo build --bins` otherwise), or from
//! `SRAP_BIN_DIR`. The workload is the helper binary `srap-test-workload`
//! (`srap_tests::test_workload`).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read as _,
    net::{IpAddr, SocketAddr, TcpListener},
    ops::ControlFlow,
    process::{Command, Stdio},
    time::Duration,
};

use aya::programs::{
    links::{FdLink, PinnedLink},
    loaded_links, loaded_programs,
};

use srap_common::{
    binder::{event, outcome},
    port_range::PortRange,
    port_tables::TablePlan,
    rss::{RssDescription, RssModel, embedded_default},
};
use srap_daemon::sender::BinderStats;
use srap_harness::{guest::truth::iperf3_accepted_ports, programs::iperf3_server_with};
use srap_tests::{
    TwoHosts, VethConfig, built_binary,
    flows::Server,
    harness::{SenderOpts, SenderPair, in_netns, landings, poll_until, srap_exec},
    require_privileged,
    test_workload::Workload,
};

/// Upper bound on every wait here.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The receiver's service port.
const DPORT: u16 = 5201;
/// Given to the agent explicitly so the test can rebuild its tables.
const PORT_RANGE: &str = "32768-60999";

// ---------------------------------------------------------------------------
// The lab: two namespaces, the agent, the receiver's listener.

/// The harness's two hosts with a sender agent ([`SenderPair`], reached
/// through `Deref`: `lab.agent`, `lab.hosts`), and what the tests judge it
/// by.
struct Lab {
    pair: SenderPair,
    model: RssModel,
    v6: bool,
    /// The agent's `--port-range`.
    port_range: String,
}

impl std::ops::Deref for Lab {
    type Target = SenderPair;

    fn deref(&self) -> &SenderPair {
        &self.pair
    }
}

impl std::ops::DerefMut for Lab {
    fn deref_mut(&mut self) -> &mut SenderPair {
        &mut self.pair
    }
}

impl Lab {
    fn new(v6: bool) -> Self {
        Self::with_description(v6, embedded_default())
    }

    fn with_description(v6: bool, description: RssDescription) -> Self {
        Self::with_options(v6, description, PORT_RANGE, |opts, _| opts)
    }

    /// A lab whose agent takes `range` and whatever `more` adds.
    fn with_options(
        v6: bool,
        description: RssDescription,
        range: &str,
        more: impl FnOnce(SenderOpts, &TwoHosts) -> SenderOpts,
    ) -> Self {
        let pair = SenderPair::new(VethConfig::default(), |hosts, _| {
            let receiver = hosts.receiver_end.ip(v6).to_string();
            let opts = SenderOpts::new(built_binary("srap-agent"))
                .rss(description.clone())
                .args(["--receiver", &receiver])
                .port_range(range);
            Ok(more(opts, hosts))
        })
        .expect("two namespaces joined by a veth, a sender agent");
        Self {
            pair,
            model: RssModel::from_description(&description).expect("model"),
            v6,
            port_range: range.to_owned(),
        }
    }

    fn sender_ip(&self) -> IpAddr {
        self.hosts.sender_end.ip(self.v6)
    }

    fn receiver_ip(&self) -> IpAddr {
        self.hosts.receiver_end.ip(self.v6)
    }

    fn server_addr(&self) -> SocketAddr {
        self.hosts.receiver_addr(DPORT, self.v6)
    }

    /// `srap-agent sender --once`: sets up and exits; returns its stdout.
    fn attach_once(&self) -> String {
        self.agent.once().expect("srap-agent sender --once")
    }

    /// Starts the agent as a daemon and waits for its `steering active` line.
    fn start_agent(&mut self) -> String {
        self.agent.launch().expect("agent reports steering")
    }

    /// Waits for an agent output line that starts with `prefix`.
    fn await_agent_line(&self, prefix: &str) -> String {
        self.agent
            .wait_for_log(&format!("`{prefix}…`"), |l| l.starts_with(prefix))
            .expect("the agent's line")
    }

    /// SIGKILL: no chance to clean anything up.
    fn kill_agent(&mut self) {
        self.agent.kill();
    }

    fn detach(&self) -> std::process::Output {
        self.agent.detach().expect("run srap-agent detach")
    }

    /// Listens on the receiver's address.
    fn listen(&self) -> Server {
        Server::bind(&self.hosts.receiver, self.server_addr(), TIMEOUT)
    }

    /// The workload under `srap exec` (or, `steered` false, outside the cgroup).
    fn workload(&self, steered: bool) -> Workload {
        let cgroup = steered.then(|| self.agent.cgroup());
        Workload::spawn(&self.hosts.sender, cgroup, self.server_addr())
    }

    /// The receiver CPU a flow from `sport` lands on, by the RSS model.
    fn cpu_of(&self, sport: u16) -> u32 {
        let client = SocketAddr::new(self.sender_ip(), sport);
        landings(&self.model, &[client], self.server_addr()).expect("same-family tuple")[0].cpu
    }

    /// The agent's table for this pair, rebuilt the same way (for tests that
    /// need to know SRAP's ports).
    fn table(&self) -> TablePlan {
        let range: PortRange = self.port_range.parse().expect("range");
        TablePlan::build(
            &self.model,
            srap_common::protocol::Protocol::Tcp,
            (self.sender_ip(), self.receiver_ip()),
            None,
            range,
        )
        .expect("port table")
    }

    fn stats(&self) -> BinderStats {
        self.agent.stats().expect("read the binder's stats")
    }

    /// Sets a sysctl in the sender's namespace (`net.ipv4.tcp_tw_reuse`, …).
    fn sender_sysctl(&self, name: &str, value: &str) {
        self.pair.sender_sysctl(name, value).expect("sysctl");
    }

    fn reserved_ports(&self) -> String {
        let out = self
            .hosts
            .sender
            .exec("cat", ["/proc/sys/net/ipv4/ip_local_reserved_ports"])
            .expect("read sysctl");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// Flows per receiver CPU (every reachable CPU, zeros included).
fn spread(lab: &Lab, ports: &[u16]) -> BTreeMap<u32, usize> {
    let mut per_cpu: BTreeMap<u32, usize> = lab
        .model
        .reachable_cpus()
        .into_iter()
        .map(|c| (c, 0))
        .collect();
    for port in ports {
        *per_cpu.entry(lab.cpu_of(*port)).or_default() += 1;
    }
    per_cpu
}

#[track_caller]
fn assert_distinct_cpus(lab: &Lab, ports: &[u16]) {
    let cpus: Vec<u32> = ports.iter().map(|p| lab.cpu_of(*p)).collect();
    let distinct: BTreeSet<u32> = cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ports.len(),
        "flows share receiver CPUs: ports {ports:?} land on {cpus:?}"
    );
}

// ---------------------------------------------------------------------------
// The tests.

fn sixteen_distinct(v6: bool) {
    let lab = Lab::new(v6);
    sixteen_distinct_toward(&lab, lab.server_addr());
}

/// 16 connections from the steered cgroup toward `dst` (the receiver's
/// listener, in whichever form the client addresses it) land on 16 CPUs,
/// all steered, none missed.
fn sixteen_distinct_toward(lab: &Lab, dst: SocketAddr) {
    let out = lab.attach_once();
    assert!(out.contains("steering active (attached)"), "{out}");
    let mut server = lab.listen();
    let mut workload = Workload::spawn(&lab.hosts.sender, Some(lab.agent.cgroup()), dst);
    let opened = workload.open(16);
    let accepted = server.accept(16);
    assert_eq!(
        accepted.iter().collect::<BTreeSet<_>>(),
        opened.iter().collect::<BTreeSet<_>>(),
        "the receiver accepted the workload's connections"
    );
    assert_distinct_cpus(lab, &accepted);
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        16,
        "{stats}"
    );
    assert_eq!(stats.get(outcome::MISS), 0, "{stats}");
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn sixteen_flows_land_on_sixteen_cpus() {
    require_privileged("binder: 16 flows on 16 CPUs");
    sixteen_distinct(false);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn ipv6_sixteen_flows_land_on_sixteen_cpus() {
    require_privileged("binder: IPv6, 16 flows on 16 CPUs");
    sixteen_distinct(true);
}

/// A dual-stack `AF_INET6` socket connecting to an IPv4 receiver as
/// `::ffff:a.b.c.d` (what the JDK does by default) goes through `connect6`;
/// it is steered with the receiver's IPv4 plan: 16 flows on 16 CPUs, judged
/// by the ports the IPv4 receiver accepted.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn dual_stack_sockets_to_an_ipv4_receiver_are_steered() {
    require_privileged("binder: dual-stack sockets to an IPv4 receiver");
    let lab = Lab::new(false);
    let IpAddr::V4(receiver) = lab.receiver_ip() else {
        panic!("an IPv4 lab");
    };
    let mapped = SocketAddr::new(IpAddr::V6(receiver.to_ipv6_mapped()), DPORT);
    sixteen_distinct_toward(&lab, mapped);
}

/// 64 threads connect at the same moment toward a 64-CPU receiver, five
/// rounds: every round's flows land on 64 distinct CPUs (judged by the ports
/// the receiver accepted), so no two connects took the same slot.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn sixty_four_concurrent_connects_take_distinct_cpus() {
    require_privileged("binder: 64 concurrent connects");
    let mut description = embedded_default();
    description.indir = (0..128).map(|i| i % 64).collect();
    description.queue_cpu = Some((0..64).collect());
    let lab = Lab::with_description(false, description);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    for round in 0..5 {
        let opened = workload.ask("burst 64");
        let accepted = server.accept(64);
        assert_eq!(opened.len(), 64, "round {round}");
        assert_distinct_cpus(&lab, &accepted);
        let closed = workload.close(64);
        server.await_closed(&closed);
    }
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        320,
        "{stats}"
    );
    workload.finish();
}

/// A 512-CPU receiver (an EPYC-class host): 512 flows opened one after
/// another take all 512 CPUs, and the next 64 at once take 64 more distinct
/// ones (the slot choice reads one bitmap word per 64 slots, never every
/// slot).
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_512_cpu_receiver_gets_a_flow_on_every_cpu() {
    require_privileged("binder: 512-CPU receiver");
    let mut description = embedded_default();
    description.indir = (0..1024).map(|i| i % 512).collect();
    description.queue_cpu = Some((0..512).collect());
    let lab = Lab::with_description(false, description);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    // In batches the listener's backlog holds.
    let mut accepted = Vec::new();
    for _ in 0..4 {
        assert_eq!(workload.open(128).len(), 128);
        accepted.extend(server.accept(128));
    }
    assert_distinct_cpus(&lab, &accepted);
    workload.ask("burst 64");
    let second = server.accept(64);
    assert_distinct_cpus(&lab, &second);
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        576,
        "{stats}"
    );
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn forty_flows_spread_within_one() {
    require_privileged("binder: 40 flows spread evenly");
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(40);
    let accepted = server.accept(40);
    let per_cpu = spread(&lab, &accepted);
    let (min, max) = (per_cpu.values().min(), per_cpu.values().max());
    let (Some(min), Some(max)) = (min, max) else {
        panic!("no CPUs")
    };
    assert!(max - min <= 1, "uneven spread: {per_cpu:?}");
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn closed_flows_free_their_cpus() {
    require_privileged("binder: close 8, open 8");
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(16);
    let first = server.accept(16);
    assert_distinct_cpus(&lab, &first);
    let closed = workload.close(8);
    server.await_closed(&closed);
    workload.open(8);
    let second = server.accept(8);
    let open: Vec<u16> = first
        .iter()
        .filter(|p| !closed.contains(p))
        .chain(&second)
        .copied()
        .collect();
    assert_eq!(open.len(), 16);
    assert_distinct_cpus(&lab, &open);
    assert_eq!(lab.stats().get(event::RELEASED), 8, "{}", lab.stats());
    workload.finish();
}

/// A fresh binder starts each slot's port rotation at a random turn: the
/// same plan, attached twice from nothing (detached in between: new maps),
/// puts 16 flows on 16 CPUs both times with other ports (16 random starts
/// giving the same 16 first ports is vanishingly unlikely), so SRAP's
/// ports are no more predictable than its plan makes them.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_fresh_binder_starts_its_rotations_at_random_turns() {
    require_privileged("binder: random rotation starts");
    let lab = Lab::new(false);
    let mut runs = Vec::new();
    for _ in 0..2 {
        lab.attach_once();
        let mut server = lab.listen();
        let mut workload = lab.workload(true);
        workload.open(16);
        let ports = server.accept(16);
        assert_distinct_cpus(&lab, &ports);
        workload.finish();
        let out = lab.detach();
        assert!(out.status.success(), "{out:?}");
        runs.push(ports.into_iter().collect::<BTreeSet<u16>>());
    }
    assert_ne!(runs[0], runs[1], "the same ports from fresh maps");
}

/// A port another socket holds without sharing it (here a listener) is
/// skipped for the slot's next port, on the same CPU.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_held_port_is_skipped() {
    require_privileged("binder: a port held by another socket");
    let lab = Lab::new(false);
    lab.attach_once();
    // The hook's first choice on a fresh binder: slot 0, at the turn its
    // rotation starts (a random one).
    let table = lab.table();
    let turn = lab
        .agent
        .turn(srap_common::binder::FIRST_RECEIVER_ROW, 0)
        .expect("slot 0's turn");
    let first = table.port_for(0, turn, DPORT).expect("slot 0 has a port");
    let src = SocketAddr::new(lab.sender_ip(), first);
    let _blocker = lab
        .hosts
        .sender
        .run(|| TcpListener::bind(src))
        .expect("sender netns")
        .expect("hold the binder's first port");
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(1);
    let accepted = server.accept(1);
    assert_ne!(accepted[0], first, "the held port was not skipped");
    assert_eq!(
        lab.cpu_of(accepted[0]),
        table.slots()[0].cpu,
        "the slot's next port, on its CPU"
    );
    let stats = lab.stats();
    assert_eq!(stats.get(outcome::RETRIED), 1, "{stats}");
    assert_eq!(stats.get(event::PORT_HELD), 1, "{stats}");
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn app_bound_socket_keeps_its_port() {
    require_privileged("binder: an application-bound socket");
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    // Below the ephemeral range: not one of SRAP's.
    let own = 23_456;
    assert_eq!(workload.ask(&format!("bind {own}")), vec![own]);
    assert_eq!(server.accept(1), vec![own]);
    let stats = lab.stats();
    assert_eq!(stats.get(outcome::APP_BOUND), 1, "{stats}");
    assert_eq!(stats.failures(), 0, "{stats}");
    workload.finish();
}

/// A UDP `connect()` from the steered cgroup runs the connect hook, which
/// names it (`protocol_not_steered`, not `miss`) and leaves it alone: no
/// slot claimed, nothing released when it closes, and the TCP connect
/// after it steered as ever.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_udp_connect_is_counted_as_protocol_not_steered() {
    require_privileged("binder: a UDP connect");
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    let udp = workload.ask("udp 4");
    assert_eq!(udp.len(), 4, "{udp:?}");
    assert!(
        udp.iter().all(|p| *p != 0),
        "every UDP connect got a port: {udp:?}"
    );
    let stats = lab.stats();
    assert_eq!(stats.get(outcome::PROTOCOL_NOT_STEERED), 4, "{stats}");
    assert_eq!(stats.get(outcome::MISS), 0, "{stats}");
    assert_eq!(stats.get(outcome::STEERED), 0, "{stats}");
    assert_eq!(stats.get(outcome::PORT_AT_BIND), 0, "{stats}");
    assert_eq!(stats.get(event::RELEASED), 0, "no slot claimed: {stats}");
    assert_eq!(stats.failures(), 0, "{stats}");
    let tcp = workload.open(1);
    assert_eq!(server.accept(1), tcp);
    let stats = lab.stats();
    assert_eq!(stats.get(outcome::STEERED), 1, "{stats}");
    assert_eq!(stats.get(outcome::PROTOCOL_NOT_STEERED), 4, "{stats}");
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn killed_agent_keeps_steering_and_is_adopted() {
    require_privileged("binder: kill -9 of the agent");
    let mut lab = Lab::new(false);
    let line = lab.start_agent();
    assert!(line.contains("(attached)"), "{line}");
    lab.kill_agent();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(16);
    let first = server.accept(16);
    assert_distinct_cpus(&lab, &first);
    // A new agent adopts the pins, and the occupancy of the 16 open flows.
    let line = lab.start_agent();
    assert!(line.contains("(adopted)"), "{line}");
    workload.open(8);
    let all: Vec<u16> = first.into_iter().chain(server.accept(8)).collect();
    assert_distinct_cpus(&lab, &all);
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn detach_leaves_nothing_behind() {
    require_privileged("binder: detach");
    let lab = Lab::new(false);
    let before = lab.reserved_ports();
    lab.attach_once();
    assert_eq!(lab.reserved_ports(), before, "SRAP reserves no port");
    assert!(lab.agent.cgroup().exists(), "the agent made the cgroup");
    let attached = pinned_links(lab.agent.pin_dir());
    // The kernel's lists (read by aya, not by a tool that may be missing)
    // show them while attached: an empty listing would prove nothing.
    assert_eq!(
        still_loaded(&attached),
        attached,
        "the kernel lists our links"
    );
    let out = lab.detach();
    assert!(
        out.status.success(),
        "detach: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !lab.agent.pin_dir().exists(),
        "pins left in {}",
        lab.agent.pin_dir().display()
    );
    assert_eq!(lab.reserved_ports(), before, "reserved ports as they were");
    // The agent created the cgroup; detach removed it, and with it any link.
    assert!(!lab.agent.cgroup().exists(), "cgroup removed");
    let state = srap_daemon::sender::state::path_for(lab.agent.pin_dir());
    assert!(!state.exists(), "state file {} left", state.display());
    // No SRAP program left attached: the links the agent pinned and their
    // programs are gone from the kernel's lists (freeing is deferred a
    // little after the last pin goes: wait for it, bounded).
    let gone = poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        let left = still_loaded(&attached);
        if left.is_empty() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(left)
        }
    });
    if let Err(left) = gone {
        panic!("links or programs still loaded after detach: {left:?}");
    }
}

/// (link id, program id) of every binder link pinned under `pin_dir`, as
/// aya reads them from the pins (the connect hooks' at least: every
/// setting attaches them).
fn pinned_links(pin_dir: &std::path::Path) -> BTreeSet<(u32, u32)> {
    let layout = srap_daemon::sender::layout::PinLayout::new(pin_dir);
    assert!(layout.links_pinned(), "the connect hooks' links are pinned");
    srap_daemon::sender::layout::PROGRAMS
        .iter()
        .filter(|name| layout.link(name).exists())
        .map(|name| {
            let pinned = PinnedLink::from_pin(layout.link(name)).expect("the binder's pinned link");
            // Closed at the end of this closure: only the pin holds the link.
            let info = FdLink::from(pinned).info().expect("link info");
            (info.id(), info.program_id())
        })
        .collect()
}

/// Which of `ours` the kernel still lists: links by id (`loaded_links`),
/// programs by id (`loaded_programs`). An object freed while the lists are
/// walked is simply not listed.
fn still_loaded(ours: &BTreeSet<(u32, u32)>) -> BTreeSet<(u32, u32)> {
    let links: BTreeSet<u32> = loaded_links()
        .filter_map(Result::ok)
        .map(|l| l.id())
        .collect();
    let programs: BTreeSet<u32> = loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .collect();
    ours.iter()
        .filter(|(link, program)| links.contains(link) || programs.contains(program))
        .copied()
        .collect()
}

/// A fresh machine may have no bpffs at `/sys/fs/bpf`: the agent mounts one
/// itself and says so, instead of failing on its first pin. Run in a private
/// mount namespace whose bpffs is unmounted, so the host's stays as it is.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn agent_mounts_bpffs_when_none_is_mounted() {
    require_privileged("binder: bpffs mount");
    let lab = Lab::new(false);
    let before = lab.reserved_ports();
    let script = r#"
        while umount /sys/fs/bpf 2>/dev/null; do :; done
        [ "$(stat -f -c %T /sys/fs/bpf)" = bpf_fs ] && { echo "bpffs still mounted" >&2; exit 90; }
        pin=$1; shift
        "$@" || exit $?
        [ "$(stat -f -c %T /sys/fs/bpf)" = bpf_fs ] || { echo "no bpffs after the agent" >&2; exit 91; }
        [ -d "$pin" ] || { echo "no pins in $pin" >&2; exit 92; }
        "$1" detach --pin-dir "$pin"
    "#;
    let out = in_netns(&lab.hosts.sender, "unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(lab.agent.pin_dir())
        .arg(lab.agent.program())
        .args(lab.agent.args(&["--once"]))
        .output()
        .expect("run unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no bpf file system was mounted at /sys/fs/bpf"),
        "the agent says it mounted bpffs: {stderr}"
    );
    assert_eq!(lab.reserved_ports(), before, "reserved ports restored");
    assert!(!lab.agent.cgroup().exists(), "cgroup removed");
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn process_outside_the_cgroup_is_untouched() {
    require_privileged("binder: a process outside the cgroup");
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let mut workload = lab.workload(false);
    workload.open(16);
    server.accept(16);
    let stats = lab.stats();
    assert_eq!(stats, BinderStats::default(), "the binder ran: {stats}");
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns, bpffs and iperf3; run as root by `cargo xtask test`"]
fn iperf3_parallel_streams_land_on_distinct_cpus() {
    require_privileged("binder: iperf3 -P 16");
    require_iperf3();
    let lab = Lab::new(false);
    lab.attach_once();
    let ports = iperf3_stream_ports(&lab, &["-P", "16"]);
    assert_eq!(ports.len(), 16);
    assert_distinct_cpus(&lab, &ports);
}

/// `iperf3 -B` binds its address with port 0 before connecting: the kernel
/// picks the port at bind time, so these flows are not steered, and the
/// binder says why (its own outcome, not `app_bound`).
#[test]
#[ignore = "kernel: needs root, netns, bpffs and iperf3; run as root by `cargo xtask test`"]
fn iperf3_bind_address_is_counted_as_port_at_bind() {
    require_privileged("binder: iperf3 -B");
    require_iperf3();
    let lab = Lab::new(false);
    lab.attach_once();
    let sender = lab.sender_ip().to_string();
    let ports = iperf3_stream_ports(&lab, &["-B", &sender, "-P", "4"]);
    assert_eq!(ports.len(), 4);
    let stats = lab.stats();
    // Four streams and the control connection.
    assert_eq!(stats.get(outcome::PORT_AT_BIND), 5, "{stats}");
    assert_eq!(stats.get(outcome::APP_BOUND), 0, "{stats}");
    assert_eq!(stats.get(outcome::STEERED), 0, "{stats}");
}

/// True, or a failure naming iperf3 (see `srap_tests::privilege`).
fn require_iperf3() {
    assert!(
        Command::new("iperf3").arg("--version").output().is_ok(),
        "iperf3 is not installed and this test needs it (apt-get install iperf3)"
    );
}

/// Runs a one-second `iperf3 -c` with `extra` under `srap exec` against a
/// one-off server; returns the stream ports the server accepted.
fn iperf3_stream_ports(lab: &Lab, extra: &[&str]) -> Vec<u16> {
    let mut server = iperf3_server_with(&lab.hosts.receiver, DPORT, &["-J"], Stdio::piped())
        .expect("iperf3 server listening");
    let client = srap_exec(
        &lab.hosts.sender,
        &built_binary("srap"),
        Some(lab.agent.cgroup()),
        "iperf3",
    )
    .args(["-c", &lab.receiver_ip().to_string()])
    .args(["-p", &DPORT.to_string(), "-t", "1"])
    .args(extra)
    .output()
    .expect("iperf3 client");
    assert!(
        client.status.success(),
        "iperf3 -c: {}",
        String::from_utf8_lossy(&client.stderr)
    );
    let status = server.wait(TIMEOUT).expect("iperf3 server exits");
    assert!(status.success(), "iperf3 -s: {status}");
    let mut json = String::new();
    server
        .child_mut()
        .expect("server not killed")
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut json)
        .expect("server output");
    iperf3_accepted_ports(&json).expect("iperf3 -J output")
}

#[path = "binder/clients.rs"]
mod clients;
#[path = "binder/memory.rs"]
mod memory;
#[path = "binder/mptcp.rs"]
mod mptcp;
#[path = "binder/occupancy.rs"]
mod occupancy;
#[path = "binder/patterns.rs"]
mod patterns;
#[path = "binder/ports.rs"]
mod ports;
#[path = "binder/start.rs"]
mod start;
