//! Learning the key a device really hashes with from where flows land.
//!
//! A driver may report no key (igb) or one its device does not use
//! (virtio_net on 6.12). The landings are the truth, and Toeplitz is linear
//! over GF(2) in the key as much as in the input: bit `j` (least
//! significant first) of the hash of input `x` is `⊕ᵢ xᵢ·K[i + 31 − j]`. A
//! flow that lands on queue `q` of a table in which the queue is a function
//! of some index bits `B` (and each queue has its own value of them, as
//! `ethtool -X equal 2ⁿ` makes, round-robin or in blocks) reveals those
//! bits of its hash: `|B|` linear equations over the key bits. A few tens
//! of flows from one address pair over varied source and destination ports
//! determine everything planning needs for that pair.
//!
//! What is learned is a key: the reported (or kernel default) candidate
//! with exactly the bits the landings force changed. Bits no landing
//! constrains keep the candidate's value, so the learned key is exact for
//! the tuples in the span of those seen — checked per (source, receiver,
//! destination port) by [`KeyLearner::covers`] — and no worse than the
//! candidate elsewhere. Everything else a description says (table, fields,
//! queue → CPU) is taken as discovered.

use std::collections::BTreeMap;

use super::{
    input::{FlowTuple, HashFields, HashInput, InputXfrm},
    model::End,
    toeplitz::ToeplitzKey,
};
use crate::port_range::PortRange;

/// Key bits a row can name: a 40-byte key (IPv6 4-tuples need all of it).
const KEY_BITS: usize = 320;
const WORDS: usize = KEY_BITS / 64;

/// A set of key bits (one equation's left side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Bits([u64; WORDS]);

impl Bits {
    fn flip(&mut self, bit: usize) {
        self.0[bit / 64] ^= 1 << (bit % 64);
    }

    fn get(&self, bit: usize) -> bool {
        self.0[bit / 64] >> (bit % 64) & 1 == 1
    }

    fn xor(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a ^= b;
        }
    }

    fn lowest(&self) -> Option<usize> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    fn parity_with(&self, key: &Self) -> bool {
        self.0
            .iter()
            .zip(key.0)
            .fold(0, |acc, (a, b)| acc ^ (a & b).count_ones())
            & 1
            == 1
    }
}

/// One linear equation over the key bits.
#[derive(Debug, Clone, Copy)]
struct Row {
    bits: Bits,
    value: bool,
}

/// Which index bits a table's queues reveal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableBits {
    /// Index bit positions (least significant first) that decide the queue.
    pub bits: Vec<u32>,
    /// Each queue's value of those bits (as index bits, others zero).
    values: BTreeMap<u32, u32>,
}

/// Why landings cannot teach a key with this table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("the indirection table has {0} entries, not a power of two")]
    TableSize(usize),
    #[error(
        "queue {queue} holds index values that differ in bits other queues are told apart by: \
         landings reveal no fixed index bits (learning needs a table like `ethtool -X DEV \
         equal 2^n`)"
    )]
    NotBitAligned { queue: u32 },
    #[error("the key has {0} bytes; learning handles keys of 16 to 40")]
    KeyLength(usize),
}

impl TableBits {
    pub fn of(indir: &[u32]) -> Result<Self, LearnError> {
        let len = indir.len();
        if !len.is_power_of_two() {
            return Err(LearnError::TableSize(len));
        }
        let k = len.trailing_zeros();
        let bits: Vec<u32> = (0..k)
            .filter(|&j| (0..len).any(|i| indir[i] != indir[i ^ (1 << j)]))
            .collect();
        let mask: usize = bits.iter().map(|j| 1usize << j).sum();
        let mut values = BTreeMap::new();
        for (i, &queue) in indir.iter().enumerate() {
            let value = u32::try_from(i & mask).unwrap_or(u32::MAX);
            if *values.entry(queue).or_insert(value) != value {
                return Err(LearnError::NotBitAligned { queue });
            }
        }
        Ok(Self { bits, values })
    }

