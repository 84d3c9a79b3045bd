//! The receiver's client: the sender's side of the protocol
//! ([`srap_common::wire`]), toward its receiver. Keeps a connection to one receiver agent,
//! authenticates, and makes each new RSS
//! description available on a watch channel; reports the sender's plan back.
//!
//! While the receiver is away the last good description stays on the
//! channel (the sender keeps steering with it) and reconnection goes on with
//! bounded, jittered backoff ([`backoff`]).
//!
//! ```no_run
//! # async fn demo() {
//! use srap_daemon::receiver_client::{self, PeerConfig};
//! let handle = receiver_client::watch(PeerConfig::new("receiver:7447", None));
//! let mut updates = handle.updates();
//! while updates.changed().await.is_ok() {
//!     if let Some(update) = updates.borrow_and_update().clone() {
//!         // replan with update.description, then:
//!         handle.report_plan(srap_common::wire::PlanReport {
//!             version: update.version,
//!             tables: vec![],
//!         });
//!     }
//! }
//! # }
//! ```

pub mod backoff;
mod channels;
mod config;
pub mod report;
mod session;

use srap_common::wire::{CpuGrant, DemandReport, LandingReport, NicGrants, PlanReport};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{debug, info, warn};

pub use self::{
    backoff::Backoff,
    channels::{GrantChannels, NicsReport, PeerStatus, Reports, SeenReport, Update},
    config::{PeerConfig, PeerTimeouts},
    report::{plan_report, plan_report_for},
    session::{PeerError, Session},
};

/// A running client. Dropping it disconnects.
pub struct PeerHandle {
    updates: watch::Receiver<Option<Update>>,
    landings: watch::Receiver<Option<LandingReport>>,
    seen: watch::Receiver<SeenReport>,
    nics: watch::Receiver<NicsReport>,
    plan: watch::Sender<Option<PlanReport>>,
    status: watch::Receiver<PeerStatus>,
    reported: watch::Receiver<Option<u64>>,
    grants: watch::Receiver<Option<CpuGrant>>,
    nic_grants: watch::Receiver<Option<NicGrants>>,
    demand: watch::Sender<Option<DemandReport>>,
    task: JoinHandle<()>,
}

impl PeerHandle {
    /// The latest description (`None` until the first arrives; never goes
    /// back to `None`).
    pub fn updates(&self) -> watch::Receiver<Option<Update>> {
        self.updates.clone()
    }

    /// The receiver's latest verdict on where flows land (`None` until the
    /// receiver has made one).
    pub fn landings(&self) -> watch::Receiver<Option<LandingReport>> {
        self.landings.clone()
    }

    /// What the receiver last said of this sender's own flows (kept while
    /// it is away).
    pub fn seen(&self) -> watch::Receiver<SeenReport> {
        self.seen.clone()
    }

    /// What the receiver last said of its NICs and listeners (kept while it
    /// is away).
    pub fn nics(&self) -> watch::Receiver<NicsReport> {
        self.nics.clone()
    }

    /// Sends `report` now if connected, and again after every reconnection.
    pub fn report_plan(&self, report: PlanReport) {
        self.plan.send_replace(Some(report));
    }

    /// The receiver's latest CPU grant (`None` until the first; kept while
    /// the receiver is away, as the sender keeps using it).
    pub fn grants(&self) -> watch::Receiver<Option<CpuGrant>> {
        self.grants.clone()
    }

    /// The receiver's latest grant on each of its NICs (protocol 9; `None`
    /// until the first of a session, and with a receiver of one NIC or an
    /// older one, whose [`Self::grants`] covers its first NIC only).
    pub fn nic_grants(&self) -> watch::Receiver<Option<NicGrants>> {
        self.nic_grants.clone()
    }

    /// Sends `report` now if connected, and again after every reconnection.
    pub fn report_demand(&self, report: DemandReport) {
        self.demand.send_if_modified(|now| {
            let changed = now.as_ref() != Some(&report);
            *now = Some(report);
            changed
        });
    }

