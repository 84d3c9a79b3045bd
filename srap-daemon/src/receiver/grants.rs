//! The receiver's CPUs, shared between the senders connected to it: which
//! CPUs it offers (`--cpus`, the NIC's NUMA node first), each sender's
//! demand, and the grant each one holds ([`srap_common::grants`] decides).
//!
//! A sender is granted CPUs the moment its session starts (from the CPUs
//! no one else holds), so its first flows already follow a grant; every
//! demand report, arrival and departure re-balances, and only the senders
//! whose grant changed are told. Memory is bounded: one entry per session
//! (at most `--max-peers`), each with at most
//! [`MAX_GRANT_CPUS`](srap_common::wire::MAX_GRANT_CPUS) CPUs.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Mutex, MutexGuard, PoisonError},
};

use srap_common::{
    grants::{SenderDemand, allocate},
    wire::{CpuCount, CpuGrant, DemandReport},
};
/// Moved to `srap_host::cpus` (so `srap rss show` can show the offer);
/// kept here under their old paths.
pub use srap_host::cpus::{Offer, local_cpus};
use tokio::sync::watch;
use tracing::debug;

/// One connected sender.
#[derive(Debug)]
struct Entry {
    /// Arrival order: earlier senders come first to the allocator.
    order: u64,
    flows: BTreeMap<u32, u32>,
    grant: Vec<(u32, u32)>,
    applied: u64,
    tx: watch::Sender<CpuGrant>,
}

#[derive(Debug, Default)]
struct Book {
    tiers: Vec<Vec<u32>>,
    epoch: u64,
    arrivals: u64,
    senders: BTreeMap<SocketAddr, Entry>,
}

/// Every connected sender's demand and grant.
#[derive(Debug, Default)]
pub struct Grants(Mutex<Book>);

/// One sender's grant, for `srap status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRow {
    pub peer: SocketAddr,
    /// Granted CPUs with the flows other senders hold there.
    pub cpus: Vec<(u32, u32)>,
    /// Open flows the sender reported.
    pub flows: u32,
    /// The epoch of the grant it holds now, and of the one it last applied.
    pub epoch: u64,
    pub applied: u64,
}

impl Grants {
    /// Registers a sender that just authenticated; its grant is already on
    /// the returned channel.
    pub fn join(&self, peer: SocketAddr, tiers: Vec<Vec<u32>>) -> watch::Receiver<CpuGrant> {
        let (tx, rx) = watch::channel(CpuGrant::default());
        let mut book = self.lock();
        book.arrivals += 1;
        let order = book.arrivals;
        book.senders.insert(
            peer,
            Entry {
                order,
                flows: BTreeMap::new(),
                grant: Vec::new(),
                applied: 0,
                tx,
            },
        );
        book.tiers = tiers;
        rebalance(&mut book);
        rx
    }

    /// Takes a sender's demand report; re-balances when its flows changed.
    pub fn demand(&self, peer: SocketAddr, report: &DemandReport) {
        let flows: BTreeMap<u32, u32> = report
            .flows
            .iter()
            .filter(|c| c.count > 0)
            .map(|c| (c.cpu, c.count))
            .collect();
        let mut book = self.lock();
        let Some(entry) = book.senders.get_mut(&peer) else {
            return;
        };
        entry.applied = report.applied;
        if entry.flows != flows {
            entry.flows = flows;
            rebalance(&mut book);
        }
    }

    /// The offered CPUs changed (a new description).
    pub fn offer(&self, tiers: Vec<Vec<u32>>) {
        let mut book = self.lock();
        if book.tiers != tiers {
            book.tiers = tiers;
            rebalance(&mut book);
        }
    }

    /// A sender left: its CPUs go to the others.
    pub fn leave(&self, peer: &SocketAddr) {
        let mut book = self.lock();
        if book.senders.remove(peer).is_some() {
            rebalance(&mut book);
        }
    }

    /// Every sender's grant, by address.
    pub fn snapshot(&self) -> Vec<GrantRow> {
        let book = self.lock();
        book.senders
            .iter()
            .map(|(peer, e)| GrantRow {
                peer: *peer,
                cpus: e.grant.clone(),
                flows: e.flows.values().sum(),
                epoch: e.tx.borrow().epoch,
                applied: e.applied,
            })
            .collect()
    }

    /// The CPUs offered now, in tiers.
    pub fn tiers(&self) -> Vec<Vec<u32>> {
        self.lock().tiers.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Re-runs the allocator and tells each sender whose grant changed.
fn rebalance(book: &mut Book) {
    let mut order: Vec<SocketAddr> = book.senders.keys().copied().collect();
    order.sort_by_key(|peer| book.senders.get(peer).map_or(0, |e| e.order));
    let demands: Vec<SenderDemand> = order
        .iter()
        .filter_map(|peer| book.senders.get(peer))
        .map(|e| SenderDemand {
            flows: e.flows.clone(),
            previous: e.grant.iter().map(|(c, _)| *c).collect(),
        })
        .collect();
    let grants = allocate(&book.tiers, &demands);
    let mut changed = 0;
    for (peer, grant) in order.iter().zip(grants) {
        let Some(entry) = book.senders.get_mut(peer) else {
            continue;
        };
        if entry.grant == grant && entry.tx.borrow().epoch != 0 {
            continue;
        }
        book.epoch += 1;
        changed += 1;
        entry.grant = grant;
        let cpus = entry
            .grant
            .iter()
            .map(|(cpu, count)| CpuCount {
                cpu: *cpu,
                count: *count,
            })
            .collect();
        entry.tx.send_replace(CpuGrant {
            epoch: book.epoch,
            cpus,
        });
    }
    if changed > 0 {
        debug!(
            "re-balanced {} sender(s) over {} CPUs: {changed} new grant(s)",
            book.senders.len(),
            book.tiers.iter().map(Vec::len).sum::<usize>()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn senders_get_grants_at_once_and_lose_them_on_leaving() {
        let grants = Grants::default();
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let a: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        let b: SocketAddr = "10.0.0.2:1".parse().expect("addr");
        let ra = grants.join(a, tiers.clone());
        assert_eq!(ra.borrow().cpus.len(), 16);
        let rb = grants.join(b, tiers);
        assert_eq!(ra.borrow().cpus.len(), 8);
        assert_eq!(rb.borrow().cpus.len(), 8);
        let first = ra.borrow().epoch;
        grants.demand(
            a,
            &DemandReport {
                applied: first,
                flows: vec![CpuCount { cpu: 0, count: 1 }],
            },
        );
        assert_eq!(ra.borrow().epoch, first, "unchanged grant, no new epoch");
        grants.leave(&b);
        assert_eq!(ra.borrow().cpus.len(), 16);
        assert_eq!(grants.snapshot().len(), 1);
    }
}