    /// The index bits a landing on `queue` reveals.
    pub fn value_of(&self, queue: u32) -> Option<u32> {
        self.values.get(&queue).copied()
    }
}

/// Accumulates landings and solves for the key.
#[derive(Debug, Clone)]
pub struct KeyLearner {
    table: TableBits,
    fields: (HashFields, HashFields),
    xfrm: InputXfrm,
    candidate: Vec<u8>,
    /// Which end of the flows it is given the device is (see
    /// [`KeyLearner::facing`]).
    end: End,
    /// The ports planning chooses from (see [`KeyLearner::choosing`]).
    ports: PortRange,
    /// Independent equations, each with its own pivot bit (lowest set).
    rows: BTreeMap<usize, Row>,
    landings: u32,
    /// Landings whose equations contradict earlier ones.
    conflicts: u32,
}

/// Which source ports [`KeyLearner::covers`] found determined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub below_32768: bool,
    pub from_32768: bool,
}

impl Coverage {
    pub fn any(self) -> bool {
        self.below_32768 || self.from_32768
    }
}

/// What the landings taught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// The candidate with the bits the landings force changed.
    pub key: ToeplitzKey,
    /// Whether the candidate already satisfied every landing.
    pub candidate_agrees: bool,
    /// Landings taken, and how many contradicted the others.
    pub landings: u32,
    pub conflicts: u32,
    /// Independent equations: key bits (or combinations) pinned down.
    pub rank: usize,
}

impl KeyLearner {
    /// A learner for a device with this table, hashed fields and transform,
    /// starting from the `candidate` key (reported or the kernel default).
    pub fn new(
        indir: &[u32],
        fields: (HashFields, HashFields),
        xfrm: InputXfrm,
        candidate: &[u8],
    ) -> Result<Self, LearnError> {
        if !(16..=40).contains(&candidate.len()) {
            return Err(LearnError::KeyLength(candidate.len()));
        }
        Ok(Self {
            table: TableBits::of(indir)?,
            fields,
            xfrm,
            candidate: candidate.to_vec(),
            end: End::Remote,
            ports: PortRange::DEFAULT,
            rows: BTreeMap::new(),
            landings: 0,
            conflicts: 0,
        })
    }

    /// The same learner for the device at `end` of the flows it is given,
    /// as an [`RssModel`] faces one: with [`End::Local`] (the connecting
    /// host's own NIC) each flow is taken as that host opened it and its
    /// reverse tuple is hashed, so [`KeyLearner::covers`] and
    /// [`KeyLearner::needs`] vary the port that host chose, at either end.
    ///
    /// [`RssModel`]: super::model::RssModel
    pub fn facing(mut self, end: End) -> Self {
        self.end = end;
        self
    }

    /// The same learner for a planner that chooses ports from `ports` only
    /// (a sender's `--port-range`), so [`KeyLearner::needs`] counts what
    /// placing those ports needs. Without it, every port: what a receiver
    /// learns for senders whose ranges it does not know. A range within
    /// one half of the port space (the kernel's 32768-60999) never needs
    /// how bit 15 alone flips the hash: landings of ports of that half
    /// teach only its sum with port 0's hash, which is what placing them
    /// needs.
    pub fn choosing(mut self, ports: PortRange) -> Self {
        self.ports = ports;
        self
    }

    /// The hash input of `tuple` as the device builds it.
    fn input(&self, tuple: &FlowTuple) -> HashInput {
        let fields = if tuple.is_ipv4() {
            self.fields.0
        } else {
            self.fields.1
        };
        HashInput::new(&self.end.tuple(tuple), fields, self.xfrm)
    }

    /// The equation's left side for hash bit `j` of `tuple`.
    fn row_bits(&self, tuple: &FlowTuple, j: u32) -> Bits {
        let mut bits = Bits::default();
        let input = self.input(tuple);
        for (byte_at, byte) in input.as_bytes().iter().enumerate() {
            for bit in 0..8 {
                if byte & (0x80 >> bit) != 0 {
                    let position = byte_at * 8 + bit + 31 - j as usize;
                    if position < KEY_BITS {
                        bits.flip(position);
                    }
                }
            }
        }
        bits
    }

