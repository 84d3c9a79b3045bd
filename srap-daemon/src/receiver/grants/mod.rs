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
//! [`MAX_GRANT_CPUS`](srap_common::wire::MAX_GRANT_CPUS) CPUs per NIC
//! served (at most [`MAX_NICS`]).
//!
//! A receiver that serves several NICs (`--iface` more than once) shares
//! each NIC's CPUs (those its queues reach, within `--cpus`) on its own
//! ([`per_nic`]): a sender that spreads its flows over the NICs plans a
//! slot per (NIC, CPU), so a grant of the first NIC's CPUs says nothing of
//! the second's. The first NIC's grant is [`CpuGrant`] (all a sender of
//! protocol 8 or older learns); a sender of protocol 9 is also told every
//! NIC's ([`NicGrants`]).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use srap_common::wire::{CpuCount, CpuGrant, DemandReport, MAX_NICS, NicGrant, NicGrants};
/// Moved to `srap_host::cpus` (so `srap rss show` can show the offer);
/// kept here under their old paths.
pub use srap_host::cpus::{Offer, local_cpus};
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub mod allocate;
pub mod per_nic;

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
    /// Its grant on each NIC after the first (as [`Book::further`]).
    further: Vec<Grant>,
    nics_tx: watch::Sender<NicGrants>,
}

#[derive(Debug, Default)]
struct Book {
    /// The first NIC's CPUs offered, in tiers.
    tiers: Vec<Vec<u32>>,
    /// The first NIC's name (empty until the NICs are first read).
    first: String,
    /// Every further NIC's name and CPUs offered, in tiers (at most
    /// [`MAX_NICS`] in all).
    further: Vec<(String, Vec<Vec<u32>>)>,
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
    /// Its grant on each NIC by name (empty: one NIC served), the first
    /// NIC's first.
    pub nics: Vec<(String, Vec<u32>)>,
}

/// What a sender that joined is told: its first NIC's grant, and every
/// NIC's (protocol 9; epoch 0 while one NIC is served).
#[derive(Debug)]
pub struct Joined {
    pub grant: watch::Receiver<CpuGrant>,
    pub nics: watch::Receiver<NicGrants>,
}

