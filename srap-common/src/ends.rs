//! Both ends of a flow: which NIC hashes which packets, where the port SRAP
//! chooses sits in each hash, and the joint map that places one flow on a
//! CPU of each NIC with one port.
//!
//! A TCP flow crosses two NICs. The connecting host (where the binder runs)
//! chooses its source port `p`. The *remote* NIC (the server's) hashes the
//! packets the connecting host sends over `client | server | p | server
//! port`: `p` is the source port there. The connecting host's *local* NIC
//! hashes what comes back (the data of a download, the ACKs of an upload)
//! over the reverse tuple `server | client | server port | p`: `p` is the
//! destination port there. Both hashes are affine in `p` over GF(2)
//! ([`crate::solver`]), so with `k₁` bits selecting the remote NIC's
//! indirection entry and `k₂` the local one's, the pair of entries is an
//! affine function of `p` into `k₁ + k₂` bits: the [`JointMap`]. With full
//! rank every pair of entries is reached by a coset of `2^(16 − k₁ − k₂)`
//! ports (128 + 128 entries: 4 ports each); with less, some pairs are
//! reached by none and the reached ones by more.
//!
//! A model says which end it stands for ([`End`], [`RssModel::facing`]):
//! every flow is given as the connecting host sees it, and a model of that
//! host's own NIC hashes the reverse. So the solver and the port tables
//! plan for either NIC unchanged.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use thiserror::Error;

pub use crate::rss::End;
use crate::{
    binder::{CosetRow, JointRow, LayoutRow},
    family::Family,
    port_range::PortRange,
    protocol::{FlowType, Protocol},
    rss::{FlowTuple, Landing, RssModel, Unhashed},
    solver::{IndexMap, PortHash, PortSpan},
};

/// Why two NICs cannot be placed jointly.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JointError {
    #[error(
        "the {end:?} NIC's indirection table has {entries} entries, not a power of two: \
         its entry is not a linear function of the port"
    )]
    NotPowerOfTwo { end: End, entries: usize },
    #[error("{remote} + {local} index bits do not fit a 32-bit joint value")]
    TooWide { remote: u32, local: u32 },
    #[error("the {given:?} NIC's model was given where the {wanted:?} NIC's belongs")]
    WrongEnd { given: End, wanted: End },
    #[error("the {end:?} NIC: {source}")]
    Unhashed { end: End, source: Unhashed },
}

/// Refuses `flow`'s flows on `model`'s NIC when its hashed fields for
/// them are unknown.
fn check_hashed(model: &RssModel, flow: FlowType) -> Result<(), JointError> {
    model
        .hashed(flow)
        .map(|_| ())
        .map_err(|source| JointError::Unhashed {
            end: model.end(),
            source,
        })
}

/// The (remote entry, local entry) of a flow as an affine function of its
/// chosen port: `joint(p) = (r(p), l(p))`, kept as one [`IndexMap`] over
/// the `k₁ + k₂`-bit value `r | l << k₁`.
#[derive(Debug, Clone)]
pub struct JointMap {
    remote_bits: u32,
    local_bits: u32,
    map: IndexMap,
}

impl JointMap {
    /// The joint map of `flow` (as the connecting host sees it; its source
    /// port unused) between the `remote` NIC and the `local` one (a model
    /// facing [`End::Local`]).
    pub fn new(remote: &RssModel, local: &RssModel, flow: &FlowTuple) -> Result<Self, JointError> {
        let bits = |wanted: End, model: &RssModel| {
            if model.end() != wanted {
                return Err(JointError::WrongEnd {
                    given: model.end(),
                    wanted,
                });
            }
            model.index_bits().ok_or(JointError::NotPowerOfTwo {
                end: wanted,
                entries: model.indir().len(),
            })
        };
        let (k1, k2) = (bits(End::Remote, remote)?, bits(End::Local, local)?);
        check_hashed(remote, flow.flow_type())?;
        check_hashed(local, flow.flow_type())?;
        Self::from_port_hashes(
            &PortHash::new(remote, flow),
            k1,
            &PortHash::new(local, flow),
            k2,
        )
    }

    /// The joint map of two hashes of the chosen port whose low `k1` and
    /// `k2` bits select the remote and local entries.
    pub fn from_port_hashes(
        remote: &PortHash,
        k1: u32,
        local: &PortHash,
        k2: u32,
    ) -> Result<Self, JointError> {
        if k1 + k2 > 32 {
            return Err(JointError::TooWide {
                remote: k1,
                local: k2,
            });
        }
        let joint = PortHash::from_fn(|port| {
            (remote.hash(port) & low_mask(k1)) | ((local.hash(port) & low_mask(k2)) << k1)
        });
        Ok(Self {
            remote_bits: k1,
            local_bits: k2,
            map: IndexMap::new(&joint, k1 + k2),
        })
    }

