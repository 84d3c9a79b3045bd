//! Claim a CPU slot: `srap_common::occupancy`, the one claim and
//! release the host's tests interleave, run over the maps' memory with the
//! kernel's atomic instructions.

use core::{
    intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd},
    ptr::{addr_of_mut, read_volatile},
};

use aya_ebpf::helpers::bpf_get_smp_processor_id;
use srap_common::{
    binder::{
        DestValue, JointRow, LEVELS, LOCAL_ROW, LayoutRow, MAX_SLOTS, READER_CPUS, ReceiverSlots,
        SLOT_WORDS, SlotGrant, SlotRow, TableRow, event, outcome, placement,
    },
    occupancy::{self, Unclaimed, masked},
};

use super::{
    config,
    maps::{
        SRAP_GRANTS, SRAP_JOINTS, SRAP_LAYOUTS, SRAP_RECEIVERS, SRAP_SLOT_STATE, SRAP_SLOTS,
        SRAP_TABLES, count,
    },
};

/// The words per binder row in `SRAP_SLOT_STATE`, as the agent sized the
/// map (`--max-cpus`); 0 before it wrote its config (no word is then had).
#[inline(always)]
fn row_slots() -> u32 {
    config::row_slots()
}

/// The word of a receiver's slot in `SRAP_SLOT_STATE`.
#[inline(always)]
pub(super) fn slot_word_of(receiver: u32, slot: u32) -> Option<*mut u64> {
    slot_word_in(receiver, slot, row_slots())
}

/// The word of a receiver's slot in rows of `row_slots` words.
#[inline(always)]
fn slot_word_in(receiver: u32, slot: u32, row_slots: u32) -> Option<*mut u64> {
    if slot >= MAX_SLOTS || slot >= row_slots {
        return None;
    }
    SRAP_SLOT_STATE.get_ptr_mut(receiver.wrapping_mul(row_slots).wrapping_add(slot))
}

/// Compare-and-exchange on a word of map memory.
#[inline(always)]
pub(super) fn exchange(word: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: valid, aligned map memory.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(word, old, new)
    }
    .1
}

/// One receiver's occupancy row over the maps: its `SRAP_RECEIVERS` entry
/// (cursor, level bitmaps) and its words in `SRAP_SLOT_STATE`.
/// The config's row stride is read once per row, not once per word: a
/// claim looks up several words.
pub(crate) struct MapRow {
    state: *mut ReceiverSlots,
    receiver: u32,
    row_slots: u32,
}

impl MapRow {
    /// The row of `receiver`; `None` past the map.
    #[inline(always)]
    pub(crate) fn of(receiver: u32) -> Option<Self> {
        let state = SRAP_RECEIVERS.get_ptr_mut(receiver)?;
        Some(Self::at(state, receiver))
    }

    /// The row whose `SRAP_RECEIVERS` entry is `state`.
    #[inline(always)]
    fn at(state: *mut ReceiverSlots, receiver: u32) -> Self {
        Self {
            state,
            receiver,
            row_slots: row_slots(),
        }
    }
}

/// A word of map memory, changed with the kernel's atomic instructions.
#[derive(Clone, Copy)]
pub(crate) struct MapWord(*mut u64);

impl occupancy::Word for MapWord {
    #[inline(always)]
    fn load(self) -> u64 {
        // SAFETY: valid map memory.
        unsafe { read_volatile(self.0) }
    }
    #[inline(always)]
    fn compare_exchange(self, old: u64, new: u64) -> bool {
        exchange(self.0, old, new)
    }
    #[inline(always)]
    fn add(self, delta: u64) {
        // SAFETY: valid map memory.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(self.0, delta) };
    }
}

impl occupancy::Row for MapRow {
    type Word<'a> = MapWord;
    #[inline(always)]
    fn slots(&self) -> u32 {
        // SAFETY: valid map memory.
        unsafe { read_volatile(&raw const (*self.state).slots) }
    }
    #[inline(always)]
    fn cursor(&self) -> u64 {
        // SAFETY: valid map memory.
        unsafe { read_volatile(&raw const (*self.state).cursor) }
    }
    #[inline(always)]
    fn set_cursor(&self, cursor: u64) {
        // SAFETY: valid map memory.
        unsafe { (*self.state).cursor = cursor };
    }
    #[inline(always)]
    fn slot_word(&self, slot: u32) -> Option<MapWord> {
        slot_word_in(self.receiver, slot, self.row_slots).map(MapWord)
    }
    #[inline(always)]
    fn level_word(&self, level: usize, w: usize) -> MapWord {
        const WORDS: u32 = (LEVELS * SLOT_WORDS) as u32;
        let index = masked(level as u32 * SLOT_WORDS as u32 + w as u32, WORDS);
        // SAFETY: `levels` is WORDS contiguous u64s and `index` is below WORDS.
        MapWord(unsafe { addr_of_mut!((*self.state).levels).cast::<u64>().add(index) })
    }
}

