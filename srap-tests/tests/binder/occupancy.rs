//! The occupancy audit on a real kernel: the running sender agent compares,
//! every interval (1 s here), the binder's per-CPU flow counts with its
//! socket table and the kernel's open sockets, and repairs what stays
//! wrong. A repair is a bug report: plain steered connects under churn
//! must give none; a drift made on purpose must be found, repaired once,
//! and leave the occupancy equal to the open sockets.
//!
//! The drift is made by `srap_occupancy_inject` (srap-ebpf/src/inject.rs,
//! in the lab's object, through `srap_harness::drift`): the tests' sibling
//! of the repair program, which the agents' object does not carry. It
//! claims a slot and records it for a cookie that is no socket, as a
//! socket that closed without its record being forgotten leaves them.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use srap_common::binder::FIRST_RECEIVER_ROW;
use srap_status::sender::OccupancyRow;
use srap_tests::{
    flows::{Sink, listen_deep},
    harness::poll_until,
};

use super::{Lab, TIMEOUT};
use srap_tests::require_privileged;

/// The churn's own port (its objects close first; a sink takes them).
const CHURN_DPORT: u16 = 5203;
/// Rounds of long flows opened and closed during the churn.
const ROUNDS: usize = 8;
/// A cookie no socket has: the kernel counts cookies up from 1.
const NO_SOCKET: u64 = u64::MAX - 0x5a5a;

/// Open flows the pinned occupancy counts toward the first receiver row.
pub(super) fn occupied(lab: &Lab) -> u32 {
    srap_daemon::sender::read_occupancy(&lab.agent.layout(), FIRST_RECEIVER_ROW)
        .expect("the binder's occupancy")
        .iter()
        .sum()
}

/// The agent's audit once it has run `n` audits or more.
pub(super) fn after_audits(lab: &Lab, n: u64) -> OccupancyRow {
    poll_until(TIMEOUT, Duration::from_millis(100), || {
        let audit = lab.agent.status().expect("the sender's status").occupancy;
        if audit.audits >= n {
            ControlFlow::Break(audit)
        } else {
            ControlFlow::Continue(audit)
        }
    })
    .unwrap_or_else(|audit| panic!("the agent ran {} audits, not {n}", audit.audits))
}

/// Repair lines in the agent's log.
fn repair_lines(lab: &Lab) -> Vec<String> {
    lab.agent
        .log()
        .text()
        .lines()
        .filter(|l| l.contains("occupancy audit: repaired"))
        .map(str::to_owned)
        .collect()
}

/// The sender's `/metrics` text passes promtool, and says `want` repairs
/// of `kind`: scraped from the agent's `--metrics` in its namespace when
/// it serves one, else as the agent would render its status.
fn check_metrics(lab: &Lab, kind: &str, want: u64) {
    let text = match scrape(lab) {
        Some(text) => text,
        None => {
            let status = lab.agent.status().expect("the sender's status");
            srap_status::metrics::render_sender(&status)
        }
    };
    srap_tests::promtool::check_metrics("the sender agent's /metrics", &text);
    srap_tests::grafana::check_scrape(srap_tests::grafana::Agent::Sender, &text);
    let repaired = format!("srap_sender_occupancy_repaired_total{{kind=\"{kind}\"}} {want}");
    assert!(text.lines().any(|l| l == repaired), "{text}");
    // This host's NICs: the sender's veth, up, with no NUMA node (a veth
    // has no device: unknown, not 0).
    let nic = format!(
        "srap_sender_local_nic_up{{iface=\"{}\",node=\"unknown\"}} 1",
        lab.hosts.sender_end.ifname
    );
    assert!(text.lines().any(|l| l == nic), "{nic} in:\n{text}");
}

/// `GET /metrics` from the agent's `--metrics` ([`METRICS`]) in the
/// sender's namespace, the body; `None` when nothing listens there.
fn scrape(lab: &Lab) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let reply = lab
        .hosts
        .sender
        .run(|| -> std::io::Result<String> {
            let mut stream = std::net::TcpStream::connect(METRICS)?;
            stream.set_read_timeout(Some(TIMEOUT))?;
            stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: srap\r\n\r\n")?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply)?;
            Ok(reply)
        })
        .expect("sender netns")
        .ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    Some(body.to_owned())
}