    /// `k₁ + k₂`: the bits of a (remote entry, local entry) pair.
    pub fn bits(&self) -> u32 {
        self.remote_bits + self.local_bits
    }

    /// The rank of the `(k₁ + k₂) × 16` map: how many of the pair's bits
    /// the port decides.
    pub fn rank(&self) -> u32 {
        16 - self.map.ports_per_index().trailing_zeros()
    }

    /// Every pair of entries is reached by some port.
    pub fn full_rank(&self) -> bool {
        self.rank() == self.bits()
    }

    /// Ports that reach each reached pair (`2^(16 − rank)`).
    pub fn ports_per_pair(&self) -> usize {
        self.map.ports_per_index()
    }

    /// Pairs of entries some port reaches (`2^rank`).
    pub fn pairs_reached(&self) -> u64 {
        1 << self.rank()
    }

    fn value(&self, remote_entry: u32, local_entry: u32) -> Option<u32> {
        (remote_entry <= low_mask(self.remote_bits) && local_entry <= low_mask(self.local_bits))
            .then(|| remote_entry | (local_entry << self.remote_bits))
    }

    /// One port that puts the flow on `remote_entry` and `local_entry`.
    pub fn solve(&self, remote_entry: u32, local_entry: u32) -> Option<u16> {
        self.map.solve(self.value(remote_entry, local_entry)?)
    }

    /// Every port that puts the flow on `remote_entry` and `local_entry`
    /// (none when the pair is not reached).
    pub fn ports_for(&self, remote_entry: u32, local_entry: u32) -> Vec<u16> {
        self.value(remote_entry, local_entry)
            .map_or_else(Vec::new, |value| self.map.ports_for(value))
    }
}

/// The binder's [`JointRow`] for one (receiver layout, local layout) pair,
/// and its solutions: for each δ, the least member `j` of a receiver coset
/// whose local value is δ away from its least port's (see [`JointRow`]).
#[derive(Debug, Clone)]
pub struct JointTables {
    /// The row, its `solution_base` left for the plan to assign.
    pub row: JointRow,
    /// Indexed by δ (2^k₂ of them): a `j`, or [`JointRow::NONE`].
    pub solutions: Vec<u32>,
}

impl JointTables {
    /// The tables joining the receiver layout `remote` (its span) with this
    /// host's NIC `local` (facing [`End::Local`], a power-of-two table,
    /// linear in the port) for `protocol`'s flows between addresses of
    /// `family_of`'s family (the remote layout's).
    pub fn new(
        remote: &LayoutRow,
        local: &RssModel,
        protocol: Protocol,
        family_of: IpAddr,
    ) -> Result<Self, JointError> {
        if local.end() != End::Local {
            return Err(JointError::WrongEnd {
                given: local.end(),
                wanted: End::Local,
            });
        }
        let k2 = local.index_bits().ok_or(JointError::NotPowerOfTwo {
            end: End::Local,
            entries: local.indir().len(),
        })?;
        if k2 > 16 {
            return Err(JointError::TooWide {
                remote: 0,
                local: k2,
            });
        }
        check_hashed(local, FlowType::new(protocol, Family::of(&family_of)))?;
        let any: IpAddr = match family_of {
            IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let template =
            FlowTuple::of(protocol, any, 0, any, 0).map_err(|_| JointError::TooWide {
                remote: 0,
                local: k2,
            })?;
        let mask = low_mask(k2);
        let chosen = PortHash::new(local, &template);
        let (low, high) = chosen.byte_tables();
        let (local_low, local_high) = (
            low.map(|v| (v & mask) as u16),
            high.map(|v| (v & mask) as u16),
        );
        let local_value = |port: u16| {
            u32::from(local_low[usize::from(port & 0xff)] ^ local_high[usize::from(port >> 8)])
        };
        let span = |j: u32| {
            remote.span_low[(j & 0xff) as usize] ^ remote.span_high[((j >> 8) & 0xff) as usize]
        };
        // The span's basis vectors are its ports at single bits: non-zero
        // below its dimension.
        let dim = (0..16).take_while(|b| span(1 << b) != 0).count() as u32;
        let columns = std::array::from_fn(|b| {
            if (b as u32) < dim {
                local_value(span(1 << b))
            } else {
                0
            }
        });
        let k = IndexMap::from_columns(columns, 0, k2);
        // K's kernel within the coset's own j (below 2^dim).
        let all = k.kernel();
        let vectors: Vec<u16> = (0..16)
            .map(|i| all.at(1 << i))
            .filter(|v| *v != 0 && u32::from(*v) < (1 << dim))
            .collect();
        let kernel = PortSpan::new(&vectors);
        let solutions = (0..=mask)
            .map(|delta| {
                k.solve(delta)
                    .map_or(JointRow::NONE, |j| u32::from(kernel.reduce(j)))
            })
            .collect();
        let (kernel_low, kernel_high) = kernel.byte_tables();
        Ok(Self {
            row: JointRow {
                local_low,
                local_high,
                kernel_low,
                kernel_high,
                kernel_len: kernel.len(),
                solution_base: 0,
                local_values: mask + 1,
                _pad: 0,
            },
            solutions,
        })
    }

    /// Every port of `coset` (of the receiver layout `remote`) in the
    /// range whose local value is `v`, ascending: what the hook's members
    /// are drawn from.
    pub fn ports(&self, remote: &LayoutRow, coset: &CosetRow, v: u32) -> Vec<u16> {
        if coset.count == 0 {
            return Vec::new();
        }
        let delta = self.row.delta(coset.port0 as u16, v);
        let Some(&j0) = self.solutions.get(delta as usize) else {
            return Vec::new();
        };
        if j0 == JointRow::NONE {
            return Vec::new();
        }
        (0..self.row.kernel_len)
            .map(|i| self.row.member(j0, i))
            .filter(|j| j.wrapping_sub(coset.first) < coset.count)
            .map(|j| {
                coset.port0 as u16
                    ^ remote.span_low[(j & 0xff) as usize]
                    ^ remote.span_high[((j >> 8) & 0xff) as usize]
            })
            .collect()
    }
}

/// `k` low bits set.
fn low_mask(k: u32) -> u32 {
    if k >= 32 { u32::MAX } else { (1 << k) - 1 }
}

/// One flow placed on both NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BothFlow {
    pub port: u16,
    pub remote: Landing,
    pub local: Landing,
    /// The pair came from the joint map; false when no port of the range
    /// reached a free pair, and the flow kept its receiver CPU with the
    /// best local CPU among that CPU's ports.
    pub joint: bool,
}

