//! The sender agent's one driver loop ([`run`]), for both of its modes:
//! offline (`super::offline`: nothing comes from receivers) and follow
//! (`super::follow`: its receivers' sessions). The loop owns what both
//! wait on — the counters, the occupancy audit and the full check of this
//! host's addresses and routes at every `--interval`, a tick every second
//! for this host's closed loop and the status, the links of this host's
//! NICs, Ctrl-C and SIGTERM — and hands each to the mode's part
//! ([`Mode`]), with the events of the mode's own feed ([`Feed`]).
//!
//! What both modes do at those times is here too, each step once: this
//! host's closed loop ([`sample_local`]), this host's NICs and bonds
//! within the second ([`follow_host`]), what both keep beside the binder
//! ([`Shared`]) and a stop's last steps ([`stopping`]). A mode composes
//! its second from these steps, in its own order.

use std::{collections::BTreeSet, convert::Infallible, net::IpAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use srap_common::rss::RssModel;
use srap_status::SenderStatus;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{
    audit::OccupancyAudit,
    binder::RunningBinder,
    choices::MptcpMode,
    local::source_rules,
    local_end::LocalEnd,
    options::SenderOptions,
    path_manager::{FollowReader, FollowSettings, PathManagerError, connections::FollowedNic},
    replan::{follow_links, replan_if_sources_changed},
    status::{StatusServer, add_local, binder_status},
    target::Target,
    watch::CounterWatch,
};

/// How often this host's landings are judged and the status refreshed.
const EVERY_SECOND: Duration = Duration::from_secs(1);

/// A mode's part of the loop: what it plans with, what it does at each of
/// the loop's times, and with each event of its feed.
pub(super) trait Mode {
    /// What its feed brings.
    type Event;
    /// What the binder is planned with now: a change of this host is
    /// re-planned with these.
    fn options(&self) -> &SenderOptions;
    /// What it keeps that the loop runs too (the audit, the closed loop).
    fn shared(&mut self) -> &mut Shared;
    /// Every second, after the watchdog's ping: this host's closed loop
    /// ([`sample_local`]), the status, and what the mode follows that
    /// often.
    fn each_second(&mut self, binder: &mut RunningBinder);
    /// The loop re-planned the binder for this host (a link, an address,
    /// a route, a bond): what a new plan needs again (its slots may be
    /// renumbered).
    fn replanned(&mut self, binder: &mut RunningBinder);
    /// This host's closed loop learned the key its NIC really hashes with.
    fn local_key(&mut self, binder: &mut RunningBinder, model: Arc<RssModel>);
    /// This host's closed loop changed its verdict: pause local steering
    /// (`true`) or resume it.
    fn local_verdict(&mut self, binder: &mut RunningBinder, pause: bool);
    /// Carries out an event of its feed; the loop waits meanwhile.
    async fn on(&mut self, binder: &mut RunningBinder, event: Self::Event);
}

/// A mode's own events, waited on beside the loop's timers.
pub(super) trait Feed {
    /// What it brings.
    type Event;
    /// The next event; an error ends the loop. Dropped whenever something
    /// else comes first, so what it waits on must lose nothing then.
    async fn next(&mut self) -> anyhow::Result<Self::Event>;
}

/// Offline's feed: nothing comes from receivers.
pub(super) struct NoFeed;

impl Feed for NoFeed {
    type Event = Infallible;

    async fn next(&mut self) -> anyhow::Result<Infallible> {
        std::future::pending().await
    }
}

/// How the loop ended, when not by an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopped {
    /// Ctrl-C or SIGTERM.
    Signal,
    /// The binder's links were unpinned (`srap-agent detach` ran).
    Detached,
}

