//! MPTCP connections whose reading threads move between NUMA nodes, judged
//! by the kernel's own per-subflow counters: the client half of issue 54's
//! test (`srap-readers --mptcp`, run in the two-node guest) and the data
//! source or sink at the other end ([`MptcpSource`], in a namespace).
//!
//! Connection `i`'s thread sits, in period `m` (`m = elapsed / period`,
//! from one start instant all threads share, taken once every connection
//! is up), on node `(i + m) % nodes` — neighbouring connections in
//! anti-phase, so each node always has readers and every move leaves
//! another behind. Threads are pinned to their period-0 CPU *before* they
//! connect or get their accepted connection: a connect-time choice by CPU
//! (SRAP's `--local-nics numa`) must see the right node.
//!
//! Each thread samples its own socket every `sample`, right after each
//! move and at the end: every subflow's addresses and
//! `tcpi_bytes_received` (`MPTCP_SUBFLOW_ADDRS`, `MPTCP_TCPINFO`), its own
//! CPU (`sched_getcpu`) and the bytes it has read. The judge reads them
//! per placement through [`MovingReport::windows`].

mod requests;
mod source;
mod subflows;
mod windows;

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    sync::{Arc, Condvar, Mutex, atomic::AtomicBool, mpsc},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

pub use requests::{RequestFlow, RequestStats};
pub use source::{MptcpSource, SourceFlow};
pub use windows::Window;

use crate::{
    readers::{Turn, parse_cpus},
    sockets::{
        ACCEPT_WAIT, accept_within, current_cpu, mptcp_listener, mptcp_socket, pin_to, transient,
    },
};

/// The sampling interval when none is given.
pub const DEFAULT_SAMPLE: Duration = Duration::from_millis(100);
/// How long past `seconds` a thread keeps reading for a source that has
/// not closed yet: the source's clock starts at its accept or connect,
/// before the common start.
const GRACE: Duration = Duration::from_secs(10);
/// One connect's timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the threads go and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveSpec {
    /// The CPUs of each NUMA node.
    pub nodes: Vec<Vec<u32>>,
    /// How many connections (one thread each).
    pub connections: usize,
    /// The time between moves.
    pub period: Duration,
    /// The total reading time, from the common start.
    pub seconds: u64,
    /// The time between samples ([`DEFAULT_SAMPLE`]).
    pub sample: Duration,
    /// Answer each request of the peer's as a server does (`None`: only
    /// read, the data-sink readers).
    pub exchange: Option<Exchange>,
}

/// A request/response exchange: the client writes `request` bytes, the
/// server reads them all and writes `response` bytes back, one request
/// outstanding per connection (a Redis-like closed loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub request: usize,
    pub response: usize,
}

impl Exchange {
    /// Refuses an exchange no loop could run: an empty request or response.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.request == 0 || self.response == 0 {
            bail!("requests and responses need at least a byte each: {self:?}");
        }
        Ok(())
    }
}

impl MoveSpec {
    /// Refuses a spec the threads could not follow: no node, a node
    /// without CPUs, no connection, or a zero period or sample.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.nodes.is_empty() || self.nodes.iter().any(Vec::is_empty) {
            bail!("every node needs a CPU: {:?}", self.nodes);
        }
        if self.connections == 0 {
            bail!("no connections asked for");
        }
        if self.period.is_zero() || self.sample.is_zero() {
            bail!("the move period and the sample interval must be above 0");
        }
        self.exchange.as_ref().map_or(Ok(()), Exchange::check)
    }

    /// Connection `index`'s node and CPU in period `period`: node
    /// `(index + period) % nodes`, and on it the CPU
    /// `(index / nodes) % its CPUs`, so the connections sharing a node
    /// spread over its CPUs. Call [`MoveSpec::check`] first.
    pub fn placement(&self, index: usize, period: u64) -> (u32, u32) {
        let n = self.nodes.len().max(1);
        let period = usize::try_from(period % n as u64).unwrap_or(0);
        let node = (index % n + period) % n;
        let cpus = &self.nodes[node];
        let cpu = cpus[(index / n) % cpus.len().max(1)];
        (u32::try_from(node).unwrap_or(u32::MAX), cpu)
    }

    /// The period `elapsed` since the common start falls in.
    pub fn period_at(&self, elapsed: Duration) -> u64 {
        let period = self.period.as_nanos().max(1);
        u64::try_from(elapsed.as_nanos() / period).unwrap_or(u64::MAX)
    }
}

