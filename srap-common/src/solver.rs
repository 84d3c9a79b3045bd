//! Which source ports land on which receiver CPU, for one (source address,
//! destination address, destination port).
//!
//! With everything but the source port fixed, every input transform SRAP
//! models is affine in the port over GF(2) (an OR with a fixed bit either
//! forces it or passes the port bit through), and so is Toeplitz. So
//! `hash(port) = base ⊕ M·port`, held here as two 256-entry tables. When the
//! indirection table has 2^k entries the index is the low k bits of the hash:
//! the ports of one entry are then a coset of the kernel of a k×16 binary map,
//! enumerated directly. Other table sizes take a table-driven scan.
//!
//! A coset's ports are also enumerated *in order* ([`PortSpan`]): with the
//! kernel's basis in reduced echelon form and the coset's least port as its
//! representative, the `j`-th port is an increasing function of `j`, so the
//! ports of any port range are one run of `j` — what the binder's hook walks.

use std::collections::BTreeMap;

use crate::{
    port_range::PortRange,
    rss::{FlowTuple, Landing, RssModel},
};

/// The hash of one flow as an affine function of its source port.
#[derive(Clone)]
pub struct PortHash {
    base: u32,
    low: [u32; 256],
    high: [u32; 256],
}

impl PortHash {
    /// The hash of `flow` as a function of its source port.
    pub fn new(model: &RssModel, flow: &FlowTuple) -> Self {
        Self::from_fn(|port| model.hash(&flow.with_sport(port)))
    }

    /// Tabulates an affine function of a port from its value at 0 and at
    /// each single-bit port.
    pub fn from_fn(hash: impl Fn(u16) -> u32) -> Self {
        let base = hash(0);
        let bits: [u32; 16] = std::array::from_fn(|bit| hash(1 << bit) ^ base);
        let byte_table = |shift: usize| -> [u32; 256] {
            std::array::from_fn(|value| {
                (0..8)
                    .filter(|bit| value & (1 << bit) != 0)
                    .fold(0, |acc, bit| acc ^ bits[bit + shift])
            })
        };
        Self {
            base,
            low: byte_table(0),
            high: byte_table(8),
        }
    }

    /// The linear part's byte tables: `low[port & 0xff] ^ high[port >> 8]`.
    pub fn byte_tables(&self) -> (&[u32; 256], &[u32; 256]) {
        (&self.low, &self.high)
    }

    /// The hash with port 0: what every port's hash is XORed onto.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The hash contribution of port bit `bit` (0 = least significant).
    pub fn column(&self, bit: u32) -> u32 {
        if bit < 8 {
            self.low[1 << bit]
        } else {
            self.high[1 << (bit - 8)]
        }
    }

    #[inline]
    pub fn hash(&self, port: u16) -> u32 {
        self.base ^ self.low[usize::from(port & 0xff)] ^ self.high[usize::from(port >> 8)]
    }
}

/// Source ports → receiver CPUs for one flow template (its source port unused).
pub struct PortSolver<'m> {
    model: &'m RssModel,
    port_hash: PortHash,
}

impl<'m> PortSolver<'m> {
    pub fn new(model: &'m RssModel, flow: &FlowTuple) -> Self {
        Self {
            model,
            port_hash: PortHash::new(model, flow),
        }
    }

    pub fn port_hash(&self) -> &PortHash {
        &self.port_hash
    }

    pub fn landing(&self, port: u16) -> Landing {
        self.model.landing_of_hash(self.port_hash.hash(port))
    }

    /// The receiver CPU of every one of the 65 536 source ports.
    pub fn cpu_table(&self) -> Vec<u32> {
        let entry_cpu: Vec<u32> = self
            .model
            .indir()
            .iter()
            .map(|queue| self.model.queue_cpu()[*queue as usize])
            .collect();
        let len = entry_cpu.len() as u32;
        let mut table = vec![0u32; 1 << 16];
        let mask = self.model.index_bits().map(|_| len - 1);
        for (high, row) in table.chunks_exact_mut(256).enumerate() {
            let partial = self.port_hash.base ^ self.port_hash.high[high];
            match mask {
                Some(mask) => {
                    for (slot, low) in row.iter_mut().zip(self.port_hash.low.iter()) {
                        *slot = entry_cpu[((partial ^ low) & mask) as usize];
                    }
                }
                None => {
                    for (slot, low) in row.iter_mut().zip(self.port_hash.low.iter()) {
                        *slot = entry_cpu[((partial ^ low) % len) as usize];
                    }
                }
            }
        }
        table
    }

