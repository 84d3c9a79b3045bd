//! The follow loop's decisions, without I/O: what each event from a
//! receiver, from this host's closed loop or from the resolver changes in
//! the receivers' state and in the binder's options, and what the loop
//! must then do ([`Action`]s, which [`super::Follower`] carries out on the
//! binder's maps, the receivers' clients and stdout).
//!
//! Kept apart from the maps and sockets (as [`crate::tracker`] is) so every
//! transition — receiver away and back, a new description version, a grant
//! before and after its model, a learned key, the closed loop pausing and
//! resuming — is unit-tested without root or a kernel. Tracing logs stay
//! here (they say why a decision was made); the `println!` lines the
//! documentation shows are [`Action::Say`], so tests read them too.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use srap_common::{
    rss::{KeySource, RssModel},
    wire::{CpuGrant, LandingReport, LandingVerdict, NicGrants, ReceiverNics},
};
use tracing::{info, warn};

use super::events::{Event as PeerEvent, What};
use crate::{
    receiver_client::{PeerStatus, Update},
    sender::{
        options::SenderOptions,
        resolve,
        spread::{self, ReceiverNicsMode, SpreadPeer},
        target::Target,
    },
};

/// One followed receiver agent as the loop knows it: the binder rows of
/// its addresses, and its own description, model, grant and landing
/// verdict (its client lives in the loop's shell).
#[derive(Debug, Clone)]
pub struct Peer {
    /// `HOST:PORT` as given to `--peer`.
    pub addr: String,
    /// Binder row and address of each receiver address steered for it.
    pub rows: Vec<(u32, IpAddr)>,
    /// Its last description (`None` until the first).
    pub current: Option<Update>,
    pub model: Option<Arc<RssModel>>,
    pub granted: Option<CpuGrant>,
    /// Its grant on each of its NICs (protocol 9, a receiver of several
    /// NICs): a row toward an address of a NIC named there takes that
    /// NIC's grant, every other row [`Self::granted`].
    pub nic_granted: Option<NicGrants>,
    /// Its landings contradict its description: its destinations are out.
    pub paused: bool,
    pub status: PeerStatus,
    /// Away since its last session ended (reconnection attempts do not
    /// change it; a new session does).
    pub away: bool,
    /// Why its last session or attempt ended.
    pub last_reason: Option<String>,
    /// Its `--peer` is a name, resolved again periodically.
    pub follows_name: bool,
    /// Its last report of its NICs and listeners (protocol 8).
    pub nics: Option<ReceiverNics>,
    /// Under `--receiver-nics spread`: binder row and address of each of
    /// its other addresses that a listener accepts on
    /// ([`spread::extra_addrs`]), planned as destinations of their own.
    pub extra: Vec<(u32, IpAddr)>,
    /// Under `--receiver-nics spread`: each address's model, from the
    /// description of the NIC that holds it ([`spread::nic_models`]).
    pub nic_models: BTreeMap<IpAddr, Arc<RssModel>>,
}

impl Peer {
    pub fn new(addr: String, rows: Vec<(u32, IpAddr)>) -> Self {
        Self {
            addr,
            rows,
            current: None,
            model: None,
            granted: None,
            nic_granted: None,
            paused: false,
            status: PeerStatus::Connecting,
            away: false,
            last_reason: None,
            follows_name: false,
            nics: None,
            extra: Vec::new(),
            nic_models: BTreeMap::new(),
        }
    }

    /// Binder row and address of each of its addresses planned: those
    /// asked for, then those it spreads over.
    pub fn all_rows(&self) -> impl Iterator<Item = &(u32, IpAddr)> {
        self.rows.iter().chain(&self.extra)
    }

    /// Its rows of the binder's per-receiver maps.
    pub fn row_set(&self) -> BTreeSet<u32> {
        self.all_rows().map(|(i, _)| *i).collect()
    }

    /// The grant of the NIC that holds `addr`, when the receiver granted
    /// that NIC's CPUs apart (protocol 9); its one grant otherwise.
    pub fn grant_for(&self, addr: IpAddr) -> Option<CpuGrant> {
        let nic = self.nics.as_ref().and_then(|n| n.nic_of(addr));
        nic.zip(self.nic_granted.as_ref())
            .and_then(|(nic, grants)| grants.of(&nic.name))
            .or_else(|| self.granted.clone())
    }

