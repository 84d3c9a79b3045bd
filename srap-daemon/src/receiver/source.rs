//! Where the served description comes from, and the watcher that re-reads it
//! every interval (≤ 1 s) and publishes a new version only when it really
//! changed, so senders replan only when they must.

use std::time::Duration;

use srap_common::rss::{KeyProvenance, KeySource, RssDescription};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{info, warn};

pub use crate::description::{Source, SourceError};
pub use crate::tracker::learning::LearnedKey;
use crate::tracker::learning::Served;

/// The description senders are given, and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedDescription {
    /// 1 for the first description of this run, +1 on every change.
    pub version: u64,
    pub description: RssDescription,
    /// Where its key comes from, which learned model it is, and how far
    /// the landings back it.
    pub key: KeyProvenance,
    /// The key discovery gave (reported or the kernel's default), which a
    /// learned key replaces; the key learning starts from.
    pub candidate_key: String,
}

impl ServedDescription {
    /// Version `version` of `description`, its key as reported.
    pub fn new(version: u64, description: RssDescription) -> Self {
        Self {
            version,
            candidate_key: description.key.clone(),
            description,
            key: KeyProvenance::default(),
        }
    }

    /// What its learner starts from and judges.
    pub fn served(&self) -> Served<'_> {
        Served {
            description: &self.description,
            key: self.key,
            candidate_key: &self.candidate_key,
        }
    }

    /// Its key is one senders must not steer by until the landings
    /// taught it (a placeholder: the driver reports none and the kernel's
    /// default is unavailable).
    pub fn key_unknown(&self) -> bool {
        self.key.source == KeySource::Unknown
    }
}

/// What to publish: `source`'s description with a learned key applied,
/// its key's provenance, and the candidate key it replaces.
fn publishable(
    source: &Source,
    learned: &LearnedKey,
    warnings: &mut Vec<String>,
) -> Result<(RssDescription, KeyProvenance, String), SourceError> {
    let (mut description, origin) = source.read_with_origin(warnings)?;
    let candidate = description.key.clone();
    let mut key = KeyProvenance {
        source: origin,
        ..KeyProvenance::default()
    };
    learned.applied(&mut description, &mut key);
    Ok((description, key, candidate))
}

/// Reads `source` once (an error here is fatal: nothing to serve), then
/// re-reads it every `interval` in a task that lives as long as someone
/// watches the returned channel. A failed re-read keeps the last good
/// description and is logged once until the source recovers.
pub fn watch(
    source: Source,
    interval: Duration,
) -> Result<(watch::Receiver<ServedDescription>, JoinHandle<()>), SourceError> {
    watch_learning(source, interval, LearnedKey::default())
}

/// [`watch()`], serving the key in `learned` in place of the candidate it
/// was learned for (a new version when it is set or cleared). Discovery's
/// warnings are logged when they change, not on every re-read.
pub fn watch_learning(
    source: Source,
    interval: Duration,
    learned: LearnedKey,
) -> Result<(watch::Receiver<ServedDescription>, JoinHandle<()>), SourceError> {
    let mut warnings = Vec::new();
    let (description, key, candidate_key) = publishable(&source, &learned, &mut warnings)?;
    for warning in &warnings {
        warn!("{warning}");
    }
    info!("serving {source}, version 1 (key {})", key.source);
    let (tx, rx) = watch::channel(ServedDescription {
        version: 1,
        description,
        key,
        candidate_key,
    });
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failing: Option<String> = None;
        let mut said = warnings;
        while !tx.is_closed() {
            tick.tick().await;
            let reader = source.clone();
            let learned = learned.clone();
            let read = tokio::task::spawn_blocking(move || {
                let mut warnings = Vec::new();
                publishable(&reader, &learned, &mut warnings).map(|read| (read, warnings))
            })
            .await;
            let read = match read {
                Ok(read) => read,
                Err(err) => {
                    warn!("re-reading {source} panicked or was cancelled: {err}");
                    continue;
                }
            };
            match read {
                Ok(((description, key, candidate_key), warnings)) => {
                    if failing.take().is_some() {
                        info!("{source} readable again");
                    }
                    if warnings != said {
                        for warning in warnings.iter().filter(|w| !said.contains(w)) {
                            warn!("{warning}");
                        }
                        said = warnings;
                    }
                    let read = (description, key, candidate_key);
                    tx.send_if_modified(|current| republish(current, &source, read));
                }
                Err(err) => {
                    let text = err.to_string();
                    if failing.as_deref() != Some(text.as_str()) {
                        warn!("{text}; still serving version {}", tx.borrow().version);
                        failing = Some(text);
                    }
                }
            }
        }
    });
    Ok((rx, task))
}

/// Puts a re-read into `current`: a new version when the description or
/// its key's source changed; the same version, resent, when only the
/// key's model or confidence says something new; nothing otherwise.
fn republish(
    current: &mut ServedDescription,
    source: &Source,
    (description, key, candidate_key): (RssDescription, KeyProvenance, String),
) -> bool {
    if current.description != description || current.key.source != key.source {
        current.version += 1;
        current.description = description;
        current.key = key;
        current.candidate_key = candidate_key;
        info!("{source} changed: now version {} ({key})", current.version);
        return true;
    }
    if key.worth_resending(&current.key) {
        current.key = key;
        return true;
    }
    false
}