/// Why flows could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BothError {
    #[error(transparent)]
    Joint(#[from] JointError),
    #[error("no port of {range} is left for another flow")]
    NoPorts { range: PortRange },
}

/// Places `flows` flows shaped like `flow` (its source port unused) on
/// both NICs (`local` facing [`End::Local`]), as the binder does: each on the least-occupied remote CPU
/// (ties: lowest), then on the least-occupied local CPU of `local_cpus`
/// (every CPU a local queue reaches when `None`; ties: lowest) that some
/// unused port of `range` reaches together with it, the port taken from
/// the joint map. When no such port exists (the map is rank-deficient, or
/// the range holds none of the pair's ports), the flow keeps its remote CPU
/// and takes, of that CPU's unused ports, one whose local CPU is least
/// occupied. The reference the binder is tested against.
pub fn plan_both(
    remote: &RssModel,
    local: &RssModel,
    flow: &FlowTuple,
    flows: usize,
    range: PortRange,
    local_cpus: Option<&BTreeSet<u32>>,
) -> Result<Vec<BothFlow>, BothError> {
    let joint = JointMap::new(remote, local, flow)?;
    let remote_entries = entries_by_cpu(remote, None);
    let local_entries = entries_by_cpu(local, local_cpus);
    let mut remote_load: BTreeMap<u32, usize> = remote_entries.keys().map(|c| (*c, 0)).collect();
    let mut local_load: BTreeMap<u32, usize> = local_entries.keys().map(|c| (*c, 0)).collect();
    let mut used = BTreeSet::new();
    let mut placed = Vec::with_capacity(flows);
    let place = |port: u16, joint: bool| BothFlow {
        port,
        remote: remote.landing(&flow.with_sport(port)),
        local: local.landing(&flow.with_sport(port)),
        joint,
    };
    for _ in 0..flows {
        let free = |port: &u16| range.contains(*port) && !used.contains(port);
        let remote_cpus = least_first(&remote_load);
        let remote_ports = |cpu: u32| -> Vec<u16> {
            remote_entries[&cpu]
                .iter()
                .flat_map(|e| joint_remote_ports(&joint, *e))
                .filter(free)
                .collect()
        };
        let Some(cpu) = remote_cpus
            .into_iter()
            .find(|cpu| !remote_ports(*cpu).is_empty())
        else {
            return Err(BothError::NoPorts { range });
        };
        let pair = least_first(&local_load).into_iter().find_map(|local_cpu| {
            remote_entries[&cpu].iter().find_map(|r| {
                local_entries[&local_cpu]
                    .iter()
                    .find_map(|l| joint.ports_for(*r, *l).into_iter().find(free))
            })
        });
        let next = match pair {
            Some(port) => place(port, true),
            None => {
                // Keep the receiver's placement; the best local CPU its
                // ports offer.
                let load = |p: &u16| {
                    let cpu = place(*p, false).local.cpu;
                    local_load.get(&cpu).copied().unwrap_or(usize::MAX)
                };
                let ports = remote_ports(cpu);
                let port = ports.iter().copied().min_by_key(load).unwrap_or(ports[0]);
                place(port, false)
            }
        };
        used.insert(next.port);
        *remote_load.entry(next.remote.cpu).or_default() += 1;
        if let Some(load) = local_load.get_mut(&next.local.cpu) {
            *load += 1;
        }
        placed.push(next);
    }
    Ok(placed)
}