/// Runs `mode` over `binder` with the events of `feed` until a signal,
/// `srap-agent detach` or an error of the feed. `interval_secs`:
/// `--interval` (at least a second), whose first tick is one interval
/// from now; the second's first is at once.
pub(super) async fn run<M: Mode>(
    mode: &mut M,
    feed: &mut impl Feed<Event = M::Event>,
    binder: &mut RunningBinder,
    interval_secs: u64,
    signals: &mut Signals,
) -> anyhow::Result<Stopped> {
    let mut interval = tokio::time::interval(Duration::from_secs(interval_secs.max(1)));
    interval.tick().await;
    let mut second = tokio::time::interval(EVERY_SECOND);
    let mut links = binder.watch_links(mode.options().nics.policy);
    let mut watch = CounterWatch::new(binder);
    loop {
        tokio::select! {
            () = signals.stop() => return Ok(Stopped::Signal),
            _ = second.tick() => {
                crate::notify::watchdog();
                mode.each_second(binder);
            }
            wake = links.next() => {
                if follow_links(binder, mode.options(), &wake) {
                    mode.replanned(binder);
                }
            }
            _ = interval.tick() => {
                if !at_interval(mode, binder, &mut watch) {
                    return Ok(Stopped::Detached);
                }
            }
            event = feed.next() => mode.on(binder, event?).await,
        }
    }
}

/// At every `--interval`: the counters (false once the binder's links are
/// gone), the occupancy audit, and the full check of this host's
/// addresses, routes and bonds, re-planned if they changed.
fn at_interval(mode: &mut impl Mode, binder: &mut RunningBinder, watch: &mut CounterWatch) -> bool {
    if !watch.tick(binder) {
        return false;
    }
    mode.shared().audit.tick(binder);
    if replan_if_sources_changed(binder, mode.options()) {
        mode.replanned(binder);
    }
    true
}

/// This host's closed loop, where its NIC is planned: judges where the
/// connections toward the targets land, and hands the mode a learned key,
/// then a changed verdict.
pub(super) fn sample_local(mode: &mut impl Mode, binder: &mut RunningBinder) {
    let steered: BTreeSet<IpAddr> = mode.options().target_addrs();
    let Some(local) = mode.shared().local.as_mut() else {
        return;
    };
    let sampled = local.sample(&steered, &binder.plan);
    if let Some(model) = sampled.model {
        mode.local_key(binder, model);
    }
    if let Some(pause) = sampled.pause {
        mode.local_verdict(binder, pause);
    }
}

/// What [`follow_host`] asks of this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HostCheck {
    /// Its NICs (down or up, an address added or removed, a NIC added).
    Nics,
    /// The bonds the plan leaves by (a member down or up), then its NICs.
    BondsAndNics,
}

/// Between the interval's full checks, every second: re-plans within the
/// second when this host is no longer as `check` saw it planned.
pub(super) fn follow_host(mode: &mut impl Mode, binder: &mut RunningBinder, check: HostCheck) {
    let (options, host) = (mode.options(), &binder.plan.host);
    let moved = (check == HostCheck::BondsAndNics && host.bonds_moved(&options.bonds))
        || host.nics_moved(&options.nics);
    if moved && replan_if_sources_changed(binder, mode.options()) {
        mode.replanned(binder);
    }
}

/// What both modes keep beside the binder.
pub(super) struct Shared {
    /// The control socket (`srap status --sender`, and `--metrics`):
    /// `None` where there is none (follow's `--once`, offline without
    /// this host's NIC when the socket is another agent's).
    pub published: Option<StatusServer>,
    /// The occupancy audit, run at every `--interval`.
    pub audit: OccupancyAudit,
    /// This host's own NIC and its closed loop, where it is planned.
    pub local: Option<LocalEnd>,
    /// SRAP as the namespace's MPTCP path manager (`--mptcp
    /// follow-reader`); the previous one comes back when it drops.
    pub path_manager: Option<FollowReader>,
}

impl Shared {
    /// Serving on `published`, with no audit run yet and no closed loop.
    pub fn new(published: Option<StatusServer>) -> Self {
        Self {
            published,
            audit: OccupancyAudit::default(),
            local: None,
            path_manager: None,
        }
    }

