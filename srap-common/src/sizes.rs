//! How large the binder's pinned maps are: four settings of the sender
//! agent (`--max-receivers`, `--max-cpus`, `--max-sockets`,
//! `--max-layouts`), every map's entries derived from them in one place
//! ([`BinderSizes`], used by `binder_pinned_maps!`), and the kernel memory
//! that makes ([`BinderSizes::pinned_bytes`]).
//!
//! Sized for the most the binder could ever hold (4 096 receivers of 512
//! CPUs, 2^18 sockets), the maps would pin 53.7 MiB of kernel memory on
//! every sender, whatever it steered. Sized from the settings, a sender
//! following a few receivers pins a few MiB; one following thousands says
//! so in its settings.

/// CPU slots (distinct receiver CPUs) one receiver can have.
pub const MAX_SLOTS: u32 = 512;
/// Receivers `--max-receivers` may ask for (binder rows 1 to 4096).
pub const MAX_RECEIVERS: u32 = 4096;

/// Rows of the entry, coset and solution pools per layout, on average over
/// layouts: a layout takes as many as its receiver's indirection table has
/// entries (128 to 2 048 on the NICs SRAP was verified on), and the pools
/// are shared, so a few large tables fit among many small ones.
pub const POOL_ROWS_PER_LAYOUT: u32 = 512;
/// Steering tables per binder row: one per local source address an
/// application may bind toward the receiver (and its twin with both ends
/// planned).
pub const TABLES_PER_ROW: u32 = 16;
/// Destination keys per port table (bound to its source or to none,
/// any port or a few named ones).
pub const DESTS_PER_TABLE: u32 = 4;
/// The most `--max-sockets` may ask for (a table of 2^23 rows, 192 MiB).
pub const MAX_SOCKETS: u32 = 1 << 22;
/// The most `--max-layouts` may ask for.
pub const MAX_LAYOUTS: u32 = 1 << 16;

/// The settings the binder's maps are sized by. Every map's entries are a
/// `const fn` of them, named in `binder_pinned_maps!`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BinderSizes {
    /// Receiver addresses steered toward (binder rows 1 to `receivers`; row
    /// 0 is this host's own CPUs).
    pub receivers: u32,
    /// CPU slots of one receiver (the receiver CPUs its RSS reaches), and
    /// of this host with `--steer local|both`; at most [`MAX_SLOTS`].
    pub cpus: u32,
    /// Steered sockets open at once: the socket table has twice as many
    /// rows (a power of two), so a socket's home row is free but for rare
    /// collisions.
    pub sockets: u32,
    /// Distinct RSS layouts: one per receiver address family and RSS
    /// configuration (receivers of one description share theirs), one per
    /// destination port for a receiver whose hash is not linear in the
    /// ports and is steered on named ports, and this host's own NIC's.
    pub layouts: u32,
}

impl Default for BinderSizes {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One of the four settings, to name in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSetting {
    Receivers,
    Cpus,
    Sockets,
    Layouts,
}

impl SizeSetting {
    /// The key in the sender's TOML file, and the flag without its `--`.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Receivers => "max-receivers",
            Self::Cpus => "max-cpus",
            Self::Sockets => "max-sockets",
            Self::Layouts => "max-layouts",
        }
    }

    /// The most it may be set to.
    pub const fn limit(self) -> u32 {
        match self {
            Self::Receivers => MAX_RECEIVERS,
            Self::Cpus => MAX_SLOTS,
            Self::Sockets => MAX_SOCKETS,
            Self::Layouts => MAX_LAYOUTS,
        }
    }

    pub const ALL: [Self; 4] = [Self::Receivers, Self::Cpus, Self::Sockets, Self::Layouts];
}

/// How the kernel holds a map, for what it charges ([`BinderSizes::pinned_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    Array,
    PerCpuArray,
    HashMap,
}

