//! `srap-readers`: reading threads pinned to CPUs, each downloading (or,
//! with `--send`, uploading) over its own connection, then saying where
//! the kernel processed what it received — `SO_INCOMING_CPU` and
//! `SO_INCOMING_NAPI_ID` beside the thread's own CPU — as one JSON line per
//! flow. The lab runs it in its QEMU guest (`srap-lab --nic virtio
//! --direction pull --local-placement reader`) and in the veth lab's sender
//! namespace (`srap-lab --direction pull|both --local-placement reader`);
//! the logic is [`srap_harness::readers`].
//!
//! With `--mptcp` it runs MPTCP connections instead whose reading threads
//! move between NUMA nodes every `--move-every` seconds, in anti-phase, and
//! prints one JSON line per connection with the kernel's per-subflow byte
//! counts sampled as they read ([`srap_harness::moving_readers`]).
//! `--respond BYTES --request BYTES` makes those threads a request/response
//! server (each request read whole is answered), the server of
//! `srap-lab --experiment follow-reader`.
use std::{net::SocketAddr, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{ArgGroup, Parser};
use srap_harness::{
    moving_readers::{self, Exchange, MoveSpec},
    readers::{self, Transfer},
};

/// Threads pinned to --cpus (round-robin, --threads of them), each
/// downloading from SERVER over its own connection, or with --send
/// uploading to it; prints one JSON line per flow (cpu, ran_on, position,
/// port, incoming_cpu, napi_id, bytes).
///
/// With --mptcp: --connections MPTCP connections (to --connect, or
/// accepted on --listen), each read by a thread that moves between the
/// --nodes every --move-every seconds; one JSON line per connection.
#[derive(Parser, Debug)]
#[command(name = "srap-readers", version)]
#[command(group(ArgGroup::new("peer").required(true).args(["connect", "listen"])))]
struct Cli {
    /// The server to download from (it writes, then closes), or with
    /// --send to upload to (it reads until the thread closes).
    #[arg(long, value_name = "IP:PORT")]
    connect: Option<SocketAddr>,
    /// With --mptcp: listen here and read the connections accepted.
    #[arg(long, value_name = "IP:PORT", requires = "mptcp")]
    listen: Option<SocketAddr>,
    /// The CPUs the threads are pinned to (`0,1,2,3` or `0-3`).
    #[arg(long, required_unless_present = "mptcp", conflicts_with = "mptcp")]
    cpus: Option<String>,
    /// Threads, a multiple of the CPUs: thread i on the i-th CPU modulo
    /// their number. Default: one per CPU.
    #[arg(long, conflicts_with = "mptcp")]
    threads: Option<usize>,
    /// The order the threads connect in, one at a time, as their CPUs (a
    /// CPU as often as it has threads); no thread may connect at a
    /// position whose rank modulo the CPUs is its CPU's rank among --cpus
    /// (a placement handing out CPUs in connect order would look right).
    /// Default: the upper half interleaved with the lower (`2,0,3,1` for
    /// `0-3`), once per round of threads.
    #[arg(long, conflicts_with = "mptcp")]
    order: Option<String>,
    /// Each thread writes for --seconds, then reads `SO_INCOMING_CPU`: the
    /// CPU that processed its last ACK.
    #[arg(long, conflicts_with = "mptcp")]
    send: bool,
    /// Each thread reads until the server closes or this many seconds have
    /// passed since its connect (with --send: writes this long).
    /// (With --mptcp: the total reading time from the common start.)
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// MPTCP connections with moving readers (see --move-every, --nodes,
    /// --connections).
    #[arg(long, requires_all = ["move_every", "nodes", "connections"])]
    mptcp: bool,
    /// With --mptcp: the seconds between moves (fractions allowed).
    #[arg(long, value_name = "SECS", requires = "mptcp")]
    move_every: Option<f64>,
    /// With --mptcp: each NUMA node's CPUs, nodes split by `;` (`0,1;2,3`).
    #[arg(long, requires = "mptcp")]
    nodes: Option<String>,
    /// With --mptcp: how many connections, one moving thread each.
    #[arg(long, requires = "mptcp")]
    connections: Option<usize>,
    /// With --mptcp: milliseconds between samples of the subflow counters.
    #[arg(long, default_value_t = 100, requires = "mptcp")]
    sample_ms: u64,
    /// With --mptcp: serve as a request/response server does: after each
    /// --request bytes read, write this many bytes back (a closed-loop
    /// client measures the round trips). Default: only read.
    #[arg(long, value_name = "BYTES", requires_all = ["mptcp", "request"])]
    respond: Option<usize>,
    /// With --respond: the size of each request, in bytes.
    #[arg(long, value_name = "BYTES", requires = "respond")]
    request: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    srap_host::report::exit_code("srap-readers", run(&cli))
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    if cli.mptcp {
        return run_mptcp(cli);
    }
    let server = cli.connect.context("--connect")?;
    let cpus = readers::parse_cpus(cli.cpus.as_deref().context("--cpus")?)?;
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
    for report in readers::run_readers(server, &order, cli.seconds, transfer)? {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

/// `--mptcp`: the moving readers, connecting or accepting; fails (after
/// printing every report) if any connection did.
fn run_mptcp(cli: &Cli) -> anyhow::Result<()> {
    let spec = move_spec(cli)?;
    let reports = match (cli.connect, cli.listen) {
        (Some(server), None) => moving_readers::run_connecting(server, &spec)?,
        (None, Some(listen)) => moving_readers::run_accepting(listen, &spec)?,
        _ => anyhow::bail!("give exactly one of --connect and --listen"),
    };
    for report in &reports {
        println!("{}", serde_json::to_string(report)?);
    }
    let failed: Vec<String> = reports
        .iter()
        .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.index)))
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} connections failed ({})",
            failed.len(),
            reports.len(),
            failed.join("; ")
        );
    }
    Ok(())
}

