//! The binder's state stays true: after every way an application may come
//! to `connect()` and go away — plain, dual-stack, its own address bound
//! first (`IP_BIND_ADDRESS_NO_PORT`), a connect retried after a refusal on
//! the same socket, sockets shared with a forked child, a killed process,
//! an agent restarted with flows open, a re-plan with flows open — and all
//! sockets closed, the pinned occupancy is zero and the socket table
//! empty, and the agent's occupancy audit repaired nothing; then 64
//! connects at once land on 64 distinct CPUs. The same for MPTCP sockets,
//! whose subflows are the kernel's own. And a soak mixing them all with
//! churn, a re-plan and an agent restart. Judged from the kernel's
//! side: the pinned maps read back, the audit's comparison with the
//! kernel's open sockets, and the source ports the receiver accepted
//! hashed with the RSS model.

use std::{
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use srap_common::{
    binder::{FIRST_RECEIVER_ROW, SocketRecord},
    rss::embedded_default,
};
use srap_daemon::sender::{audit::read_records, read_occupancy};
use srap_tests::{harness::poll_until, test_workload::Workload};

use super::{DPORT, Lab, PORT_RANGE, TIMEOUT, assert_distinct_cpus};
use srap_tests::require_privileged;

/// Up to this long for closes to reach the release hook.
const DRAIN: Duration = Duration::from_secs(10);

/// A lab whose receiver has 64 CPUs (so 64 flows at once can each have
/// one), its agent running as a daemon (restarted and re-planned below)
/// with `extra` flags.
fn lab64_with(v6: bool, extra: &[&str]) -> Lab {
    let mut description = embedded_default();
    description.indir = (0..128).map(|i| i % 64).collect();
    description.queue_cpu = Some((0..64).collect());
    let mut lab = Lab::with_options(v6, description, PORT_RANGE, |opts, _| {
        opts.args(extra.iter().copied())
    });
    lab.start_agent();
    lab
}

/// [`lab64_with`] in the default settings.
fn lab64(v6: bool) -> Lab {
    lab64_with(v6, &[])
}

/// Waits until no slot counts a flow and no socket has a record; fails
/// naming `pattern` and what is left, or when the agent's occupancy audit
/// had to repair anything (the binder alone must get it right).
#[track_caller]
fn assert_drained(lab: &Lab, pattern: &str) {
    if let Err((held, flows, records)) = drained_within(lab, DRAIN, Duration::from_millis(50)) {
        panic!(
            "{pattern}: all sockets closed, yet {held} flows still counted \
             ({flows:?}) and {} socket records left: {records:?}",
            records.len()
        );
    }
    let audit = lab.agent.status().expect("the agent's status").occupancy;
    assert_eq!(audit.repaired, 0, "{pattern}: the audit repaired {audit:?}");
}

/// What a drain left: the flows still counted (in all, per slot) and the
/// socket records (row, cookie, record).
pub(super) type Left = (u32, Vec<u32>, Vec<(u32, u64, SocketRecord)>);

/// Polls every `step` until no slot counts a flow and no socket has a
/// record (`Ok`), or `within` passes: then what is [`Left`].
pub(super) fn drained_within(lab: &Lab, within: Duration, step: Duration) -> Result<(), Left> {
    let layout = lab.agent.layout();
    poll_until(within, step, || {
        let flows = read_occupancy(&layout, FIRST_RECEIVER_ROW).expect("the pinned occupancy");
        let records = read_records(&layout).expect("the pinned socket table");
        let held: u32 = flows.iter().sum();
        if held == 0 && records.is_empty() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue((held, flows, records))
        }
    })
}

/// 64 connects at once land on 64 distinct CPUs; then they close and the
/// binder drains again.
#[track_caller]
fn sixty_four_at_once(lab: &Lab, server: &mut super::Server, pattern: &str) {
    let mut workload = lab.workload(true);
    let opened = workload.ask("burst 64");
    assert_eq!(opened.len(), 64, "{pattern}");
    let accepted = server.accept(64);
    assert_distinct_cpus(lab, &accepted);
    let closed = workload.close(64);
    server.await_closed(&closed);
    workload.finish();
    assert_drained(lab, &format!("{pattern}, then 64 at once"));
}

