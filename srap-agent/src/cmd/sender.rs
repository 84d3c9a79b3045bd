//! `srap-agent sender`: steer a cgroup's connections toward a receiver,
//! from a description file (`--rss`) or a receiver agent (`--peer`).

use std::time::Duration;

use super::usage_error;
use anyhow::Context as _;
use srap_common::{rss::RssDescription, steering::SteeringError};
use srap_daemon::sender::{self, RunningBinder, args::SenderArgs};

/// Sets up (or adopts) the binder, prints what it steers, then reports its
/// counters until Ctrl-C, SIGTERM or `srap-agent detach`. With `--peer` the
/// description comes from the receiver agent and is followed
/// ([`sender::follow`]).
pub fn run(args: &SenderArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    // The packaged sender.toml names a key: that one goes unused with
    // --rss, a --psk-file flag beside it is a mistake.
    let psk_flag = args.psk_file.is_some();
    let args = &match args.resolved() {
        Ok(args) => args,
        Err(err) => usage_error(&err),
    };
    let (rss, peers) = (&args.source.rss, &args.source.peer);
    let rss = match (rss, peers.is_empty()) {
        (None, false) => {
            return runtime.block_on(sender::follow::run(args, peers, srap_daemon::ebpf_object()));
        }
        (Some(_), true) if psk_flag || !args.report_ports.is_empty() => {
            anyhow::bail!("--psk-file and --report-port go with --peer, not --rss")
        }
        (Some(rss), true) => rss,
        // clap's group makes these unreachable; say so plainly anyway.
        _ => anyhow::bail!("give exactly one of --rss FILE and --peer HOST:PORT"),
    };
    let (_, model) = RssDescription::load(rss)?;
    let options = sender::follow::options(args, sender::Target::all(&model, &args.receivers));
    let mut steering = sender::start(&options, srap_daemon::ebpf_object())
        .map_err(with_flag_hint)
        .context("setting up the port binder")?;
    // No receiver agent grants CPUs here: every slot is this sender's (a
    // grant pinned by an earlier `--peer` run would otherwise stay).
    sender::grant::apply(&mut steering.ebpf, &steering.plan, None)
        .context("clearing the receiver grant")?;
    println!("{}", sender::summary::describe(&steering));
    if args.once {
        return Ok(());
    }
    runtime.block_on(report_until_stopped(
        &mut steering,
        &options,
        Duration::from_secs(args.interval().max(1)),
    ))
}

/// Logs the binder's counters every `interval` and follows the host's
/// addresses, until a signal or `srap-agent detach`.
async fn report_until_stopped(
    steering: &mut RunningBinder,
    options: &sender::SenderOptions,
    interval: Duration,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    let mut watch = sender::watch::CounterWatch::new(steering);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                if !watch.tick(steering) {
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

/// Names the flag that fixes an error the library can only describe.
fn with_flag_hint(err: sender::SenderError) -> anyhow::Error {
    let needs_port = matches!(
        &err,
        sender::SenderError::Steering {
            source: SteeringError::NeedsPort { .. },
            ..
        }
    );
    if needs_port {
        anyhow::Error::new(err).context("give --port for each destination port the workload uses")
    } else {
        err.into()
    }
}
