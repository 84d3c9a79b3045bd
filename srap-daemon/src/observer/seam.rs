//! The seam between the observer's decisions and the kernel: attaching on
//! one hook ([`HookAttacher`]) and walking or pruning its flow map
//! ([`FlowTable`]). The parent's `KernelHooks` and a loaded [`Ebpf`] are
//! the real ones, an aya call (or a few) each; unit tests put in-memory
//! ones in their place, so the hook order, the fallbacks and the reading
//! of the records are judged without root. The real attaching stays in
//! the parent: this file must not call up into it.

use std::collections::HashMap;

use aya::{
    Ebpf, Pod,
    maps::{HashMap as BpfHashMap, MapData, MapError},
};
use srap_common::observer::FlowKey;
use tracing::debug;

use super::{
    error::ObserverError,
    hook::{AttachFailure, Hook},
};

/// Attaches the observer on one hook.
pub(super) trait HookAttacher {
    /// What attaching gives besides the hook (the socket hook's view).
    type Attached;

    /// Attaches on `hook`: refused (another hook may do) or fatal (the
    /// object itself is wrong) when it cannot.
    fn attach(&mut self, hook: Hook) -> Result<Self::Attached, AttachFailure>;
}

/// A hook's flow map, by name.
pub(super) trait FlowTable {
    /// Every record of map `name`, each flow once.
    fn walk<V: Pod>(&self, name: &'static str) -> Result<HashMap<FlowKey, V>, ObserverError>;

    /// Removes `keys` from map `name`: one already gone (closed and evicted
    /// meanwhile) is as good as removed, another failure is logged and
    /// the rest still removed. Fails only when the map cannot be used.
    fn remove<V: Pod>(&mut self, name: &'static str, keys: &[FlowKey]) -> Result<(), MapError>;
}

impl FlowTable for Ebpf {
    fn walk<V: Pod>(&self, name: &'static str) -> Result<HashMap<FlowKey, V>, ObserverError> {
        let map = self.map(name).ok_or(ObserverError::Missing(name))?;
        let map = BpfHashMap::<_, FlowKey, V>::try_from(map)?;
        // An LRU map can evict while we walk it, which restarts the walk:
        // collect into a map so a flow seen twice is reported once.
        let mut flows = HashMap::new();
        for entry in map.iter() {
            let (key, value) = entry?;
            flows.insert(key, value);
        }
        Ok(flows)
    }

    fn remove<V: Pod>(&mut self, name: &'static str, keys: &[FlowKey]) -> Result<(), MapError> {
        let Some(map) = self.map_mut(name) else {
            return Ok(());
        };
        let mut map = BpfHashMap::<&mut MapData, FlowKey, V>::try_from(map)?;
        for key in keys {
            if let Err(err) = map.remove(key)
                && !matches!(err, MapError::KeyNotFound)
            {
                debug!(%err, "forgetting a stale flow record");
            }
        }
        Ok(())
    }
}
