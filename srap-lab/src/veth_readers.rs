//! `srap-lab --direction pull|both --local-placement reader` on the veth
//! lab: does each flow's data (a download) or each flow's ACKs (an upload)
//! arrive on the CPU of the thread that opened it?
//!
//! The lab already emulates the sender's own NIC for pull and both: the
//! RSS-NIC emulator on the receiver's veth hashes what comes back with the
//! sender's description, and per-queue RPS on the sender processes its
//! each queue on one real CPU of this machine, as an interrupt's would be
//! ([`crate::topology::rps_cpu`]: queue `q ≥ 1` on CPU `(q − 1) mod cores`,
//! veth's queue numbering being one off RPS's). Here the sender's
//! description says exactly that mapping
//! ([`SenderCpus::Rps`]), so the sender agent's reader rows name the CPUs
//! the threads run on. The workload is `srap-readers` in the sender
//! namespace, one thread per flow pinned round-robin to this machine's CPUs
//! (16 flows on 2 cores: 8 a CPU), connecting one at a time off
//! round-robin order, against the lab's data source (pull) or sink (both)
//! in the receiver namespace; kernel ports, then SRAP's (`srap exec` into
//! the agent's cgroup).
//!
//! Each flow is judged by its thread's own `SO_INCOMING_CPU`, read after
//! its transfer: for a download the CPU that processed its last data
//! packet, for an upload the one that processed its last ACK. Beside it,
//! the queue the sender's description gives the port the server accepted
//! (and that queue's CPU); with `both`, the receiver's queue for the same
//! port by the receiver's description — each of its queues counts as its
//! own CPU, so SRAP must still put every flow on a distinct one.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    io::Read as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::Serialize;
use srap_common::rss::{FlowTuple, RssModel};

use srap_harness::{
    interrupt::interrupted,
    programs::ChildGuard,
    readers::{self, DataSource, FlowReport, Transfer},
    srap_exec,
};

use crate::{
    agents::LabAgents,
    args::{DEFAULT_WORKLOAD, LabArgs},
    direction::Direction,
    report::require_judged,
    topology::{LabNet, LabNetConfig, SenderCpus, Watch, rps_cores},
};

/// The data source's port for kernel ports; SRAP's is the next, so no run
/// meets the last one's TIME_WAIT.
const SOURCE_PORT: u16 = 5311;
/// Each download flow's pace (bytes a second, 40 Mbit/s): 16 flows then
/// need well under the two cores of the CI machine, so the readers, not a
/// saturated CPU, decide when each thread runs, and every flow carries data
/// until the end.
const FLOW_PACE: u64 = 5_000_000;

/// The binaries the lab runs: found beside `srap-lab` by the lab, given
/// by the tests.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub agent: PathBuf,
    pub srap: PathBuf,
    pub readers: PathBuf,
}

impl Binaries {
    /// Those beside this executable (`cargo build --bins` puts them there).
    pub fn beside_this() -> anyhow::Result<Self> {
        Self::in_dir(
            std::env::current_exe()
                .context("locating this executable")?
                .parent()
                .context("this executable's directory")?,
        )
    }

    /// Those in `dir`, each checked to exist.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        let find = |name: &str| {
            let path = dir.join(name);
            if !path.exists() {
                bail!(
                    "{} not found: build it (`cargo build --bins`; `cargo xtask lab` builds the \
                     release ones)",
                    path.display()
                );
            }
            Ok(path)
        };
        Ok(Self {
            agent: find("srap-agent")?,
            srap: find("srap")?,
            readers: find("srap-readers")?,
        })
    }
}

/// Which ports a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Kernel-chosen source ports.
    KernelPorts,
    /// The sender agent's `--local-placement reader`, under `srap exec`.
    SrapReader,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::KernelPorts, Mode::SrapReader];

    pub fn label(self) -> &'static str {
        match self {
            Self::KernelPorts => "kernel ports",
            Self::SrapReader => "SRAP reader",
        }
    }

    fn port(self) -> u16 {
        match self {
            Self::KernelPorts => SOURCE_PORT,
            Self::SrapReader => SOURCE_PORT + 1,
        }
    }
}