/// The slots a claim in `receiver`'s row may take: the receiver agent's
/// grant ([`SRAP_GRANTS`]); in this host's row under `--local-placement
/// reader`, the connecting CPU's row there (its own slot, else its
/// nearest, which the agent computed: one lookup, the claim unchanged).
/// The connect hook runs on the connecting thread, so the CPU it runs on
/// is the reader's.
#[inline(always)]
fn grant_of(receiver: u32) -> Option<&'static SlotGrant> {
    SRAP_GRANTS.get(grant_row(receiver))
}

/// The row of [`SRAP_GRANTS`] a claim in `receiver`'s row reads. Only the
/// index depends on the placement: one lookup after it, so the kernel's
/// verifier walks the claim once, not once per row kind.
#[inline(always)]
fn grant_row(receiver: u32) -> u32 {
    if receiver != LOCAL_ROW {
        return receiver;
    }
    if config::local_placement() != placement::READER {
        return receiver;
    }
    // SAFETY: a helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let placed = cpu < READER_CPUS;
    count(if placed {
        event::READER_PLACED
    } else {
        event::READER_UNPLANNED
    });
    if placed {
        config::max_receivers() + 1 + cpu
    } else {
        receiver
    }
}

/// Claims the least-occupied granted slot of `receiver`'s row (or of this
/// host's, [`LOCAL_ROW`]): its slot and turn, or the verdict of a connect
/// that claims nothing (`maps_unfilled`, `claim_failed`; this host's
/// caller drops it and keeps the receiver's placement). A contended claim
/// is counted here, an event beside the verdict. The
/// row goes in by registers and the claim stays a subprogram of its own,
/// as the kernel's verifier walks it cheapest. The grant is looked up in
/// here ([`grant_of`]): the test of `receiver` that picks its row then
/// refines `receiver` inside the subprogram only, and the caller's paths
/// after it stay one (looked up by the caller, they would be two to the
/// end of the hook, and `connect4` would go past the verifier's million).
#[inline(never)]
pub(super) fn claim_slot(state: *mut ReceiverSlots, receiver: u32) -> Result<(u32, u32), u32> {
    let row = MapRow::at(state, receiver);
    let local = receiver == LOCAL_ROW;
    let Some(grant) = grant_of(receiver) else {
        return Err(outcome::MAPS_UNFILLED);
    };
    match occupancy::claim(&row, grant, local) {
        Ok(claimed) => {
            if claimed.contended {
                count(event::CLAIM_CONTENDED);
            }
            Ok((claimed.slot, claimed.turn))
        }
        Err(Unclaimed::NoSlots) => Err(outcome::MAPS_UNFILLED),
        Err(Unclaimed::Contention) => Err(outcome::CLAIM_FAILED),
    }
}

/// Frees one flow of a receiver's slot (`srap_common::occupancy::release`).
pub(crate) fn release_slot(receiver: u32, slot: u32) {
    if let Some(row) = MapRow::of(receiver) {
        let _ = occupancy::release(&row, slot);
    }
}

/// Counts a connect that found no free port in its slot, and which slot:
/// the agent warns about it.
#[inline(always)]
pub(super) fn note_dry(state: *mut ReceiverSlots, slot: u32) {
    // SAFETY: valid, aligned map memory.
    unsafe {
        atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(addr_of_mut!((*state).dry), 1);
        (*state).dry_slot = slot;
    }
}

/// This host's side of a both-ends destination: its table, layout, joint
/// row, and its claimed slot and that slot's row. Not the slot's word: its
/// rotation is not used, the receiver slot's turn enumerates the pairs
/// ([`joint_port`]).
pub(super) struct LocalSide<'a> {
    pub table: &'a TableRow,
    pub layout: &'a LayoutRow,
    pub row: &'a SlotRow,
    pub joint: &'a JointRow,
    pub slot: u32,
}

/// The local table, layout and joint row of `dest`, and a claimed slot of
/// this host's CPUs; `None` for a destination planned for one NIC.
#[inline(always)]
pub(super) fn claim_local(dest: &DestValue) -> Option<LocalSide<'static>> {
    if !config::steers_local() || dest.local_table == DestValue::NO_LOCAL {
        return None;
    }
    let table = SRAP_TABLES.get(dest.local_table)?;
    let layout = SRAP_LAYOUTS.get(table.layout)?;
    let joint = SRAP_JOINTS.get(table.joint)?;
    let state = SRAP_RECEIVERS.get_ptr_mut(LOCAL_ROW)?;
    let slots = layout.slots;
    if slots == 0 || slots > MAX_SLOTS || joint.kernel_len == 0 {
        return None;
    }
    let (slot, _) = claim_slot(state, LOCAL_ROW).ok()?;
    let Some(row) = SRAP_SLOTS.get(layout.slot_base.wrapping_add(slot % slots)) else {
        release_slot(LOCAL_ROW, slot);
        return None;
    };
    Some(LocalSide {
        table,
        layout,
        row,
        joint,
        slot,
    })
}

/// Takes the next turn of a slot's port rotation.
#[inline(always)]
pub(super) fn take_turn(word: *mut u64) -> Option<u32> {
    occupancy::take_turn(MapWord(word))
}
