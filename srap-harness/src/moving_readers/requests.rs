//! The client of a request/response workload, in a namespace of the
//! test's: MPTCP connections to moving readers that answer
//! (`srap-readers --mptcp --listen --respond`), each a closed loop with
//! one request outstanding, timed by the client's own clock
//! ([`MptcpSource::requests`]); and what those times add up to
//! ([`RequestStats`]).
//!
//! The client's clock, not the server's, so that a latency includes all
//! the server's side does (the subflow the data came by, the thread's
//! move) and nothing the server reports about itself.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde::Serialize;

use super::{Exchange, MptcpSource, SourceFlow};
use crate::netns::NetNs;

/// How long one response may take before the connection counts as failed.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// A bound on one connection's requests whatever its clock says (a million
/// a second for ten seconds is far above what the lab reaches).
const MAX_REQUESTS: u64 = 10_000_000;

/// One connection as the client ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestFlow {
    /// The client's address of it, and the server's.
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// Requests answered in full.
    pub completed: u64,
    /// Request bytes written (every one the server must have read).
    pub sent: u64,
    /// The loop's own time, from its first request to its last answer.
    pub elapsed: Duration,
    /// Each answered request's round trip, in microseconds, in order.
    #[serde(skip)]
    pub latencies_us: Vec<u64>,
    /// What ended the loop early, if anything did.
    pub error: Option<String>,
}

impl RequestFlow {
    /// The connection as a data source's record, for the judges of what
    /// the server read ([`SourceFlow::bytes`] is the request bytes sent).
    pub fn as_source(&self) -> SourceFlow {
        SourceFlow {
            local: self.local,
            peer: self.peer,
            bytes: self.sent,
            error: self.error.clone(),
        }
    }
}

impl MptcpSource<RequestFlow> {
    /// Opens `connections` MPTCP connections from inside `ns` to `target`
    /// (retried while the server comes up) and runs on each, for `seconds`
    /// from its connect, a closed loop of `exchange`: write a request,
    /// read the whole response, again.
    pub fn requests(
        ns: &NetNs,
        target: SocketAddr,
        connections: usize,
        seconds: u64,
        exchange: Exchange,
    ) -> anyhow::Result<Self> {
        exchange.check()?;
        Self::connecting(ns, target, connections, move |stream, stop| {
            closed_loop(stream, target, seconds, exchange, stop)
        })
    }
}

/// Runs the loop on one connection and closes it; its record, with the
/// error that ended it early if one did.
fn closed_loop(
    mut stream: TcpStream,
    peer: SocketAddr,
    seconds: u64,
    exchange: Exchange,
    stop: &AtomicBool,
) -> RequestFlow {
    let mut flow = RequestFlow {
        local: stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
        peer,
        completed: 0,
        sent: 0,
        elapsed: Duration::ZERO,
        latencies_us: Vec::new(),
        error: None,
    };
    let outcome = exchanges(&mut stream, seconds, exchange, stop, &mut flow);
    // The server reads until EOF: tell it the loop is over.
    let closed = stream.shutdown(Shutdown::Write).context("closing");
    flow.error = outcome.and(closed).err().map(|err| format!("{err:#}"));
    flow
}

/// Requests and their answers until `seconds` have passed (or `stop`),
/// each round trip timed.
fn exchanges(
    stream: &mut TcpStream,
    seconds: u64,
    exchange: Exchange,
    stop: &AtomicBool,
    flow: &mut RequestFlow,
) -> anyhow::Result<()> {
    stream.set_read_timeout(Some(ANSWER_WAIT))?;
    stream.set_write_timeout(Some(ANSWER_WAIT))?;
    stream.set_nodelay(true)?;
    let request = vec![b'q'; exchange.request];
    let mut response = vec![0u8; exchange.response];
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    for _ in 0..MAX_REQUESTS {
        if stop.load(Ordering::Relaxed) || Instant::now() >= until {
            break;
        }
        let sent_at = Instant::now();
        stream.write_all(&request).context("sending a request")?;
        flow.sent += request.len() as u64;
        stream
            .read_exact(&mut response)
            .context("waiting for a response")?;
        let micros = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        flow.latencies_us.push(micros);
        flow.completed += 1;
        flow.elapsed = start.elapsed();
    }
    Ok(())
}

/// What a set of connections' loops add up to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RequestStats {
    pub requests: u64,
    /// Answered requests a second: each connection's by its own loop's
    /// time, summed.
    pub per_second: f64,
    /// Round-trip percentiles over every request of every connection, in
    /// microseconds.
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

impl RequestStats {
    /// The stats of `flows`; `None` when no request was answered.
    pub fn of(flows: &[RequestFlow]) -> Option<Self> {
        let mut all: Vec<u64> = flows
            .iter()
            .flat_map(|f| f.latencies_us.iter().copied())
            .collect();
        all.sort_unstable();
        let per_second = flows
            .iter()
            .filter(|f| !f.elapsed.is_zero())
            .map(|f| f.completed as f64 / f.elapsed.as_secs_f64())
            .sum();
        Some(Self {
            requests: flows.iter().map(|f| f.completed).sum(),
            per_second,
            p50_us: percentile(&all, 0.50)?,
            p99_us: percentile(&all, 0.99)?,
            p999_us: percentile(&all, 0.999)?,
        })
    }
}

/// The nearest-rank `q`-quantile of `sorted` (ascending): the smallest
/// value with at least `q` of the values at or below it. `None` when
/// empty or `q` is outside `0..=1`.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    // Less a hair, so that 0.99 × 100 rounding up past 99 stays rank 99.
    let rank = (q * sorted.len() as f64 - 1e-9).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(latencies_us: Vec<u64>, secs: u64) -> RequestFlow {
        RequestFlow {
            local: "10.0.0.1:40000".parse().unwrap(),
            peer: "10.0.0.2:5201".parse().unwrap(),
            completed: latencies_us.len() as u64,
            sent: latencies_us.len() as u64 * 16,
            elapsed: Duration::from_secs(secs),
            latencies_us,
            error: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 0.50), Some(50));
        assert_eq!(percentile(&hundred, 0.99), Some(99));
        assert_eq!(percentile(&hundred, 0.999), Some(100));
        assert_eq!(percentile(&hundred, 0.0), Some(1));
        assert_eq!(percentile(&hundred, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&hundred, 1.5), None);
        assert_eq!(percentile(&hundred, f64::NAN), None);
    }

    #[test]
    fn stats_pool_the_latencies_and_add_each_connections_rate() {
        // 1000 requests at 1 ms over 2 s, and 1000 at 3 ms (10 slow) over 4 s.
        let fast = flow(vec![1000; 1000], 2);
        let mut slow_latencies = vec![3000; 990];
        slow_latencies.extend([50_000; 10]);
        let slow = flow(slow_latencies, 4);
        let stats = RequestStats::of(&[fast, slow]).unwrap();
        assert_eq!(stats.requests, 2000);
        assert!((stats.per_second - 750.0).abs() < 1e-9, "{stats:?}");
        assert_eq!((stats.p50_us, stats.p99_us), (1000, 3000));
        assert_eq!(stats.p999_us, 50_000);
        assert_eq!(RequestStats::of(&[flow(Vec::new(), 0)]), None);
    }

    #[test]
    fn a_flow_stands_as_the_source_of_the_bytes_it_sent() {
        let f = flow(vec![5, 6], 1);
        let source = f.as_source();
        assert_eq!((source.bytes, source.peer), (32, f.peer));
    }
}