/// One flow: what its thread said, and where the descriptions put the port
/// the server accepted.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct VethFlow {
    #[serde(flatten)]
    pub report: FlowReport,
    /// The sender's queue for what comes back, and its CPU; `None` when
    /// the server accepted no connection from this port.
    pub sender_queue: Option<u32>,
    pub sender_queue_cpu: Option<u32>,
    /// The receiver's queue (its own CPU in the lab) for what the sender
    /// sends; with `both` only.
    pub receiver_queue: Option<u32>,
}

impl VethFlow {
    /// The kernel processed its last packet on the thread's CPU.
    pub fn incoming_on_reader(&self) -> bool {
        i64::from(self.report.incoming_cpu) == i64::from(self.report.cpu)
    }

    /// The sender's NIC (its queue's CPU) put it on the thread's CPU.
    pub fn queue_on_reader(&self) -> bool {
        self.sender_queue_cpu == Some(self.report.cpu)
    }
}

/// One mode's run.
#[derive(Debug, Clone, Serialize)]
pub struct VethRun {
    pub mode: Mode,
    pub flows: Vec<VethFlow>,
}

impl VethRun {
    pub fn on_reader_by_incoming_cpu(&self) -> usize {
        self.flows.iter().filter(|f| f.incoming_on_reader()).count()
    }

    pub fn on_reader_by_queue(&self) -> usize {
        self.flows.iter().filter(|f| f.queue_on_reader()).count()
    }

    /// Distinct receiver queues (CPUs) among the flows.
    pub fn receiver_cpus(&self) -> usize {
        self.flows
            .iter()
            .filter_map(|f| f.receiver_queue)
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn bytes(&self) -> u64 {
        self.flows.iter().map(|f| f.report.bytes).sum()
    }
}

/// Both modes' runs.
#[derive(Debug, Clone, Serialize)]
pub struct VethReadersReport {
    pub direction: Direction,
    pub queues: u32,
    pub cores: u32,
    pub threads: usize,
    pub seconds: u64,
    /// The connect order, as the threads' CPUs.
    pub order: Vec<u32>,
    pub runs: Vec<VethRun>,
}

impl VethReadersReport {
    pub fn run(&self, mode: Mode) -> Option<&VethRun> {
        self.runs.iter().find(|r| r.mode == mode)
    }

    /// The side-by-side table.
    pub fn render(&self) -> String {
        let both = self.direction == Direction::Both;
        let order: Vec<String> = self.order.iter().map(u32::to_string).collect();
        let mut out = format!(
            "{threads} threads pinned round-robin to CPUs 0-{last} ({per} a CPU), {what} {s} s \
             each, connecting one at a time (CPUs {order}); the sender's {queues} queues on \
             those CPUs by RPS\n",
            threads = self.threads,
            last = self.cores.saturating_sub(1),
            per = self.threads / self.cores.max(1) as usize,
            what = if both { "uploading" } else { "downloading" },
            s = self.seconds,
            order = order.join(","),
            queues = self.queues,
        );
        let what = if both {
            "ACKs on the sender's CPU"
        } else {
            "data on the reader's CPU"
        };
        let head = format!(
            "  {:<13} {:>26}{}",
            "",
            what,
            if both { "   receiver" } else { "" }
        );
        let _ = writeln!(out, "{}", head.trim_end());
        let head = format!(
            "  {:<13} {:>15} {:>10}{} {:>8}",
            "",
            "SO_INCOMING_CPU",
            "NIC queue",
            if both { "   CPUs" } else { "" },
            "MB"
        );
        let _ = writeln!(out, "{head}");
        for run in &self.runs {
            let n = run.flows.len();
            let receiver = if both {
                format!(" {:>6}", format!("{}/{n}", run.receiver_cpus()))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<13} {:>15} {:>10}{receiver} {:>8.0}",
                run.mode.label(),
                format!("{}/{n}", run.on_reader_by_incoming_cpu()),
                format!("{}/{n}", run.on_reader_by_queue()),
                run.bytes() as f64 / 1e6,
            );
        }
        out
    }

    /// Every flow of every run.
    pub fn render_flows(&self) -> String {
        let mut out = String::new();
        for run in &self.runs {
            let _ = writeln!(out, "{}:", run.mode.label());
            let _ = writeln!(
                out,
                "  {:>3} {:>3} {:>6} {:>5} {:>8} {:>5} {:>7} {:>8} {:>10}",
                "pos", "cpu", "ran on", "port", "incoming", "queue", "its cpu", "receiver", "bytes"
            );
            for f in &run.flows {
                let opt = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
                let r = f.report;
                let _ = writeln!(
                    out,
                    "  {:>3} {:>3} {:>6} {:>5} {:>8} {:>5} {:>7} {:>8} {:>10}",
                    r.position,
                    r.cpu,
                    r.ran_on,
                    r.port,
                    r.incoming_cpu,
                    opt(f.sender_queue),
                    opt(f.sender_queue_cpu),
                    opt(f.receiver_queue),
                    r.bytes
                );
            }
        }
        out
    }
}

