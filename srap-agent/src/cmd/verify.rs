//! `srap-agent verify`: attach the receive observer and print where each
//! TCP flow lands.

use std::time::Duration;

use anyhow::Context as _;
use srap_daemon::observer::{FlowRecord, HookChoice, Observer};

/// Prints the flow table every second until Ctrl-C or `duration`; detaching
/// happens when the observer is dropped on the way out.
pub async fn run(
    iface: &str,
    hook: HookChoice,
    cgroup: Option<&std::path::Path>,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let observer = Observer::attach_in(iface, hook, cgroup)
        .with_context(|| format!("attaching the receive observer to {iface}"))?;
    println!(
        "observer on {iface} via {}; Ctrl-C to stop",
        observer.hook()
    );
    let deadline = duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                print_flows(&observer.flows().context("reading the flow map")?);
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
