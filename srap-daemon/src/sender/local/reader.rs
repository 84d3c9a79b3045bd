//! `--local-placement reader`: each steered flow's local end (what this
//! host receives on it) goes to a queue whose interrupt CPU is the CPU of
//! the thread that connects, so a pinned reader gets its data where it
//! reads, with nothing steered in software (RFS's inter-processor
//! interrupt per batch) and no ntuple filter (aRFS).
//!
//! The hook runs on the connecting thread, so `bpf_get_smp_processor_id()`
//! is the reader's CPU; all it does with it is look up that CPU's row of
//! the grants map and claim among the slots the row grants, exactly as it
//! claims among a receiver agent's grant. The rows are computed here, once
//! per plan: a CPU a queue is served by gets its own slot; any other gets
//! the slots of the nearest CPUs that are served — its core's (SMT
//! sibling), then its last-level cache's, then its NUMA node's — all of one
//! nearness alike, the least occupied first. A CPU with none of those (no
//! offered CPU on its node, or topology unknown) gets this host's offer as
//! its row: its connects go to the least-occupied CPU as without this
//! setting.

use std::collections::{BTreeMap, BTreeSet};

use aya::{Ebpf, maps::Array};
use srap_common::binder::{BinderSizes, GRANTS_MAP, LOCAL_ROW, READER_CPUS, SlotGrant};
use srap_host::topology::{Neighbours, Topology};

use crate::sender::error::SenderError;

/// How near the slots of a reader's row are to the reader's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Nearness {
    /// A queue is served by the reader's own CPU.
    Own,
    /// By another thread of its core.
    Core,
    /// By a CPU sharing its last-level cache.
    Cache,
    /// By a CPU of its NUMA node.
    Node,
}

impl Nearness {
    pub fn name(self) -> &'static str {
        match self {
            Self::Own => "its own CPU",
            Self::Core => "an SMT sibling",
            Self::Cache => "a CPU of its last-level cache",
            Self::Node => "a CPU of its NUMA node",
        }
    }
}

/// One CPU's row: the slots a connect made on it claims among.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderRow {
    pub cpu: u32,
    pub nearness: Nearness,
    pub slots: BTreeSet<u32>,
}

/// The row of every CPU of `topology` that has a near offered CPU;
/// `offered` maps each offered CPU of this host to its slot. A CPU the
/// topology does not know (it came online since) has no row.
pub fn rows(topology: &Topology, offered: &BTreeMap<u32, u32>) -> Vec<ReaderRow> {
    topology
        .cpus
        .iter()
        .filter_map(|(&cpu, near)| row_of(cpu, near, offered))
        .collect()
}

/// `cpu`'s row: the offered CPUs of its nearest non-empty tier.
fn row_of(cpu: u32, near: &Neighbours, offered: &BTreeMap<u32, u32>) -> Option<ReaderRow> {
    let own = BTreeSet::from([cpu]);
    let tiers = [
        (Nearness::Own, &own),
        (Nearness::Core, &near.core),
        (Nearness::Cache, &near.last_level_cache),
        (Nearness::Node, &near.node),
    ];
    tiers.into_iter().find_map(|(nearness, cpus)| {
        let slots: BTreeSet<u32> = cpus
            .iter()
            .filter_map(|c| offered.get(c))
            .copied()
            .collect();
        (!slots.is_empty()).then_some(ReaderRow {
            cpu,
            nearness,
            slots,
        })
    })
}

/// How many CPUs got rows of each nearness, for the agent's log.
pub fn summary(rows: &[ReaderRow], cpus: usize) -> String {
    let mut by: BTreeMap<Nearness, usize> = BTreeMap::new();
    for row in rows {
        *by.entry(row.nearness).or_default() += 1;
    }
    let mut parts: Vec<String> = by
        .iter()
        .map(|(nearness, n)| format!("{n} on {}", nearness.name()))
        .collect();
    let unplaced = cpus.saturating_sub(rows.len());
    if unplaced > 0 {
        parts.push(format!("{unplaced} spread (no offered CPU near them)"));
    }
    parts.join(", ")
}