/// The lab for the pinned threads: its network with the sender NIC's
/// queues on real CPUs, both agents (the sender with `--local-placement
/// reader`). Field order is drop order: the agents before the network.
pub struct VethReadersLab {
    pub agents: LabAgents,
    pub net: LabNet,
    binaries: Binaries,
    direction: Direction,
}

impl VethReadersLab {
    /// `config`'s network (its direction pull or both; the sender NIC's
    /// CPUs are set here) and both agents.
    pub fn start(config: LabNetConfig, binaries: Binaries) -> anyhow::Result<Self> {
        let direction = config.direction;
        if direction == Direction::Push {
            bail!("--local-placement reader plans this host's NIC: --direction pull or both");
        }
        let net = LabNet::with_config(LabNetConfig {
            sender_cpus: SenderCpus::Rps,
            ..config
        })?;
        let agents = LabAgents::start_for_with(
            &net,
            &binaries.agent,
            Mode::SrapReader.port(),
            direction,
            &["--local-placement", "reader"],
        )?;
        Ok(Self {
            agents,
            net,
            binaries,
            direction,
        })
    }

    /// The sender's own NIC.
    fn sender_model(&self) -> anyhow::Result<&RssModel> {
        self.net
            .sender_model()
            .context("the lab has no sender NIC (--direction pull or both)")
    }

