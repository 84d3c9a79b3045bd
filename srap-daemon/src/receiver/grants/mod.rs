//! The receiver's CPUs, shared between the senders connected to it: which
//! CPUs it offers (`--cpus`, the NIC's NUMA node first), each sender's
//! demand, and the grant each one holds ([`allocate`](mod@allocate) decides:
//! the pure allocator, here with its one user rather than in `srap-common`).
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
    time::{Duration, Instant},
};

use srap_common::wire::{CpuCount, CpuGrant, DemandReport};
/// Moved to `srap_host::cpus` (so `srap rss show` can show the offer);
/// kept here under their old paths.
pub use srap_host::cpus::{Offer, local_cpus};
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub mod allocate;

pub use self::allocate::{Allocation, Grant, Held, SenderDemand, allocate, simulate_binders};

/// How long a sender that went beyond its fair share (while others were
/// within theirs) stays held to it after its demand falls back.
const HOLD_FOR: Duration = Duration::from_secs(10);

/// One connected sender.
#[derive(Debug)]
struct Entry {
    /// Arrival order: earlier senders come first to the allocator.
    order: u64,
    /// Address, agent and key, for the log.
    name: String,
    /// When it was last beyond its fair share while others were within.
    held_at: Option<Instant>,
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
    /// `name` says who it is in the log.
    pub fn join(
        &self,
        peer: SocketAddr,
        name: &str,
        tiers: Vec<Vec<u32>>,
    ) -> watch::Receiver<CpuGrant> {
        let (tx, rx) = watch::channel(CpuGrant::default());
        let mut book = self.lock();
        book.arrivals += 1;
        let order = book.arrivals;
        book.senders.insert(
            peer,
            Entry {
                order,
                name: name.to_owned(),
                held_at: None,
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
    let now = Instant::now();
    let mut order: Vec<SocketAddr> = book.senders.keys().copied().collect();
    order.sort_by_key(|peer| book.senders.get(peer).map_or(0, |e| e.order));
    let demands: Vec<SenderDemand> = order
        .iter()
        .filter_map(|peer| book.senders.get(peer))
        .map(|e| SenderDemand {
            flows: e.flows.clone(),
            previous: e.grant.iter().map(|(c, _)| *c).collect(),
            held: e
                .held_at
                .is_some_and(|at| now.duration_since(at) < HOLD_FOR),
        })
        .collect();
    let allocation = allocate(&book.tiers, &demands);
    note_held(book, &order, &demands, &allocation.held, now);
    let mut changed = 0;
    for (peer, grant) in order.iter().zip(allocation.grants) {
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

/// Marks the senders held to their share and logs, by name, the ones
/// newly held and the ones let go.
fn note_held(
    book: &mut Book,
    order: &[SocketAddr],
    demands: &[SenderDemand],
    held: &[Held],
    now: Instant,
) {
    let within = order.len() - held.len();
    for (i, peer) in order.iter().enumerate() {
        let Some(entry) = book.senders.get_mut(peer) else {
            continue;
        };
        let beyond = held
            .iter()
            .find(|h| h.sender == i && h.demand as usize > h.share);
        match (beyond, entry.held_at) {
            (Some(h), None) => warn!(
                "{}: {} flows reported on {} CPUs, beyond its fair share of {} CPUs while \
                 {within} other sender(s) are within theirs: its new flows share the {} CPUs \
                 the others do not hold",
                entry.name,
                h.demand,
                demands[i].flows.len(),
                h.share,
                h.granted
            ),
            (None, Some(_)) if !demands[i].held => {
                info!("{}: within its fair share again", entry.name);
                entry.held_at = None;
            }
            _ => {}
        }
        if beyond.is_some() {
            entry.held_at = Some(now);
        }
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
        let ra = grants.join(a, "a", tiers.clone());
        assert_eq!(ra.borrow().cpus.len(), 16);
        let rb = grants.join(b, "b", tiers);
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