    pub fn status(&self) -> watch::Receiver<PeerStatus> {
        self.status.clone()
    }

    /// The version of the last plan handed to the receiver's connection
    /// (written, not acknowledged: the protocol has no acks), so a
    /// short-lived sender (`--once`) knows when it may leave.
    pub fn reported(&self) -> watch::Receiver<Option<u64>> {
        self.reported.clone()
    }
}

impl Drop for PeerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the client on the current tokio runtime.
pub fn watch(config: PeerConfig) -> PeerHandle {
    let (updates_tx, updates) = watch::channel(None);
    let (landings_tx, landings) = watch::channel(None);
    let (seen_tx, seen) = watch::channel(SeenReport::default());
    let (nics_tx, nics) = watch::channel(NicsReport::default());
    let (plan, plan_rx) = watch::channel(None);
    let (status_tx, status) = watch::channel(PeerStatus::Connecting);
    let (reported_tx, reported) = watch::channel(None);
    let (grants_tx, grants) = watch::channel(None);
    let (nic_grants_tx, nic_grants) = watch::channel(None);
    let (demand, demand_rx) = watch::channel(None);
    let channels = Channels {
        updates: updates_tx,
        reports: Reports {
            landings: landings_tx,
            seen: seen_tx,
            nics: nics_tx,
        },
        plan: plan_rx,
        status: status_tx,
        reported: reported_tx,
        grants: GrantChannels {
            grants: grants_tx,
            nic_grants: nic_grants_tx,
            demand: demand_rx,
        },
    };
    let task = tokio::spawn(run(config, channels));
    PeerHandle {
        updates,
        landings,
        seen,
        nics,
        plan,
        status,
        reported,
        grants,
        nic_grants,
        demand,
        task,
    }
}

/// The client task's ends of the handle's channels.
struct Channels {
    updates: watch::Sender<Option<Update>>,
    reports: Reports,
    plan: watch::Receiver<Option<PlanReport>>,
    status: watch::Sender<PeerStatus>,
    reported: watch::Sender<Option<u64>>,
    grants: GrantChannels,
}

async fn run(mut config: PeerConfig, channels: Channels) {
    let Channels {
        updates,
        reports,
        plan,
        status,
        reported,
        grants,
    } = channels;
    let mut delays = backoff::Delays::new(config.backoff);
    let mut last_error: Option<String> = None;
    loop {
        status.send_replace(PeerStatus::Connecting);
        config.reread_key();
        let outcome = match Session::connect(&config).await {
            Ok(session) => {
                info!("connected to receiver {}", config.addr);
                if session.version() < 7 {
                    info!(
                        "receiver {} speaks protocol {}: it will not say where this \
                         sender's flows land (protocol 7 does)",
                        config.addr,
                        session.version(),
                    );
                }
                last_error = None;
                status.send_replace(PeerStatus::Connected);
                session
                    .run(
                        &updates,
                        &reports,
                        plan.clone(),
                        &reported,
                        grants.clone(),
                        &mut delays,
                    )
                    .await
            }
            Err(err) => Err(err),
        };
        let text = match outcome {
            Ok(()) => "the receiver closed the connection".to_owned(),
            Err(err) => err.to_string(),
        };
        let delay = delays.next_delay();
        if last_error.as_deref() == Some(text.as_str()) {
            debug!("receiver {}: {text}; retrying in {delay:.1?}", config.addr);
        } else {
            warn!(
                "receiver {}: {text}; retrying in {delay:.1?}{}",
                config.addr,
                if updates.borrow().is_some() {
                    " (steering with the last description meanwhile)"
                } else {
                    ""
                }
            );
            last_error = Some(text.clone());
        }
        status.send_replace(PeerStatus::Away(text));
        tokio::time::sleep(delay).await;
    }
}