    /// One run of `mode`: `threads` threads over this machine's CPUs, each
    /// transferring for `seconds`.
    pub fn run(&self, mode: Mode, threads: usize, seconds: u64) -> anyhow::Result<VethRun> {
        let transfer = match self.direction {
            Direction::Both => Transfer::Upload,
            _ => Transfer::Download,
        };
        let cores = rps_cores();
        let server = SocketAddr::new(self.net.receiver_ip(), mode.port());
        let source = DataSource::start_for(
            &self.net.hosts.receiver,
            server,
            threads,
            seconds,
            Some(FLOW_PACE),
            transfer,
        )?;
        let cgroup = (mode == Mode::SrapReader).then(|| self.agents.sender.cgroup());
        let mut command = srap_exec(
            &self.net.hosts.sender,
            &self.binaries.srap,
            cgroup,
            &self.binaries.readers,
        );
        command
            .arg("--connect")
            .arg(server.to_string())
            .arg("--cpus")
            .arg(format!("0-{}", cores - 1))
            .arg("--threads")
            .arg(threads.to_string())
            // A download reads until the source closes, 10 s past its
            // time at the latest; an upload writes this long.
            .arg("--seconds")
            .arg(
                match transfer {
                    Transfer::Download => seconds + 10,
                    Transfer::Upload => seconds,
                }
                .to_string(),
            )
            .args(if transfer == Transfer::Upload {
                &["--send"][..]
            } else {
                &[]
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut client = ChildGuard::spawn(&mut command)?;
        let status = client.wait(Duration::from_secs(seconds + 30 + 10 * threads as u64 / 4))?;
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(child) = client.child_mut() {
            if let Some(pipe) = child.stdout.as_mut() {
                pipe.read_to_string(&mut out)
                    .context("srap-readers' output")?;
            }
            if let Some(pipe) = child.stderr.as_mut() {
                let _ = pipe.read_to_string(&mut err);
            }
        }
        if !status.success() {
            bail!(
                "srap-readers under {} exited with {status}: {}",
                mode.label(),
                err.trim()
            );
        }
        let reports = readers::parse_reports(&out)?;
        if reports.len() != threads {
            bail!(
                "{} reports from {threads} threads: {out}{err}",
                reports.len()
            );
        }
        let accepted = source.finish(Duration::from_secs(30))?;
        let sender_model = self.sender_model()?;
        let sender_ip = self.net.hosts.sender_end.ip(false);
        let flows = reports
            .into_iter()
            .map(|report| {
                let seen = accepted.contains(&report.port);
                let tuple = FlowTuple::new(sender_ip, report.port, server.ip(), server.port())?;
                let back = seen.then(|| sender_model.landing(&tuple.reversed()));
                let receiver_queue = (seen && self.direction.reaches_receiver())
                    .then(|| self.net.model.landing(&tuple).queue);
                Ok(VethFlow {
                    report,
                    sender_queue: back.map(|l| l.queue),
                    sender_queue_cpu: back.map(|l| l.cpu),
                    receiver_queue,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // A thread's flow the source never accepted has no queue: no
        // verdict on it.
        let judged = flows.iter().filter(|f| f.sender_queue.is_some()).count();
        require_judged(
            &format!("the threads under {}: the data source", mode.label()),
            threads,
            judged,
        )?;
        Ok(VethRun { mode, flows })
    }
}

/// Starts the lab and runs both modes, kernel ports first.
pub fn measure(
    config: LabNetConfig,
    binaries: Binaries,
    threads: usize,
    seconds: u64,
) -> anyhow::Result<VethReadersReport> {
    let direction = config.direction;
    let queues = config.queues;
    let cores = rps_cores();
    let cpus: Vec<u32> = (0..cores).collect();
    let order = readers::default_order_for(&cpus, threads)?;
    let lab = VethReadersLab::start(config, binaries)?;
    let mut runs = Vec::new();
    for mode in Mode::ALL {
        runs.push(
            lab.run(mode, threads, seconds)
                .with_context(|| format!("the threads under {}", mode.label()))?,
        );
        if interrupted() {
            bail!("interrupted");
        }
    }
    Ok(VethReadersReport {
        direction,
        queues,
        cores,
        threads,
        seconds,
        order,
        runs,
    })
}

/// `srap-lab --direction pull|both --local-placement reader` (veth).
pub fn run(args: &LabArgs, queues: u32, flows: usize) -> anyhow::Result<()> {
    if args.experiment.is_some() || args.queue_rate.is_some() || args.hold {
        bail!("--local-placement reader runs without --experiment, --queue-rate and --hold");
    }
    if args.workload != DEFAULT_WORKLOAD {
        bail!(
            "--local-placement reader runs its own workload (srap-readers): leave --workload out"
        );
    }
    let cores = rps_cores();
    readers::threads_per_cpu(cores as usize, flows)
        .with_context(|| format!("--flows {flows} with --local-placement reader"))?;
    let binaries = Binaries::beside_this()?;
    if !args.json {
        println!(
            "veth lab, {queues} queues a side; sender agent --steer {} --local-placement reader; \
             srap-readers{} in the sender namespace, kernel ports then SRAP's\n",
            args.direction.steer(),
            if args.direction == Direction::Both {
                " --send"
            } else {
                ""
            }
        );
    }
    let config = LabNetConfig {
        direction: args.direction,
        ..LabNetConfig::new(queues, Watch::Agent)
    };
    let report = measure(config, binaries, flows, args.duration)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.render());
        println!("{}", report.render_flows());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(cpu: u32, incoming_cpu: i32, queue_cpu: u32, receiver: u32) -> VethFlow {
        VethFlow {
            report: FlowReport {
                cpu,
                ran_on: cpu,
                position: 0,
                port: 10_000 + receiver as u16,
                incoming_cpu,
                napi_id: 0,
                bytes: 1_000_000,
            },
            sender_queue: Some(queue_cpu + 2),
            sender_queue_cpu: Some(queue_cpu),
            receiver_queue: Some(receiver),
        }
    }

    #[test]
    fn a_run_counts_flows_on_their_threads_cpus_and_receiver_cpus() {
        let run = VethRun {
            mode: Mode::SrapReader,
            flows: vec![flow(0, 0, 0, 3), flow(1, 1, 1, 4), flow(1, 0, 0, 4)],
        };
        assert_eq!(run.on_reader_by_incoming_cpu(), 2);
        assert_eq!(run.on_reader_by_queue(), 2);
        assert_eq!(run.receiver_cpus(), 2);
        let report = VethReadersReport {
            direction: Direction::Both,
            queues: 32,
            cores: 2,
            threads: 3,
            seconds: 2,
            order: vec![1, 0, 1],
            runs: vec![run],
        };
        let table = report.render();
        assert!(table.contains("ACKs on the sender's CPU"), "{table}");
        assert!(table.contains("2/3"), "{table}");
        assert!(report.render_flows().contains("SRAP reader:"));
    }
}