    /// Takes one flow that landed on `queue`. False for a queue the table
    /// does not name (the landing says nothing then).
    pub fn observe(&mut self, tuple: &FlowTuple, queue: u32) -> bool {
        let Some(value) = self.table.value_of(queue) else {
            return false;
        };
        self.landings += 1;
        let mut conflicted = false;
        for j in self.table.bits.clone() {
            let row = Row {
                bits: self.row_bits(tuple, j),
                value: value >> j & 1 == 1,
            };
            if !self.insert(row) {
                conflicted = true;
            }
        }
        if conflicted {
            self.conflicts += 1;
        }
        true
    }

    /// Reduces `row` by the known equations; keeps it when independent.
    /// False when it contradicts them.
    fn insert(&mut self, row: Row) -> bool {
        let row = reduce(&self.rows, row);
        match row.bits.lowest() {
            Some(pivot) => {
                self.rows.insert(pivot, row);
                true
            }
            None => !row.value,
        }
    }

    /// For which source ports the hash bits the table reveals are
    /// determined, for flows from `tuple`'s source to its destination and
    /// port: those tuples then lie in the span of the landings seen. Kernel
    /// (ephemeral) ports all have bit 15 set and a sender's planned range
    /// often has it clear, so each half of the port space is judged apart.
    pub fn covers(&self, tuple: &FlowTuple) -> Coverage {
        let units_known = (0..15).all(|b| {
            let base = tuple.with_sport(0);
            let unit = tuple.with_sport(1 << b);
            self.table.bits.iter().all(|&j| {
                let mut column = self.row_bits(&unit, j);
                column.xor(&self.row_bits(&base, j));
                self.determined(column)
            })
        });
        let half = |sport: u16| {
            units_known
                && self
                    .table
                    .bits
                    .iter()
                    .all(|&j| self.determined(self.row_bits(&tuple.with_sport(sport), j)))
        };
        Coverage {
            below_32768: half(0),
            from_32768: half(0x8000),
        }
    }

    /// What planning the flow groups of `tuples` (each a sender →
    /// receiver:port; its source port is ignored) needs of the key, and how
    /// much of it the landings determine: `(needed, known)`, both ranks over
    /// GF(2). Per group, planning ports of [`KeyLearner::choosing`]'s range
    /// needs the queue-deciding hash bits of the range's first port and how
    /// each of the range's [`PortRange::directions`] flips them (every
    /// port, all 16 port bits, unless told the range); `needed` is the rank
    /// of those combinations, `known` the rank of their span's intersection
    /// with the landings' (`needed + rank − rank of both`).
    pub fn needs<'a>(&self, tuples: impl IntoIterator<Item = &'a FlowTuple>) -> (u32, u32) {
        let mut needed = BTreeMap::new();
        let mut both = self.rows.clone();
        let first = self.ports.start();
        for tuple in tuples {
            let anchor = tuple.with_sport(first);
            for &j in &self.table.bits {
                let zero = self.row_bits(&anchor, j);
                let units = self.ports.directions().map(|mask| {
                    let mut column = self.row_bits(&tuple.with_sport(first ^ mask), j);
                    column.xor(&zero);
                    column
                });
                for bits in std::iter::once(zero).chain(units) {
                    let row = Row { bits, value: false };
                    add_independent(&mut needed, row);
                    add_independent(&mut both, row);
                }
            }
        }
        let rank = |rows: &BTreeMap<usize, Row>| u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let needed_rank = rank(&needed);
        let known = (needed_rank + rank(&self.rows)).saturating_sub(rank(&both));
        (needed_rank, known)
    }

    fn determined(&self, bits: Bits) -> bool {
        let row = Row { bits, value: false };
        reduce(&self.rows, row).bits.lowest().is_none()
    }

    /// The key every landing so far agrees with, nearest the candidate.
    pub fn solve(&self) -> Learned {
        let mut key = Bits::default();
        for (i, byte) in self.candidate.iter().enumerate() {
            for bit in 0..8 {
                if byte & (0x80 >> bit) != 0 {
                    key.flip(i * 8 + bit);
                }
            }
        }
        let candidate_agrees = self
            .rows
            .values()
            .all(|row| row.bits.parity_with(&key) == row.value);
        // Back substitution: each row's pivot is its lowest bit, so rows
        // with higher pivots are settled first.
        for (&pivot, row) in self.rows.iter().rev() {
            if row.bits.parity_with(&key) != row.value {
                key.flip(pivot);
            }
        }
        let bytes = (0..self.candidate.len())
            .map(|i| (0..8).fold(0u8, |b, bit| b << 1 | u8::from(key.get(i * 8 + bit))))
            .collect();
        Learned {
            key: ToeplitzKey::new(bytes).unwrap_or_else(|_| unreachable_key()),
            candidate_agrees,
            landings: self.landings,
            conflicts: self.conflicts,
            rank: self.rows.len(),
        }
    }
}

