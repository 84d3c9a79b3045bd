//! Reading threads, pinned to CPUs, each downloading (or, with
//! [`Transfer::Upload`], sending) over its own connection: the client
//! `srap-readers` runs in the QEMU guest or the veth lab's sender
//! namespace, and the data source ([`DataSource`]) the lab runs at the
//! other end.
//!
//! What it measures is whether a flow's data arrives on the CPU of the
//! thread that reads it — or, for a sending thread, whether its ACKs do. The kernel records that itself, per socket:
//! `SO_INCOMING_CPU` (49) is the CPU that ran the protocol processing of the
//! last packet received — the NIC queue's interrupt CPU, or the target of
//! RPS/RFS when they steer — and `SO_INCOMING_NAPI_ID` (56) the NAPI
//! context, i.e. the NIC queue, that delivered it (RFS does not change it).
//! So each thread reads both after its transfer, with its own CPU.
//!
//! Threads are pinned *before* they connect, because SRAP's `reader`
//! placement binds a port for the CPU the connecting thread runs on. They
//! connect one at a time, in an order where no thread's position equals its
//! CPU's rank (modulo the number of CPUs, when each CPU has several
//! threads): a placement that handed out CPUs in connect order would look
//! right if threads pinned to CPU 0, 1, 2… connected in that order.

use std::{
    io::{Read as _, Write as _},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::{
    netns::NetNs,
    sockets::{
        current_cpu, finish_within, pin_to, serve_each, set_socket_option_u64, socket_option,
        transient,
    },
};

/// `SO_INCOMING_CPU` (`asm-generic/socket.h`).
const SO_INCOMING_CPU: libc::c_int = 49;
/// `SO_INCOMING_NAPI_ID` (`asm-generic/socket.h`).
const SO_INCOMING_NAPI_ID: libc::c_int = 56;

/// One flow as its reading thread saw it: printed by the client as one JSON
/// line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowReport {
    /// The CPU the thread was pinned to.
    pub cpu: u32,
    /// Where the thread ran when it read the socket's options
    /// (`sched_getcpu`): the pinned CPU, unless pinning failed silently.
    pub ran_on: u32,
    /// Its position in the connect order (0: first).
    pub position: u32,
    /// The connection's local (source) port.
    pub port: u16,
    /// `SO_INCOMING_CPU`: the CPU that processed its last received packet.
    pub incoming_cpu: i32,
    /// `SO_INCOMING_NAPI_ID`: the NAPI context (receive queue) that
    /// delivered it; 0 when none did.
    pub napi_id: u32,
    /// Bytes read.
    pub bytes: u64,
}

/// Which way each thread's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    /// The server writes, the thread reads: `SO_INCOMING_CPU` is where its
    /// data was processed.
    Download,
    /// The thread writes, the server reads: `SO_INCOMING_CPU` is where its
    /// last ACK was processed — what a sender's own NIC receives.
    Upload,
}

/// `--cpus 0,1,2,3` (or ranges, `0-3`): distinct CPUs, in the order given.
pub fn parse_cpus(text: &str) -> anyhow::Result<Vec<u32>> {
    let cpus = parse_cpu_list(text)?;
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        bail!(
            "CPU {} is given twice in {text:?}: --threads puts several threads on a CPU",
            w[0]
        );
    }
    Ok(cpus)
}

/// `--order 1,0,1,0`: CPUs in connect order, one per thread, a CPU as
/// often as it has threads (ranges allowed).
pub fn parse_order(text: &str) -> anyhow::Result<Vec<u32>> {
    parse_cpu_list(text)
}

/// A comma-separated list of CPU numbers and ranges, repeats kept.
fn parse_cpu_list(text: &str) -> anyhow::Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .with_context(|| format!("{s:?} in {text:?} is not a CPU number"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    bail!("{part:?} in {text:?}: a range runs upward");
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(number(part)?),
        }
    }
    if cpus.is_empty() {
        bail!("no CPUs in {text:?}");
    }
    Ok(cpus)
}