/// The moving readers' spec from the --mptcp flags.
fn move_spec(cli: &Cli) -> anyhow::Result<MoveSpec> {
    let every = cli.move_every.context("--move-every")?;
    let period = Duration::try_from_secs_f64(every)
        .ok()
        .filter(|p| !p.is_zero())
        .with_context(|| format!("--move-every {every}: a positive number of seconds"))?;
    let spec = MoveSpec {
        nodes: moving_readers::parse_nodes(cli.nodes.as_deref().context("--nodes")?)
            .context("--nodes")?,
        connections: cli.connections.context("--connections")?,
        period,
        seconds: cli.seconds,
        sample: Duration::from_millis(cli.sample_ms),
        exchange: cli
            .respond
            .zip(cli.request)
            .map(|(response, request)| Exchange { request, response }),
    };
    spec.check()?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("srap-readers").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_pinned_mode_keeps_its_flags() {
        let cli = parse(&["--connect", "10.0.0.1:5201", "--cpus", "0-3"]).unwrap();
        assert!(!cli.mptcp);
        assert!(parse(&["--cpus", "0-3"]).is_err(), "no --connect");
        assert!(parse(&["--connect", "10.0.0.1:5201"]).is_err(), "no --cpus");
        assert!(
            parse(&["--listen", "0.0.0.0:5201", "--cpus", "0"]).is_err(),
            "--listen alone"
        );
    }

    #[test]
    fn the_mptcp_mode_takes_one_peer_and_its_spec() {
        let mptcp = [
            "--mptcp",
            "--move-every",
            "2.5",
            "--nodes",
            "0,1;2,3",
            "--connections",
            "4",
        ];
        let with = |peer: &[&str]| parse(&[&mptcp[..], peer].concat());
        let cli = with(&["--listen", "0.0.0.0:5201"]).unwrap();
        let spec = move_spec(&cli).unwrap();
        assert_eq!(spec.period, Duration::from_millis(2500));
        assert_eq!(spec.nodes, [vec![0, 1], vec![2, 3]]);
        assert_eq!(
            (spec.connections, spec.sample),
            (4, Duration::from_millis(100))
        );
        assert!(with(&["--connect", "10.0.0.1:5201"]).is_ok());
        assert!(with(&[]).is_err(), "no peer");
        let both = ["--connect", "10.0.0.1:5201", "--listen", "0.0.0.0:5201"];
        assert!(with(&both).is_err());
        assert!(with(&["--connect", "10.0.0.1:5201", "--cpus", "0"]).is_err());
        assert!(
            parse(&["--mptcp", "--connect", "10.0.0.1:5201"]).is_err(),
            "no spec"
        );
        let zero = parse(&[
            "--mptcp",
            "--move-every",
            "0",
            "--nodes",
            "0",
            "--connections",
            "1",
            "--connect",
            "10.0.0.1:5201",
        ])
        .unwrap();
        assert!(move_spec(&zero).is_err());
    }

    #[test]
    fn the_mptcp_server_answers_requests_only_when_told_both_sizes() {
        let base = [
            "--mptcp",
            "--move-every",
            "3",
            "--nodes",
            "0;1",
            "--connections",
            "2",
            "--listen",
            "0.0.0.0:5201",
        ];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        assert_eq!(move_spec(&with(&[]).unwrap()).unwrap().exchange, None);
        let cli = with(&["--respond", "64", "--request", "16384"]).unwrap();
        let exchange = move_spec(&cli).unwrap().exchange;
        assert_eq!(
            exchange,
            Some(Exchange {
                request: 16384,
                response: 64
            })
        );
        assert!(with(&["--respond", "64"]).is_err(), "no request size");
        assert!(with(&["--request", "64"]).is_err(), "no response size");
        let empty = with(&["--respond", "0", "--request", "1"]).unwrap();
        assert!(move_spec(&empty).is_err());
    }
}
