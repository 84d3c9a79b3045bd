//! The paper's throughput result in the lab (`--experiment throughput`):
//! trials of N long iperf3 flows with kernel-chosen source ports and with
//! SRAP's, on a lab NIC whose receive queues each carry `--queue-rate` (see
//! [`super::capacity`]). Flows that share a queue share its rate, so a
//! trial's aggregate is what its placement allows; each trial is measured
//! at the receiver (`iperf3 -s -J`: bytes each stream received per second),
//! never from the client's claim. Without a queue rate (`--queue-rate
//! none`) the trials run at the veth's own, CPU-bound ceiling, which is
//! where the receive observer's per-packet cost shows (`--observer`).
//!
//! With `--direction pull` the client downloads (`iperf3 -R`) and the
//! rates are the client's (the data's receiver, `iperf3 -c -J`); with
//! `both` (`--bidir`) each stream is measured by whichever end receives it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use serde::{Deserialize, Serialize};

use srap_harness::{
    interrupt::interrupted,
    names::unique_name,
    programs::{ChildGuard, client_via, iperf3_server_with},
};

use crate::{
    capacity::Rate,
    direction::Direction,
    report::{MIN_DATA_BYTES, RunReport},
    topology::LabNet,
};

/// The first second of a trial (slow start, the congestion control's first
/// probes) is left out of its rates.
pub const WARMUP_S: f64 = 1.0;
/// A trial is "at the ideal" when its aggregate is at least this share of it.
pub const AT_IDEAL: f64 = 0.95;
/// The receiver's iperf3 reports every half second (`-i`).
const INTERVAL_S: &str = "0.5";
/// Shorter intervals (the tail after the last full one) are left out of the
/// series: a few milliseconds make a rate of noise.
pub const MIN_INTERVAL_S: f64 = 0.2;
/// Trial t's receiver ports: `FIRST_PORT + 2t` (SRAP) and the next (kernel).
const FIRST_PORT: u16 = 21_000;

/// What to run.
#[derive(Clone, Debug)]
pub struct ThroughputPlan {
    pub flows: usize,
    pub queues: u32,
    pub trials: usize,
    /// Seconds each trial's flows run (at least 2: the first is warm-up).
    pub duration: u64,
    /// Each receive queue's capacity (the lab must have been built with
    /// it), or none: the veth's own ceiling.
    pub queue_rate: Option<Rate>,
    /// The `srap` binary: `srap exec` runs the steered client.
    pub srap: PathBuf,
}

impl ThroughputPlan {
    /// What the receiver can take when no two flows share a queue: one
    /// queue's rate per flow, while there are queues for every flow (none
    /// without a queue rate: then the CPU sets the ceiling).
    pub fn ideal_gbps(&self) -> Option<f64> {
        let rate = self.queue_rate?;
        Some(self.flows.min(self.queues as usize) as f64 * rate.gbps())
    }
}

/// One flow of one trial, as the receiver saw it.
#[derive(Debug, Clone)]
pub struct FlowThroughput {
    pub src_port: u16,
    /// The receive queue the observer saw it on.
    pub queue: Option<u32>,
    /// Mean rate after the warm-up, Gbit/s.
    pub gbps: f64,
    /// Per iperf3 interval of at least [`MIN_INTERVAL_S`]: (start, end,
    /// seconds from the start; Gbit/s).
    pub series: Vec<(f64, f64, f64)>,
}

/// One trial: N flows run together.
#[derive(Debug, Clone)]
pub struct TrialResult {
    pub aggregate_gbps: f64,
    pub flows: Vec<FlowThroughput>,
    /// Distinct receive queues the flows landed on (unknown without an
    /// observer).
    pub queues_used: Option<usize>,
}

/// Min, median and max of a set of numbers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// None for no values (or a NaN among them: nothing to order).
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Some(Self {
            min: sorted[0],
            median,
            max: sorted[sorted.len() - 1],
        })
    }
}

