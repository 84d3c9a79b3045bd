//! MPTCP through the binder: every subflow of a connection is a socket of
//! the kernel's own (`sk_kern_sock`), which the release hook never sees.
//! Two namespaces joined by two links, MPTCP endpoints as a user sets
//! them up, connections from the steered cgroup that really grow a second
//! subflow each (judged by the subflows the receiver holds): once closed,
//! nothing of theirs is left counted, at once, without the agent's audit;
//! and every subflow, the ones the kernel's path manager opens included,
//! lands on a receiver CPU of its own by the tuples the receiver accepted:
//! over IPv4 and IPv6, and toward an address the receiver announces
//! (`ADD_ADDR`) as well as toward the connection's own.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use srap_common::{
    binder::{event, outcome},
    rss::embedded_default,
};
use srap_harness::veth::MptcpEndpoint;
use srap_tests::{
    TwoHosts, VethConfig, VethEnd, built_binary,
    flows::Server,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts, Subnet, landings, poll_until},
    require_privileged,
    test_workload::Workload,
};

use super::{DPORT, Lab, PORT_RANGE, TIMEOUT, assert_distinct_cpus};

/// MPTCP connections per run.
const CONNECTIONS: usize = 4;
/// MPTCP connections of the spread test: their 24 subflows fill 24 of the
/// lab receiver's 32 CPUs, which the kernel's own ports do by chance about
/// once in ten thousand runs.
const SPREAD_CONNECTIONS: usize = 12;
/// MPTCP connections of the announced-address test: 6 subflows on each of
/// the receiver's two addresses.
const ANNOUNCE_CONNECTIONS: usize = 6;
/// Up to this long for the path manager to add the second subflows.
const SUBFLOWS_WAIT: Duration = Duration::from_secs(10);
/// Up to this long after the last close for the binder to hold nothing:
/// the audit (every second under the harness's agent) repairs only what
/// two audits an interval apart found alike, so within this only the
/// binder's own release can empty the maps, and a repair would be counted.
const PROMPT: Duration = Duration::from_secs(1);

/// A lab with a second link between the two hosts and MPTCP set up on
/// both as a user would: enabled, limits for two subflows, and the
/// sender's second address an endpoint its path manager opens a subflow
/// from. Field order is drop order: the lab's namespaces (and the second
/// link with them) before the second link's subnet is given back.
struct MptcpLab {
    lab: Lab,
    /// The sender's end of the second link.
    second: VethEnd,
    _subnet: Subnet,
}

impl MptcpLab {
    fn new() -> Self {
        Self::of_family(false)
    }

    /// The lab over IPv6 (`v6`: the agent steers toward the receiver's
    /// IPv6 address, and the second link and its endpoint are IPv6 too).
    fn of_family(v6: bool) -> Self {
        Self::with_flags(v6, &["--mptcp", "subflows"])
    }

    /// The lab with the agent's MPTCP flags `mptcp` (none: the default,
    /// `--mptcp off`).
    fn with_flags(v6: bool, mptcp: &[&str]) -> Self {
        let lab = Lab::with_options(v6, embedded_default(), PORT_RANGE, |opts, _| {
            opts.args(mptcp.iter().copied())
        });
        let subnet = Subnet::lease().expect("a second subnet");
        let hosts = &lab.hosts;
        let (second, far) = hosts.second_link_of(&subnet, v6).expect("the second link");
        hosts
            .enable_mptcp_with(&second, &far, MptcpEndpoint::SenderSubflow { v6 })
            .expect("MPTCP over both links");
        Self {
            lab,
            second,
            _subnet: subnet,
        }
    }

    /// [`CONNECTIONS`] MPTCP connections from the steered cgroup: the
    /// server, the workload holding them, and the first subflows' ports the
    /// receiver accepted (the same the workload opened).
    fn open_connections(&self) -> (Server, Workload, Vec<u16>) {
        let lab = &self.lab;
        let mut server = Server::bind_mptcp(&lab.hosts.receiver, lab.server_addr(), TIMEOUT);
        let mut workload = lab.workload(true);
        let opened = workload.ask(&format!("mptcp {CONNECTIONS}"));
        assert_eq!(opened.len(), CONNECTIONS, "MPTCP connections opened");
        let accepted = server.accept(CONNECTIONS);
        assert_eq!(
            accepted.iter().collect::<BTreeSet<_>>(),
            opened.iter().collect::<BTreeSet<_>>(),
            "the receiver accepted the first subflows"
        );
        (server, workload, accepted)
    }

