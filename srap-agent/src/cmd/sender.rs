//! `srap-agent sender`: steer a cgroup's connections toward a receiver,
//! from a description file (`--rss`), a receiver agent (`--peer`), or this
//! host's own NIC (`--steer local`).

use super::usage_error;
use anyhow::Context as _;
use srap_common::rss::RssDescription;
use srap_daemon::sender::{self, ends::PlacedEnds, local::nic::LocalNic, settings::SenderSettings};

/// Sets up (or adopts) the binder, prints what it steers, then reports its
/// counters until Ctrl-C, SIGTERM or `srap-agent detach`. With `--peer` the
/// description comes from the receiver agent and is followed
/// ([`sender::follow`]); with `--rss`, or only this host's NIC planned, it
/// is planned once ([`sender::offline`]).
pub fn run(args: &SenderSettings, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    // The packaged sender.toml names a key: that one goes unused with
    // --rss, a --psk-file flag beside it is a mistake.
    let psk_flag = args.psk_file.is_some();
    let args = &match args.resolved() {
        Ok(args) => args,
        Err(err) => usage_error(&err),
    };
    let local = LocalNic::load(&args.local).context("describing this host's NIC")?;
    let object = srap_daemon::ebpf_object();
    let (rss, peers) = (&args.source.rss, &args.source.peer);
    match (args.local.placed_ends(), rss, peers.is_empty()) {
        (PlacedEnds::Local, _, _) => {
            runtime.block_on(sender::offline::run(args, None, local, object))
        }
        (_, None, false) => runtime.block_on(sender::follow::run(args, peers, local, object)),
        (_, Some(_), true) if psk_flag || !args.report_ports.is_empty() => {
            anyhow::bail!("--psk-file and --report-port go with --peer, not --rss")
        }
        (_, Some(rss), true) => {
            let (_, model) = RssDescription::load(rss)?;
            runtime.block_on(sender::offline::run(args, Some(&model), local, object))
        }
        // `resolved` makes these unreachable; say so plainly anyway.
        _ => anyhow::bail!("give exactly one of --rss FILE and --peer HOST:PORT"),
    }
}
