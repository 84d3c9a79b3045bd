//! Writing the plan into the binder's maps, and reading its counters back.

use std::collections::BTreeSet;

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, PerCpuArray},
};
use srap_common::binder::{
    BinderConfig, CONFIG_MAP, DESTS_MAP, DestKey, DestValue, MAX_SLOTS, MAX_VALUES, OCCUPANCY_MAP,
    SLOTS_MAP, STATS_MAP, SlotEntries, SteerTable, TABLES_MAP, VALUES_MAP, ValuePorts, outcome,
};

use super::{SenderError, layout::PinLayout, plan::Plan};

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> SenderError {
    move |source| SenderError::Map { map, source }
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, SenderError> {
    ebpf.map_mut(name).ok_or(SenderError::Missing(name))
}

/// Writes tables, slots and values first and the destinations last, so a
/// connect() racing with an update never finds a destination whose table is
/// not there yet; destinations no longer in the plan are removed.
pub fn fill(ebpf: &mut Ebpf, plan: &Plan, pacing_rate: u64) -> Result<(), SenderError> {
    {
        let mut tables: Array<_, SteerTable> =
            Array::try_from(map_mut(ebpf, TABLES_MAP)?).map_err(map_error(TABLES_MAP))?;
        for (t, table) in plan.tables.iter().enumerate() {
            tables
                .set(t as u32, table.table, 0)
                .map_err(map_error(TABLES_MAP))?;
        }
    }
    {
        let mut slots: Array<_, SlotEntries> =
            Array::try_from(map_mut(ebpf, SLOTS_MAP)?).map_err(map_error(SLOTS_MAP))?;
        for (t, table) in plan.tables.iter().enumerate() {
            for (s, slot) in table.slots.iter().enumerate() {
                let index = t as u32 * MAX_SLOTS + s as u32;
                slots.set(index, slot, 0).map_err(map_error(SLOTS_MAP))?;
            }
        }
    }
    {
        let mut values: Array<_, ValuePorts> =
            Array::try_from(map_mut(ebpf, VALUES_MAP)?).map_err(map_error(VALUES_MAP))?;
        for (t, table) in plan.tables.iter().enumerate() {
            for (v, ports) in table.values.iter().enumerate().take(MAX_VALUES as usize) {
                let index = t as u32 * MAX_VALUES + v as u32;
                values.set(index, ports, 0).map_err(map_error(VALUES_MAP))?;
            }
        }
    }
    {
        let mut config: Array<_, BinderConfig> =
            Array::try_from(map_mut(ebpf, CONFIG_MAP)?).map_err(map_error(CONFIG_MAP))?;
        config
            .set(0, BinderConfig { pacing_rate }, 0)
            .map_err(map_error(CONFIG_MAP))?;
    }
    let mut dests: HashMap<_, DestKey, DestValue> =
        HashMap::try_from(map_mut(ebpf, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
    let wanted: BTreeSet<_> = plan.dests.iter().map(|(k, _)| key_bytes(k)).collect();
    let stale: Vec<DestKey> = dests
        .keys()
        .filter_map(Result::ok)
        .filter(|k| !wanted.contains(&key_bytes(k)))
        .collect();
    for (key, value) in &plan.dests {
        dests.insert(key, value, 0).map_err(map_error(DESTS_MAP))?;
    }
    for key in &stale {
        dests.remove(key).map_err(map_error(DESTS_MAP))?;
    }
    Ok(())
}

/// Takes every destination out of the binder's map, so connects miss and
/// keep the kernel's port (the binder fails open); [`fill`] puts them back.
/// Returns how many were removed.
pub fn clear_dests(ebpf: &mut Ebpf) -> Result<usize, SenderError> {
    let mut dests: HashMap<_, DestKey, DestValue> =
        HashMap::try_from(map_mut(ebpf, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
    let keys: Vec<DestKey> = dests.keys().filter_map(Result::ok).collect();
    for key in &keys {
        dests.remove(key).map_err(map_error(DESTS_MAP))?;
    }
    Ok(keys.len())
}

/// A sortable form of a key (DestKey has no Ord).
fn key_bytes(key: &DestKey) -> (u32, u32, [u32; 4]) {
    (key.family, key.port, key.addr)
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

/// Open flows per slot of receiver `receiver` (first `slots` slots).
pub fn read_occupancy(
    layout: &PinLayout,
    receiver: u32,
    slots: u32,
) -> Result<Vec<u64>, SenderError> {
    let map = open_pinned(layout, OCCUPANCY_MAP)?;
    let occupancy: Array<_, u64> = Array::try_from(map).map_err(map_error(OCCUPANCY_MAP))?;
    (0..slots.min(MAX_SLOTS))
        .map(|s| {
            occupancy
                .get(&(receiver * MAX_SLOTS + s), 0)
                .map_err(map_error(OCCUPANCY_MAP))
        })
        .collect()
}