    /// For each indirection entry, every source port (0–65535) that selects it,
    /// ascending.
    pub fn ports_by_index(&self) -> Vec<Vec<u16>> {
        let mut by_index = vec![Vec::new(); self.model.indir().len()];
        match self.linear_map() {
            Some(map) => {
                for (index, ports) in by_index.iter_mut().enumerate() {
                    *ports = map.ports_for(index as u32);
                    ports.sort_unstable();
                }
            }
            None => {
                let len = by_index.len() as u32;
                for port in 0..=u16::MAX {
                    by_index[(self.port_hash.hash(port) % len) as usize].push(port);
                }
            }
        }
        by_index
    }

    /// The source ports of `range` that land on each reachable CPU, ascending.
    pub fn ports_by_cpu(&self, range: PortRange) -> BTreeMap<u32, Vec<u16>> {
        let mut by_cpu: BTreeMap<u32, Vec<u16>> = BTreeMap::new();
        for (index, ports) in self.ports_by_index().into_iter().enumerate() {
            let queue = self.model.indir()[index];
            let cpu = self.model.queue_cpu()[queue as usize];
            by_cpu
                .entry(cpu)
                .or_default()
                .extend(ports.into_iter().filter(|port| range.contains(*port)));
        }
        by_cpu.retain(|_, ports| !ports.is_empty());
        for ports in by_cpu.values_mut() {
            ports.sort_unstable();
        }
        by_cpu
    }

    /// The port → index map as a GF(2) linear map, when the table size allows.
    pub fn linear_map(&self) -> Option<IndexMap> {
        let bits = self.model.index_bits()?;
        Some(IndexMap::new(&self.port_hash, bits))
    }
}

/// `index(port) = low_k(base) ⊕ L·port` for a table of 2^k entries, kept in
/// row-echelon form so any index can be solved for and its ports enumerated.
#[derive(Debug, Clone)]
pub struct IndexMap {
    mask: u32,
    base: u32,
    /// Echelon basis of L's image: (value, the ports' XOR that produces it),
    /// indexed by the value's leading bit.
    pivots: [Option<(u32, u16)>; 32],
    /// L's kernel: ports that do not move the index.
    kernel: PortSpan,
}

impl IndexMap {
    pub fn new(port_hash: &PortHash, bits: u32) -> Self {
        let columns = std::array::from_fn(|bit| port_hash.column(bit as u32));
        Self::from_columns(columns, port_hash.base(), bits)
    }

    /// The map whose port bit `i` flips the index bits `columns[i]`, with
    /// index `base` at port 0, kept to its low `bits` bits. Any linear
    /// constraints on one port stack into one map: a second NIC's index
    /// bits shifted above the first's make the joint map, whose cosets are
    /// the ports that satisfy both.
    pub fn from_columns(columns: [u32; 16], base: u32, bits: u32) -> Self {
        let mask = if bits >= 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        let mut map = Self {
            mask,
            base: base & mask,
            pivots: [None; 32],
            kernel: PortSpan::default(),
        };
        let mut kernel = Vec::new();
        for (bit, column) in columns.iter().enumerate() {
            let (mut value, mut ports) = (column & mask, 1u16 << bit);
            map.reduce(&mut value, &mut ports);
            if value == 0 {
                kernel.push(ports);
            } else {
                map.pivots[value.ilog2() as usize] = Some((value, ports));
            }
        }
        map.kernel = PortSpan::new(&kernel);
        map
    }

    /// Clears the leading bits of `value` that have a pivot, tracking the ports.
    fn reduce(&self, value: &mut u32, ports: &mut u16) {
        for lead in (0..32).rev() {
            if *value & (1 << lead) != 0
                && let Some((pivot, pivot_ports)) = self.pivots[lead]
            {
                *value ^= pivot;
                *ports ^= pivot_ports;
            }
        }
    }

    /// Number of ports that select each reachable index (2^(16 − rank)).
    pub fn ports_per_index(&self) -> usize {
        self.kernel.len() as usize
    }

    /// The ports that leave the index unchanged: every coset is its least
    /// port XOR this span.
    pub fn kernel(&self) -> &PortSpan {
        &self.kernel
    }

    /// The least port that selects `index`, if any does.
    pub fn least_port(&self, index: u32) -> Option<u16> {
        self.solve(index).map(|port| self.kernel.reduce(port))
    }

