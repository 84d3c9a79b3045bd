//! `srap-agent sender --peer`: steering that follows the receiver agent.
//!
//! Nothing is set up until the first description arrives (a bounded wait),
//! so a sender that cannot reach or authenticate its receiver never steers
//! with a guess. Then every new description is re-planned into the same
//! pinned maps ([`super::replan`]) and the plan is reported back. While the
//! receiver is away the last plan keeps steering: the maps do not depend on
//! the connection, and the client reconnects with backoff on its own.

use std::{net::IpAddr, time::Duration};

use anyhow::{Context as _, bail};
use srap_common::{
    rss::RssModel,
    wire::{CpuGrant, DemandReport, LandingReport, LandingVerdict, PlanReport},
};
use tokio::{
    signal::unix::{Signal, SignalKind, signal},
    sync::watch,
    time::Instant,
};
use tracing::{info, warn};

use super::{SenderOptions, Steering, args::SenderArgs, grant, maps, replan, summary};
use crate::{
    psk::read_psk_file,
    upstream::{self, PeerConfig, PeerHandle, PeerStatus, Update},
};

/// How often the wait for the first description says it is still waiting.
const WAIT_NOTICE: Duration = Duration::from_secs(5);
/// How long `--once` waits for its plan to be handed to the receiver.
const REPORT_FLUSH: Duration = Duration::from_secs(5);
/// Destination ports a plan is reported for (each adds a table to the frame).
const MAX_REPORT_PORTS: usize = 16;
/// How often the binder's open flows are read for the demand report (sent
/// only when they changed).
const DEMAND_EVERY: Duration = Duration::from_millis(100);

/// Runs peer mode until Ctrl-C, SIGTERM or `srap-agent detach`.
pub async fn run(args: &SenderArgs, peer_addr: &str, object: &[u8]) -> anyhow::Result<()> {
    let psk = args.psk_file.as_deref().map(read_psk_file).transpose()?;
    let dports = report_ports(args)?;
    let receivers = match args.receivers.as_slice() {
        [] => vec![peer_ip(peer_addr).await?],
        given => given.to_vec(),
    };
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let handle = upstream::watch(PeerConfig::new(peer_addr, psk));
    let mut updates = handle.updates();
    let mut landings = handle.landings();
    let mut status = handle.status();
    let limit = Duration::from_secs(args.peer_wait);
    let Some(first) = wait_first(&mut updates, &mut status, peer_addr, limit, &mut term).await?
    else {
        info!("stopped before the first description: nothing was set up");
        return Ok(());
    };
    println!(
        "receiver description version {} from {peer_addr}",
        first.version
    );
    let model = RssModel::from_description(&first.description)
        .context("the receiver's first description")?;
    let options = options(args, model, receivers);
    let mut steering = super::start(&options, object).context("setting up the port binder")?;
    println!("{}", summary::describe(&steering));
    let mut current = first;
    report(&handle, current.version, &steering, &dports);
    let mut grants = handle.grants();
    // A grant already in (sent right after the description) is applied
    // before anything else runs.
    grants.mark_changed();
    let mut granted: Option<CpuGrant> = None;
    let mut demand_tick = tokio::time::interval(DEMAND_EVERY);

    if args.once {
        wait_reported(&handle, current.version).await;
        return Ok(());
    }
    let mut tick = tokio::time::interval(Duration::from_secs(args.interval.max(1)));
    tick.tick().await;
    let mut away = false;
    let mut paused = false;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                if !summary::log_counters(&steering.layout) {
                    return Ok(());
                }
                if super::replan_if_sources_changed(&mut steering, &options) {
                    report(&handle, current.version, &steering, &dports);
                    reapply(&mut steering, granted.as_ref());
                }
            }
            _ = demand_tick.tick() => report_demand(&handle, &steering, granted.as_ref()),
            changed = grants.changed() => {
                changed.context("the receiver client stopped")?;
                let Some(grant) = grants.borrow_and_update().clone() else { continue };
                if granted.as_ref() != Some(&grant) {
                    take_grant(&mut steering, &grant);
                    granted = Some(grant);
                }
                report_demand(&handle, &steering, granted.as_ref());
            }
            changed = updates.changed() => {
                changed.context("the receiver client stopped")?;
                let Some(update) = updates.borrow_and_update().clone() else { continue };
                if update.description != current.description {
                    follow(&mut steering, &options, &update);
                    reapply(&mut steering, granted.as_ref());
                    // The refilled maps steer again: the new description
                    // gets its own verdict.
                    paused = false;
                } else {
                    info!("receiver version {}: same description, plan unchanged", update.version);
                }
                current = update;
                report(&handle, current.version, &steering, &dports);
            }
            changed = landings.changed() => {
                changed.context("the receiver client stopped")?;
                let Some(report) = *landings.borrow_and_update() else { continue };
                if report.version == current.version {
                    paused = obey_landings(&mut steering, &options, report, paused, peer_addr);
                }
            }
            changed = status.changed() => {
                if changed.is_err() {
                    continue;
                }
                let now = status.borrow_and_update().clone();
                match now {
                    PeerStatus::Away(reason) if !away => {
                        away = true;
                        warn!(
                            "receiver {peer_addr} is away ({reason}): steering on with the plan \
                             for version {}",
                            current.version
                        );
                    }
                    PeerStatus::Connected if away => {
                        away = false;
                        info!("receiver {peer_addr} is back");
                    }
                    _ => {}
                }
            }
        }
    }
    info!(
        "stopping; steering continues (`srap-agent detach --pin-dir {}` removes it)",
        steering.layout.dir().display()
    );
    Ok(())
}

