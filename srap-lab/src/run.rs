//! One `srap-lab` run ([`run`]): checks the flags go together, then runs
//! the bond experiment, the two-NIC experiment, a QEMU guest, an
//! experiment on the veth lab or the plain lab, and prints (or writes as
//! JSON, and draws) what it measured.

use std::{process::Stdio, time::Duration};

use anyhow::{Context as _, bail};
use serde::Serialize;
use srap_daemon::sender::ends::LocalPlacement;
use srap_harness::{
    guest::GuestKernel,
    interrupt::{self, interrupted},
    privilege,
    programs::{self, ChildGuard, client_via, iperf3_server, srap_binary},
    readers::Transfer,
};

use crate::{
    agents::LabAgents,
    args::{DEFAULT_WORKLOAD, Experiment, LabArgs, Nic, flows_opened, workload_words},
    binder::LabBinder,
    bond_throughput,
    capacity::{QueueRate, Rate},
    direction::Direction,
    experiment, follow_reader, mptcp_throughput, numa_nics, plot, receiver_nics,
    report::{self, MIN_DATA_BYTES, RunReport},
    throughput::{self, ThroughputPlan},
    topology::{LabNet, LabNetConfig, LabObserver, Watch},
    veth_readers, virtio, virtio_pull, virtio_readers,
};

/// `--queue-rate` for `--experiment throughput` when none is given: the
/// lab's 16 default flows then need 1.6 Gbit/s, within what a 2-core VM's
/// CPU carries with the emulator, tbfs and observer on every packet (twice
/// the rate nearly saturates it), so the queues, not the CPU, are the
/// bottleneck.
const THROUGHPUT_QUEUE_RATE: Rate = Rate::from_mbit(100);

/// One `srap-lab` run: the experiment, bond or guest its flags choose,
/// else the plain lab (two workload runs, kernel ports then SRAP's).
pub fn run(args: &LabArgs) -> anyhow::Result<()> {
    interrupt::on_signals()?;
    if !privilege::is_root() {
        bail!("the lab creates namespaces and loads eBPF: run it as root (`cargo xtask lab` does)");
    }
    if args.bond.is_some() {
        return run_bond(args);
    }
    if args.bond_mode.is_some() || args.member_rate.is_some() {
        bail!("--bond-mode and --member-rate go with --bond");
    }
    if args.experiment == Some(Experiment::NumaNics) {
        return run_numa_nics(args);
    }
    if args.experiment == Some(Experiment::ReceiverNics) {
        return run_receiver_nics(args);
    }
    if args.experiment == Some(Experiment::Mptcp) {
        return run_mptcp(args);
    }
    if args.experiment == Some(Experiment::FollowReader) {
        return run_follow_reader(args);
    }
    if args.nic_rate.is_some() {
        bail!("--nic-rate goes with --experiment receiver-nics or mptcp");
    }
    if args.plot.is_some() && args.experiment != Some(Experiment::Throughput) {
        bail!(
            "--plot goes with --experiment throughput, numa-nics, receiver-nics or mptcp, or \
             --bond"
        );
    }
    check_observer(args)?;
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
        Some(
            Experiment::NumaNics
            | Experiment::ReceiverNics
            | Experiment::Mptcp
            | Experiment::FollowReader,
        )
        | None => {}
    }
    let net = LabNet::with_config(LabNetConfig {
        queue_rate: args.queue_rate.and_then(QueueRate::rate),
        direction: args.direction,
        ..LabNetConfig::new(queues, Watch::Agent)
    })?;
    // The lab runs the agents built beside it.
    let exe = programs::agent_binary()?;
    let agents = LabAgents::start_for(&net, &exe, SRAP_PORT, args.direction)?;
    if !args.json {
        let srap = programs::srap_command();
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
        report.require_all(title, flows_opened(args, flows))?;
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
            programs::srap_command(),
            agents.receiver.control().display()
        );
        while !interrupted() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// `--experiment` (placement): short connections judged by the observer.
