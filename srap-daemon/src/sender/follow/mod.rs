//! `srap-agent sender --peer`: steering that follows receiver agents.
//!
//! Nothing is set up until a first description arrives (a bounded wait),
//! so a sender that cannot reach or authenticate any receiver never steers
//! with a guess. With several `--peer`s each receiver host is planned with
//! its own description (its own RSS model and layout), gets its own grant,
//! landing verdict and plan report; a receiver whose first description comes
//! later joins the plan then. Every new description is re-planned into the
//! same pinned maps ([`super::replan`]). While a receiver is away its last
//! plan keeps steering, and the others are not touched: the maps do not
//! depend on the connections, and each client reconnects with backoff on
//! its own.

mod events;
mod probe;
mod receivers;
pub mod resolve;
pub(crate) mod status;

use std::{collections::BTreeSet, net::IpAddr, sync::Arc, time::Duration};

use anyhow::{Context as _, bail};
use srap_common::{
    rss::{KeySource, RssModel},
    wire::{CpuGrant, DemandReport, LandingReport, LandingVerdict},
};
use tokio::{
    signal::unix::{Signal, SignalKind, signal},
    sync::mpsc,
    time::Instant,
};
use tracing::{info, warn};

pub use self::status::Published;
use self::{
    events::{Event, What},
    receivers::Receiver,
};
use super::{
    RunningBinder, SenderOptions, Target,
    ends::{LocalNic, Steer},
    grant,
    landings::LocalLandings,
    local_end::LocalEnd,
    maps, replan,
    settings::SenderSettings,
    summary,
};
use crate::{
    psk::read_psk_file,
    upstream::{self, PeerConfig, Update},
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
/// How often the status snapshot is refreshed besides after every event.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How often a `--peer` given as a name is resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// The follow loop's state: the receivers, the options they make, and the
/// running binder.
struct Follower {
    receivers: Vec<Receiver>,
    options: SenderOptions,
    dports: Vec<u16>,
    /// The control socket (`None` with `--once`).
    published: Option<status::Published>,
    resolver: resolve::Resolve,
    /// This host's own NIC and its closed loop, with `--steer both`.
    local: Option<LocalEnd>,
    /// This host's NIC's model with `--steer both` (out of `options` while
    /// local steering is paused).
    both: Option<Arc<RssModel>>,
    /// With `--steer remote`: the socket hook listing the connections the
    /// steered cgroup opens, so the status can show each one's receiver CPU
    /// planned and seen (`local` lists them otherwise).
    opened: Option<LocalLandings>,
    /// The occupancy audit, run at every `--interval`.
    audit: super::audit::OccupancyAudit,
}

/// Runs peer mode until Ctrl-C, SIGTERM or `srap-agent detach`.
pub async fn run(
    args: &SenderSettings,
    peers: &[String],
    local: Option<LocalNic>,
    object: &[u8],
) -> anyhow::Result<()> {
    let dports = report_ports(args)?;
    let resolver = resolve::system();
    let addresses = receiver_addresses(args, peers, &resolver).await?;
    // A name is followed (resolved again) unless --receiver says where.
    let by_name = args.receivers.is_empty();
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    // Before anything is set up: a control socket in use stops the agent
    // with nothing to undo.
    let published = if args.once {
        None
    } else {
        let mut published =
            status::Published::bind(&args.control()).context("the sender's control socket")?;
        if let Some(addr) = args.metrics {
            published.serve_metrics(addr)?;
        }
        Some(published)
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut receivers = Vec::new();
    let mut row = srap_common::binder::FIRST_RECEIVER_ROW;
    for (n, (peer, addrs)) in peers.iter().zip(addresses).enumerate() {
        let handle = upstream::watch(peer_config(args, peer)?);
        events::forward(n, &handle, tx.clone());
        let rows = addrs
            .into_iter()
            .map(|a| {
                row += 1;
                (row - 1, a)
            })
            .collect();
        let mut receiver = Receiver::new(peer.clone(), handle, rows);
        receiver.follows_name = by_name && resolve::is_name(peer);
        receivers.push(receiver);
    }
    drop(tx);
    let mut options = options(args, Vec::new())?;
    // --steer both: this host's NIC in every plan.
    options.local = local.as_ref().map(|nic| nic.model.clone());
    let mut follower = Follower {
        receivers,
        both: options.local.clone(),
        options,
        dports,
        published,
        resolver,
        local: None,
        opened: None,
        audit: super::audit::OccupancyAudit::default(),
    };
    follower.publish(None);
    let limit = Duration::from_secs(args.peer_wait());
    if !follower.wait_first(&mut events, limit, &mut term).await? {
        info!("stopped before the first description: nothing was set up");
        return Ok(());
    }
    let mut steering =
        super::start(&follower.options, object).context("setting up the port binder")?;
    if !args.once {
        // Watching before `steering active`: no connection it steers is missed.
        let toward: Vec<IpAddr> = follower.options.targets.iter().map(|t| t.addr).collect();
        follower.local = local.map(|nic| LocalEnd::start(nic, Steer::Both, &steering, &toward));
        if follower.local.is_none() {
            follower.opened = watch_opened(&steering.cgroup);
        }
    }
    println!("{}", summary::describe(&steering));
    follower.planned(&mut steering, true);
    if args.once {
        follower.wait_reported().await;
        return Ok(());
    }
    follower
        .follow(&mut steering, &mut events, args.interval(), &mut term)
        .await?;
    info!(
        "stopping; steering continues (`srap-agent detach --pin-dir {}` removes it)",
        steering.layout.dir().display()
    );
    Ok(())
}

/// The socket hook on `cgroup`, only to list its connections; without it
/// (an old kernel) the status lists no flows, and says so in the log.
fn watch_opened(cgroup: &std::path::Path) -> Option<LocalLandings> {
    LocalLandings::attach(cgroup, None)
        .inspect_err(|err| {
            warn!("{err}; `srap status --sender` will list no flows");
        })
        .ok()
}

/// How to reach receiver `peer`: with its key (read now, so a bad key
/// file stops the agent before anything is set up).
fn peer_config(args: &SenderSettings, peer: &str) -> anyhow::Result<PeerConfig> {
    let config = PeerConfig::new(peer, None);
    Ok(match args.psk_file_for(peer) {
        Some(path) => {
            let psk = read_psk_file(path)?;
            info!("receiver {peer}: key {} from {}", psk.id(), path.display());
            config.with_psk_file(path.to_owned(), psk)
        }
        None => config,
    })
}

impl Follower {
    /// Waits (at most `limit`) until some receiver's first description is
    /// in; false when stopped by a signal first. Says every few seconds
    /// what it is waiting on.
    async fn wait_first(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        limit: Duration,
        term: &mut Signal,
    ) -> anyhow::Result<bool> {
        let names = self.names();
        info!("waiting up to {limit:?} for the first RSS description from {names}");
        let deadline = Instant::now() + limit;
        let mut notice = tokio::time::interval(WAIT_NOTICE);
        notice.tick().await;
        while self.options.targets.is_empty() {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(false),
                _ = term.recv() => return Ok(false),
                event = events.recv() => {
                    let event = event.context("the receiver clients stopped")?;
                    self.before_start(event);
                    self.publish(None);
                }
                _ = tokio::time::sleep_until(deadline) => bail!(
                    "no RSS description within {limit:?} ({}); nothing was set up",
                    self.statuses()
                ),
                _ = notice.tick() => info!(
                    "still waiting: {}", self.statuses()
                ),
            }
        }
        Ok(true)
    }

    /// An event before the binder exists: descriptions and grants are kept.
    fn before_start(&mut self, event: Event) {
        let Some(receiver) = self.receivers.get_mut(event.peer) else {
            return;
        };
        match event.what {
            What::Update(update) => {
                if self.take_description(event.peer, update) {
                    self.options.targets = self.targets();
                }
            }
            What::Grant(grant) => receiver.granted = Some(grant),
            What::Status(status) => receiver.status = status,
            What::Landing(_) => {}
        }
    }

    /// Runs until a signal or the binder's links are gone.
    async fn follow(
        &mut self,
        steering: &mut RunningBinder,
        events: &mut mpsc::UnboundedReceiver<Event>,
        interval: u64,
        term: &mut Signal,
    ) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(Duration::from_secs(interval.max(1)));
        tick.tick().await;
        let mut demand_tick = tokio::time::interval(DEMAND_EVERY);
        let mut status_tick = tokio::time::interval(STATUS_EVERY);
        let mut resolve_tick = tokio::time::interval(RESOLVE_EVERY);
        resolve_tick.tick().await;
        let mut watch = super::watch::CounterWatch::new(steering);
        loop {
            tokio::select! {
                _ = resolve_tick.tick() => self.re_resolve(steering).await,
                _ = status_tick.tick() => {
                    self.sample_local(steering);
                    self.publish(Some(steering));
                }
                _ = tokio::signal::ctrl_c() => return Ok(()),
                _ = term.recv() => return Ok(()),
                _ = tick.tick() => {
                    if !watch.tick(steering) {
                        return Ok(());
                    }
                    self.audit.tick(steering);
                    if super::replan_if_sources_changed(steering, &self.options) {
                        self.after_replan(steering);
                    }
                }
                _ = demand_tick.tick() => {
                    for n in 0..self.receivers.len() {
                        self.report_demand(steering, n);
                    }
                }
                event = events.recv() => {
                    let event = event.context("the receiver clients stopped")?;
                    self.on_event(steering, event);
                    self.publish(Some(steering));
                }
            }
        }
    }

    fn on_event(&mut self, steering: &mut RunningBinder, event: Event) {
        let n = event.peer;
        match event.what {
            What::Update(update) => self.on_update(steering, n, update),
            What::Grant(grant) => {
                let Some(receiver) = self.receivers.get_mut(n) else {
                    return;
                };
                if receiver.granted.as_ref() != Some(&grant) {
                    receiver.take_grant(steering, &grant);
                    receiver.granted = Some(grant);
                }
                self.report_demand(steering, n);
            }
            What::Landing(report) => self.on_landing(steering, n, report),
            What::Status(status) => {
                if let Some(receiver) = self.receivers.get_mut(n) {
                    receiver.on_status(status);
                }
            }
        }
    }

    /// A description from receiver `n`: re-planned when it changed (or is
    /// its first), reported either way.
    fn on_update(&mut self, steering: &mut RunningBinder, n: usize, update: Update) {
        let version = update.version;
        let key = update.key;
        if self.take_description(n, update) {
            self.options.targets = self.targets();
            let name = self.receivers[n].addr.clone();
            if key.source == KeySource::Learned {
                info!(
                    "receiver {name} version {version}: planning with a key it learned from \
                     landings (model {}; {}{})",
                    key.revision,
                    key.confidence,
                    if key.confidence.complete() {
                        ""
                    } else {
                        "; not every bit planning needs is known yet: its landings will tell"
                    }
                );
            }
            replan_for(steering, &self.options, version, &name);
            // The refilled maps steer toward `n` again: its new
            // description gets its own verdict.
            self.receivers[n].paused = false;
            self.after_replan(steering);
        } else {
            info!(
                "receiver {} version {version}: same description, plan unchanged ({key})",
                self.receivers[n].addr
            );
            self.receivers[n].report(steering, &self.dports);
        }
    }

    /// Records receiver `n`'s description; true when its model changed (a
    /// new plan is needed). A description equal to another receiver's
    /// shares that receiver's model, so their layouts are shared too.
    fn take_description(&mut self, n: usize, update: Update) -> bool {
        let same = self.receivers[n]
            .current
            .as_ref()
            .is_some_and(|c| c.description == update.description);
        if same {
            self.receivers[n].current = Some(update);
            return false;
        }
        let shared = self
            .receivers
            .iter()
            .filter(|r| r.current.as_ref().map(|c| &c.description) == Some(&update.description))
            .find_map(|r| r.model.clone());
        let model = match shared {
            Some(model) => model,
            None => match RssModel::from_description(&update.description) {
                Ok(model) => Arc::new(model),
                Err(err) => {
                    warn!(
                        "receiver {} version {}: {err}; keeping its last plan",
                        self.receivers[n].addr, update.version
                    );
                    return false;
                }
            },
        };
        let receiver = &mut self.receivers[n];
        if receiver.current.is_none() {
            println!(
                "receiver description version {} from {}",
                update.version, receiver.addr
            );
        }
        receiver.model = Some(model);
        receiver.current = Some(update);
        true
    }

    /// Every receiver with a model, at each of its addresses.
    fn targets(&self) -> Vec<Target> {
        self.receivers
            .iter()
            .flat_map(|r| {
                r.model.iter().flat_map(|model| {
                    r.rows.iter().map(|(index, addr)| Target {
                        index: *index,
                        addr: *addr,
                        model: model.clone(),
                    })
                })
            })
            .collect()
    }

    /// After a new plan (slots may be renumbered): paused receivers' dests
    /// out again, every grant re-applied, every plan reported.
    fn after_replan(&mut self, steering: &mut RunningBinder) {
        self.planned(steering, false);
    }

    /// [`Follower::after_replan`]; `first`: the binder's first plan, whose
    /// grants (they came before it existed) get their `grant` lines here.
    fn planned(&mut self, steering: &mut RunningBinder, first: bool) {
        self.refill_dests(steering);
        for receiver in &self.receivers {
            receiver.reapply(steering, first);
            receiver.report(steering, &self.dports);
        }
        if let Some(local) = &self.local
            && let Err(err) = super::offline::apply_local_grant(steering, &local.nic)
        {
            warn!("{err:#}");
        }
    }

    /// This host's closed loop: judges where connections land on its NIC
    /// and, when the verdict changes, plans again without (or with) it.
    fn sample_local(&mut self, steering: &mut RunningBinder) {
        let steered: BTreeSet<IpAddr> = self.options.targets.iter().map(|t| t.addr).collect();
        let Some(sampled) = self.local.as_mut().map(|l| l.sample(&steered)) else {
            return;
        };
        if let Some(learned) = sampled.model {
            // A learned key: this host's end of the plan, when in force.
            if self.options.local.is_some() {
                self.options.local = Some(learned.clone());
                if let Err(err) = replan(steering, &self.options) {
                    warn!("cannot re-plan with this host's learned key: {err}");
                }
                self.after_replan(steering);
            }
            self.both = Some(learned);
        }
        let (Some(pause), Some(model)) = (sampled.pause, self.both.clone()) else {
            return;
        };
        self.options.local = (!pause).then_some(model);
        match replan(steering, &self.options) {
            Ok(()) => {
                if let Some(local) = &mut self.local {
                    local.set_paused(pause);
                }
                self.after_replan(steering);
            }
            Err(err) => {
                warn!("cannot re-plan for this host's NIC: {err}");
                self.options.local = if pause { self.both.clone() } else { None };
            }
        }
    }

    /// The destinations of every receiver not paused.
    fn refill_dests(&self, steering: &mut RunningBinder) -> bool {
        let paused: BTreeSet<u32> = self
            .receivers
            .iter()
            .filter(|r| r.paused)
            .flat_map(|r| r.rows.iter().map(|(i, _)| *i))
            .collect();
        match maps::fill_dests_except(&mut steering.ebpf, &steering.plan, &paused) {
            Ok(()) => true,
            Err(err) => {
                warn!("cannot update the binder's destinations: {err}");
                false
            }
        }
    }

    /// The closed loop, sender side: stops steering toward a receiver whose
    /// landings contradict the description it planned with (new connections
    /// to it get kernel ports; the others steer on), and steers toward it
    /// again when it reports agreement.
    fn on_landing(&mut self, steering: &mut RunningBinder, n: usize, report: LandingReport) {
        let Some(receiver) = self.receivers.get_mut(n) else {
            return;
        };
        if receiver.current.as_ref().map(|c| c.version) != Some(report.version) {
            return;
        }
        let was = receiver.paused;
        let wanted = match report.verdict {
            LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => true,
            LandingVerdict::Agreed => false,
            _ => was,
        };
        if wanted == was {
            return;
        }
        receiver.paused = wanted;
        if self.refill_dests(steering) {
            self.receivers[n].say_landing(&report);
            if report.verdict == LandingVerdict::Contradicted {
                // Landings teach the receiver its device's real key.
                probe::spawn(self.receivers[n].addr.clone());
            }
        } else {
            self.receivers[n].paused = was;
        }
    }

    /// Resolves every peer given as a name again; a changed address set
    /// is planned for (kept addresses keep their binder rows). A failed or
    /// empty answer keeps the last addresses.
    async fn re_resolve(&mut self, steering: &mut RunningBinder) {
        let mut changed = false;
        for n in 0..self.receivers.len() {
            if !self.receivers[n].follows_name {
                continue;
            }
            let peer = self.receivers[n].addr.clone();
            let now = match (self.resolver)(peer.clone()).await {
                Ok(now) => now,
                Err(err) => {
                    warn!("resolving {peer} again: {err}; steering on toward its last addresses");
                    continue;
                }
            };
            let taken: BTreeSet<u32> = self
                .receivers
                .iter()
                .flat_map(|r| r.rows.iter().map(|(i, _)| *i))
                .collect();
            if let Some(rows) = resolve::reassign(&self.receivers[n].rows, &now, &taken) {
                let addrs: Vec<String> = rows.iter().map(|(_, a)| a.to_string()).collect();
                println!("{peer} now resolves to {}", addrs.join(" "));
                self.receivers[n].rows = rows;
                changed = true;
            }
        }
        if changed {
            self.options.targets = self.targets();
            let started = std::time::Instant::now();
            match replan(steering, &self.options) {
                Ok(()) => {
                    println!(
                        "replanned for the new addresses in {} ms",
                        started.elapsed().as_millis()
                    );
                    println!("{}", summary::describe(steering));
                }
                Err(err) => warn!("cannot re-plan for the new addresses ({err}); keeping the plan"),
            }
            self.after_replan(steering);
        }
    }

    /// Refreshes what `srap status --sender` shows.
    fn publish(&self, steering: Option<&RunningBinder>) {
        if let Some(published) = &self.published {
            published.update(self.status(steering));
        }
    }

    fn report_demand(&self, steering: &RunningBinder, n: usize) {
        if let Some(receiver) = self.receivers.get(n) {
            receiver.report_demand(steering);
        }
    }

    /// `--once`: leaves only after every plan went out (bounded).
    async fn wait_reported(&self) {
        for receiver in &self.receivers {
            receiver.wait_reported(REPORT_FLUSH).await;
        }
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.receivers.iter().map(|r| r.addr.as_str()).collect();
        names.join(", ")
    }

    fn statuses(&self) -> String {
        let texts: Vec<String> = self
            .receivers
            .iter()
            .map(|r| format!("receiver {}: {}", r.addr, receivers::status_text(&r.status)))
            .collect();
        texts.join("; ")
    }
}