/// A connect order for `cpus` in which no thread's position equals its
/// CPU's rank among them: the upper half interleaved with the lower
/// (`2,0,3,1` for `0-3`, `4,0,5,1,6,2,7,3` for `0-7`). Position `2j`
/// takes rank `ceil(n/2) + j` (never `2j`, since `j < n/2`), position
/// `2j + 1` takes rank `j`, and the lower half's leftovers (odd `n`) sit
/// past their ranks.
pub fn default_order(cpus: &[u32]) -> Vec<u32> {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    let (lower, upper) = sorted.split_at(sorted.len().div_ceil(2));
    let mut order = Vec::with_capacity(sorted.len());
    for (j, &cpu) in upper.iter().enumerate() {
        order.push(cpu);
        order.push(lower[j]);
    }
    order.extend_from_slice(&lower[upper.len()..]);
    order
}

/// `threads` threads over `cpus`, round-robin, each CPU the same number
/// ([`default_order`] for each round, one after the other: `1,0,1,0…` for
/// 8 threads on `0,1`). Position `p` then takes a CPU whose rank is not
/// `p mod n`: a placement handing out CPUs in connect order, round-robin,
/// would be wrong for every thread.
pub fn default_order_for(cpus: &[u32], threads: usize) -> anyhow::Result<Vec<u32>> {
    let per_cpu = threads_per_cpu(cpus.len(), threads)?;
    Ok(default_order(cpus).repeat(per_cpu))
}

/// How many threads each CPU gets: `threads` must be a multiple of the
/// CPUs, so every CPU has as many readers and the placement is judged on
/// each alike.
pub fn threads_per_cpu(cpus: usize, threads: usize) -> anyhow::Result<usize> {
    if cpus == 0 || threads < cpus || !threads.is_multiple_of(cpus) {
        bail!(
            "{threads} threads must be a multiple of the {cpus} CPUs given (each CPU as many \
             threads)"
        );
    }
    Ok(threads / cpus)
}

/// Checks `order` (the connect order, one CPU per thread) against `cpus`:
/// each CPU as often as every other, and no thread at a position whose
/// rank modulo the CPUs is its CPU's rank. With one thread per CPU, no
/// thread connects at its CPU's own rank.
pub fn check_order(cpus: &[u32], order: &[u32]) -> anyhow::Result<()> {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    let mut given = order.to_vec();
    given.sort_unstable();
    let per_cpu = order.len() / sorted.len().max(1);
    let expected: Vec<u32> = sorted
        .iter()
        .flat_map(|&cpu| std::iter::repeat_n(cpu, per_cpu))
        .collect();
    if sorted.is_empty() || given != expected {
        bail!("--order {order:?} must name each of --cpus {cpus:?} equally often (once a thread)");
    }
    if sorted.len() < 2 {
        bail!("give at least 2 CPUs: with one, its thread connects first whatever the placement");
    }
    for (position, cpu) in order.iter().enumerate() {
        let rank = sorted.iter().position(|c| c == cpu).unwrap_or(usize::MAX);
        if rank == position % sorted.len() {
            bail!(
                "--order {order:?}: CPU {cpu} connects at position {position}, its own rank \
                 (modulo {}); a placement that hands out CPUs in connect order would look right",
                sorted.len()
            );
        }
    }
    Ok(())
}

/// Whose turn it is to connect: the position in the order.
pub(crate) struct Turn {
    next: Mutex<usize>,
    changed: Condvar,
}

