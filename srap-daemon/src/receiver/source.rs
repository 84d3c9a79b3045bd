//! Where the served description comes from, and the watcher that re-reads it
//! every interval (≤ 1 s) and publishes a new version only when it really
//! changed, so senders replan only when they must.

use std::{path::PathBuf, time::Duration};

use srap_common::rss::{DescriptionFileError, RssDescription};
use thiserror::Error;
use tokio::{sync::watch, task::JoinHandle};
use tracing::{info, warn};

use srap_host::discovery::{self, DiscoveryError};

/// The description senders are given, and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// 1 for the first description of this run, +1 on every change.
    pub version: u64,
    pub description: RssDescription,
}

/// What the receiver describes.
#[derive(Debug, Clone)]
pub enum Source {
    /// Discover the RSS of this interface.
    Iface(String),
    /// Read this JSON file (`--rss`): for devices without RSS, or to override.
    File(PathBuf),
}

#[derive(Debug, Error)]
pub enum SourceError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    File(#[from] DescriptionFileError),
}

impl Source {
    /// The current description, validated. Blocking (file or netlink I/O).
    pub fn read(&self) -> Result<RssDescription, SourceError> {
        match self {
            Self::Iface(iface) => {
                let found = discovery::discover(iface)?;
                for warning in &found.warnings {
                    warn!("{iface}: {warning}");
                }
                Ok(found.description)
            }
            Self::File(path) => Ok(RssDescription::load(path)?.0),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Iface(iface) => write!(f, "the RSS of {iface}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Reads `source` once (an error here is fatal: nothing to serve), then
/// re-reads it every `interval` in a task that lives as long as someone
/// watches the returned channel. A failed re-read keeps the last good
/// description and is logged once until the source recovers.
pub fn watch(
    source: Source,
    interval: Duration,
) -> Result<(watch::Receiver<Published>, JoinHandle<()>), SourceError> {
    let description = source.read()?;
    info!("serving {source}, version 1");
    let (tx, rx) = watch::channel(Published {
        version: 1,
        description,
    });
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failing: Option<String> = None;
        while !tx.is_closed() {
            tick.tick().await;
            let reader = source.clone();
            let read = match tokio::task::spawn_blocking(move || reader.read()).await {
                Ok(read) => read,
                Err(err) => {
                    warn!("re-reading {source} panicked or was cancelled: {err}");
                    continue;
                }
            };
            match read {
                Ok(description) => {
                    if failing.take().is_some() {
                        info!("{source} readable again");
                    }
                    tx.send_if_modified(|current| {
                        if current.description == description {
                            return false;
                        }
                        current.version += 1;
                        current.description = description;
                        info!("{source} changed: now version {}", current.version);
                        true
                    });
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
