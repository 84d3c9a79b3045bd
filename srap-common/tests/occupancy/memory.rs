//! A receiver row in test memory: the same [`Row`] the hook implements over
//! map memory, here over atomics of a checker's choosing (std's for
//! sequential runs, loom's or shuttle's under their schedulers, where every
//! load, compare-and-exchange and add is one step another CPU may run
//! between).

use srap_common::{
    binder::{LEVELS, ReceiverSlots, SLOT_WORDS, level_of, slot_word},
    occupancy::{Row, Word},
};

/// An atomic 64-bit word of one checker.
pub trait Atomic64: Send + Sync + 'static {
    fn with(value: u64) -> Self;
    fn get(&self) -> u64;
    fn put(&self, value: u64);
    fn cas(&self, old: u64, new: u64) -> bool;
    fn fetch_add(&self, delta: u64);
}

macro_rules! atomic64 {
    ($ty:ty) => {
        impl Atomic64 for $ty {
            fn with(value: u64) -> Self {
                <$ty>::new(value)
            }
            fn get(&self) -> u64 {
                self.load(std::sync::atomic::Ordering::SeqCst)
            }
            fn put(&self, value: u64) {
                self.store(value, std::sync::atomic::Ordering::Relaxed)
            }
            fn cas(&self, old: u64, new: u64) -> bool {
                use std::sync::atomic::Ordering::SeqCst;
                self.compare_exchange(old, new, SeqCst, SeqCst).is_ok()
            }
            fn fetch_add(&self, delta: u64) {
                <$ty>::fetch_add(self, delta, std::sync::atomic::Ordering::SeqCst);
            }
        }
    };
}

atomic64!(std::sync::atomic::AtomicU64);
atomic64!(loom::sync::atomic::AtomicU64);
atomic64!(shuttle::sync::atomic::AtomicU64);

/// One word as the allocator sees it: a real atomic, or a bitmap word past
/// the row's slots, which holds no bit and costs the checker no step.
pub enum Cell<'a, A> {
    Real(&'a A),
    Zero,
}

impl<A> Clone for Cell<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Cell<'_, A> {}

impl<A: Atomic64> Word for Cell<'_, A> {
    fn load(self) -> u64 {
        match self {
            Self::Real(a) => a.get(),
            Self::Zero => 0,
        }
    }

    fn compare_exchange(self, old: u64, new: u64) -> bool {
        match self {
            Self::Real(a) => a.cas(old, new),
            Self::Zero => panic!("a compare-and-exchange of a bitmap word past the slots"),
        }
    }

    fn add(self, delta: u64) {
        match self {
            Self::Real(a) => a.fetch_add(delta),
            Self::Zero => panic!("a bit set past the slots"),
        }
    }
}

/// A receiver row of `slots` slots.
pub struct TestRow<A> {
    slots: u32,
    cursor: A,
    words: Vec<A>,
    /// `LEVELS × used` bitmap words, level-major.
    levels: Vec<A>,
    used: usize,
}

impl<A: Atomic64> TestRow<A> {
    /// A row whose slots hold `flows` (missing ones: none), its bitmaps as
    /// the agent builds them ([`ReceiverSlots::rebuilt`]), its cursor at
    /// `cursor`.
    pub fn new(slots: u32, flows: &[u32], cursor: u64) -> Self {
        let state = ReceiverSlots::rebuilt(slots, flows, &ReceiverSlots::default());
        let used = (slots as usize).div_ceil(64);
        let words = (0..slots)
            .map(|s| A::with(u64::from(flows.get(s as usize).copied().unwrap_or(0))))
            .collect();
        let levels = (0..LEVELS)
            .flat_map(|level| (0..used).map(move |w| (level, w)))
            .map(|(level, w)| A::with(state.levels[level][w]))
            .collect();
        Self {
            slots,
            cursor: A::with(cursor),
            words,
            levels,
            used,
        }
    }

    /// Every slot's open flows.
    pub fn flows(&self) -> Vec<u32> {
        self.words
            .iter()
            .map(|w| slot_word::flows(w.get()))
            .collect()
    }

    /// Sets a slot's flows without moving its bit (what a release that
    /// never had the lock leaves).
    pub fn set_flows_behind_the_bitmaps(&self, slot: u32, flows: u32) {
        let word = &self.words[slot as usize];
        word.put((word.get() & !slot_word::FLOWS) | u64::from(flows));
    }

    /// Every slot's turn.
    pub fn turns(&self) -> Vec<u32> {
        self.words
            .iter()
            .map(|w| slot_word::turn(w.get()))
            .collect()
    }

    /// The levels whose bitmap has `slot`'s bit.
    pub fn levels_of(&self, slot: u32) -> Vec<usize> {
        let (w, bit) = ((slot / 64) as usize, 1u64 << (slot % 64));
        (0..LEVELS)
            .filter(|level| self.levels[level * self.used + w].get() & bit != 0)
            .collect()
    }

    /// Fails unless the row is at rest and consistent: no slot locked,
    /// each slot's flows as `expected` (so none fell below zero), and,
    /// when `exact`, each slot's bit in the one level its count says.
    pub fn check(&self, expected: &[u32], exact: bool) {
        for (slot, word) in self.words.iter().enumerate() {
            assert_eq!(word.get() & slot_word::LOCK, 0, "slot {slot} left locked");
        }
        assert_eq!(self.flows(), expected, "occupancy differs from live claims");
        if !exact {
            return;
        }
        for slot in 0..self.slots {
            let want = level_of(expected[slot as usize]);
            assert_eq!(
                self.levels_of(slot),
                vec![want],
                "slot {slot} with {} flows: its bit is in the wrong levels",
                expected[slot as usize]
            );
        }
    }
}

impl<A: Atomic64> Row for TestRow<A> {
    type Word<'a>
        = Cell<'a, A>
    where
        Self: 'a;

    fn slots(&self) -> u32 {
        self.slots
    }

    fn cursor(&self) -> u64 {
        self.cursor.get()
    }

    fn set_cursor(&self, cursor: u64) {
        self.cursor.put(cursor);
    }

    fn slot_word(&self, slot: u32) -> Option<Cell<'_, A>> {
        self.words.get(slot as usize).map(Cell::Real)
    }

    fn level_word(&self, level: usize, w: usize) -> Cell<'_, A> {
        assert!(level < LEVELS && w < SLOT_WORDS, "index past the bitmaps");
        if w < self.used {
            Cell::Real(&self.levels[level * self.used + w])
        } else {
            Cell::Zero
        }
    }
}
