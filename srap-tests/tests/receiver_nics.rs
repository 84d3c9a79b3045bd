//! A receiver that serves several NICs, on a real kernel: a receiver
//! namespace with two veth links (two subnets) and `--iface` twice. The
//! sender's status lists both NICs with the addresses the namespace's own
//! `ip -j addr` gives them, their links as `ip -j link` says, no NUMA node
//! (a veth has no device), and a verifier on each (the receiver's status
//! names each hook). Listeners are the test's own sockets: one on the
//! wildcard is accepted on both addresses, one bound to the second address
//! only there, and one that closes leaves the sender's view within a
//! second. A sender whose session runs at the previous protocol (its
//! `Hello` rewritten to it on the path, no key) is told of no NIC list,
//! says why, and still steers.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr, TcpListener},
    ops::ControlFlow,
    thread,
    time::{Duration, Instant},
};

use srap_common::{binder::outcome, rss::embedded_default, wire::NicLink};
use srap_status::sender::ReceiverRow;
use srap_tests::{
    TwoHosts, built_binary,
    flows::Server,
    harness::{PEER_PORT, ReceiverAgent, SenderAgent, SenderOpts, poll_until},
    relay::{Relay, Rewrite},
    require_privileged,
    subnet::Subnet,
    test_workload::Workload,
    two_links,
    veth::VethEnd,
};

const DPORT: u16 = 5201;
const TIMEOUT: Duration = Duration::from_secs(20);
/// The promise: a listener that comes or goes reaches the sender within
/// this.
const LISTENER_BUDGET: Duration = Duration::from_secs(1);

/// Two namespaces, two links; the receiver agent serving both links'
/// receiver ends, the first described by the embedded description.
struct TwoNics {
    sender: Option<SenderAgent>,
    receiver: ReceiverAgent,
    far: VethEnd,
    hosts: TwoHosts,
    /// Dropped last: the second link's addresses.
    _second: Subnet,
}

