//! `srap-agent sender`: steer a cgroup's connections toward a receiver,
//! from a description file (`--rss`), a receiver agent (`--peer`), or this
//! host's own NIC (`--steer local`); and `--check`, which stops where a
//! start would first touch the host.

use std::path::Path;

use super::{refused, usage_error};
use anyhow::Context as _;
use srap_common::rss::{RssDescription, RssModel};
use srap_daemon::sender::{self, ends::PlacedEnds, local::nic::LocalNic, settings::SenderSettings};

/// Where a start gets the receivers' descriptions from, read and checked.
enum Plan {
    /// `--steer local`: this host's NIC only.
    LocalOnly,
    /// `--peer`, repeated: followed.
    Peers,
    /// `--rss FILE`: planned once with this model.
    File(Box<RssModel>),
}

/// The settings over `--config` and what they name that a start reads
/// before it sets anything up: everything a start refuses without having
/// touched the host is refused here. `psk_flag`: whether `--psk-file` was
/// a flag (the packaged sender.toml names a key: that one goes unused
/// with `--rss`, a flag beside it is a mistake).
fn plan(args: &SenderSettings, psk_flag: bool) -> anyhow::Result<Plan> {
    let (rss, peers) = (&args.source.rss, &args.source.peer);
    match (args.local.placed_ends(), rss, peers.is_empty()) {
        (PlacedEnds::Local, _, _) => Ok(Plan::LocalOnly),
        (_, None, false) => Ok(Plan::Peers),
        (_, Some(_), true) if psk_flag || !args.report_ports.is_empty() => {
            anyhow::bail!("--psk-file and --report-port go with --peer, not --rss")
        }
        (_, Some(rss), true) => Ok(Plan::File(Box::new(RssDescription::load(rss)?.1))),
        // `resolved` makes these unreachable; say so plainly anyway.
        _ => anyhow::bail!("give exactly one of --rss FILE and --peer HOST:PORT"),
    }
}

/// Sets up (or adopts) the binder, prints what it steers, then reports its
/// counters until Ctrl-C, SIGTERM or `srap-agent detach`. With `--peer` the
/// description comes from the receiver agent and is followed
/// ([`sender::follow`]); with `--rss`, or only this host's NIC planned, it
/// is planned once ([`sender::offline`]).
pub fn run(args: &SenderSettings, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let psk_flag = args.psk_file.is_some();
    let args = &match args.resolved() {
        Ok(args) => args,
        Err(err) => usage_error(&err),
    };
    let plan = plan(args, psk_flag)?;
    let local = LocalNic::load(&args.local).context("describing this host's NIC")?;
    let object = srap_daemon::ebpf_object();
    match plan {
        Plan::LocalOnly => runtime.block_on(sender::offline::run(args, None, local, object)),
        Plan::Peers => {
            runtime.block_on(sender::follow::run(args, &args.source.peer, local, object))
        }
        Plan::File(model) => {
            runtime.block_on(sender::offline::run(args, Some(&model), local, object))
        }
    }
}

/// `--check`: what [`run`] reads and refuses before it touches the host,
/// then the settings it would run with on stdout. Any refusal is exit
/// status 2 (every one is the settings' to fix). This host's NIC is read
/// only from a file (`--local-rss`): discovering it would ask the kernel.
pub fn check(args: &SenderSettings) -> anyhow::Result<()> {
    let psk_flag = args.psk_file.is_some();
    let args = args.resolved().unwrap_or_else(refused);
    let plan = plan(&args, psk_flag).unwrap_or_else(refused);
    let sizes = args.sizes.sizes().unwrap_or_else(refused);
    if args.local.placed_ends().local() && args.local.local_ifaces.is_empty() {
        LocalNic::load(&args.local)
            .context("describing this host's NIC")
            .unwrap_or_else(refused);
    }
    println!("srap-agent sender --check: a start would accept these settings (nothing was set up)");
    let mut rows = [
        source_rows(&args, &plan),
        steering_rows(&args),
        agent_rows(&args),
    ]
    .concat();
    rows.push((
        "max-*",
        format!(
            "receivers {}, cpus {}, sockets {}, layouts {}",
            sizes.receivers, sizes.cpus, sizes.sockets, sizes.layouts
        ),
    ));
    print_rows(&rows);
    Ok(())
}

type Row = (&'static str, String);

/// Where the descriptions come from, and the keys.
fn source_rows(args: &SenderSettings, plan: &Plan) -> Vec<Row> {
    let mut rows = vec![("config", shown(args.config.as_deref()))];
    match plan {
        Plan::LocalOnly => rows.push(("steer", "local: this host's NIC only".into())),
        Plan::Peers => {
            rows.push(("peers", args.source.peer.join(", ")));
            for peer in &args.source.peer {
                rows.push((
                    "psk-file",
                    format!("{peer}: {}", shown(args.psk_file_for(peer))),
                ));
            }
            rows.push(("peer-wait", format!("{} s", args.peer_wait())));
        }
        Plan::File(model) => rows.push((
            "rss",
            format!(
                "{} ({} receiving CPUs), planned once",
                shown(args.source.rss.as_deref()),
                model.reachable_cpus().len()
            ),
        )),
    }
    rows
}

/// What is steered, and how.
fn steering_rows(args: &SenderSettings) -> Vec<Row> {
    let list = |items: Vec<String>, none: &str| {
        if items.is_empty() {
            none.to_owned()
        } else {
            items.join(", ")
        }
    };
    let strings = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>();
    let receivers = args.receivers.iter().map(ToString::to_string).collect();
    let local = &args.local;
    vec![
        ("receivers", list(receivers, "each peer's addresses")),
        (
            "ports",
            list(strings(&args.ports), "every destination port"),
        ),
        ("report-ports", list(strings(&args.report_ports), "none")),
        (
            "cgroup",
            args.cgroup
                .as_deref()
                .map_or("<cgroup2>/srap".into(), |c| c.display().to_string()),
        ),
        (
            "port-range",
            args.port_range
                .map_or("the kernel's ip_local_port_range".into(), |r| r.to_string()),
        ),
        (
            "pacing-rate",
            args.pacing_rate
                .map_or("none".into(), |r| format!("{} bit/s", r.0)),
        ),
        ("steer", local.placed_ends().to_string()),
        ("local-iface", list(local.local_ifaces.clone(), "none")),
        ("local-rss", shown(local.local_rss.as_deref())),
        ("local-nics", local.local_nics().to_string()),
        ("local-placement", local.local_placement().to_string()),
        ("bond-members", args.bond_members().to_string()),
        ("receiver-nics", args.receiver_nics().to_string()),
        ("mptcp", args.mptcp().to_string()),
    ]
}

/// Where the agent keeps its pins and serves its status.
fn agent_rows(args: &SenderSettings) -> Vec<Row> {
    vec![
        ("pin-dir", args.pin_dir().display().to_string()),
        ("control", args.control().display().to_string()),
        (
            "metrics",
            args.metrics
                .map_or("not served".into(), |m| format!("http://{m}/metrics")),
        ),
        ("interval", format!("{} s", args.interval())),
        (
            "once",
            if args.once {
                "set up and exit".into()
            } else {
                "run until stopped".into()
            },
        ),
    ]
}

fn shown(path: Option<&Path>) -> String {
    path.map_or("none".into(), |p| p.display().to_string())
}

/// `  key  value` lines, the keys named as the flags.
pub fn print_rows(rows: &[Row]) {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in rows {
        println!("  {key:<width$}  {value}");
    }
}