    /// One port that selects `index`, if any does.
    pub fn solve(&self, index: u32) -> Option<u16> {
        let (mut value, mut ports) = ((index ^ self.base) & self.mask, 0u16);
        if index & !self.mask != 0 {
            return None;
        }
        self.reduce(&mut value, &mut ports);
        (value == 0).then_some(ports)
    }

    /// Every port that selects `index`: one solution plus the kernel's span,
    /// walked in Gray-code order (one XOR per port).
    pub fn ports_for(&self, index: u32) -> Vec<u16> {
        let Some(mut port) = self.solve(index) else {
            return Vec::new();
        };
        let count = self.ports_per_index();
        let mut ports = Vec::with_capacity(count);
        ports.push(port);
        for step in 1..count {
            port ^= self.kernel.basis[step.trailing_zeros() as usize];
            ports.push(port);
        }
        ports
    }
}

/// The ports reachable by XOR from a set of ports (a subspace of GF(2)^16),
/// kept as a basis in reduced echelon form, leading bits ascending. Then
/// [`PortSpan::at`] is increasing in `j`: two indexes first differ in some
/// bit `i`, the ports then first differ in basis vector `i`'s leading bit
/// (no other vector has that bit, and the ones below it are all lower), and
/// the larger index has it set. So `least ⊕ at(j)`, with `least` the
/// coset's least port ([`PortSpan::reduce`]), lists a coset in ascending
/// order, and a port range is one run of `j` ([`PortSpan::within`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSpan {
    basis: Vec<u16>,
}

impl PortSpan {
    /// The span of `vectors` (dependent ones and zeros are dropped).
    pub fn new(vectors: &[u16]) -> Self {
        let mut basis: Vec<u16> = Vec::new();
        for &vector in vectors {
            let reduced = basis.iter().fold(vector, |v, &b| v.min(v ^ b));
            if reduced != 0 {
                // Clear the new leading bit from the others, keeping the
                // basis reduced.
                let lead = 1u16 << reduced.ilog2();
                for b in &mut basis {
                    if *b & lead != 0 {
                        *b ^= reduced;
                    }
                }
                basis.push(reduced);
                basis.sort_unstable();
            }
        }
        Self { basis }
    }

    /// Ports in the span: 2^dimension.
    pub fn len(&self) -> u32 {
        1 << self.basis.len()
    }

    /// Never: the span always holds port 0.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The `j`-th port of the span (`j` below [`PortSpan::len`]), ascending.
    pub fn at(&self, j: u32) -> u16 {
        self.basis
            .iter()
            .enumerate()
            .filter(|(bit, _)| j & (1 << bit) != 0)
            .fold(0, |port, (_, b)| port ^ b)
    }

    /// [`PortSpan::at`] as two byte tables, `low[j & 0xff] ^ high[j >> 8]`:
    /// what the hook computes it with.
    pub fn byte_tables(&self) -> ([u16; 256], [u16; 256]) {
        let table = |shift: u32| std::array::from_fn(|byte| self.at((byte as u32) << shift));
        (table(0), table(8))
    }

    /// The least port of `port`'s coset: `port` with every leading bit of
    /// the basis cleared.
    pub fn reduce(&self, port: u16) -> u16 {
        self.basis.iter().fold(port, |p, &b| p.min(p ^ b))
    }