impl TwoNics {
    fn start() -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
        let (_near, far) = hosts.second_link(&second).expect("a second veth link");
        let opts = two_links::receiver_opts(&hosts, &far);
        let receiver = ReceiverAgent::start(&hosts.receiver, opts).expect("the receiver agent");
        Self {
            sender: None,
            receiver,
            far,
            hosts,
            _second: second,
        }
    }

    /// Starts the sender agent toward `peer` and waits until it steers.
    fn start_sender(&mut self, peer: &str) {
        let opts = SenderOpts::new(built_binary("srap-agent"))
            .peer(peer)
            .args([
                "--receiver".to_owned(),
                self.hosts.receiver_end.ip(false).to_string(),
            ])
            .report_port(DPORT);
        let mut agent = SenderAgent::new(&self.hosts.sender, opts).expect("a sender agent");
        agent.launch().expect("the sender agent steers");
        self.sender = Some(agent);
    }

    fn sender(&self) -> &SenderAgent {
        self.sender.as_ref().expect("the sender agent runs")
    }

    /// The sender's row of the receiver, once `done` accepts it.
    fn receiver_row(&self, what: &str, done: impl Fn(&ReceiverRow) -> bool) -> ReceiverRow {
        let mut last = None;
        let found = poll_until(TIMEOUT, Duration::from_millis(100), || {
            let status = self.sender().status().expect("the sender's status");
            match status.receivers.into_iter().next() {
                Some(row) if done(&row) => ControlFlow::Break(row),
                row => {
                    last = row;
                    ControlFlow::Continue(())
                }
            }
        });
        found.unwrap_or_else(|_| panic!("{what} within {TIMEOUT:?}; last: {last:#?}"))
    }

    /// The served ends: the first link's and the second's.
    fn served(&self) -> [&VethEnd; 2] {
        [&self.hosts.receiver_end, &self.far]
    }

    /// What the receiver namespace's kernel says of `iface`: its global
    /// addresses (`ip -j addr`) and whether it is up (`ip -j link`).
    fn kernel_view(&self, iface: &str) -> (BTreeSet<IpAddr>, bool) {
        let out = self
            .hosts
            .receiver
            .ip(["-j", "addr", "show", "dev", iface])
            .expect("ip -j addr");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip's JSON");
        let link = &json[0];
        let addrs = link["addr_info"]
            .as_array()
            .expect("addr_info")
            .iter()
            .filter(|a| a["scope"] == "global")
            .map(|a| {
                a["local"]
                    .as_str()
                    .expect("local")
                    .parse()
                    .expect("an address")
            })
            .collect();
        (addrs, link["operstate"] == "UP")
    }

    /// A listener of the test's own in the receiver namespace.
    fn listen(&self, addr: SocketAddr) -> TcpListener {
        self.hosts
            .receiver
            .run(move || TcpListener::bind(addr))
            .expect("receiver netns")
            .expect("listen")
    }

    /// The sender's log line saying `port` is no longer accepted, waited
    /// for from `since`; the time it took.
    fn port_gone_after(&self, port: u16, since: Instant) -> Duration {
        let needle = format!("port {port} no longer accepted");
        while since.elapsed() < TIMEOUT {
            if self.sender().log().find(|l| l.contains(&needle)).is_some() {
                return since.elapsed();
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the sender never heard that port {port} closed; its log:\n{}",
            self.sender().log().tail()
        );
    }
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn the_sender_sees_both_nics_of_the_receiver_as_its_kernel_does() {
    require_privileged("a receiver serving two veth links");
    let mut setup = TwoNics::start();
    let peer = setup.receiver.peer();
    setup.start_sender(&peer);
    let row = setup.receiver_row("both NICs described", |r| r.nics.len() == 2);
    assert_eq!(row.nics_unknown, None);
    for (nic, end) in row.nics.iter().zip(setup.served()) {
        assert_eq!(nic.name, end.ifname, "--iface order");
        let (addrs, up) = setup.kernel_view(&end.ifname);
        assert!(addrs.contains(&end.ip(false)), "{addrs:?}");
        assert_eq!(
            nic.addrs.iter().copied().collect::<BTreeSet<_>>(),
            addrs,
            "{}: the addresses its kernel gives it",
            end.ifname
        );
        assert_eq!(nic.link == NicLink::Up, up, "{}: {nic:?}", end.ifname);
        let node = setup.hosts.receiver.exec(
            "cat",
            [format!("/sys/class/net/{}/device/numa_node", end.ifname)],
        );
        assert!(node.is_err(), "a veth has no device: {node:?}");
        assert_eq!(nic.numa_node, None, "unknown, never node 0: {nic:?}");
        assert!(
            nic.verdict.is_some(),
            "a verifier on {}: {nic:?}",
            end.ifname
        );
    }
    // The first is described (the embedded table), the veth behind the
    // second has no RSS.
    assert_eq!(
        row.nics[0].indir_entries,
        embedded_default().indir.len(),
        "{:?}",
        row.nics[0]
    );
    assert_eq!(row.nics[1].indir_entries, 0, "{:?}", row.nics[1]);
    // The receiver's own status names each verifier's hook (its rows are
    // filled at its first sample: wait for it, bounded).
    let status = poll_until(TIMEOUT, Duration::from_millis(100), || {
        let status = setup.receiver.status().expect("the receiver's status");
        if status.nics.len() == 2 {
            ControlFlow::Break(status)
        } else {
            ControlFlow::Continue(status.nics.len())
        }
    })
    .unwrap_or_else(|rows| panic!("the receiver's status shows {rows} NIC rows, not 2"));
    let names: Vec<&str> = status.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, [&setup.hosts.receiver_end.ifname, &setup.far.ifname]);
    for nic in &status.nics {
        let hook = nic.hook.as_deref().unwrap_or_default();
        assert!(hook.contains("sock"), "{}: {nic:?}", nic.name);
    }

    // Flows of the test's own to the second address are that NIC's: its
    // row counts exactly them, and the first NIC's flows hold none of them.
    let far = SocketAddr::new(setup.far.ip(false), DPORT);
    let mut server = Server::bind(&setup.hosts.receiver, far, TIMEOUT);
    let mut workload = Workload::spawn(&setup.hosts.sender, None, far);
    let opened = workload.open(3);
    let accepted = server.accept(3);
    assert_eq!(
        opened.iter().collect::<BTreeSet<_>>(),
        accepted.iter().collect::<BTreeSet<_>>()
    );
    let mut last = None;
    let counted = poll_until(TIMEOUT, Duration::from_millis(200), || {
        let status = setup.receiver.status().expect("the receiver's status");
        match status.nics.get(1) {
            Some(nic) if nic.active_flows == accepted.len() && !nic.cpus.is_empty() => {
                ControlFlow::Break(status)
            }
            _ => {
                last = Some(status.nics);
                ControlFlow::Continue(())
            }
        }
    });
    let status = counted.unwrap_or_else(|_| panic!("the second NIC's 3 flows; last: {last:#?}"));
    assert!(
        status.flows.iter().all(|f| f.dst.ip() != far.ip()),
        "the first NIC's verifier counts only flows to its own address: {:?}",
        status.flows
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn each_port_is_accepted_where_its_listener_is() {
    require_privileged("listeners on a receiver serving two veth links");
    let mut setup = TwoNics::start();
    let peer = setup.receiver.peer();
    setup.start_sender(&peer);
    let [first, second] = setup.served().map(|e| e.ip(false));
    let wildcard = setup.listen(SocketAddr::new([0, 0, 0, 0].into(), 0));
    let any_port = wildcard.local_addr().expect("bound").port();
    let bound = setup.listen(SocketAddr::new(second, 0));
    let one_port = bound.local_addr().expect("bound").port();

    let row = setup.receiver_row("both test ports", |r| {
        [any_port, one_port]
            .iter()
            .all(|p| r.ports.iter().any(|a| a.port == *p))
    });
    let accepted = |port: u16| -> BTreeSet<IpAddr> {
        let found = row.ports.iter().find(|a| a.port == port).expect("listed");
        found.addrs.iter().copied().collect()
    };
    // The wildcard accepts on every IPv4 address the two NICs hold.
    let mut v4: BTreeSet<IpAddr> = BTreeSet::new();
    for end in setup.served() {
        v4.extend(
            setup
                .kernel_view(&end.ifname)
                .0
                .into_iter()
                .filter(IpAddr::is_ipv4),
        );
    }
    assert!(v4.contains(&first) && v4.contains(&second), "{v4:?}");
    assert_eq!(accepted(any_port), v4, "0.0.0.0:{any_port}");
    assert_eq!(
        accepted(one_port),
        BTreeSet::from([second]),
        "{second}:{one_port}"
    );

    let closed = Instant::now();
    drop(wildcard);
    let took = setup.port_gone_after(any_port, closed);
    assert!(
        took <= LISTENER_BUDGET,
        "port {any_port} left the sender's view after {took:?}"
    );
    let row = setup.receiver_row("the closed port gone from the status", |r| {
        r.ports.iter().all(|a| a.port != any_port)
    });
    assert!(
        row.ports.iter().any(|a| a.port == one_port),
        "the other listener stays: {:?}",
        row.ports
    );
    drop(bound);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_sender_of_an_older_protocol_gets_one_nic_and_steers() {
    require_privileged("an older sender toward a receiver serving two veth links");
    let mut setup = TwoNics::start();
    let upstream = SocketAddr::new(setup.hosts.receiver_end.ip(false), PEER_PORT);
    let relay = Relay::start(&setup.hosts.sender, upstream).expect("relay in the sender netns");
    // No key: nothing is authenticated, so the rewritten Hello makes the
    // session run at the version before `ReceiverNics` (8), as with a
    // sender of it.
    let oldest = 7;
    relay.rewrite(Rewrite::HelloVersionTo(oldest));
    relay.allow(100);
    setup.start_sender(&relay.addr().to_string());
    assert!(relay.rewrites() >= 1, "the relay rewrote nothing");
    let row = setup.receiver_row("the older session's reason", |r| r.nics_unknown.is_some());
    assert!(row.nics.is_empty(), "{row:?}");
    assert!(
        row.nics_unknown
            .as_deref()
            .is_some_and(|w| w.contains(&format!("speaks protocol {oldest}"))),
        "{row:?}"
    );
    setup
        .receiver
        .wait_for_log("the receiver's note of the older peer", |l| {
            l.contains(&format!(
                "speaks protocol {oldest}, so it is told of the first NIC only"
            ))
        })
        .expect("the receiver says it serves the first NIC only");
    // Steering works as before: each new flow's port is the binder's.
    let stats = setup.sender().stats().expect("binder stats");
    let before = stats.get(outcome::STEERED) + stats.get(outcome::RETRIED);
    let dst = SocketAddr::new(setup.hosts.receiver_end.ip(false), DPORT);
    let mut server = Server::bind(&setup.hosts.receiver, dst, TIMEOUT);
    let cgroup = setup.sender().cgroup().to_path_buf();
    let mut workload = Workload::spawn(&setup.hosts.sender, Some(&cgroup), dst);
    let opened = workload.open(4);
    let accepted = server.accept(4);
    assert_eq!(
        opened.iter().collect::<BTreeSet<_>>(),
        accepted.iter().collect::<BTreeSet<_>>()
    );
    let stats = setup.sender().stats().expect("binder stats");
    let after = stats.get(outcome::STEERED) + stats.get(outcome::RETRIED);
    assert_eq!(after - before, 4, "every flow steered");
    drop(relay);
}
