//! `srap-agent receiver` end to end: read the PSK, start the description
//! watcher and the server, the observer's status loop, the control socket
//! and `/metrics`; run until Ctrl-C or SIGTERM.

use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use srap_daemon::{
    psk::Keys,
    receiver::{
        AllowList, LearnedKey, Offer, Server, ServerConfig, Source, Timeouts,
        access::{Exposure, exposure},
        grants,
        monitor::{self, Monitor},
        nics::{NicSet, Verify},
        source,
    },
};
use srap_status::{ControlSocket, DEFAULT_CONTROL_PATH, control, metrics};

use srap_common::rss::RssDescription;

use crate::args::receiver::ReceiverArgs;

/// How often the description is re-read: a file is cheap to re-read; a
/// discovery is a few netlink and /proc reads. Both within the 1 s promise.
const FILE_POLL: Duration = Duration::from_millis(500);
const IFACE_POLL: Duration = Duration::from_secs(1);
/// How often the observer's flows are sampled into the status.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the NICs and listening sockets are read again: a listener
/// that comes or goes reaches senders within a second.
const NICS_POLL: Duration = Duration::from_millis(250);

/// What a start reads and refuses before it binds or attaches anything.
struct Checked<'a> {
    keys: Keys,
    allow: AllowList,
    exposure: Exposure,
    first: &'a str,
}

/// The key files, the listen's exposure and the `--iface`/`--rss` pairing,
/// as a start checks them. An exposure refused is a usage error (exit 2)
/// here already: no key or allow-list is for the settings to fix.
fn checked(args: &ReceiverArgs) -> anyhow::Result<Checked<'_>> {
    let keys = Keys::read(&args.psk_file)?;
    let allow = AllowList::new(args.allow.clone());
    let exposure = exposure(args.listen, !keys.is_empty(), &allow, args.open)
        .unwrap_or_else(|err| super::usage_error(&err.into()));
    let first = first_iface(&args.iface)?;
    if args.rss.len() > args.iface.len() {
        anyhow::bail!(
            "{} --rss files for {} --iface: each names the description of the --iface in its place",
            args.rss.len(),
            args.iface.len()
        );
    }
    Ok(Checked {
        keys,
        allow,
        exposure,
        first,
    })
}

/// `--check`: what [`run`] reads and refuses before it binds or attaches
/// anything, each `--rss` file loaded as its watcher would, then what it
/// would serve on stdout. Any refusal is exit status 2. An `--iface`
/// without `--rss` is not discovered: that would ask the kernel.
pub fn check(args: &ReceiverArgs) -> anyhow::Result<()> {
    let checked = checked(args).unwrap_or_else(super::refused);
    let guard = match checked.exposure {
        Exposure::Loopback => "loopback: this host's processes only",
        Exposure::Guarded => "guarded by the key or the allow-list",
        Exposure::Open => "open to any address (--open)",
    };
    let mut rows = vec![("listen", format!("{} ({guard})", args.listen))];
    for (at, iface) in args.iface.iter().enumerate() {
        let described = match args.rss.get(at) {
            Some(path) => {
                let (_, model) = RssDescription::load(path).unwrap_or_else(super::refused);
                let cpus = model.reachable_cpus().len();
                format!("described by {} ({cpus} receiving CPUs)", path.display())
            }
            None => "its RSS discovered at start".to_owned(),
        };
        rows.push(("iface", format!("{iface}: {described}")));
    }
    rows.extend(access_rows(args, &checked));
    println!(
        "srap-agent receiver --check: a start would accept these settings (nothing was bound \
         or attached)"
    );
    super::sender::print_rows(&rows);
    Ok(())
}

/// Who may connect, and what the agent attaches and serves.
fn access_rows(args: &ReceiverArgs, checked: &Checked<'_>) -> Vec<(&'static str, String)> {
    let paths = args.psk_file.iter().map(|p| p.display().to_string());
    let nets = args.allow.iter().map(ToString::to_string);
    let or_none = |items: Vec<String>, none: &str| {
        if items.is_empty() {
            none.to_owned()
        } else {
            items.join(", ")
        }
    };
    let observer = if args.no_verify {
        "not attached (--no-verify)".to_owned()
    } else {
        format!("hook {}", srap_daemon::setting::word(&args.hook))
    };
    vec![
        ("psk-file", or_none(paths.collect(), "none")),
        ("key ids", checked.keys.to_string()),
        ("allow", or_none(nets.collect(), "any address")),
        ("max-peers", args.max_peers.to_string()),
        (
            "cpus",
            args.cpus
                .as_ref()
                .map_or("every CPU a receive queue reaches".into(), |c| {
                    srap_host::cpulist::format(c.iter().copied())
                }),
        ),
        ("observer", observer),
        (
            "control",
            args.control
                .as_deref()
                .unwrap_or(std::path::Path::new(DEFAULT_CONTROL_PATH))
                .display()
                .to_string(),
        ),
        (
            "metrics",
            args.metrics
                .map_or("not served".into(), |m| format!("http://{m}/metrics")),
        ),
    ]
}

