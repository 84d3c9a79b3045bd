//! `srap-readers`: one reading thread pinned per CPU, each downloading over
//! its own connection, then saying where its data was processed — the
//! kernel's `SO_INCOMING_CPU` and `SO_INCOMING_NAPI_ID` beside the thread's
//! own CPU — as one JSON line per flow. The lab copies it into its QEMU
//! guest (`srap-lab --nic virtio --direction pull --local-placement
//! reader`); the logic is [`srap_lab::readers`].
use std::{net::SocketAddr, process::ExitCode};

use clap::Parser;
use srap_lab::readers;

/// One pinned reading thread per CPU, each downloading from SERVER over its
/// own connection; prints one JSON line per flow (cpu, ran_on, position,
/// port, incoming_cpu, napi_id, bytes).
#[derive(Parser, Debug)]
#[command(name = "srap-readers", version)]
struct Cli {
    /// The server to download from (it writes, then closes).
    #[arg(long, value_name = "IP:PORT")]
    connect: SocketAddr,
    /// The CPUs, one reading thread each (`0,1,2,3` or `0-3`).
    #[arg(long)]
    cpus: String,
    /// The order the threads connect in, one at a time, as CPUs; no thread
    /// may connect at its CPU's rank among --cpus (a placement handing out
    /// CPUs in connect order would look right). Default: the upper half
    /// interleaved with the lower (`2,0,3,1` for `0-3`).
    #[arg(long)]
    order: Option<String>,
    /// Each thread reads until the server closes or this many seconds have
    /// passed since its connect.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    srap_host::report::exit_code("srap-readers", run(&cli))
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let cpus = readers::parse_cpus(&cli.cpus)?;
    let order = match &cli.order {
        Some(order) => readers::parse_cpus(order)?,
        None => readers::default_order(&cpus),
    };
    readers::check_order(&cpus, &order)?;
    for report in readers::run_readers(cli.connect, &order, cli.seconds)? {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}
