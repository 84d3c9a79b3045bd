//! Learning the key the device really hashes with, from the landings the
//! verifier sees (the math: [`srap_common::rss::KeyLearner`]).
//!
//! What is learned: the Toeplitz key, starting from the candidate discovery
//! gives (the driver's key, or the kernel's default when the driver reports
//! none), with exactly the bits the landings force changed. Per what: the
//! address pairs and destination ports of the flows seen; the learned key is
//! exact for every source port of a (sender, receiver, port) whose landings
//! span the source port's 16 bits (about 20 flows with kernel-chosen ports:
//! the sender agents' probe connections when steering is paused, or any
//! workload), and [`KeyLearner::covers`] says which. From how much: at
//! least [`MIN_LANDINGS`] landings on at least two queues, none
//! contradicting another.
//!
//! Served: a learned key that differs from the candidate becomes a new
//! description version (key source `learned`), which the closed loop then
//! judges like any other; the status says from how many landings, at what
//! rank, for which flows. Every sample also counts how far the landings back
//! the key being served ([`KeyConfidence`]: recent landings on the queue it
//! computes, the rank, and what planning the flow groups seen needs against
//! what the landings determine), which senders get with the description. Invalidated: when discovery's candidate, table,
//! fields or transform change (learning starts over), and when landings
//! contradict each other (a device that stopped hashing so, or RSS turned
//! off and on: the history is dropped and learning starts over).

use std::{
    collections::{BTreeSet, HashSet, VecDeque},
    net::SocketAddr,
};

use srap_common::{
    rss::{
        FlowTuple, HashFields, InputXfrm, KeyConfidence, KeyLearner, KeySource, RssDescription,
        RssModel, ToeplitzKey,
    },
    verifier::RX_QUEUE_UNKNOWN,
};
use srap_host::status::LearningRow;
use tracing::{info, warn};

use super::source::{LearnedKey, Published};
use crate::verifier::FlowRecord;

/// Landings needed before anything learned is served.
pub const MIN_LANDINGS: u32 = 20;
/// Flows remembered as already taken (a flow is taken once).
const MAX_SEEN: usize = 65_536;
/// (sender, receiver, port) triples whose coverage the status lists.
const MAX_COVERED: usize = 16;
/// Landings the served key is tested against (the most recent).
const MAX_TESTED: usize = 1024;

/// What learning starts from: discovery's description but for a learned key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Basis {
    candidate: String,
    indir: Vec<u32>,
    fields: (String, String),
    xfrm: String,
}

impl Basis {
    fn of(published: &Published) -> Self {
        let d = &published.description;
        Self {
            candidate: published.candidate_key.clone(),
            indir: d.indir.clone(),
            fields: (d.fields.tcp4.clone(), d.fields.tcp6.clone()),
            xfrm: d.input_xfrm.clone(),
        }
    }

    fn learner(&self) -> Result<KeyLearner, String> {
        let fields = |f: &str| f.parse::<HashFields>();
        let xfrm: InputXfrm = self.xfrm.parse()?;
        let key = ToeplitzKey::parse_hex(&self.candidate).map_err(|e| e.to_string())?;
        KeyLearner::new(
            &self.indir,
            (fields(&self.fields.0)?, fields(&self.fields.1)?),
            xfrm,
            key.as_bytes(),
        )
        .map_err(|e| e.to_string())
    }
}

/// The receiver's learner, fed every sample.
#[derive(Debug, Default)]
pub struct Learning {
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
    /// A learner that serves what it learns through `learned` (the handle
    /// the description watcher applies).
    pub fn new(learned: LearnedKey) -> Self {
        Self {
            learned,
            ..Self::default()
        }
    }