    /// Every TCP connection the receiver holds on its service port.
    fn subflows(&self) -> Vec<SocketAddr> {
        subflows(&self.lab.hosts, DPORT)
    }

    /// Waits until every connection has its second subflow.
    fn await_second_subflows(&self, connections: usize) -> Vec<SocketAddr> {
        let from = self.second.ip(self.lab.v6);
        await_subflows_from(&self.lab.hosts, from, DPORT, connections)
    }
}

/// Every TCP connection the receiver holds on `port`, by its peer's
/// address and port, as the receiver's kernel lists them: the tuples it
/// accepted, a truth SRAP did not compute. MPTCP's subflows are TCP
/// connections of their own.
fn subflows(hosts: &TwoHosts, port: u16) -> Vec<SocketAddr> {
    let out = hosts
        .receiver
        .exec(
            "ss",
            [
                "-Htn",
                "state",
                "established",
                &format!("( sport = :{port} )"),
            ],
        )
        .expect("ss in the receiver's namespace");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().nth(3)?.parse().ok())
        .collect()
}

/// Waits until every connection has its second subflow, from `second`'s
/// address: a run without them proves nothing and fails.
fn await_second_subflows(
    hosts: &TwoHosts,
    second: &VethEnd,
    port: u16,
    connections: usize,
) -> Vec<SocketAddr> {
    await_subflows_from(hosts, IpAddr::V4(second.ipv4), port, connections)
}

/// Waits until the receiver holds `connections` subflows from `from`.
fn await_subflows_from(
    hosts: &TwoHosts,
    from: IpAddr,
    port: u16,
    connections: usize,
) -> Vec<SocketAddr> {
    let from_second = || -> Vec<SocketAddr> {
        subflows(hosts, port)
            .into_iter()
            .filter(|peer| peer.ip() == from)
            .collect()
    };
    let seen = poll_until(SUBFLOWS_WAIT, Duration::from_millis(50), || {
        let subflows = from_second();
        if subflows.len() >= connections {
            ControlFlow::Break(subflows)
        } else {
            ControlFlow::Continue(subflows)
        }
    });
    seen.unwrap_or_else(|subflows| {
        panic!(
            "{} of {connections} second subflows from {from} within \
             {SUBFLOWS_WAIT:?}: {subflows:?} (MPTCP did not open them)",
            subflows.len()
        )
    })
}

/// Waits up to [`PROMPT`] until no slot counts a flow and the socket table
/// is empty; fails naming what is left.
#[track_caller]
fn assert_released_at_once(lab: &Lab, what: &str) {
    let closed = Instant::now();
    match super::patterns::drained_within(lab, PROMPT, Duration::from_millis(20)) {
        Ok(()) => eprintln!("{what}: released {:?} after the close", closed.elapsed()),
        Err((held, flows, records)) => panic!(
            "{what}: {:?} after every connection closed, {held} flows still \
             counted ({flows:?}) and {} socket records left: {records:?}",
            closed.elapsed(),
            records.len()
        ),
    }
}

/// Closes both ends (the client's workload, then the server's accepted
/// connections once their peers closed) and holds what every MPTCP test
/// holds after: everything released at once, nothing failed, nothing
/// repaired. The binder's counters then.
#[track_caller]
fn close_and_assert_drained(
    lab: &Lab,
    workload: Workload,
    server: &mut Server,
    accepted: &[u16],
    what: &str,
) -> srap_daemon::sender::BinderStats {
    workload.finish();
    server.await_closed(accepted);
    server.close(accepted);
    assert_released_at_once(lab, what);
    assert_nothing_failed_or_repaired(lab, what);
    lab.stats()
}

