//! Learning the key a device really hashes with, from the landings seen
//! (the math: [`srap_common::rss::KeyLearner`]). One home for both ends
//! that learn: the receiver agent's NIC, from what its observer sees of
//! senders' flows (`crate::receiver::monitor`), and the sender's own NIC
//! with `--steer local|both`, from what its socket hook sees of the
//! connections the steered cgroup opens (`crate::sender::local_end`, a
//! learner facing [`End::Local`]: the device hashes the reverse tuple).
//!
//! What is learned: the Toeplitz key, starting from the candidate discovery
//! gives (the driver's key, or the kernel's default when the driver reports
//! none), with exactly the bits the landings force changed. Per what: the
//! address pairs and destination ports of the flows seen; the learned key is
//! exact for every port the connecting host may choose toward a (connecting
//! host, server, port) whose landings span that port's 16 bits (about 20
//! flows with kernel-chosen ports: the sender agents' probe connections or
//! a paused sender's own connections, or any workload), and
//! [`KeyLearner::covers`] says which. From how much: at least
//! [`MIN_LANDINGS`] landings on at least two queues, none contradicting
//! another.
//!
//! Served: a learned key that differs from the candidate becomes a new
//! description (key source `learned`, a new revision of the learned model:
//! [`LearnedKey`]), which the closed loop then judges like any other; the
//! status says from how many landings, at what rank, for which flows. Every
//! sample also counts how far the landings back the key being served
//! ([`KeyConfidence`]: recent landings on the queue it computes, the rank,
//! and what planning the flow groups seen needs against what the landings
//! determine). Invalidated: when discovery's candidate, table, fields or
//! transform change (learning starts over), and when landings contradict
//! each other (a device that stopped hashing so, or RSS turned off and on:
//! the history is dropped and learning starts over).

use std::{
    collections::{BTreeSet, HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use srap_common::{
    port_range::PortRange,
    rss::{
        End, FieldsError, FlowTuple, HashFields, InputXfrm, KeyConfidence, KeyError, KeyLearner,
        KeyProvenance, KeySource, LearnError, RssDescription, RssModel, ToeplitzKey, UnknownXfrm,
    },
};
use srap_status::LearningRow;
use thiserror::Error;
use tracing::{info, warn};

/// Landings needed before anything learned is served.
pub const MIN_LANDINGS: u32 = 20;
/// Flows remembered as already taken (a flow is taken once).
const MAX_SEEN: usize = 65_536;
/// (connecting host, server, port) triples whose coverage the status lists.
const MAX_COVERED: usize = 16;
/// Landings the served key is tested against (the most recent).
const MAX_TESTED: usize = 1024;

/// One flow and the receive queue it landed on, given as the connecting
/// host opened it (`src` is that host and the port it chose), whichever
/// end the learning device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub queue: u32,
}

/// What is served now: the description (with a learned key, if one is
/// applied), where its key comes from, and discovery's own key (the
/// candidate learning starts from).
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    pub description: &'a RssDescription,
    pub key: KeyProvenance,
    pub candidate_key: &'a str,
}

/// What a learner hands whoever serves the description.
#[derive(Debug, Clone, Default)]
struct Lesson {
    /// A learned key and the candidate it replaces.
    key: Option<(String, String)>,
    /// Grows with every change of `key`: the learned model's revision.
    revision: u32,
    /// How far the landings back a key, and that key: a description
    /// with another key (a new one, just read) is not tested yet.
    confidence: Option<(String, KeyConfidence)>,
}

/// A key learned from landings for one candidate, served in its place
/// while discovery still gives that candidate, and the landings' backing
/// of whatever key is served. Shared between the learner and whoever
/// applies it (the receiver's description watcher, the sender's own end).
#[derive(Debug, Clone, Default)]
pub struct LearnedKey(Arc<Mutex<Lesson>>);

impl LearnedKey {
    /// Serve `key` instead of `candidate` (None: serve the candidate); a
    /// change is a new revision of the learned model.
    pub fn set(&self, learned: Option<(String, String)>) {
        let mut lesson = self.lock();
        if lesson.key != learned {
            lesson.key = learned;
            lesson.revision += 1;
        }
    }

