//! `srap-agent receiver`: serves this host's RSS description to sender
//! agents over TCP (protocol: [`srap_common::wire`]) and pushes every new
//! version to them.
//!
//! Hostile peers cost bounded time and memory: the allow-list is checked on
//! accept before anything is read; at most [`ServerConfig::max_peers`]
//! sessions run at once (others get an error and are closed); every read and
//! write has a deadline ([`Timeouts`]); an unauthenticated peer's frames are
//! limited to [`MAX_HANDSHAKE_FRAME`](srap_common::wire::MAX_HANDSHAKE_FRAME)
//! bytes. A peer that breaks the protocol is told why and disconnected; the
//! server goes on.

pub mod access;
pub mod allow;
pub mod downstream;
pub mod grants;
pub mod monitor;
pub mod nics;
mod pace;
mod rewrite;
mod seen;
mod session;
pub mod source;

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use srap_common::wire::{LandingReport, PlanReport, ReceiverNics};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Semaphore, watch},
    task::{JoinHandle, JoinSet},
    time::timeout,
};
use tracing::{info, warn};

use crate::psk::Keys;

pub use self::{
    allow::AllowList,
    downstream::Peers,
    grants::{GrantRow, Grants, Offer},
    source::{LearnedKey, ServedDescription, Source, SourceError},
};

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
    /// The pre-shared keys accepted at start ([`Server::set_keys`] changes
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
/// Rejections (allow-list, too many peers) being told and closed at once;
/// beyond this a rejected connection is closed without a word.
const MAX_REJECTING: usize = 64;

/// The latest plan report of each connected sender.
#[derive(Debug, Default)]
pub struct Plans(Mutex<HashMap<SocketAddr, PlanReport>>);

impl Plans {
    fn insert(&self, peer: SocketAddr, report: PlanReport) {
        self.lock().insert(peer, report);
    }

