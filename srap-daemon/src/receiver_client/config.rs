//! Where the receiver is and how the client talks to it: its address, its
//! key (read again before each connection), the backoff and the deadlines.
//! Settings only: connecting is the session's job.

use std::{path::PathBuf, time::Duration};

use srap_common::wire::Psk;
use tracing::{info, warn};

use super::backoff::Backoff;
use crate::psk::load_psk_file;

/// Deadlines of the client.
#[derive(Debug, Clone, Copy)]
pub struct PeerTimeouts {
    /// For name resolution plus the TCP connect.
    pub connect: Duration,
    /// For each handshake message, and a frame's arrival once begun.
    pub frame: Duration,
    /// Longest silence from the receiver (it sends keepalives).
    pub idle: Duration,
    /// For the receiver to take one of our frames.
    pub write: Duration,
    /// Between our keepalives.
    pub keepalive: Duration,
}

impl Default for PeerTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            frame: Duration::from_secs(10),
            idle: Duration::from_secs(45),
            write: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
        }
    }
}

/// Where the receiver is and how to talk to it.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// `HOST:PORT`.
    pub addr: String,
    pub psk: Option<Psk>,
    /// The file `psk` came from: read again before every connection, so a
    /// rotated key is used from the next one on.
    pub psk_file: Option<PathBuf>,
    pub backoff: Backoff,
    pub timeouts: PeerTimeouts,
}

impl PeerConfig {
    pub fn new(addr: impl Into<String>, psk: Option<Psk>) -> Self {
        Self {
            addr: addr.into(),
            psk,
            psk_file: None,
            backoff: Backoff::default(),
            timeouts: PeerTimeouts::default(),
        }
    }

    /// With `psk` read from `path` (and `path` read again before each
    /// connection).
    pub fn with_psk_file(mut self, path: PathBuf, psk: Psk) -> Self {
        self.psk = Some(psk);
        self.psk_file = Some(path);
        self
    }

    /// Reads the key file again; a file that cannot be read leaves the
    /// last good key in use.
    pub(super) fn reread_key(&mut self) {
        let Some(path) = &self.psk_file else {
            return;
        };
        match load_psk_file(path) {
            Ok(psk) => {
                let before = self.psk.as_ref().map(Psk::id);
                if before != Some(psk.id()) {
                    info!(
                        "receiver {}: key {} from {} (was {})",
                        self.addr,
                        psk.id(),
                        path.display(),
                        before.map_or_else(|| "none".to_owned(), |id| id.to_string())
                    );
                    self.psk = Some(psk);
                }
            }
            Err(err) => warn!(
                "receiver {}: {err}; keeping key {}",
                self.addr,
                self.psk
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |k| k.id().to_string())
            ),
        }
    }
}