/// Re-plans for a new description of receiver `name`; on failure the old
/// plan keeps steering.
fn replan_for(steering: &mut RunningBinder, options: &SenderOptions, version: u64, name: &str) {
    let started = std::time::Instant::now();
    match replan(steering, options) {
        Ok(()) => {
            println!(
                "replanned for version {version} of {name} in {} ms",
                started.elapsed().as_millis()
            );
            println!("{}", summary::describe(steering));
        }
        Err(err) => warn!(
            "receiver {name} version {version}: cannot re-plan ({err}); keeping the last plan"
        ),
    }
}

/// The destination ports the plan is reported for.
fn report_ports(args: &SenderSettings) -> anyhow::Result<Vec<u16>> {
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

/// The addresses steered toward for each peer: `--receiver` with one
/// `--peer`, otherwise each peer's own address.
async fn receiver_addresses(
    args: &SenderSettings,
    peers: &[String],
    resolver: &resolve::Resolve,
) -> anyhow::Result<Vec<Vec<IpAddr>>> {
    match (peers, args.receivers.as_slice()) {
        ([_], given) if !given.is_empty() => Ok(vec![given.to_vec()]),
        (_, []) => {
            let mut all = Vec::new();
            for peer in peers {
                all.push(peer_ips(peer, resolver).await?);
            }
            Ok(all)
        }
        _ => bail!(
            "--receiver goes with a single --peer; with several, each receiver is steered \
             at its --peer address: leave --receiver out"
        ),
    }
}

/// The receiver's addresses when `--receiver` is not given: every address
/// the peer's name resolves to (its one address when given as one).
async fn peer_ips(peer_addr: &str, resolver: &resolve::Resolve) -> anyhow::Result<Vec<IpAddr>> {
    let addrs = resolver(peer_addr.to_owned())
        .await
        .with_context(|| format!("resolving --peer {peer_addr} (or give --receiver IP)"))?;
    if addrs.is_empty() {
        bail!("--peer {peer_addr} has no address; give --receiver IP");
    }
    let shown: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    info!(
        "steering toward the peer's address(es) {} (--receiver overrides)",
        shown.join(" ")
    );
    Ok(addrs)
}

/// The binder's options for `targets`, the rest from the command line
/// (the maps' sizes checked: a setting out of range is an error naming it).
pub fn options(args: &SenderSettings, targets: Vec<Target>) -> anyhow::Result<SenderOptions> {
    Ok(SenderOptions {
        targets,
        ports: args.ports.clone(),
        cgroup: args.cgroup.clone(),
        pin_dir: args.pin_dir(),
        pacing_rate: args.pacing_rate,
        port_range: args.port_range,
        local: None,
        sizes: args.sizes.sizes()?,
    })
}

/// The grant's CPUs as `cpu` or `cpu+flows`.
fn grant_cpus(grant: &CpuGrant) -> String {
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
    cpus.join(" ")
}

/// The demand report of the flows the binder holds toward `rows`.
fn demand_of(
    steering: &RunningBinder,
    rows: &BTreeSet<u32>,
    grant: Option<&CpuGrant>,
) -> Option<DemandReport> {
    match grant::demand(&steering.ebpf, &steering.plan, |i| rows.contains(&i)) {
        Ok(flows) => Some(DemandReport {
            applied: grant.map_or(0, |g| g.epoch),
            flows,
        }),
        Err(err) => {
            warn!("reading the binder's open flows: {err}");
            None
        }
    }
}
