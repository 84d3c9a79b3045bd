//! How a receiver agent shares its CPUs between the senders connected to it.
//!
//! Every sender reports the flows it has open per receiver CPU
//! ([`crate::wire::DemandReport`]); from those, [`allocate`] grants each
//! sender a set of CPUs ([`crate::wire::CpuGrant`]):
//!
//! * **While the flows fit** (each sender's demand, or its equal share of the
//!   offered CPUs when it has fewer flows, sums to no more than the offered
//!   CPUs) the grants are disjoint: a sender keeps the CPUs its flows are on,
//!   and the free CPUs are dealt out so that grant sizes are as equal as
//!   possible (the smallest grant first), each free CPU staying with the
//!   sender that had it if it still has room. An idle sender therefore holds
//!   its share *before* its flows open: three senders starting 5 flows each
//!   at the same moment on 16 CPUs already have 6, 5 and 5 CPUs of their own.
//!   CPUs are taken tier by tier (the NIC's NUMA node first): a later tier is
//!   used only when the earlier ones do not fit.
//! * **When they do not fit**, every sender is granted every offered CPU,
//!   each with the flows the *other* senders hold there as its base. The
//!   binder fills the CPU with the fewest flows (its own plus the base)
//!   first, so one sender's new flows go to the least-loaded CPUs of the
//!   whole receiver and max − min flows per CPU stays within one.
//!
//! Pure, deterministic and bounded (`O(senders × CPUs)`), so the receiver
//! re-runs it on every change and the tests run it without sockets.

use std::collections::{BTreeMap, BTreeSet};

/// One sender as the allocator sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SenderDemand {
    /// Open flows per receiver CPU (CPUs with none may be left out).
    pub flows: BTreeMap<u32, u32>,
    /// The CPUs of its current grant, kept where possible so grants move
    /// little while senders are opening flows.
    pub previous: BTreeSet<u32>,
}

impl SenderDemand {
    /// Flows open on offered CPUs.
    fn demand(&self, offered: &BTreeSet<u32>) -> u32 {
        self.flows
            .iter()
            .filter(|(cpu, _)| offered.contains(cpu))
            .map(|(_, n)| *n)
            .sum()
    }
}

/// One sender's grant: CPUs and the flows other senders hold on each, in
/// the order the tiers offer them.
pub type Grant = Vec<(u32, u32)>;

/// The grants of `senders` (same order) over the CPUs of `tiers` (each
/// tier's CPUs in order of preference; a CPU in two tiers counts in the
/// first). No sender gets an empty grant while a CPU is offered.
pub fn allocate(tiers: &[Vec<u32>], senders: &[SenderDemand]) -> Vec<Grant> {
    let mut seen = BTreeSet::new();
    let tiers: Vec<Vec<u32>> = tiers
        .iter()
        .map(|t| t.iter().copied().filter(|c| seen.insert(*c)).collect())
        .collect();
    let offered: Vec<u32> = tiers.iter().flatten().copied().collect();
    if senders.is_empty() || offered.is_empty() {
        return vec![Vec::new(); senders.len()];
    }
    let offered_set: BTreeSet<u32> = offered.iter().copied().collect();
    let load = load_per_cpu(senders);
    let demands: Vec<u32> = senders.iter().map(|s| s.demand(&offered_set)).collect();
    let mut pool = Vec::new();
    for tier in &tiers {
        pool.extend_from_slice(tier);
        if fits(pool.len(), &demands) {
            return disjoint(&pool, &offered, senders, &load);
        }
    }
    shared(&offered, senders, &load)
}

/// Flows of every sender per CPU.
fn load_per_cpu(senders: &[SenderDemand]) -> BTreeMap<u32, u32> {
    let mut load = BTreeMap::new();
    for sender in senders {
        for (cpu, n) in &sender.flows {
            *load.entry(*cpu).or_insert(0u32) += *n;
        }
    }
    load
}

/// Whether `n` CPUs hold every sender's demand, each at least its equal
/// share (at least one).
fn fits(n: usize, demands: &[u32]) -> bool {
    let share = (n / demands.len()).max(1) as u64;
    let want: u64 = demands.iter().map(|d| u64::from(*d).max(share)).sum();
    want <= n as u64
}

