//! `srap-agent`: the SRAP daemon: the receive verifier and the sender-side
//! port binder.
use std::{io::IsTerminal as _, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use srap_common::rss::RssModel;
use srap_daemon::{
    receiver::args::HookArg,
    sender::{
        self, Steering,
        args::{DetachArgs, SenderArgs},
    },
    verifier::{FlowRecord, HookChoice, Verifier},
};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(name = "srap-agent", version, about = "SRAP agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach the receive verifier to an interface and print, every second,
    /// which receive queue and CPU each TCP flow lands on.
    Verify {
        /// Receiving interface.
        #[arg(long)]
        iface: String,
        /// Hook to attach to.
        #[arg(long, value_enum, default_value_t = HookArg::Auto)]
        hook: HookArg,
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long)]
        duration: Option<u64>,
    },
    /// Steer the connections of workloads in a cgroup (`srap exec`) so each
    /// lands on its own receiver CPU: fills the binder's maps, reserves its
    /// ports, attaches and pins it, then reports its counters until stopped
    /// (steering goes on after the agent exits).
    Sender(SenderArgs),
    /// Remove everything `srap-agent sender` attached, pinned or reserved.
    Detach(DetachArgs),
    /// SRAP on one machine: two namespaces joined by a veth that emulates a
    /// 32-queue RSS NIC, a workload with kernel ports and with SRAP's.
    Lab(srap_lab::LabArgs),
    /// Serve this host's RSS description to sender agents (`sender --peer`)
    /// and push every change to them.
    Receiver(srap_daemon::receiver::args::ReceiverArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Verify {
            iface,
            hook,
            duration,
        } => runtime.block_on(verify(
            &iface,
            hook.into(),
            duration.map(Duration::from_secs),
        )),
        Command::Sender(args) => run_sender(&args, &runtime),
        Command::Detach(args) => run_detach(&args),
        Command::Lab(args) => srap_lab::run(&args),
        Command::Receiver(args) => runtime.block_on(srap_daemon::receiver::command::run(&args)),
    }
}

/// Sets up (or adopts) the binder, prints what it steers, then reports its
/// counters until Ctrl-C, SIGTERM or `srap-agent detach`. With `--peer` the
/// description comes from the receiver agent and is followed
/// ([`sender::follow`]).
fn run_sender(args: &SenderArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let (rss, peer) = (&args.source.rss, &args.source.peer);
    let rss = match (rss, peer) {
        (None, Some(peer)) => {
            return runtime.block_on(sender::follow::run(args, peer, srap_daemon::ebpf_object()));
        }
        (Some(_), None) if args.psk_file.is_some() || !args.report_ports.is_empty() => {
            anyhow::bail!("--psk-file and --report-port go with --peer, not --rss")
        }
        (Some(rss), None) => rss,
        // clap's group makes these unreachable; say so plainly anyway.
        _ => anyhow::bail!("give exactly one of --rss FILE and --peer HOST:PORT"),
    };
    let text = std::fs::read_to_string(rss)
        .with_context(|| format!("reading the RSS description {}", rss.display()))?;
    let model =
        RssModel::from_json(&text).with_context(|| format!("RSS description {}", rss.display()))?;
    let options = sender::follow::options(args, model, args.receivers.clone());
    let mut steering = sender::start(&options, srap_daemon::ebpf_object())
        .context("setting up the port binder")?;
    println!("{}", sender::summary::describe(&steering));
    if args.once {
        return Ok(());
    }
    runtime.block_on(report_until_stopped(
        &mut steering,
        &options,
        Duration::from_secs(args.interval.max(1)),
    ))
}

/// Logs the binder's counters every `interval` and follows the host's
/// addresses, until a signal or `srap-agent detach`.
async fn report_until_stopped(
    steering: &mut Steering,
    options: &sender::SenderOptions,
    interval: Duration,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                if !sender::summary::log_counters(&steering.layout) {
                    return Ok(());
                }
                sender::replan_if_sources_changed(steering, options);
            }
        }
    }
    tracing::info!(
        "stopping; steering continues (`srap-agent detach --pin-dir {}` removes it)",
        steering.layout.dir().display()
    );
    Ok(())
}

fn run_detach(args: &DetachArgs) -> anyhow::Result<()> {
    let report = sender::detach(&args.pin_dir).with_context(|| {
        format!(
            "detaching the binder pinned under {}",
            args.pin_dir.display()
        )
    })?;
    println!(
        "removed {} pins under {}; unreserved {} ports",
        report.pins_removed,
        args.pin_dir.display(),
        report.ports_unreserved
    );
    if let Some(cgroup) = &report.cgroup_removed {
        println!("removed cgroup {}", cgroup.display());
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    Ok(())
}

/// Prints the flow table every second until Ctrl-C or `duration`; detaching
/// happens when the verifier is dropped on the way out.
async fn verify(iface: &str, hook: HookChoice, duration: Option<Duration>) -> anyhow::Result<()> {
    let verifier = Verifier::attach(iface, hook)
        .with_context(|| format!("attaching the receive verifier to {iface}"))?;
    println!(
        "verifier on {iface} via {}; Ctrl-C to stop",
        verifier.hook()
    );
    let deadline = duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                print_flows(&verifier.flows().context("reading the flow map")?);
                if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    break;
                }
            }
        }
    }
    Ok(())
}

fn print_flows(flows: &[FlowRecord]) {
    println!(
        "{:<46} {:<46} {:>5} {:>4} {:>10} {:>14} {:>6}",
        "source", "destination", "queue", "cpu", "packets", "bytes", "moves"
    );
    for flow in flows {
        let queue = flow
            .stats
            .rx_queue()
            .map_or_else(|| "?".to_owned(), |q| q.to_string());
        println!(
            "{:<46} {:<46} {:>5} {:>4} {:>10} {:>14} {:>6}",
            flow.src.to_string(),
            flow.dst.to_string(),
            queue,
            flow.stats.cpu,
            flow.stats.packets,
            flow.stats.bytes,
            flow.stats.moves
        );
    }
    println!("{} flow(s)", flows.len());
}