/// `--nodes '0,1;2,3'`: each node's CPUs (lists and ranges, as `--cpus`),
/// nodes split by `;`; a CPU in two nodes is refused.
pub fn parse_nodes(text: &str) -> anyhow::Result<Vec<Vec<u32>>> {
    let nodes = text
        .split(';')
        .map(|node| parse_cpus(node).with_context(|| format!("a node in {text:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut all: Vec<u32> = nodes.iter().flatten().copied().collect();
    all.sort_unstable();
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        bail!("CPU {} is in two nodes of {text:?}", w[0]);
    }
    Ok(nodes)
}

/// One connection as its moving thread saw it: one JSON line of
/// `srap-readers --mptcp`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MovingReport {
    /// The connection's index (connect or accept order).
    pub index: usize,
    /// The MPTCP socket's own addresses (`getsockname`, `getpeername`);
    /// `0.0.0.0:0` when it never had a connection.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Each placement of the thread; the first, at 0 ms, is where it
    /// connected (or got its connection) from.
    pub moves: Vec<Move>,
    pub samples: Vec<Sample>,
    /// Bytes the application read.
    pub read: u64,
    /// What ended the thread early, if anything did.
    pub error: Option<String>,
}

/// A placement of the thread.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Milliseconds since the common start (0 for the first placement,
    /// which precedes it).
    pub at_ms: u64,
    pub node: u32,
    pub cpu: u32,
    /// `sched_getcpu` right after pinning.
    pub ran_on: u32,
}

/// The kernel's view of the connection at one instant.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Milliseconds since the common start.
    pub at_ms: u64,
    /// The thread's CPU then (`sched_getcpu`).
    pub ran_on: u32,
    /// Bytes the application had read by then.
    pub read: u64,
    /// Each subflow, in the kernel's order.
    pub subflows: Vec<SubflowBytes>,
}

/// One subflow and what came in by it (`tcpi_bytes_received`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubflowBytes {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub bytes_received: u64,
}

impl MovingReport {
    fn new(index: usize) -> Self {
        let none = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        Self {
            index,
            local: none,
            remote: none,
            moves: Vec::new(),
            samples: Vec::new(),
            read: 0,
            error: None,
        }
    }
}

/// Reads the client's output: one JSON [`MovingReport`] per line (blank
/// lines skipped); any other line is an error that quotes it, since a
/// report lost among log lines would be a connection the judge never saw.
pub fn parse_moving_reports(text: &str) -> anyhow::Result<Vec<MovingReport>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("a moving reader's report: {l}")))
        .collect()
}

/// The common start: every thread arrives once it has its connection (or
/// knows it will not), and the last to arrive sets the instant all of
/// them count from.
/// Every thread's wait for its connection is bounded, so each arrives;
/// `until` bounds the wait all the same.
struct Gate {
    state: Mutex<(usize, Option<Instant>)>,
    changed: Condvar,
    expected: usize,
    until: Instant,
}

impl Gate {
    fn new(expected: usize, until: Instant) -> Self {
        Self {
            state: Mutex::new((0, None)),
            changed: Condvar::new(),
            expected,
            until,
        }
    }

    fn arrive(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 += 1;
        if state.0 >= self.expected && state.1.is_none() {
            state.1 = Some(Instant::now());
            self.changed.notify_all();
        }
    }

    /// The start, once every thread arrived.
    fn start(&self) -> anyhow::Result<Instant> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(start) = state.1 {
                return Ok(start);
            }
            let left = self.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "{} of {} connections were up in time",
                    state.0,
                    self.expected
                );
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Gets a thread's connection once it is pinned (or failed to pin, which
/// it is given): a connect, or the accept loop's hand-over.
type Connection = Box<dyn FnOnce(anyhow::Result<()>) -> anyhow::Result<TcpStream> + Send>;