/// The closed loop, sender side: stops steering toward a receiver whose
/// landings contradict the description it planned with (new connections get
/// kernel ports), and steers again when the receiver reports agreement.
/// Returns whether steering is paused now.
fn obey_landings(
    steering: &mut Steering,
    options: &SenderOptions,
    report: LandingReport,
    paused: bool,
    peer_addr: &str,
) -> bool {
    let counts = format!(
        "{} of its last {} flows on the predicted queue",
        report.matched, report.judged
    );
    match report.verdict {
        LandingVerdict::Contradicted if !paused => match maps::clear_dests(&mut steering.ebpf) {
            Ok(_) => {
                warn!(
                    "receiver {peer_addr}: its landings contradict description version {} \
                     ({counts}): steering paused, new connections get kernel ports",
                    report.version
                );
                println!("steering paused: the receiver's landings contradict its description");
                true
            }
            Err(err) => {
                warn!("receiver {peer_addr}: cannot pause steering: {err}");
                false
            }
        },
        LandingVerdict::TupleRewritten if !paused => match maps::clear_dests(&mut steering.ebpf) {
            Ok(_) => {
                warn!(
                    "receiver {peer_addr}: this sender's connection reaches it from another \
                     address than the source of the plan for version {}: a NAT or proxy \
                     rewrites the tuple on the way, so no planned port lands where computed; \
                     steering paused, new connections get kernel ports",
                    report.version
                );
                println!("steering paused: a NAT or proxy rewrites this sender's tuples");
                true
            }
            Err(err) => {
                warn!("receiver {peer_addr}: cannot pause steering: {err}");
                false
            }
        },
        LandingVerdict::Agreed if paused => {
            let pacing = options.pacing_rate.map_or(0, |r| r.0);
            match maps::fill(&mut steering.ebpf, &steering.plan, pacing) {
                Ok(()) => {
                    info!(
                        "receiver {peer_addr}: flows land as description version {} says \
                         again ({counts}): steering resumed",
                        report.version
                    );
                    println!("steering resumed: the receiver reports agreement");
                    false
                }
                Err(err) => {
                    warn!("receiver {peer_addr}: cannot resume steering: {err}");
                    true
                }
            }
        }
        _ => paused,
    }
}

/// Puts a new grant from the receiver into the binder's grant map.
fn take_grant(steering: &mut Steering, grant: &CpuGrant) {
    match grant::apply(&mut steering.ebpf, &steering.plan, Some(grant)) {
        Ok(applied) => {
            let cpus: Vec<String> = grant
                .cpus
                .iter()
                .map(|c| {
                    if c.count == 0 {
                        c.cpu.to_string()
                    } else {
                        format!("{}+{}", c.cpu, c.count)
                    }
                })
                .collect();
            println!(
                "grant {}: {} receiver CPUs [{}]",
                grant.epoch,
                applied.slots,
                cpus.join(" ")
            );
            if applied.unknown > 0 {
                warn!(
                    "grant {}: {} granted CPUs are not reached by any queue of the description                      this sender planned with",
                    grant.epoch, applied.unknown
                );
            }
        }
        Err(err) => warn!("grant {}: cannot apply it: {err}", grant.epoch),
    }
}

/// After a re-plan (slots may be renumbered): the grant again.
fn reapply(steering: &mut Steering, grant: Option<&CpuGrant>) {
    if let Err(err) = grant::apply(&mut steering.ebpf, &steering.plan, grant) {
        warn!("cannot re-apply the receiver's grant after a re-plan: {err}");
    }
}

/// Tells the receiver the flows the binder holds per receiver CPU (the
/// client sends it only when it changed).
fn report_demand(handle: &PeerHandle, steering: &Steering, grant: Option<&CpuGrant>) {
    match grant::demand(&steering.ebpf, &steering.plan) {
        Ok(flows) => handle.report_demand(DemandReport {
            applied: grant.map_or(0, |g| g.epoch),
            flows,
        }),
        Err(err) => warn!("reading the binder's open flows: {err}"),
    }
}

