//! `srap-agent lab`: SRAP's main job on one machine. Two hosts made of
//! network namespaces, a multi-queue veth whose sender side emulates a
//! receiver NIC's RSS, the binder on the sender, the verifier on the
//! receiver, and a workload run twice — with kernel-chosen ports and with
//! SRAP's — or the paper's experiment (`--experiment`). The namespace and
//! veth helpers here are also what the integration tests build on.
//!
//! Every object gets a name unique to this process (pid + counter) and is
//! removed on drop, so a failing run (a panic unwinds through the guards)
//! leaves nothing behind. Traffic stays inside namespaces made here:
//! addresses are `10.199.<subnet>.0/24` and `fd00:5a:0:<subnet>::/64`,
//! configured only on these veth ends.

pub mod agents;
pub mod experiment;
pub mod guest;
pub mod netns;
pub mod report;
pub mod steering;
pub mod topology;
pub mod veth;
pub mod virtio;
pub mod workload;

use std::{
    process::Stdio,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
    time::Duration,
};

use anyhow::{Context as _, bail};

use self::{
    agents::LabAgents,
    report::RunReport,
    steering::LabSteering,
    topology::{LabNet, Watch},
    workload::{ChildGuard, client, iperf3_server},
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

/// Flows that carried less than this are left out of a workload's verdict
/// (iperf3's control connection, say).
const MIN_DATA_BYTES: u64 = 1 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// The receiver's NIC: `veth` (SRAP's RSS emulator on a veth, in a
    /// namespace) or `virtio` (a QEMU guest whose virtio-net RSS QEMU
    /// computes, with the receiver agent inside).
    #[arg(long, value_enum, default_value_t = Nic::Veth)]
    pub nic: Nic,
    /// Receive queues (default: 32 for veth, 4 for virtio). Each counts as
    /// one CPU.
    #[arg(long)]
    pub queues: Option<u32>,
    /// The guest's vCPUs with --nic virtio (default: one per queue).
    #[arg(long)]
    pub smp: Option<u32>,
    /// Where the guest's kernel and initramfs are cached (default:
    /// `srap-guest` beside the binary under `target/`, else
    /// /var/cache/srap/guest).
    #[arg(long)]
    pub guest_cache: Option<std::path::PathBuf>,
    /// Parallel flows (default: 16 for veth, one per queue for virtio).
    #[arg(long)]
    pub flows: Option<usize>,
    /// Seconds the default workload runs.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// The client command, run in the sender namespace; `{server}`,
    /// `{port}`, `{flows}` and `{duration}` are filled in. Its server must be
    /// iperf3-compatible (`iperf3 -s` runs on the receiver).
    #[arg(
        long,
        default_value = "iperf3 -c {server} -p {port} -P {flows} -t {duration}"
    )]
    pub workload: String,
    /// Run the experiment instead: --trials trials with SRAP and as many with
    /// kernel-chosen ports, short connections judged by the verifier.
    #[arg(long)]
    pub experiment: bool,
    /// Trials per kind in --experiment.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub trials: u64,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// After the workload, keep the lab up (agents and all) until Ctrl-C,
    /// for `srap status --control PATH` in another terminal.
    #[arg(long)]
    pub hold: bool,
}

/// The receiver NIC the lab runs against.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    Veth,
    Virtio,
}

/// `--workload` split into words with `{flows}` and `{duration}` filled in.
pub fn workload_words(args: &LabArgs, flows: usize) -> Vec<String> {
    args.workload
        .split_whitespace()
        .map(|w| {
            w.replace("{flows}", &flows.to_string())
                .replace("{duration}", &args.duration.to_string())
        })
        .collect()
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// True once Ctrl-C (or SIGTERM) arrived: every wait in the lab checks it,
/// so the drop guards tear everything down.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

pub fn run(args: &LabArgs) -> anyhow::Result<()> {
    // SAFETY: the handler only stores to an atomic, which is signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the lab creates namespaces and loads eBPF: run it as root (`cargo xtask lab` does)");
    }
    if args.nic == Nic::Virtio {
        if args.experiment || args.hold {
            bail!("--experiment and --hold run with --nic veth only");
        }
        let queues = args.queues.unwrap_or(4);
        let flows = checked_flows(args.flows.unwrap_or(queues as usize))?;
        return virtio::run(args, queues, flows);
    }
    let queues = args.queues.unwrap_or(32);
    let flows = checked_flows(args.flows.unwrap_or(16))?;
    if args.experiment {
        let net = LabNet::new(queues, Watch::Here)?;
        let steering = LabSteering::start(&net.hosts.sender, &net.model, net.receiver_ip())?;
        let report = experiment::run(&net, steering.cgroup(), flows, args.trials as usize, queues)?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_experiment(&report);
        }
        return Ok(());
    }
    let net = LabNet::new(queues, Watch::Agent)?;
    // The lab runs the agents it is part of.
    let exe = std::env::current_exe().context("locating srap-agent")?;
    let agents = LabAgents::start(&net, &exe, SRAP_PORT)?;
    if !args.json {
        println!(
            "lab up: {} queues; receiver agent on {}:7447, sender agent following it\n\
             watch it live: srap status --control {}\n",
            queues,
            net.receiver_ip(),
            agents.control().display()
        );
    }
    let mut reports = Vec::new();
    for (title, port, cgroup) in [
        ("kernel-chosen source ports", KERNEL_PORT, None),
        ("SRAP-chosen source ports", SRAP_PORT, Some(agents.cgroup())),
    ] {
        let report = run_workload(&net, &agents, args, flows, port, cgroup)
            .with_context(|| format!("workload with {title}"))?;
        if !args.json {
            println!("{}", report.render(title, args.duration as f64));
        }
        reports.push(report);
    }
    let stats = crate::sender::read_stats(&crate::sender::PinLayout::new(agents.pin_dir()))?;
    if args.json {
        let json = serde_json::json!({"kernel": reports[0], "srap": reports[1], "binder": stats.to_string()});
        println!("{json}");
    } else {
        println!("binder counters: {stats}");
    }
    if args.hold {
        println!(
            "\nholding the lab: `srap status --control {}`; Ctrl-C ends it",
            agents.control().display()
        );
        while !interrupted() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
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
    agents: &LabAgents<'_>,
    args: &LabArgs,
    flows: usize,
    port: u16,
    cgroup: Option<&std::path::Path>,
) -> anyhow::Result<RunReport> {
    let words = workload_words(args, flows);
    let _server = iperf3_server(&net.hosts.receiver, port)?;
    let mut command = client(
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
    // What the receiver agent's verifier saw, sampled after the run ended.
    let seen = agents.status_after(std::time::SystemTime::now())?;
    Ok(RunReport::from_status(&seen, port, MIN_DATA_BYTES))
}

fn print_experiment(r: &experiment::ExperimentReport) {
    println!(
        "{} flows on {} queues, {} trials each, judged by the receive verifier",
        r.flows, r.queues, r.srap.trials
    );
    println!(
        "  {:<24} {:>15} {:>13} {:>11}",
        "", "collision-free", "busiest queue", "predicted"
    );
    for (name, t) in [("SRAP ports", &r.srap), ("kernel ports", &r.kernel)] {
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