    /// The part of a snapshot both modes make the same way: the binder's
    /// counters (none before it exists), the audit's occupancy, and this
    /// host's end toward `targets`.
    pub fn snapshot(&self, binder: Option<&RunningBinder>, targets: &[Target]) -> SenderStatus {
        let mut status = binder.map(binder_status).unwrap_or_default();
        status.occupancy = self.audit.row();
        if let Some(local) = &self.local {
            add_local(&mut status, local, targets);
        }
        status.path_manager = self.path_manager.as_ref().map(FollowReader::status);
        status
    }
}

/// With `--mptcp follow-reader`, SRAP taken on as the namespace's MPTCP
/// path manager over the NICs the plan follows (given, up). Refused by
/// name where mptcpd runs; on a kernel without the reader tracepoint (or
/// another part it needs) the subflows are steered as `--mptcp subflows`
/// does and the log says why nothing follows the reader.
pub(super) fn start_path_manager(
    options: &SenderOptions,
    binder: &mut RunningBinder,
) -> anyhow::Result<Option<FollowReader>> {
    if options.mptcp != MptcpMode::FollowReader {
        return Ok(None);
    }
    let nics = binder
        .plan
        .host
        .nics
        .nics
        .iter()
        .filter(|nic| nic.given && nic.up)
        .filter_map(|nic| {
            Some(FollowedNic {
                name: nic.name.clone(),
                ifindex: srap_host::fib::ifindex(&nic.name)?,
                addresses: nic.addresses.iter().copied().collect(),
                node: nic.node,
            })
        })
        .collect();
    let settings = FollowSettings {
        nics,
        cgroup: binder.cgroup.clone(),
        state_path: super::state::path_for(binder.layout.dir()),
    };
    match FollowReader::start(&mut binder.ebpf, settings) {
        Ok(manager) => Ok(Some(manager)),
        Err(err @ PathManagerError::Mptcpd(_)) => Err(err.into()),
        Err(err) => {
            tracing::warn!(
                "--mptcp follow-reader: {err}; MPTCP subflows are steered as with                  --mptcp subflows and stay with the kernel's path manager"
            );
            Ok(None)
        }
    }
}

/// What stops the agent: Ctrl-C (SIGINT) or SIGTERM. SIGHUP is not
/// handled: its default ends the process.
pub(super) struct Signals {
    term: Signal,
}

impl Signals {
    /// Catches SIGTERM from now on (until then its default ends the
    /// process, with nothing said).
    pub fn catch() -> anyhow::Result<Self> {
        let term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        Ok(Self { term })
    }

    /// Waits for Ctrl-C or SIGTERM. A Ctrl-C is listened for only while
    /// this is awaited (`tokio::signal::ctrl_c` anew each time, as the
    /// loops always did); a SIGTERM is kept until the next wait.
    pub async fn stop(&mut self) {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// A stop's last steps: tells systemd, removes the source rules
/// `--source-rules install` put in, and returns the line the mode logs
/// (each under its own target, as the log has always named it).
pub(super) fn stopping(binder: &RunningBinder, options: &SenderOptions, shared: &Shared) -> String {
    crate::notify::stopping();
    source_rules::remove_on_stop(options.nics.source_rules);
    let followed = shared.path_manager.as_ref().map(|pm| {
        let s = pm.status();
        format!(
            "; the MPTCP path manager followed {} connections' readers ({} moves, {} flags \
             changed, {} subflows made, {} refused) and hands the namespace back",
            s.followed.len(),
            s.moves,
            s.flips,
            s.subflows_made,
            s.refused
        )
    });
    format!(
        "stopping; steering continues (`srap-agent detach --pin-dir {}` removes it){}",
        binder.layout.dir().display(),
        followed.unwrap_or_default()
    )
}
