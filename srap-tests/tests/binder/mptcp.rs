//! MPTCP through the binder: every subflow of a connection is a socket of
//! the kernel's own (`sk_kern_sock`), which the release hook never sees.
//! Two namespaces joined by two links, MPTCP endpoints as a user sets
//! them up, connections from the steered cgroup that really grow a second
//! subflow each (judged by the subflows the receiver holds): once closed,
//! nothing of theirs is left counted, at once, without the agent's audit;
//! and every subflow, the ones the kernel's path manager opens included,
//! lands on a receiver CPU of its own by the tuples the receiver accepted.

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
use srap_tests::{
    TwoHosts, VethConfig, VethEnd, built_binary,
    flows::Server,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts, Subnet, landings, poll_until},
    require_privileged,
    test_workload::Workload,
};

use super::{DPORT, Lab, TIMEOUT, assert_distinct_cpus};

/// MPTCP connections per run.
const CONNECTIONS: usize = 4;
/// MPTCP connections of the spread test: their 24 subflows fill 24 of the
/// lab receiver's 32 CPUs, which the kernel's own ports do by chance about
/// once in ten thousand runs.
const SPREAD_CONNECTIONS: usize = 12;
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
        let lab = Lab::new(false);
        let subnet = Subnet::lease().expect("a second subnet");
        let hosts = &lab.hosts;
        let (second, far) = hosts.second_link(&subnet).expect("the second link");
        hosts
            .enable_mptcp(&second, &far)
            .expect("MPTCP over both links");
        Self {
            lab,
            second,
            _subnet: subnet,
        }
    }

    /// Every TCP connection the receiver holds on its service port.
    fn subflows(&self) -> Vec<SocketAddr> {
        subflows(&self.lab.hosts, DPORT)
    }

    /// Waits until every connection has its second subflow.
    fn await_second_subflows(&self, connections: usize) -> Vec<SocketAddr> {
        await_second_subflows(&self.lab.hosts, &self.second, DPORT, connections)
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
    let from = IpAddr::V4(second.ipv4);
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
    let lab = &mptcp.lab;
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
    assert_distinct_cpus(lab, &accepted);
    let second = mptcp.await_second_subflows(CONNECTIONS);
    eprintln!("second subflows: {second:?}; binder: {}", lab.stats());
    let stats = lab.stats();
    assert_eq!(
        stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
        CONNECTIONS as u64,
        "the first subflows steered: {stats}"
    );

    workload.finish();
    server.await_closed(&accepted);
    server.close(&accepted);
    assert_released_at_once(lab, "MPTCP connections with two subflows");
    assert_nothing_failed_or_repaired(lab, "MPTCP connections with two subflows");
    let stats = lab.stats();
    assert_eq!(
        stats.get(event::RELEASED_AT_CLOSE),
        2 * CONNECTIONS as u64,
        "each subflow's claim freed at its TCP close, the first and the \
         second, steered at its bind: {stats}"
    );
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
    let mut mptcp = MptcpLab::new();
    mptcp.lab.start_agent();
    let lab = &mptcp.lab;
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

    workload.finish();
    server.await_closed(&accepted);
    server.close(&accepted);
    assert_released_at_once(lab, "MPTCP connections with two steered subflows");
    assert_nothing_failed_or_repaired(lab, "MPTCP connections with two steered subflows");
    let stats = lab.stats();
    assert_eq!(
        stats.get(event::RELEASED_AT_CLOSE),
        2 * SPREAD_CONNECTIONS as u64,
        "every subflow's claim freed at its TCP close: {stats}"
    );
}

/// `ss -Htni` in the sender's namespace toward `port`: each subflow's
/// (local, remote) tuple and its connection's local token, as `ss` prints
/// it (`token:REMOTE(id:N)/LOCAL(id:M)`): the kernel's own grouping.
fn ss_tokens(hosts: &TwoHosts, port: u16) -> BTreeMap<(SocketAddr, SocketAddr), String> {
    let out = hosts
        .sender
        .exec(
            "ss",
            [
                "-Htni",
                "state",
                "established",
                &format!("( dport = :{port} )"),
            ],
        )
        .expect("ss -tni in the sender's namespace");
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
        .args(["--receiver", &receiver_ip.to_string(), "--steer", "remote"]);
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
