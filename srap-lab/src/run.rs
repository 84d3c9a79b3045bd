//! `srap-lab`: SRAP's main job on one machine. Two hosts made of
//! network namespaces, a multi-queue veth whose sender side emulates a
//! receiver NIC's RSS, the binder on the sender, the receive verifier on the
//! receiver, and a workload run twice — with kernel-chosen ports and with
//! SRAP's — or one of the paper's experiments (`--experiment` for placement,
//! `--experiment throughput` with `--queue-rate` capacity per receive
//! queue), or what a balanced bond buys (`--bond N` with `--member-rate`
//! per member, [`bond_throughput`]). Its harness for agents in network namespaces ([`harness`]: hosts,
//! agents, workloads, ground truth) is also what the integration tests and
//! benchmarks build on.
//!
//! The `srap-lab` binary (`src/main.rs`, what `cargo xtask lab` runs) is
//! thin over [`run`]. Nothing here may be linked into `srap-agent`, the
//! root daemon the packages ship (`cargo xtask test` checks its dependency
//! graph); and nothing the agents need at run time may live only here: the
//! lab drives the agents, it is not one.
//!
//! Every object gets a name unique to this process (pid + counter) and is
//! removed on drop, so a failing run (a panic unwinds through the guards)
//! leaves nothing behind. Traffic stays inside namespaces made here:
//! addresses are `10.199.<subnet>.0/24` and `fd00:5a:0:<subnet>::/64`,
//! configured only on these veth ends.

pub mod agents;
pub mod binder;
pub mod bond_throughput;
pub mod capacity;
pub mod command;
pub mod emulator;
pub mod experiment;
pub mod guest;
pub mod harness;
pub mod keyfile;
pub mod netns;
pub mod orphans;
pub mod plot;
pub mod readers;
pub mod report;
pub mod subnet;
pub mod throughput;
pub mod topology;
pub mod veth;
pub mod veth_readers;
pub mod virtio;
pub mod virtio_pull;
pub mod virtio_readers;
pub mod workload;