/// No connect came to a failure verdict, and the agent's audit repaired
/// nothing, then or in the two audits after (nothing was left for it).
#[track_caller]
fn assert_nothing_failed_or_repaired(lab: &Lab, what: &str) {
    let stats = lab.stats();
    assert_eq!(stats.failures(), 0, "{what}: failed connects: {stats}");
    let audit = lab.agent.status().expect("the agent's status").occupancy;
    assert_eq!(audit.repaired, 0, "{what}: the audit repaired {audit:?}");
    let later = super::occupancy::after_audits(lab, audit.audits + 2);
    assert_eq!(later.repaired, 0, "{what}: the audit repaired {later:?}");
}

/// 4 MPTCP connections from the steered cgroup, each with a second
/// subflow from the second link: the first subflows steered to distinct
/// CPUs, and once all are closed the occupancy is zero and the socket
/// table empty within a second, with no repair and no failed connect.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_subflows_release_what_they_claimed_at_once() {
    require_privileged("binder: MPTCP subflows release what they claimed");
    let mut mptcp = MptcpLab::new();
    mptcp.lab.start_agent();
    let (mut server, workload, accepted) = mptcp.open_connections();
    let lab = &mptcp.lab;
    assert_distinct_cpus(lab, &accepted);
    let second = mptcp.await_second_subflows(CONNECTIONS);
    eprintln!("second subflows: {second:?}; binder: {}", lab.stats());
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        CONNECTIONS as u64,
        "the first subflows steered: {stats}"
    );

    let stats = close_and_assert_drained(
        lab,
        workload,
        &mut server,
        &accepted,
        "MPTCP connections with two subflows",
    );
    assert_eq!(
        stats.get(event::RELEASED_AT_CLOSE),
        2 * CONNECTIONS as u64,
        "each subflow's claim freed at its TCP close, the first and the \
         second, steered at its bind: {stats}"
    );
}

/// A TCP application made MPTCP by `srap exec --mptcp` (mptcpize's
/// library): the workload's plain `connect()`s, without the flag only TCP
/// connections at the receiver's MPTCP listener (one each, no second
/// subflow), become MPTCP connections that grow their second subflow over
/// the second link, each steered onto a receiver CPU of its own, judged by
/// the connections the receiver's kernel holds.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn srap_exec_mptcp_makes_a_tcp_application_mptcp() {
    require_privileged("binder: srap exec --mptcp");
    let mut mptcp = MptcpLab::new();
    mptcp.lab.start_agent();
    let lab = &mptcp.lab;
    let cgroup = lab.agent.cgroup();
    let mut server = Server::bind_mptcp(&lab.hosts.receiver, lab.server_addr(), TIMEOUT);

    // Without the flag: TCP, and TCP stays one connection.
    let mut plain = Workload::spawn_exec_with(&lab.hosts.sender, cgroup, &[], lab.server_addr());
    let opened = plain.ask(&format!("open {CONNECTIONS}"));
    let accepted = server.accept(CONNECTIONS);
    assert_eq!(opened.len(), CONNECTIONS, "TCP connections opened");
    std::thread::sleep(Duration::from_secs(2));
    let tcp_only = mptcp.subflows();
    assert_eq!(
        tcp_only.len(),
        CONNECTIONS,
        "plain TCP grows no subflow: {tcp_only:?}"
    );
    plain.finish();
    server.await_closed(&accepted);
    server.close(&accepted);

    let mut made =
        Workload::spawn_exec_with(&lab.hosts.sender, cgroup, &["--mptcp"], lab.server_addr());
    let opened = made.ask(&format!("open {CONNECTIONS}"));
    assert_eq!(opened.len(), CONNECTIONS, "connections opened");
    let accepted = server.accept(CONNECTIONS);
    mptcp.await_second_subflows(CONNECTIONS);
    let subflows = mptcp.subflows();
    eprintln!(
        "srap exec --mptcp: subflows {subflows:?}; binder: {}",
        lab.stats()
    );
    assert_eq!(
        subflows.len(),
        2 * CONNECTIONS,
        "two subflows per connection at the receiver: {subflows:?}"
    );
    assert_subflows_on_distinct_cpus(lab, &subflows);
    assert_eq!(
        lab.stats().get(outcome::SUBFLOW_STEERED),
        CONNECTIONS as u64,
        "the second subflows steered: {}",
        lab.stats()
    );
    close_and_assert_drained(lab, made, &mut server, &accepted, "srap exec --mptcp");
}

