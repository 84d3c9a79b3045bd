//! The occupancy allocator the connect hook runs (`srap_common::occupancy`),
//! checked on the host: one CPU at a time against a model (property
//! tests), and several at once with every compare-and-exchange, load and
//! add an atomic step another CPU may run between — every interleaving of
//! small cases (loom, a bounded number of preemptions) and random
//! schedules of larger ones (shuttle).
//!
//! The invariants: each slot's flows equal the claims not yet released;
//! nothing falls below zero; no slot is left locked; with no fallback
//! taken (a contended claim, a release that could not have the lock),
//! each slot's bit is in exactly the level its count says; a claim takes
//! a granted slot of the lowest effective level; claims made at the same
//! moment take distinct slots while free ones exist.

mod memory;

use std::sync::atomic::AtomicU64;

use memory::{Atomic64, TestRow};
use proptest::prelude::*;
use srap_common::{
    binder::{LEVELS, SlotGrant, level_of},
    occupancy::{self, Claimed, Released},
};

/// What one CPU did to a row: its live claims, and whether it took a
/// fallback that leaves the bitmaps to the next claim's repair.
#[derive(Default)]
struct Done {
    live: Vec<u32>,
    fallback: bool,
}

impl Done {
    /// Claims a slot; a claim that got none (its slot's word changing under
    /// every try: the hook leaves the port to the kernel) counts as a
    /// fallback.
    fn claim<A: Atomic64>(&mut self, row: &TestRow<A>, grant: &SlotGrant) -> Option<Claimed> {
        let Ok(claimed) = occupancy::claim(row, grant, false) else {
            self.fallback = true;
            return None;
        };
        self.fallback |= claimed.contended;
        self.live.push(claimed.slot);
        Some(claimed)
    }

    fn release<A: Atomic64>(&mut self, row: &TestRow<A>, index: usize) {
        if self.live.is_empty() {
            return;
        }
        let slot = self.live.swap_remove(index % self.live.len());
        match occupancy::release(row, slot) {
            Released::Exact => {}
            Released::CountOnly => self.fallback = true,
            other => panic!("releasing a live claim of slot {slot}: {other:?}"),
        }
    }
}

/// Flows per slot of `slots` slots from the CPUs' live claims.
fn expected(slots: u32, done: &[&Done]) -> Vec<u32> {
    let mut flows = vec![0; slots as usize];
    for d in done {
        for &slot in &d.live {
            flows[slot as usize] += 1;
        }
    }
    flows
}

/// The least effective level among granted slots (own flows' level plus
/// the base other senders hold), `LEVELS` or more when every granted slot
/// is past the last level.
fn least_effective(flows: &[u32], bases: &[Option<u32>]) -> usize {
    bases
        .iter()
        .zip(flows)
        .filter_map(|(base, &f)| base.map(|b| level_of(f) + level_of(b)))
        .min()
        .unwrap_or(LEVELS)
}

#[derive(Clone, Debug)]
enum Op {
    Claim,
    Release(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![3 => Just(Op::Claim), 2 => any::<usize>().prop_map(Op::Release)],
        1..160,
    )
}