/// Every trial of one kind of port choice.
#[derive(Debug, Clone, Serialize)]
pub struct ModeReport {
    pub trials: usize,
    pub aggregate_gbps: Vec<f64>,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Share of trials whose aggregate is within 5 % of the ideal (none
    /// without a queue rate).
    pub within_5pct_of_ideal: Option<f64>,
    /// Per trial, each flow's rate (Gbit/s).
    pub per_flow_gbps: Vec<Vec<f64>>,
    /// Per trial, the distinct receive queues its flows landed on (`null`:
    /// unknown, with `--observer off`).
    pub queues_used: Vec<Option<usize>>,
    /// The trials themselves (time series for the plots).
    #[serde(skip)]
    pub runs: Vec<TrialResult>,
}

impl ModeReport {
    fn new(runs: Vec<TrialResult>, ideal_gbps: Option<f64>) -> anyhow::Result<Self> {
        let aggregate_gbps: Vec<f64> = runs.iter().map(|r| round(r.aggregate_gbps)).collect();
        let spread = Spread::of(&aggregate_gbps).context("no trials")?;
        let within_5pct_of_ideal = ideal_gbps.map(|ideal| {
            aggregate_gbps
                .iter()
                .filter(|&&g| g >= AT_IDEAL * ideal)
                .count() as f64
                / runs.len() as f64
        });
        Ok(Self {
            trials: runs.len(),
            per_flow_gbps: runs
                .iter()
                .map(|r| r.flows.iter().map(|f| round(f.gbps)).collect())
                .collect(),
            queues_used: runs.iter().map(|r| r.queues_used).collect(),
            aggregate_gbps,
            min: spread.min,
            median: spread.median,
            max: spread.max,
            within_5pct_of_ideal,
            runs,
        })
    }

