//! The binder's maps: the pinned ones from the one list in
//! `srap_common::binder_pinned_maps!`, and the hook's scratch row.

use srap_common::binder::{BinderSizes, MptcpLayout};

use aya_ebpf::{
    bindings::bpf_sock_tuple,
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};

/// The eBPF-side expansion of `srap_common::binder_pinned_maps!`: one
/// `#[map]` static per pinned map, typed from that one list and declared
/// at the default sizes (the agent sets each map's size at load, from its
/// `--max-*` settings).
macro_rules! declare_maps {
    ($($(#[$doc:meta])* $constant:ident = $name:ident: $kind:ident<$key:ty, $value:ty>
        [$entries:path, $flags:expr];)*) => {
        $($(#[$doc])* #[map]
        pub(super) static $name: declare_maps!(@type $kind, $key, $value) =
            $kind::with_max_entries($entries(&BinderSizes::DEFAULT), $flags);)*
    };
    (@type Array, $key:ty, $value:ty) => { Array<$value> };
    (@type PerCpuArray, $key:ty, $value:ty) => { PerCpuArray<$value> };
    (@type HashMap, $key:ty, $value:ty) => { HashMap<$key, $value> };
}

srap_common::binder_pinned_maps!(declare_maps);

/// Adds one to a counter of `SRAP_STATS` (`srap_common::binder::outcome`,
/// `event`). A connect's verdict is counted once, by its hook
/// (`super::srap_connect4`, `srap_connect6`), from what the steps return;
/// the steps count only events, where they happen.
pub(super) fn count(counter: u32) {
    if let Some(slot) = SRAP_STATS.get_ptr_mut(counter) {
        // SAFETY: per-CPU slot, valid map memory.
        unsafe { *slot += 1 };
    }
}

/// Where `tuple::tuple_holder` builds its lookup tuple: one per CPU, not on the
/// stack. The kernel allows 512 bytes of stack along a call chain and
/// Linux 6.1 rounds every frame up to 32 bytes: with a 36-byte tuple (and
/// the `memset` subprogram zeroing it) on the stack, the chain hook →
/// `bind_jointly` → `tcp_tuple_holder` came to 544 and 6.1 refused the binder.
/// Not pinned: it holds nothing between runs, and a connect hook runs to
/// its end on one CPU.
#[map]
pub(super) static SRAP_TUPLE_SCRATCH: PerCpuArray<bpf_sock_tuple> =
    PerCpuArray::with_max_entries(1, 0);

/// Where `super::nic` hands the table it chose back to the hook: one per
/// CPU, not pinned (it holds nothing between runs).
#[map]
pub(super) static SRAP_NIC_SCRATCH: PerCpuArray<[u32; 2]> = PerCpuArray::with_max_entries(1, 0);

/// The agent's reading of the kernel's MPTCP fields (one row, written
/// after loading, before attaching; not pinned), for
/// `super::path_manager` and the bind hooks' fallback in `super::subflow`.
#[map]
pub(super) static SRAP_MPTCP_LAYOUT: Array<MptcpLayout> = Array::with_max_entries(1, 0);