use std::{
    process::Stdio,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::Serialize;

use self::{
    agents::LabAgents,
    binder::LabBinder,
    capacity::{QueueRate, Rate},
    report::RunReport,
    throughput::ThroughputPlan,
    topology::{LabNet, LabNetConfig, LabVerifier, Watch},
    workload::{ChildGuard, client_via, iperf3_server, srap_binary},
};

pub use netns::{NetNs, NsGuard};
pub use veth::{TwoHosts, VethConfig, VethEnd};

/// A name no other live object of this process has: `s<pid>x<n><suffix>`.
///
/// Short enough for an interface name (15 bytes) for any pid and up to a few
/// thousand objects per process with a one-letter suffix.
pub fn unique_name(suffix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("s{}x{n}{suffix}", std::process::id())
}

/// The source ports the lab's binder and sender agent use: below the
/// namespace's ephemeral range, so kernel-chosen ports never collide with
/// them.
pub const LAB_PORT_RANGE: &str = "10000-32767";

/// Flows that carried less than this are left out of a workload's verdict
/// (iperf3's control connection, say).
const MIN_DATA_BYTES: u64 = 1 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// The receiver's NIC: `veth` (SRAP's RSS emulator on a veth, in a
    /// namespace), `virtio` (a QEMU guest whose virtio-net RSS QEMU
    /// computes, with the receiver agent inside) or `igb` (a QEMU guest with
    /// an emulated Intel 82576 and Linux's igb driver).
    #[arg(long, value_enum, default_value_t = Nic::Veth)]
    pub nic: Nic,
    /// Receive queues (default: 32 for veth, 4 for virtio and igb). Each
    /// counts as one CPU.
    #[arg(long)]
    pub queues: Option<u32>,
    /// The guest's vCPUs with --nic virtio (default: one per queue; igb
    /// makes one queue per vCPU).
    #[arg(long)]
    pub smp: Option<u32>,
    /// The guest's kernel with --nic virtio|igb: Debian's generic 6.1
    /// (ethtool ioctl discovery) or 6.12 (ethtool netlink).
    #[arg(long, value_enum, default_value_t = guest::GuestKernel::V6_1)]
    pub guest_kernel: guest::GuestKernel,
    /// Where `cargo xtask setup` put the guests' QEMU and kernels (default:
    /// `guest-files` in the target directory the binary was built in).
    #[arg(long, value_name = "DIR")]
    pub guest_files: Option<std::path::PathBuf>,
    /// Where the guest's initramfs is cached (default: `srap-guest` beside
    /// the binary under `target/`, else /var/cache/srap/guest).
    #[arg(long)]
    pub guest_cache: Option<std::path::PathBuf>,
    /// Parallel flows (default: 16 for veth, one per queue for virtio).
    #[arg(long)]
    pub flows: Option<usize>,
    /// Seconds the default workload (or each throughput trial) runs.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// The client command, run in the sender namespace; `{server}`,
    /// `{port}`, `{flows}` and `{duration}` are filled in. Its server must be
    /// iperf3-compatible (`iperf3 -s` runs on the receiver). The default
    /// takes `-R` with `--direction pull` and `--bidir` with `both`.
    #[arg(long, default_value = DEFAULT_WORKLOAD)]
    pub workload: String,
    /// Which way the data flows, and so whose NIC SRAP plans for: `push`
    /// (the sender uploads; the receiver's NIC, `--steer remote`), `pull`
    /// (the sender downloads over connections it opens, `iperf3 -R`; its
    /// own NIC, `--steer local`, emulated on the receiver's veth), `both`
    /// (`iperf3 --bidir`; one port for both NICs, `--steer both`).
    #[arg(long, value_enum, default_value_t = Direction::Push)]
    pub direction: Direction,
    /// `reader`: whether each flow's data arrives on the CPU of the thread
    /// that opened it, kernel ports beside the sender agent's
    /// `--local-placement reader`. With --nic virtio --direction pull, one
    /// thread pinned per vCPU, RFS beside them too; on the veth lab with
    /// --direction pull (downloads) or both (uploads, judged by where their
    /// ACKs land), --flows threads pinned round-robin to this machine's
    /// CPUs. `spread` (the default) is the plain lab.
    #[arg(long, value_enum)]
    pub local_placement: Option<LocalPlacement>,
    /// Run an experiment instead: --trials trials with SRAP and as many with
    /// kernel-chosen ports. `--experiment` alone (or `placement`): short
    /// connections judged by the verifier. `--experiment throughput`: long
    /// iperf3 flows on receive queues of --queue-rate each, measured at the
    /// receiver.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "placement")]
    pub experiment: Option<Experiment>,
    /// Trials per kind in --experiment (default: 20 for placement, 10 for
    /// throughput).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub trials: Option<u64>,
    /// Give each receive queue of the veth lab's NIC this capacity (e.g.
    /// 200mbit, of TCP payload), shared by the flows that land on it as
    /// flows on one core share that core: an `mq` root with one `tbf` per
    /// queue on the sender's veth. `none`: no capacity, the veth's own
    /// CPU-bound ceiling. Default: none, or 100mbit with --experiment
    /// throughput.
    #[arg(long, value_name = "RATE|none")]
    pub queue_rate: Option<QueueRate>,
    /// With --experiment: the receive verifier the experiment attaches on
    /// the receiver's veth (`auto` is tc there), or `off` (throughput only:
    /// its queues are then unknown), to measure what each hook costs.
    #[arg(long, value_enum)]
    pub verifier: Option<LabVerifier>,
    /// With --experiment throughput: write PNG and SVG plots into this
    /// directory (per-flow rates over time, aggregate per trial); with
    /// --bond, its aggregate per trial (`bond-aggregate-N-MODE`).
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Run the bond capacity experiment instead: a QEMU guest whose bond of
    /// this many virtio NICs (2 to 4), each capped at --member-rate, uploads
    /// 16 equal flows at once, --trials times with kernel ports and with
    /// SRAP's, measured by the receiver. Each flow is sized so that an
    /// even split takes --duration seconds at the cap.
    #[arg(long, value_name = "MEMBERS", value_parser = clap::value_parser!(u32).range(2..=4))]
    pub bond: Option<u32>,
    /// With --bond: `xor` (balance-xor) or `lacp` (802.3ad), both hashing
    /// layer3+4. Default: xor.
    #[arg(long, value_enum)]
    pub bond_mode: Option<bond_throughput::BondModeArg>,
    /// With --bond: each member's link rate, of TCP payload (e.g. 10mbit).
    /// Choose one the emulated guest comfortably exceeds on all members at
    /// once, so the cap, not the emulator, limits: the TCG guest sends
    /// about 35 Mbit/s in all. Default: 20 Mbit/s over the members (10mbit
    /// each for 2, 5mbit for 4).
    #[arg(long, value_name = "RATE")]
    pub member_rate: Option<Rate>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// After the workload, keep the lab up (agents and all) until Ctrl-C,
    /// for `srap status --control PATH` in another terminal.
    #[arg(long)]
    pub hold: bool,
}