/// Every port whose remote entry is `entry` (whatever its local entry).
fn joint_remote_ports(joint: &JointMap, entry: u32) -> Vec<u16> {
    (0..=low_mask(joint.local_bits))
        .flat_map(|l| joint.ports_for(entry, l))
        .collect()
}

/// Each CPU a queue reaches (of `only`, when given) with its entries.
fn entries_by_cpu(model: &RssModel, only: Option<&BTreeSet<u32>>) -> BTreeMap<u32, Vec<u32>> {
    let mut by_cpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (entry, queue) in model.indir().iter().enumerate() {
        let cpu = model.queue_cpu()[*queue as usize];
        if only.is_none_or(|cpus| cpus.contains(&cpu)) {
            by_cpu.entry(cpu).or_default().push(entry as u32);
        }
    }
    by_cpu
}

/// CPUs by load, then number.
fn least_first(load: &BTreeMap<u32, usize>) -> Vec<u32> {
    let mut cpus: Vec<(usize, u32)> = load.iter().map(|(c, n)| (*n, *c)).collect();
    cpus.sort_unstable();
    cpus.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rss::{RssDescription, embedded_default};

    fn model(queues: u32, entries: u32, xfrm: &str) -> RssModel {
        RssModel::from_description(&RssDescription {
            indir: (0..entries).map(|i| i % queues).collect(),
            queue_cpu: Some((0..queues).collect()),
            input_xfrm: xfrm.into(),
            ..embedded_default()
        })
        .unwrap()
    }

    fn flow() -> FlowTuple {
        FlowTuple::new(
            "10.0.0.1".parse().unwrap(),
            0,
            "10.0.0.2".parse().unwrap(),
            5201,
        )
        .unwrap()
    }

    #[test]
    fn a_model_facing_the_local_end_hashes_the_reverse_tuple() {
        let remote = model(32, 128, "none");
        let local = remote.clone().facing(End::Local);
        let f = flow().with_sport(40000);
        let reverse = FlowTuple::new(f.dst(), f.dport, f.src(), f.sport).unwrap();
        assert_eq!(local.hash(&f), remote.hash(&reverse));
        assert_eq!(local.landing(&f), remote.landing(&reverse));
        let chosen = PortHash::new(&local, &f);
        for port in [0, 1, 1024, 40000, 65535] {
            assert_eq!(
                chosen.hash(port),
                remote.hash(&reverse.with_dport(port)),
                "the chosen port is the reverse tuple's destination port"
            );
        }
    }

    #[test]
    fn two_seven_bit_tables_give_four_ports_per_pair() {
        let (r, l) = (
            model(32, 128, "none"),
            model(16, 128, "none").facing(End::Local),
        );
        let joint = JointMap::new(&r, &l, &flow()).unwrap();
        assert_eq!((joint.bits(), joint.rank()), (14, 14));
        assert!(joint.full_rank());
        assert_eq!(joint.ports_per_pair(), 4);
        for (re, le) in [(0, 0), (5, 77), (127, 127)] {
            let ports = joint.ports_for(re, le);
            assert_eq!(ports.len(), 4);
            for port in ports {
                let f = flow().with_sport(port);
                assert_eq!(r.landing(&f).index, re);
                assert_eq!(l.landing(&f).index, le);
            }
        }
        assert_eq!(joint.ports_for(128, 0), Vec::<u16>::new(), "no entry 128");
        let err = JointMap::new(&r, &r, &flow()).unwrap_err();
        assert!(matches!(err, JointError::WrongEnd { .. }), "{err}");
    }

    #[test]
    fn sym_xor_with_one_key_makes_both_hashes_equal_and_the_map_rank_deficient() {
        let (r, l) = (
            model(32, 128, "sym-xor"),
            model(16, 128, "sym-xor").facing(End::Local),
        );
        let f = flow().with_sport(40000);
        assert_eq!(r.hash(&f), l.hash(&f));
        let joint = JointMap::new(&r, &l, &flow()).unwrap();
        assert_eq!(joint.rank(), 7, "the local entry is the remote entry");
        assert!(!joint.full_rank());
        assert_eq!(joint.ports_per_pair(), 512);
        assert!(joint.ports_for(3, 3).len() == 512 && joint.ports_for(3, 4).is_empty());
    }
}