    /// The run of `j` whose ports `least ⊕ at(j)` lie in `range`: its first
    /// `j` and its length (0: none do). `least` must be reduced.
    pub fn within(&self, least: u16, range: PortRange) -> (u32, u32) {
        let port = |j: u32| least ^ self.at(j);
        // The first j whose port is at least `bound` (len() if none).
        let first_at_least = |bound: u16| {
            let (mut lo, mut hi) = (0u32, self.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if port(mid) < bound {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let first = first_at_least(range.start());
        let end = match range.end().checked_add(1) {
            Some(after) => first_at_least(after),
            None => self.len(),
        };
        (first, end.saturating_sub(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rss::embedded_default;

    /// The directions span exactly the differences of the range's ports,
    /// checked against every pair's XOR by elimination.
    #[test]
    fn a_ranges_directions_span_its_ports_differences() {
        fn rank(vectors: impl IntoIterator<Item = u16>) -> (u32, Vec<u16>) {
            let mut basis: Vec<u16> = Vec::new();
            for mut v in vectors {
                for b in &basis {
                    v = v.min(v ^ b);
                }
                if v != 0 {
                    basis.push(v);
                    basis.sort_unstable_by(|a, b| b.cmp(a));
                }
            }
            (basis.len() as u32, basis)
        }
        for (start, end, free) in [
            (1024, 65535, 16),
            (32768, 60999, 15),
            (10000, 32767, 15),
            (7, 8, 1),
            (6, 8, 2),
            (5000, 5000, 0),
        ] {
            let range = PortRange::new(start, end).unwrap();
            let (n, basis) = rank(range.directions());
            assert_eq!(n, free, "{range}");
            let (all, _) = rank((start..=end).map(|p| p ^ start).chain(basis));
            assert_eq!(all, n, "{range}: a difference outside the span");
        }
        // The kernel's range never flips bit 15.
        let kernel = PortRange::new(32768, 60999).unwrap();
        assert!(kernel.directions().all(|m| m & 0x8000 == 0));
    }

    #[test]
    fn port_ranges_parse_like_sysctl() {
        assert_eq!(
            "1024-65535".parse::<PortRange>().unwrap(),
            PortRange::DEFAULT
        );
        assert_eq!("32768\t60999".parse::<PortRange>().unwrap().len(), 28232);
        let refusal = |text: &str| text.parse::<PortRange>().unwrap_err().to_string();
        assert!(refusal("9-3").contains("empty"));
        assert!(refusal("0-3").contains("port 0"));
        assert!(refusal("1-70000").contains("70000"));
        assert!(refusal("1024").contains("port range"));
    }

    #[test]
    fn a_span_lists_each_coset_in_order_and_a_range_is_one_run() {
        let span = PortSpan::new(&[0b1011_0000_0000_0101, 0b0000_0001_0010_0000, 0x4400, 0x4400]);
        assert_eq!(span.len(), 8, "the repeated vector adds nothing");
        let least = span.reduce(0x1234);
        let coset: Vec<u16> = (0..span.len()).map(|j| least ^ span.at(j)).collect();
        assert!(coset.windows(2).all(|w| w[0] < w[1]), "{coset:x?}");
        assert_eq!(coset[0], least);
        let mut members: Vec<u16> = (0..8u32)
            .map(|bits| {
                [0b1011_0000_0000_0101u16, 0b0000_0001_0010_0000, 0x4400]
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .fold(0x1234u16, |p, (_, v)| p ^ v)
            })
            .collect();
        members.sort_unstable();
        assert_eq!(coset, members, "the same ports as the XORs of the vectors");
        let (low, high) = span.byte_tables();
        for j in 0..span.len() {
            assert_eq!(
                low[(j & 0xff) as usize] ^ high[(j >> 8) as usize],
                span.at(j)
            );
        }
        for (start, end) in [
            (0u16, 65535u16),
            (coset[2], coset[5]),
            (coset[3] + 1, coset[3] + 1),
        ] {
            let range = PortRange::new(start.max(1), end).unwrap();
            let (first, count) = span.within(least, range);
            let inside: Vec<u16> = coset
                .iter()
                .copied()
                .filter(|p| range.contains(*p))
                .collect();
            let run: Vec<u16> = (first..first + count).map(|j| least ^ span.at(j)).collect();
            assert_eq!(run, inside, "{range}");
        }
    }

    /// The embedded default receiver and a flow toward it on port 5201.
    fn default_receiver() -> (RssModel, FlowTuple) {
        let model = RssModel::from_description(&embedded_default()).unwrap();
        let flow = FlowTuple::new(
            "10.0.0.1".parse().unwrap(),
            0,
            "10.0.0.2".parse().unwrap(),
            5201,
        )
        .unwrap();
        (model, flow)
    }

    #[test]
    fn least_ports_enumerate_every_coset_of_the_default_receiver() {
        let (model, flow) = default_receiver();
        let map = PortSolver::new(&model, &flow).linear_map().unwrap();
        let span = map.kernel();
        assert_eq!(span.len() as usize, map.ports_per_index());
        for index in 0..model.indir().len() as u32 {
            let least = map.least_port(index).unwrap();
            let mut listed: Vec<u16> = (0..span.len()).map(|j| least ^ span.at(j)).collect();
            assert!(listed.windows(2).all(|w| w[0] < w[1]));
            listed.sort_unstable();
            assert_eq!(
                listed,
                map.ports_for(index)
                    .into_iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn every_port_of_the_default_receiver_is_placed_once() {
        let (model, flow) = default_receiver();
        let solver = PortSolver::new(&model, &flow);
        let by_index = solver.ports_by_index();
        assert_eq!(by_index.iter().map(Vec::len).sum::<usize>(), 1 << 16);
        for (index, ports) in by_index.iter().enumerate() {
            for port in ports {
                assert_eq!(model.landing(&flow.with_sport(*port)).index as usize, index);
            }
        }
    }
}
