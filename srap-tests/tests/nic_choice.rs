//! The connect hook choosing this host's NIC (`--local-nics numa|balance`),
//! on a real kernel: a sender namespace with two veth links to a
//! receiver namespace, each its own subnet, the receiver's service address
//! reached by link A's route (and by B's at a worse metric), and
//! `--source-rules install` so an address of B leaves by B.
//!
//! * `balance`: steered flows split evenly over the links — judged by the
//!   links' own `tx_bytes`, the kernel's count, not SRAP's — each flow's
//!   source address the one of the link it left by (the tuples the server
//!   accepted), each on a distinct receiver CPU by the RSS model's hash of
//!   those tuples, and no connect fails. An application that bound its own
//!   address keeps it. Link B taken down, three times, with connects made
//!   at once after: all leave by A, none failing (the kernel's link notice
//!   fences B off before the re-plan), and the re-plan follows within a
//!   second.
//! * `numa` here, where a veth's NUMA node is unknown (`-1`): every steered
//!   flow is placed by the route and counted as `nic_fallback`.
//!
//! Everything lives in the test's namespaces, deleted on drop.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use srap_common::{
    binder::{CONNECT4_PROGRAM, event, outcome},
    rss::{RssModel, embedded_default},
};
use srap_tests::{
    NetNs, VethConfig, built_binary,
    flows::Server,
    harness::{SenderOpts, SenderPair, landings, poll_until},
    require_privileged,
    subnet::Subnet,
    test_workload::Workload,
    two_links::serve_over_both,
};

/// The service port.
const DPORT: u16 = 5201;
/// Upper bound on the server's waits.
const TIMEOUT: Duration = Duration::from_secs(20);
/// What each flow of the byte count sends, in KiB.
const KIB: u32 = 64;
/// Steered flows per step.
const FLOWS: usize = 8;
/// Times link B is taken down with connects made at once after.
const DOWNS: u64 = 3;
/// Connects (connect, send, close) the hook's cost is measured over:
/// within the listener's backlog, accepted after.
const HOT: usize = 64;

/// `iface`'s `tx_bytes` in `ns`, as its kernel keeps it.
fn tx_bytes(ns: &NetNs, iface: &str) -> u64 {
    ns.iface_counter(iface, "tx_bytes")
        .expect("reading tx_bytes")
}

/// The lab: the pair with its second link and the service address, the
/// agent given both links under `policy`.
struct TwoLinks {
    pair: SenderPair,
    /// Link A's and B's names in the sender's namespace, and their
    /// addresses.
    a: (String, IpAddr),
    b: (String, IpAddr),
    service: SocketAddr,
    model: RssModel,
    // Dropped last: held until the namespaces are gone.
    _subnets: [Subnet; 2],
}

