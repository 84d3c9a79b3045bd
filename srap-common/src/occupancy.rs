//! The binder's CPU occupancy: which slot (receiver CPU) a new flow
//! claims, and how a closed flow gives it back.
//!
//! One implementation for two places. The connect hook (`srap-ebpf`) runs
//! it over map memory, with the kernel's atomic instructions; the tests
//! run it over atomics under a scheduler that interleaves several "CPUs"
//! one atomic step at a time (`tests/occupancy_*.rs`). Everything it
//! touches goes through [`Row`] and [`Word`], so the code under test is
//! the code the kernel runs, not a copy.
//!
//! The state of one receiver row ([`crate::binder::ReceiverSlots`] and
//! its slot words, [`slot_word`]):
//!
//! * each slot's **word**: open flows, a claim lock, the port rotation's
//!   turn; changed only by compare-and-exchange (and the lock holder's
//!   add that clears the lock);
//! * per **level** (0, 1, 2, 3-or-more flows) a bitmap of the slots at
//!   that level: a hint for finding a least-occupied slot in constant
//!   time. Only the holder of a slot's lock moves its bit, and a claim
//!   checks the bit against the word before trusting it;
//! * a **cursor**: where the next search starts, so ties rotate. A lost
//!   update changes only which of equally occupied slots comes next.
//!
//! Invariants (checked by the tests): a slot's flow count equals the
//! claims not yet released; nothing underflows; with no contention
//! fallback taken, each slot's bit is in exactly the level its count
//! says; a claim takes a granted slot of the lowest effective level (its
//! own flows plus the flows other senders hold there, [`SlotGrant`]),
//! except in the contention fallback ([`Claimed::contended`]).

use crate::binder::{LEVELS, MAX_SLOTS, SLOT_WORDS, SlotGrant, level_of, slot_word};

/// Times a claim looks for a free slot when others keep taking the one it
/// found.
pub const CLAIM_ATTEMPTS: u32 = 3;
/// Times a release tries its slot's lock before freeing the flow without
/// updating the level bitmaps (the next claim that finds the bit wrong
/// repairs it).
pub const RELEASE_ATTEMPTS: u32 = 4;
/// Compare-and-exchange tries of one update of a slot word that others
/// keep changing.
pub const WORD_ATTEMPTS: u32 = 3;

/// One 64-bit word of shared memory and the atomic steps the allocator
/// takes on it.
pub trait Word: Copy {
    /// The word now.
    fn load(self) -> u64;
    /// Replaces `old` by `new` if the word still holds `old`.
    fn compare_exchange(self, old: u64, new: u64) -> bool;
    /// Adds `delta` (wrapping); the result is not needed.
    fn add(self, delta: u64);
}

/// One receiver row of the binder's occupancy: its slot words, its level
/// bitmaps and its cursor.
pub trait Row {
    /// A word of the row, borrowed from it.
    type Word<'a>: Word
    where
        Self: 'a;
    /// Slots in use; bits at or past it are never set.
    fn slots(&self) -> u32;
    /// Where the last search left the rotation.
    fn cursor(&self) -> u64;
    /// Moves the rotation (a plain store: a lost update is harmless).
    fn set_cursor(&self, cursor: u64);
    /// Slot `slot`'s word; `None` past the map.
    fn slot_word(&self, slot: u32) -> Option<Self::Word<'_>>;
    /// Word `w` (of [`SLOT_WORDS`]) of level `level`'s bitmap; both are
    /// below their bounds ([`masked`] has been applied).
    fn level_word(&self, level: usize, w: usize) -> Self::Word<'_>;
}

/// Why a claim got no slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unclaimed {
    /// The row has no slots (or more than [`MAX_SLOTS`]): not filled in.
    NoSlots,
    /// The slot's word could not be had: past the map, or changing under
    /// every try.
    Contention,
}

/// A claimed slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub slot: u32,
    /// The slot's turn of its port rotation this claim took.
    pub turn: u32,
    /// Every attempt found its slot changed or locked: the rotation's
    /// granted slot was taken without the search (its bits are repaired
    /// by the next claim that finds them wrong).
    pub contended: bool,
}

/// What a release came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// One flow freed and the slot's bit moved to its new level.
    Exact,
    /// One flow freed, the bit left (the lock was never free): the next
    /// claim that finds it wrong moves it.
    CountOnly,
    /// The slot counted no flow: nothing to free (never below zero).
    Empty,
    /// The slot's word could not be had (past the map, or changing on
    /// every try): nothing freed.
    Failed,
}

