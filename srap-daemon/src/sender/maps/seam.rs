//! The seam between the map fill's logic and the kernel: every read and
//! write the fill makes goes through [`BinderMaps`], which a loaded
//! [`Ebpf`] implements with one aya call each, and an in-memory fake does
//! in unit tests (which order, which rows, what a failed write leaves),
//! with no root and no kernel.

use aya::{
    Ebpf, Pod,
    maps::{Array, HashMap, Map},
};
use srap_common::{
    binder::{DESTS_MAP, DestKey, DestValue, SPREAD_MAP},
    receiver_nics::SpreadRow,
};

use crate::sender::error::SenderError;

/// The binder's maps as the fill sees them: rows of its array maps by
/// index, and the destinations' hash map by key.
pub(crate) trait BinderMaps {
    /// Row `index` of the array map `map` (a row never written reads as
    /// zeros, its `Default`: the kernel creates array maps zeroed).
    fn get<V: Pod + Default>(&self, map: &'static str, index: u32) -> Result<V, SenderError>;

    /// Sets row `index` of the array map `map`.
    fn set<V: Pod>(&mut self, map: &'static str, index: u32, value: V) -> Result<(), SenderError>;

    /// The destinations in the map now (a key that cannot be read is left
    /// out: the walk goes on).
    fn dest_keys(&self) -> Result<Vec<DestKey>, SenderError>;

    /// Inserts or replaces one destination.
    fn insert_dest(&mut self, key: DestKey, value: DestValue) -> Result<(), SenderError>;

    /// Removes one destination.
    fn remove_dest(&mut self, key: &DestKey) -> Result<(), SenderError>;

    /// The spread rows in the map now, by key.
    fn spread_keys(&self) -> Result<Vec<DestKey>, SenderError>;

    /// Inserts or replaces one spread row.
    fn insert_spread(&mut self, key: DestKey, row: SpreadRow) -> Result<(), SenderError>;

    /// Removes one spread row.
    fn remove_spread(&mut self, key: &DestKey) -> Result<(), SenderError>;
}

fn map_ref<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a Map, SenderError> {
    ebpf.map(name).ok_or(SenderError::Missing(name))
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, SenderError> {
    ebpf.map_mut(name).ok_or(SenderError::Missing(name))
}

/// The kernel's maps of a loaded binder: each method one `bpf(2)` call
/// through aya (taking a typed view of a map checks its sizes, no call).
impl BinderMaps for Ebpf {
    fn get<V: Pod + Default>(&self, map: &'static str, index: u32) -> Result<V, SenderError> {
        let array: Array<_, V> = Array::try_from(map_ref(self, map)?).map_err(map_error(map))?;
        array.get(&index, 0).map_err(map_error(map))
    }

    fn set<V: Pod>(&mut self, map: &'static str, index: u32, value: V) -> Result<(), SenderError> {
        let mut array: Array<_, V> =
            Array::try_from(map_mut(self, map)?).map_err(map_error(map))?;
        array.set(index, value, 0).map_err(map_error(map))
    }

    fn dest_keys(&self) -> Result<Vec<DestKey>, SenderError> {
        let dests: HashMap<_, DestKey, DestValue> =
            HashMap::try_from(map_ref(self, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
        Ok(dests.keys().filter_map(Result::ok).collect())
    }

    fn insert_dest(&mut self, key: DestKey, value: DestValue) -> Result<(), SenderError> {
        let mut dests: HashMap<_, DestKey, DestValue> =
            HashMap::try_from(map_mut(self, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
        dests.insert(key, value, 0).map_err(map_error(DESTS_MAP))
    }

    fn remove_dest(&mut self, key: &DestKey) -> Result<(), SenderError> {
        let mut dests: HashMap<_, DestKey, DestValue> =
            HashMap::try_from(map_mut(self, DESTS_MAP)?).map_err(map_error(DESTS_MAP))?;
        dests.remove(key).map_err(map_error(DESTS_MAP))
    }

    fn spread_keys(&self) -> Result<Vec<DestKey>, SenderError> {
        let rows: HashMap<_, DestKey, SpreadRow> =
            HashMap::try_from(map_ref(self, SPREAD_MAP)?).map_err(map_error(SPREAD_MAP))?;
        Ok(rows.keys().filter_map(Result::ok).collect())
    }

    fn insert_spread(&mut self, key: DestKey, row: SpreadRow) -> Result<(), SenderError> {
        let mut rows: HashMap<_, DestKey, SpreadRow> =
            HashMap::try_from(map_mut(self, SPREAD_MAP)?).map_err(map_error(SPREAD_MAP))?;
        rows.insert(key, row, 0).map_err(map_error(SPREAD_MAP))
    }

    fn remove_spread(&mut self, key: &DestKey) -> Result<(), SenderError> {
        let mut rows: HashMap<_, DestKey, SpreadRow> =
            HashMap::try_from(map_mut(self, SPREAD_MAP)?).map_err(map_error(SPREAD_MAP))?;
        rows.remove(key).map_err(map_error(SPREAD_MAP))
    }
}

/// The error of a failed operation on the map `map`.
pub(super) fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> SenderError {
    move |source| SenderError::Map { map, source }
}