/// The client command unless `--workload` says.
pub const DEFAULT_WORKLOAD: &str = "iperf3 -c {server} -p {port} -P {flows} -t {duration}";

/// `--direction`: which way the lab's data flows.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The sender uploads: data lands on the receiver's NIC.
    Push,
    /// The sender downloads: data lands on its own NIC.
    Pull,
    /// Both at once: data lands on both NICs.
    Both,
}

impl Direction {
    /// The sender's own NIC is emulated and judged.
    pub fn reaches_sender(self) -> bool {
        self != Self::Push
    }

    /// The receiver's NIC is judged.
    pub fn reaches_receiver(self) -> bool {
        self != Self::Pull
    }

    /// `srap-agent sender --steer` for this direction.
    pub fn steer(self) -> &'static str {
        match self {
            Self::Push => "remote",
            Self::Pull => "local",
            Self::Both => "both",
        }
    }

    /// What iperf3's client adds for this direction.
    pub fn iperf3_flag(self) -> Option<&'static str> {
        match self {
            Self::Push => None,
            Self::Pull => Some("-R"),
            Self::Both => Some("--bidir"),
        }
    }
}

/// `--local-placement`: which CPU a download's port is planned for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPlacement {
    /// Spread over the NIC's queues (the plain download lab).
    Spread,
    /// The CPU of the thread that connects (and reads).
    Reader,
}

/// Which of the paper's experiments `--experiment` runs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experiment {
    /// Short connections, judged by where the verifier saw them land.
    Placement,
    /// Long flows on rate-limited receive queues, judged by throughput.
    Throughput,
}

/// `--queue-rate` for `--experiment throughput` when none is given: the
/// lab's 16 default flows then need 1.6 Gbit/s, about two thirds of a
/// 2-core VM's CPU with the emulator, tbfs and verifier on every packet
/// (200mbit takes ~90 %), so the queues, not the CPU, are the bottleneck.
const THROUGHPUT_QUEUE_RATE: Rate = Rate::from_mbit(100);

/// The receiver NIC the lab runs against.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    Veth,
    Virtio,
    Igb,
}

impl Nic {
    /// The guest's NIC, for the NICs a QEMU guest has.
    pub fn guest(self) -> Option<guest::GuestNic> {
        match self {
            Self::Veth => None,
            Self::Virtio => Some(guest::GuestNic::Virtio),
            Self::Igb => Some(guest::GuestNic::Igb),
        }
    }
}

/// `--workload` split into words with `{flows}` and `{duration}` filled in
/// (the default with `--direction`'s flag).
pub fn workload_words(args: &LabArgs, flows: usize) -> Vec<String> {
    let mut words: Vec<String> = args
        .workload
        .split_whitespace()
        .map(|w| {
            w.replace("{flows}", &flows.to_string())
                .replace("{duration}", &args.duration.to_string())
        })
        .collect();
    if args.workload == DEFAULT_WORKLOAD
        && let Some(flag) = args.direction.iperf3_flag()
    {
        words.push(flag.to_owned());
    }
    words
}

/// Set by SIGINT, SIGTERM and SIGHUP once [`run`] registered for them.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// True once Ctrl-C, SIGTERM or SIGHUP (the terminal or SSH session closed)
/// arrived: every wait in the lab checks it, so the drop guards tear
/// everything down.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