/// Disjoint grants over `pool`: each sender's own CPUs, and the free CPUs
/// of the pool dealt out toward equal grant sizes.
fn disjoint(
    pool: &[u32],
    offered: &[u32],
    senders: &[SenderDemand],
    load: &BTreeMap<u32, u32>,
) -> Vec<Grant> {
    let own: Vec<Vec<u32>> = senders
        .iter()
        .map(|s| {
            offered
                .iter()
                .copied()
                .filter(|c| s.flows.get(c).is_some_and(|n| *n > 0))
                .collect()
        })
        .collect();
    let free: Vec<u32> = pool
        .iter()
        .copied()
        .filter(|c| load.get(c).copied().unwrap_or(0) == 0)
        .collect();
    let targets = water_fill(own.iter().map(Vec::len).collect(), free.len());
    let dealt = deal(&free, senders, &targets);
    senders
        .iter()
        .zip(own)
        .zip(dealt)
        .map(|((sender, own), dealt)| {
            let mut cpus: BTreeSet<u32> = own.into_iter().collect();
            cpus.extend(dealt);
            offered
                .iter()
                .filter(|c| cpus.contains(c))
                .map(|c| (*c, others(load, sender, *c)))
                .collect()
        })
        .collect()
}

/// How many free CPUs each sender gets: one at a time to the smallest grant
/// (ties: the earlier sender).
fn water_fill(mut sizes: Vec<usize>, free: usize) -> Vec<usize> {
    let mut extra = vec![0; sizes.len()];
    for _ in 0..free {
        let Some(i) = (0..sizes.len()).min_by_key(|i| (sizes[*i], *i)) else {
            break;
        };
        sizes[i] += 1;
        extra[i] += 1;
    }
    extra
}

/// The free CPUs each sender gets: first those it had (while it has room),
/// then the rest in order to whoever still has the most room.
fn deal(free: &[u32], senders: &[SenderDemand], targets: &[usize]) -> Vec<Vec<u32>> {
    let mut dealt: Vec<Vec<u32>> = vec![Vec::new(); senders.len()];
    let mut left = Vec::new();
    for cpu in free {
        let keeper = (0..senders.len())
            .find(|i| senders[*i].previous.contains(cpu) && dealt[*i].len() < targets[*i]);
        match keeper {
            Some(i) => dealt[i].push(*cpu),
            None => left.push(*cpu),
        }
    }
    for cpu in left {
        let room = |i: &usize| targets[*i].saturating_sub(dealt[*i].len());
        if let Some(i) = (0..senders.len())
            .filter(|i| room(i) > 0)
            .max_by_key(|i| (room(i), std::cmp::Reverse(*i)))
        {
            dealt[i].push(cpu);
        }
    }
    dealt
}

/// Every offered CPU to every sender, with the other senders' flows there.
fn shared(offered: &[u32], senders: &[SenderDemand], load: &BTreeMap<u32, u32>) -> Vec<Grant> {
    senders
        .iter()
        .map(|sender| {
            offered
                .iter()
                .map(|c| (*c, others(load, sender, *c)))
                .collect()
        })
        .collect()
}

/// Flows of senders other than `sender` on `cpu`.
fn others(load: &BTreeMap<u32, u32>, sender: &SenderDemand, cpu: u32) -> u32 {
    let all = load.get(&cpu).copied().unwrap_or(0);
    all.saturating_sub(sender.flows.get(&cpu).copied().unwrap_or(0))
}