/// `row` reduced by `rows` (each keyed by its lowest bit, its pivot) until
/// its lowest bit is no row's pivot, or it has none left.
fn reduce(rows: &BTreeMap<usize, Row>, mut row: Row) -> Row {
    while let Some(known) = row.bits.lowest().and_then(|pivot| rows.get(&pivot)) {
        row.bits.xor(&known.bits);
        row.value ^= known.value;
    }
    row
}

/// Adds `row`'s left side to `rows` when independent of them (its value
/// is not looked at: a span, not a system of equations).
fn add_independent(rows: &mut BTreeMap<usize, Row>, row: Row) {
    let row = reduce(rows, row);
    if let Some(pivot) = row.bits.lowest() {
        rows.insert(pivot, row);
    }
}

/// Keys of 16 to 40 bytes are always valid [`ToeplitzKey`]s.
fn unreachable_key() -> ToeplitzKey {
    ToeplitzKey::new(vec![0; 40]).expect("a 40-byte key is valid")
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::rss::{
        description::{RssDescription, embedded_default},
        model::RssModel,
    };

    fn device(key: &str, indir: Vec<u32>) -> RssModel {
        RssModel::from_description(&RssDescription {
            key: key.into(),
            indir,
            ..embedded_default()
        })
        .expect("model")
    }

    fn tuple(src: u8, sport: u16, dport: u16) -> FlowTuple {
        FlowTuple::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, src)),
            sport,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            dport,
        )
        .expect("tuple")
    }

    /// Deterministic ports (xorshift from `seed`), all of 1024 and up.
    fn ports(seed: u32, n: usize) -> Vec<u16> {
        let mut rng = crate::xorshift::XorShift32::new(seed);
        (0..n)
            .map(|_| (rng.next_u32() >> 8) as u16 | 1024)
            .collect()
    }

    fn shifted(key: &str) -> String {
        let bytes: Vec<&str> = key.split(':').collect();
        std::iter::once("00")
            .chain(bytes[..bytes.len() - 1].iter().copied())
            .collect::<Vec<_>>()
            .join(":")
    }

    #[test]
    fn tables_reveal_their_bits() {
        let round_robin: Vec<u32> = (0..128).map(|i| i % 4).collect();
        assert_eq!(TableBits::of(&round_robin).unwrap().bits, [0, 1]);
        // igb's default: blocks of 32.
        let blocks: Vec<u32> = (0..128).map(|i| i / 32).collect();
        let bits = TableBits::of(&blocks).unwrap();
        assert_eq!(bits.bits, [5, 6]);
        assert_eq!(bits.value_of(3), Some(96));
        let weighted: Vec<u32> = (0..128).map(|i| u32::from(i % 3 == 0)).collect();
        assert!(TableBits::of(&weighted).is_err());
    }

    /// virtio-net on 6.12: the device hashes with `00 || reported[0:39]`.
    /// Learning from 48 landings over varied source and destination ports
    /// yields a key that puts every held-out flow of that pair on the queue
    /// the device does, for any port.
    #[test]
    fn a_misreported_key_is_learned_from_landings() {
        let reported = embedded_default().key;
        let indir: Vec<u32> = (0..128).map(|i| i % 4).collect();
        let truth = device(&shifted(&reported), indir.clone());
        let believed = device(&reported, indir.clone());
        let candidate = ToeplitzKey::parse_hex(&reported).unwrap();
        let mut learner = KeyLearner::new(
            &indir,
            (HashFields::default(), HashFields::default()),
            InputXfrm::None,
            candidate.as_bytes(),
        )
        .unwrap();
        let sports = ports(7, 48);
        let dports = ports(99, 48);
        for (&sport, &dport) in sports.iter().zip(&dports) {
            let t = tuple(1, sport, dport);
            assert!(learner.observe(&t, truth.landing(&t).queue));
        }
        let learned = learner.solve();
        assert!(!learned.candidate_agrees);
        assert_eq!(learned.conflicts, 0);
        let covered = learner.covers(&tuple(1, 0, 5201));
        assert!(covered.below_32768 && covered.from_32768, "{covered:?}");
        assert!(!learner.covers(&tuple(2, 0, 5201)).any(), "another sender");
        let model = device(&learned.key.to_string(), indir);
        let (mut right, mut before) = (0, 0);
        for (&sport, &dport) in ports(3, 200).iter().zip(&ports(5, 200)) {
            let t = tuple(1, sport, dport);
            right += u32::from(model.landing(&t).queue == truth.landing(&t).queue);
            before += u32::from(believed.landing(&t).queue == truth.landing(&t).queue);
        }
        assert_eq!(right, 200, "learned key");
        assert!(before < 120, "the reported key was right {before}/200");
    }

    #[test]
    fn a_right_candidate_is_confirmed_and_a_non_toeplitz_device_conflicts() {
        let key = embedded_default().key;
        let indir: Vec<u32> = (0..128).map(|i| i / 32).collect();
        let truth = device(&key, indir.clone());
        let candidate = ToeplitzKey::parse_hex(&key).unwrap();
        let fields = (HashFields::default(), HashFields::default());
        let mut learner =
            KeyLearner::new(&indir, fields, InputXfrm::None, candidate.as_bytes()).unwrap();
        for &sport in &ports(11, 30) {
            let t = tuple(1, sport, 5201);
            learner.observe(&t, truth.landing(&t).queue);
        }
        let learned = learner.solve();
        assert!(learned.candidate_agrees);
        assert_eq!(learned.key, candidate);
        // Kernel ports only (all ≥ 32768): that half is covered, not the other.
        let mut kernel =
            KeyLearner::new(&indir, fields, InputXfrm::None, candidate.as_bytes()).unwrap();
        for &sport in &ports(17, 40) {
            let t = tuple(1, sport | 0x8000, 5201);
            kernel.observe(&t, truth.landing(&t).queue);
        }
        let covered = kernel.covers(&tuple(1, 0, 5201));
        assert!(covered.from_32768 && !covered.below_32768, "{covered:?}");
        // A device that does not hash with Toeplitz (queues by another
        // hash): its landings cannot all hold together.
        let mut other =
            KeyLearner::new(&indir, fields, InputXfrm::None, candidate.as_bytes()).unwrap();
        for &sport in &ports(13, 40) {
            let queue = u32::from(sport).wrapping_mul(2_654_435_761) >> 30;
            other.observe(&tuple(1, sport, 5201), queue);
        }
        assert!(other.solve().conflicts > 0);
    }

    /// What planning needs of the key, and how much of it landings with a
    /// known key determine: nothing before any landing, all of it for the
    /// group whose ports varied, not all of it for kernel ports only (bit
    /// 15 always set) nor for a sender never seen.
    #[test]
    fn the_bits_planning_needs_are_counted_and_known_from_landings() {
        let key = embedded_default().key;
        let indir: Vec<u32> = (0..128).map(|i| i % 4).collect();
        let truth = device(&shifted(&key), indir.clone());
        let candidate = ToeplitzKey::parse_hex(&key).unwrap();
        let fields = (HashFields::default(), HashFields::default());
        let fresh = || KeyLearner::new(&indir, fields, InputXfrm::None, candidate.as_bytes());
        let mut learner = fresh().unwrap();
        let group = tuple(1, 0, 5201);
        let (needed, known) = learner.needs([&group]);
        // Two queue bits: each port bit flips one key bit per hash bit (17
        // distinct key bits over both), plus port 0's two hash bits.
        assert_eq!((needed, known), (19, 0));
        for &sport in &ports(21, 40) {
            let t = tuple(1, sport, 5201);
            learner.observe(&t, truth.landing(&t).queue);
        }
        assert_eq!(learner.needs([&group]), (19, 19));
        let stranger = tuple(2, 0, 5201);
        let (needed, known) = learner.needs([&group, &stranger]);
        assert!(needed > 19 && known < needed, "{known} of {needed}");

        let mut kernel = fresh().unwrap();
        for &sport in &ports(23, 40) {
            let t = tuple(1, sport | 0x8000, 5201);
            kernel.observe(&t, truth.landing(&t).queue);
        }
        let (needed, known) = kernel.needs([&group]);
        assert_eq!(needed, 19);
        assert!((15..19).contains(&known), "{known} of {needed}");
        // Planning the kernel's range only, the ports of that half are all
        // it needs: how bit 15 alone flips the hash is not.
        let upper = kernel.choosing(PortRange::new(32768, 60999).unwrap());
        assert_eq!(upper.needs([&group]), (18, 18));
        let lower = upper.choosing(PortRange::new(10000, 32767).unwrap());
        let (needed, known) = lower.needs([&group]);
        assert!(needed == 18 && known < 18, "{known} of {needed}");
    }

    /// This host's own NIC (virtio-net on 6.12 in a guest that downloads):
    /// learned from the flows as this host opened them, each landing on
    /// the queue the device gives its reverse tuple. The learned key puts
    /// every port this host may choose toward that server where the device
    /// does, judged by a model facing the same end; a key learned facing
    /// the other end (the forward tuple) is no key of this NIC.
    #[test]
    fn this_hosts_own_nic_is_learned_over_the_reverse_tuple() {
        let reported = embedded_default().key;
        let indir: Vec<u32> = (0..128).map(|i| i % 4).collect();
        let truth = device(&shifted(&reported), indir.clone()).facing(End::Local);
        let candidate = ToeplitzKey::parse_hex(&reported).unwrap();
        let fields = (HashFields::default(), HashFields::default());
        let learner = KeyLearner::new(&indir, fields, InputXfrm::None, candidate.as_bytes())
            .unwrap()
            .facing(End::Local);
        let mut local = learner.clone();
        let mut remote = learner.facing(End::Remote);
        for &sport in &ports(31, 48) {
            let t = tuple(1, sport, 443);
            local.observe(&t, truth.landing(&t).queue);
            remote.observe(&t, truth.landing(&t).queue);
        }
        let learned = local.solve();
        assert_eq!((learned.conflicts, learned.candidate_agrees), (0, false));
        let covered = local.covers(&tuple(1, 0, 443));
        assert!(covered.below_32768 && covered.from_32768, "{covered:?}");
        let group = tuple(1, 0, 443);
        let (needed, known) = local.needs([&group]);
        assert_eq!(known, needed, "every bit planning needs");
        let model = device(&learned.key.to_string(), indir.clone()).facing(End::Local);
        let wrong_end = device(&remote.solve().key.to_string(), indir).facing(End::Local);
        let mut misplaced = 0;
        for &sport in &ports(37, 200) {
            let t = tuple(1, sport, 443);
            assert_eq!(model.landing(&t).queue, truth.landing(&t).queue, "{sport}");
            misplaced += u32::from(wrong_end.landing(&t).queue != truth.landing(&t).queue);
        }
        assert!(
            misplaced > 80,
            "learned over the forward tuple: {misplaced}/200 off"
        );
    }
}