    fn remove(&self, peer: &SocketAddr) {
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
struct Shared {
    config: ServerConfig,
    updates: session::Updates,
    /// The closed loop's latest verdict, sent to every sender.
    landings: watch::Sender<LandingReport>,
    /// The latest sample's flows: each session sends its peer its own.
    seen: watch::Sender<seen::SeenBoard>,
    /// Every NIC served and where each port is accepted (protocol 8).
    nics: watch::Sender<ReceiverNics>,
    plans: Plans,
    peers: Peers,
    grants: Grants,
    /// The keys accepted now: a session whose key leaves is closed.
    keys: watch::Sender<Keys>,
    sessions: Arc<Semaphore>,
    rejecting: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
}

/// A running server. Dropping it stops it at once; [`Server::shutdown`]
/// tells the peers first.
pub struct Server {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `listen` and serves what `updates` holds.
    pub async fn bind(
        listen: SocketAddr,
        config: ServerConfig,
        updates: watch::Receiver<ServedDescription>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        Ok(Self::serve(listener, config, updates))
    }

    /// Serves on an already bound listener.
    pub fn serve(
        listener: TcpListener,
        mut config: ServerConfig,
        updates: watch::Receiver<ServedDescription>,
    ) -> Self {
        let local_addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (stop, shutdown) = watch::channel(false);
        let keys = watch::channel(std::mem::take(&mut config.keys)).0;
        let shared = Arc::new(Shared {
            sessions: Arc::new(Semaphore::new(config.max_peers)),
            keys,
            rejecting: Arc::new(Semaphore::new(MAX_REJECTING)),
            config,
            updates,
            landings: watch::channel(LandingReport::default()).0,
            seen: watch::channel(seen::SeenBoard::default()).0,
            nics: watch::channel(ReceiverNics::default()).0,
            plans: Plans::default(),
            peers: Peers::default(),
            grants: Grants::default(),
            shutdown,
        });
        let keys = shared.keys.borrow().clone();
        info!(
            "receiver listening on {local_addr} (peers from {}; {})",
            shared.config.allow,
            if keys.is_empty() {
                "no pre-shared key".to_owned()
            } else {
                format!("pre-shared key required: id {keys}")
            }
        );
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Self {
            shared,
            local_addr,
            stop,
            task: Some(task),
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Tells every sender (now and on connecting) the closed loop's verdict
    /// on the served description, when its version or verdict changed.
    pub fn publish_landings(&self, report: LandingReport) {
        self.shared.landings.send_if_modified(|last| {
            let changed = (last.version, last.verdict) != (report.version, report.verdict);
            if changed {
                *last = report;
            }
            changed
        });
    }

    /// Tells every sender of protocol 7 or later which of its flows the
    /// observer saw in `status` and where (each session sends its own
    /// peer's, when they changed).
    pub fn publish_seen(&self, status: &srap_status::Status) {
        let board = seen::board(status);
        self.shared.seen.send_if_modified(|last| {
            let changed = *last != board;
            if changed {
                *last = board;
            }
            changed
        });
    }

    /// Tells every sender of protocol 8 or later the NICs served and the
    /// ports they accept, when they changed.
    pub fn publish_nics(&self, nics: ReceiverNics) {
        self.shared.nics.send_if_modified(|last| {
            let changed = *last != nics;
            if changed {
                *last = nics;
            }
            changed
        });
    }

    /// Shares each NIC after the first between the senders on its own:
    /// `first` names the first NIC, `further` every other one with the
    /// CPUs it offers, in tiers ([`Grants::offer_nics`]).
    pub fn offer_nics(&self, first: &str, further: Vec<(String, Vec<Vec<u32>>)>) {
        self.shared.grants.offer_nics(first, further);
    }

    /// Sessions running now.
    pub fn active_peers(&self) -> usize {
        self.shared.config.max_peers - self.shared.sessions.available_permits()
    }

    /// The plans connected senders reported.
    pub fn plans(&self) -> Vec<(SocketAddr, PlanReport)> {
        self.shared.plans.snapshot()
    }

    /// The senders connected now (after their handshake).
    pub fn peers(&self) -> Vec<srap_status::PeerRow> {
        let grants = self.shared.grants.snapshot();
        let mut peers = self.shared.peers.snapshot();
        for peer in &mut peers {
            if let Some(g) = grants.iter().find(|g| g.peer.to_string() == peer.addr) {
                peer.granted = srap_host::cpulist::format(g.cpus.iter().map(|(c, _)| *c));
                peer.flows = g.flows;
                peer.grant_epoch = g.epoch;
                peer.grant_applied = g.applied == g.epoch;
                peer.granted_nics = g
                    .nics
                    .iter()
                    .map(|(nic, cpus)| srap_status::NicGrantRow {
                        nic: nic.clone(),
                        cpus: srap_host::cpulist::format(cpus.iter().copied()),
                    })
                    .collect();
            }
        }
        peers
    }

    /// Replaces the accepted keys (SIGHUP after a key file changed):
    /// sessions authenticated with a key no longer among them are closed,
    /// and their senders reconnect with the key they hold now.
    pub fn set_keys(&self, keys: Keys) {
        let before = self.shared.keys.borrow().clone();
        if before.ids() == keys.ids() {
            info!("pre-shared keys unchanged: id {keys}");
            return;
        }
        info!("pre-shared keys now: id {keys} (were: {before})");
        self.shared.keys.send_replace(keys);
    }

    /// Who may connect, for the status.
    pub fn access(&self) -> srap_status::Access {
        srap_status::Access {
            keys: self
                .shared
                .keys
                .borrow()
                .ids()
                .iter()
                .map(ToString::to_string)
                .collect(),
            allow: self
                .shared
                .config
                .allow
                .nets()
                .iter()
                .map(ToString::to_string)
                .collect(),
            open: self.shared.config.open,
        }
    }

    /// Every connected sender's CPU grant.
    pub fn grants(&self) -> Vec<GrantRow> {
        self.shared.grants.snapshot()
    }

    /// The CPUs offered to senders for the description served now, in
    /// tiers (the NIC's NUMA node first).
    pub fn offered(&self) -> Vec<Vec<u32>> {
        self.shared
            .config
            .offer
            .tiers(&self.shared.updates.borrow().description)
    }

    /// Stops accepting, tells every peer, and waits (bounded) for them.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut sessions = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of descriptors or similar: let sessions finish.
                        warn!("accepting a connection: {err}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if !shared.config.allow.permits(peer.ip()) {
                    warn!("{peer}: refused: not in the allow-list");
                    reject(stream, format!("peer {} is not allowed (--allow)", peer.ip().to_canonical()), &shared);
                    continue;
                }
                let Ok(permit) = Arc::clone(&shared.sessions).try_acquire_owned() else {
                    warn!("{peer}: refused: {} peers already connected", shared.config.max_peers);
                    reject(stream, format!("too many peers (at most {}); try again later", shared.config.max_peers), &shared);
                    continue;
                };
                let shared = Arc::clone(&shared);
                sessions.spawn(async move {
                    let _permit = permit;
                    session::run(stream, peer, &shared).await;
                });
            }
        }
    }
    info!("receiver stopping: closing {} session(s)", sessions.len());
    let limit = shared.config.timeouts.linger * 2;
    if timeout(limit, async {
        while sessions.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        sessions.abort_all();
    }
}

/// Tells a refused peer why and closes, in the background (bounded).
fn reject(stream: TcpStream, reason: String, shared: &Arc<Shared>) {
    let Ok(permit) = Arc::clone(&shared.rejecting).try_acquire_owned() else {
        return;
    };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let _permit = permit;
        let (rd, wr) = stream.into_split();
        session::close(rd, wr, Some(reason), &shared).await;
    });
}