/// The flows per CPU that result when each sender opens `open[i]` more
/// flows under `grants[i]`, each on the granted CPU with the fewest flows
/// (its own plus the base), ties to the earliest in the grant — the
/// binder's choice, for tests and the lab's checks.
pub fn simulate_binders(
    grants: &[Grant],
    senders: &mut [SenderDemand],
    open: &[u32],
) -> BTreeMap<u32, u32> {
    for ((grant, sender), n) in grants.iter().zip(senders.iter_mut()).zip(open) {
        for _ in 0..*n {
            let pick = grant
                .iter()
                .min_by_key(|(cpu, base)| base + sender.flows.get(cpu).copied().unwrap_or(0));
            if let Some((cpu, _)) = pick {
                *sender.flows.entry(*cpu).or_insert(0) += 1;
            }
        }
    }
    load_per_cpu(senders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(grant: &Grant) -> BTreeSet<u32> {
        grant.iter().map(|(c, _)| *c).collect()
    }

    fn idle(n: usize) -> Vec<SenderDemand> {
        vec![SenderDemand::default(); n]
    }

    fn spread(load: &BTreeMap<u32, u32>, offered: u32) -> (u32, u32) {
        let per: Vec<u32> = (0..offered)
            .map(|c| load.get(&c).copied().unwrap_or(0))
            .collect();
        (
            per.iter().copied().max().unwrap_or(0),
            per.iter().copied().min().unwrap_or(0),
        )
    }

    /// Re-grants with each sender's current grant as its previous one.
    fn regrant(tiers: &[Vec<u32>], senders: &mut [SenderDemand]) -> Vec<Grant> {
        let grants = allocate(tiers, senders);
        for (s, g) in senders.iter_mut().zip(&grants) {
            s.previous = cpus(g);
        }
        grants
    }

    #[test]
    fn idle_senders_split_the_cpus_disjointly() {
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let grants = allocate(&tiers, &idle(3));
        let sizes: Vec<usize> = grants.iter().map(Vec::len).collect();
        assert_eq!(sizes, [6, 5, 5]);
        let all: BTreeSet<u32> = grants.iter().flat_map(cpus).collect();
        assert_eq!(all.len(), 16, "disjoint and covering: {grants:?}");
    }

    #[test]
    fn three_senders_then_a_fourth_stay_balanced() {
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let mut senders = idle(3);
        // Each opens 5, one after the other, re-granted between.
        for i in 0..3 {
            let grants = regrant(&tiers, &mut senders);
            let mut open = [0; 3];
            open[i] = 5;
            simulate_binders(&grants, &mut senders, &open);
        }
        let load = load_per_cpu(&senders);
        assert_eq!(load.len(), 15, "15 flows on 15 CPUs: {load:?}");
        assert!(load.values().all(|n| *n == 1));
        senders.push(SenderDemand::default());
        let grants = regrant(&tiers, &mut senders);
        let load = simulate_binders(&grants, &mut senders, &[0, 0, 0, 5]);
        assert_eq!(load.values().sum::<u32>(), 20);
        let (max, min) = spread(&load, 16);
        assert!(max - min <= 1, "max {max} min {min}: {load:?}");
        // The fourth leaves: its CPUs go back to the others.
        senders.pop();
        let grants = regrant(&tiers, &mut senders);
        let all: BTreeSet<u32> = grants.iter().flat_map(cpus).collect();
        assert_eq!(all.len(), 16);
    }

    #[test]
    fn all_at_once_lands_distinct() {
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let mut senders = idle(3);
        let grants = regrant(&tiers, &mut senders);
        let load = simulate_binders(&grants, &mut senders, &[5, 5, 5]);
        assert_eq!(load.len(), 15);
        assert!(load.values().all(|n| *n == 1));
    }

    #[test]
    fn remote_cpus_only_when_local_ones_are_taken() {
        let tiers = vec![(0..8).collect::<Vec<u32>>(), (8..16).collect()];
        let grants = allocate(&tiers, &idle(2));
        assert!(grants.iter().flat_map(cpus).all(|c| c < 8), "{grants:?}");
        let mut busy = idle(2);
        busy[0].flows = (0..5).map(|c| (c, 1)).collect();
        let grants = allocate(&tiers, &busy);
        assert!(grants.iter().flat_map(cpus).any(|c| c >= 8), "{grants:?}");
    }

    #[test]
    fn oversubscribed_grants_carry_the_others_flows() {
        let tiers = vec![(0..4).collect::<Vec<u32>>()];
        let mut senders = idle(2);
        senders[0].flows = (0..4).map(|c| (c, 1)).collect();
        let grants = allocate(&tiers, &senders);
        assert_eq!(grants[1], vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
        assert_eq!(grants[0], vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    }

    #[test]
    fn two_hundred_senders_on_sixteen_cpus_stay_balanced() {
        let tiers = vec![(0..16).collect::<Vec<u32>>()];
        let mut senders = idle(200);
        for i in 0..200 {
            let grants = regrant(&tiers, &mut senders);
            let mut open = vec![0; 200];
            open[i] = 1 + (i as u32 % 3);
            simulate_binders(&grants, &mut senders, &open);
        }
        let (max, min) = spread(&load_per_cpu(&senders), 16);
        assert!(max - min <= 1, "max {max} min {min}");
        assert!(allocate(&tiers, &senders).iter().all(|g| !g.is_empty()));
    }

    #[test]
    fn nothing_offered_grants_nothing() {
        assert_eq!(allocate(&[], &idle(2)), vec![Vec::new(), Vec::new()]);
        assert!(allocate(&[vec![1, 2]], &[]).is_empty());
    }
}