/// Claims the least-occupied granted slot of `row` for one new flow.
///
/// The slot is the first set in the lowest non-empty effective level,
/// from just past the last slot claimed (this host's row, `local`: from
/// its claim count, [`local_start`]). One compare-and-exchange of its
/// word checks its count is still what the bitmap said, adds the flow,
/// takes the lock and a turn; under the lock its bit moves up a level. A
/// claim that finds the slot locked or changed looks again, a bounded
/// number of times, so two connects at the same moment never share a slot
/// while a free one exists.
///
/// Not inlined by force: the hook calls it for a receiver and for this
/// host's CPUs, and as one subprogram the kernel's verifier walks it once
/// per call with its own registers (inlined twice, the compiler's reuse of
/// stack slots across the copies made a path it refused).
pub fn claim<R: Row>(row: &R, grant: &SlotGrant, local: bool) -> Result<Claimed, Unclaimed> {
    let slots = row.slots();
    let cursor = row.cursor();
    row.set_cursor(cursor.wrapping_add(1));
    if slots == 0 || slots > MAX_SLOTS {
        return Err(Unclaimed::NoSlots);
    }
    let turn = if local {
        local_start(cursor as u32)
    } else {
        cursor as u32
    };
    for attempt in 0..CLAIM_ATTEMPTS {
        let start = turn.wrapping_add(attempt) % slots;
        if let Some((slot, turn)) = try_claim(row, grant, slots, start) {
            // A receiver's next search starts past this slot: among equally
            // occupied slots, connects take turns (a slot right after a run
            // of fuller ones is not favoured). This host's row counts on.
            if !local {
                row.set_cursor(u64::from(slot) + 1);
            }
            return Ok(Claimed {
                slot,
                turn,
                contended: false,
            });
        }
    }
    let slot = granted_from(grant, turn % slots, slots);
    let word = row
        .slot_word(slot)
        .and_then(|word| bump(word, 1 + slot_word::TURN))
        .ok_or(Unclaimed::Contention)?;
    Ok(Claimed {
        slot,
        turn: slot_word::turn(word),
        contended: true,
    })
}

/// Where this host's row starts its `count`-th search: one slot on per
/// claim, and one more every [`MAX_SLOTS`] claims. A both-ends connect
/// claims a receiver slot first, and a receiver's search goes one slot on
/// per claim too: in step, receiver CPU `s` would meet this host's CPU
/// `s mod 16` every time (32 and 16 CPUs: 32 of the 512 pairs, and their
/// ~1 800 ports of the range, for connects made one at a time). The extra
/// step moves the pairing on, so every pair comes round.
#[inline(always)]
pub fn local_start(count: u32) -> u32 {
    count.wrapping_add(count / MAX_SLOTS)
}

/// One claim attempt from `start`; `None` when the slot found was taken or
/// changed meanwhile (a bitmap found wrong is repaired on the way).
#[inline(always)]
fn try_claim<R: Row>(row: &R, grant: &SlotGrant, slots: u32, start: u32) -> Option<(u32, u32)> {
    let (found, level) = lowest_level_slot(row, grant, start);
    // Nothing granted in the levels searched (every granted slot fuller
    // than the last level, or bits past the slots of a shrunk receiver):
    // the first granted slot from the start.
    let slot = if found < slots {
        found
    } else {
        granted_from(grant, start, slots)
    };
    let word = row.slot_word(slot)?;
    let seen = word.load();
    if seen & slot_word::LOCK != 0 {
        return None;
    }
    let flows = slot_word::flows(seen);
    let level = if found < slots {
        level
    } else {
        level_of(flows)
    };
    if level_of(flows) != level {
        // The bitmap was stale: put the slot's bit where its count says.
        if word.compare_exchange(seen, seen | slot_word::LOCK) {
            move_bit(row, slot, level, level_of(flows));
            unlock(word);
        }
        return None;
    }
    let claimed = seen.wrapping_add(1 + slot_word::TURN) | slot_word::LOCK;
    if !word.compare_exchange(seen, claimed) {
        return None;
    }
    move_bit(row, slot, level, level_of(flows + 1));
    unlock(word);
    Some((slot, slot_word::turn(seen)))
}

