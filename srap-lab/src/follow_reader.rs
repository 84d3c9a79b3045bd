//! `srap-lab --experiment follow-reader`: the benchmark beside
//! ByteDance's (NetDev 0x19, a Redis server on the far socket): a
//! request/response workload whose serving threads move between the two
//! NUMA nodes of the 6.12 guest, with the kernel's path manager and with
//! SRAP following the reader (`--mptcp follow-reader`), as ratios from
//! one run ([`FollowLab`], the guest and rounds the CI test
//! `follow_reader.rs` judges with).
//!
//! The guest is the server: it accepts [`CONNECTIONS`] MPTCP connections
//! (`srap-readers --mptcp --listen --respond`), each served by a thread
//! that moves to the other node every period, neighbours in anti-phase.
//! The namespace is the client: one request of [`REQUEST`] bytes
//! outstanding per connection, answered by [`RESPONSE`] bytes, each round
//! trip timed by the client's clock. The request bytes are what arrive
//! through the guest's NICs, so which NIC they came by is judged from the
//! serving threads' own samples of each subflow's `tcpi_bytes_received`.
//!
//! What the ratio means here is [`MEANING`]: QEMU's two nodes share one
//! host's memory, so no byte costs more for arriving on the far node's
//! NIC; the ratio shows what following costs, not what it gains.

use std::{
    fmt::Write as _,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use serde::Serialize;
use srap_harness::{
    guest::{
        GuestImage,
        follow_lab::{FollowLab, FollowRound, FollowSpec, PathChoice, SetUp},
    },
    interrupt::interrupted,
    moving_readers::{Exchange, RequestFlow, RequestStats},
};

/// Connections, one serving thread each: one on each node at a time.
pub const CONNECTIONS: usize = 2;
/// Periods a round: the threads move `PERIODS - 1` times.
pub const PERIODS: u64 = 5;
/// Each request's bytes (what the guest's NICs receive), and each
/// response's: a large write and a small reply, as a cache's SET is.
pub const REQUEST: usize = 16 * 1024;
pub const RESPONSE: usize = 64;
/// The rounds' ports, one each (none meets the last one's TIME_WAIT).
const FIRST_PORT: u16 = 5610;
/// The two rounds, in the order run.
const CHOICES: [PathChoice; 2] = [PathChoice::KernelEndpoints, PathChoice::FollowReader];

/// What the follow/kernel ratios measure in the guest, printed with them.
pub const MEANING: &str = "QEMU's two NUMA nodes are one host's memory and CPUs: a byte that \
     arrives through the far node's NIC costs the guest nothing more, so these ratios are not the \
     NUMA gain ByteDance measured on hardware (29-32 %). They measure what following costs (the \
     backup flags flipped at each move, the extra subflow, the tracepoint on every read) and, with \
     the local shares, whether the request bytes really moved to the serving thread's NIC.";

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct FollowPlan {
    /// Seconds between the serving threads' moves.
    pub period: u64,
}

/// One round as the report keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct RrRound {
    pub choice: &'static str,
    pub title: String,
    /// The client's figures; `None` when no request was answered.
    pub stats: Option<RequestStats>,
    /// Of the request bytes in every window from 0.5 s after a move, the
    /// share that came through the serving thread's node's NIC; and the
    /// same before the first move.
    pub local_share: f64,
    pub local_share_before_move: f64,
    pub flows: Vec<RequestFlow>,
    /// What the CI test's judges find wrong with the round (for
    /// following, also its ≥ 90 % bound); empty when it is right.
    pub judged: Vec<String>,
    /// The round's window table, as the CI test prints it.
    #[serde(skip)]
    pub windows: String,
}

impl RrRound {
    fn of(round: &FollowRound) -> Self {
        let (local_share, local_share_before_move) = round.shares();
        let mut judged = round.judge_data();
        if round.spec.choice == PathChoice::FollowReader {
            judged.extend(round.judge_following());
        }
        Self {
            choice: short(round.spec.choice),
            title: round.spec.title(),
            stats: RequestStats::of(&round.requests),
            local_share,
            local_share_before_move,
            flows: round.requests.clone(),
            judged,
            windows: round.render(),
        }
    }
}

