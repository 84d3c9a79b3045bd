//! The CPUs of each NIC a receiver serves, shared between its senders one
//! NIC at a time.
//!
//! A flow that enters by a NIC is received on a CPU that NIC's queues
//! reach, so what a sender may claim there is a grant of that NIC's CPUs.
//! [`allocate_nics`] runs the one allocator ([`allocate`]) once per NIC,
//! over the CPUs that NIC offers; each sender's reported flows count on a
//! NIC where they sit on a CPU it offers (the allocator counts demand on
//! offered CPUs only). The demand a sender reports is per receiver CPU,
//! not per NIC: where two NICs' queues reach the same CPU, flows there
//! count on both, which makes each NIC's share of it more cautious, never
//! a grant of a CPU the NIC does not offer.

use std::collections::{BTreeMap, BTreeSet};

use super::allocate::{Grant, SenderDemand, allocate};

/// One sender as the per-NIC allocation sees it.
#[derive(Debug, Clone, Copy)]
pub struct SenderFlows<'a> {
    /// Open flows per receiver CPU, as it reported them.
    pub flows: &'a BTreeMap<u32, u32>,
    /// Its grant on each NIC now (as the offers; missing: none yet), kept
    /// where possible so grants move little.
    pub previous: &'a [Grant],
}

/// Each sender's grant on each NIC: `result[sender][nic]`, over the CPUs
/// `offers[nic]` (in tiers, the NIC's NUMA node first). Between senders a
/// NIC's grants are disjoint while the flows fit its CPUs, as
/// [`allocate`] decides for one NIC.
pub fn allocate_nics(offers: &[&[Vec<u32>]], senders: &[SenderFlows<'_>]) -> Vec<Vec<Grant>> {
    let mut grants = vec![Vec::with_capacity(offers.len()); senders.len()];
    for (nic, tiers) in offers.iter().enumerate() {
        let demands: Vec<SenderDemand> = senders
            .iter()
            .map(|s| SenderDemand {
                flows: s.flows.clone(),
                previous: s
                    .previous
                    .get(nic)
                    .map(|g| g.iter().map(|(cpu, _)| *cpu).collect())
                    .unwrap_or_else(BTreeSet::new),
                held: false,
            })
            .collect();
        let allocation = allocate(tiers, &demands);
        for (sender, grant) in grants.iter_mut().zip(allocation.grants) {
            sender.push(grant);
        }
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(grant: &Grant) -> BTreeSet<u32> {
        grant.iter().map(|(cpu, _)| *cpu).collect()
    }

    #[test]
    fn each_nics_cpus_are_shared_out_on_their_own() {
        // NIC 0's queues reach CPUs 0-1, NIC 1's CPUs 2-3.
        let first = vec![vec![0, 1]];
        let second = vec![vec![2, 3]];
        let none = BTreeMap::new();
        let senders = [
            SenderFlows {
                flows: &none,
                previous: &[],
            },
            SenderFlows {
                flows: &none,
                previous: &[],
            },
        ];
        let grants = allocate_nics(&[&first, &second], &senders);
        assert_eq!(grants.len(), 2);
        for nic in 0..2 {
            let a = cpus(&grants[0][nic]);
            let b = cpus(&grants[1][nic]);
            assert_eq!(a.len(), 1, "NIC {nic}: {grants:?}");
            assert!(a.is_disjoint(&b), "NIC {nic}: {grants:?}");
            let offered: BTreeSet<u32> = [first.clone(), second.clone()][nic]
                .iter()
                .flatten()
                .copied()
                .collect();
            assert!(a.union(&b).all(|c| offered.contains(c)), "{grants:?}");
        }
    }

    #[test]
    fn flows_on_one_nic_keep_their_cpus_there_and_leave_the_other_alone() {
        // Sender 0 holds a flow on CPU 3 (NIC 1's) only; sender 1 none.
        let first = vec![vec![0, 1]];
        let second = vec![vec![2, 3]];
        let on_three = BTreeMap::from([(3, 1)]);
        let none = BTreeMap::new();
        let grants = allocate_nics(
            &[&first, &second],
            &[
                SenderFlows {
                    flows: &on_three,
                    previous: &[],
                },
                SenderFlows {
                    flows: &none,
                    previous: &[],
                },
            ],
        );
        assert_eq!(cpus(&grants[0][1]), BTreeSet::from([3]), "{grants:?}");
        assert_eq!(cpus(&grants[1][1]), BTreeSet::from([2]), "{grants:?}");
        // On NIC 0 its flow on CPU 3 is no demand: an even split.
        assert_eq!(grants[0][0].len(), 1, "{grants:?}");
        assert_eq!(grants[1][0].len(), 1, "{grants:?}");
    }

    #[test]
    fn a_previous_grant_is_kept_on_its_nic() {
        let second = vec![vec![4, 5, 6, 7]];
        let none = BTreeMap::new();
        let before: Vec<Grant> = vec![vec![(6, 0), (7, 0)]];
        let grants = allocate_nics(
            &[&second],
            &[
                SenderFlows {
                    flows: &none,
                    previous: &before,
                },
                SenderFlows {
                    flows: &none,
                    previous: &[],
                },
            ],
        );
        assert_eq!(cpus(&grants[0][0]), BTreeSet::from([6, 7]), "{grants:?}");
        assert_eq!(cpus(&grants[1][0]), BTreeSet::from([4, 5]), "{grants:?}");
    }

    #[test]
    fn a_nic_without_cpus_grants_nothing_and_no_nic_gives_no_grants() {
        let empty: Vec<Vec<u32>> = Vec::new();
        let none = BTreeMap::new();
        let one = [SenderFlows {
            flows: &none,
            previous: &[],
        }];
        assert_eq!(allocate_nics(&[&empty], &one), vec![vec![Vec::new()]]);
        assert_eq!(allocate_nics(&[], &one), vec![Vec::<Grant>::new()]);
        assert!(allocate_nics(&[&empty], &[]).is_empty());
    }
}