/// Frees one flow of `slot`: under the slot's lock when it can be had, so
/// the level bitmaps follow; else the count alone. Never below zero.
#[inline(always)]
pub fn release<R: Row>(row: &R, slot: u32) -> Released {
    let Some(word) = row.slot_word(slot) else {
        return Released::Failed;
    };
    for _ in 0..RELEASE_ATTEMPTS {
        let seen = word.load();
        let flows = slot_word::flows(seen);
        if flows == 0 {
            return Released::Empty;
        }
        if seen & slot_word::LOCK != 0 || !word.compare_exchange(seen, (seen - 1) | slot_word::LOCK)
        {
            continue;
        }
        if slot < row.slots() {
            move_bit(row, slot, level_of(flows), level_of(flows - 1));
        }
        unlock(word);
        return Released::Exact;
    }
    for _ in 0..WORD_ATTEMPTS {
        let seen = word.load();
        if slot_word::flows(seen) == 0 {
            return Released::Empty;
        }
        if word.compare_exchange(seen, seen - 1) {
            return Released::CountOnly;
        }
    }
    Released::Failed
}

/// Sets `slot`'s flow count to `flows` if its word is still `expected`
/// (unlocked): one compare-and-exchange that also takes the lock, so the
/// level bitmaps follow as a claim moves them. The occupancy audit's
/// repair (and the tests' drift injector): false when the word changed
/// since the caller read it (a hook got there first), or is past the map.
#[inline(always)]
pub fn set_flows<R: Row>(row: &R, slot: u32, expected: u64, flows: u32) -> bool {
    let Some(word) = row.slot_word(slot) else {
        return false;
    };
    let flows = flows & slot_word::FLOWS as u32;
    let new = (expected & !slot_word::FLOWS) | u64::from(flows);
    if expected & slot_word::LOCK != 0 || !word.compare_exchange(expected, new | slot_word::LOCK) {
        return false;
    }
    if slot < row.slots() {
        move_bit(
            row,
            slot,
            level_of(slot_word::flows(expected)),
            level_of(flows),
        );
    }
    unlock(word);
    true
}

/// Takes the next turn of a slot's port rotation.
#[inline(always)]
pub fn take_turn<W: Word>(word: W) -> Option<u32> {
    bump(word, slot_word::TURN).map(slot_word::turn)
}

/// Adds `delta` to a slot word (a few tries against others changing it);
/// returns the word before.
#[inline(always)]
fn bump<W: Word>(word: W, delta: u64) -> Option<u64> {
    for _ in 0..WORD_ATTEMPTS {
        let old = word.load();
        if word.compare_exchange(old, old.wrapping_add(delta)) {
            return Some(old);
        }
    }
    None
}

/// Clears a slot's lock, which the caller holds.
#[inline(always)]
fn unlock<W: Word>(word: W) {
    word.add(slot_word::LOCK.wrapping_neg());
}

/// The first granted slot at or after `start` (below `slots`); `start`
/// itself when none is.
#[inline(always)]
pub fn granted_from(grant: &SlotGrant, start: u32, slots: u32) -> u32 {
    let granted = |w: usize| {
        let mut word = 0;
        for b in 0..LEVELS {
            word |= grant.base_word(b, w);
        }
        word
    };
    match first_set_where(masked(start, MAX_SLOTS) as u32, granted) {
        Some(slot) if slot < slots => slot,
        _ => start,
    }
}

/// The first granted slot, from `start`, of the lowest non-empty effective
/// level (own flows plus base), and its own level; `MAX_SLOTS` when none.
#[inline(always)]
fn lowest_level_slot<R: Row>(row: &R, grant: &SlotGrant, start: u32) -> (u32, usize) {
    for eff in 0..LEVELS {
        let effective = |w: usize| {
            let mut word = 0;
            for base in 0..=eff {
                // A word changing meanwhile only skews this choice, which
                // the claim then checks.
                let own = row.level_word(eff - base, masked(w as u32, SLOT_WORDS as u32));
                word |= own.load() & grant.base_word(base, w);
            }
            word
        };
        if let Some(slot) = first_set_where(masked(start, MAX_SLOTS) as u32, effective) {
            return (slot, eff.saturating_sub(base_of(grant, slot)));
        }
    }
    (MAX_SLOTS, 0)
}

/// The first slot set, at or after `start` and wrapping around, in the
/// bitmap whose word `w` is `word(w)`; reads every word at most once, so
/// the cost does not depend on the slot count (and no array sits on the
/// hook's stack: the kernel allows 512 bytes in all).
#[inline(always)]
pub fn first_set_where(start: u32, word: impl Fn(usize) -> u64) -> Option<u32> {
    let (first, shift) = (start / 64, start % 64);
    let mut i = 0;
    while i <= SLOT_WORDS as u32 {
        let w = (first + i) % SLOT_WORDS as u32;
        let mut bits = word(w as usize);
        if i == 0 {
            bits &= u64::MAX << shift;
        } else if i == SLOT_WORDS as u32 {
            // Back at the first word: the bits before `start`.
            bits &= !(u64::MAX << shift);
        }
        if bits != 0 {
            return Some(w * 64 + lowest_bit(bits));
        }
        i += 1;
    }
    None
}