pub fn run(args: &LabArgs) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&INTERRUPTED))
            .with_context(|| format!("handling signal {signal}"))?;
    }
    if !rustix::process::geteuid().is_root() {
        bail!("the lab creates namespaces and loads eBPF: run it as root (`cargo xtask lab` does)");
    }
    if args.bond.is_some() {
        return run_bond(args);
    }
    if args.bond_mode.is_some() || args.member_rate.is_some() {
        bail!("--bond-mode and --member-rate go with --bond");
    }
    if args.plot.is_some() && args.experiment != Some(Experiment::Throughput) {
        bail!("--plot goes with --experiment throughput or --bond");
    }
    check_verifier(args)?;
    if let Some(nic) = args.nic.guest() {
        if args.experiment.is_some() || args.hold || args.queue_rate.is_some() {
            bail!("--experiment, --queue-rate and --hold run with --nic veth only");
        }
        let queues = args.queues.unwrap_or(4);
        let flows = checked_flows(args.flows.unwrap_or(queues as usize))?;
        if args.local_placement == Some(LocalPlacement::Reader) {
            if args.direction != Direction::Pull || args.flows.is_some() {
                bail!(
                    "--local-placement reader runs with --direction pull and one flow per \
                     queue (leave --flows out)"
                );
            }
            return virtio_readers::run(args, nic, queues);
        }
        return match args.direction {
            Direction::Push => virtio::run(args, nic, queues, flows),
            Direction::Pull => virtio_pull::run(args, nic, queues, flows),
            Direction::Both => {
                bail!("--nic virtio runs --direction push or pull (the guest is one end)")
            }
        };
    }
    let queues = args.queues.unwrap_or(32);
    let flows = checked_flows(args.flows.unwrap_or(16))?;
    match args.local_placement {
        None => {}
        Some(LocalPlacement::Reader) if args.direction.reaches_sender() => {
            return veth_readers::run(args, queues, flows);
        }
        Some(_) => bail!(
            "--local-placement reader runs with --direction pull or both (spread is the plain \
             lab: leave --local-placement out)"
        ),
    }
    match args.experiment {
        Some(Experiment::Placement) => return run_placement(args, queues, flows),
        Some(Experiment::Throughput) => return run_throughput(args, queues, flows),
        None => {}
    }
    let net = LabNet::with_config(LabNetConfig {
        queue_rate: args.queue_rate.and_then(QueueRate::rate),
        direction: args.direction,
        ..LabNetConfig::new(queues, Watch::Agent)
    })?;
    // The lab runs the agents built beside it.
    let exe = workload::agent_binary()?;
    let agents = LabAgents::start_for(&net, &exe, SRAP_PORT, args.direction)?;
    if !args.json {
        let srap = workload::srap_command();
        println!(
            "lab up: {} queues; receiver agent on {}, sender agent following it{}\n\
             watch it live, in another terminal: {srap} status --control {}\n\
             the sender's side: {srap} status --sender --control {}\n",
            queues,
            agents.receiver.peer(),
            match args.direction {
                Direction::Push => String::new(),
                other => format!(
                    " (--steer {}; the sender's NIC emulated too)",
                    other.steer()
                ),
            },
            agents.receiver.control().display(),
            agents.sender.control().display()
        );
    }
    let mut reports = Vec::new();
    for (title, port, cgroup) in [
        ("kernel-chosen source ports", KERNEL_PORT, None),
        (
            "SRAP-chosen source ports",
            SRAP_PORT,
            Some(agents.sender.cgroup()),
        ),
    ] {
        let report = run_workload(&net, &agents, args, flows, port, cgroup)
            .with_context(|| format!("workload with {title}"))?;
        if !args.json {
            println!("{}", report.render(title, args.duration as f64));
        }
        reports.push(report);
    }
    let stats = agents.sender.stats()?;
    if args.json {
        let json = match args.direction {
            Direction::Push => serde_json::json!({
                "kernel": reports[0].receiver,
                "srap": reports[1].receiver,
                "binder": stats.to_string()
            }),
            direction => serde_json::json!({
                "direction": direction,
                "kernel": reports[0],
                "srap": reports[1],
                "binder": stats.to_string()
            }),
        };
        println!("{json}");
    } else {
        println!("binder counters: {stats}");
    }
    if args.hold {
        println!(
            "\nholding the lab: `{} status --control {}`; Ctrl-C ends it",
            workload::srap_command(),
            agents.receiver.control().display()
        );
        while !interrupted() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// `--experiment` (placement): short connections judged by the verifier.
fn run_placement(args: &LabArgs, queues: u32, flows: usize) -> anyhow::Result<()> {
    let net = LabNet::with_config(LabNetConfig {
        queue_rate: args.queue_rate.and_then(QueueRate::rate),
        verifier: args.verifier.unwrap_or_default(),
        direction: args.direction,
        ..LabNetConfig::new(queues, Watch::Here)
    })?;
    let steering = LabBinder::for_direction(&net)?;
    let trials = args.trials.unwrap_or(20) as usize;
    let report = experiment::run(&net, steering.cgroup(), flows, trials, queues)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_experiment(&report, args.direction);
    }
    Ok(())
}