/// Opens `spec.connections` MPTCP connections to `server`, one at a time in
/// index order, each from a thread pinned to its period-0 CPU, and moves
/// the threads as [`MoveSpec`] says while they read until the server
/// closes (or `spec.seconds` and a grace have passed). One report per
/// connection, in index order; a connection's failure is in its report.
pub fn run_connecting(server: SocketAddr, spec: &MoveSpec) -> anyhow::Result<Vec<MovingReport>> {
    spec.check()?;
    drop(mptcp_socket(server)?);
    let turn = Arc::new(Turn::new());
    let turns_until = Instant::now() + CONNECT_TIMEOUT * (spec.connections as u32 + 1);
    let connections = (0..spec.connections).map(|index| {
        let turn = Arc::clone(&turn);
        Box::new(move |pinned: anyhow::Result<()>| {
            turn.wait_for(index, turns_until)?;
            let connected = pinned.and_then(|()| connect_mptcp(server));
            turn.pass();
            connected
        }) as Connection
    });
    let threads = spawn_threads(spec, connections.collect(), turns_until);
    Ok(join_threads(threads))
}

/// One MPTCP connect to `server` within [`CONNECT_TIMEOUT`].
fn connect_mptcp(server: SocketAddr) -> anyhow::Result<TcpStream> {
    let socket = mptcp_socket(server)?;
    socket
        .connect_timeout(&server.into(), CONNECT_TIMEOUT)
        .with_context(|| format!("connecting to {server} (MPTCP)"))?;
    Ok(socket.into())
}

/// Listens with MPTCP on `listen` and hands the `i`-th connection accepted
/// (within 60 s) to thread `i`, already pinned to its period-0 CPU; the
/// threads then move and read as in [`run_connecting`], until the peer
/// closes.
pub fn run_accepting(listen: SocketAddr, spec: &MoveSpec) -> anyhow::Result<Vec<MovingReport>> {
    spec.check()?;
    let listener = mptcp_listener(listen)?;
    let (pinned_tx, pinned_rx) = mpsc::channel::<()>();
    let mut handovers = Vec::new();
    let mut connections = Vec::new();
    for index in 0..spec.connections {
        let (tx, rx) = mpsc::channel::<TcpStream>();
        handovers.push(tx);
        let pinned_tx = pinned_tx.clone();
        connections.push(Box::new(move |pinned: anyhow::Result<()>| {
            let _ = pinned_tx.send(());
            let stream = rx
                .recv_timeout(ACCEPT_WAIT + CONNECT_TIMEOUT)
                .with_context(|| {
                    format!("connection {index} was not accepted within {ACCEPT_WAIT:?}")
                })?;
            pinned.map(|()| stream)
        }) as Connection);
    }
    let until = Instant::now() + ACCEPT_WAIT + CONNECT_TIMEOUT * 2;
    let threads = spawn_threads(spec, connections, until);
    // Every thread pinned before the first accept; a thread that did not
    // say so in time gets its connection all the same.
    for _ in 0..spec.connections {
        if pinned_rx.recv_timeout(CONNECT_TIMEOUT).is_err() {
            break;
        }
    }
    hand_over(&listener, handovers);
    Ok(join_threads(threads))
}

/// Accepts one connection per hand-over, in order, within [`ACCEPT_WAIT`];
/// the hand-overs past a failed accept are dropped, which their threads
/// report.
fn hand_over(listener: &std::net::TcpListener, handovers: Vec<mpsc::Sender<TcpStream>>) {
    let until = Instant::now() + ACCEPT_WAIT;
    let never = AtomicBool::new(false);
    for (index, handover) in handovers.into_iter().enumerate() {
        match accept_within(listener, until, &never) {
            Ok(Some((stream, peer))) => {
                tracing::debug!("connection {index} accepted from {peer}");
                let _ = handover.send(stream);
            }
            Ok(None) => break,
            Err(err) => {
                tracing::warn!("accepting connection {index}: {err:#}");
                break;
            }
        }
    }
}

/// Spawns the threads: each pins itself to its period-0 CPU, gets its
/// connection, waits at the gate for the common start, then moves and
/// reads ([`follow`]); the gate opens by `until` or not at all.
fn spawn_threads(
    spec: &MoveSpec,
    connections: Vec<Connection>,
    until: Instant,
) -> Vec<JoinHandle<MovingReport>> {
    let gate = Arc::new(Gate::new(connections.len(), until));
    connections
        .into_iter()
        .enumerate()
        .map(|(index, connection)| {
            let (spec, gate) = (spec.clone(), Arc::clone(&gate));
            std::thread::spawn(move || {
                let mut report = MovingReport::new(index);
                let (node, cpu) = spec.placement(index, 0);
                let pinned = pin_to(cpu);
                let at_ms = 0;
                let ran_on = current_cpu();
                report.moves.push(Move {
                    at_ms,
                    node,
                    cpu,
                    ran_on,
                });
                let stream = connection(pinned);
                gate.arrive();
                if let Err(err) = stream.and_then(|s| follow(s, &spec, index, &gate, &mut report)) {
                    report.error = Some(format!("{err:#}"));
                }
                report
            })
        })
        .collect()
}

