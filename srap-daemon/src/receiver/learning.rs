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
//! rank, for which flows. Invalidated: when discovery's candidate, table,
//! fields or transform change (learning starts over), and when landings
//! contradict each other (a device that stopped hashing so, or RSS turned
//! off and on: the history is dropped and learning starts over).

use std::{
    collections::{BTreeSet, HashSet},
    net::SocketAddr,
};

use srap_common::{
    rss::{FlowTuple, HashFields, InputXfrm, KeyLearner, KeySource, ToeplitzKey},
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

    /// Takes a sample's flow records, judged against what is published.
    pub fn observe(&mut self, published: &Published, records: &[FlowRecord]) -> LearningRow {
        let basis = Basis::of(published);
        if self.basis.as_ref() != Some(&basis) {
            self.restart(basis);
        }
        for record in records {
            self.take(record);
        }
        self.decide(published);
        self.row(published)
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
        self.queues.clear();
        self.triples.clear();
        if let (Some(basis), Some(_)) = (&self.basis, &self.learner) {
            self.learner = basis.learner().ok();
        }
    }

    fn take(&mut self, record: &FlowRecord) {
        let Some(learner) = self.learner.as_mut() else {
            return;
        };
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
                learned.landings, published.key_source
            ));
        } else if self.served.as_deref() != Some(key.as_str()) {
            info!(
                "the landings of {} flows (rank {}) contradict the key ({}); serving the key they \
                 teach: {key}",
                learned.landings, learned.rank, published.key_source
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

    fn row(&self, published: &Published) -> LearningRow {
        let Some(learner) = self.learner.as_ref() else {
            return LearningRow {
                key_source: published.key_source.to_string(),
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
            key_source: published.key_source.to_string(),
            landings: learned.landings,
            conflicts: learned.conflicts,
            rank: u32::try_from(learned.rank).unwrap_or(u32::MAX),
            candidate_agrees: learned.candidate_agrees,
            covered,
            note: self.said.clone().unwrap_or_default(),
        }
    }
}

/// Whether a published description's key is one senders must not steer
/// by until the landings taught it.
pub fn unknown_key(published: &Published) -> bool {
    published.key_source == KeySource::Unknown
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use srap_common::{
        rss::{RssDescription, RssModel, embedded_default},
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

    /// The device hashes with another key than the one served: once 24
    /// flows landed, the learner serves the key they teach through the
    /// watcher's handle, and the status names the flows it is exact for.
    #[test]
    fn landings_that_contradict_the_key_are_learned_from_and_served() {
        let published = served(&embedded_default().key);
        let device = RssModel::from_description(&RssDescription {
            key: "00:".to_owned() + &embedded_default().key[..(39 * 3 - 1)],
            ..published.description.clone()
        })
        .expect("model");
        let handle = LearnedKey::default();
        let mut learning = Learning::new(handle.clone());
        // Kernel-chosen ports: random over 32768-60999.
        let mut x: u32 = 2_463_534_242;
        let records: Vec<FlowRecord> = (0..24)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let sport = 32_768 + u16::try_from(x % 28_232).unwrap_or(0);
                let tuple = FlowTuple::new(
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                    sport,
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    5201,
                )
                .expect("tuple");
                record(sport, 5201, device.landing(&tuple).queue)
            })
            .collect();
        let row = learning.observe(&published, &records[..10]);
        assert_eq!(row.landings, 10);
        assert!(learning.served.is_none(), "too few landings to serve");
        let row = learning.observe(&published, &records);
        assert_eq!(row.landings, 24, "each flow is taken once");
        assert!(!row.candidate_agrees);
        let mut description = published.description.clone();
        let mut source = KeySource::Reported;
        handle.applied(&mut description, &mut source);
        assert_eq!(source, KeySource::Learned);
        assert_ne!(description.key, published.description.key);
        assert!(
            row.covered
                .iter()
                .any(|c| c.contains("10.0.0.2:5201 (source ports from 32768)")),
            "{row:?}"
        );
    }

    #[test]
    fn all_landings_on_one_queue_teach_nothing() {
        let published = served(&embedded_default().key);
        let handle = LearnedKey::default();
        let mut learning = Learning::new(handle.clone());
        let records: Vec<FlowRecord> = (0..30u16)
            .map(|i| record(40_000 + i * 7, 5201, 0))
            .collect();
        let row = learning.observe(&published, &records);
        assert!(row.note.contains("RSS looks off"), "{row:?}");
        let mut description = published.description.clone();
        let mut source = KeySource::Reported;
        handle.applied(&mut description, &mut source);
        assert_eq!(source, KeySource::Reported);
    }
}
