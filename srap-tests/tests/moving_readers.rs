//! The moving MPTCP readers (`srap_harness::moving_readers`) and their
//! source, against the real kernel in a namespace of their own over
//! loopback: two connections whose threads swap two CPUs (standing in for
//! two NUMA nodes) every second, in both directions of set-up.
//!
//! Judged by the kernel: the subflows' own `tcpi_bytes_received` add up to
//! what the application read, the threads' `sched_getcpu` is where they
//! were pinned, and the source wrote what the readers read. The answering
//! readers (`--respond`, the server of `srap-lab --experiment
//! follow-reader`) are judged by their client: every request it wrote was
//! read whole and answered, each round trip timed by the client's clock.

use std::{net::SocketAddr, time::Duration};

use srap_harness::moving_readers::{
    Exchange, MoveSpec, MovingReport, MptcpSource, RequestFlow, RequestStats, SourceFlow,
    run_accepting, run_connecting,
};
use srap_tests::{NetNs, require_privileged, veth::enable_mptcp_in};

/// The listener's address (in the test's own namespace).
const ADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 5311);
/// Each flow's pace: about 20 MB/s, light on a shared two-CPU machine.
const PACE: u64 = 20_000_000;
const SECONDS: u64 = 3;
/// How many more bytes the subflows may count than the reader read: data
/// MPTCP re-sent on another subflow (its own retransmission) is counted by
/// both subflows' `tcpi_bytes_received`, and read once.
const REINJECTED: u64 = 256 * 1024;

/// The request/response test's exchange: as the lab's, a large request
/// and a small answer.
const EXCHANGE: Exchange = Exchange {
    request: 16 * 1024,
    response: 64,
};

/// Two fake nodes of one CPU each: the test machine has one node, and the
/// placement only needs CPUs to pin to.
fn spec() -> MoveSpec {
    MoveSpec {
        nodes: vec![vec![0], vec![1]],
        connections: 2,
        period: Duration::from_secs(1),
        seconds: SECONDS,
        sample: Duration::from_millis(100),
        exchange: None,
    }
}

/// A namespace with MPTCP on, and a second loopback address as a
/// `subflow` endpoint so connections get a second subflow if the kernel
/// makes one over `lo`.
fn mptcp_namespace() -> NetNs {
    let ns = NetNs::new().expect("a namespace");
    enable_mptcp_in(&ns).expect("MPTCP in the namespace");
    if let Err(err) = ns.ip([
        "mptcp",
        "endpoint",
        "add",
        "127.0.0.2",
        "dev",
        "lo",
        "subflow",
    ]) {
        eprintln!("no second loopback subflow endpoint: {err:#}");
    }
    ns
}

/// `run_connecting` or `run_accepting`.
type Readers = fn(SocketAddr, &MoveSpec) -> anyhow::Result<Vec<MovingReport>>;

/// A source made by `source` in a fresh MPTCP namespace against the
/// readers `readers` run there; the readers' reports and the source's
/// flows.
fn run(
    source: fn(&NetNs, SocketAddr, usize, u64, Option<u64>) -> anyhow::Result<MptcpSource>,
    readers: Readers,
) -> (Vec<MovingReport>, Vec<SourceFlow>) {
    require_privileged("the moving readers test");
    let ns = mptcp_namespace();
    let addr = SocketAddr::from(ADDR);
    let source = source(&ns, addr, 2, SECONDS, Some(PACE)).expect("the source");
    let reports = ns
        .run(|| readers(addr, &spec()))
        .expect("in the namespace")
        .expect("the readers");
    let flows = source
        .finish(Duration::from_secs(30))
        .expect("the source's flows");
    (reports, flows)
}

#[test]
#[ignore = "needs root: network namespaces and MPTCP"]
fn connecting_readers_move_in_anti_phase_and_their_subflows_count_what_they_read() {
    let (reports, flows) = run(MptcpSource::listen, run_connecting);
    judge(&reports, &flows, |flow, report| flow.peer == report.local);
}

#[test]
#[ignore = "needs root: network namespaces and MPTCP"]
fn accepting_readers_move_in_anti_phase_and_their_subflows_count_what_they_read() {
    // The source retries while the readers' listener comes up.
    let (reports, flows) = run(MptcpSource::connect, run_accepting);
    judge(&reports, &flows, |flow, report| flow.local == report.remote);
}