    /// How far the landings back `key`, the key served now.
    pub fn set_confidence(&self, key: &str, confidence: KeyConfidence) {
        self.lock().confidence = Some((key.to_owned(), confidence));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lesson> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a learned key (if it is for this candidate) into `description`
    /// and says so, with the model's revision and confidence, in `key`.
    pub fn applied(&self, description: &mut RssDescription, key: &mut KeyProvenance) {
        let lesson = self.lock();
        if let Some((candidate, learned)) = lesson.key.as_ref()
            && *candidate == description.key
        {
            description.key.clone_from(learned);
            key.source = KeySource::Learned;
        }
        key.revision = lesson.revision;
        key.confidence = lesson
            .confidence
            .as_ref()
            .filter(|(tested, _)| *tested == description.key)
            .map(|(_, confidence)| *confidence)
            .unwrap_or_default();
    }
}

/// What learning starts from: discovery's description but for a learned key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Basis {
    candidate: String,
    indir: Vec<u32>,
    fields: (String, String),
    xfrm: String,
}

impl Basis {
    fn of(served: &Served<'_>) -> Self {
        let d = served.description;
        Self {
            candidate: served.candidate_key.to_owned(),
            indir: d.indir.clone(),
            fields: (d.fields.tcp4.clone(), d.fields.tcp6.clone()),
            xfrm: d.input_xfrm.clone(),
        }
    }

    fn learner(&self, end: End, ports: PortRange) -> Result<KeyLearner, BasisError> {
        let fields = |f: &str| f.parse::<HashFields>();
        let xfrm: InputXfrm = self.xfrm.parse()?;
        let key = ToeplitzKey::parse_hex(&self.candidate)?;
        let learner = KeyLearner::new(
            &self.indir,
            (fields(&self.fields.0)?, fields(&self.fields.1)?),
            xfrm,
            key.as_bytes(),
        )?;
        Ok(learner.facing(end).choosing(ports))
    }
}