/// One pattern: `open` brings `n` connections up through the workload (and
/// returns it), then the workload ends (closing them), and the binder must
/// be drained and still place 64 flows on 64 CPUs.
fn check(
    lab: &mut Lab,
    server: &mut super::Server,
    pattern: &str,
    n: usize,
    open: impl FnOnce(&mut Lab, &mut Workload) -> Vec<u16>,
) {
    let mut workload = lab.workload(true);
    let ports = open(lab, &mut workload);
    assert_eq!(ports.len(), n, "{pattern}: connections opened");
    let accepted = server.accept(n);
    assert_distinct_cpus(lab, &accepted);
    workload.finish();
    server.await_closed(&accepted);
    assert_drained(lab, pattern);
    sixty_four_at_once(lab, server, pattern);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn every_socket_pattern_releases_exactly_what_it_claimed() {
    require_privileged("binder: the socket-pattern matrix drains the occupancy");
    let mut lab = lab64(false);
    let own = lab.sender_ip();
    let mut server = lab.listen();
    check(&mut lab, &mut server, "plain connects", 16, |_, w| {
        w.open(16)
    });
    check(
        &mut lab,
        &mut server,
        "own address, port 0, IP_BIND_ADDRESS_NO_PORT",
        8,
        |_, w| w.ask(&format!("ownaddr {own} 8")),
    );
    check(
        &mut lab,
        &mut server,
        "a connect retried after a refusal",
        8,
        |_, w| w.ask("retry 8"),
    );
    check(
        &mut lab,
        &mut server,
        "sockets shared with a forked child",
        8,
        |_, w| {
            let ports = w.open(8);
            w.ask("forkhold 1");
            ports
        },
    );
    check(
        &mut lab,
        &mut server,
        "an agent restarted with flows open",
        8,
        |lab, w| {
            let ports = w.open(8);
            lab.kill_agent();
            lab.start_agent();
            ports
        },
    );
    check(
        &mut lab,
        &mut server,
        "a re-plan with flows open",
        8,
        |lab, w| {
            let ports = w.open(8);
            super::clients::add_sender_address(lab, 21);
            lab.await_agent_line("local addresses, routes or bond members changed: replanned");
            ports
        },
    );
    // A killed process: its sockets close without it.
    let mut workload = lab.workload(true);
    let ports = workload.open(8);
    let accepted = server.accept(8);
    assert_eq!(ports.len(), 8);
    assert_distinct_cpus(&lab, &accepted);
    workload.kill();
    server.await_closed(&accepted);
    assert_drained(&lab, "a killed process");
    sixty_four_at_once(&lab, &mut server, "a killed process");
}

/// The same for dual-stack sockets (an `AF_INET6` socket toward the IPv4
/// receiver as `::ffff:a.b.c.d`) and for IPv6.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn dual_stack_and_ipv6_sockets_release_exactly_what_they_claimed() {
    require_privileged("binder: dual-stack and IPv6 sockets drain the occupancy");
    let lab = lab64(false);
    let IpAddr::V4(receiver) = lab.receiver_ip() else {
        panic!("an IPv4 lab");
    };
    let mapped = SocketAddr::new(IpAddr::V6(receiver.to_ipv6_mapped()), DPORT);
    open_close_and_drain(&lab, mapped, "dual-stack connects");
    let lab = lab64(true);
    open_close_and_drain(&lab, lab.server_addr(), "IPv6 connects");
}

/// 16 connections toward `dst` on 16 CPUs, closed, drained; then 64 at
/// once.
fn open_close_and_drain(lab: &Lab, dst: SocketAddr, pattern: &str) {
    let mut server = lab.listen();
    let mut workload = Workload::spawn(&lab.hosts.sender, Some(lab.agent.cgroup()), dst);
    workload.open(16);
    let accepted = server.accept(16);
    assert_distinct_cpus(lab, &accepted);
    workload.finish();
    server.await_closed(&accepted);
    assert_drained(lab, pattern);
    sixty_four_at_once(lab, &mut server, pattern);
}

/// MPTCP sockets (as `mptcpize` makes a program's), whose subflows are
/// kernel sockets the release hook never sees: toward a plain TCP server,
/// fallen back to TCP on their first subflow, and toward an MPTCP server,
/// one subflow each. Drained all the same, then 64 at once.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_sockets_release_exactly_what_they_claimed() {
    require_privileged("binder: MPTCP sockets drain the occupancy");
    let lab = lab64_with(false, &["--mptcp", "subflows"]);
    for ns in [&lab.hosts.sender, &lab.hosts.receiver] {
        ns.exec("sysctl", ["-qw", "net.mptcp.enabled=1"])
            .expect("MPTCP enabled");
    }
    let mut tcp = lab.listen();
    open_mptcp_close_and_drain(&lab, &mut tcp, "MPTCP toward a TCP server (fallen back)");
    drop(tcp);
    let mut mptcp = super::Server::bind_mptcp(&lab.hosts.receiver, lab.server_addr(), TIMEOUT);
    open_mptcp_close_and_drain(&lab, &mut mptcp, "MPTCP toward an MPTCP server");
}