/// Under the default `--mptcp off`, MPTCP connections from the steered
/// cgroup are left to the kernel: no subflow claims a slot (a claim nothing
/// would release, since no MPTCP program is loaded), every first subflow's
/// connect counts `protocol_not_steered`, and the connections carry on
/// with both subflows.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_off_leaves_every_subflow_to_the_kernel() {
    require_privileged("binder: --mptcp off leaves MPTCP to the kernel");
    let mut mptcp = MptcpLab::with_flags(false, &[]);
    mptcp.lab.start_agent();
    let (mut server, workload, accepted) = mptcp.open_connections();
    mptcp.await_second_subflows(CONNECTIONS);
    let lab = &mptcp.lab;
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::PROTOCOL_NOT_STEERED),
        CONNECTIONS as u64,
        "each first subflow left to the kernel: {stats}"
    );
    assert_eq!(stats.get(outcome::STEERED), 0, "{stats}");
    assert_eq!(super::occupancy::occupied(lab), 0, "no slot claimed");
    let stats = close_and_assert_drained(lab, workload, &mut server, &accepted, "--mptcp off");
    assert_eq!(stats.get(event::RELEASED_AT_CLOSE), 0, "{stats}");
}

/// Every subflow the receiver accepted lands on a receiver CPU of its own,
/// by the RSS model's hash of its tuple: the subflows of one connection
/// and those of concurrent connections alike.
#[track_caller]
fn assert_subflows_on_distinct_cpus(lab: &Lab, subflows: &[SocketAddr]) {
    let landed = landings(&lab.model, subflows, lab.server_addr()).expect("same-family tuples");
    let cpus: Vec<u32> = landed.iter().map(|landing| landing.cpu).collect();
    let distinct: BTreeSet<u32> = cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        subflows.len(),
        "subflows share receiver CPUs: {subflows:?} land on {cpus:?}"
    );
}

/// 12 MPTCP connections from the steered cgroup, each with a second
/// subflow from the second link that the kernel's path manager opens: the
/// 24 subflows the receiver accepted (listed by its kernel) land on 24
/// distinct receiver CPUs, and once all are closed the occupancy is zero
/// and the socket table empty, with no repair and no failed connect.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_every_subflow_lands_on_a_receiver_cpu_of_its_own() {
    require_privileged("binder: every MPTCP subflow on a receiver CPU of its own");
    every_subflow_on_a_cpu_of_its_own(false);
}

/// The same over IPv6: the bind6 hook steers the second subflows toward
/// their destination (traced from the path manager's call, or read from
/// the MPTCP socket), so the 24 IPv6 subflows land on 24 distinct
/// receiver CPUs, none keeps the kernel's port, and all are released at
/// their close.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_every_ipv6_subflow_lands_on_a_receiver_cpu_of_its_own() {
    require_privileged("binder: every IPv6 MPTCP subflow on a receiver CPU of its own");
    let stats = every_subflow_on_a_cpu_of_its_own(true);
    assert_every_bind_found_its_destination(&stats, SPREAD_CONNECTIONS);
}

/// Says which way the agent learns the further subflows' destinations:
/// traced from the path manager's calls, or (its log says why not) read
/// from their MPTCP sockets. Both must steer every subflow.
fn note_tracing(lab: &Lab) {
    match lab.agent.log().find(|l| l.contains("not traced")) {
        Some(line) => eprintln!("subflow destinations read from the MPTCP socket: {line}"),
        None => eprintln!("subflow destinations traced from __mptcp_subflow_connect"),
    }
}

/// Every further subflow's bind found its destination, traced or read from
/// its MPTCP socket.
#[track_caller]
fn assert_every_bind_found_its_destination(
    stats: &srap_daemon::sender::BinderStats,
    subflows: usize,
) {
    assert_eq!(
        stats.get(event::SUBFLOW_TRACED) + stats.get(event::SUBFLOW_UNTRACED),
        subflows as u64,
        "each further subflow's bind, traced or not: {stats}"
    );
}

