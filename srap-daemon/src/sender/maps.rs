//! Writing the plan into the binder's maps, and reading its counters back.

use std::collections::BTreeSet;

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, PerCpuArray},
};
use srap_common::binder::{
    BinderConfig, CONFIG_MAP, DESTS_MAP, DestKey, DestValue, GRANTS_MAP, LAYOUTS_MAP, MAX_SLOTS,
    RECEIVERS_MAP, ReceiverSlots, SLOTS_MAP, STATS_MAP, SlotGrant, TABLES_MAP, VALUES_MAP, outcome,
};

use super::{SenderError, layout::PinLayout, plan::Plan};

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> SenderError {
    move |source| SenderError::Map { map, source }
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, SenderError> {
    ebpf.map_mut(name).ok_or(SenderError::Missing(name))
}

/// Writes layouts, pools, tables and receivers first and the destinations
/// last, so a connect() racing with an update never finds a destination
/// whose table is not there yet; destinations no longer in the plan are
/// removed.
pub fn fill(ebpf: &mut Ebpf, plan: &Plan, pacing_rate: u64) -> Result<(), SenderError> {
    fill_layouts(ebpf, plan)?;
    write_rows(
        ebpf,
        TABLES_MAP,
        plan.tables
            .iter()
            .enumerate()
            .map(|(t, table)| (t as u32, table.table)),
    )?;
    fill_receivers(ebpf, plan)?;
    write_rows(ebpf, CONFIG_MAP, [(0, BinderConfig { pacing_rate })])?;
    fill_dests(ebpf, plan)
}

/// Sets `rows` of the array map `name`.
fn write_rows<V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    rows: impl IntoIterator<Item = (u32, V)>,
) -> Result<(), SenderError> {
    let mut array: Array<_, V> = Array::try_from(map_mut(ebpf, name)?).map_err(map_error(name))?;
    for (index, value) in rows {
        array.set(index, value, 0).map_err(map_error(name))?;
    }
    Ok(())
}

/// Each layout's row and its rows in the slot and value pools.
fn fill_layouts(ebpf: &mut Ebpf, plan: &Plan) -> Result<(), SenderError> {
    let layouts = || plan.layouts.iter();
    write_rows(
        ebpf,
        LAYOUTS_MAP,
        layouts()
            .enumerate()
            .map(|(l, layout)| (l as u32, layout.layout)),
    )?;
    write_rows(
        ebpf,
        SLOTS_MAP,
        layouts().flat_map(|l| {
            let base = l.layout.slot_base;
            l.slots
                .iter()
                .enumerate()
                .map(move |(s, slot)| (base + s as u32, *slot))
        }),
    )?;
    write_rows(
        ebpf,
        VALUES_MAP,
        layouts().flat_map(|l| {
            let base = l.layout.value_base;
            l.values
                .iter()
                .enumerate()
                .map(move |(v, ports)| (base + v as u32, *ports))
        }),
    )
}

/// Sets each receiver's slot count. The hook's live state (flow counts,
/// level bitmaps, cursor) is rebuilt only when the count changed, keeping
/// the counts of flows still open; otherwise it is left to the hook.
fn fill_receivers(ebpf: &mut Ebpf, plan: &Plan) -> Result<(), SenderError> {
    let mut array: Array<_, ReceiverSlots> =
        Array::try_from(map_mut(ebpf, RECEIVERS_MAP)?).map_err(map_error(RECEIVERS_MAP))?;
    for receiver in &plan.receivers {
        let now = array
            .get(&receiver.index, 0)
            .map_err(map_error(RECEIVERS_MAP))?;
        if now.slots == receiver.slots {
            continue;
        }
        let rebuilt = ReceiverSlots::rebuilt(receiver.slots, &now.flows, now.cursor);
        array
            .set(receiver.index, rebuilt, 0)
            .map_err(map_error(RECEIVERS_MAP))?;
    }
    Ok(())
}

fn fill_dests(ebpf: &mut Ebpf, plan: &Plan) -> Result<(), SenderError> {
    fill_dests_except(ebpf, plan, &BTreeSet::new())
}

/// Puts the plan's destinations in the binder's map, except those toward
/// the receivers (binder rows) in `paused`, which are taken out: connects
/// to them miss and keep the kernel's port (the binder fails open), while
/// every other receiver steers on.
pub fn fill_dests_except(
    ebpf: &mut Ebpf,
    plan: &Plan,
    paused: &BTreeSet<u32>,
) -> Result<(), SenderError> {
    let mut dests: HashMap<_, DestKey, DestValue> =
        HashMap::try_from(map_mut(ebpf, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
    let active = || {
        plan.dests
            .iter()
            .filter(|(_, v)| !paused.contains(&v.receiver))
    };
    let wanted: BTreeSet<DestKey> = active().map(|(k, _)| *k).collect();
    let stale: Vec<DestKey> = dests
        .keys()
        .filter_map(Result::ok)
        .filter(|k| !wanted.contains(k))
        .collect();
    for (key, value) in active() {
        dests.insert(key, value, 0).map_err(map_error(DESTS_MAP))?;
    }
    for key in &stale {
        dests.remove(key).map_err(map_error(DESTS_MAP))?;
    }
    Ok(())
}

/// The binder's outcome counters, summed over CPUs, by [`outcome`] index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BinderStats {
    pub counts: [u64; outcome::COUNT as usize],
}

impl BinderStats {
    pub fn get(&self, outcome: u32) -> u64 {
        self.counts.get(outcome as usize).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for BinderStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, count)) in outcome::NAMES.iter().zip(self.counts).enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name}={count}")?;
        }
        Ok(())
    }
}

fn open_pinned(layout: &PinLayout, name: &'static str) -> Result<Map, SenderError> {
    let data = MapData::from_pin(layout.map(name)).map_err(map_error(name))?;
    Map::from_map_data(data).map_err(map_error(name))
}

/// Reads the pinned stats map (works from any process, agent or not).
pub fn read_stats(layout: &PinLayout) -> Result<BinderStats, SenderError> {
    let map = open_pinned(layout, STATS_MAP)?;
    let stats: PerCpuArray<_, u64> = PerCpuArray::try_from(map).map_err(map_error(STATS_MAP))?;
    let mut out = BinderStats::default();
    for (i, count) in out.counts.iter_mut().enumerate() {
        let per_cpu = stats.get(&(i as u32), 0).map_err(map_error(STATS_MAP))?;
        *count = per_cpu.iter().sum();
    }
    Ok(out)
}

/// Open flows per slot of receiver `receiver` (its slots in use).
pub fn read_occupancy(layout: &PinLayout, receiver: u32) -> Result<Vec<u32>, SenderError> {
    let map = open_pinned(layout, RECEIVERS_MAP)?;
    let receivers: Array<_, ReceiverSlots> =
        Array::try_from(map).map_err(map_error(RECEIVERS_MAP))?;
    let row = receivers
        .get(&receiver, 0)
        .map_err(map_error(RECEIVERS_MAP))?;
    Ok(row.flows[..row.slots.min(MAX_SLOTS) as usize].to_vec())
}

/// The grant in force toward receiver `receiver` (its pinned `SRAP_GRANTS`
/// row; works from any process, so a bench or `srap` can see what the
/// agent applied).
pub fn read_grant(layout: &PinLayout, receiver: u32) -> Result<SlotGrant, SenderError> {
    let map = open_pinned(layout, GRANTS_MAP)?;
    let grants: Array<_, SlotGrant> = Array::try_from(map).map_err(map_error(GRANTS_MAP))?;
    grants.get(&receiver, 0).map_err(map_error(GRANTS_MAP))
}