/// `sizeof(struct bpf_array)`: what an array map costs besides its
/// elements (Linux 6.18, x86-64: `bpftool map show` of a 1-entry array
/// reports its value rounded up to 8 bytes, and 312).
pub const ARRAY_HEADER: u64 = 312;
/// `sizeof(struct bpf_htab)` (Linux 6.18, x86-64: an empty 4 160-entry
/// hash map on 2 possible CPUs reports 131 968 bytes, its 8 192 buckets
/// 131 072 of them and its lock counters 64).
pub const HASH_HEADER: u64 = 832;
/// A hash bucket (`struct bucket`: list head and lock).
pub const HASH_BUCKET: u64 = 16;
/// `sizeof(struct htab_elem)` and the free-list node a preallocation-free
/// element carries (`LLIST_NODE_SZ`).
pub const HASH_ELEM_HEADER: u64 = 48 + 8;
/// The hash map's per-CPU lock counters (`HASHTAB_MAP_LOCK_COUNT` ints).
pub const HASH_LOCKS_PER_CPU: u64 = 8 * 4;

impl BinderSizes {
    /// For a data-transfer node: 64 receiver addresses, each of any CPU
    /// count SRAP steers (512: a receiver never needs the setting, at 4 KiB
    /// per binder row and 8 KiB per layout), 32 768 steered sockets open at
    /// once, a layout per receiver and one for this host (the formula and
    /// its figures: docs/binder.md).
    pub const DEFAULT: Self = Self::for_receivers(64);

    /// The defaults, for `receivers` receivers (a layout each, and this
    /// host's).
    pub const fn for_receivers(receivers: u32) -> Self {
        Self {
            receivers,
            cpus: MAX_SLOTS,
            sockets: 1 << 15,
            layouts: receivers + 1,
        }
    }

    /// The value of one setting.
    pub const fn get(&self, setting: SizeSetting) -> u32 {
        match setting {
            SizeSetting::Receivers => self.receivers,
            SizeSetting::Cpus => self.cpus,
            SizeSetting::Sockets => self.sockets,
            SizeSetting::Layouts => self.layouts,
        }
    }

    /// The first setting that is 0 or past its limit.
    pub fn out_of_range(&self) -> Option<SizeSetting> {
        SizeSetting::ALL
            .into_iter()
            .find(|s| self.get(*s) == 0 || self.get(*s) > s.limit())
    }

    /// Binder rows: this host's, then one per receiver.
    pub const fn receiver_rows(&self) -> u32 {
        self.receivers + 1
    }

    /// Slot words: `cpus` per binder row.
    pub const fn slot_words(&self) -> u32 {
        self.receiver_rows() * self.cpus
    }

    /// Socket table rows: a power of two, at least twice `sockets`.
    pub const fn socket_rows(&self) -> u32 {
        (2 * self.sockets).next_power_of_two()
    }

    pub const fn layout_rows(&self) -> u32 {
        self.layouts
    }

    /// The slot pool: `cpus` per layout.
    pub const fn slot_rows(&self) -> u32 {
        self.layouts * self.cpus
    }

    pub const fn entry_rows(&self) -> u32 {
        self.layouts * POOL_ROWS_PER_LAYOUT
    }

    pub const fn coset_rows(&self) -> u32 {
        self.layouts * POOL_ROWS_PER_LAYOUT
    }

    pub const fn tables(&self) -> u32 {
        self.receiver_rows() * TABLES_PER_ROW
    }

    pub const fn dests(&self) -> u32 {
        self.tables() * DESTS_PER_TABLE
    }

    /// (receiver layout, local layout) pairs: at most one per receiver
    /// layout (this host's layout of the receiver's family).
    pub const fn joints(&self) -> u32 {
        self.layouts
    }

    pub const fn solution_rows(&self) -> u32 {
        self.layouts * POOL_ROWS_PER_LAYOUT
    }

    /// NUMA nodes with a row in `NODE_NICS_MAP`.
    pub const fn nodes(&self) -> u32 {
        crate::local_nics::MAX_NODES
    }