impl Turn {
    /// The first position's turn.
    pub(crate) fn new() -> Self {
        Self {
            next: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn wait_for(&self, position: usize, until: Instant) -> anyhow::Result<()> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        while *next != position {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("the thread before it in the connect order never connected");
            }
            next = self
                .changed
                .wait_timeout(next, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    pub(crate) fn pass(&self) {
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }
}

/// Runs one pinned thread per entry of `order` (its CPU), connecting to
/// `server` one at a time in that order. With [`Transfer::Download`] each
/// reads until the server closes or `seconds` have passed since its
/// connect; with [`Transfer::Upload`] each writes for `seconds`. One report
/// per flow, in connect order; an error names the thread that failed.
pub fn run_readers(
    server: SocketAddr,
    order: &[u32],
    seconds: u64,
    transfer: Transfer,
) -> anyhow::Result<Vec<FlowReport>> {
    let turn = Arc::new(Turn::new());
    // Each thread waits at most this for its turn: everyone before it must
    // connect, each within the connect timeout.
    let connect_timeout = Duration::from_secs(10);
    let turns_until = Instant::now() + connect_timeout * (order.len() as u32 + 1);
    let threads: Vec<(u32, JoinHandle<anyhow::Result<FlowReport>>)> = order
        .iter()
        .enumerate()
        .map(|(position, &cpu)| {
            let turn = Arc::clone(&turn);
            let handle = std::thread::spawn(move || {
                let read = || -> anyhow::Result<FlowReport> {
                    let pinned = pin_to(cpu);
                    turn.wait_for(position, turns_until)?;
                    let connected = pinned.and_then(|()| {
                        TcpStream::connect_timeout(&server, connect_timeout)
                            .with_context(|| format!("connecting to {server}"))
                    });
                    // The next thread's turn comes whether this one pinned
                    // and connected or not: its error is reported, not
                    // waited on by the threads after it.
                    turn.pass();
                    let stream = connected?;
                    match transfer {
                        Transfer::Download => read_flow(stream, cpu, position, seconds),
                        Transfer::Upload => write_flow(stream, cpu, position, seconds),
                    }
                };
                read().with_context(|| format!("the reading thread on CPU {cpu}"))
            });
            (cpu, handle)
        })
        .collect();
    let mut reports = Vec::new();
    for (cpu, handle) in threads {
        let report = handle
            .join()
            .map_err(|_| anyhow!("the reading thread on CPU {cpu} panicked"))??;
        reports.push(report);
    }
    Ok(reports)
}

/// Reads `stream` until the server closes it or `seconds` have passed, then
/// reads where its data was processed.
fn read_flow(
    mut stream: TcpStream,
    cpu: u32,
    position: usize,
    seconds: u64,
) -> anyhow::Result<FlowReport> {
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err).context("reading"),
        }
    }
    report(&stream, cpu, position, bytes)
}

/// Writes to `stream` for `seconds`, then reads where its last ACK was
/// processed — before closing, so the server's FIN is not what it names.
fn write_flow(
    mut stream: TcpStream,
    cpu: u32,
    position: usize,
    seconds: u64,
) -> anyhow::Result<FlowReport> {
    let until = Instant::now() + Duration::from_secs(seconds);
    let buf = vec![0xa5u8; 1 << 16];
    let mut bytes = 0u64;
    stream.set_write_timeout(Some(Duration::from_millis(500)))?;
    while Instant::now() < until {
        match stream.write(&buf) {
            Ok(n) => bytes += n as u64,
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err).context("writing"),
        }
    }
    report(&stream, cpu, position, bytes)
}

/// The flow's report: where the kernel processed its last received packet,
/// read by the thread itself; then the connection is shut down.
fn report(stream: &TcpStream, cpu: u32, position: usize, bytes: u64) -> anyhow::Result<FlowReport> {
    let port = stream.local_addr()?.port();
    let incoming_cpu = socket_option(stream, SO_INCOMING_CPU).context("SO_INCOMING_CPU")?;
    let napi_id = socket_option(stream, SO_INCOMING_NAPI_ID).context("SO_INCOMING_NAPI_ID")?;
    let ran_on = current_cpu();
    let _ = stream.shutdown(Shutdown::Both);
    Ok(FlowReport {
        cpu,
        ran_on,
        position: u32::try_from(position).unwrap_or(u32::MAX),
        port,
        incoming_cpu,
        // -1 would be "none", which the kernel reports as 0 anyway.
        napi_id: u32::try_from(napi_id).unwrap_or(0),
        bytes,
    })
}

/// Reads the client's output: one JSON [`FlowReport`] per line.
pub fn parse_reports(text: &str) -> anyhow::Result<Vec<FlowReport>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("a reader's report: {l}")))
        .collect()
}

/// The lab's data source, beside the guest's tap in the test namespace: it
/// accepts `flows` connections and writes to each for `seconds` from its
/// accept, then closes it. The peer ports it accepted are the ground truth
/// of the ports the guest used (hashed with the device's key and table they
/// give the queue the NIC chose).
pub struct DataSource {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<Vec<SinkFlow>>>>,
}

/// One flow as the data source served it, by its own clock: when it was
/// accepted, when its first and last data moved (read as a sink, written
/// as a source) and how many bytes. A receiver's measure of a transfer,
/// independent of what the other end claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkFlow {
    /// The peer's port.
    pub port: u16,
    /// The peer's address: which of a multi-NIC peer's addresses the flow
    /// came from, so which of its NICs it used.
    pub peer_ip: IpAddr,
    pub accepted: Instant,
    /// `None` when no byte moved.
    pub first_byte: Option<Instant>,
    pub last_byte: Option<Instant>,
    pub bytes: u64,
}

