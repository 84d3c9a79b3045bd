//! Downstream: the sender agents connected now, for `srap status`: who,
//! since when, and when their last plan report came.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{SystemTime, UNIX_EPOCH},
};

use srap_common::wire::KeyId;
use srap_status::PeerRow;

/// Connected (authenticated) peers, by address.
#[derive(Debug, Default)]
pub struct Peers(Mutex<HashMap<SocketAddr, PeerRow>>);

impl Peers {
    pub(super) fn connected(&self, addr: SocketAddr, agent: &str, key: Option<KeyId>) {
        self.lock().insert(
            addr,
            PeerRow {
                addr: addr.to_string(),
                agent: agent.to_owned(),
                key: key.map(|k| k.to_string()),
                connected_unix_ms: unix_ms(SystemTime::now()),
                last_plan_unix_ms: None,
                plan_version: None,
                ..PeerRow::default()
            },
        );
    }

    pub(super) fn reported(&self, addr: SocketAddr, version: u64) {
        if let Some(peer) = self.lock().get_mut(&addr) {
            peer.last_plan_unix_ms = Some(unix_ms(SystemTime::now()));
            peer.plan_version = Some(version);
        }
    }

    pub(super) fn remove(&self, addr: &SocketAddr) {
        self.lock().remove(addr);
    }

    /// Every connected peer, by address.
    pub fn snapshot(&self) -> Vec<PeerRow> {
        let mut peers: Vec<_> = self.lock().values().cloned().collect();
        peers.sort_by(|a, b| a.addr.cmp(&b.addr));
        peers
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SocketAddr, PeerRow>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
