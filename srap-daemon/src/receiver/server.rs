//! The receiver's server: the listener, its accept loop and the handle the
//! agent publishes through. Each connection is a session of its own
//! (`session`); what they share is `shared`'s.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use srap_common::wire::{LandingReport, PlanReport, ReceiverNics};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Semaphore, watch},
    task::{JoinHandle, JoinSet},
    time::timeout,
};
use tracing::{info, warn};

use super::{
    config::ServerConfig,
    downstream::Peers,
    grants::{GrantRow, Grants},
    seen, session,
    shared::{Plans, Shared},
    source::ServedDescription,
};
use crate::psk::Keys;

/// Rejections (allow-list, too many peers) being told and closed at once;
/// beyond this a rejected connection is closed without a word.
const MAX_REJECTING: usize = 64;

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