    /// Takes a sample's flow records, judged against what is published
    /// (`model`: the published description's model, if valid), and hands
    /// the watcher how far they back the served key.
    pub fn observe(
        &mut self,
        published: &Published,
        model: Option<&RssModel>,
        records: &[FlowRecord],
    ) -> LearningRow {
        let basis = Basis::of(published);
        if self.basis.as_ref() != Some(&basis) {
            self.restart(basis);
        }
        for record in records {
            self.take(record);
        }
        self.decide(published);
        // The key served from now on: what was published, unless this
        // sample's decision changed it.
        let serving = self.served.as_ref().unwrap_or(&published.candidate_key);
        let confidence = if *serving == published.description.key {
            self.confidence(model)
        } else {
            let description = RssDescription {
                key: serving.clone(),
                ..published.description.clone()
            };
            self.confidence(RssModel::from_description(&description).ok().as_ref())
        };
        self.learned.set_confidence(serving, confidence);
        self.row(published, confidence)
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
        match basis.learner() {
            Ok(learner) => {
                self.learner = Some(learner);
                self.unable = None;
            }
            Err(why) => {
                self.learner = None;
                self.unable = Some(why);
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
            self.learner = basis.learner().ok();
        }
    }

    fn take(&mut self, record: &FlowRecord) {
        let queue = record.stats.rx_queue;
        if queue == RX_QUEUE_UNKNOWN || !self.seen.insert((record.src, record.dst)) {
            return;
        }
        if self.seen.len() > MAX_SEEN {
            self.seen.clear();
        }
        let Ok(tuple) = FlowTuple::from_sockets(record.src, record.dst) else {
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
            let pair = (
                SocketAddr::new(record.src.ip(), 0),
                SocketAddr::new(record.dst.ip(), record.dst.port()),
            );
            if self.triples.len() < MAX_COVERED || self.triples.contains(&pair) {
                self.triples.insert(pair);
            }
        }
    }

    /// Serves a learned key once the landings are enough and agree.
    fn decide(&mut self, published: &Published) {
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
                learned.landings, published.key.source
            ));
        } else if self.served.as_deref() != Some(key.as_str()) {
            info!(
                "the landings of {} flows (rank {}) contradict the key ({}); serving the key they \
                 teach: {key}",
                learned.landings, learned.rank, published.key.source
            );
            self.learned
                .set(Some((published.candidate_key.clone(), key.clone())));
            self.served = Some(key);
        }
    }

    /// Logs `text` once until it changes.
    fn say(&mut self, text: String) {
        if self.said.as_deref() != Some(text.as_str()) {
            if text.contains("contradict") || text.contains("off") {
                warn!("learning the RSS key: {text}");
            } else {
                info!("learning the RSS key: {text}");
            }
            self.said = Some(text);
        }
    }

    fn row(&self, published: &Published, confidence: KeyConfidence) -> LearningRow {
        let Some(learner) = self.learner.as_ref() else {
            return LearningRow {
                key_source: published.key.source.to_string(),
                source: published.key.source,
                revision: published.key.revision,
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
            key_source: published.key.source.to_string(),
            source: published.key.source,
            landings: learned.landings,
            conflicts: learned.conflicts,
            rank: u32::try_from(learned.rank).unwrap_or(u32::MAX),
            candidate_agrees: learned.candidate_agrees,
            revision: published.key.revision,
            confidence,
            covered,
            note: self.said.clone().unwrap_or_default(),
        }
    }
}

/// Whether a published description's key is one senders must not steer
/// by until the landings taught it.
pub fn unknown_key(published: &Published) -> bool {
    published.key.source == KeySource::Unknown
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use srap_common::{
        rss::{KeyProvenance, embedded_default},
        verifier::{FlowKey, FlowStats},
    };

    use super::*;

    fn record(sport: u16, dport: u16, queue: u32) -> FlowRecord {
        let src = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), sport);
        let dst = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), dport);
        FlowRecord {
            src,
            dst,
            key: FlowKey::from_addrs(src, dst).expect("same family"),
            stats: FlowStats {
                rx_queue: queue,
                ..FlowStats::default()
            },
        }
    }

    fn served(key: &str) -> Published {
        let description = RssDescription {
            key: key.into(),
            indir: (0..128).map(|i| i % 4).collect(),
            ..embedded_default()
        };
        Published::new(1, description)
    }

    /// `n` flows from random source ports (xorshift from `seed`, from
    /// `low` up, over 28232 ports) to port 5201, each on the queue the
    /// `device` puts it.
    fn landed(device: &RssModel, seed: u32, n: usize, low: u16) -> Vec<FlowRecord> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let sport = low + u16::try_from(x % 28_232).unwrap_or(0);
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
    fn after(handle: &LearnedKey, published: &Published) -> (RssDescription, KeyProvenance) {
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
        let mut learning = Learning::new(handle.clone());
        // Kernel-chosen ports: random over 32768-60999.
        let records = landed(&device, 2_463_534_242, 24, 32_768);
        let row = learning.observe(&published, Some(&believed), &records[..10]);
        assert_eq!(row.landings, 10);
        assert!(learning.served.is_none(), "too few landings to serve");
        let wrong = after(&handle, &published).1.confidence;
        assert_eq!(wrong.tested, 10);
        assert!(wrong.agreeing < 8, "the served key is wrong: {wrong:?}");
        let row = learning.observe(&published, Some(&believed), &records);
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
        let republished = Published {
            version: 2,
            description: description.clone(),
            key,
            candidate_key: published.candidate_key.clone(),
        };
        let learned = RssModel::from_description(&description).expect("model");
        let more = landed(&device, 88_675_123, 16, 1024);
        learning.observe(&republished, Some(&learned), &more);
        let (description, key) = after(&handle, &republished);
        let learned = RssModel::from_description(&description).expect("model");
        let row = learning.observe(&republished, Some(&learned), &[]);
        let c = key.confidence;
        assert_eq!((c.tested, c.agreeing), (40, 40), "{c:?}");
        assert!(c.complete(), "{c:?}");
        assert_eq!(row.confidence, c);
        assert_eq!(row.revision, key.revision);
    }

    #[test]
    fn all_landings_on_one_queue_teach_nothing() {
        let published = served(&embedded_default().key);
        let handle = LearnedKey::default();
        let mut learning = Learning::new(handle.clone());
        let records: Vec<FlowRecord> = (0..30u16)
            .map(|i| record(40_000 + i * 7, 5201, 0))
            .collect();
        let row = learning.observe(&published, None, &records);
        assert!(row.note.contains("RSS looks off"), "{row:?}");
        let (_, key) = after(&handle, &published);
        assert_eq!((key.source, key.revision), (KeySource::Reported, 0));
        assert_eq!(key.confidence.tested, 30);
    }
}