/// `--experiment throughput`: long flows on rate-limited queues, measured
/// at the receiver, with the plots when asked.
fn run_throughput(args: &LabArgs, queues: u32, flows: usize) -> anyhow::Result<()> {
    let plan = ThroughputPlan {
        flows,
        queues,
        trials: args.trials.unwrap_or(10) as usize,
        duration: args.duration,
        queue_rate: args
            .queue_rate
            .unwrap_or(QueueRate::Each(THROUGHPUT_QUEUE_RATE))
            .rate(),
        srap: srap_binary()?,
    };
    if args.plot.is_some() && plan.queue_rate.is_none() {
        bail!("--plot draws the queues' rate and the ideal: it needs a --queue-rate, not none");
    }
    let net = LabNet::with_config(LabNetConfig {
        queue_rate: plan.queue_rate,
        verifier: args.verifier.unwrap_or_default(),
        direction: args.direction,
        ..LabNetConfig::new(queues, Watch::Here)
    })?;
    let steering = LabBinder::for_direction(&net)?;
    if !args.json {
        eprintln!(
            "{} trials per mode, {} s each: about {} s",
            plan.trials,
            plan.duration,
            plan.trials as u64 * 2 * (plan.duration + 1)
        );
    }
    let report = throughput::run(&net, steering.cgroup(), &plan, &mut |t, srap, kernel| {
        tracing::info!(
            trial = t + 1,
            srap_gbps = format!("{:.3}", srap.aggregate_gbps),
            srap_queues = ?srap.queues_used,
            kernel_gbps = format!("{:.3}", kernel.aggregate_gbps),
            kernel_queues = ?kernel.queues_used,
            "trial done"
        );
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.render());
    }
    if let Some(dir) = &args.plot {
        let files = plot::write_all(&report, dir)?;
        if !args.json {
            print_plots(&files);
        }
    }
    Ok(())
}

/// The bond's capacity when `--member-rate` is not given, shared by its
/// members: the single-threaded TCG guest sends about 35 Mbit/s over all
/// its NICs, so 20 leave it headroom (see docs/bonds.md).
const BOND_IDEAL_MBIT: u32 = 20;

/// The flags `--bond` leaves out: it boots its own bonded guest, and its
/// rounds are 16 uploads with a fixed shape.
fn check_bond_args(args: &LabArgs) -> anyhow::Result<()> {
    let others = [
        (args.nic != Nic::Veth, "--nic"),
        (args.queues.is_some(), "--queues"),
        (args.smp.is_some(), "--smp"),
        (args.flows.is_some(), "--flows"),
        (args.workload != DEFAULT_WORKLOAD, "--workload"),
        (args.direction != Direction::Push, "--direction"),
        (args.local_placement.is_some(), "--local-placement"),
        (args.experiment.is_some(), "--experiment"),
        (args.queue_rate.is_some(), "--queue-rate"),
        (args.verifier.is_some(), "--verifier"),
        (args.hold, "--hold"),
    ];
    let given: Vec<&str> = others
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, flag)| *flag)
        .collect();
    if !given.is_empty() {
        bail!(
            "--bond runs its own bonded guest with 16 uploads: leave out {}",
            given.join(", ")
        );
    }
    if args.duration < 1 {
        bail!("--duration with --bond is a balanced trial's seconds: 1 or more");
    }
    Ok(())
}

