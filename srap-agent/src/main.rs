//! `srap-agent`: the SRAP daemon. For now it runs the receive verifier.
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use srap_agent::verifier::{FlowRecord, HookChoice, Verifier};
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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum HookArg {
    /// Native XDP, then tc ingress, then generic XDP.
    Auto,
    /// XDP only (driver, then generic).
    Xdp,
    /// tc ingress only.
    Tc,
}

impl From<HookArg> for HookChoice {
    fn from(arg: HookArg) -> Self {
        match arg {
            HookArg::Auto => Self::Auto,
            HookArg::Xdp => Self::Xdp,
            HookArg::Tc => Self::Tc,
        }
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
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
    }
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
