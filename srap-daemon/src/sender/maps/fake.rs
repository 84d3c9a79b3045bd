//! The binder's maps in memory, for unit tests of the fill's logic: rows by
//! (map, index), destinations by key, every write logged in order, and one
//! write that can be made to fail as the kernel would refuse it.

use std::{any::Any, collections::BTreeMap, io};

use aya::{Pod, maps::MapError, sys::SyscallError};
use srap_common::{
    binder::{DESTS_MAP, DestKey, DestValue, SPREAD_MAP},
    receiver_nics::SpreadRow,
};

use super::{BinderMaps, SenderError};

/// One write the fill made, in the order it made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Row `.1` of array map `.0` set.
    Row(&'static str, u32),
    /// A destination inserted (or replaced).
    Insert(DestKey),
    /// A destination removed.
    Remove(DestKey),
}

/// The in-memory maps.
#[derive(Default)]
pub(crate) struct FakeMaps {
    rows: BTreeMap<(&'static str, u32), Box<dyn Any>>,
    pub dests: BTreeMap<DestKey, DestValue>,
    pub spread: BTreeMap<DestKey, SpreadRow>,
    /// Every write that succeeded, in order.
    pub writes: Vec<Write>,
    /// The write refused (with `E2BIG`, as a full or too small map does).
    pub refuse: Option<Write>,
}

impl FakeMaps {
    /// Empty maps that refuse `write`.
    pub fn refusing(write: Write) -> Self {
        Self {
            refuse: Some(write),
            ..Self::default()
        }
    }

    /// Row `index` of `map` as written (zeros/default if never written).
    pub fn row<V: Pod + Default>(&self, map: &'static str, index: u32) -> V {
        self.rows
            .get(&(map, index))
            .and_then(|row| row.downcast_ref::<V>())
            .copied()
            .unwrap_or_default()
    }

    /// Sets a row without logging it: the state found before a fill.
    pub fn preset<V: Pod>(&mut self, map: &'static str, index: u32, value: V) {
        self.rows.insert((map, index), Box::new(value));
    }

    /// The rows of `map` written, in order.
    pub fn written(&self, map: &str) -> Vec<u32> {
        self.writes
            .iter()
            .filter_map(|w| match w {
                Write::Row(m, index) if *m == map => Some(*index),
                _ => None,
            })
            .collect()
    }

    /// The maps written, each once, in the order first written.
    pub fn map_order(&self) -> Vec<&'static str> {
        let mut order: Vec<&'static str> = Vec::new();
        for write in &self.writes {
            let map = match write {
                Write::Row(map, _) => map,
                Write::Insert(_) | Write::Remove(_) => &DESTS_MAP,
            };
            if order.last() != Some(map) && !order.contains(map) {
                order.push(map);
            }
        }
        order
    }

    /// Logs `write`, or fails it if it is the one to refuse.
    fn attempt(&mut self, map: &'static str, write: Write) -> Result<(), SenderError> {
        if self.refuse == Some(write) {
            let call = match write {
                Write::Remove(_) => "bpf_map_delete_elem",
                Write::Row(..) | Write::Insert(_) => "bpf_map_update_elem",
            };
            let io_error = io::Error::from_raw_os_error(7); // E2BIG
            return Err(SenderError::Map {
                map,
                source: MapError::SyscallError(SyscallError { call, io_error }),
            });
        }
        self.writes.push(write);
        Ok(())
    }
}

impl BinderMaps for FakeMaps {
    fn get<V: Pod + Default>(&self, map: &'static str, index: u32) -> Result<V, SenderError> {
        Ok(self.row(map, index))
    }

    fn set<V: Pod>(&mut self, map: &'static str, index: u32, value: V) -> Result<(), SenderError> {
        self.attempt(map, Write::Row(map, index))?;
        self.preset(map, index, value);
        Ok(())
    }

    fn dest_keys(&self) -> Result<Vec<DestKey>, SenderError> {
        Ok(self.dests.keys().copied().collect())
    }

    fn insert_dest(&mut self, key: DestKey, value: DestValue) -> Result<(), SenderError> {
        self.attempt(DESTS_MAP, Write::Insert(key))?;
        self.dests.insert(key, value);
        Ok(())
    }

    fn remove_dest(&mut self, key: &DestKey) -> Result<(), SenderError> {
        self.attempt(DESTS_MAP, Write::Remove(*key))?;
        self.dests.remove(key);
        Ok(())
    }

    fn spread_keys(&self) -> Result<Vec<DestKey>, SenderError> {
        Ok(self.spread.keys().copied().collect())
    }

    fn insert_spread(&mut self, key: DestKey, row: SpreadRow) -> Result<(), SenderError> {
        self.attempt(SPREAD_MAP, Write::Insert(key))?;
        self.spread.insert(key, row);
        Ok(())
    }

    fn remove_spread(&mut self, key: &DestKey) -> Result<(), SenderError> {
        self.attempt(SPREAD_MAP, Write::Remove(*key))?;
        self.spread.remove(key);
        Ok(())
    }
}