/// Why a basis gives no learner.
#[derive(Debug, Error)]
enum BasisError {
    #[error(transparent)]
    Fields(#[from] FieldsError),
    #[error(transparent)]
    Xfrm(#[from] UnknownXfrm),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Table(#[from] LearnError),
}

/// A device's learner, fed every sample.
#[derive(Debug)]
pub struct Learning {
    /// Which end of the flows the device is.
    end: End,
    /// The ports planning for the device chooses from (see
    /// [`Learning::choosing`]).
    ports: PortRange,
    /// What the log adds to `the RSS key`: nothing for the receiver's
    /// NIC, ` of this host's NIC eth0` for the sender's own.
    of: String,
    basis: Option<Basis>,
    learner: Option<KeyLearner>,
    /// Why there is no learner for this basis.
    unable: Option<String>,
    seen: HashSet<(SocketAddr, SocketAddr)>,
    /// The most recent landings, each flow once: what the served key's
    /// confidence counts.
    tested: VecDeque<(FlowTuple, u32)>,
    queues: BTreeSet<u32>,
    triples: BTreeSet<(SocketAddr, SocketAddr)>,
    served: Option<String>,
    said: Option<String>,
    learned: LearnedKey,
}

impl Learning {
    /// A learner for the device at `end` of the flows it is shown, which
    /// serves what it learns through `learned` (the handle whoever serves
    /// the description applies); its log says whose key with `of` (see
    /// [`Learning::of_this_host`]).
    pub fn new(learned: LearnedKey, end: End, of: impl Into<String>) -> Self {
        Self {
            end,
            ports: PortRange::DEFAULT,
            of: of.into(),
            basis: None,
            learner: None,
            unable: None,
            seen: HashSet::new(),
            tested: VecDeque::new(),
            queues: BTreeSet::new(),
            triples: BTreeSet::new(),
            served: None,
            said: None,
            learned,
        }
    }

    /// The same learning for a planner that chooses ports from `ports`
    /// only (the sender's own NIC: its `--port-range`), so how far the
    /// landings back a key counts what placing those ports needs
    /// ([`KeyLearner::choosing`]). A receiver does not know its senders'
    /// ranges and counts every port.
    pub fn choosing(mut self, ports: PortRange) -> Self {
        self.ports = ports;
        self
    }

    /// What the log adds for this host's own NIC `nic`.
    pub fn of_this_host(nic: &str) -> String {
        format!(" of this host's NIC {nic}")
    }

    /// Takes a sample's landings, judged against what is served (`model`:
    /// the served description's model facing this learner's end, if
    /// valid), and hands the server how far they back the served key.
    pub fn observe(
        &mut self,
        served: &Served<'_>,
        model: Option<&RssModel>,
        landed: &[Landed],
    ) -> LearningRow {
        let basis = Basis::of(served);
        if self.basis.as_ref() != Some(&basis) {
            self.restart(basis);
        }
        for landing in landed {
            self.take(*landing);
        }
        self.decide(served);
        // The key served from now on: what was served, unless this
        // sample's decision changed it.
        let serving = self
            .served
            .as_deref()
            .unwrap_or(served.candidate_key)
            .to_owned();
        let confidence = if serving == served.description.key {
            self.confidence(model)
        } else {
            let description = RssDescription {
                key: serving.clone(),
                ..served.description.clone()
            };
            let model = RssModel::from_description(&description)
                .ok()
                .map(|m| m.facing(self.end));
            self.confidence(model.as_ref())
        };
        self.learned.set_confidence(&serving, confidence);
        self.row(served, confidence)
    }

    /// How far the landings back the served key: how many of the recent
    /// ones it puts on their queue, and what of the key planning the flow
    /// groups seen needs the landings determine.
    fn confidence(&self, model: Option<&RssModel>) -> KeyConfidence {
        let agreeing = model.map_or(0, |model| {
            self.tested
                .iter()
                .filter(|(tuple, queue)| model.landing(tuple).queue == *queue)
                .count()
        });
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let mut confidence = KeyConfidence {
            tested: count(self.tested.len()),
            agreeing: count(agreeing),
            ..KeyConfidence::default()
        };
        if let Some(learner) = &self.learner {
            let groups: Vec<FlowTuple> = self
                .triples
                .iter()
                .filter_map(|(src, dst)| FlowTuple::from_sockets(*src, *dst).ok())
                .collect();
            (confidence.needed, confidence.known) = learner.needs(&groups);
            confidence.rank = count(learner.solve().rank);
        }
        confidence
    }

    fn restart(&mut self, basis: Basis) {
        match basis.learner(self.end, self.ports) {
            Ok(learner) => {
                self.learner = Some(learner);
                self.unable = None;
            }
            Err(why) => {
                self.learner = None;
                self.unable = Some(why.to_string());
            }
        }
        self.basis = Some(basis);
        self.forget();
        if self.served.take().is_some() {
            self.learned.set(None);
        }
    }

    fn forget(&mut self) {
        self.seen.clear();
        self.tested.clear();
        self.queues.clear();
        self.triples.clear();
        if let (Some(basis), Some(_)) = (&self.basis, &self.learner) {
            self.learner = basis.learner(self.end, self.ports).ok();
        }
    }

    fn take(&mut self, landed: Landed) {
        let Landed { src, dst, queue } = landed;
        if !self.seen.insert((src, dst)) {
            return;
        }
        if self.seen.len() > MAX_SEEN {
            self.seen.clear();
        }
        let Ok(tuple) = FlowTuple::from_sockets(src, dst) else {
            return;
        };
        if self.tested.len() == MAX_TESTED {
            self.tested.pop_front();
        }
        self.tested.push_back((tuple, queue));
        let Some(learner) = self.learner.as_mut() else {
            return;
        };
        if learner.observe(&tuple, queue) {
            self.queues.insert(queue);
            let pair = (SocketAddr::new(src.ip(), 0), dst);
            if self.triples.len() < MAX_COVERED || self.triples.contains(&pair) {
                self.triples.insert(pair);
            }
        }
    }

    /// Serves a learned key once the landings are enough and agree.
    fn decide(&mut self, served: &Served<'_>) {
        let Some(learner) = self.learner.as_ref() else {
            return;
        };
        let learned = learner.solve();
        if learned.conflicts > 0 {
            self.say(format!(
                "{} of {} landings contradict the others: the device does not hash with \
                 Toeplitz over this table (or its RSS changed); learning starts over",
                learned.conflicts, learned.landings
            ));
            self.forget();
            return;
        }
        if learned.landings < MIN_LANDINGS {
            return;
        }
        if self.queues.len() < 2 {
            self.say(format!(
                "all {} landings on one queue: the device's RSS looks off; nothing learned",
                learned.landings
            ));
            return;
        }
        let key = learned.key.to_string();
        if learned.candidate_agrees {
            if self.served.take().is_some() {
                self.learned.set(None);
            }
            self.say(format!(
                "{} landings confirm the key ({})",
                learned.landings, served.key.source
            ));
        } else if self.served.as_deref() != Some(key.as_str()) {
            info!(
                "the landings of {} flows (rank {}) contradict the key{} ({}); serving the key \
                 they teach: {key}",
                learned.landings, learned.rank, self.of, served.key.source
            );
            self.learned
                .set(Some((served.candidate_key.to_owned(), key.clone())));
            self.served = Some(key);
        }
    }

    /// Logs `text` once until it changes.
    fn say(&mut self, text: String) {
        if self.said.as_deref() != Some(text.as_str()) {
            if text.contains("contradict") || text.contains("off") {
                warn!("learning the RSS key{}: {text}", self.of);
            } else {
                info!("learning the RSS key{}: {text}", self.of);
            }
            self.said = Some(text);
        }
    }

    fn row(&self, served: &Served<'_>, confidence: KeyConfidence) -> LearningRow {
        let Some(learner) = self.learner.as_ref() else {
            return LearningRow {
                key_source: served.key.source.to_string(),
                source: served.key.source,
                revision: served.key.revision,
                confidence,
                note: self.unable.clone().unwrap_or_default(),
                ..LearningRow::default()
            };
        };
        let learned = learner.solve();
        let covered = self
            .triples
            .iter()
            .filter_map(|(src, dst)| {
                let coverage = learner.covers(&FlowTuple::from_sockets(*src, *dst).ok()?);
                let ports = match (coverage.below_32768, coverage.from_32768) {
                    (true, true) => "every source port",
                    (true, false) => "source ports below 32768",
                    (false, true) => "source ports from 32768",
                    (false, false) => return None,
                };
                Some(format!("{} → {dst} ({ports})", src.ip()))
            })
            .collect();
        LearningRow {
            key_source: served.key.source.to_string(),
            source: served.key.source,
            landings: learned.landings,
            conflicts: learned.conflicts,
            rank: u32::try_from(learned.rank).unwrap_or(u32::MAX),
            candidate_agrees: learned.candidate_agrees,
            revision: served.key.revision,
            confidence,
            covered,
            note: self.said.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use srap_common::rss::embedded_default;

    use super::*;

    fn record(sport: u16, dport: u16, queue: u32) -> Landed {
        Landed {
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), sport),
            dst: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), dport),
            queue,
        }
    }