/// Where the drift tests' agent serves `/metrics`, in its namespace.
const METRICS: &str = "127.0.0.1:9448";

/// A lab whose agent serves `/metrics` on [`METRICS`].
fn lab_with_metrics() -> Lab {
    Lab::with_options(
        false,
        srap_common::rss::embedded_default(),
        super::PORT_RANGE,
        |opts, _| opts.args(["--metrics", METRICS]),
    )
}

pub(super) fn sink(lab: &Lab, port: u16) -> Sink {
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
    let listener = lab
        .hosts
        .receiver
        .run(|| listen_deep(any))
        .expect("receiver netns")
        .expect("listen");
    Sink::start(listener)
}

/// Long flows opened and closed in rounds while a connection-per-object
/// churn runs beside them: every audit finds the occupancy as the open
/// sockets say (`occupancy_repaired` 0, no repair logged), and once the
/// churn is over the pinned occupancy is exactly the flows still open.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn steered_connects_under_churn_leave_nothing_to_repair() {
    require_privileged("binder: occupancy audit under churn");
    let mut lab = Lab::new(false);
    lab.start_agent();
    let churn_sink = sink(&lab, CHURN_DPORT);
    let mut churn = srap_tests::test_workload::Workload::spawn(
        &lab.hosts.sender,
        Some(lab.agent.cgroup()),
        SocketAddr::new(lab.receiver_ip(), CHURN_DPORT),
    );
    let mut server = lab.listen();
    let mut long = lab.workload(true);
    churn.send("churn 100 5");
    // Rounds over the churn's 5 s (the test's server keeps what it
    // accepted: a bounded number of rounds).
    let mut open = 0usize;
    for _ in 0..ROUNDS {
        long.open(16);
        server.accept(16);
        open += 16;
        let closed = long.close(12);
        server.await_closed(&closed);
        open -= 12;
        std::thread::sleep(Duration::from_millis(600));
    }
    let objects = churn.answer(TIMEOUT);
    churn_sink.finish(Duration::from_millis(300));
    assert!(objects.iter().all(|p| *p != 0), "churn connects failed");
    // Two audits after the churn: every object closed before them.
    let at_end = after_audits(&lab, 0).audits;
    let audit = after_audits(&lab, at_end + 2);
    let stats = lab.stats();
    eprintln!(
        "occupancy audit under churn: {} audits, {} objects and {} long flows steered, {open} \
         open at the end, pinned occupancy {}; repaired {}; binder: {stats}",
        audit.audits,
        objects.len(),
        stats.get(srap_common::binder::outcome::STEERED) as usize - objects.len(),
        occupied(&lab),
        audit.repaired,
    );
    assert_eq!(audit.repaired, 0, "{audit:?}");
    assert_eq!(repair_lines(&lab), Vec::<String>::new());
    assert_eq!(occupied(&lab) as usize, open, "occupancy = open flows");
    check_metrics(&lab, "stale_record", 0);
    check_metrics(&lab, "count_mismatch", 0);
    long.finish();
}