fn run_placement(args: &LabArgs, queues: u32, flows: usize) -> anyhow::Result<()> {
    let net = LabNet::with_config(LabNetConfig {
        queue_rate: args.queue_rate.and_then(QueueRate::rate),
        observer: args.observer.unwrap_or_default(),
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
        observer: args.observer.unwrap_or_default(),
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
        (args.observer.is_some(), "--observer"),
        (args.nic_rate.is_some(), "--nic-rate"),
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
    let agent = programs::agent_binary()?;
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
    let name = format!(
        "bond-aggregate-{}-{}",
        plan.members,
        match mode {
            bond_throughput::BondModeArg::Xor => "xor",
            bond_throughput::BondModeArg::Lacp => "lacp",
        }
    );
    let table = || {
        format!(
            "{}\nwall time: {:.0} s",
            report.render(),
            report.wall_seconds
        )
    };
    publish(args, &report, table, |dir| {
        plot::write_bond(&report, dir, &name)
    })
}

/// The flags of the veth lab and of the one-NIC guest, which the two-NIC
/// experiments (they boot a guest of their own) leave out: those given.
fn guest_lab_flags(args: &LabArgs) -> Vec<&'static str> {
    let others = [
        (args.nic != Nic::Veth, "--nic"),
        (args.queues.is_some(), "--queues"),
        (args.smp.is_some(), "--smp"),
        (args.flows.is_some(), "--flows"),
        (args.workload != DEFAULT_WORKLOAD, "--workload"),
        (args.direction != Direction::Push, "--direction"),
        (args.local_placement.is_some(), "--local-placement"),
        (args.queue_rate.is_some(), "--queue-rate"),
        (args.observer.is_some(), "--observer"),
        (args.hold, "--hold"),
    ];
    others
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, flag)| *flag)
        .collect()
}

/// The flags `--experiment numa-nics` leaves out: it boots its own
/// two-node guest, one reader per vCPU, both directions, kernel and SRAP.
fn check_numa_args(args: &LabArgs) -> anyhow::Result<()> {
    if args.nic_rate.is_some() {
        bail!("--nic-rate goes with --experiment receiver-nics");
    }
    check_guest_experiment(
        args,
        "numa-nics",
        "its own two-node guest, one reader per vCPU each way",
        "each reader's seconds",
    )
}

/// The flags of the veth lab and of the one-NIC guest refused for
/// `--experiment name` (which `runs` what it says instead), and a
/// `--duration` of at least a second (`seconds`: what it times).
fn check_guest_experiment(
    args: &LabArgs,
    name: &str,
    runs: &str,
    seconds: &str,
) -> anyhow::Result<()> {
    let given = guest_lab_flags(args);
    if !given.is_empty() {
        bail!(
            "--experiment {name} runs {runs}: leave out {}",
            given.join(", ")
        );
    }
    if args.duration < 1 {
        bail!("--duration with --experiment {name} is {seconds}: 1 or more");
    }
    Ok(())
}

/// `--experiment numa-nics`: the two-NIC guest ([`numa_nics`]).
fn run_numa_nics(args: &LabArgs) -> anyhow::Result<()> {
    check_numa_args(args)?;
    let plan = numa_nics::NumaPlan {
        trials: args.trials.unwrap_or(NUMA_TRIALS) as usize,
        seconds: args.duration,
        transfers: vec![Transfer::Download, Transfer::Upload],
    };
    let image = virtio::prepare_image(args)?;
    let json = args.json;
    if !json {
        eprintln!(
            "{} trials, each {} s downloads and uploads with the kernel's NIC and with SRAP's; \
             booting the two-node guest",
            plan.trials, plan.seconds
        );
    }
    let report = numa_nics::run(&image, &plan, &mut |round, table| {
        tracing::debug!("{table}");
        if !json {
            eprintln!(
                "trial {} {:<8} {:<6} far NIC {:>7.1} MB, own NIC {}/{}, own CPU {}/{}, RPS {}",
                round.trial,
                numa_nics::way(round.transfer),
                round.choice.label(),
                round.far_nic_bytes as f64 / 1e6,
                round.own_node_nic,
                round.readers,
                round.own_cpu,
                round.readers,
                round.rps_packets
            );
        }
    })?;
    let table = || {
        format!(
            "{}\nwall time: {:.0} s",
            report.render(),
            report.wall_seconds
        )
    };
    publish(args, &report, table, |dir| plot::write_numa(&report, dir))
}

