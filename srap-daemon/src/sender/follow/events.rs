//! One stream of events from every receiver client: each client's watch
//! channels are forwarded, tagged with the receiver's position, into one
//! channel the follow loop selects on (the number of receivers is not known
//! at compile time). With the demand report's tick and the names' new
//! resolution it is follow's feed in the driver loop ([`Feed`]).

use std::time::Duration;

use anyhow::Context as _;
use srap_common::wire::{CpuGrant, LandingReport, NicGrants, ReceiverNics};
use tokio::{sync::mpsc, time::Interval};

use crate::{
    receiver_client::{NicsReport, PeerHandle, PeerStatus, Update},
    sender::driver,
};

/// How often the binder's open flows are read for the demand report (sent
/// only when they changed).
const DEMAND_EVERY: Duration = Duration::from_millis(100);
/// How often a `--peer` given as a name is resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// What changed at one receiver.
#[derive(Debug, Clone)]
pub enum What {
    Update(Update),
    Grant(CpuGrant),
    Landing(LandingReport),
    Status(PeerStatus),
    /// Its NICs and listeners (protocol 8), as it last reported them.
    Nics(ReceiverNics),
    /// Its grant on each NIC (protocol 9; `None`: none this session).
    NicGrants(Option<NicGrants>),
}

/// An event of receiver `peer` (its position in `--peer` order).
#[derive(Debug, Clone)]
pub struct Event {
    pub peer: usize,
    pub what: What,
}

/// Forwards `handle`'s channels (their current values first) into `tx`
/// until the handle or the loop is gone.
pub fn forward(peer: usize, handle: &PeerHandle, tx: mpsc::UnboundedSender<Event>) {
    let mut updates = handle.updates();
    let mut grants = handle.grants();
    let mut landings = handle.landings();
    let mut status = handle.status();
    let mut nics = handle.nics();
    let mut nic_grants = handle.nic_grants();
    updates.mark_changed();
    nics.mark_changed();
    grants.mark_changed();
    tokio::spawn(async move {
        loop {
            let what = tokio::select! {
                Ok(()) = updates.changed() => updates.borrow_and_update().clone().map(What::Update),
                Ok(()) = grants.changed() => grants.borrow_and_update().clone().map(What::Grant),
                Ok(()) = landings.changed() => (*landings.borrow_and_update()).map(What::Landing),
                Ok(()) = status.changed() => Some(What::Status(status.borrow_and_update().clone())),
                Ok(()) = nic_grants.changed() => {
                    Some(What::NicGrants(nic_grants.borrow_and_update().clone()))
                }
                Ok(()) = nics.changed() => match &*nics.borrow_and_update() {
                    NicsReport::Nics(report) => Some(What::Nics(report.clone())),
                    _ => None,
                },
                else => return,
            };
            if let Some(what) = what
                && tx.send(Event { peer, what }).is_err()
            {
                return;
            }
        }
    });
}

/// What follow waits on beside the driver's timers: its receivers'
/// events, the demand report's tick and the time to resolve the names
/// again.
pub struct Feed {
    events: mpsc::UnboundedReceiver<Event>,
    demand: Interval,
    resolve: Interval,
}

/// What [`Feed`] brings.
#[derive(Debug)]
pub enum Fed {
    /// What changed at one receiver (boxed: the other two carry nothing).
    Peer(Box<Event>),
    /// Time to tell every planned receiver the flows held toward it.
    Demand,
    /// Time to resolve the peers given as names again.
    Resolve,
}

impl Feed {
    /// The receivers' `events`, with the demand report due at once and the
    /// first resolution one period from now.
    pub async fn start(events: mpsc::UnboundedReceiver<Event>) -> Self {
        let demand = tokio::time::interval(DEMAND_EVERY);
        let mut resolve = tokio::time::interval(RESOLVE_EVERY);
        resolve.tick().await;
        Self {
            events,
            demand,
            resolve,
        }
    }
}

impl driver::Feed for Feed {
    type Event = Fed;

    /// An error once every receiver client is gone.
    async fn next(&mut self) -> anyhow::Result<Fed> {
        tokio::select! {
            _ = self.resolve.tick() => Ok(Fed::Resolve),
            _ = self.demand.tick() => Ok(Fed::Demand),
            event = self.events.recv() => {
                event.map(|e| Fed::Peer(Box::new(e))).context("the receiver clients stopped")
            }
        }
    }
}
