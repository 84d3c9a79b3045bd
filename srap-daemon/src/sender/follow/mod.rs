//! `srap-agent sender --peer`: steering that follows receiver agents.
//!
//! Nothing is set up until a first description arrives (a bounded wait),
//! so a sender that cannot reach or authenticate any receiver never steers
//! with a guess. With several `--peer`s each receiver host is planned with
//! its own description (its own RSS model and layout), gets its own grant,
//! landing verdict and plan report; a receiver whose first description comes
//! later joins the plan then. Every new description is re-planned into the
//! same pinned maps ([`super::replan()`]). While a receiver is away its last
//! plan keeps steering, and the others are not touched: the maps do not
//! depend on the connections, and each client reconnects with backoff on
//! its own.
//!
//! What each event changes and what must then be done is decided by
//! `machine` (no I/O, unit-tested); this module is its shell: follow's
//! part of the sender's driver loop, which hands it its timers and the
//! receivers' events (`events`), it carries the machine's actions out on
//! the binder's maps, the receivers' clients and stdout.

mod events;
mod machine;
mod probe;
mod receivers;
mod status;

use std::{
    net::IpAddr,
    sync::{Arc, OnceLock},
    time::Duration,
};

use anyhow::{Context as _, bail};
use srap_common::rss::RssModel;
use srap_status::{SenderStatus, sender::SenderFlowRow};
use tokio::{sync::mpsc, time::Instant};
use tracing::{debug, info, warn};

use self::{
    events::{Event as PeerEvent, Fed, Feed},
    machine::{Action, Event, Machine, Peer, Undo, Why},
    receivers::Link,
    status::{add_opened, add_receiver_nics, asked_of, receiver_row, seen_at_receiver},
};
use super::{
    binder::{RunningBinder, start},
    bond_members::{MemberLoop, add_bonds},
    driver::{self, HostCheck, Shared, Signals},
    ends::PlacedEnds,
    error::SenderError,
    landings::LocalLandings,
    local::nic::LocalNic,
    local_end::LocalEnd,
    maps,
    mptcp::add_mptcp,
    options::SenderOptions,
    replan::{replan, replan_if_sources_changed},
    resolve,
    settings::SenderSettings,
    status::StatusServer,
    summary,
};
use crate::{
    psk::read_psk_file,
    receiver_client::{self, PeerConfig, PeerHandle},
};

/// How often the wait for the first description says it is still waiting.
const WAIT_NOTICE: Duration = Duration::from_secs(5);
/// How long `--once` waits for its plan to be handed to the receiver.
const REPORT_FLUSH: Duration = Duration::from_secs(5);
/// Destination ports a plan is reported for (each adds a table to the frame).
const MAX_REPORT_PORTS: usize = 16;

