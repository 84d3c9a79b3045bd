//! `srap-readers`: reading threads pinned to CPUs, each downloading (or,
//! with `--send`, uploading) over its own connection, then saying where
//! the kernel processed what it received — `SO_INCOMING_CPU` and
//! `SO_INCOMING_NAPI_ID` beside the thread's own CPU — as one JSON line per
//! flow. The lab runs it in its QEMU guest (`srap-lab --nic virtio
//! --direction pull --local-placement reader`) and in the veth lab's sender
//! namespace (`srap-lab --direction pull|both --local-placement reader`);
//! the logic is [`srap_harness::readers`].
use std::{net::SocketAddr, process::ExitCode};

use anyhow::Context as _;
use clap::Parser;
use srap_harness::readers::{self, Transfer};

/// Threads pinned to --cpus (round-robin, --threads of them), each
/// downloading from SERVER over its own connection, or with --send
/// uploading to it; prints one JSON line per flow (cpu, ran_on, position,
/// port, incoming_cpu, napi_id, bytes).
#[derive(Parser, Debug)]
#[command(name = "srap-readers", version)]
struct Cli {
    /// The server to download from (it writes, then closes), or with
    /// --send to upload to (it reads until the thread closes).
    #[arg(long, value_name = "IP:PORT")]
    connect: SocketAddr,
    /// The CPUs the threads are pinned to (`0,1,2,3` or `0-3`).
    #[arg(long)]
    cpus: String,
    /// Threads, a multiple of the CPUs: thread i on the i-th CPU modulo
    /// their number. Default: one per CPU.
    #[arg(long)]
    threads: Option<usize>,
    /// The order the threads connect in, one at a time, as their CPUs (a
    /// CPU as often as it has threads); no thread may connect at a
    /// position whose rank modulo the CPUs is its CPU's rank among --cpus
    /// (a placement handing out CPUs in connect order would look right).
    /// Default: the upper half interleaved with the lower (`2,0,3,1` for
    /// `0-3`), once per round of threads.
    #[arg(long)]
    order: Option<String>,
    /// Each thread writes for --seconds, then reads `SO_INCOMING_CPU`: the
    /// CPU that processed its last ACK.
    #[arg(long)]
    send: bool,
    /// Each thread reads until the server closes or this many seconds have
    /// passed since its connect (with --send: writes this long).
    #[arg(long, default_value_t = 4)]
    seconds: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    srap_host::report::exit_code("srap-readers", run(&cli))
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let cpus = readers::parse_cpus(&cli.cpus)?;
    let threads = cli.threads.unwrap_or(cpus.len());
    let order = match &cli.order {
        Some(order) => readers::parse_order(order)?,
        None => readers::default_order_for(&cpus, threads).context("--threads")?,
    };
    if order.len() != threads {
        anyhow::bail!(
            "--order names {} threads, --threads is {threads}",
            order.len()
        );
    }
    readers::check_order(&cpus, &order)?;
    let transfer = if cli.send {
        Transfer::Upload
    } else {
        Transfer::Download
    };
    for report in readers::run_readers(cli.connect, &order, cli.seconds, transfer)? {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}