    /// The trial whose aggregate is the median one (the lower of the two
    /// middle ones for an even count): the one a plot shows as typical.
    pub fn median_trial(&self) -> Option<(usize, &TrialResult)> {
        let mut order: Vec<usize> = (0..self.runs.len()).collect();
        order.sort_by(|&a, &b| self.aggregate_gbps[a].total_cmp(&self.aggregate_gbps[b]));
        let index = *order.get(order.len().saturating_sub(1) / 2)?;
        Some((index, &self.runs[index]))
    }
}

/// `gbps` to 0.1 Mbit/s: finer is noise, and keeps the JSON readable.
fn round(gbps: f64) -> f64 {
    (gbps * 1e4).round() / 1e4
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputReport {
    pub flows: usize,
    pub queues: u32,
    /// Each queue's capacity (`null`: none, the veth's own ceiling).
    pub queue_rate_gbps: Option<f64>,
    pub ideal_gbps: Option<f64>,
    pub duration_s: u64,
    /// The hook the receive observer ran on, or `off`.
    pub observer: String,
    /// Which way the data flowed.
    pub direction: Direction,
    pub srap: ModeReport,
    pub kernel: ModeReport,
}

impl ThroughputReport {
    /// The table `--experiment throughput` prints.
    pub fn render(&self) -> String {
        let capacity = match self.queue_rate_gbps {
            Some(rate) => format!("of {:.0} Mbit/s each", rate * 1e3),
            None => "without a queue rate".to_owned(),
        };
        let measured = match self.direction {
            Direction::Push => "the receiver's iperf3",
            Direction::Pull => "the sender's iperf3 (downloading: -R)",
            Direction::Both => "each stream's receiving iperf3 (--bidir)",
        };
        let mut text = format!(
            "{} flows on {} queues {capacity}, {} trials of {} s per mode, \
             measured by {measured}; observer: {}\n",
            self.flows, self.queues, self.srap.trials, self.duration_s, self.observer,
        );
        text += &format!(
            "  {:<16} {:>9} {:>9} {:>9} {:>20}\n",
            "Gbit/s", "min", "median", "max", "within 5% of ideal"
        );
        for (name, mode) in [("SRAP ports", &self.srap), ("kernel ports", &self.kernel)] {
            let within = mode
                .within_5pct_of_ideal
                .map_or_else(|| "-".to_owned(), |w| format!("{:.1}%", w * 100.0));
            text += &format!(
                "  {:<16} {:>9.3} {:>9.3} {:>9.3} {within:>20}\n",
                name, mode.min, mode.median, mode.max,
            );
        }
        match (self.ideal_gbps, self.queue_rate_gbps) {
            (Some(ideal), Some(rate)) => {
                let each_way = if self.direction == Direction::Both {
                    " each way"
                } else {
                    ""
                };
                text += &format!(
                    "  {:<16} {:>9.3}   ({} flows x {:.0} Mbit/s{each_way})",
                    "ideal",
                    ideal,
                    self.flows.min(self.queues as usize),
                    rate * 1e3
                );
            }
            _ => text += "  no ideal: without a queue rate the CPUs set the ceiling",
        }
        text
    }
}

/// Runs `plan.trials` trials with SRAP (the client in `cgroup`, steered by
/// the binder already attached there) and as many with kernel ports,
/// alternating so that any drift of the machine hits both alike.
/// `progress` hears of each pair of trials as it ends.
pub fn run(
    net: &LabNet,
    cgroup: &Path,
    plan: &ThroughputPlan,
    progress: &mut dyn FnMut(usize, &TrialResult, &TrialResult),
) -> anyhow::Result<ThroughputReport> {
    ensure!(
        plan.duration >= 2,
        "throughput trials need --duration 2 or more"
    );
    ensure!(
        plan.trials <= 1000,
        "at most 1000 trials (two receiver ports each)"
    );
    let (mut srap, mut kernel) = (Vec::new(), Vec::new());
    for t in 0..plan.trials {
        let port = FIRST_PORT + 2 * t as u16;
        let steered = trial(net, plan, port, Some(cgroup))
            .with_context(|| format!("SRAP trial {}", t + 1))?;
        let plain =
            trial(net, plan, port + 1, None).with_context(|| format!("kernel trial {}", t + 1))?;
        progress(t, &steered, &plain);
        srap.push(steered);
        kernel.push(plain);
    }
    // With both, every flow's pair carries data each way.
    let ends = if net.direction() == Direction::Both {
        2.0
    } else {
        1.0
    };
    let ideal_gbps = plan.ideal_gbps().map(|g| g * ends);
    Ok(ThroughputReport {
        flows: plan.flows,
        queues: plan.queues,
        queue_rate_gbps: plan.queue_rate.map(Rate::gbps),
        ideal_gbps,
        duration_s: plan.duration,
        observer: net
            .observer_hook()
            .map_or_else(|| "off".to_owned(), |hook| hook.to_string()),
        direction: net.direction(),
        srap: ModeReport::new(srap, ideal_gbps)?,
        kernel: ModeReport::new(kernel, ideal_gbps)?,
    })
}

/// One trial: `iperf3 -s -J` on `port`, `iperf3 -c -P N` from the sender
/// (through `srap exec` into `cgroup` when given), with `-R` or `--bidir`
/// for the lab's direction; rates from the end that received each stream,
/// queues from the observers (unknown when the lab has none).
fn trial(
    net: &LabNet,
    plan: &ThroughputPlan,
    port: u16,
    cgroup: Option<&Path>,
) -> anyhow::Result<TrialResult> {
    let direction = net.direction();
    let report = TempFile::new("iperf3-server.json")?;
    let client_report = TempFile::new("iperf3-client.json")?;
    let client_log = TempFile::new("iperf3-client.log")?;
    let mut server = iperf3_server_with(
        &net.hosts.receiver,
        port,
        &["-J", "-i", INTERVAL_S],
        Stdio::from(report.create()?),
    )?;
    let mut words: Vec<String> = [
        "iperf3",
        "-c",
        "{server}",
        "-p",
        "{port}",
        "-P",
        &plan.flows.to_string(),
        "-t",
        &plan.duration.to_string(),
        "-J",
        "-i",
        INTERVAL_S,
    ]
    .map(str::to_owned)
    .into();
    words.extend(direction.iperf3_flag().map(str::to_owned));
    let server_ip = net.receiver_ip().to_string();
    let mut command = client_via(
        &plan.srap,
        &net.hosts.sender,
        &words,
        &server_ip,
        port,
        cgroup,
    )?;
    command
        .stdout(Stdio::from(client_report.create()?))
        .stderr(Stdio::from(client_log.create()?));
    let status = ChildGuard::spawn(&mut command)?.wait(Duration::from_secs(plan.duration + 30))?;
    if !status.success() {
        bail!(
            "iperf3 -c exited with {status}: {}",
            client_log.read().unwrap_or_default().trim()
        );
    }
    server
        .wait(Duration::from_secs(10))
        .context("waiting for iperf3 -s to write its report")?;
    let mut rates = Vec::new();
    if direction.reaches_receiver() {
        rates.extend(received_rates(&report.read()?, WARMUP_S, At::Server)?);
    }
    if direction.reaches_sender() {
        rates.extend(received_rates(
            &client_report.read()?,
            WARMUP_S,
            At::Client,
        )?);
    }
    let streams = if direction == Direction::Both { 2 } else { 1 } * plan.flows;
    ensure!(
        rates.len() == streams,
        "the receiving ends' iperf3 saw {} streams, expected {streams}",
        rates.len(),
    );
    if interrupted() {
        bail!("interrupted");
    }
    let mut observed: Option<Vec<ObservedQueue>> = None;
    if direction.reaches_receiver() && net.observer_hook().is_some() {
        let run = RunReport::judge(&net.model, &net.flows_to(port)?, MIN_DATA_BYTES);
        run.require_all("the receiver's observer", plan.flows)?;
        observed.get_or_insert_default().extend(queues_of(&run));
    }
    if let Some(model) = net.sender_model() {
        let run = RunReport::judge_back(model, &net.flows_back_from(port)?, MIN_DATA_BYTES);
        run.require_all("the sender's observer", plan.flows)?;
        observed.get_or_insert_default().extend(queues_of(&run));
    }
    Ok(with_queues(rates, observed.as_deref()))
}

/// A flow's client port and the queue it was seen on.
type ObservedQueue = (u16, Option<u32>);

fn queues_of(run: &RunReport) -> impl Iterator<Item = ObservedQueue> + '_ {
    run.flows.iter().map(|f| (f.src.port(), f.queue))
}

/// `rates` with each flow's queue from the observers (`None`: no observer,
/// every queue unknown), summed up.
fn with_queues(rates: Vec<FlowThroughput>, observed: Option<&[ObservedQueue]>) -> TrialResult {
    let queue_of: BTreeMap<u16, Option<u32>> = observed
        .iter()
        .flat_map(|seen| seen.iter().copied())
        .collect();
    let flows: Vec<FlowThroughput> = rates
        .into_iter()
        .map(|f| FlowThroughput {
            queue: queue_of.get(&f.src_port).copied().flatten(),
            ..f
        })
        .collect();
    let queues_used = observed.map(|_| {
        flows
            .iter()
            .filter_map(|f| f.queue)
            .collect::<BTreeSet<_>>()
            .len()
    });
    TrialResult {
        aggregate_gbps: flows.iter().map(|f| f.gbps).sum(),
        flows,
        queues_used,
    }
}

/// The parts of `iperf3 -s -J`'s report used here.
#[derive(Debug, Deserialize)]
struct ServerReport {
    start: ServerStart,
    #[serde(default)]
    intervals: Vec<Interval>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ServerStart {
    #[serde(default)]
    connected: Vec<Connected>,
}

#[derive(Debug, Deserialize)]
struct Connected {
    socket: i64,
    #[serde(default)]
    local_port: u16,
    remote_port: u16,
}

#[derive(Debug, Deserialize)]
struct Interval {
    streams: Vec<IntervalStream>,
}

#[derive(Debug, Deserialize)]
struct IntervalStream {
    socket: i64,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    /// This end sent the stream (iperf3 3.7+; older ones: received it).
    #[serde(default)]
    sender: bool,
}

/// Which end's report is read: the client's port is the remote one at the
/// server and the local one at the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Server,
    Client,
}

/// Each stream's rate (bytes received after `warmup` seconds over the time
/// they took) and per-interval series, from `iperf3 -s -J`'s report.
pub fn flow_rates(json: &str, warmup: f64) -> anyhow::Result<Vec<FlowThroughput>> {
    received_rates(json, warmup, At::Server)
}

/// [`flow_rates`] of the streams the end `at` received, from its `-J`
/// report; each keyed by the client's port.
fn received_rates(json: &str, warmup: f64, at: At) -> anyhow::Result<Vec<FlowThroughput>> {
    let report: ServerReport = serde_json::from_str(json).context("parsing iperf3 -J's report")?;
    if let Some(error) = report.error {
        bail!("iperf3 ({at:?}): {error}");
    }
    let received = |socket: i64| {
        report
            .intervals
            .iter()
            .flat_map(|i| &i.streams)
            .any(|s| s.socket == socket && !s.sender)
    };
    report
        .start
        .connected
        .iter()
        .filter(|conn| received(conn.socket))
        .map(|conn| {
            let client_port = match at {
                At::Server => conn.remote_port,
                At::Client => conn.local_port,
            };
            let samples: Vec<&IntervalStream> = report
                .intervals
                .iter()
                .flat_map(|i| &i.streams)
                .filter(|s| s.socket == conn.socket)
                .collect();
            let (bytes, seconds) = samples
                .iter()
                .filter(|s| s.start >= warmup - 1e-3)
                .fold((0u64, 0f64), |(b, t), s| (b + s.bytes, t + s.seconds));
            ensure!(
                seconds > 0.0,
                "no interval after the {warmup} s warm-up for source port {client_port}"
            );
            Ok(FlowThroughput {
                src_port: client_port,
                queue: None,
                gbps: bytes as f64 * 8.0 / seconds / 1e9,
                series: samples
                    .iter()
                    .filter(|s| s.seconds >= MIN_INTERVAL_S)
                    .map(|s| (s.start, s.end, s.bytes as f64 * 8.0 / s.seconds / 1e9))
                    .collect(),
            })
        })
        .collect()
}

/// A file under the temp directory with a name of this process's own,
/// removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(what: &str) -> anyhow::Result<Self> {
        Ok(Self(
            std::env::temp_dir().join(format!("srap-{}-{what}", unique_name(""))),
        ))
    }

    fn create(&self) -> anyhow::Result<fs::File> {
        fs::File::create(&self.0).with_context(|| format!("creating {}", self.0.display()))
    }

    fn read(&self) -> anyhow::Result<String> {
        fs::read_to_string(&self.0).with_context(|| format!("reading {}", self.0.display()))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_middle_of_an_odd_or_even_count() {
        let odd = Spread::of(&[3.0, 1.0, 2.0]).expect("spread");
        assert_eq!((odd.min, odd.median, odd.max), (1.0, 2.0, 3.0));
        let even = Spread::of(&[4.0, 1.0, 3.0, 2.0]).expect("spread");
        assert_eq!((even.min, even.median, even.max), (1.0, 2.5, 4.0));
        let one = Spread::of(&[7.5]).expect("spread");
        assert_eq!((one.min, one.median, one.max), (7.5, 7.5, 7.5));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    fn run_of(aggregate_gbps: f64) -> TrialResult {
        TrialResult {
            aggregate_gbps,
            flows: Vec::new(),
            queues_used: None,
        }
    }

    #[test]
    fn a_mode_counts_trials_within_five_percent_of_the_ideal() {
        let runs = || [3.2, 3.05, 3.03, 2.4].map(run_of).into();
        let mode = ModeReport::new(runs(), Some(3.2)).expect("report");
        // 0.95 × 3.2 = 3.04: 3.2 and 3.05 are in, 3.03 and 2.4 are not.
        assert_eq!(mode.within_5pct_of_ideal, Some(0.5));
        // Without a queue rate there is no ideal to be near.
        let unlimited = ModeReport::new(runs(), None).expect("report");
        assert_eq!(unlimited.within_5pct_of_ideal, None);
        assert_eq!(unlimited.median, mode.median);
        assert_eq!((mode.min, mode.max), (2.4, 3.2));
        assert!((mode.median - 3.04).abs() < 1e-9);
        // The lower middle trial stands for the median: 3.03, the third.
        assert_eq!(mode.median_trial().map(|(i, _)| i), Some(2));
        assert!(ModeReport::new(Vec::new(), Some(3.2)).is_err());
    }

    #[test]
    fn the_ideal_is_one_queue_per_flow_while_queues_last() {
        let plan = |flows, queues, queue_rate| ThroughputPlan {
            flows,
            queues,
            trials: 1,
            duration: 2,
            queue_rate,
            srap: PathBuf::new(),
        };
        let rate = "200mbit".parse().ok();
        let ideal = |p: ThroughputPlan| p.ideal_gbps().expect("an ideal");
        assert!((ideal(plan(16, 32, rate)) - 3.2).abs() < 1e-9);
        assert!((ideal(plan(8, 4, rate)) - 0.8).abs() < 1e-9);
        assert_eq!(plan(8, 4, None).ideal_gbps(), None);
    }

    /// Two streams, three 1 s intervals and a short tail, as iperf3 3.12's
    /// server writes them (trimmed).
    const SERVER_JSON: &str = r#"{
      "start": {"connected": [
        {"socket": 5, "local_host": "10.199.60.2", "local_port": 5300, "remote_host": "10.199.60.1", "remote_port": 54528},
        {"socket": 8, "local_host": "10.199.60.2", "local_port": 5300, "remote_host": "10.199.60.1", "remote_port": 54538}]},
      "intervals": [
        {"streams": [{"socket": 5, "start": 0, "end": 1.0, "seconds": 1.0, "bytes": 1000000},
                     {"socket": 8, "start": 0, "end": 1.0, "seconds": 1.0, "bytes": 2000000}]},
        {"streams": [{"socket": 5, "start": 1.0, "end": 2.0, "seconds": 1.0, "bytes": 12500000},
                     {"socket": 8, "start": 1.0, "end": 2.0, "seconds": 1.0, "bytes": 25000000}]},
        {"streams": [{"socket": 5, "start": 2.0, "end": 3.0, "seconds": 1.0, "bytes": 12500000},
                     {"socket": 8, "start": 2.0, "end": 3.0, "seconds": 1.0, "bytes": 25000000}]},
        {"streams": [{"socket": 5, "start": 3.0, "end": 3.01, "seconds": 0.01, "bytes": 125000},
                     {"socket": 8, "start": 3.0, "end": 3.01, "seconds": 0.01, "bytes": 250000}]}],
      "end": {}
    }"#;

    #[test]
    fn flow_rates_leave_out_the_warm_up_and_weigh_intervals_by_length() {
        let flows = flow_rates(SERVER_JSON, WARMUP_S).expect("rates");
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0].src_port, 54528);
        assert!((flows[0].gbps - 0.1).abs() < 1e-9, "{flows:?}");
        assert!((flows[1].gbps - 0.2).abs() < 1e-9, "{flows:?}");
        // The 10 ms tail is in the rate, not in the series.
        assert_eq!(flows[0].series.len(), 3);
        assert_eq!(flows[0].series[0], (0.0, 1.0, 0.008));
    }

    #[test]
    fn an_iperf3_error_or_garbage_is_an_error() {
        let failed = r#"{"start": {"connected": []}, "intervals": [], "end": {}, "error": "unable to receive"}"#;
        let err = flow_rates(failed, WARMUP_S).expect_err("an error");
        assert!(err.to_string().contains("unable to receive"), "{err}");
        assert!(flow_rates("{", WARMUP_S).is_err());
    }

    /// A `--bidir` client's report (trimmed): socket 5 sends, socket 7
    /// receives; only what it received counts, keyed by its own port.
    const CLIENT_JSON: &str = r#"{
      "start": {"connected": [
        {"socket": 5, "local_host": "10.199.60.1", "local_port": 48356, "remote_host": "10.199.60.2", "remote_port": 5300},
        {"socket": 7, "local_host": "10.199.60.1", "local_port": 48366, "remote_host": "10.199.60.2", "remote_port": 5300}]},
      "intervals": [
        {"streams": [{"socket": 5, "start": 1.0, "end": 2.0, "seconds": 1.0, "bytes": 9, "sender": true},
                     {"socket": 7, "start": 1.0, "end": 2.0, "seconds": 1.0, "bytes": 12500000, "sender": false}]}],
      "end": {}
    }"#;

    #[test]
    fn the_client_counts_what_it_received_under_its_own_port() {
        let flows = received_rates(CLIENT_JSON, WARMUP_S, At::Client).expect("rates");
        assert_eq!(flows.len(), 1, "{flows:?}");
        assert_eq!(flows[0].src_port, 48366);
        assert!((flows[0].gbps - 0.1).abs() < 1e-9, "{flows:?}");
        let server = received_rates(CLIENT_JSON, WARMUP_S, At::Server).expect("rates");
        assert_eq!(server[0].src_port, 5300, "a server's remote port");
    }
}