/// Writes `rows` into the grants map (rows past the receivers'), every
/// other CPU's row this host's offer as [`LOCAL_ROW`]'s grant holds it (a
/// CPU that lost its row in a re-plan takes the least-occupied CPU, never a
/// stale slot). Rows of CPUs past [`READER_CPUS`] cannot be held: their count.
pub fn write(
    ebpf: &mut Ebpf,
    sizes: &BinderSizes,
    rows: &[ReaderRow],
) -> Result<usize, SenderError> {
    let map_error = |source| SenderError::Map {
        map: GRANTS_MAP,
        source,
    };
    let map = ebpf
        .map_mut(GRANTS_MAP)
        .ok_or(SenderError::Missing(GRANTS_MAP))?;
    let mut array: Array<_, SlotGrant> = Array::try_from(map).map_err(map_error)?;
    let offer = array.get(&LOCAL_ROW, 0).map_err(map_error)?;
    let by_cpu: BTreeMap<u32, &ReaderRow> = rows.iter().map(|r| (r.cpu, r)).collect();
    for cpu in 0..READER_CPUS {
        let grant = by_cpu.get(&cpu).map_or(offer, |row| {
            SlotGrant::of(row.slots.iter().map(|&slot| (slot, 0)))
        });
        array
            .set(sizes.reader_row(cpu), grant, 0)
            .map_err(map_error)?;
    }
    Ok(rows.iter().filter(|r| r.cpu >= READER_CPUS).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes of two cores of two threads: CPUs 0-3 on node 0 (cores
    /// {0,2} and {1,3}, one L3), 4-7 on node 1 (cores {4,6} and {5,7}, L3s
    /// {4,6} and {5,7}).
    fn topology() -> Topology {
        let set = |cpus: &[u32]| cpus.iter().copied().collect::<BTreeSet<u32>>();
        let cpus = (0..8)
            .map(|cpu| {
                let core = set(&[cpu & !2, cpu | 2]);
                let (llc, node) = if cpu < 4 {
                    (set(&[0, 1, 2, 3]), set(&[0, 1, 2, 3]))
                } else {
                    (core.clone(), set(&[4, 5, 6, 7]))
                };
                (
                    cpu,
                    Neighbours {
                        core,
                        last_level_cache: llc,
                        node,
                    },
                )
            })
            .collect();
        Topology { cpus }
    }

    fn row(rows: &[ReaderRow], cpu: u32) -> Option<(Nearness, Vec<u32>)> {
        rows.iter()
            .find(|r| r.cpu == cpu)
            .map(|r| (r.nearness, r.slots.iter().copied().collect()))
    }

    #[test]
    fn a_served_cpu_gets_its_own_slot_alone() {
        let offered: BTreeMap<u32, u32> = (0..8).map(|cpu| (cpu, 7 - cpu)).collect();
        let rows = rows(&topology(), &offered);
        for cpu in 0..8 {
            assert_eq!(row(&rows, cpu), Some((Nearness::Own, vec![7 - cpu])));
        }
    }

    #[test]
    fn an_unserved_cpu_gets_its_sibling_then_its_cache_then_its_node() {
        // Queues served by CPUs 0 and 5 only (slots 0 and 1).
        let offered = BTreeMap::from([(0, 0), (5, 1)]);
        let rows = rows(&topology(), &offered);
        assert_eq!(row(&rows, 2), Some((Nearness::Core, vec![0])));
        assert_eq!(row(&rows, 1), Some((Nearness::Cache, vec![0])));
        assert_eq!(row(&rows, 7), Some((Nearness::Core, vec![1])));
        assert_eq!(row(&rows, 4), Some((Nearness::Node, vec![1])));
        assert_eq!(row(&rows, 6), Some((Nearness::Node, vec![1])));
    }

    #[test]
    fn equals_share_a_row_and_a_cpu_with_none_near_is_spread() {
        // Node 1 serves nothing; node 0's CPUs 1 and 3 do (one core).
        let offered = BTreeMap::from([(1, 0), (3, 1)]);
        let rows = rows(&topology(), &offered);
        assert_eq!(row(&rows, 0), Some((Nearness::Cache, vec![0, 1])));
        assert_eq!(row(&rows, 4), None, "no offered CPU on its node");
        let said = summary(&rows, 8);
        assert!(said.contains("2 on its own CPU"), "{said}");
        assert!(said.contains("4 spread"), "{said}");
    }

    #[test]
    fn an_unknown_topology_still_places_served_cpus() {
        let topology = Topology {
            cpus: (0..4).map(|cpu| (cpu, Neighbours::default())).collect(),
        };
        let offered = BTreeMap::from([(2, 0)]);
        let rows = rows(&topology, &offered);
        assert_eq!(row(&rows, 2), Some((Nearness::Own, vec![0])));
        assert_eq!(rows.len(), 1);
    }
}