impl TwoLinks {
    fn new(policy: &str) -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let service_net = Subnet::lease().expect("the receiver's service subnet");
        let service = service_net.ipv4(1);
        let description = embedded_default();
        let mut links = None;
        let pair = SenderPair::new(VethConfig::default(), |hosts, _| {
            let (near, far) = hosts.second_link(&second)?;
            serve_over_both(hosts, &near, &far, service)?;
            let a = hosts.sender_end.clone();
            let opts = SenderOpts::new(built_binary("srap-agent"))
                .rss(description.clone())
                .port_range("32768-60999")
                .args(["--receiver", &service.to_string()])
                .args(["--local-iface", &a.ifname, "--local-iface", &near.ifname])
                .args(["--local-nics", policy, "--source-rules", "install"]);
            links = Some((
                (a.ifname.clone(), IpAddr::from(a.ipv4)),
                (near.ifname.clone(), IpAddr::from(near.ipv4)),
            ));
            Ok(opts)
        })
        .expect("two namespaces joined by two veth links, a sender agent");
        let (a, b) = links.expect("the links");
        Self {
            pair,
            a,
            b,
            service: SocketAddr::new(service.into(), DPORT),
            model: RssModel::from_description(&description).expect("model"),
            _subnets: [second, service_net],
        }
    }

    fn listen(&self) -> Server {
        Server::bind(&self.pair.hosts.receiver, self.service, TIMEOUT)
    }

    fn workload(&self) -> Workload {
        Workload::spawn(
            &self.pair.hosts.sender,
            Some(self.pair.agent.cgroup()),
            self.service,
        )
    }

    fn counter(&self, index: u32) -> u64 {
        self.pair
            .agent
            .stats()
            .expect("the binder's counters")
            .get(index)
    }

    /// Takes link B `down` or `up` in the sender's namespace.
    fn set_b(&self, state: &str) {
        self.pair
            .hosts
            .sender
            .ip(["link", "set", &self.b.0, state])
            .unwrap_or_else(|e| panic!("setting link B {state}: {e:#}"));
    }

    /// The re-plans for this host's NICs, as the agent's status counts them.
    fn replans(&self) -> u64 {
        self.pair
            .agent
            .status()
            .expect("the sender's status")
            .local_nic_replans
    }

    /// Waits (3 s at most: the status is published once a second) for the
    /// status to count `n` re-plans.
    fn wait_replans(&self, n: u64) {
        poll_until(Duration::from_secs(3), Duration::from_millis(100), || {
            let counted = self.replans();
            if counted >= n {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(counted)
            }
        })
        .unwrap_or_else(|counted| panic!("{n} re-plans for this host's NICs, counted {counted}"));
    }

    fn sent(&self) -> (u64, u64) {
        let ns = &self.pair.hosts.sender;
        (tx_bytes(ns, &self.a.0), tx_bytes(ns, &self.b.0))
    }

    /// Asserts `peers` sit on distinct receiver CPUs by the model's hash of
    /// the tuples the server accepted.
    fn assert_distinct_cpus(&self, peers: &[SocketAddr]) {
        let cpus: Vec<u32> = landings(&self.model, peers, self.service)
            .expect("same-family tuples")
            .iter()
            .map(|l| l.cpu)
            .collect();
        let distinct: BTreeSet<u32> = cpus.iter().copied().collect();
        assert_eq!(distinct.len(), peers.len(), "{peers:?} land on {cpus:?}");
    }
}

