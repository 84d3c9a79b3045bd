//! The seam between the observer's decisions and the kernel: attaching on
//! one hook ([`HookAttacher`]) and walking or pruning its flow map
//! ([`FlowTable`]). [`KernelHooks`] and a loaded [`Ebpf`] are the real
//! ones, an aya call (or a few) each; unit tests put in-memory ones in
//! their place, so the hook order, the fallbacks and the reading of the
//! records are judged without root.

use std::{collections::HashMap, path::Path};

use aya::{
    Ebpf, Pod,
    maps::{HashMap as BpfHashMap, MapData, MapError},
    programs::XdpMode,
};
use srap_common::observer::FlowKey;
use tracing::debug;

use super::{
    AttachFailure, Hook, HookChoice, ObserverError, ObserverLimit, SocketView, attach_sock,
    attach_tc, attach_xdp,
};
use crate::tc::TcMode;

/// Attaches the observer on one hook.
pub(super) trait HookAttacher {
    /// What attaching gives besides the hook (the socket hook's view).
    type Attached;

    /// Attaches on `hook`: refused (another hook may do) or fatal (the
    /// object itself is wrong) when it cannot.
    fn attach(&mut self, hook: Hook) -> Result<Self::Attached, AttachFailure>;
}

/// The observer's object, attached in the calling thread's namespace: on
/// `iface` for the packet hooks, on `cgroup` (default the cgroup2 root)
/// for the socket hook, which notes what it runs without in `limits`.
pub(super) struct KernelHooks<'a> {
    pub ebpf: &'a mut Ebpf,
    pub iface: &'a str,
    pub cgroup: Option<&'a Path>,
    pub choice: HookChoice,
    pub limits: &'a mut Vec<ObserverLimit>,
}

impl HookAttacher for KernelHooks<'_> {
    type Attached = Option<SocketView>;

    fn attach(&mut self, hook: Hook) -> Result<Option<SocketView>, AttachFailure> {
        let (ebpf, iface) = (&mut *self.ebpf, self.iface);
        match hook {
            Hook::XdpDriver => attach_xdp(ebpf, iface, XdpMode::Driver).map(|()| None),
            Hook::XdpGeneric => attach_xdp(ebpf, iface, XdpMode::Skb).map(|()| None),
            Hook::TcxIngress => attach_tc(ebpf, iface, TcMode::Tcx).map(|()| None),
            Hook::ClsactIngress => attach_tc(ebpf, iface, TcMode::Clsact).map(|()| None),
            Hook::SockOps => {
                attach_sock(ebpf, iface, self.cgroup, self.choice, self.limits).map(Some)
            }
        }
    }
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