/// The flags `--experiment follow-reader` leaves out: its own two-node
/// guest (Debian's 6.12, which has `sock:sock_recv_length`; 6.1 has not),
/// one run of two rounds, nothing to plot.
fn check_follow_reader_args(args: &LabArgs) -> anyhow::Result<()> {
    if args.guest_kernel != GuestKernel::V6_12 {
        bail!(
            "--experiment follow-reader needs --guest-kernel 6.12: following reads \
             sock:sock_recv_length, which 6.1 lacks"
        );
    }
    for (given, flag) in [
        (args.nic_rate.is_some(), "--nic-rate"),
        (args.trials.is_some(), "--trials"),
        (args.plot.is_some(), "--plot"),
    ] {
        if given {
            bail!("--experiment follow-reader is one run of two rounds: drop {flag}");
        }
    }
    check_guest_experiment(
        args,
        "follow-reader",
        "its own two-node guest serving requests",
        "the seconds between the serving threads' moves",
    )
}

/// `--experiment follow-reader`: request/response with moving serving
/// threads, the kernel's path manager beside SRAP following
/// ([`follow_reader`]).
fn run_follow_reader(args: &LabArgs) -> anyhow::Result<()> {
    check_follow_reader_args(args)?;
    let plan = follow_reader::FollowPlan {
        period: args.duration,
    };
    let image = virtio::prepare_image(args)?;
    let json = args.json;
    if !json {
        eprintln!(
            "two rounds of {} × {} s, the kernel's path manager then SRAP following; booting \
             the two-node guest",
            follow_reader::PERIODS,
            plan.period
        );
    }
    let report = follow_reader::run(&image, plan, &mut |round| {
        tracing::debug!("{}", round.windows);
        if !json {
            eprint!("{}", round.windows);
        }
    })?;
    let table = || format!("{}wall time: {:.0} s", report.render(), report.wall_seconds);
    publish(args, &report, table, |_| Ok(Vec::new()))
}

/// The flags `--experiment receiver-nics` leaves out, as numa-nics does.
fn check_receiver_nics_args(args: &LabArgs) -> anyhow::Result<()> {
    check_guest_experiment(
        args,
        "receiver-nics",
        "its own two-NIC receiver guest, 16 streams to its first address",
        "each transfer's seconds",
    )
}

/// `--experiment receiver-nics`: the two-NIC receiver ([`receiver_nics`]).
fn run_receiver_nics(args: &LabArgs) -> anyhow::Result<()> {
    check_receiver_nics_args(args)?;
    let plan = receiver_nics::ReceiverNicsPlan {
        nic_rate: args.nic_rate.unwrap_or(Rate::from_mbit(RECEIVER_NIC_MBIT)),
        trials: args.trials.unwrap_or(RECEIVER_NICS_TRIALS) as usize,
        seconds: args.duration,
    };
    let image = virtio::prepare_image(args)?;
    let (agent, srap) = (programs::agent_binary()?, programs::srap_binary()?);
    let json = args.json;
    if !json {
        eprintln!(
            "{} trials of {} streams for {} s, each receiver NIC capped at {}, the kernel's \
             ports and SRAP's; booting the two-NIC receiver",
            plan.trials,
            receiver_nics::STREAMS,
            plan.seconds,
            plan.nic_rate
        );
    }
    let report = receiver_nics::run(&image, &agent, &srap, &plan, &mut |trial| {
        if !json {
            eprintln!(
                "trial {:>2} kernel {:>7.1} Mbit/s ({}/{}), SRAP {:>7.1} Mbit/s ({}/{}, {} pairs): {:.2}x",
                trial.trial,
                trial.kernel.aggregate_mbps,
                trial.kernel.split[0],
                trial.kernel.split[1],
                trial.srap.aggregate_mbps,
                trial.srap.split[0],
                trial.srap.split[1],
                trial.srap.pairs,
                trial.ratio
            );
        }
    })?;
    let table = || {
        format!(
            "{}\nwall time: {:.0} s",
            report.render(),
            report.wall_seconds
        )
    };
    publish(args, &report, table, |dir| {
        plot::write_receiver_nics(&report, dir)
    })
}