/// Slots, and for each its base when granted (`None`: not granted), with at
/// least one granted.
fn grants() -> impl Strategy<Value = (u32, Vec<Option<u32>>)> {
    (1u32..=130).prop_flat_map(|slots| {
        (
            Just(slots),
            prop::collection::vec(prop::option::weighted(0.8, 0u32..5), slots as usize)
                .prop_filter("one slot granted", |b| b.iter().any(Option::is_some)),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One CPU: every claim takes a granted slot of the least effective
    /// level, the bitmaps follow every step, releases never underflow.
    #[test]
    fn one_cpu_claims_a_least_occupied_granted_slot(
        (slots, bases) in grants(),
        ops in ops(),
        cursor in 0u64..1000,
    ) {
        let grant = SlotGrant::of(
            bases.iter().enumerate().filter_map(|(s, b)| b.map(|b| (s as u32, b))),
        );
        let row = TestRow::<AtomicU64>::new(slots, &[], cursor);
        let mut done = Done::default();
        for op in ops {
            match op {
                Op::Claim => {
                    let before = expected(slots, &[&done]);
                    let least = least_effective(&before, &bases);
                    let claimed = done.claim(&row, &grant).expect("a row with slots claims");
                    prop_assert!(!claimed.contended, "no contention on one CPU");
                    let slot = claimed.slot as usize;
                    prop_assert!(bases[slot].is_some(), "slot {slot} is not granted");
                    if least < LEVELS {
                        let took = level_of(before[slot]) + level_of(bases[slot].unwrap_or(0));
                        prop_assert_eq!(took, least, "slot {} is not least occupied", slot);
                    }
                }
                Op::Release(i) => done.release(&row, i),
            }
            row.check(&expected(slots, &[&done]), true);
        }
        // Releasing past zero frees nothing.
        let empty = (0..slots).find(|&s| expected(slots, &[&done])[s as usize] == 0);
        if let Some(slot) = empty {
            prop_assert_eq!(occupancy::release(&row, slot), Released::Empty);
            row.check(&expected(slots, &[&done]), true);
        }
    }
}

/// Among equally occupied slots, connects take turns: four empty slots,
/// eight claims, two each, the first four distinct.
#[test]
fn ties_rotate_over_the_slots() {
    let row = TestRow::<AtomicU64>::new(4, &[], 0);
    let grant = SlotGrant::default();
    let slots: Vec<u32> = (0..8)
        .map(|_| occupancy::claim(&row, &grant, false).map(|c| c.slot))
        .collect::<Result<_, _>>()
        .expect("claims");
    assert_eq!(slots, [0, 1, 2, 3, 0, 1, 2, 3]);
    row.check(&[2, 2, 2, 2], true);
    // Each claim took its slot's next turn.
    assert_eq!(row.turns(), [2, 2, 2, 2]);
}

/// A bitmap left wrong (as a release that never had the lock leaves it)
/// is put right by the next claim that finds it, which then looks again.
#[test]
fn a_claim_repairs_a_stale_bit_before_trusting_it() {
    let row = TestRow::<AtomicU64>::new(2, &[0, 0], 0);
    // Slot 0's bit says 0 flows; its word says 2.
    row.set_flows_behind_the_bitmaps(0, 2);
    let grant = SlotGrant::default();
    let claimed = occupancy::claim(&row, &grant, false).expect("claim");
    assert_eq!(claimed.slot, 1, "the free slot, not the stale one");
    assert!(!claimed.contended);
    row.check(&[2, 1], true);
}

/// The audit's repair sets a count back only from the word it read, and
/// the bitmaps follow.
#[test]
fn a_count_is_set_only_from_the_word_read() {
    let row = TestRow::<AtomicU64>::new(3, &[0, 2, 0], 0);
    let seen = u64::from(2u32);
    assert!(
        !occupancy::set_flows(&row, 1, seen + 1, 0),
        "a changed word"
    );
    row.check(&[0, 2, 0], true);
    assert!(occupancy::set_flows(&row, 1, seen, 0));
    row.check(&[0, 0, 0], true);
}

/// Runs `body` under loom, every interleaving with up to `preemptions`
/// preemptions.
fn every_interleaving(preemptions: usize, body: impl Fn() + Send + Sync + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(preemptions);
    model.check(body);
}

type LoomRow = TestRow<loom::sync::atomic::AtomicU64>;

/// Two CPUs claim at once on two free slots: they never share one.
#[test]
fn two_simultaneous_claims_take_two_slots_in_every_interleaving() {
    every_interleaving(3, || {
        let row = loom::sync::Arc::new(LoomRow::new(2, &[], 0));
        let grant = SlotGrant::default();
        let other = {
            let row = row.clone();
            loom::thread::spawn(move || {
                let mut done = Done::default();
                done.claim(&*row, &grant);
                done
            })
        };
        let mut mine = Done::default();
        mine.claim(&*row, &grant);
        let theirs = other.join().expect("the other CPU");
        let fallback = mine.fallback || theirs.fallback;
        row.check(&expected(2, &[&mine, &theirs]), !fallback);
        if !fallback {
            assert_ne!(mine.live, theirs.live, "two flows on one slot, one free");
        }
    });
}

/// A release and a claim at once, then a release each: occupancy always
/// equals the live claims and ends at zero.
#[test]
fn claims_and_releases_interleaved_keep_the_count_in_every_interleaving() {
    every_interleaving(2, || {
        let row = loom::sync::Arc::new(LoomRow::new(3, &[1], 0));
        let grant = SlotGrant::of([(0, 0), (1, 1), (2, 0)]);
        let other = {
            let row = row.clone();
            loom::thread::spawn(move || {
                let mut done = Done {
                    live: vec![0],
                    ..Done::default()
                };
                done.release(&*row, 0);
                done.claim(&*row, &grant);
                done
            })
        };
        let mut mine = Done::default();
        mine.claim(&*row, &grant);
        let theirs = other.join().expect("the other CPU");
        let fallback = mine.fallback || theirs.fallback;
        row.check(&expected(3, &[&mine, &theirs]), !fallback);
        mine.release(&*row, 0);
        let mut theirs = theirs;
        theirs.release(&*row, 0);
        row.check(&[0, 0, 0], false);
    });
}

/// Several CPUs under random schedules, on a row that spans two bitmap
/// words with a grant of mixed bases. CPUs that only claim never share a
/// slot, nor take one other senders hold, while a granted free one exists.
#[test]
fn cpus_claiming_at_once_under_random_schedules_take_distinct_free_slots() {
    shuttle::check_random(
        || {
            let (flows, fallback) = random_run(|_, _| false);
            if !fallback {
                for (slot, &f) in flows.iter().enumerate() {
                    let limit = u32::from(slot % 5 != 0);
                    assert!(f <= limit, "slot {slot} has {f} flows: {flows:?}");
                }
            }
        },
        2000,
    );
}

/// Claims and releases mixed under random schedules: every invariant holds
/// at the end of every run.
#[test]
fn claims_and_releases_under_random_schedules_keep_every_invariant() {
    shuttle::check_random(
        || {
            random_run(|cpu, step| cpu % 2 == 1 && step % 3 == 2);
        },
        2000,
    );
}

/// One run of [`RANDOM_CPUS`] CPUs, each taking [`RANDOM_STEPS`] steps on a
/// fresh row of [`RANDOM_SLOTS`] slots (every fifth held once by another
/// sender): a release where `release(cpu, step)`, else a claim. Checks the
/// row at rest; returns its flows and whether a fallback was taken.
fn random_run(release: fn(usize, usize) -> bool) -> (Vec<u32>, bool) {
    let row = shuttle::sync::Arc::new(TestRow::<shuttle::sync::atomic::AtomicU64>::new(
        RANDOM_SLOTS,
        &[],
        60,
    ));
    let grant = SlotGrant::of((0..RANDOM_SLOTS).map(|s| (s, u32::from(s % 5 == 0))));
    let cpus: Vec<_> = (0..RANDOM_CPUS)
        .map(|cpu| {
            let row = row.clone();
            shuttle::thread::spawn(move || {
                let mut done = Done::default();
                for step in 0..RANDOM_STEPS {
                    if release(cpu, step) {
                        done.release(&*row, step);
                    } else {
                        done.claim(&*row, &grant);
                    }
                }
                done
            })
        })
        .collect();
    let done: Vec<Done> = cpus
        .into_iter()
        .map(|cpu| cpu.join().expect("a CPU"))
        .collect();
    let all: Vec<&Done> = done.iter().collect();
    let fallback = done.iter().any(|d| d.fallback);
    let flows = expected(RANDOM_SLOTS, &all);
    row.check(&flows, !fallback);
    (flows, fallback)
}

const RANDOM_CPUS: usize = 4;
const RANDOM_STEPS: usize = 6;
const RANDOM_SLOTS: u32 = 70;