/// 8 MPTCP connections on 8 CPUs (their first subflows, steered), closed
/// on both ends (an MPTCP client keeps its subflows until its peer closes
/// too, or for a minute), drained; then 64 at once.
fn open_mptcp_close_and_drain(lab: &Lab, server: &mut super::Server, pattern: &str) {
    let mut workload = lab.workload(true);
    let opened = workload.ask("mptcp 8");
    assert_eq!(opened.len(), 8, "{pattern}: connections opened");
    let accepted = server.accept(8);
    assert_distinct_cpus(lab, &accepted);
    workload.finish();
    server.await_closed(&accepted);
    server.close(&accepted);
    assert_drained(lab, pattern);
    sixty_four_at_once(lab, server, pattern);
}

/// The churn's own port in the soak (its objects close first; a sink
/// takes them).
const SOAK_CHURN_DPORT: u16 = 5204;
/// Rounds of the soak's pattern mixer (each about a second).
const SOAK_ROUNDS: usize = 16;

/// A soak: 16 long flows, a connection-per-object churn and a process
/// mixing the patterns above (own address, a retried connect, sockets
/// shared with a child, bursts, MPTCP), with a re-plan and an agent restart in
/// the middle. Every second the running agent's audit (the binder's
/// occupancy against the kernel's open sockets) has repaired nothing; the
/// long flows sit on 16 distinct CPUs (the tuples the receiver accepted)
/// and are all that is counted at the end; then everything drains.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_soak_of_mixed_patterns_with_a_replan_and_a_restart_drifts_nothing() {
    require_privileged("binder: soak of mixed socket patterns");
    let mut lab = lab64(false);
    lab.sender_sysctl("net.mptcp.enabled", "1");
    let own = lab.sender_ip();
    let churn_sink = super::occupancy::sink(&lab, SOAK_CHURN_DPORT);
    let mut server = lab.listen();
    let mut long = lab.workload(true);
    long.open(16);
    let long_ports = server.accept(16);
    assert_distinct_cpus(&lab, &long_ports);
    let mut churn = Workload::spawn(
        &lab.hosts.sender,
        Some(lab.agent.cgroup()),
        SocketAddr::new(lab.receiver_ip(), SOAK_CHURN_DPORT),
    );
    churn.send(&format!("churn 40 {SOAK_ROUNDS}"));
    let mut mixer = lab.workload(true);
    let started = Instant::now();
    for round in 0..SOAK_ROUNDS {
        let command = match round % 5 {
            0 => format!("ownaddr {own} 4"),
            1 => "retry 4".to_owned(),
            2 => "burst 8".to_owned(),
            3 => "open 4".to_owned(),
            _ => "mptcp 4".to_owned(),
        };
        let opened = mixer.ask(&command);
        server.accept(opened.len());
        if command.starts_with("open") {
            mixer.ask("forkhold 1");
        } else {
            let closed = mixer.close(opened.len());
            server.await_closed(&closed);
            // MPTCP (fallen back toward this TCP server) keeps its
            // subflow until its peer closes too.
            server.close(&closed);
        }
        match round {
            5 => {
                super::clients::add_sender_address(&lab, 21);
                lab.await_agent_line("local addresses, routes or bond members changed: replanned");
            }
            10 => {
                assert_nothing_repaired(&lab, "before the restart");
                lab.kill_agent();
                lab.start_agent();
            }
            _ => {}
        }
        assert_nothing_repaired(&lab, &format!("round {round}"));
        let due = started + Duration::from_secs(round as u64 + 1);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    let objects = churn.answer(Duration::from_secs(30));
    churn_sink.finish(Duration::from_millis(300));
    mixer.finish();
    churn.finish();
    assert!(objects.iter().all(|p| *p != 0), "churn connects failed");
    // Two audits after the churn and the mixer's last sockets closed.
    let now = super::occupancy::after_audits(&lab, 0).audits;
    let audit = super::occupancy::after_audits(&lab, now + 2);
    assert_eq!(audit.repaired, 0, "{audit:?}");
    assert_eq!(super::occupancy::occupied(&lab), 16, "only the long flows");
    eprintln!(
        "soak: {} churn objects, {SOAK_ROUNDS} mixer rounds, a re-plan and a restart in {:.0} s; \
         binder: {}",
        objects.len(),
        started.elapsed().as_secs_f64(),
        lab.stats()
    );
    long.finish();
    server.await_closed(&long_ports);
    assert_drained(&lab, "the soak");
}

/// The running agent's audit has repaired nothing.
#[track_caller]
fn assert_nothing_repaired(lab: &Lab, when: &str) {
    let audit = lab.agent.status().expect("the agent's status").occupancy;
    assert_eq!(audit.repaired, 0, "{when}: the audit repaired {audit:?}");
}