    pub const fn one(&self) -> u32 {
        1
    }

    /// Tasks inside the kernel's `__mptcp_subflow_connect` at once
    /// (`SUBFLOW_DESTS_MAP`): its path-manager workers and
    /// netlink callers, a few per CPU at most. Past it a subflow is not
    /// traced (`subflow_untraced`), never failed.
    pub const fn subflow_tasks(&self) -> u32 {
        1024
    }

    /// Receiver addresses marked failing at once
    /// (`SPREAD_FAILING_MAP`): a fixed count, not a setting; a full map
    /// marks no more, and connects keep spreading to the addresses it
    /// could not mark.
    pub const fn spread_failing(&self) -> u32 {
        crate::receiver_nics::MAX_FAILING
    }
}

/// What the kernel charges for one map (`map_mem_usage` of its type): an
/// array, its header and its elements rounded up to 8 bytes; a per-CPU
/// array, that per possible CPU and a pointer per element; a hash map
/// without preallocation, its header, a bucket per entry rounded up to a
/// power of two, per-CPU lock counters, and each element in use.
pub fn map_bytes(
    kind: MapKind,
    (key, value): (usize, usize),
    entries: u32,
    (possible_cpus, used): (u32, u32),
) -> u64 {
    let round = |n: usize| (n as u64).div_ceil(8) * 8;
    let entries = u64::from(entries);
    match kind {
        MapKind::Array => ARRAY_HEADER + entries * round(value),
        MapKind::PerCpuArray => {
            ARRAY_HEADER + entries * 8 + entries * round(value) * u64::from(possible_cpus)
        }
        MapKind::HashMap => {
            HASH_HEADER
                + HASH_BUCKET * entries.next_power_of_two()
                + HASH_LOCKS_PER_CPU * u64::from(possible_cpus)
                + u64::from(used) * (HASH_ELEM_HEADER + round(key) + round(value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_grows_what_it_sizes() {
        let base = BinderSizes::DEFAULT;
        let grown = |sizes: BinderSizes| sizes.pinned_bytes(2, 0) - base.pinned_bytes(2, 0);
        let row = 280 + 264 + 512 * 8 + 16 * (48 + 72);
        assert_eq!(
            grown(BinderSizes {
                receivers: base.receivers + 1,
                ..base
            }),
            row
        );
        let layout = 2072 + 512 * 16 + 512 * 8 + 512 * 16 + 2064 + 512 * 8;
        assert_eq!(
            grown(BinderSizes {
                layouts: base.layouts + 1,
                ..base
            }),
            layout
        );
        assert_eq!(
            grown(BinderSizes {
                sockets: base.sockets * 2,
                ..base
            }),
            65_536 * 24
        );
        assert_eq!(
            grown(BinderSizes {
                sockets: base.sockets + 1,
                ..base
            }),
            65_536 * 24,
            "the next power of two"
        );
    }

    #[test]
    fn settings_out_of_range_are_named() {
        assert_eq!(BinderSizes::DEFAULT.out_of_range(), None);
        let none = BinderSizes {
            sockets: 0,
            ..BinderSizes::DEFAULT
        };
        assert_eq!(none.out_of_range(), Some(SizeSetting::Sockets));
        let wide = BinderSizes {
            cpus: MAX_SLOTS + 1,
            ..BinderSizes::DEFAULT
        };
        assert_eq!(wide.out_of_range(), Some(SizeSetting::Cpus));
        let most = BinderSizes {
            receivers: MAX_RECEIVERS,
            cpus: MAX_SLOTS,
            sockets: MAX_SOCKETS,
            layouts: MAX_LAYOUTS,
        };
        assert_eq!(most.out_of_range(), None);
        assert!(most.slot_words() < u32::MAX && most.entry_rows() < u32::MAX);
        assert_eq!(SizeSetting::Layouts.key(), "max-layouts");
    }
}