impl SinkFlow {
    pub(crate) fn new(peer: SocketAddr) -> Self {
        Self {
            port: peer.port(),
            peer_ip: peer.ip(),
            accepted: Instant::now(),
            first_byte: None,
            last_byte: None,
            bytes: 0,
        }
    }

    /// Counts `n` bytes moved now.
    pub(crate) fn moved(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        self.first_byte.get_or_insert(now);
        self.last_byte = Some(now);
        self.bytes += n as u64;
    }
}

impl DataSource {
    /// Listens on `addr` inside `ns` (the socket is the namespace's for its
    /// life; the threads serving it need not stay inside). With `pace`
    /// (bytes a second), each flow is paced to it (`SO_MAX_PACING_RATE`,
    /// TCP's own pacing under any qdisc): flows that share a slower wire
    /// evenly get about as much data each, instead of the first to connect
    /// taking most of it while a queue builds at the wire.
    pub fn start(
        ns: &NetNs,
        addr: SocketAddr,
        flows: usize,
        seconds: u64,
        pace: Option<u64>,
    ) -> anyhow::Result<Self> {
        Self::start_for(ns, addr, flows, seconds, pace, Transfer::Download)
    }

    /// [`DataSource::start`] for the clients' `transfer`: with
    /// [`Transfer::Upload`] it is a sink, reading each flow until the
    /// client closes it (`pace` then does nothing: the client sends).
    pub fn start_for(
        ns: &NetNs,
        addr: SocketAddr,
        flows: usize,
        seconds: u64,
        pace: Option<u64>,
        transfer: Transfer,
    ) -> anyhow::Result<Self> {
        let listener = ns.run(|| TcpListener::bind(addr))?.with_context(|| {
            format!(
                "listening on {addr} in namespace {} (data source)",
                ns.name()
            )
        })?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread =
            std::thread::spawn(move || serve(&listener, flows, seconds, pace, transfer, &stopping));
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits (up to `within`) until every flow was accepted and served; the
    /// accepted peer ports, in accept order.
    pub fn finish(self, within: Duration) -> anyhow::Result<Vec<u16>> {
        Ok(self
            .finish_flows(within)?
            .into_iter()
            .map(|f| f.port)
            .collect())
    }

    /// [`DataSource::finish`] with each flow's times and bytes, in accept
    /// order.
    pub fn finish_flows(mut self, within: Duration) -> anyhow::Result<Vec<SinkFlow>> {
        let thread = self
            .thread
            .take()
            .context("the data source already ended")?;
        finish_within(thread, &self.stop, within, "the data source")
    }
}

impl Drop for DataSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts `flows` connections (for at most a minute) and serves each on a
/// thread of its own until all are done; each flow's record, in accept
/// order.
fn serve(
    listener: &TcpListener,
    flows: usize,
    seconds: u64,
    pace: Option<u64>,
    transfer: Transfer,
    stop: &AtomicBool,
) -> anyhow::Result<Vec<SinkFlow>> {
    serve_each(listener, flows, stop, "the data source", |stream, peer| {
        let mut flow = SinkFlow::new(peer);
        if let (Some(rate), Transfer::Download) = (pace, transfer) {
            set_socket_option_u64(&stream, libc::SO_MAX_PACING_RATE, rate)
                .context("SO_MAX_PACING_RATE")?;
        }
        // A flow the client ended first (a reset) is still a flow served.
        let outcome = match transfer {
            Transfer::Download => write_for(stream, seconds, stop, &mut flow),
            Transfer::Upload => drain(stream, seconds, stop, &mut flow),
        };
        if let Err(err) = outcome {
            tracing::debug!("a data-source flow ended early: {err:#}");
        }
        Ok(flow)
    })?
    .into_iter()
    .collect()
}

/// Writes to `stream` for `seconds`, then closes it; counts into `flow`.
pub(crate) fn write_for(
    stream: TcpStream,
    seconds: u64,
    stop: &AtomicBool,
    flow: &mut SinkFlow,
) -> anyhow::Result<()> {
    paced_write_for(stream, seconds, None, stop, flow)
}

/// [`write_for`], never ahead of `pace` bytes a second since its start
/// when given: the application's own pacing, for sockets that refuse
/// `SO_MAX_PACING_RATE` (MPTCP's do).
pub(crate) fn paced_write_for(
    mut stream: TcpStream,
    seconds: u64,
    pace: Option<u64>,
    stop: &AtomicBool,
    flow: &mut SinkFlow,
) -> anyhow::Result<()> {
    let buf = vec![0x5au8; 1 << 16];
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        if let Some(ahead) = pace.and_then(|rate| ahead_of(rate, flow.bytes, started)) {
            std::thread::sleep(ahead.min(until.saturating_duration_since(Instant::now())));
            continue;
        }
        match stream.write(&buf) {
            Ok(n) => flow.moved(n),
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err).context("writing"),
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

/// How far `bytes` written since `started` are ahead of `rate` bytes a
/// second (at most 100 ms, so the loop looks at its clock and stop flag),
/// or `None` when they are not.
fn ahead_of(rate: u64, bytes: u64, started: Instant) -> Option<Duration> {
    let due = started + Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64);
    let ahead = due.saturating_duration_since(Instant::now());
    (!ahead.is_zero()).then(|| ahead.min(Duration::from_millis(100)))
}

/// Reads `stream` until the client closes it (or `seconds` and a grace of
/// 15 s have passed, or the source is stopped), then closes it; counts into
/// `flow`.
fn drain(
    mut stream: TcpStream,
    seconds: u64,
    stop: &AtomicBool,
    flow: &mut SinkFlow,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 1 << 16];
    let until = Instant::now() + Duration::from_secs(seconds + 15);
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => flow.moved(n),
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err).context("reading"),
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_flow_times_its_first_and_last_bytes_and_counts_them() {
        let mut flow = SinkFlow::new(SocketAddr::from(([127, 0, 0, 1], 4242)));
        flow.moved(0);
        assert_eq!(
            (flow.first_byte, flow.last_byte, flow.bytes),
            (None, None, 0)
        );
        flow.moved(100);
        let first = flow.first_byte.expect("a first byte");
        flow.moved(50);
        assert_eq!(flow.first_byte, Some(first));
        assert!(flow.last_byte.is_some_and(|last| last >= first));
        assert!(flow.accepted <= first);
        assert_eq!(flow.bytes, 150);
    }

    #[test]
    fn cpus_parse_lists_and_ranges_and_refuse_nonsense() {
        assert_eq!(parse_cpus("0,1,2,3").unwrap(), [0, 1, 2, 3]);
        assert_eq!(parse_cpus("0-3,6").unwrap(), [0, 1, 2, 3, 6]);
        for bad in ["", "a", "3-1", "0,0", "1,0-2", "-1"] {
            assert!(parse_cpus(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_order("1,0,1,0").unwrap(), [1, 0, 1, 0]);
        assert!(parse_order("1,x").is_err());
    }

    #[test]
    fn the_default_order_puts_no_thread_at_its_cpus_rank() {
        assert_eq!(default_order(&[0, 1, 2, 3]), [2, 0, 3, 1]);
        assert_eq!(
            default_order(&[0, 1, 2, 3, 4, 5, 6, 7]),
            [4, 0, 5, 1, 6, 2, 7, 3]
        );
        for n in 2..=64u32 {
            let cpus: Vec<u32> = (0..n).collect();
            let order = default_order(&cpus);
            check_order(&cpus, &order).unwrap_or_else(|e| panic!("{n}: {e:#}"));
            // Ranks count, not numbers: CPUs 10.. behave as 0..
            let high: Vec<u32> = cpus.iter().map(|c| c + 10).collect();
            check_order(&high, &default_order(&high)).unwrap();
        }
    }

    #[test]
    fn an_order_is_checked_against_the_cpus() {
        let cpus = [0, 1, 2, 3];
        assert!(check_order(&cpus, &[2, 0, 3, 1]).is_ok());
        // CPU order: every thread at its own rank.
        assert!(check_order(&cpus, &[0, 1, 2, 3]).is_err());
        // One thread at its rank is enough to look right by accident.
        assert!(check_order(&cpus, &[1, 0, 2, 3]).is_err());
        assert!(check_order(&cpus, &[2, 0, 3]).is_err());
        assert!(check_order(&cpus, &[2, 0, 3, 3]).is_err());
        assert!(check_order(&[0], &[0]).is_err());
    }

    #[test]
    fn several_threads_a_cpu_connect_off_round_robin() {
        let cpus = [0, 1];
        let order = default_order_for(&cpus, 16).unwrap();
        assert_eq!(order, [1, 0].repeat(8));
        check_order(&cpus, &order).unwrap();
        // Round-robin in thread order: every thread where a placement
        // handing out CPUs in connect order would put it.
        assert!(check_order(&cpus, &[0, 1].repeat(8)).is_err());
        // One thread at its rank modulo the CPUs is enough.
        assert!(check_order(&cpus, &[1, 0, 0, 1]).is_err());
        // Each CPU as many threads.
        assert!(check_order(&cpus, &[1, 0, 1]).is_err());
        assert!(default_order_for(&cpus, 3).is_err());
        assert!(default_order_for(&cpus, 1).is_err());
        for n in 2..=8u32 {
            let cpus: Vec<u32> = (0..n).collect();
            for per_cpu in 1..=4 {
                let order = default_order_for(&cpus, n as usize * per_cpu).unwrap();
                check_order(&cpus, &order).unwrap_or_else(|e| panic!("{n}x{per_cpu}: {e:#}"));
            }
        }
        assert_eq!(default_order_for(&[0, 1, 2, 3], 4).unwrap(), [2, 0, 3, 1]);
    }

    #[test]
    fn reports_round_trip_through_their_json_lines() {
        let report = FlowReport {
            cpu: 2,
            ran_on: 2,
            position: 0,
            port: 10_042,
            incoming_cpu: 2,
            napi_id: 8195,
            bytes: 1 << 20,
        };
        let line = serde_json::to_string(&report).unwrap();
        assert_eq!(
            parse_reports(&format!("{line}\n\n{line}\n")).unwrap(),
            [report; 2]
        );
        assert!(parse_reports("{\"cpu\":1}").is_err());
    }

    #[test]
    fn a_thread_that_cannot_pin_says_so_and_lets_the_next_connect() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let (served, read) = std::thread::scope(|s| {
            let server = s.spawn(|| serve(&listener, 1, 1, None, Transfer::Download, &stop));
            let read = run_readers(addr, &[1000, 0], 5, Transfer::Download);
            (server.join().unwrap(), read)
        });
        let err = format!("{:#}", read.unwrap_err());
        assert!(err.contains("CPU 1000"), "{err}");
        assert_eq!(served.unwrap().len(), 1, "the thread after it connected");
        assert!(started.elapsed() < Duration::from_secs(8));
    }

    /// The threads of `order` against a source (or sink) on loopback, in
    /// this process's own namespace: nothing leaves the host. The flows
    /// the source served and each thread's report. Pinning to CPUs 0 and
    /// 1 needs both: a machine without them fails here, it does not pass.
    fn on_loopback(
        order: &[u32],
        seconds: u64,
        rate: Option<u64>,
        transfer: Transfer,
    ) -> (Vec<SinkFlow>, Vec<FlowReport>) {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(
            cpus >= 2,
            "pinning threads to CPUs 0 and 1 needs 2 CPUs, not {cpus}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let server = s.spawn(|| serve(&listener, order.len(), 1, rate, transfer, &stop));
            let reports = run_readers(addr, order, seconds, transfer).unwrap();
            (server.join().unwrap().unwrap(), reports)
        })
    }

    #[test]
    fn readers_on_loopback_read_what_the_source_writes() {
        // Each thread reads on its pinned CPU.
        let order = default_order(&[0, 1]);
        let (served, reports) = on_loopback(&order, 5, Some(50_000_000), Transfer::Download);
        let ports: Vec<u16> = served.iter().map(|f| f.port).collect();
        assert_eq!(reports.len(), 2);
        for (report, cpu) in reports.iter().zip(&order) {
            assert_eq!(report.cpu, *cpu);
            assert_eq!(report.ran_on, *cpu);
            assert!(report.bytes > 0);
            assert!(ports.contains(&report.port));
        }
    }

    #[test]
    fn senders_on_loopback_write_what_the_sink_reads() {
        let order = default_order_for(&[0, 1], 4).unwrap();
        let (served, reports) = on_loopback(&order, 1, None, Transfer::Upload);
        assert_eq!(reports.len(), 4);
        for (report, cpu) in reports.iter().zip(&order) {
            assert_eq!(report.cpu, *cpu);
            assert!(report.bytes > 0);
            // The sink counted, and timed, what each thread wrote.
            let flow = served.iter().find(|f| f.port == report.port);
            let flow = flow.expect("the sink served the thread's flow");
            assert_eq!(flow.bytes, report.bytes);
            assert!(flow.first_byte.is_some() && flow.last_byte >= flow.first_byte);
        }
    }
}
