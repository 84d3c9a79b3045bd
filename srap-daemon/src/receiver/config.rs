//! How the receiver's server treats peers: its deadlines, the allow-list
//! and keys it asks for, the bound on sessions and the CPUs it offers.
//! Settings only, chosen by the agent's flags: nothing here serves.

use std::time::Duration;

use super::{allow::AllowList, grants::Offer};
use crate::psk::Keys;

/// Deadlines of a session.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For each handshake message (Hello, Response).
    pub handshake: Duration,
    /// Longest silence after the handshake (peers send keepalives).
    pub idle: Duration,
    /// From a frame's first byte to its last.
    pub frame: Duration,
    /// For the peer to take one of our frames.
    pub write: Duration,
    /// Between our keepalives.
    pub keepalive: Duration,
    /// For the last error report and the closing handshake.
    pub linger: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(5),
            idle: Duration::from_secs(45),
            frame: Duration::from_secs(10),
            write: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            linger: Duration::from_secs(1),
        }
    }
}

/// How the server treats peers.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub allow: AllowList,
    /// The pre-shared keys accepted at start ([`super::server::Server::set_keys`] changes
    /// them); empty: none asked for.
    pub keys: Keys,
    /// Serving any address without a key because `--open` said so (shown
    /// in the status).
    pub open: bool,
    /// Sessions at once; a peer beyond this is told so and closed.
    pub max_peers: usize,
    pub timeouts: Timeouts,
    /// The CPUs granted to senders.
    pub offer: Offer,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            allow: AllowList::default(),
            keys: Keys::default(),
            open: false,
            max_peers: DEFAULT_MAX_PEERS,
            timeouts: Timeouts::default(),
            offer: Offer::default(),
        }
    }
}

pub const DEFAULT_MAX_PEERS: usize = 64;