/// `--bond N`: the bond capacity experiment ([`bond_throughput`]).
fn run_bond(args: &LabArgs) -> anyhow::Result<()> {
    check_bond_args(args)?;
    let mode = args.bond_mode.unwrap_or(bond_throughput::BondModeArg::Xor);
    let plan = bond_throughput::BondPlan {
        members: args.bond.context("--bond")?,
        mode,
        member_rate: args
            .member_rate
            .unwrap_or(Rate::from_mbit(BOND_IDEAL_MBIT / args.bond.unwrap_or(2))),
        trials: args.trials.unwrap_or(10) as usize,
        seconds: args.duration,
    };
    let image = virtio::prepare_image(args)?;
    let agent = workload::agent_binary()?;
    if !args.json {
        eprintln!(
            "{} members ({}) of {}, {} trial pairs of 16 flows x {:.1} MB; booting the guest",
            plan.members,
            plan.mode.mode().sysfs(),
            plan.member_rate,
            plan.trials,
            plan.flow_bytes() as f64 / 1e6
        );
    }
    let json = args.json;
    let report = bond_throughput::run(&image, &agent, &plan, &mut |trial, round| {
        if !json {
            eprintln!(
                "trial {:>2} {:<6} split {:<12} {:>7.1} Mbit/s ({:.1}% of ideal), {:.1} s{}",
                trial.trial,
                trial.ports.label(),
                bond_throughput::split_text(&trial.by_counters),
                trial.aggregate_mbps,
                trial.fraction_of_ideal * 100.0,
                trial.seconds,
                if trial.counters_agree {
                    String::new()
                } else {
                    format!("; counters differ from the model\n{}", round.render())
                }
            );
        }
    })?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.render());
        println!("wall time: {:.0} s", report.wall_seconds);
    }
    if let Some(dir) = &args.plot {
        let name = format!(
            "bond-aggregate-{}-{}",
            plan.members,
            match mode {
                bond_throughput::BondModeArg::Xor => "xor",
                bond_throughput::BondModeArg::Lacp => "lacp",
            }
        );
        let files = plot::write_bond(&report, dir, &name)?;
        if !json {
            print_plots(&files);
        }
    }
    Ok(())
}

/// `--verifier` chooses the experiments' own verifier (the plain lab's is
/// the receiver agent's, `--hook`); placement trials are judged by it, so
/// only the throughput experiment runs without one.
fn check_verifier(args: &LabArgs) -> anyhow::Result<()> {
    match (args.verifier, args.experiment) {
        (None, _) => Ok(()),
        (Some(_), None) => {
            bail!("--verifier goes with --experiment (the plain lab's verifier is the agent's)")
        }
        (Some(LabVerifier::Off), Some(Experiment::Placement)) => bail!(
            "placement trials are judged by the verifier: --verifier off goes with \
             --experiment throughput"
        ),
        (Some(_), Some(_)) => Ok(()),
    }
}

fn checked_flows(flows: usize) -> anyhow::Result<usize> {
    if flows == 0 || flows > 256 {
        bail!("--flows must be 1 to 256");
    }
    Ok(flows)
}

/// The receiver's ports for the two workload runs.
const KERNEL_PORT: u16 = 5201;
const SRAP_PORT: u16 = 5202;

fn run_workload(
    net: &LabNet,
    agents: &LabAgents,
    args: &LabArgs,
    flows: usize,
    port: u16,
    cgroup: Option<&std::path::Path>,
) -> anyhow::Result<EndsReport> {
    let words = workload_words(args, flows);
    let _server = iperf3_server(&net.hosts.receiver, port)?;
    let mut command = client_via(
        &srap_binary()?,
        &net.hosts.sender,
        &words,
        &net.receiver_ip().to_string(),
        port,
        cgroup,
    )?;
    let mut workload = ChildGuard::spawn(command.stdout(Stdio::null()))?;
    let status = workload.wait(Duration::from_secs(args.duration + 30))?;
    if !status.success() {
        bail!("the workload exited with {status}");
    }
    let mut report = EndsReport::default();
    if args.direction.reaches_receiver() {
        // What the receiver agent's verifier saw, sampled after the run ended.
        let seen = agents.receiver.status_after(std::time::SystemTime::now())?;
        report.receiver = Some(RunReport::from_status(&seen, port, MIN_DATA_BYTES));
    }
    if let Some(model) = net.sender_model() {
        let records = net.flows_back_from(port)?;
        report.sender = Some(RunReport::judge_back(model, &records, MIN_DATA_BYTES));
    }
    Ok(report)
}