    /// Each of its rows with the grant it takes ([`Self::grant_for`]).
    pub fn row_grants(&self) -> BTreeMap<u32, Option<CpuGrant>> {
        self.all_rows()
            .map(|(row, addr)| (*row, self.grant_for(*addr)))
            .collect()
    }

    /// Says once when it goes away (not at every failed reconnection) and
    /// when it is back.
    pub fn on_status(&mut self, now: PeerStatus) {
        match &now {
            PeerStatus::Away(reason) if !self.away => match &self.current {
                Some(current) => warn!(
                    "receiver {} is away ({reason}): steering on with the plan for version {}",
                    self.addr, current.version
                ),
                None => warn!("receiver {} is away ({reason})", self.addr),
            },
            PeerStatus::Connected if self.away => info!("receiver {} is back", self.addr),
            _ => {}
        }
        match &now {
            PeerStatus::Away(reason) => {
                self.away = true;
                self.last_reason = Some(reason.clone());
            }
            PeerStatus::Connected => self.away = false,
            PeerStatus::Connecting => {}
        }
        self.status = now;
    }
}

/// What reaches the loop.
#[derive(Debug, Clone)]
pub enum Event {
    /// What changed at one receiver (its client's channels).
    Peer(PeerEvent),
    /// This host's closed loop learned the key its NIC really hashes with.
    LocalKey(Arc<RssModel>),
    /// This host's closed loop changed its verdict: pause local steering
    /// (`true`) or resume it.
    LocalVerdict(bool),
    /// The peers given as names, resolved again: each one's position and
    /// addresses now (a failed resolution is left out).
    Resolved(Vec<(usize, Vec<IpAddr>)>),
    /// Time to tell every planned receiver the flows held toward it.
    DemandTick,
}

/// Why the binder is planned again ([`Action::Replan`]); its failure keeps
/// the last plan, and the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Receiver `peer`'s description `version` made a new model.
    Description { peer: usize, version: u64 },
    /// This host's NIC's learned key, in force in the joint plan.
    LocalKey,
    /// A peer's name resolves to other addresses.
    Addresses,
    /// Receiver `peer` reported other NICs or listeners
    /// (`--receiver-nics spread`).
    Nics { peer: usize },
}

/// What a failed action takes back (then the rest of its list is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// The landing verdict that paused (or resumed) `peer`: `was` again.
    Landing { peer: usize, was: bool },
    /// This host's NIC out of (`pause`) or back in the plan.
    LocalPause { pause: bool },
}

/// What the loop's shell does, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A line on stdout.
    Say(String),
    /// Plan the binder again with [`Machine::options`].
    Replan(Why),
    /// Plan again with this host's NIC out of (or back in) the plan; on
    /// failure [`Undo::LocalPause`].
    PlanLocal { pause: bool },
    /// Tell this host's closed loop its steering is now paused (resumed).
    SetLocalPaused(bool),
    /// After a new plan (slots may be renumbered): the destinations of
    /// receivers not paused, every grant again (`first`: the binder's
    /// first plan, whose grants get their `grant` lines then), every plan
    /// reported, this host's CPU offer.
    AfterReplan { first: bool },
    /// Only the destinations, the paused receivers' out; on failure `undo`.
    Dests { undo: Undo },
    /// Receiver `peer`'s new grant into its rows.
    ApplyGrant(usize),
    /// Hand receiver `peer` its part of the plan.
    ReportPlan(usize),
    /// Tell receiver `peer` the flows the binder holds toward it.
    ReportDemand(usize),
    /// Say what receiver `peer`'s landing verdict changed.
    SayLanding { peer: usize, report: LandingReport },
    /// Probe receiver `peer` so its landings teach it its device's key.
    Probe(usize),
}

/// The follow loop's state: the receivers and the binder's options they
/// make.
pub struct Machine {
    pub peers: Vec<Peer>,
    /// What the binder is planned with: every planned receiver's targets,
    /// and this host's NIC with `--steer both` unless paused.
    pub options: SenderOptions,
    /// This host's NIC's model with `--steer both` (out of `options`
    /// while local steering is paused).
    pub both: Option<Arc<RssModel>>,
    /// The binder exists (a first description came).
    started: bool,
}

impl Machine {
    pub fn new(peers: Vec<Peer>, options: SenderOptions) -> Self {
        Self {
            peers,
            both: options.local.clone(),
            options,
            started: false,
        }
    }