/// The flags `--experiment mptcp` leaves out: its own two-link veth lab,
/// MPTCP connections of its own sending bulk data one way.
fn check_mptcp_args(args: &LabArgs) -> anyhow::Result<()> {
    for (given, flag) in [
        (args.nic.guest().is_some(), "--nic virtio|igb"),
        (args.direction != Direction::Push, "--direction pull|both"),
        (args.local_placement.is_some(), "--local-placement"),
        (args.observer.is_some(), "--observer"),
        (args.workload != DEFAULT_WORKLOAD, "--workload"),
        (args.hold, "--hold"),
    ] {
        if given {
            bail!("--experiment mptcp runs its own two-link lab and connections: drop {flag}");
        }
    }
    Ok(())
}

/// `--experiment mptcp`: MPTCP connections over two capped links
/// ([`mptcp_throughput`]), both agents running as a user runs them.
fn run_mptcp(args: &LabArgs) -> anyhow::Result<()> {
    use mptcp_throughput as mp;
    check_mptcp_args(args)?;
    let queue_rate = args
        .queue_rate
        .unwrap_or(QueueRate::Each(mp::QUEUE_RATE))
        .rate()
        .context("--experiment mptcp needs a --queue-rate, not none")?;
    let connections = checked_flows(args.flows.unwrap_or(mp::CONNECTIONS))?;
    let plan = mp::MptcpPlan {
        connections,
        queues: args.queues.unwrap_or(mp::QUEUES),
        queue_rate,
        link_rate: args
            .nic_rate
            .unwrap_or_else(|| mp::MptcpPlan::default_link_rate(connections, queue_rate)),
        trials: args.trials.unwrap_or(mp::TRIALS) as usize,
        duration: args.duration,
    };
    let lab = mp::MptcpLab::start(&plan, &programs::agent_binary()?, false)?;
    let json = args.json;
    if !json {
        eprintln!(
            "{} trials per kind of {} MPTCP connections x 2 links, about {} s",
            plan.trials,
            plan.connections,
            plan.trials as u64 * 2 * (plan.duration + 2)
        );
    }
    let report = lab.run(&plan, &mut |t| {
        if !json {
            eprintln!(
                "trial {:>2} kernel {:>6.1} Mbit/s ({} queues), SRAP {:>6.1} Mbit/s ({} queues): {:.2}x",
                t.trial,
                t.kernel.aggregate_mbps,
                t.kernel.queues_used,
                t.srap.aggregate_mbps,
                t.srap.queues_used,
                t.ratio
            );
        }
    })?;
    let table = || {
        format!(
            "{}\nwall time: {:.0} s",
            report.render(),
            report.wall_seconds
        )
    };
    publish(args, &report, table, |dir| plot::write_mptcp(&report, dir))
}

/// `--nic-rate` for `--experiment receiver-nics` when none is given: well
/// under half of what the emulated guest receives in all.
const RECEIVER_NIC_MBIT: u32 = 100;
/// `--trials` for `--experiment receiver-nics` when none is given.
const RECEIVER_NICS_TRIALS: u64 = 10;

/// `--trials` for `--experiment numa-nics` when none is given: each trial
/// is four rounds of the emulated guest, about a minute on two cores.
const NUMA_TRIALS: u64 = 3;