/// The follow loop's shell: the receivers' clients, what it serves, this
/// host's closed loop, and the [`Machine`] that decides what to do.
struct Follower {
    machine: Machine,
    /// Each receiver's client, in `--peer` order (as `machine.peers`).
    handles: Vec<PeerHandle>,
    dports: Vec<u16>,
    /// The status server (`None` with `--once`), the audit, and this
    /// host's own NIC and its closed loop with `--steer both`.
    shared: Shared,
    resolver: resolve::Resolve,
    /// With `--steer remote`: the socket hook listing the connections the
    /// steered cgroup opens, so the status can show each one's receiver CPU
    /// planned and seen (`shared.local` lists them otherwise).
    opened: Option<LocalLandings>,
    /// The closed loop over the bond members' own counters.
    member_loop: MemberLoop,
    /// This namespace's TCP sockets through sock_diag: for that loop
    /// (`tcpi_bytes_acked`) and the status's MPTCP subflows; opened on
    /// first use, or why it cannot be (said once).
    sock_diag: OnceLock<Result<crate::sock_diag::TcpDiag, crate::sock_diag::SockDiagError>>,
    /// The address each moved flow asked for, named while its spread row
    /// was there ([`status::AskedMemory`]).
    asked: std::sync::Mutex<status::AskedMemory>,
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
    let mut signals = Signals::catch()?;
    // Before anything is set up: a control socket in use stops the agent
    // with nothing to undo.
    let published = if args.once {
        None
    } else {
        let mut published =
            StatusServer::bind(&args.control()).context("the sender's control socket")?;
        if let Some(addr) = args.metrics {
            published.serve_metrics(addr)?;
        }
        Some(published)
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut states = Vec::new();
    let mut handles = Vec::new();
    let mut row = srap_common::binder::FIRST_RECEIVER_ROW;
    for (n, (peer, addrs)) in peers.iter().zip(addresses).enumerate() {
        let handle = receiver_client::watch(peer_config(args, peer)?);
        events::forward(n, &handle, tx.clone());
        let rows = addrs
            .into_iter()
            .map(|a| {
                row += 1;
                (row - 1, a)
            })
            .collect();
        let mut state = Peer::new(peer.clone(), rows);
        state.follows_name = by_name && resolve::is_name(peer);
        states.push(state);
        handles.push(handle);
    }
    drop(tx);
    let mut options = SenderOptions::from_settings(args, Vec::new())?;
    // --steer both: this host's NIC in every plan.
    options.local = local.as_ref().map(|nic| nic.model.clone());
    let mut follower = Follower {
        machine: Machine::new(states, options),
        handles,
        dports,
        shared: Shared::new(published),
        resolver,
        opened: None,
        member_loop: MemberLoop::default(),
        sock_diag: OnceLock::new(),
        asked: std::sync::Mutex::default(),
    };
    follower.publish(None);
    let limit = Duration::from_secs(args.peer_wait());
    if !follower
        .wait_first(&mut events, limit, &mut signals)
        .await?
    {
        info!("stopped before the first description: nothing was set up");
        return Ok(());
    }
    let mut binder =
        start(&follower.machine.options, object).context("setting up the port binder")?;
    if !args.once {
        // Watching before `steering active`: no connection it steers is missed.
        let toward: Vec<IpAddr> = follower.machine.options.target_addrs();
        follower.shared.local =
            local.map(|nic| LocalEnd::start(nic, PlacedEnds::Both, &binder, &toward));
        if follower.shared.local.is_none() {
            follower.opened = watch_opened(&binder.cgroup);
        }
    }
    if !args.once {
        follower.shared.path_manager =
            driver::start_path_manager(&follower.machine.options, &mut binder)?;
    }
    println!("{}", summary::describe(&binder));
    if !args.once {
        crate::notify::ready(&summary::status_line(&binder));
    }
    let first = follower.machine.start();
    follower.execute(&mut binder, first);
    if args.once {
        follower.wait_reported().await;
        return Ok(());
    }
    let mut feed = Feed::start(events).await;
    let interval = args.interval();
    // A signal and `srap-agent detach` end alike here: the stop line, and
    // the source rules removed (offline returns at once on detach).
    let _stopped = driver::run(
        &mut follower,
        &mut feed,
        &mut binder,
        interval,
        &mut signals,
    )
    .await?;
    info!(
        "{}",
        driver::stopping(&binder, &follower.machine.options, &follower.shared)
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

impl driver::Mode for Follower {
    type Event = Fed;

    fn options(&self) -> &SenderOptions {
        &self.machine.options
    }

    fn shared(&mut self) -> &mut Shared {
        &mut self.shared
    }

    /// The spread's failing addresses, this host's landings, its bonds and
    /// NICs, then the status. The bonds and NICs after the landings
    /// (offline asks its NICs before them): the landings are judged
    /// against the plan of the last second, and a learned key or a pause
    /// that re-plans in that second takes a NIC's change in without its
    /// line or a count in `local_nic_replans`. The bonds every second: a bond paused or resumed on its members'
    /// counters re-plans at once ([`Self::publish_and_judge`]), and so
    /// does a member down or up.
    fn each_second(&mut self, binder: &mut RunningBinder) {
        self.follow_failing(binder);
        driver::sample_local(self, binder);
        driver::follow_host(self, binder, HostCheck::BondsAndNics);
        self.publish_and_judge(binder);
    }

    fn replanned(&mut self, binder: &mut RunningBinder) {
        self.planned(binder, false);
    }

    fn local_key(&mut self, binder: &mut RunningBinder, model: Arc<RssModel>) {
        let actions = self.machine.on(Event::LocalKey(model));
        self.execute(binder, actions);
    }

    fn local_verdict(&mut self, binder: &mut RunningBinder, pause: bool) {
        let actions = self.machine.on(Event::LocalVerdict(pause));
        self.execute(binder, actions);
    }

    /// A receiver's event (the status published after it), the demand
    /// report, or the names resolved again (the loop waits for the
    /// answers).
    async fn on(&mut self, binder: &mut RunningBinder, event: Fed) {
        match event {
            Fed::Peer(event) => {
                let actions = self.machine.on(Event::Peer(*event));
                self.execute(binder, actions);
                self.publish(Some(binder));
            }
            Fed::Demand => {
                let actions = self.machine.on(Event::DemandTick);
                self.execute(binder, actions);
            }
            Fed::Resolve => {
                let answers = self.re_resolve().await;
                let actions = self.machine.on(Event::Resolved(answers));
                self.execute(binder, actions);
            }
        }
    }
}

impl Follower {
    /// Waits (at most `limit`) until some receiver's first description is
    /// in; false when stopped by a signal first. Says every few seconds
    /// what it is waiting on.
    async fn wait_first(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<PeerEvent>,
        limit: Duration,
        signals: &mut Signals,
    ) -> anyhow::Result<bool> {
        let names = self.machine.names();
        info!("waiting up to {limit:?} for the first RSS description from {names}");
        crate::notify::status(&format!(
            "not steering yet: waiting up to {limit:?} for the first RSS description from {names}"
        ));
        let deadline = Instant::now() + limit;
        let mut notice = tokio::time::interval(WAIT_NOTICE);
        notice.tick().await;
        while self.machine.options.targets.is_empty() {
            tokio::select! {
                () = signals.stop() => return Ok(false),
                event = events.recv() => {
                    let event = event.context("the receiver clients stopped")?;
                    // Before the binder exists the machine only says lines.
                    for action in self.machine.on(Event::Peer(event)) {
                        if let Action::Say(line) = action {
                            println!("{line}");
                        }
                    }
                    self.publish(None);
                }
                _ = tokio::time::sleep_until(deadline) => bail!(
                    "no RSS description within {limit:?} ({}); nothing was set up",
                    self.machine.statuses()
                ),
                _ = notice.tick() => info!(
                    "still waiting: {}", self.machine.statuses()
                ),
            }
        }
        Ok(true)
    }

    /// Under `--receiver-nics spread`, the receiver addresses the kernel
    /// marked failing: said, shown, and re-admitted after their back-off
    /// ([`crate::sender::spread::failing`]).
    fn follow_failing(&self, binder: &mut RunningBinder) {
        if self.machine.options.receiver_nics == crate::sender::spread::ReceiverNicsMode::Spread {
            binder.syn_fallback.follow(&binder.layout);
        }
    }

    /// Carries out `actions` in order; one that fails has the machine take
    /// back what it changed, and the rest are dropped.
    fn execute(&mut self, binder: &mut RunningBinder, actions: Vec<Action>) {
        for action in actions {
            if let Err(undo) = self.act(binder, action) {
                self.machine.undo(undo);
                return;
            }
        }
    }

    fn act(&mut self, binder: &mut RunningBinder, action: Action) -> Result<(), Undo> {
        match action {
            Action::Say(line) => println!("{line}"),
            Action::Replan(why) => self.replan(binder, why),
            Action::PlanLocal { pause } => {
                if let Err(err) = replan(binder, &self.machine.options) {
                    warn!("cannot re-plan for this host's NIC: {err}");
                    return Err(Undo::LocalPause { pause });
                }
            }
            Action::SetLocalPaused(pause) => {
                if let Some(local) = &mut self.shared.local {
                    local.set_paused(pause);
                }
            }
            Action::AfterReplan { first } => self.planned(binder, first),
            Action::Dests { undo } => {
                if !self.refill_dests(binder) {
                    return Err(undo);
                }
            }
            Action::ApplyGrant(n) => self.link(n).take_grant(binder),
            Action::ReportPlan(n) => self.link(n).report(binder, &self.dports),
            Action::ReportDemand(n) => self.link(n).report_demand(binder),
            Action::SayLanding { peer, report } => self.link(peer).say_landing(&report),
            Action::Probe(n) => probe::spawn(self.machine.peers[n].addr.clone()),
        }
        Ok(())
    }

    /// Receiver `n`'s state with its client.
    fn link(&self, n: usize) -> Link<'_> {
        Link {
            peer: &self.machine.peers[n],
            handle: &self.handles[n],
        }
    }

    /// Plans the binder again with the machine's options; a failure keeps
    /// the last plan steering.
    fn replan(&self, binder: &mut RunningBinder, why: Why) {
        let options = &self.machine.options;
        match why {
            Why::Description { peer, version } => {
                let name = &self.machine.peers[peer].addr;
                if let Err(err) =
                    timed_replan(binder, options, &format!("version {version} of {name}"))
                {
                    warn!(
                        "receiver {name} version {version}: cannot re-plan ({err}); keeping the last plan"
                    );
                }
            }
            Why::LocalKey => {
                if let Err(err) = replan(binder, options) {
                    warn!("cannot re-plan with this host's learned key: {err}");
                }
            }
            Why::Addresses => {
                if let Err(err) = timed_replan(binder, options, "the new addresses") {
                    warn!("cannot re-plan for the new addresses ({err}); keeping the plan");
                }
            }
            Why::Nics { peer } => {
                let name = &self.machine.peers[peer].addr;
                if let Err(err) = timed_replan(binder, options, &format!("the NICs of {name}")) {
                    warn!("receiver {name}: cannot re-plan for its NICs ({err}); keeping the plan");
                }
            }
        }
    }

    /// After a new plan (slots may be renumbered): paused receivers' dests
    /// out again, every grant re-applied, every plan reported; `first`: the
    /// binder's first plan, whose grants (they came before it existed) get
    /// their `grant` lines here.
    fn planned(&mut self, binder: &mut RunningBinder, first: bool) {
        self.refill_dests(binder);
        for n in 0..self.handles.len() {
            let link = self.link(n);
            link.reapply(binder, first);
            link.report(binder, &self.dports);
        }
        if let Some(local) = &self.shared.local
            && let Err(err) = local.apply_grant(binder)
        {
            warn!("{err:#}");
        }
    }

    /// The snapshot of every receiver and the binder.
    fn status(&self, binder: Option<&RunningBinder>) -> SenderStatus {
        let targets = &self.machine.options.targets;
        let mut status = self.shared.snapshot(binder, targets);
        status.receivers = self
            .machine
            .peers
            .iter()
            .enumerate()
            .map(|(n, r)| {
                let mut row = receiver_row(r, binder);
                add_receiver_nics(&mut row, self.handles.get(n), r.nic_granted.as_ref());
                row
            })
            .collect();
        // This host's closed loop lists the flows where it runs
        // (`Shared::snapshot`); the socket hook alone otherwise.
        if self.shared.local.is_none()
            && let Some(opened) = &self.opened
        {
            add_opened(&mut status, opened, targets);
        }
        let spread = binder.map_or(&[][..], |b| b.plan.spread.as_slice());
        for flow in &mut status.flows {
            seen_at_receiver(flow, &self.machine.peers, &self.handles);
        }
        let named = |flow: &SenderFlowRow| asked_of(flow, &self.machine.peers, spread);
        match self.asked.lock() {
            Ok(mut asked) => asked.name(&mut status.flows, named),
            Err(_) => status.flows.iter_mut().for_each(|f| f.asked = named(f)),
        }
        self.add_mptcp(&mut status);
        if let Some(binder) = binder {
            add_bonds(&mut status, binder, &self.member_loop);
        }
        status
    }

    /// The MPTCP connections among `status`'s flows, by the kernel's
    /// tokens (nothing to read while no flow is open).
    fn add_mptcp(&self, status: &mut SenderStatus) {
        if status.flows.is_empty() {
            return;
        }
        let Some(diag) = self.sock_diag() else {
            return;
        };
        match diag.mptcp_subflows() {
            Ok(subflows) => add_mptcp(status, &subflows),
            Err(err) => debug!("reading this host's MPTCP subflows: {err}"),
        }
    }

    /// Publishes the status, built once per tick: the bonds' members are
    /// judged on it first, and a bond that pauses or resumes re-plans, so
    /// the status is built again after.
    fn publish_and_judge(&mut self, binder: &mut RunningBinder) {
        let bonded = binder.plan.receivers.iter().any(|r| r.bond.is_some());
        if self.shared.published.is_none() && !bonded {
            return;
        }
        let mut status = self.status(Some(binder));
        if self.judge_members(binder, &status) {
            status = self.status(Some(binder));
        }
        if let Some(published) = &self.shared.published {
            published.update(status);
        }
    }

    /// Judges `status`'s bonds by their members' own counters against what
    /// the flows the driver's hash puts on them sent; a bond paused or
    /// resumed is re-planned at once (its members left out or put back).
    /// True when it re-planned (the status is then out of date).
    fn judge_members(
        &mut self,
        binder: &mut RunningBinder,
        status: &srap_status::SenderStatus,
    ) -> bool {
        if status.bonds.is_empty() {
            return false;
        }
        let Some(diag) = self.sock_diag() else {
            return false;
        };
        let connections = match diag.tcp_connections() {
            Ok(connections) => connections,
            Err(err) => {
                tracing::debug!("reading this host's connections for the bond members: {err}");
                return false;
            }
        };
        let bonds = &mut self.machine.options.bonds;
        let changes = self.member_loop.sample(status, &connections, &bonds.paused);
        if changes.is_empty() {
            return false;
        }
        for (bond, why) in changes {
            bonds.set_paused(&bond, why);
        }
        let replanned = replan_if_sources_changed(binder, &self.machine.options);
        if replanned {
            self.planned(binder, false);
        }
        replanned
    }

    /// The destinations of every receiver not paused.
    fn refill_dests(&self, binder: &mut RunningBinder) -> bool {
        let paused = self.machine.paused_rows();
        match maps::fill_dests_except(&mut binder.ebpf, &binder.plan, &paused) {
            Ok(()) => true,
            Err(err) => {
                warn!("cannot update the binder's destinations: {err}");
                false
            }
        }
    }

    /// Resolves every peer given as a name again; a failed answer keeps
    /// the last addresses (it is left out).
    async fn re_resolve(&self) -> Vec<(usize, Vec<IpAddr>)> {
        let mut answers = Vec::new();
        for (n, peer) in self.machine.peers.iter().enumerate() {
            if !peer.follows_name {
                continue;
            }
            match (self.resolver)(peer.addr.clone()).await {
                Ok(now) => answers.push((n, now)),
                Err(err) => warn!(
                    "resolving {} again: {err}; steering on toward its last addresses",
                    peer.addr
                ),
            }
        }
        answers
    }

    /// Refreshes what `srap status --sender` shows.
    /// This namespace's sock_diag socket, opened on first use; `None` (said
    /// once) where the kernel has none for TCP.
    fn sock_diag(&self) -> Option<&crate::sock_diag::TcpDiag> {
        self.sock_diag
            .get_or_init(|| {
                crate::sock_diag::TcpDiag::loaded().inspect_err(|err| {
                    warn!(
                        "bond members are not judged by their own counters and MPTCP subflows \
                         are not grouped into connections: {err}"
                    );
                })
            })
            .as_ref()
            .ok()
    }

    fn publish(&self, binder: Option<&RunningBinder>) {
        if let Some(published) = &self.shared.published {
            published.update(self.status(binder));
        }
    }

    /// `--once`: leaves only after every plan went out (bounded).
    async fn wait_reported(&self) {
        for n in 0..self.handles.len() {
            self.link(n).wait_reported(REPORT_FLUSH).await;
        }
    }
}

/// Re-plans and says so, with the time it took and the new plan's
/// summary (`for_what`: "version 3 of NAME", "the new addresses"); a
/// failure keeps the old plan steering, for the caller to report.
fn timed_replan(
    binder: &mut RunningBinder,
    options: &SenderOptions,
    for_what: &str,
) -> Result<(), SenderError> {
    let started = std::time::Instant::now();
    replan(binder, options)?;
    println!(
        "replanned for {for_what} in {} ms",
        started.elapsed().as_millis()
    );
    println!("{}", summary::describe(binder));
    Ok(())
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