/// The round's name in the table.
fn short(choice: PathChoice) -> &'static str {
    match choice {
        PathChoice::KernelEndpoints => "kernel",
        PathChoice::ConnectTime => "connect",
        PathChoice::FollowReader => "follow",
    }
}

/// Following beside the kernel, from the one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratios {
    /// Requests a second, follow / kernel (above 1: following served more).
    pub throughput: Option<f64>,
    /// P99 round trip, follow / kernel (below 1: following answered sooner).
    pub p99: Option<f64>,
}

impl Ratios {
    fn of(kernel: Option<&RequestStats>, follow: Option<&RequestStats>) -> Self {
        match (kernel, follow) {
            (Some(k), Some(f)) => Self {
                throughput: ratio(f.per_second, k.per_second),
                p99: ratio(f.p99_us as f64, k.p99_us as f64),
            },
            _ => Self {
                throughput: None,
                p99: None,
            },
        }
    }
}

/// `follow / kernel`; `None` without a positive, finite base.
pub fn ratio(follow: f64, kernel: f64) -> Option<f64> {
    (kernel > 0.0 && kernel.is_finite() && follow.is_finite()).then(|| follow / kernel)
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct FollowReaderReport {
    pub guest_kernel: String,
    /// The guest's NICs and nodes as it shows them, one line each.
    pub layout: Vec<String>,
    pub connections: usize,
    pub period_seconds: u64,
    pub periods: u64,
    pub request_bytes: usize,
    pub response_bytes: usize,
    /// The kernel's round, then following's.
    pub rounds: Vec<RrRound>,
    pub ratios: Ratios,
    pub meaning: &'static str,
    /// When the run began (seconds since the epoch), and its wall time.
    pub started_unix: u64,
    pub wall_seconds: f64,
}

impl FollowReaderReport {
    fn round(&self, choice: PathChoice) -> Option<&RrRound> {
        self.rounds.iter().find(|r| r.choice == short(choice))
    }

    /// The title, the per-round table, the ratios and what they mean.
    pub fn render(&self) -> String {
        let mut out = format!(
            "request/response in the two-node {} guest: {} MPTCP connections accepted by the \
             guest, each served by a thread that moves to the other node every {} s ({} \
             periods); closed loop, {} B requests, {} B responses\n",
            self.guest_kernel,
            self.connections,
            self.period_seconds,
            self.periods,
            self.request_bytes,
            self.response_bytes
        );
        for line in &self.layout {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(
            out,
            "  {:<7} {:>9} {:>10} {:>9} {:>9} {:>9} {:>13}",
            "round", "requests", "req/s", "P50 ms", "P99 ms", "P999 ms", "local (1st)"
        );
        for r in &self.rounds {
            out += &render_row(r);
        }
        let show = |x: Option<f64>| x.map_or("n/a".to_owned(), |x| format!("{x:.3}"));
        let _ = writeln!(
            out,
            "  follow/kernel: throughput {}, P99 {}",
            show(self.ratios.throughput),
            show(self.ratios.p99)
        );
        let _ = writeln!(out, "  what the ratio means here: {MEANING}");
        for r in self.rounds.iter().filter(|r| !r.judged.is_empty()) {
            let _ = writeln!(out, "  (!) {}: {}", r.choice, r.judged.join("; "));
        }
        out
    }
}

/// One round's line of the table.
fn render_row(r: &RrRound) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    let shares = format!(
        "{:.1}% ({:.0}%)",
        r.local_share * 100.0,
        r.local_share_before_move * 100.0
    );
    match &r.stats {
        Some(s) => format!(
            "  {:<7} {:>9} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>13}{}\n",
            r.choice,
            s.requests,
            s.per_second,
            ms(s.p50_us),
            ms(s.p99_us),
            ms(s.p999_us),
            shares,
            if r.judged.is_empty() { "" } else { "  (!)" }
        ),
        None => format!("  {:<7} no request answered  {shares}\n", r.choice),
    }
}

/// Boots the two-node guest from `image` and runs the kernel's round, then
/// following's; `progress` hears of each round as it ends.
pub fn run(
    image: &GuestImage,
    plan: FollowPlan,
    progress: &mut dyn FnMut(&RrRound),
) -> anyhow::Result<FollowReaderReport> {
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut lab = FollowLab::start(image)?;
    let mut rounds = Vec::new();
    for (port, choice) in (FIRST_PORT..).zip(CHOICES) {
        if interrupted() {
            anyhow::bail!("interrupted");
        }
        let round = match lab.round(spec(choice, port, plan)) {
            Ok(round) => round,
            Err(err) => {
                let log = lab.sender_log();
                return Err(
                    err.context(format!("{}; the guest's agent log:\n{log}", choice.label()))
                );
            }
        };
        let kept = RrRound::of(&round);
        progress(&kept);
        rounds.push(kept);
    }
    let mut report = FollowReaderReport {
        guest_kernel: image.series.to_string(),
        layout: lab.numa.render().lines().map(str::to_owned).collect(),
        connections: CONNECTIONS,
        period_seconds: plan.period,
        periods: PERIODS,
        request_bytes: REQUEST,
        response_bytes: RESPONSE,
        rounds,
        ratios: Ratios::of(None, None),
        meaning: MEANING,
        started_unix,
        wall_seconds: 0.0,
    };
    report.ratios = Ratios::of(
        report
            .round(PathChoice::KernelEndpoints)
            .and_then(|r| r.stats.as_ref()),
        report
            .round(PathChoice::FollowReader)
            .and_then(|r| r.stats.as_ref()),
    );
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// One round of the experiment: the guest accepts and answers.
fn spec(choice: PathChoice, port: u16, plan: FollowPlan) -> FollowSpec {
    FollowSpec {
        choice,
        set_up: SetUp::GuestAccepts,
        port,
        connections: CONNECTIONS,
        period: plan.period,
        periods: PERIODS,
        exchange: Some(Exchange {
            request: REQUEST,
            response: RESPONSE,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(per_second: f64, p99_us: u64) -> RequestStats {
        RequestStats {
            requests: 1000,
            per_second,
            p50_us: p99_us / 2,
            p99_us,
            p999_us: p99_us * 2,
        }
    }

    #[test]
    fn ratios_are_follow_over_kernel_and_need_a_base() {
        let r = Ratios::of(Some(&stats(200.0, 8000)), Some(&stats(180.0, 10_000)));
        assert!((r.throughput.unwrap() - 0.9).abs() < 1e-12, "{r:?}");
        assert!((r.p99.unwrap() - 1.25).abs() < 1e-12, "{r:?}");
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, f64::NAN), None);
        assert_eq!(ratio(f64::INFINITY, 1.0), None);
        let none = Ratios::of(None, Some(&stats(1.0, 1)));
        assert_eq!((none.throughput, none.p99), (None, None));
    }

    fn round(choice: PathChoice, stats: Option<RequestStats>) -> RrRound {
        RrRound {
            choice: short(choice),
            title: choice.label().into(),
            stats,
            local_share: 0.5,
            local_share_before_move: 1.0,
            flows: Vec::new(),
            judged: Vec::new(),
            windows: String::new(),
        }
    }

    #[test]
    fn the_table_shows_each_round_the_ratios_and_what_they_mean() {
        let mut follow = round(PathChoice::FollowReader, Some(stats(180.0, 10_000)));
        follow.judged.push("window 3 at 40 %".into());
        let report = FollowReaderReport {
            guest_kernel: "6.12".into(),
            layout: vec!["node 0: CPUs 0,1".into()],
            connections: 2,
            period_seconds: 3,
            periods: 5,
            request_bytes: REQUEST,
            response_bytes: RESPONSE,
            rounds: vec![round(PathChoice::KernelEndpoints, None), follow],
            ratios: Ratios {
                throughput: Some(0.9),
                p99: None,
            },
            meaning: MEANING,
            started_unix: 0,
            wall_seconds: 1.0,
        };
        let table = report.render();
        assert!(table.contains("kernel  no request answered"), "{table}");
        assert!(table.contains("10.00"), "the P99 in ms: {table}");
        assert!(table.contains("throughput 0.900, P99 n/a"), "{table}");
        assert!(table.contains("not the NUMA gain"), "{table}");
        assert!(table.contains("(!) follow: window 3 at 40 %"), "{table}");
        assert!(report.round(PathChoice::FollowReader).is_some());
    }
}