/// Re-plans for `update`; on failure the old plan keeps steering.
fn follow(steering: &mut Steering, options: &SenderOptions, update: &Update) {
    let started = std::time::Instant::now();
    let model = match RssModel::from_description(&update.description) {
        Ok(model) => model,
        Err(err) => {
            warn!(
                "receiver version {}: {err}; keeping the last plan",
                update.version
            );
            return;
        }
    };
    match replan(steering, options, &model) {
        Ok(moved) => {
            println!(
                "replanned for version {} in {} ms: +{} -{} reserved ports",
                update.version,
                started.elapsed().as_millis(),
                moved.reserved,
                moved.released
            );
            println!("{}", summary::describe(steering));
        }
        Err(err) => warn!(
            "receiver version {}: cannot re-plan ({err}); keeping the last plan",
            update.version
        ),
    }
}

/// Waits (at most `limit`) for the first description; `None` when stopped
/// by a signal first. Says every few seconds what it is waiting on.
async fn wait_first(
    updates: &mut watch::Receiver<Option<Update>>,
    status: &mut watch::Receiver<PeerStatus>,
    peer_addr: &str,
    limit: Duration,
    term: &mut Signal,
) -> anyhow::Result<Option<Update>> {
    info!("waiting up to {limit:?} for the first RSS description from {peer_addr}");
    let deadline = Instant::now() + limit;
    let mut notice = tokio::time::interval(WAIT_NOTICE);
    notice.tick().await;
    loop {
        if let Some(update) = updates.borrow_and_update().clone() {
            return Ok(Some(update));
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(None),
            _ = term.recv() => return Ok(None),
            changed = updates.changed() => changed.context("the receiver client stopped")?,
            _ = tokio::time::sleep_until(deadline) => bail!(
                "no RSS description from receiver {peer_addr} within {limit:?} ({}); \
                 nothing was set up",
                status_text(&status.borrow())
            ),
            _ = notice.tick() => info!(
                "still waiting for receiver {peer_addr}: {}",
                status_text(&status.borrow())
            ),
        }
    }
}

fn status_text(status: &PeerStatus) -> String {
    match status {
        PeerStatus::Connecting => "connecting".into(),
        PeerStatus::Connected => "connected, no description yet".into(),
        PeerStatus::Away(reason) => format!("last attempt: {reason}"),
    }
}

/// Hands the plan to the client, which sends it now and after reconnecting.
fn report(handle: &PeerHandle, version: u64, steering: &Steering, dports: &[u16]) {
    let report: PlanReport = upstream::plan_report(version, &steering.plan, dports);
    if report.tables.is_empty() {
        warn!(
            "the plan for version {version} is reported without ports: every destination \
             port is steered; name the ports to report with --report-port P"
        );
    }
    handle.report_plan(report);
}

/// `--once`: leaves only after the plan went out (bounded).
async fn wait_reported(handle: &PeerHandle, version: u64) {
    let mut reported = handle.reported();
    let sent = tokio::time::timeout(
        REPORT_FLUSH,
        reported.wait_for(|v| v.is_some_and(|v| v >= version)),
    )
    .await;
    match sent {
        Ok(Ok(_)) => info!("plan for version {version} reported"),
        _ => warn!("the plan for version {version} was not reported within {REPORT_FLUSH:?}"),
    }
}

/// The destination ports the plan is reported for.
fn report_ports(args: &SenderArgs) -> anyhow::Result<Vec<u16>> {
    let ports = if args.report_ports.is_empty() {
        &args.ports
    } else {
        &args.report_ports
    };
    if ports.contains(&0) {
        bail!("--report-port 0 is not a destination port");
    }
    if ports.len() > MAX_REPORT_PORTS {
        bail!(
            "the plan is reported for at most {MAX_REPORT_PORTS} destination ports; {} given",
            ports.len()
        );
    }
    Ok(ports.clone())
}

/// The receiver's address when `--receiver` is not given: the peer's.
async fn peer_ip(peer_addr: &str) -> anyhow::Result<IpAddr> {
    let addr = tokio::net::lookup_host(peer_addr)
        .await
        .with_context(|| format!("resolving --peer {peer_addr} (or give --receiver IP)"))?
        .next()
        .with_context(|| format!("--peer {peer_addr} has no address; give --receiver IP"))?;
    info!(
        "steering toward the peer's address {} (--receiver overrides)",
        addr.ip()
    );
    Ok(addr.ip())
}

/// The binder's options for `model`, the rest from the command line.
pub fn options(args: &SenderArgs, model: RssModel, receivers: Vec<IpAddr>) -> SenderOptions {
    SenderOptions {
        model,
        receivers,
        ports: args.ports.clone(),
        cgroup: args.cgroup.clone(),
        pin_dir: args.pin_dir.clone(),
        pacing_rate: args.pacing_rate,
        port_range: args.port_range,
    }
}