/// Index of the lowest set bit of a non-zero word (64 for 0): the bits
/// below it, counted without branches (BPF has no count-trailing-zeros
/// instruction, and branches multiply the paths the kernel's verifier
/// walks).
#[inline(always)]
pub fn lowest_bit(word: u64) -> u32 {
    let below = (word & word.wrapping_neg()).wrapping_sub(1);
    let mut v = below - ((below >> 1) & 0x5555_5555_5555_5555);
    v = (v & 0x3333_3333_3333_3333) + ((v >> 2) & 0x3333_3333_3333_3333);
    v = (v + (v >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    (v.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32
}

/// The base level of a granted slot (0 when it is in none).
#[inline(always)]
pub fn base_of(grant: &SlotGrant, slot: u32) -> usize {
    let w = masked(slot / 64, SLOT_WORDS as u32);
    let bit = 1u64 << (slot % 64);
    let mut base = 0;
    for b in 1..LEVELS {
        base |= b & (usize::from(grant.base_word(b, w) & bit != 0)).wrapping_neg();
    }
    base
}

/// `i` masked below `n`, a power of two, on the very value used:
/// `black_box` keeps the compiler from dropping the mask as proven by a
/// check elsewhere (made on a register the kernel's verifier does not
/// connect to this one). Callers check `i < n` for meaning first.
#[inline(always)]
pub fn masked(i: u32, n: u32) -> usize {
    (core::hint::black_box(i) & (n - 1)) as usize
}

/// Moves `slot`'s bit from level `from` to level `to`. Only the holder of
/// the slot's lock changes its bits, so reading a bit then adding to its
/// word is safe; the adds never carry into other slots' bits.
#[inline(always)]
fn move_bit<R: Row>(row: &R, slot: u32, from: usize, to: usize) {
    if from == to || from >= LEVELS || to >= LEVELS || slot >= MAX_SLOTS {
        return;
    }
    let bit = 1u64 << (slot % 64);
    let w = masked(slot / 64, SLOT_WORDS as u32);
    let from_word = row.level_word(masked(from as u32, LEVELS as u32), w);
    if from_word.load() & bit != 0 {
        from_word.add(bit.wrapping_neg());
    }
    let to_word = row.level_word(masked(to as u32, LEVELS as u32), w);
    if to_word.load() & bit == 0 {
        to_word.add(bit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_bit_is_trailing_zeros() {
        for word in [
            1u64,
            2,
            3,
            0x80,
            0x100,
            1 << 63,
            0xf0f0_0000_0000_0000,
            u64::MAX,
        ] {
            assert_eq!(lowest_bit(word), word.trailing_zeros(), "{word:#x}");
        }
        assert_eq!(lowest_bit(0), 64);
    }

    #[test]
    fn first_set_where_wraps_and_starts_where_told() {
        let mut words = [0u64; SLOT_WORDS];
        let find = |words: &[u64; SLOT_WORDS], start| first_set_where(start, |w| words[w]);
        assert_eq!(find(&words, 7), None);
        words[0] = 1 << 3;
        words[5] = 1 << 9;
        assert_eq!(find(&words, 0), Some(3));
        assert_eq!(find(&words, 3), Some(3));
        assert_eq!(find(&words, 4), Some(5 * 64 + 9));
        assert_eq!(find(&words, 5 * 64 + 10), Some(3), "wraps");
        words[0] = 1 << 40;
        assert_eq!(find(&words, 5 * 64 + 10), Some(40));
        // Bits before the start in its own word are found last.
        words = [0; SLOT_WORDS];
        words[2] = 1 << 1;
        assert_eq!(find(&words, 2 * 64 + 5), Some(2 * 64 + 1));
    }

    #[test]
    fn base_of_reads_the_grant() {
        let grant = SlotGrant::of([(1, 0), (70, 2), (5, 9)]);
        assert_eq!(base_of(&grant, 1), 0);
        assert_eq!(base_of(&grant, 70), 2);
        assert_eq!(base_of(&grant, 5), LEVELS - 1);
        assert_eq!(base_of(&grant, 6), 0, "not granted");
    }

    #[test]
    fn this_hosts_search_moves_one_slot_more_every_max_slots_claims() {
        assert_eq!(local_start(5), 5);
        assert_eq!(local_start(MAX_SLOTS), MAX_SLOTS + 1);
        assert_eq!(local_start(3 * MAX_SLOTS + 2), 3 * MAX_SLOTS + 5);
    }
}