/// A record for a cookie that is no socket, its slot's count raised with
/// it: the audit finds it within two intervals, repairs it once (counted
/// once, logged once with the cookie), and afterwards the pinned occupancy
/// is the open sockets again, and stays so.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_drift_made_on_purpose_is_repaired_once_within_two_intervals() {
    require_privileged("binder: occupancy audit repairs a drift");
    let mut lab = lab_with_metrics();
    lab.start_agent();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(4);
    server.accept(4);
    let before = after_audits(&lab, 1);
    assert_eq!(before.repaired, 0, "{before:?}");
    assert_eq!(occupied(&lab), 4);

    srap_harness::drift::inject_stale_record(&lab.agent.layout(), FIRST_RECEIVER_ROW, 0, NO_SOCKET)
        .expect("inject a stale record");
    let injected = Instant::now();
    assert_eq!(occupied(&lab), 5, "the drift: one flow more than sockets");

    let repaired = poll_until(TIMEOUT, Duration::from_millis(50), || {
        let audit = lab.agent.status().expect("status").occupancy;
        if audit.repaired > 0 {
            ControlFlow::Break(audit)
        } else {
            ControlFlow::Continue(audit)
        }
    })
    .unwrap_or_else(|audit| panic!("no repair: {audit:?}"));
    let took = injected.elapsed();
    // Seen in two consecutive audits 1 s apart, then repaired; the status
    // is refreshed every second, which may add one.
    eprintln!(
        "drift repaired {took:?} after it was made (audit {} then, {} before)",
        repaired.audits, before.audits
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert_eq!(
        occupied(&lab),
        4,
        "occupancy = open sockets after the repair"
    );

    let later = after_audits(&lab, repaired.audits + 3);
    assert_eq!(
        (later.repaired, later.stale_records, later.count_mismatches),
        (1, 1, 0),
        "counted once: {later:?}"
    );
    let lines = repair_lines(&lab);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("cookie {NO_SOCKET}")) && lines[0].contains("WARN"),
        "{}",
        lines[0]
    );
    let records =
        srap_daemon::sender::audit::read_records(&lab.agent.layout()).expect("the socket table");
    assert!(
        records.iter().all(|(_, cookie, _)| *cookie != NO_SOCKET),
        "the stale record is gone"
    );
    assert_eq!(records.len(), 4, "one record per open socket: {records:?}");
    assert_eq!(occupied(&lab), 4);
    assert!(scrape(&lab).is_some(), "the agent serves --metrics");
    check_metrics(&lab, "stale_record", 1);

    let closed = workload.close(4);
    server.await_closed(&closed);
    let done = after_audits(&lab, later.audits + 2);
    assert_eq!(done.repaired, 1, "{done:?}");
    assert_eq!(occupied(&lab), 0, "all closed: nothing occupied");
    workload.finish();
}

/// A flow count no record holds (a slot claimed and never released, the
/// other drift the audit checks): its word unchanged over two audits, the
/// audit sets the count back to the records, once, and says so.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_count_no_record_holds_is_set_back_to_the_records() {
    require_privileged("binder: occupancy audit repairs a count mismatch");
    let mut lab = lab_with_metrics();
    lab.start_agent();
    let mut server = lab.listen();
    let mut workload = lab.workload(true);
    workload.open(2);
    server.accept(2);
    let before = after_audits(&lab, 1);
    srap_harness::drift::inject_stale_record(&lab.agent.layout(), FIRST_RECEIVER_ROW, 5, 0)
        .expect("raise a count with no record");
    let injected = Instant::now();
    assert_eq!(occupied(&lab), 3, "the drift: one flow more than records");
    let repaired = poll_until(TIMEOUT, Duration::from_millis(50), || {
        let audit = lab.agent.status().expect("status").occupancy;
        if audit.repaired > 0 {
            ControlFlow::Break(audit)
        } else {
            ControlFlow::Continue(audit)
        }
    })
    .unwrap_or_else(|audit| panic!("no repair: {audit:?}"));
    let took = injected.elapsed();
    eprintln!(
        "count mismatch repaired {took:?} after it was made (audit {} then, {} before)",
        repaired.audits, before.audits
    );
    // Two audits agreeing on the word (the first may straddle the change).
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(
        occupied(&lab),
        2,
        "occupancy = open sockets after the repair"
    );
    let later = after_audits(&lab, repaired.audits + 3);
    assert_eq!(
        (later.repaired, later.stale_records, later.count_mismatches),
        (1, 0, 1),
        "counted once: {later:?}"
    );
    let lines = repair_lines(&lab);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("a count mismatch") && lines[0].contains("CPU slot 5"),
        "{}",
        lines[0]
    );
    check_metrics(&lab, "count_mismatch", 1);
    workload.finish();
}