pub async fn run(args: &ReceiverArgs) -> anyhow::Result<()> {
    let Checked {
        keys,
        allow,
        exposure,
        first,
    } = checked(args)?;
    if exposure == Exposure::Open {
        warn!(
            "serving any address with no key (--open): whoever reaches {} reads this NIC's RSS \
             description and is granted its CPUs",
            args.listen
        );
    }
    let (source, poll) = match args.rss.first() {
        Some(path) => {
            if !srap_host::discovery::iface_exists(first) {
                warn!(
                    "no interface {first} here; serving {} anyway",
                    path.display()
                );
            }
            (Source::File(path.clone()), FILE_POLL)
        }
        None => (Source::Iface(first.to_owned()), IFACE_POLL),
    };
    let learned = LearnedKey::default();
    let (updates, watcher) = source::watch_learning(source, poll, learned.clone())
        .context("no RSS description to serve")?;
    let offer = Offer {
        cpus: args.cpus.clone(),
        local: grants::local_cpus(first)
            .inspect_err(|why| warn!("{why}: offering every CPU alike"))
            .ok()
            .flatten(),
    };
    let config = ServerConfig {
        allow,
        keys,
        open: args.open,
        max_peers: args.max_peers.max(1),
        timeouts: Timeouts::default(),
        offer: offer.clone(),
    };
    let published = updates.clone();
    let server = Server::bind(args.listen, config, updates)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    describe_offer(&server.offered(), args.cpus.is_some());
    let verify = Verify {
        hook: (!args.no_verify).then_some(args.hook.into()),
        cgroup: args.verify_cgroup.as_deref(),
        interval: SAMPLE_INTERVAL,
        poll: IFACE_POLL,
    };
    let (mut monitor, status) =
        Monitor::start(first, verify.hook, verify.cgroup, SAMPLE_INTERVAL, learned);
    monitor.set_receive_cpu(monitor::receive_cpu_of(first, !args.rss.is_empty()));
    let mut nics = NicSet::start(&args.iface, &args.rss, &verify, offer);
    let control_path = args
        .control
        .clone()
        .unwrap_or_else(|| DEFAULT_CONTROL_PATH.into());
    let (control_socket, control_task) = match ControlSocket::bind(&control_path) {
        Ok((socket, listener)) => {
            info!("status on {}", socket.path().display());
            let task = tokio::spawn(control::serve(listener, status.clone()));
            (Some(socket), Some(task))
        }
        Err(err) if args.control.is_some() => {
            return Err(err).context("making the control socket (--control)");
        }
        // The default socket is a convenience: serving senders matters more.
        Err(err) => {
            error!(
                "{err}; serving senders without a status socket (`--control PATH` picks another)"
            );
            (None, None)
        }
    };
    let metrics_task = match args.metrics {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("serving metrics on {addr} (--metrics)"))?;
            info!("metrics on http://{addr}/metrics");
            Some(tokio::spawn(metrics::serve(listener, status.clone())))
        }
        None => None,
    };
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    let mut tick = tokio::time::interval(monitor.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut nics_tick = tokio::time::interval(NICS_POLL);
    nics_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    srap_daemon::notify::ready(&format!(
        "serving the RSS description of {} to senders on {}",
        args.iface.join(", "),
        args.listen
    ));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hangup.recv() => reload_keys(&server, args),
            _ = tick.tick() => {
                let current = published.borrow().clone();
                monitor.sample(&server, &current);
                nics.sample(&server);
                let first = status.borrow().clone();
                let (rows, listeners) = nics.rows(&first, &current);
                monitor.amend(|s| {
                    s.nics = rows;
                    s.listeners = listeners;
                });
            }
            _ = nics_tick.tick() => {
                srap_daemon::notify::watchdog();
                let current = published.borrow().clone();
                let landings = {
                    let now = status.borrow();
                    now.observer.hook.as_ref().map(|_| srap_common::wire::LandingReport {
                        version: current.version,
                        verdict: now.landings.verdict,
                        matched: now.landings.matched,
                        judged: now.landings.judged,
                    })
                };
                nics.refresh(&server, &current, landings);
            }
        }
    }
    info!("stopping");
    srap_daemon::notify::stopping();
    for task in [control_task, metrics_task].into_iter().flatten() {
        task.abort();
    }
    drop(control_socket);
    server.shutdown().await;
    watcher.abort();
    drop(monitor);
    Ok(())
}

/// The first `--iface`, the one every sender plans by (clap requires one).
fn first_iface(ifaces: &[String]) -> anyhow::Result<&str> {
    let first = ifaces.first().context("--iface names no interface")?;
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = ifaces.iter().find(|i| !seen.insert(i.as_str())) {
        anyhow::bail!("--iface {twice} is given twice");
    }
    Ok(first)
}

/// SIGHUP: the key files again (a rotated key). A file that cannot be
/// read keeps every key as it was: a typo must not lock senders out.
fn reload_keys(server: &Server, args: &ReceiverArgs) {
    if args.psk_file.is_empty() {
        info!("SIGHUP: no --psk-file to read again");
        return;
    }
    match Keys::read(&args.psk_file) {
        Ok(keys) => server.set_keys(keys),
        Err(err) => error!("SIGHUP: {err}; keeping the keys in use"),
    }
}

/// Says which CPUs senders will be granted.
fn describe_offer(tiers: &[Vec<u32>], explicit: bool) {
    let list = |t: &Vec<u32>| srap_host::cpulist::format(t.iter().copied());
    match tiers {
        [] => warn!(
            "no CPU to grant senders{}: they steer without grants",
            if explicit {
                " (--cpus names none a receive queue reaches)"
            } else {
                ""
            }
        ),
        [only] => info!("granting senders CPUs {}", list(only)),
        [near, far, ..] => info!(
            "granting senders CPUs {} (the NIC's NUMA node), then {}",
            list(near),
            list(far)
        ),
    }
}