    /// The binder was set up with [`Self::options`]: its first plan.
    pub fn start(&mut self) -> Vec<Action> {
        self.started = true;
        vec![Action::AfterReplan { first: true }]
    }

    /// Takes `event`; returns what the shell must do.
    pub fn on(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Peer(event) if !self.started => self.before_start(event),
            Event::Peer(PeerEvent { peer, what }) => match what {
                What::Update(update) => self.on_update(peer, update),
                What::Grant(grant) => self.on_grant(peer, grant),
                What::Landing(report) => self.on_landing(peer, report),
                What::Status(status) => {
                    if let Some(receiver) = self.peers.get_mut(peer) {
                        receiver.on_status(status);
                    }
                    Vec::new()
                }
                What::Nics(nics) => self.on_nics(peer, nics),
                What::NicGrants(grants) => self.on_nic_grants(peer, grants),
            },
            Event::LocalKey(model) => self.on_local_key(model),
            Event::LocalVerdict(pause) => self.on_local_verdict(pause),
            Event::Resolved(answers) => self.on_resolved(answers),
            Event::DemandTick => (0..self.peers.len())
                .filter(|n| self.peers[*n].model.is_some())
                .map(Action::ReportDemand)
                .collect(),
        }
    }

    /// Takes back what a failed action had changed.
    pub fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Landing { peer, was } => {
                if let Some(receiver) = self.peers.get_mut(peer) {
                    receiver.paused = was;
                }
            }
            Undo::LocalPause { pause } => {
                self.options.local = if pause { self.both.clone() } else { None };
            }
        }
    }

    /// The rows of every paused receiver (out of the destinations).
    pub fn paused_rows(&self) -> BTreeSet<u32> {
        self.peers
            .iter()
            .filter(|r| r.paused)
            .flat_map(|r| r.all_rows().map(|(i, _)| *i))
            .collect()
    }

    /// An event before the binder exists: descriptions and grants are kept.
    fn before_start(&mut self, event: PeerEvent) -> Vec<Action> {
        let n = event.peer;
        let mut says = Vec::new();
        let Some(receiver) = self.peers.get_mut(n) else {
            return says;
        };
        match event.what {
            What::Update(update) => {
                if self.take_description(n, update, &mut says) {
                    self.options.targets = self.targets();
                }
            }
            What::Grant(grant) => receiver.granted = Some(grant),
            What::Status(status) => receiver.status = status,
            What::Landing(_) => {}
            What::Nics(nics) => {
                let _ = self.on_nics(n, nics);
            }
            What::NicGrants(grants) => receiver.nic_granted = grants,
        }
        says
    }

    /// A description from receiver `n`: re-planned when it changed (or is
    /// its first), reported either way.
    fn on_update(&mut self, n: usize, update: Update) -> Vec<Action> {
        let mut actions = Vec::new();
        if n >= self.peers.len() {
            return actions;
        }
        let version = update.version;
        let key = update.key;
        if self.take_description(n, update, &mut actions) {
            self.options.targets = self.targets();
            if key.source == KeySource::Learned {
                info!(
                    "receiver {} version {version}: planning with a key it learned from \
                     landings (model {}; {}{})",
                    self.peers[n].addr,
                    key.revision,
                    key.confidence,
                    if key.confidence.complete() {
                        ""
                    } else {
                        "; not every bit planning needs is known yet: its landings will tell"
                    }
                );
            }
            actions.push(Action::Replan(Why::Description { peer: n, version }));
            // The refilled maps steer toward `n` again: its new
            // description gets its own verdict.
            let was_paused = std::mem::replace(&mut self.peers[n].paused, false);
            actions.push(Action::AfterReplan { first: false });
            if was_paused {
                actions.push(self.resumed_on(n, version));
            }
        } else {
            info!(
                "receiver {} version {version}: same description, plan unchanged ({key})",
                self.peers[n].addr
            );
            if self.peers[n].current.is_some() {
                actions.push(Action::ReportPlan(n));
            }
        }
        actions
    }

    /// Records receiver `n`'s description; true when its model changed (a
    /// new plan is needed). A description equal to another receiver's
    /// shares that receiver's model, so their layouts are shared too.
    fn take_description(&mut self, n: usize, update: Update, says: &mut Vec<Action>) -> bool {
        let same = self.peers[n]
            .current
            .as_ref()
            .is_some_and(|c| c.description == update.description);
        if same {
            self.peers[n].current = Some(update);
            return false;
        }
        let shared = self
            .peers
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
                        self.peers[n].addr, update.version
                    );
                    return false;
                }
            },
        };
        let receiver = &mut self.peers[n];
        if receiver.current.is_none() {
            says.push(Action::Say(format!(
                "receiver description version {} from {}",
                update.version, receiver.addr
            )));
        }
        receiver.model = Some(model);
        receiver.current = Some(update);
        true
    }

    /// Every receiver with a model, at each of its addresses.
    pub fn targets(&self) -> Vec<Target> {
        self.peers
            .iter()
            .flat_map(|r| {
                r.model.iter().flat_map(|model| {
                    r.all_rows().map(|(index, addr)| Target {
                        index: *index,
                        addr: *addr,
                        model: r.nic_models.get(addr).unwrap_or(model).clone(),
                    })
                })
            })
            .collect()
    }

    /// Receiver `n`'s NICs and listeners. Under `--receiver-nics spread` a
    /// change of what the plan is made of ([`spread::same_plan`]: not a
    /// verifier's new verdict) re-plans at once: each accepting address on its own row
    /// with its NIC's model, and the spread rows made again (a NIC gone
    /// down or an address no longer accepting leaves them); under `asked`
    /// the report is only kept.
    fn on_nics(&mut self, n: usize, nics: ReceiverNics) -> Vec<Action> {
        let spread = self.options.receiver_nics == ReceiverNicsMode::Spread;
        let taken: BTreeSet<u32> = self.peers.iter().flat_map(Peer::row_set).collect();
        let Some(peer) = self.peers.get_mut(n) else {
            return Vec::new();
        };
        let planned_same = peer
            .nics
            .as_ref()
            .is_some_and(|old| spread::same_plan(old, &nics));
        if planned_same || !spread {
            let regrant = peer.nic_granted.is_some()
                && peer.model.is_some()
                && peer.nics.as_ref() != Some(&nics);
            peer.nics = Some(nics);
            // Which NIC holds each address may have changed: so may the
            // grant of its row.
            return if regrant && self.started {
                vec![Action::ApplyGrant(n)]
            } else {
                Vec::new()
            };
        }
        let asked: Vec<IpAddr> = peer.rows.iter().map(|(_, a)| *a).collect();
        let want = spread::extra_addrs(&asked, &nics);
        if want.is_empty() {
            peer.extra.clear();
        } else if let Some(extra) = resolve::reassign(&peer.extra, &want, &taken) {
            peer.extra = extra;
        }
        peer.nic_models = spread::nic_models(&nics);
        peer.nics = Some(nics);
        let planned = peer.model.is_some();
        self.options.targets = self.targets();
        self.options.spread = self.spread_peers();
        if !self.started || !planned {
            return Vec::new();
        }
        vec![
            Action::Replan(Why::Nics { peer: n }),
            Action::AfterReplan { first: false },
        ]
    }

    /// Each receiver that reported its NICs, with the addresses asked for.
    fn spread_peers(&self) -> Vec<SpreadPeer> {
        self.peers
            .iter()
            .filter_map(|p| {
                p.nics.as_ref().map(|nics| SpreadPeer {
                    asked: p.rows.iter().map(|(_, a)| *a).collect(),
                    nics: nics.clone(),
                })
            })
            .collect()
    }

    /// A grant from receiver `n`: applied when new (and its plan exists);
    /// the demand is told either way (the grant acknowledges it).
    fn on_grant(&mut self, n: usize, grant: CpuGrant) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(receiver) = self.peers.get_mut(n) else {
            return actions;
        };
        if receiver.granted.as_ref() != Some(&grant) {
            receiver.granted = Some(grant);
            if receiver.model.is_some() {
                actions.push(Action::ApplyGrant(n));
            }
        }
        if receiver.model.is_some() {
            actions.push(Action::ReportDemand(n));
        }
        actions
    }

    /// Receiver `n`'s grants per NIC (`None`: none this session): applied
    /// when new (and its plan exists), each row with its NIC's.
    fn on_nic_grants(&mut self, n: usize, grants: Option<NicGrants>) -> Vec<Action> {
        let Some(receiver) = self.peers.get_mut(n) else {
            return Vec::new();
        };
        if receiver.nic_granted == grants {
            return Vec::new();
        }
        receiver.nic_granted = grants;
        if receiver.model.is_some() {
            vec![Action::ApplyGrant(n), Action::ReportDemand(n)]
        } else {
            Vec::new()
        }
    }

    /// A paused receiver's new description resumes steering toward it: the
    /// pause was said, so its end is too (its landings judge the new one).
    fn resumed_on(&self, n: usize, version: u64) -> Action {
        let addr = &self.peers[n].addr;
        info!(
            "receiver {addr} version {version}: steering resumed with its new description \
             (its landings will judge it)"
        );
        Action::Say(format!(
            "steering resumed: receiver {addr} sent description version {version}"
        ))
    }

    /// The closed loop, sender side: stops steering toward a receiver whose
    /// landings contradict the description it planned with (new connections
    /// to it get kernel ports; the others steer on), and steers toward it
    /// again when it reports agreement. A verdict on another version than
    /// the one planned with is stale.
    fn on_landing(&mut self, n: usize, report: LandingReport) -> Vec<Action> {
        let Some(receiver) = self.peers.get_mut(n) else {
            return Vec::new();
        };
        if receiver.current.as_ref().map(|c| c.version) != Some(report.version) {
            return Vec::new();
        }
        let was = receiver.paused;
        let wanted = match report.verdict {
            LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => true,
            LandingVerdict::Agreed => false,
            _ => was,
        };
        if wanted == was {
            return Vec::new();
        }
        receiver.paused = wanted;
        let mut actions = vec![
            Action::Dests {
                undo: Undo::Landing { peer: n, was },
            },
            Action::SayLanding { peer: n, report },
        ];
        if report.verdict == LandingVerdict::Contradicted {
            // Landings teach the receiver its device's real key.
            actions.push(Action::Probe(n));
        }
        actions
    }

    /// This host's learned key: the joint plan's local end when in force
    /// (while paused it is only kept for resuming).
    fn on_local_key(&mut self, learned: Arc<RssModel>) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.options.local.is_some() {
            self.options.local = Some(learned.clone());
            actions.push(Action::Replan(Why::LocalKey));
            actions.push(Action::AfterReplan { first: false });
        }
        self.both = Some(learned);
        actions
    }

    /// This host's closed loop's verdict: the plan made again without (or
    /// with) this host's NIC.
    fn on_local_verdict(&mut self, pause: bool) -> Vec<Action> {
        let Some(model) = self.both.clone() else {
            return Vec::new();
        };
        self.options.local = (!pause).then_some(model);
        vec![
            Action::PlanLocal { pause },
            Action::SetLocalPaused(pause),
            Action::AfterReplan { first: false },
        ]
    }

    /// New addresses of peers given as names: a changed set is planned for
    /// (kept addresses keep their binder rows). An empty answer keeps the
    /// last addresses.
    fn on_resolved(&mut self, answers: Vec<(usize, Vec<IpAddr>)>) -> Vec<Action> {
        let mut actions = Vec::new();
        for (n, now) in answers {
            if !self.peers.get(n).is_some_and(|p| p.follows_name) {
                continue;
            }
            let taken: BTreeSet<u32> = self.peers.iter().flat_map(Peer::row_set).collect();
            if let Some(rows) = resolve::reassign(&self.peers[n].rows, &now, &taken) {
                let addrs: Vec<String> = rows.iter().map(|(_, a)| a.to_string()).collect();
                actions.push(Action::Say(format!(
                    "{} now resolves to {}",
                    self.peers[n].addr,
                    addrs.join(" ")
                )));
                self.peers[n].rows = rows;
            }
        }
        if !actions.is_empty() {
            self.options.targets = self.targets();
            self.options.spread = self.spread_peers();
            actions.push(Action::Replan(Why::Addresses));
            actions.push(Action::AfterReplan { first: false });
        }
        actions
    }

    /// The receivers' names, for the wait's log lines.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.peers.iter().map(|r| r.addr.as_str()).collect();
        names.join(", ")
    }

    /// Each receiver's link, for the wait's log lines.
    pub fn statuses(&self) -> String {
        let texts: Vec<String> = self
            .peers
            .iter()
            .map(|r| format!("receiver {}: {}", r.addr, status_text(&r.status)))
            .collect();
        texts.join("; ")
    }
}

/// A receiver's link while the loop waits for a first description.
pub fn status_text(status: &PeerStatus) -> String {
    match status {
        PeerStatus::Connecting => "connecting".into(),
        PeerStatus::Connected => "connected, no description yet".into(),
        PeerStatus::Away(reason) => format!("last attempt: {reason}"),
    }
}

#[cfg(test)]
mod tests;