/// Joins the threads (each bounded: its connection, the gate and its reads
/// all have deadlines) into their reports, in index order.
fn join_threads(handles: Vec<JoinHandle<MovingReport>>) -> Vec<MovingReport> {
    handles
        .into_iter()
        .enumerate()
        .map(|(index, handle)| {
            handle.join().unwrap_or_else(|_| {
                let mut report = MovingReport::new(index);
                report.error = Some(format!("connection {index}'s thread panicked"));
                report
            })
        })
        .collect()
}

/// A connected thread's life after its connect: it records its socket's
/// addresses, waits for the common start, then reads, moving at every
/// period's turn and sampling the kernel's counters ([`Mover`]).
fn follow(
    mut stream: TcpStream,
    spec: &MoveSpec,
    index: usize,
    gate: &Gate,
    report: &mut MovingReport,
) -> anyhow::Result<()> {
    report.local = stream.local_addr()?;
    report.remote = stream.peer_addr()?;
    let start = gate.start()?;
    let mut mover = Mover {
        spec,
        index,
        start,
        period: 0,
        report,
        unanswered: 0,
    };
    mover.sample(&stream)?;
    let outcome = mover.read(&mut stream);
    // The last sample, also after a failed read: what came in by then.
    let last = mover.sample(&stream);
    outcome.and(last)
}

/// One thread's placement and samples as it reads.
struct Mover<'a> {
    spec: &'a MoveSpec,
    index: usize,
    start: Instant,
    /// The period the thread is placed for.
    period: u64,
    report: &'a mut MovingReport,
    /// With an [`Exchange`]: bytes read of the request not yet answered.
    unanswered: usize,
}