#[test]
#[ignore = "needs root: network namespaces and MPTCP"]
fn answering_readers_answer_every_request_of_a_closed_loop_client_while_they_move() {
    require_privileged("the moving readers test");
    let ns = mptcp_namespace();
    let addr = SocketAddr::from(ADDR);
    let client = MptcpSource::requests(&ns, addr, 2, SECONDS, EXCHANGE).expect("the client");
    let spec = MoveSpec {
        exchange: Some(EXCHANGE),
        ..spec()
    };
    let reports = ns
        .run(|| run_accepting(addr, &spec))
        .expect("in the namespace")
        .expect("the answering readers");
    let flows = client
        .finish(Duration::from_secs(30))
        .expect("the client's loops");
    judge_requests(&flows);
    let sources: Vec<SourceFlow> = flows.iter().map(RequestFlow::as_source).collect();
    judge(&reports, &sources, |flow, report| {
        flow.local == report.remote
    });
}

/// The client's own record: loops that ran to their end, each request
/// written whole and answered (closed loop: one outstanding), one round
/// trip timed per answer.
fn judge_requests(flows: &[RequestFlow]) {
    assert_eq!(flows.len(), 2, "{flows:?}");
    for flow in flows {
        assert_eq!(flow.error, None, "{flow:?}");
        assert!(
            flow.completed > 10,
            "only {} answers: {flow:?}",
            flow.completed
        );
        assert_eq!(
            flow.sent,
            flow.completed * EXCHANGE.request as u64,
            "{flow:?}"
        );
        assert_eq!(flow.latencies_us.len() as u64, flow.completed);
    }
    let stats = RequestStats::of(flows).expect("answered requests");
    assert!(
        stats.p50_us <= stats.p99_us && stats.p99_us <= stats.p999_us,
        "{stats:?}"
    );
    assert!(stats.per_second > 0.0, "{stats:?}");
}

/// Every report against the spec, the kernel's counters and the source's
/// flow of the same connection (`same` pairs them by address).
fn judge(
    reports: &[MovingReport],
    flows: &[SourceFlow],
    same: impl Fn(&SourceFlow, &MovingReport) -> bool,
) {
    let spec = spec();
    assert_eq!(reports.len(), 2, "{reports:#?}");
    for flow in flows {
        assert_eq!(flow.error, None, "{flow:?}");
    }
    for report in reports {
        assert_eq!(report.error, None, "connection {}", report.index);
        judge_moves(&spec, report);
        let last = report.samples.last().expect("samples");
        assert!(!last.subflows.is_empty(), "no subflow at the end: {last:?}");
        let received: u64 = last.subflows.iter().map(|s| s.bytes_received).sum();
        // Every byte read came in by a subflow; a few came in twice when
        // MPTCP re-sent them on the other subflow (seen: 53 bytes of 60 MB).
        assert!(
            received >= report.read && received - report.read <= REINJECTED,
            "the subflows received {received}, the reader read {}: {last:?}",
            report.read
        );
        assert!(report.read > 0);
        let flow = flows.iter().find(|f| same(f, report));
        let flow = flow.unwrap_or_else(|| panic!("no source flow for {report:?}: {flows:?}"));
        assert_eq!(flow.error, None);
        assert_eq!(
            flow.bytes, report.read,
            "the source wrote what the reader read"
        );
        for window in report.windows(Duration::ZERO, &spec.nodes) {
            assert_eq!(window.ran_on_other_node, 0, "{window:?}");
        }
    }
    // Anti-phase: in each period the two threads are on different nodes.
    for (a, b) in reports[0].moves.iter().zip(&reports[1].moves) {
        assert_ne!(a.node, b.node, "{a:?} and {b:?}");
    }
}

/// One thread's moves: one a period from 0 on (3 s of reading with a 1 s
/// period), each where the spec places it and run there.
fn judge_moves(spec: &MoveSpec, report: &MovingReport) {
    assert!(report.moves.len() >= 3, "{:?}", report.moves);
    assert!(
        report.samples.len() >= 20,
        "{} samples",
        report.samples.len()
    );
    for (period, placed) in report.moves.iter().enumerate() {
        let period = period as u64;
        assert_eq!(spec.period_at(Duration::from_millis(placed.at_ms)), period);
        let (node, cpu) = spec.placement(report.index, period);
        assert_eq!((placed.node, placed.cpu), (node, cpu), "{placed:?}");
        assert_eq!(placed.ran_on, placed.cpu, "{placed:?}");
        assert_eq!(node as usize, (report.index + period as usize) % 2);
    }
}
