//! What the accept loop and every session share: the settings, the
//! channels each session reads what to tell its peer from, and the plans,
//! peers and grants the sessions report into. Plain state: it must not
//! serve a connection nor decide what a session says.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use srap_common::wire::{LandingReport, PlanReport, ReceiverNics};
use tokio::sync::{Semaphore, watch};

use super::{
    config::ServerConfig, downstream::Peers, grants::Grants, seen::SeenBoard,
    source::ServedDescription,
};
use crate::psk::Keys;

/// The latest plan report of each connected sender.
#[derive(Debug, Default)]
pub struct Plans(Mutex<HashMap<SocketAddr, PlanReport>>);

impl Plans {
    pub(super) fn insert(&self, peer: SocketAddr, report: PlanReport) {
        self.lock().insert(peer, report);
    }

    pub(super) fn remove(&self, peer: &SocketAddr) {
        self.lock().remove(peer);
    }

    /// Every connected sender's latest plan.
    pub fn snapshot(&self) -> Vec<(SocketAddr, PlanReport)> {
        let mut plans: Vec<_> = self.lock().iter().map(|(a, p)| (*a, p.clone())).collect();
        plans.sort_by_key(|(addr, _)| *addr);
        plans
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, PlanReport>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the accept loop and every session share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: ServerConfig,
    pub(super) updates: watch::Receiver<ServedDescription>,
    /// The closed loop's latest verdict, sent to every sender.
    pub(super) landings: watch::Sender<LandingReport>,
    /// The latest sample's flows: each session sends its peer its own.
    pub(super) seen: watch::Sender<SeenBoard>,
    /// Every NIC served and where each port is accepted (protocol 8).
    pub(super) nics: watch::Sender<ReceiverNics>,
    pub(super) plans: Plans,
    pub(super) peers: Peers,
    pub(super) grants: Grants,
    /// The keys accepted now: a session whose key leaves is closed.
    pub(super) keys: watch::Sender<Keys>,
    pub(super) sessions: Arc<Semaphore>,
    pub(super) rejecting: Arc<Semaphore>,
    pub(super) shutdown: watch::Receiver<bool>,
}
