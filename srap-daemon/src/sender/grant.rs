//! The receiver agent's CPU grant, sender side: writing it into the
//! binder's grant map (receiver CPUs → this plan's slots), and reading back
//! the flows the binder holds per receiver CPU, which the sender reports
//! as its demand.
//!
//! A grant names receiver CPUs, not slots, so it survives a re-plan that
//! renumbers slots: [`apply`] runs again after every re-plan.

use std::collections::BTreeMap;

use aya::{Ebpf, maps::Array};
use srap_common::{
    binder::{GRANTS_MAP, LOCAL_ROW, SLOT_STATE_MAP, SlotGrant},
    wire::{CpuCount, CpuGrant},
};

use super::{
    error::SenderError,
    maps::{row_slots, slot_flows},
    plan::Plan,
};

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> SenderError {
    move |source| SenderError::Map { map, source }
}

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Slots granted toward each receiver.
    pub slots: usize,
    /// Granted CPUs this plan has no slot for (no queue of the description
    /// this sender planned with reaches them).
    pub unknown: usize,
}

/// Receiver CPU → slot, for each receiver of the plan (by its index) that
/// `keep` accepts.
fn slots_by_cpu(plan: &Plan, keep: impl Fn(u32) -> bool) -> Vec<(u32, BTreeMap<u32, u32>)> {
    plan.rows()
        .filter(|r| keep(r.index))
        .map(|r| {
            let cpus = r
                .tables
                .first()
                .and_then(|t| plan.tables.get(*t))
                .map(|t| {
                    t.layout
                        .slots
                        .iter()
                        .enumerate()
                        .map(|(s, e)| (e.cpu, s as u32))
                        .collect()
                })
                .unwrap_or_default();
            (r.index, cpus)
        })
        .collect()
}

/// This host's CPU → slot of its occupancy row ([`LOCAL_ROW`]) in `plan`.
pub fn local_slots(plan: &Plan) -> BTreeMap<u32, u32> {
    slots_by_cpu(plan, |row| row == LOCAL_ROW)
        .into_iter()
        .next()
        .map(|(_, cpus)| cpus)
        .unwrap_or_default()
}

/// Writes `grant` (or, with `None`, no grant: every slot usable) for every
/// receiver of `plan`. A grant none of whose CPUs this plan reaches would
/// leave the binder nothing: it is written as no grant, and said so.
pub fn apply(
    ebpf: &mut Ebpf,
    plan: &Plan,
    grant: Option<&CpuGrant>,
) -> Result<Applied, SenderError> {
    apply_to(ebpf, plan, |_| true, grant)
}

/// [`apply`] for the receivers (binder rows) `keep` accepts only: the
/// addresses of the one receiver host that granted it.
pub fn apply_to(
    ebpf: &mut Ebpf,
    plan: &Plan,
    keep: impl Fn(u32) -> bool,
    grant: Option<&CpuGrant>,
) -> Result<Applied, SenderError> {
    apply_each(ebpf, plan, |row| keep(row).then_some(grant))
}

/// Writes each binder row's own grant: `grant_of(row)` is `None` for a row
/// left as it is, `Some(None)` for no grant, `Some(Some(grant))` for that
/// grant (a receiver's rows differ when its NICs' CPUs are granted apart,
/// each row with the grant of the NIC its address is on). What it did is
/// told of the last row written.
pub fn apply_each<'a>(
    ebpf: &mut Ebpf,
    plan: &Plan,
    grant_of: impl Fn(u32) -> Option<Option<&'a CpuGrant>>,
) -> Result<Applied, SenderError> {
    let map = ebpf
        .map_mut(GRANTS_MAP)
        .ok_or(SenderError::Missing(GRANTS_MAP))?;
    let mut array: Array<_, SlotGrant> = Array::try_from(map).map_err(map_error(GRANTS_MAP))?;
    let mut applied = Applied::default();
    for (index, cpus) in slots_by_cpu(plan, |row| grant_of(row).is_some()) {
        let row = match grant_of(index).flatten() {
            None => SlotGrant::default(),
            Some(grant) => {
                let slots: Vec<(u32, u32)> = grant
                    .cpus
                    .iter()
                    .filter_map(|c| cpus.get(&c.cpu).map(|s| (*s, c.count)))
                    .collect();
                applied.slots = slots.len();
                applied.unknown = grant.cpus.len() - slots.len();
                if slots.is_empty() {
                    SlotGrant::default()
                } else {
                    SlotGrant::of(slots)
                }
            }
        };
        array.set(index, row, 0).map_err(map_error(GRANTS_MAP))?;
    }
    Ok(applied)
}

/// Open steered flows per receiver CPU, over the receivers of `plan` that
/// `keep` accepts (the addresses of one receiver host).
pub fn demand(
    ebpf: &Ebpf,
    plan: &Plan,
    keep: impl Fn(u32) -> bool,
) -> Result<Vec<CpuCount>, SenderError> {
    let row_slots = row_slots(ebpf)?;
    let map = ebpf
        .map(SLOT_STATE_MAP)
        .ok_or(SenderError::Missing(SLOT_STATE_MAP))?;
    let words: Array<_, u64> = Array::try_from(map).map_err(map_error(SLOT_STATE_MAP))?;
    let mut per_cpu: BTreeMap<u32, u32> = BTreeMap::new();
    for (index, cpus) in slots_by_cpu(plan, keep) {
        let slots = cpus.values().max().map_or(0, |s| s + 1);
        let flows = slot_flows(&words, (index, row_slots), slots)?;
        for (cpu, slot) in &cpus {
            let flows = flows.get(*slot as usize).copied().unwrap_or(0);
            if flows > 0 {
                *per_cpu.entry(*cpu).or_insert(0) += flows;
            }
        }
    }
    Ok(per_cpu
        .into_iter()
        .map(|(cpu, count)| CpuCount { cpu, count })
        .collect())
}