/// How many of `peers` come from `ip`.
fn from(peers: &[SocketAddr], ip: IpAddr) -> usize {
    peers.iter().filter(|p| p.ip() == ip).count()
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn balance_splits_flows_over_both_links_and_avoids_a_link_taken_down() {
    require_privileged("two veth links, a sender agent with --local-nics balance");
    let mut lab = TwoLinks::new("balance");
    lab.pair.agent.launch().expect("the agent steers");
    let mut server = lab.listen();
    let mut workload = lab.workload();

    // Even split: half the flows from each address, each link's own bytes.
    let before = lab.sent();
    let ports = workload.bulk(FLOWS, KIB);
    assert!(!ports.contains(&0), "a connect failed: {ports:?}");
    let peers = server.accept_peers(FLOWS);
    let (a_ip, b_ip) = (lab.a.1, lab.b.1);
    assert_eq!(from(&peers, a_ip), FLOWS / 2, "from A: {peers:?}");
    assert_eq!(from(&peers, b_ip), FLOWS / 2, "from B: {peers:?}");
    lab.assert_distinct_cpus(&peers);
    let half = u64::from(KIB) * 1024 * (FLOWS as u64 / 2);
    let deadline = Instant::now() + TIMEOUT;
    let (a_sent, b_sent) = loop {
        let now = lab.sent();
        let sent = (now.0 - before.0, now.1 - before.1);
        if (sent.0 >= half && sent.1 >= half) || Instant::now() > deadline {
            break sent;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for (link, sent) in [(&lab.a.0, a_sent), (&lab.b.0, b_sent)] {
        assert!(
            sent >= half && sent < half + half / 4,
            "{link} sent {sent} bytes for {} flows of {KIB} KiB (A {a_sent}, B {b_sent})",
            FLOWS / 2
        );
    }
    assert_eq!(lab.counter(event::NIC_CHOSEN), FLOWS as u64);
    assert_eq!(lab.counter(event::NIC_FALLBACK), 0);
    assert_eq!(lab.counter(outcome::STEERED), FLOWS as u64);

    // An application's own address is kept, B's as much as A's.
    let own = workload.own_address(b_ip, 2);
    assert!(!own.contains(&0), "a connect failed: {own:?}");
    let peers = server.accept_peers(2);
    assert_eq!(from(&peers, b_ip), 2, "the bound address kept: {peers:?}");
    assert_eq!(lab.counter(event::SOURCE_KEPT), 2);
    assert_eq!(
        lab.counter(event::NIC_CHOSEN),
        FLOWS as u64,
        "no choice made"
    );

    // What the hook costs choosing a NIC, by the kernel's own accounting
    // (printed: a figure to compare, not a bound the test judges).
    let stats_on = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF run-time stats");
    let hook = || {
        let pin = lab.pair.agent.layout().program(CONNECT4_PROGRAM);
        let info = aya::programs::ProgramInfo::from_pin(pin).expect("the connect4 hook");
        (info.run_time(), info.run_count())
    };
    let (time0, runs0) = hook();
    let hot = workload.ask(&format!("hot {HOT}"));
    assert!(!hot.contains(&0), "a connect failed");
    let (time1, runs1) = hook();
    let runs = (runs1 - runs0).max(1);
    eprintln!(
        "connect4 under balance: {} ns per run over {runs} runs",
        (time1 - time0).as_nanos() / u128::from(runs)
    );
    drop(stats_on);
    let peers = server.accept_peers(HOT);
    assert_eq!(from(&peers, a_ip), HOT / 2, "short flows split too");
    assert_eq!(from(&peers, b_ip), HOT / 2, "short flows split too");

    // Link B down, and new flows at once, DOWNS times: the kernel's notice
    // of the link fences B off in the hook (one config write) before the
    // re-plan, so no flow made right after takes B, and none fails. (With
    // a 100 ms poll alone, 1 of 6 connects made at once took B and failed.)
    // The re-plan follows within a second.
    for round in 0..DOWNS {
        let replans = lab.replans();
        lab.set_b("down");
        let down = Instant::now();
        let ports = workload.open(FLOWS);
        let opened = down.elapsed();
        assert!(
            !ports.contains(&0),
            "round {round}: a connect failed, made within {opened:?} of link B going down: {ports:?}"
        );
        let peers = server.accept_peers(FLOWS);
        assert_eq!(
            from(&peers, a_ip),
            FLOWS,
            "round {round}, all from A: {peers:?}"
        );
        if round == 0 {
            lab.pair
                .agent
                .wait_for_log_within("`this host's NICs changed`", Duration::from_secs(3), |l| {
                    l.contains("this host's NICs changed") && l.contains("down")
                })
                .expect("the agent re-plans for link B down");
            let replanned = down.elapsed();
            assert!(
                replanned < Duration::from_secs(1),
                "re-planned {replanned:?} after the link went down"
            );
        }
        lab.wait_replans(replans + 1);
        if round + 1 < DOWNS {
            lab.set_b("up");
            lab.wait_replans(replans + 2);
        }
    }
    assert_eq!(lab.counter(outcome::BIND_REFUSED), 0);
    workload.finish();
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn numa_without_a_known_node_places_every_flow_by_the_route_and_counts_it() {
    require_privileged("two veth links, a sender agent with --local-nics numa");
    let mut lab = TwoLinks::new("numa");
    lab.pair.agent.launch().expect("the agent steers");
    let mut server = lab.listen();
    let mut workload = lab.workload();
    let ports = workload.open(FLOWS);
    assert!(!ports.contains(&0), "a connect failed: {ports:?}");
    let peers = server.accept_peers(FLOWS);
    assert_eq!(
        from(&peers, lab.a.1),
        FLOWS,
        "the route's address, A's: {peers:?}"
    );
    lab.assert_distinct_cpus(&peers);
    assert_eq!(lab.counter(event::NIC_FALLBACK), FLOWS as u64);
    assert_eq!(lab.counter(event::NIC_CHOSEN), 0);
    assert_eq!(lab.counter(outcome::STEERED), FLOWS as u64);
    // The status shows the counter (published once a tick) and the NICs'
    // unknown nodes.
    let counted = |status: &srap_status::SenderStatus| {
        status
            .binder
            .iter()
            .find(|(name, _)| name == "nic_fallback")
            .map(|(_, n)| *n)
    };
    let status = poll_until(Duration::from_secs(3), Duration::from_millis(100), || {
        let status = lab.pair.agent.status().expect("the sender's status");
        if counted(&status) == Some(FLOWS as u64) {
            ControlFlow::Break(status)
        } else {
            ControlFlow::Continue(status)
        }
    })
    .unwrap_or_else(|status| panic!("nic_fallback in the status: {:?}", status.binder));
    let nodes: Vec<Option<u32>> = status
        .local_nics
        .iter()
        .filter(|n| n.given)
        .map(|n| n.node)
        .collect();
    assert_eq!(nodes, [None, None], "a veth's node is unknown");
    workload.finish();
}
