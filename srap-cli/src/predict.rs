//! `srap predict`: the source ports SRAP would give N flows, and where each lands.

use std::{net::IpAddr, net::SocketAddr, path::PathBuf};

use serde::Serialize;
use srap_common::{
    planner::{FlowPlan, plan},
    port_range::PortRange,
    rss::FlowTuple,
};

use crate::rss_file;

#[derive(clap::Args)]
pub struct Args {
    /// Receiver RSS description (JSON); the embedded 32-queue receiver if absent.
    #[arg(long)]
    rss: Option<PathBuf>,
    /// Sender address the flows leave from.
    #[arg(long)]
    src: IpAddr,
    /// Receiver address and port the flows go to; IPv6 as [addr]:port.
    #[arg(long)]
    dst: SocketAddr,
    /// Number of parallel flows.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65535))]
    flows: u32,
    /// Source ports SRAP may use.
    #[arg(long, default_value_t = PortRange::DEFAULT)]
    port_range: PortRange,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JsonFlow {
    port: u16,
    hash: String,
    index: u32,
    queue: u32,
    cpu: u32,
}

#[derive(Serialize)]
struct JsonPlan {
    flows: Vec<JsonFlow>,
    distinct_cpus: usize,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let model = rss_file::load(args.rss.as_deref())?;
    let template = FlowTuple::new(args.src, 0, args.dst.ip(), args.dst.port())?;
    let plan = plan(&model, &template, args.flows as usize, args.port_range)?;
    if args.json {
        println!("{}", serde_json::to_string(&to_json(&plan))?);
        return Ok(());
    }
    println!("{}", rss_file::summary(&model));
    println!(
        "flows {} -> {}, source ports {}",
        args.src, args.dst, args.port_range
    );
    println!();
    println!(
        "{:>4}  {:>5}  {:>10}  {:>5}  {:>5}  {:>4}",
        "flow", "port", "hash", "index", "queue", "cpu"
    );
    for (i, flow) in plan.flows.iter().enumerate() {
        let l = flow.landing;
        println!(
            "{i:>4}  {:>5}  0x{:08x}  {:>5}  {:>5}  {:>4}",
            flow.port, l.hash, l.index, l.queue, l.cpu
        );
    }
    println!();
    println!(
        "{} flows on {} distinct CPUs (busiest CPU: {} flows)",
        plan.flows.len(),
        plan.distinct_cpus(),
        plan.cpu_loads().values().max().copied().unwrap_or(0)
    );
    Ok(())
}

fn to_json(plan: &FlowPlan) -> JsonPlan {
    JsonPlan {
        flows: plan
            .flows
            .iter()
            .map(|f| JsonFlow {
                port: f.port,
                hash: format!("0x{:08x}", f.landing.hash),
                index: f.landing.index,
                queue: f.landing.queue,
                cpu: f.landing.cpu,
            })
            .collect(),
        distinct_cpus: plan.distinct_cpus(),
    }
}