    /// A description as its server holds it.
    #[derive(Clone)]
    struct HeldDescription {
        description: RssDescription,
        key: KeyProvenance,
        candidate_key: String,
    }

    impl HeldDescription {
        fn view(&self) -> Served<'_> {
            Served {
                description: &self.description,
                key: self.key,
                candidate_key: &self.candidate_key,
            }
        }
    }

    fn served(key: &str) -> HeldDescription {
        let description = RssDescription {
            key: key.into(),
            indir: (0..128).map(|i| i % 4).collect(),
            ..embedded_default()
        };
        HeldDescription {
            candidate_key: description.key.clone(),
            description,
            key: KeyProvenance::default(),
        }
    }

    /// `n` flows from random source ports (xorshift from `seed`, from
    /// `low` up, over 28232 ports) to port 5201, each on the queue the
    /// `device` puts it.
    fn landed(device: &RssModel, seed: u32, n: usize, low: u16) -> Vec<Landed> {
        let mut rng = srap_common::xorshift::XorShift32::new(seed);
        (0..n)
            .map(|_| {
                let sport = rng.port(low, 28_232);
                let tuple = FlowTuple::new(
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                    sport,
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    5201,
                )
                .expect("tuple");
                record(sport, 5201, device.landing(&tuple).queue)
            })
            .collect()
    }

    /// What the receiver serves after `learning` saw some landings: the
    /// description with the learned key (if any) and its provenance.
    fn after(handle: &LearnedKey, published: &HeldDescription) -> (RssDescription, KeyProvenance) {
        let mut description = published.description.clone();
        let mut key = published.key;
        handle.applied(&mut description, &mut key);
        (description, key)
    }

    /// The device hashes with another key than the one served: once 24
    /// flows landed, the learner serves the key they teach through the
    /// watcher's handle (model 1), and the status names the flows it is
    /// exact for. The confidence is counted against the device's own
    /// landings: the wrong key put few on their queue, the learned one all;
    /// kernel ports leave bits planning needs unknown, which landings from
    /// ports below 32768 then determine.
    #[test]
    fn landings_that_contradict_the_key_are_learned_from_and_served() {
        let published = served(&embedded_default().key);
        let believed = RssModel::from_description(&published.description).expect("model");
        let device = RssModel::from_description(&RssDescription {
            key: "00:".to_owned() + &embedded_default().key[..(39 * 3 - 1)],
            ..published.description.clone()
        })
        .expect("model");
        let handle = LearnedKey::default();
        let mut learning = Learning::new(handle.clone(), End::Remote, "");
        // Kernel-chosen ports: random over 32768-60999.
        let records = landed(&device, 2_463_534_242, 24, 32_768);
        let row = learning.observe(&published.view(), Some(&believed), &records[..10]);
        assert_eq!(row.landings, 10);
        assert!(learning.served.is_none(), "too few landings to serve");
        let wrong = after(&handle, &published).1.confidence;
        assert_eq!(wrong.tested, 10);
        assert!(wrong.agreeing < 8, "the served key is wrong: {wrong:?}");
        let row = learning.observe(&published.view(), Some(&believed), &records);
        assert_eq!(row.landings, 24, "each flow is taken once");
        assert!(!row.candidate_agrees);
        let (description, key) = after(&handle, &published);
        assert_eq!((key.source, key.revision), (KeySource::Learned, 1));
        assert_ne!(description.key, published.description.key);
        // Served with the confidence of the key it teaches.
        let c = key.confidence;
        assert_eq!((c.tested, c.agreeing), (24, 24), "{c:?}");
        assert!(c.known < c.needed, "kernel ports only: {c:?}");
        assert_eq!(c.needed, 19, "{c:?}");
        assert!(
            row.covered
                .iter()
                .any(|c| c.contains("10.0.0.2:5201 (source ports from 32768)")),
            "{row:?}"
        );

        // Served: the same landings, judged by the learned key, and 16
        // more from ports a sender binds itself.
        let republished = HeldDescription {
            description: description.clone(),
            key,
            candidate_key: published.candidate_key.clone(),
        };
        let learned = RssModel::from_description(&description).expect("model");
        let more = landed(&device, 88_675_123, 16, 1024);
        learning.observe(&republished.view(), Some(&learned), &more);
        let (description, key) = after(&handle, &republished);
        let learned = RssModel::from_description(&description).expect("model");
        let row = learning.observe(&republished.view(), Some(&learned), &[]);
        let c = key.confidence;
        assert_eq!((c.tested, c.agreeing), (40, 40), "{c:?}");
        assert!(c.complete(), "{c:?}");
        assert_eq!(row.confidence, c);
        assert_eq!(row.revision, key.revision);
    }

    /// A planner that chooses from the kernel's 32768-60999 only (a
    /// sender's own NIC under its default `--port-range`): random ports of
    /// that half determine everything placing them needs, one combination
    /// fewer than every port needs (how bit 15 alone flips the hash).
    #[test]
    fn what_planning_needs_is_counted_for_the_ports_it_chooses_from() {
        let published = served(&embedded_default().key);
        let handle = LearnedKey::default();
        let kernel = PortRange::new(32_768, 60_999).expect("range");
        let mut learning = Learning::new(handle.clone(), End::Remote, "").choosing(kernel);
        let device = RssModel::from_description(&published.description).expect("model");
        let records = landed(&device, 2_463_534_242, 24, 32_768);
        learning.observe(&published.view(), Some(&device), &records);
        let c = after(&handle, &published).1.confidence;
        assert_eq!((c.needed, c.known), (18, 18), "{c:?}");
    }

    #[test]
    fn all_landings_on_one_queue_teach_nothing() {
        let published = served(&embedded_default().key);
        let handle = LearnedKey::default();
        let mut learning = Learning::new(handle.clone(), End::Remote, "");
        let records: Vec<Landed> = (0..30u16)
            .map(|i| record(40_000 + i * 7, 5201, 0))
            .collect();
        let row = learning.observe(&published.view(), None, &records);
        assert!(row.note.contains("RSS looks off"), "{row:?}");
        let (_, key) = after(&handle, &published);
        assert_eq!((key.source, key.revision), (KeySource::Reported, 0));
        assert_eq!(key.confidence.tested, 30);
    }
}