/// [`SPREAD_CONNECTIONS`] MPTCP connections of the family `v6` names,
/// each with a second subflow from the second link: every subflow the
/// receiver accepted on a receiver CPU of its own, every one steered and
/// released at its close without repair. The binder's counters at the
/// end.
fn every_subflow_on_a_cpu_of_its_own(v6: bool) -> srap_daemon::sender::BinderStats {
    let mut mptcp = MptcpLab::of_family(v6);
    mptcp.lab.start_agent();
    let lab = &mptcp.lab;
    note_tracing(lab);
    let mut server = Server::bind_mptcp(&lab.hosts.receiver, lab.server_addr(), TIMEOUT);
    let mut workload = lab.workload(true);
    let opened = workload.ask(&format!("mptcp {SPREAD_CONNECTIONS}"));
    assert_eq!(opened.len(), SPREAD_CONNECTIONS, "MPTCP connections opened");
    let accepted = server.accept(SPREAD_CONNECTIONS);
    mptcp.await_second_subflows(SPREAD_CONNECTIONS);
    let subflows = mptcp.subflows();
    eprintln!("subflows: {subflows:?}; binder: {}", lab.stats());
    assert_eq!(
        subflows.len(),
        2 * SPREAD_CONNECTIONS,
        "two subflows per connection at the receiver: {subflows:?}"
    );
    assert_subflows_on_distinct_cpus(lab, &subflows);
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        SPREAD_CONNECTIONS as u64,
        "the first subflows steered at their connect: {stats}"
    );
    assert_eq!(
        stats.get(outcome::SUBFLOW_STEERED),
        SPREAD_CONNECTIONS as u64,
        "the second subflows steered at their bind: {stats}"
    );
    assert_eq!(stats.get(outcome::PORT_AT_BIND), 0, "{stats}");

    let stats = close_and_assert_drained(
        lab,
        workload,
        &mut server,
        &accepted,
        "MPTCP connections with two steered subflows",
    );
    assert_eq!(
        stats.get(event::RELEASED_AT_CLOSE),
        2 * SPREAD_CONNECTIONS as u64,
        "every subflow's claim freed at its TCP close: {stats}"
    );
    stats
}

/// A lab whose receiver announces its second link's address (an MPTCP
/// `signal` endpoint) and whose sender has no endpoint: the sender's path
/// manager opens each connection's second subflow toward the announced
/// address, from the address its route picks. The agent steers toward
/// both of the receiver's addresses (`--receiver` each, the same RSS
/// description). Field order is drop order, as in [`MptcpLab`].
/// [`AnnounceLab::open`]'s connections: the wildcard MPTCP server, the
/// workload holding the clients, the ports accepted, and the receiver's
/// subflows by (address entered, peer) with their tokens.
struct Opened {
    server: Server,
    workload: Workload,
    accepted: Vec<u16>,
    held: BTreeMap<(SocketAddr, SocketAddr), String>,
}

struct AnnounceLab {
    lab: Lab,
    /// The receiver's end of the second link: the announced address.
    far: VethEnd,
    _subnet: Subnet,
}

impl AnnounceLab {
    fn new() -> Self {
        Self::listing(true)
    }

    /// [`ANNOUNCE_CONNECTIONS`] steered MPTCP connections to a server on
    /// the wildcard address, held until each has a subflow toward the
    /// announced address.
    fn open(&self) -> Opened {
        let (lab, far) = (&self.lab, self.far.ip(false));
        let any = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), DPORT);
        let mut server = Server::bind_mptcp(&lab.hosts.receiver, any, TIMEOUT);
        let mut workload = lab.workload(true);
        let opened = workload.ask(&format!("mptcp {ANNOUNCE_CONNECTIONS}"));
        assert_eq!(
            opened.len(),
            ANNOUNCE_CONNECTIONS,
            "MPTCP connections opened"
        );
        let accepted = server.accept(ANNOUNCE_CONNECTIONS);
        let held = poll_until(SUBFLOWS_WAIT, Duration::from_millis(50), || {
            let held = receiver_subflows(&lab.hosts, DPORT);
            let at_far = held
                .keys()
                .filter(|(entered, _)| entered.ip() == far)
                .count();
            if at_far >= ANNOUNCE_CONNECTIONS {
                ControlFlow::Break(held)
            } else {
                ControlFlow::Continue(held)
            }
        })
        .unwrap_or_else(|held| {
            panic!("not {ANNOUNCE_CONNECTIONS} subflows toward the announced {far}: {held:?}")
        });
        Opened {
            server,
            workload,
            accepted,
            held,
        }
    }

    /// `listed`: the agent is told the announced address (another
    /// `--receiver`); without, its plan does not know it.
    fn listing(listed: bool) -> Self {
        let subnet = Subnet::lease().expect("a second subnet");
        let mut far = None;
        let lab = Lab::with_options(false, embedded_default(), PORT_RANGE, |opts, hosts| {
            let (near, announced) = hosts.second_link(&subnet).expect("the second link");
            hosts
                .enable_mptcp_with(
                    &near,
                    &announced,
                    MptcpEndpoint::ReceiverSignal { v6: false },
                )
                .expect("MPTCP over both links, the receiver announcing");
            let arg = announced.ipv4.to_string();
            far = Some(announced);
            let opts = opts.args(["--mptcp", "subflows"]);
            if listed {
                opts.args(["--receiver", &arg])
            } else {
                opts
            }
        });
        Self {
            lab,
            far: far.expect("the second link was made"),
            _subnet: subnet,
        }
    }
}

