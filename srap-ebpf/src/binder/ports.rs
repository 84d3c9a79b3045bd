//! Pick the port a slot's turn stands for, from the plan's tables: an
//! entry of the slot, the coset of that entry's value toward the
//! destination port, a member of it (no scan, no per-port state).

use srap_common::binder::{
    CosetRow, JOINT_MEMBERS, JointRow, LayoutRow, SlotRow, TableRow, slot_turn,
};

use super::{
    claim::LocalSide,
    maps::{SRAP_COSETS, SRAP_ENTRIES, SRAP_SOLUTIONS},
};

/// The maps' rows one steered connect works with.
pub(super) struct PlanRows<'a> {
    pub table: &'a TableRow,
    pub layout: &'a LayoutRow,
    pub row: &'a SlotRow,
    pub word: *mut u64,
}

/// The slot's `turn`-th port toward destination port `dport`; `None` when
/// that entry's coset has no port in the range.
#[inline(always)]
pub(super) fn port_at(rows: &PlanRows<'_>, turn: u32, dport: u16) -> Option<u16> {
    let (row, layout) = (rows.row, rows.layout);
    if row.count == 0 {
        return None;
    }
    let (position, round) = slot_turn(turn, row.count);
    let index = layout
        .entry_base
        .wrapping_add(row.first)
        .wrapping_add(position);
    let entry = *SRAP_ENTRIES.get(index)?;
    let value = layout.value_for(rows.table.base, entry, dport);
    if value >= layout.values {
        return None;
    }
    let coset: &CosetRow = SRAP_COSETS.get(layout.coset_base.wrapping_add(value))?;
    layout.port_of(coset, round)
}

/// The port, toward destination port `dport`, of the receiver slot's
/// `turn`-th combination of its entry, the local slot's entry and a member
/// of their pair: within the receiver entry's coset, the members `j` with
/// `K(j) = δ` (one solution, then its kernel's span), the first in the port
/// range from the member's round. One rotation walks all three, receiver
/// entry fastest, so a receiver slot's turns visit every port that lands on
/// its CPU and the local one before coming back to one (a rotation of its
/// own per side repeated after as few as 512 connects). `None` when the
/// pair has no member in the range (a rank-deficient map, a narrow range).
#[inline(always)]
pub(super) fn joint_port(
    remote: &PlanRows<'_>,
    local: &LocalSide<'_>,
    turn: u32,
    dport: u16,
) -> Option<u16> {
    let (row, layout) = (remote.row, remote.layout);
    let local_row = local.row;
    if row.count == 0 || local_row.count == 0 {
        return None;
    }
    let (position, pairing) = slot_turn(turn, row.count);
    let (local_position, round) = slot_turn(pairing, local_row.count);
    let entry = *SRAP_ENTRIES.get(
        layout
            .entry_base
            .wrapping_add(row.first)
            .wrapping_add(position),
    )?;
    let value = layout.value_for(remote.table.base, entry, dport);
    if value >= layout.values {
        return None;
    }
    let coset: &CosetRow = SRAP_COSETS.get(layout.coset_base.wrapping_add(value))?;
    if coset.count == 0 {
        return None;
    }
    let local_layout = local.layout;
    let local_entry = *SRAP_ENTRIES.get(
        local_layout
            .entry_base
            .wrapping_add(local_row.first)
            .wrapping_add(local_position),
    )?;
    let local_value = local_layout.value_for(local.table.base, local_entry, dport);
    let joint = local.joint;
    let delta = joint.delta(coset.port0 as u16, local_value);
    let j0 = *SRAP_SOLUTIONS.get(joint.solution_base.wrapping_add(delta))?;
    if j0 == JointRow::NONE {
        return None;
    }
    for k in 0..JOINT_MEMBERS {
        let j = joint.member(j0, round.wrapping_add(k));
        if j.wrapping_sub(coset.first) < coset.count {
            let span =
                layout.span_low[(j & 0xff) as usize] ^ layout.span_high[((j >> 8) & 0xff) as usize];
            return Some(coset.port0 as u16 ^ span);
        }
    }
    None
}