/// One workload run judged at each NIC the data reached.
#[derive(Debug, Clone, Default, Serialize)]
struct EndsReport {
    /// At the receiver's NIC (the data the sender sent).
    receiver: Option<RunReport>,
    /// At the sender's own NIC (the data coming back).
    sender: Option<RunReport>,
}

impl EndsReport {
    fn render(&self, title: &str, seconds: f64) -> String {
        match (&self.receiver, &self.sender) {
            (Some(receiver), None) => receiver.render(title, seconds),
            (receiver, sender) => {
                let mut out = String::new();
                if let Some(r) = receiver {
                    out += &r.render(
                        &format!("{title}: at the receiver's NIC (data sent)"),
                        seconds,
                    );
                }
                if let Some(s) = sender {
                    out += &s.render(
                        &format!("{title}: at the sender's own NIC (data coming back)"),
                        seconds,
                    );
                }
                out
            }
        }
    }
}

fn print_experiment(r: &experiment::ExperimentReport, direction: Direction) {
    let first = match direction {
        Direction::Push => "",
        Direction::Pull => " at the sender's own NIC",
        Direction::Both => " at the receiver's NIC",
    };
    println!(
        "{} flows on {} queues, {} trials each, judged by the receive verifier{first}",
        r.flows, r.queues, r.srap.trials
    );
    println!(
        "  {:<24} {:>15} {:>13} {:>11}",
        "", "collision-free", "busiest queue", "predicted"
    );
    let mut rows = vec![("SRAP ports", &r.srap), ("kernel ports", &r.kernel)];
    if let Some(sender) = &r.sender {
        rows.push(("SRAP ports, sender NIC", &sender.srap));
        rows.push(("kernel ports, sender NIC", &sender.kernel));
    }
    for (name, t) in rows {
        println!(
            "  {:<24} {:>14.1}% {:>13.2} {:>10.1}%",
            name,
            t.collision_free_rate * 100.0,
            t.mean_busiest,
            t.prediction_accuracy * 100.0
        );
    }
    println!(
        "  {:<24} {:>14.2}%",
        "random ports, formula",
        r.analytic_collision_free * 100.0
    );
}