/// Every subflow the receiver holds on `port`, by (the address it
/// entered, its peer), with the receiver's token of its connection, as
/// `ss -Htni` in the receiver's namespace lists them.
fn receiver_subflows(hosts: &TwoHosts, port: u16) -> BTreeMap<(SocketAddr, SocketAddr), String> {
    ss_tokens_in(hosts, false, &format!("( sport = :{port} )"))
}

/// 6 MPTCP connections toward the receiver's first address, whose
/// receiver announces its second (`ADD_ADDR`) and whose sender has no
/// endpoint: by the subflows the receiver's kernel lists, each connection
/// has one subflow on each address, and the subflows that entered each
/// address land on distinct receiver CPUs of it (the RSS model's hash of
/// the tuples). Every one steered (the second toward the announced
/// address), none keeping the kernel's port; once closed, nothing left
/// and nothing repaired.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_subflows_toward_an_announced_address_land_on_its_own_cpus() {
    require_privileged("binder: MPTCP subflows toward an announced address");
    let mut announce = AnnounceLab::new();
    announce.lab.start_agent();
    let (lab, far) = (&announce.lab, announce.far.ip(false));
    note_tracing(lab);
    let Opened {
        mut server,
        workload,
        accepted,
        held,
    } = announce.open();
    eprintln!(
        "subflows at the receiver: {held:?}; binder: {}",
        lab.stats()
    );
    assert_eq!(held.len(), 2 * ANNOUNCE_CONNECTIONS, "{held:?}");
    assert_one_subflow_per_address(&held, [lab.receiver_ip(), far]);
    for addr in [lab.receiver_ip(), far] {
        let peers: Vec<SocketAddr> = held
            .keys()
            .filter(|(entered, _)| entered.ip() == addr)
            .map(|(_, peer)| *peer)
            .collect();
        let landed =
            landings(&lab.model, &peers, SocketAddr::new(addr, DPORT)).expect("same-family tuples");
        let cpus: BTreeSet<u32> = landed.iter().map(|l| l.cpu).collect();
        assert_eq!(
            cpus.len(),
            peers.len(),
            "subflows that entered {addr} share its CPUs: {peers:?} land on {landed:?}"
        );
    }
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        ANNOUNCE_CONNECTIONS as u64,
        "the first subflows steered at their connect: {stats}"
    );
    assert_eq!(
        stats.get(outcome::SUBFLOW_STEERED),
        ANNOUNCE_CONNECTIONS as u64,
        "the subflows toward the announced address steered at their bind: {stats}"
    );
    assert_every_bind_found_its_destination(&stats, ANNOUNCE_CONNECTIONS);
    assert_eq!(stats.get(outcome::PORT_AT_BIND), 0, "{stats}");

    let stats = close_and_assert_drained(
        lab,
        workload,
        &mut server,
        &accepted,
        "MPTCP connections with an announced address",
    );
    assert_eq!(
        stats.get(event::RELEASED_AT_CLOSE),
        2 * ANNOUNCE_CONNECTIONS as u64,
        "every subflow's claim freed at its TCP close: {stats}"
    );
}

