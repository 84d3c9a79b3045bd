//! One stream of events from every receiver client: each client's watch
//! channels are forwarded, tagged with the receiver's position, into one
//! channel the follow loop selects on (the number of receivers is not known
//! at compile time).

use srap_common::wire::{CpuGrant, LandingReport, NicGrants, ReceiverNics};
use tokio::sync::mpsc;

use crate::receiver_client::{NicsReport, PeerHandle, PeerStatus, Update};

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