/// `--observer` chooses the experiments' own observer (the plain lab's is
/// the receiver agent's, `--hook`); placement trials are judged by it, so
/// only the throughput experiment runs without one.
fn check_observer(args: &LabArgs) -> anyhow::Result<()> {
    match (args.observer, args.experiment) {
        (None, _) => Ok(()),
        (Some(_), None) => {
            bail!("--observer goes with --experiment (the plain lab's observer is the agent's)")
        }
        (Some(LabObserver::Off), Some(Experiment::Placement)) => bail!(
            "placement trials are judged by the observer: --observer off goes with \
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
    let within = Duration::from_secs(args.duration + 30);
    // The receiver lists a flow while its packets come (and 5 s past the
    // last): its status is read while the workload runs, each flow kept as
    // last seen, so the run is judged on every flow it opened.
    let mut flows_seen = Vec::new();
    if args.direction.reaches_receiver() {
        let until = std::time::Instant::now() + within;
        while !workload.exited() && std::time::Instant::now() < until && !interrupted() {
            match agents.receiver.status() {
                Ok(status) => keep_newest(&mut flows_seen, status.flows),
                Err(err) => tracing::warn!("the receiver agent's status: {err:#}"),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let status = workload.wait(within)?;
    if !status.success() {
        bail!("the workload exited with {status}");
    }
    let mut report = EndsReport::default();
    if args.direction.reaches_receiver() {
        // What the receiver agent's observer saw: after the run ended, and
        // every flow it showed while the run went on.
        let mut seen = agents.receiver.status_after(std::time::SystemTime::now())?;
        keep_newest(&mut flows_seen, std::mem::take(&mut seen.flows));
        seen.flows = flows_seen;
        report.receiver = Some(RunReport::from_status(&seen, port, MIN_DATA_BYTES));
    }
    if let Some(model) = net.sender_model() {
        let records = net.flows_back_from(port)?;
        report.sender = Some(RunReport::judge_back(model, &records, MIN_DATA_BYTES));
    }
    Ok(report)
}

/// `kept` with `newer` (a later status's flows) in: a flow both hold as
/// `newer` shows it, one only `kept` holds as it was last seen.
fn keep_newest(kept: &mut Vec<srap_status::FlowRow>, newer: Vec<srap_status::FlowRow>) {
    kept.retain(|k| !newer.iter().any(|n| n.src == k.src && n.dst == k.dst));
    kept.extend(newer);
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
    /// Each NIC's verdict rests on every one of the `opened` flows: else
    /// [`report::Unjudged`], for the run titled `title`.
    fn require_all(&self, title: &str, opened: usize) -> Result<(), report::Unjudged> {
        if let Some(receiver) = &self.receiver {
            receiver.require_all(&format!("{title}: at the receiver's NIC"), opened)?;
        }
        if let Some(sender) = &self.sender {
            sender.require_all(&format!("{title}: at the sender's NIC"), opened)?;
        }
        Ok(())
    }

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
        "{} flows on {} queues, {} trials each, judged by the receive observer{first}",
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
/// Prints an experiment's `report` (`--json`, else its `table`) and
/// writes its figures into `--plot`'s directory with `plot`.
fn publish<R: Serialize>(
    args: &LabArgs,
    report: &R,
    table: impl FnOnce() -> String,
    plot: impl FnOnce(&std::path::Path) -> Result<Vec<std::path::PathBuf>, plot::PlotError>,
) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!("{}", table());
    }
    if let Some(dir) = &args.plot {
        let files = plot(dir)?;
        if !args.json {
            print_plots(&files);
        }
    }
    Ok(())
}

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
    fn numa_nics_takes_trials_a_duration_and_a_plot_and_nothing_of_the_veth_lab() {
        let numa = parse(&[
            "--experiment",
            "numa-nics",
            "--trials",
            "2",
            "--duration",
            "3",
            "--plot",
            "docs/throughput",
            "--json",
        ]);
        assert_eq!(numa.experiment, Some(Experiment::NumaNics));
        assert_eq!(numa.trials, Some(2));
        assert!(check_numa_args(&numa).is_ok());
        let mixed = parse(&["--experiment", "numa-nics", "--nic", "virtio", "--hold"]);
        let err = check_numa_args(&mixed).expect_err("a guest of its own");
        assert!(err.to_string().contains("leave out --nic, --hold"), "{err}");
        let none = parse(&["--experiment", "numa-nics", "--duration", "0"]);
        assert!(check_numa_args(&none).is_err());
    }

    #[test]
    fn follow_reader_takes_the_6_12_guest_a_period_and_json_only() {
        let base = ["--experiment", "follow-reader", "--guest-kernel", "6.12"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        let run = with(&["--duration", "3", "--json"]);
        assert_eq!(run.experiment, Some(Experiment::FollowReader));
        assert!(check_follow_reader_args(&run).is_ok());
        let old = parse(&["--experiment", "follow-reader"]);
        let err = check_follow_reader_args(&old).expect_err("6.1 by default");
        assert!(err.to_string().contains("--guest-kernel 6.12"), "{err}");
        for extra in [
            &["--trials", "2"][..],
            &["--plot", "docs/throughput"],
            &["--nic", "virtio"],
            &["--duration", "0"],
        ] {
            assert!(check_follow_reader_args(&with(extra)).is_err(), "{extra:?}");
        }
    }

    #[test]
    fn mptcp_takes_the_veth_labs_rates_and_connections_and_no_workload_of_its_own() {
        let run = parse(&[
            "--experiment",
            "mptcp",
            "--flows",
            "4",
            "--queue-rate",
            "50mbit",
            "--nic-rate",
            "200mbit",
            "--plot",
            "docs/throughput",
        ]);
        assert_eq!(run.experiment, Some(Experiment::Mptcp));
        assert!(check_mptcp_args(&run).is_ok());
        for extra in [
            &["--direction", "pull"][..],
            &["--nic", "virtio"],
            &["--observer", "off"],
            &["--workload", "iperf3 -c {server}"],
            &["--hold"],
        ] {
            let args: Vec<&str> = ["--experiment", "mptcp"]
                .iter()
                .chain(extra)
                .copied()
                .collect();
            let err = check_mptcp_args(&parse(&args)).expect_err("not the MPTCP lab's");
            assert!(err.to_string().contains(extra[0]), "{extra:?}: {err}");
        }
    }

    #[test]
    fn receiver_nics_takes_a_nic_rate_and_nothing_of_the_veth_lab() {
        let run = parse(&[
            "--experiment",
            "receiver-nics",
            "--nic-rate",
            "80mbit",
            "--trials",
            "4",
            "--plot",
            "docs/throughput",
        ]);
        assert_eq!(run.experiment, Some(Experiment::ReceiverNics));
        assert!(check_receiver_nics_args(&run).is_ok());
        let mixed = parse(&["--experiment", "receiver-nics", "--flows", "16"]);
        let err = check_receiver_nics_args(&mixed).expect_err("its own 16 streams");
        assert!(err.to_string().contains("leave out --flows"), "{err}");
        let numa = parse(&["--experiment", "numa-nics", "--nic-rate", "80mbit"]);
        assert!(
            check_numa_args(&numa).is_err(),
            "--nic-rate is receiver-nics'"
        );
        let bond = parse(&["--bond", "2", "--nic-rate", "80mbit"]);
        assert!(
            check_bond_args(&bond).is_err(),
            "--nic-rate is receiver-nics'"
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
            Some(LocalPlacement::LeastOccupied)
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
    fn observer_and_no_queue_rate_parse_and_go_with_the_experiments_that_take_them() {
        let off = parse(&[
            "--experiment",
            "throughput",
            "--observer",
            "off",
            "--queue-rate",
            "none",
        ]);
        assert_eq!(off.observer, Some(LabObserver::Off));
        assert_eq!(off.queue_rate, Some(QueueRate::Unlimited));
        assert!(check_observer(&off).is_ok());
        for (name, hooks) in [
            ("auto", Some(srap_daemon::observer::HookChoice::Auto)),
            ("tc", Some(srap_daemon::observer::HookChoice::Tc)),
            ("xdp", Some(srap_daemon::observer::HookChoice::Xdp)),
            ("sock", Some(srap_daemon::observer::HookChoice::Sock)),
            ("off", None),
        ] {
            let args = parse(&["--experiment", "throughput", "--observer", name]);
            assert_eq!(args.observer.and_then(LabObserver::hooks), hooks, "{name}");
        }
        assert_eq!(
            LabObserver::default().hooks(),
            Some(srap_daemon::observer::HookChoice::Auto)
        );
        let placement_off = parse(&["--experiment", "--observer", "off"]);
        let err = check_observer(&placement_off).expect_err("placement needs an observer");
        assert!(err.to_string().contains("--experiment throughput"), "{err}");
        assert!(check_observer(&parse(&["--experiment", "--observer", "sock"])).is_ok());
        let plain = parse(&["--observer", "tc"]);
        let err = check_observer(&plain).expect_err("the plain lab's observer is the agent's");
        assert!(err.to_string().contains("--experiment"), "{err}");
        assert!(Cli::try_parse_from(["lab", "--observer", "bogus"]).is_err());
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