/// As above, but the agent is not told the announced address: each
/// subflow toward it keeps the kernel's port, counted as such
/// (`subflow_unplanned` at its bind, `miss` at its connect), the
/// first subflows are steered as ever, nothing fails and nothing is left
/// after the close.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_subflows_toward_an_unplanned_announced_address_keep_the_kernels_port() {
    require_privileged("binder: MPTCP subflows toward an unplanned announced address");
    let mut announce = AnnounceLab::listing(false);
    announce.lab.start_agent();
    let (lab, far) = (&announce.lab, announce.far.ip(false));
    let Opened {
        mut server,
        workload,
        accepted,
        held,
    } = announce.open();
    assert_one_subflow_per_address(&held, [lab.receiver_ip(), far]);
    let stats = lab.stats();
    eprintln!("binder: {stats}");
    let n = ANNOUNCE_CONNECTIONS as u64;
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        n,
        "{stats}"
    );
    assert_eq!(stats.get(event::SUBFLOW_UNPLANNED), n, "{stats}");
    assert_eq!(stats.get(outcome::MISS), n, "{stats}");
    assert_eq!(stats.get(outcome::SUBFLOW_STEERED), 0, "{stats}");
    assert_eq!(stats.get(outcome::PORT_AT_BIND), 0, "{stats}");

    close_and_assert_drained(
        lab,
        workload,
        &mut server,
        &accepted,
        "MPTCP connections with an unplanned announced address",
    );
}

/// Each of the receiver's connections (its token) holds exactly one
/// subflow that entered each of `addrs`.
#[track_caller]
fn assert_one_subflow_per_address(
    held: &BTreeMap<(SocketAddr, SocketAddr), String>,
    addrs: [IpAddr; 2],
) {
    let mut by_token: BTreeMap<&String, Vec<IpAddr>> = BTreeMap::new();
    for ((entered, _), token) in held {
        by_token.entry(token).or_default().push(entered.ip());
    }
    assert_eq!(
        by_token.len(),
        ANNOUNCE_CONNECTIONS,
        "connections: {held:?}"
    );
    for (token, mut entered) in by_token {
        entered.sort();
        let mut wanted = addrs.to_vec();
        wanted.sort();
        assert_eq!(
            entered, wanted,
            "connection {token}: one subflow on each address: {held:?}"
        );
    }
}

/// `ss -Htni` in the sender's namespace toward `port`: each subflow's
/// (local, remote) tuple and its connection's local token, as `ss` prints
/// it (`token:REMOTE(id:N)/LOCAL(id:M)`): the kernel's own grouping.
fn ss_tokens(hosts: &TwoHosts, port: u16) -> BTreeMap<(SocketAddr, SocketAddr), String> {
    ss_tokens_in(hosts, true, &format!("( dport = :{port} )"))
}

/// `ss -Htni state established FILTER` in the sender's namespace (or the
/// receiver's), as [`ss_tokens`] reads it.
fn ss_tokens_in(
    hosts: &TwoHosts,
    sender: bool,
    filter: &str,
) -> BTreeMap<(SocketAddr, SocketAddr), String> {
    let ns = if sender {
        &hosts.sender
    } else {
        &hosts.receiver
    };
    let out = ns
        .exec("ss", ["-Htni", "state", "established", filter])
        .expect("ss -tni in the namespace");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut tokens = BTreeMap::new();
    let mut tuple = None;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [_, _, local, remote, ..] = words[..]
            && let (Ok(local), Ok(remote)) = (local.parse(), remote.parse())
        {
            tuple = Some((local, remote));
        }
        let token = words
            .iter()
            .find_map(|w| w.strip_prefix("token:"))
            .and_then(|t| t.split_once('/'))
            .and_then(|(_, local)| local.split_once('('))
            .map(|(local, _)| local);
        if let (Some(tuple), Some(token)) = (tuple, token) {
            tokens.insert(tuple, token.to_owned());
        }
    }
    tokens
}