/// The figures an experiment wrote, on one line.
fn print_plots(files: &[std::path::PathBuf]) {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    println!("plots: {}", names.join(" "));
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        lab: LabArgs,
    }

    fn parse(args: &[&str]) -> LabArgs {
        let argv = std::iter::once("lab").chain(args.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli.lab,
            Err(err) => panic!("{args:?}: {err}"),
        }
    }

    #[test]
    fn bond_takes_members_a_mode_and_a_member_rate_and_nothing_of_the_veth_lab() {
        let bond = parse(&[
            "--bond",
            "4",
            "--bond-mode",
            "lacp",
            "--member-rate",
            "20mbit",
            "--trials",
            "10",
            "--plot",
            "docs/throughput",
        ]);
        assert_eq!(bond.bond, Some(4));
        assert_eq!(bond.bond_mode, Some(bond_throughput::BondModeArg::Lacp));
        assert_eq!(bond.member_rate, "20mbit".parse().ok());
        assert!(check_bond_args(&bond).is_ok());
        assert_eq!(parse(&["--bond", "2"]).bond_mode, None);
        for bad in [
            &["--bond", "1"][..],
            &["--bond", "5"],
            &["--bond", "2", "--bond-mode", "rr"],
        ] {
            let argv = std::iter::once("lab").chain(bad.iter().copied());
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
        let mixed = parse(&["--bond", "2", "--queue-rate", "100mbit", "--flows", "8"]);
        let err = check_bond_args(&mixed).expect_err("veth flags with --bond");
        assert!(
            err.to_string().contains("--queue-rate, --flows")
                || err.to_string().contains("--flows, --queue-rate"),
            "{err}"
        );
    }

    #[test]
    fn local_placement_is_off_unless_asked() {
        assert_eq!(parse(&[]).local_placement, None);
        let readers = parse(&[
            "--nic",
            "virtio",
            "--direction",
            "pull",
            "--local-placement",
            "reader",
        ]);
        assert_eq!(readers.local_placement, Some(LocalPlacement::Reader));
        assert_eq!(
            parse(&["--local-placement", "spread"]).local_placement,
            Some(LocalPlacement::Spread)
        );
        assert!(Cli::try_parse_from(["lab", "--local-placement", "nearest"]).is_err());
    }

    #[test]
    fn experiment_alone_is_placement_and_takes_a_name() {
        assert_eq!(parse(&[]).experiment, None);
        assert_eq!(
            parse(&["--experiment"]).experiment,
            Some(Experiment::Placement)
        );
        let placement = parse(&["--experiment", "--trials", "10"]);
        assert_eq!(placement.experiment, Some(Experiment::Placement));
        assert_eq!(placement.trials, Some(10));
        let throughput = parse(&[
            "--experiment",
            "throughput",
            "--queue-rate",
            "200mbit",
            "--plot",
            "out",
        ]);
        assert_eq!(throughput.experiment, Some(Experiment::Throughput));
        assert_eq!(throughput.queue_rate, "200mbit".parse().ok());
        assert!(Cli::try_parse_from(["lab", "--experiment", "bogus"]).is_err());
        assert!(Cli::try_parse_from(["lab", "--queue-rate", "fast"]).is_err());
    }

    #[test]
    fn verifier_and_no_queue_rate_parse_and_go_with_the_experiments_that_take_them() {
        let off = parse(&[
            "--experiment",
            "throughput",
            "--verifier",
            "off",
            "--queue-rate",
            "none",
        ]);
        assert_eq!(off.verifier, Some(LabVerifier::Off));
        assert_eq!(off.queue_rate, Some(QueueRate::Unlimited));
        assert!(check_verifier(&off).is_ok());
        for (name, hooks) in [
            ("auto", Some(srap_daemon::verifier::HookChoice::Auto)),
            ("tc", Some(srap_daemon::verifier::HookChoice::Tc)),
            ("xdp", Some(srap_daemon::verifier::HookChoice::Xdp)),
            ("sock", Some(srap_daemon::verifier::HookChoice::Sock)),
            ("off", None),
        ] {
            let args = parse(&["--experiment", "throughput", "--verifier", name]);
            assert_eq!(args.verifier.and_then(LabVerifier::hooks), hooks, "{name}");
        }
        assert_eq!(
            LabVerifier::default().hooks(),
            Some(srap_daemon::verifier::HookChoice::Auto)
        );
        let placement_off = parse(&["--experiment", "--verifier", "off"]);
        let err = check_verifier(&placement_off).expect_err("placement needs a verifier");
        assert!(err.to_string().contains("--experiment throughput"), "{err}");
        assert!(check_verifier(&parse(&["--experiment", "--verifier", "sock"])).is_ok());
        let plain = parse(&["--verifier", "tc"]);
        let err = check_verifier(&plain).expect_err("the plain lab's verifier is the agent's");
        assert!(err.to_string().contains("--experiment"), "{err}");
        assert!(Cli::try_parse_from(["lab", "--verifier", "bogus"]).is_err());
        let rate = parse(&["--queue-rate", "1.5gbit"]).queue_rate;
        assert_eq!(rate.and_then(QueueRate::rate), "1.5gbit".parse().ok());
        let bad = "fast".parse::<QueueRate>().expect_err("not a rate");
        assert!(bad.to_string().contains("none"), "{bad}");
    }

    #[test]
    fn the_direction_picks_the_default_workloads_flag_and_the_steering() {
        assert_eq!(parse(&[]).direction, Direction::Push);
        let pull = parse(&["--direction", "pull"]);
        assert_eq!(
            workload_words(&pull, 16).last().map(String::as_str),
            Some("-R")
        );
        let both = parse(&["--direction", "both", "--duration", "3"]);
        let words = workload_words(&both, 8);
        assert_eq!(words.last().map(String::as_str), Some("--bidir"));
        assert!(words.contains(&"8".to_owned()) && words.contains(&"3".to_owned()));
        let own = parse(&["--direction", "pull", "--workload", "curl {server}"]);
        assert_eq!(
            workload_words(&own, 1),
            ["curl", "{server}"],
            "a given workload as is"
        );
        assert_eq!(
            [Direction::Push, Direction::Pull, Direction::Both].map(Direction::steer),
            ["remote", "local", "both"]
        );
        assert!(Cli::try_parse_from(["lab", "--direction", "sideways"]).is_err());
    }
}