impl Grants {
    /// Registers a sender that just authenticated; its grant is already on
    /// the returned channel.
    /// `name` says who it is in the log.
    pub fn join(&self, peer: SocketAddr, name: &str, tiers: Vec<Vec<u32>>) -> Joined {
        let (tx, rx) = watch::channel(CpuGrant::default());
        let (nics_tx, nics) = watch::channel(NicGrants::default());
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
                further: Vec::new(),
                nics_tx,
            },
        );
        book.tiers = tiers;
        rebalance(&mut book);
        Joined { grant: rx, nics }
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

    /// The NICs served changed: the first one's name, and every further
    /// one's name and CPUs offered (its queues' CPUs within `--cpus`, in
    /// tiers). At most [`MAX_NICS`] in all are kept.
    pub fn offer_nics(&self, first: &str, further: Vec<(String, Vec<Vec<u32>>)>) {
        let mut further = further;
        further.truncate(MAX_NICS - 1);
        let mut book = self.lock();
        if book.first != first || book.further != further {
            first.clone_into(&mut book.first);
            book.further = further;
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
                nics: e
                    .nics_tx
                    .borrow()
                    .nics
                    .iter()
                    .map(|n| (n.name.clone(), n.cpus.iter().map(|c| c.cpu).collect()))
                    .collect(),
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
    changed += rebalance_nics(book, &order);
    if changed > 0 {
        debug!(
            "re-balanced {} sender(s) over {} CPUs: {changed} new grant(s)",
            book.senders.len(),
            book.tiers.iter().map(Vec::len).sum::<usize>()
        );
    }
}

/// Re-runs the allocator on every NIC after the first
/// ([`per_nic::allocate_nics`]) and tells each sender whose grant on any
/// NIC (the first's included) changed; returns how many were told.
fn rebalance_nics(book: &mut Book, order: &[SocketAddr]) -> usize {
    if book.further.is_empty() {
        return 0;
    }
    let senders: Vec<per_nic::SenderFlows<'_>> = order
        .iter()
        .filter_map(|peer| book.senders.get(peer))
        .map(|e| per_nic::SenderFlows {
            flows: &e.flows,
            previous: &e.further,
        })
        .collect();
    let offers: Vec<&[Vec<u32>]> = book.further.iter().map(|(_, t)| t.as_slice()).collect();
    let grants = per_nic::allocate_nics(&offers, &senders);
    let mut changed = 0;
    for (peer, further) in order.iter().zip(grants) {
        let Some(entry) = book.senders.get_mut(peer) else {
            continue;
        };
        let mut nics = Vec::with_capacity(book.further.len() + 1);
        nics.push(nic_grant(&book.first, &entry.grant));
        // A NIC that offers no CPU (no description read) is left out: a
        // sender plans its addresses with the first NIC's description, so
        // the first NIC's grant is the one that fits them.
        for ((name, tiers), grant) in book.further.iter().zip(&further) {
            if tiers.iter().any(|t| !t.is_empty()) {
                nics.push(nic_grant(name, grant));
            }
        }
        if entry.nics_tx.borrow().nics == nics {
            continue;
        }
        book.epoch += 1;
        changed += 1;
        entry.further = further;
        entry.nics_tx.send_replace(NicGrants {
            epoch: book.epoch,
            nics,
        });
    }
    changed
}

/// One NIC's grant as it travels.
fn nic_grant(name: &str, grant: &[(u32, u32)]) -> NicGrant {
    NicGrant {
        name: name.to_owned(),
        cpus: grant
            .iter()
            .map(|(cpu, count)| CpuCount {
                cpu: *cpu,
                count: *count,
            })
            .collect(),
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
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn senders_get_grants_at_once_and_lose_them_on_leaving() {
        let grants = Grants::default();
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let a: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        let b: SocketAddr = "10.0.0.2:1".parse().expect("addr");
        let ra = grants.join(a, "a", tiers.clone()).grant;
        assert_eq!(ra.borrow().cpus.len(), 16);
        let rb = grants.join(b, "b", tiers).grant;
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

    #[test]
    fn with_several_nics_each_sender_is_told_its_grant_on_each() {
        let grants = Grants::default();
        let a: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        let b: SocketAddr = "10.0.0.2:1".parse().expect("addr");
        let first = vec![vec![0, 1]];
        let ja = grants.join(a, "a", first.clone());
        assert_eq!(ja.nics.borrow().epoch, 0, "one NIC: no grants per NIC");
        grants.offer_nics("eth0", vec![("eth1".into(), vec![vec![2, 3]])]);
        let jb = grants.join(b, "b", first);
        let cpus_on = |rx: &watch::Receiver<NicGrants>, nic: &str| -> BTreeSet<u32> {
            rx.borrow()
                .of(nic)
                .map(|g| g.cpus.iter().map(|c| c.cpu).collect())
                .unwrap_or_default()
        };
        for (nic, offered) in [("eth0", [0, 1]), ("eth1", [2, 3])] {
            let (on_a, on_b) = (cpus_on(&ja.nics, nic), cpus_on(&jb.nics, nic));
            assert_eq!(on_a.len(), 1, "{nic}: {on_a:?}");
            assert!(on_a.is_disjoint(&on_b), "{nic}: {on_a:?} {on_b:?}");
            assert!(on_a.union(&on_b).eq(offered.iter()), "{nic}");
        }
        // The first NIC's grant is also the one grant, as older peers get.
        let legacy: BTreeSet<u32> = ja.grant.borrow().cpus.iter().map(|c| c.cpu).collect();
        assert_eq!(legacy, cpus_on(&ja.nics, "eth0"));
        assert_eq!(grants.snapshot()[0].nics.len(), 2);
        // B leaves: A holds every CPU of both NICs.
        grants.leave(&b);
        assert_eq!(cpus_on(&ja.nics, "eth1"), BTreeSet::from([2, 3]));
        assert_eq!(cpus_on(&ja.nics, "eth0"), BTreeSet::from([0, 1]));
    }

    #[test]
    fn a_nic_that_offers_no_cpu_is_left_to_the_first_nics_grant() {
        let grants = Grants::default();
        grants.offer_nics(
            "eth0",
            vec![
                ("eth1".into(), Vec::new()),
                ("eth2".into(), vec![vec![4, 5]]),
            ],
        );
        let joined = grants.join("10.0.0.1:1".parse().expect("addr"), "a", vec![vec![0, 1]]);
        let told = joined.nics.borrow().clone();
        let names: Vec<&str> = told.nics.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["eth0", "eth2"]);
        assert_eq!(told.of("eth1"), None);
    }

    #[test]
    fn no_more_nics_than_the_wire_carries_are_kept() {
        let grants = Grants::default();
        let many = (0..MAX_NICS + 5)
            .map(|i| (format!("eth{i}"), vec![vec![i as u32]]))
            .collect();
        grants.offer_nics("eth", many);
        assert_eq!(grants.lock().further.len(), MAX_NICS - 1);
        let joined = grants.join("10.0.0.1:1".parse().expect("addr"), "a", vec![vec![0]]);
        let told = joined.nics.borrow().clone();
        assert_eq!(told.nics.len(), MAX_NICS);
        assert_eq!(told.check(), Ok(()));
    }
}