/// MPTCP connections from the steered cgroup under a sender agent that
/// follows a receiver agent: `srap status --sender --json` groups their
/// subflows exactly as the sender's kernel does (`ss -tni`'s tokens, a
/// grouping SRAP did not compute), names each connection by a token `ss`
/// prints for it, and the subflows of each connection are planned on
/// distinct receiver CPUs.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn sender_status_groups_subflows_by_the_kernels_mptcp_token() {
    require_privileged("sender status: MPTCP connections with their subflows");
    let hosts = TwoHosts::new(VethConfig::default()).expect("two namespaces");
    let subnet = Subnet::lease().expect("a second subnet");
    let (second, far) = hosts.second_link(&subnet).expect("the second link");
    hosts
        .enable_mptcp(&second, &far)
        .expect("MPTCP over both links");
    let receiver_ip = hosts.receiver_end.ip(false);
    let opts = ReceiverOpts::new(
        built_binary("srap-agent"),
        &hosts.receiver_end.ifname,
        SocketAddr::new(receiver_ip, 7447),
    )
    .rss(embedded_default())
    .arg("--open");
    let receiver = ReceiverAgent::start(&hosts.receiver, opts).expect("the receiver agent");
    let opts = SenderOpts::new(built_binary("srap-agent"))
        .peer(receiver.peer())
        .report_port(DPORT)
        .args(["--receiver", &receiver_ip.to_string(), "--steer", "remote"])
        .args(["--mptcp", "subflows"]);
    let sender = SenderAgent::start(&hosts.sender, opts).expect("the sender agent steers");
    let server_addr = SocketAddr::new(receiver_ip, DPORT);
    let mut server = Server::bind_mptcp(&hosts.receiver, server_addr, TIMEOUT);
    let mut workload = Workload::spawn(&hosts.sender, Some(sender.cgroup()), server_addr);
    let opened = workload.ask(&format!("mptcp {CONNECTIONS}"));
    assert_eq!(opened.len(), CONNECTIONS, "MPTCP connections opened");
    let accepted = server.accept(CONNECTIONS);
    await_second_subflows(&hosts, &second, DPORT, CONNECTIONS);

    let status = poll_until(TIMEOUT, Duration::from_millis(200), || {
        let status = sender.status().ok();
        let grouped = status.as_ref().is_some_and(|s| {
            s.mptcp.len() == CONNECTIONS && s.mptcp.iter().all(|m| m.subflows.len() == 2)
        });
        match status {
            Some(status) if grouped => ControlFlow::Break(status),
            status => ControlFlow::Continue(status),
        }
    })
    .unwrap_or_else(|status| panic!("not {CONNECTIONS} connections × 2 subflows: {status:#?}"));
    let truth = ss_tokens(&hosts, DPORT);
    assert_eq!(truth.len(), 2 * CONNECTIONS, "ss's subflows: {truth:?}");
    let mut ours = BTreeSet::new();
    for conn in &status.mptcp {
        let tuples: BTreeSet<(SocketAddr, SocketAddr)> = conn
            .subflows
            .iter()
            .filter_map(|s| Some((s.src?, s.dst?)))
            .collect();
        let said: BTreeSet<&String> = tuples.iter().filter_map(|t| truth.get(t)).collect();
        assert_eq!(
            said.len(),
            1,
            "one kernel token per connection: {conn:?} {truth:?}"
        );
        let said = said.into_iter().next().expect("one");
        assert_eq!(
            *said,
            format!("{:x}", conn.token),
            "the local token ss prints for it: {conn:?}"
        );
        assert_eq!(
            conn.receiver_cpus().len(),
            conn.subflows.len(),
            "each subflow on a receiver CPU of its own: {conn:?}"
        );
        ours.insert(tuples);
    }
    let mut kernels: BTreeMap<&String, BTreeSet<(SocketAddr, SocketAddr)>> = BTreeMap::new();
    for (tuple, token) in &truth {
        kernels.entry(token).or_default().insert(*tuple);
    }
    let kernels: BTreeSet<_> = kernels.into_values().collect();
    assert_eq!(ours, kernels, "SRAP's grouping vs the kernel's");
    eprintln!(
        "srap status --sender:\n{}",
        srap_status_text(&sender).unwrap_or_default()
    );
    workload.finish();
    server.await_closed(&accepted);
    server.close(&accepted);
}

/// `srap status --sender --once` (text) from the agent's control socket.
fn srap_status_text(agent: &SenderAgent) -> Option<String> {
    let out = std::process::Command::new(built_binary("srap"))
        .args(["status", "--sender", "--once", "--control"])
        .arg(agent.control())
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}