impl Mover<'_> {
    /// Reads until EOF or `seconds` and a grace after the start, moving at
    /// each period's turn and sampling every `sample`.
    fn read(&mut self, stream: &mut TcpStream) -> anyhow::Result<()> {
        let until = self.start + Duration::from_secs(self.spec.seconds) + GRACE;
        let mut next_sample = self.start + self.spec.sample;
        let mut buf = vec![0u8; 1 << 16];
        let response = self.spec.exchange.map(|e| vec![b'r'; e.response]);
        stream.set_write_timeout(Some(CONNECT_TIMEOUT))?;
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            let period = self.spec.period_at(now - self.start);
            if period != self.period {
                self.move_to(period)?;
                self.sample(stream)?;
            }
            if now >= next_sample {
                self.sample(stream)?;
                next_sample = self.next_tick(now);
            }
            let next_move = self.start + self.spec.period * u32::try_from(period + 1)?;
            let wake = next_sample.min(next_move).min(until);
            let timeout = wake
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            stream.set_read_timeout(Some(timeout))?;
            match stream.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    self.report.read += n as u64;
                    if let Some(response) = &response {
                        self.answer(stream, n, response)?;
                    }
                }
                Err(err) if transient(&err) => {}
                Err(err) => return Err(err).context("reading"),
            }
        }
    }

    /// Counts `n` bytes more of requests and writes `response` for each
    /// request now read whole.
    fn answer(&mut self, stream: &mut TcpStream, n: usize, response: &[u8]) -> anyhow::Result<()> {
        let request = self.spec.exchange.map_or(usize::MAX, |e| e.request);
        self.unanswered += n;
        while self.unanswered >= request {
            self.unanswered -= request;
            stream.write_all(response).context("answering a request")?;
        }
        Ok(())
    }

    /// The first sample tick after `now`.
    fn next_tick(&self, now: Instant) -> Instant {
        let sample = self.spec.sample.as_nanos().max(1);
        let ticks = (now - self.start).as_nanos() / sample + 1;
        self.start + Duration::from_nanos(u64::try_from(ticks * sample).unwrap_or(u64::MAX))
    }

    /// Pins the thread where `period` places it and records the move.
    fn move_to(&mut self, period: u64) -> anyhow::Result<()> {
        let (node, cpu) = self.spec.placement(self.index, period);
        pin_to(cpu)?;
        self.period = period;
        self.report.moves.push(Move {
            at_ms: self.elapsed_ms(),
            node,
            cpu,
            ran_on: current_cpu(),
        });
        Ok(())
    }

    /// Records the kernel's subflow counters now.
    fn sample(&mut self, stream: &TcpStream) -> anyhow::Result<()> {
        let subflows = subflows::subflow_bytes(stream)?;
        self.report.samples.push(Sample {
            at_ms: self.elapsed_ms(),
            ran_on: current_cpu(),
            read: self.report.read,
            subflows,
        });
        Ok(())
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nodes: Vec<Vec<u32>>, connections: usize) -> MoveSpec {
        MoveSpec {
            nodes,
            connections,
            period: Duration::from_secs(2),
            seconds: 10,
            sample: DEFAULT_SAMPLE,
            exchange: None,
        }
    }

    #[test]
    fn neighbouring_connections_move_in_anti_phase_over_their_nodes_cpus() {
        let spec = spec(vec![vec![0, 1], vec![2, 3]], 4);
        spec.check().unwrap();
        // Period 0: 0 and 2 on node 0 (CPUs 0, 1), 1 and 3 on node 1.
        let at = |period| {
            (0..4)
                .map(|i| spec.placement(i, period))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(0), [(0, 0), (1, 2), (0, 1), (1, 3)]);
        assert_eq!(at(1), [(1, 2), (0, 0), (1, 3), (0, 1)]);
        assert_eq!(at(2), at(0));
        assert_eq!(at(u64::MAX), at(1), "an odd period, however late");
        assert_eq!(spec.period_at(Duration::from_millis(1999)), 0);
        assert_eq!(spec.period_at(Duration::from_millis(2000)), 1);
        // Three nodes: each connection visits each in turn.
        let three = spec_three();
        let visits: Vec<u32> = (0..3).map(|m| three.placement(1, m).0).collect();
        assert_eq!(visits, [1, 2, 0]);
    }

    fn spec_three() -> MoveSpec {
        spec(vec![vec![0], vec![1], vec![2]], 3)
    }

    #[test]
    fn a_spec_the_threads_cannot_follow_is_refused() {
        assert!(spec(vec![], 2).check().is_err());
        assert!(spec(vec![vec![0], vec![]], 2).check().is_err());
        assert!(spec(vec![vec![0]], 0).check().is_err());
        let mut zero = spec(vec![vec![0]], 1);
        zero.period = Duration::ZERO;
        assert!(zero.check().is_err());
    }

    #[test]
    fn nodes_parse_as_cpu_lists_split_by_semicolons() {
        assert_eq!(parse_nodes("0,1;2,3").unwrap(), [vec![0, 1], vec![2, 3]]);
        assert_eq!(parse_nodes("0-3;4-7").unwrap()[1], [4, 5, 6, 7]);
        assert_eq!(parse_nodes("0").unwrap(), [vec![0]]);
        for bad in ["", "0;", "0,1;1,2", "a;1"] {
            assert!(parse_nodes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn moving_reports_round_trip_through_json_lines_and_refuse_others() {
        let subflow = SubflowBytes {
            local: "10.0.0.1:40000".parse().unwrap(),
            remote: "[fd00::2]:5201".parse().unwrap(),
            bytes_received: 1 << 30,
        };
        let report = MovingReport {
            index: 1,
            local: subflow.local,
            remote: "10.0.0.2:5201".parse().unwrap(),
            moves: vec![Move {
                at_ms: 0,
                node: 1,
                cpu: 2,
                ran_on: 2,
            }],
            samples: vec![Sample {
                at_ms: 100,
                ran_on: 2,
                read: 7,
                subflows: vec![subflow],
            }],
            read: 7,
            error: Some("reading: reset".into()),
        };
        let line = serde_json::to_string(&report).unwrap();
        let parsed = parse_moving_reports(&format!("{line}\n\n{line}\n")).unwrap();
        assert_eq!(parsed, [report.clone(), report]);
        let err = parse_moving_reports(&format!("{line}\nINFO starting\n")).unwrap_err();
        assert!(format!("{err:#}").contains("INFO starting"), "{err:#}");
    }

    #[test]
    fn the_gate_opens_when_the_last_thread_arrives_and_not_before() {
        let gate = Gate::new(2, Instant::now() + Duration::from_millis(50));
        gate.arrive();
        assert!(gate.start().is_err(), "one of two arrived");
        gate.arrive();
        let start = gate.start().unwrap();
        assert_eq!(gate.start().unwrap(), start, "one start for all");
    }
}
