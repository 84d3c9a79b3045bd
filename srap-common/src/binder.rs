//! The port binder's maps, and the arithmetic the `connect()` hook and user
//! space must agree on.
//!
//! Toeplitz is linear, so the receiver's indirection index of a flow is
//! `index = base ⊕ S(source port) ⊕ D(destination port)` (low k bits), where
//! only `base` depends on the addresses. The binder's data is split along
//! that line:
//!
//! * a *layout* ([`LayoutRow`], one per receiver RSS configuration and
//!   address family) holds what depends on the receiver's key and table
//!   only: `D` as two byte tables, for every CPU slot a few indirection
//!   entries that land on that CPU ([`SlotEntries`]), and for every value `v`
//!   of `S(port)` a few source ports with that value ([`ValuePorts`]);
//! * a *table* ([`TableRow`], one per (source address, receiver address))
//!   holds `base`, the source address to bind and its layout.
//!
//! The hook picks entry `t` of the least-occupied slot and binds a port of
//! value `t ⊕ base ⊕ D(dport)`: any destination port, no per-port state, no
//! scan. Layouts' slots and values live in two shared pools, so a sender
//! holds thousands of small receivers or a few hundred 512-CPU ones.
//!
//! Where the index is not linear in both ports (`sym-or-xor`, a table size
//! that is not a power of two), a layout is built for one (source,
//! destination, destination port): `base` and `D` are zero, slot `s` has the
//! single entry `s`, and value `s` lists ports that land on slot `s`'s CPU.
//! The hook runs the same code.
//!
//! Which slot a new flow takes is chosen in constant time: a receiver's
//! [`ReceiverSlots`] keeps, besides each slot's flow count, one bitmap of
//! slots per occupancy level (0, 1, 2, 3 or more flows); the hook takes the
//! first slot set in the lowest non-empty level, from a rotating start.

/// CPU slots (distinct receiver CPUs) one receiver can have.
pub const MAX_SLOTS: u32 = 512;
/// `u64` words of one slot bitmap.
pub const SLOT_WORDS: usize = (MAX_SLOTS / 64) as usize;
/// Occupancy levels with their own bitmap; the last holds every slot with
/// `LEVELS - 1` flows or more.
pub const LEVELS: usize = 4;
/// Indirection entries kept per slot (any entry of the slot's CPU will do).
pub const ENTRIES_PER_SLOT: usize = 16;
/// Values of `S(port)` per layout: 2^k for tables of up to 2048 entries.
pub const MAX_VALUES: u32 = 2048;
/// Source ports kept per value: the first choice and its fallbacks.
pub const PORTS_PER_VALUE: usize = 8;
/// Layouts the binder holds.
pub const MAX_LAYOUTS: u32 = 4096;
/// Rows of the shared slot pool (slots of every layout).
pub const SLOT_ROWS: u32 = 1 << 17;
/// Rows of the shared value pool (values of every layout).
pub const VALUE_ROWS: u32 = 1 << 18;
/// Steering tables the binder holds (receivers × local source addresses).
pub const MAX_TABLES: u32 = 1 << 16;
/// Receivers whose CPU occupancy the binder tracks.
pub const MAX_RECEIVERS: u32 = 4096;
/// Steered destinations (receiver address, port or any, source or any).
pub const MAX_DESTS: u32 = 1 << 16;
/// `bpf_bind()` attempts per connect before the kernel is left to choose.
pub const MAX_BIND_ATTEMPTS: u32 = 12;
/// Slot claims in flight at once (each a lock held for a few instructions).
pub const CLAIMS_MAX_ENTRIES: u32 = 4096;
/// `BPF_F_NO_PREALLOC`: hash entries are allocated as they are inserted.
pub const NO_PREALLOC: u32 = 1;

/// The binder's pinned maps, written down once. `binder_pinned_maps!(m)`
/// calls the macro `m` with the whole list: for each map its name constant,
/// its static's name (the name it is pinned under), its aya map type with
/// key and value, its capacity and its flags. This crate expands it into
/// the name constants and [`PINNED_MAPS`] (what the agent pins, checks and
/// fills); `srap-ebpf` expands it into its `#[map]` statics. Adding,
/// resizing or retyping a pinned map is an edit of this list alone (the
/// eBPF code and the agent then use it by name).
#[macro_export]
macro_rules! binder_pinned_maps {
    ($m:ident) => {
        $m! {
            /// Hash: [`DestKey`] → [`DestValue`].
            DESTS_MAP = SRAP_DESTS: HashMap<$crate::binder::DestKey, $crate::binder::DestValue>
                [$crate::binder::MAX_DESTS, $crate::binder::NO_PREALLOC];
            /// Array of [`TableRow`], index = table.
            TABLES_MAP = SRAP_TABLES: Array<u32, $crate::binder::TableRow>
                [$crate::binder::MAX_TABLES, 0];
            /// Array of [`LayoutRow`], index = layout.
            LAYOUTS_MAP = SRAP_LAYOUTS: Array<u32, $crate::binder::LayoutRow>
                [$crate::binder::MAX_LAYOUTS, 0];
            /// Array of [`SlotEntries`], index `layout.slot_base + slot`.
            SLOTS_MAP = SRAP_SLOTS: Array<u32, $crate::binder::SlotEntries>
                [$crate::binder::SLOT_ROWS, 0];
            /// Array of [`ValuePorts`], index `layout.value_base + value`.
            VALUES_MAP = SRAP_VALUES: Array<u32, $crate::binder::ValuePorts>
                [$crate::binder::VALUE_ROWS, 0];
            /// Array of [`ReceiverSlots`], index = receiver.
            RECEIVERS_MAP = SRAP_RECEIVERS: Array<u32, $crate::binder::ReceiverSlots>
                [$crate::binder::MAX_RECEIVERS, 0];
            /// LRU hash: socket cookie → [`SocketSlot`].
            SOCKETS_MAP = SRAP_SOCKETS: LruHashMap<u64, $crate::binder::SocketSlot>
                [$crate::binder::SOCKETS_MAX_ENTRIES, 0];
            /// Per-CPU array of `u64`, index = [`outcome`].
            STATS_MAP = SRAP_STATS: PerCpuArray<u32, u64>
                [$crate::binder::outcome::COUNT, 0];
            /// Array of one [`BinderConfig`].
            CONFIG_MAP = SRAP_CONFIG: Array<u32, $crate::binder::BinderConfig>[1, 0];
            /// Array of [`SlotGrant`], index = receiver.
            GRANTS_MAP = SRAP_GRANTS: Array<u32, $crate::binder::SlotGrant>
                [$crate::binder::MAX_RECEIVERS, 0];
        }
    };
}

/// One pinned binder map as both sides must agree on it (from
/// [`binder_pinned_maps!`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSpec {
    pub name: &'static str,
    pub key_size: usize,
    pub value_size: usize,
    pub max_entries: u32,
}

/// The user-side expansion of [`binder_pinned_maps!`]: a name constant per
/// map and the table of them all.
macro_rules! map_table {
    ($($(#[$doc:meta])* $constant:ident = $name:ident: $kind:ident<$key:ty, $value:ty>
        [$entries:expr, $flags:expr];)*) => {
        $($(#[$doc])* pub const $constant: &str = stringify!($name);)*

        /// Every map the binder pins (the claim locks and bind records live
        /// only as long as the programs that use them).
        pub const PINNED_MAPS: &[MapSpec] = &[$(MapSpec {
            name: $constant,
            key_size: size_of::<$key>(),
            value_size: size_of::<$value>(),
            max_entries: $entries,
        }),*];
    };
}

binder_pinned_maps!(map_table);

pub const CONNECT4_PROGRAM: &str = "srap_connect4";
pub const CONNECT6_PROGRAM: &str = "srap_connect6";
pub const BIND4_PROGRAM: &str = "srap_bind4";
pub const BIND6_PROGRAM: &str = "srap_bind6";
pub const RELEASE_PROGRAM: &str = "srap_sock_release";

/// Capacity of the socket → slot map that lets a closing socket free its slot.
pub const SOCKETS_MAX_ENTRIES: u32 = 65_536;

/// Outcomes of the binder's hooks, as indexes into [`STATS_MAP`].
pub mod outcome {
    /// Bound on the first attempt.
    pub const STEERED: u32 = 0;
    /// Bound after one or more ports were in use.
    pub const RETRIED: u32 = 1;
    /// Every attempt found its port in use: the kernel chose.
    pub const PORT_IN_USE: u32 = 2;
    /// The application bound an explicit source port: left alone.
    pub const APP_BOUND: u32 = 3;
    /// The destination is not steered.
    pub const MISS: u32 = 4;
    /// A map or helper failed: the kernel chose.
    pub const ERROR: u32 = 5;
    /// A steered socket closed and freed its slot.
    pub const RELEASED: u32 = 6;
    /// The application called `bind(addr, 0)` before `connect()`: the kernel
    /// chose the port at bind time, before the destination was known, and a
    /// bind hook cannot defer it (the kernel's `bpf_setsockopt` does not
    /// offer `IP_BIND_ADDRESS_NO_PORT`). Left alone.
    pub const PORT_AT_BIND: u32 = 7;
    /// The application bound a source address SRAP has no table for (an
    /// address added after the plan, or of no interface): left alone.
    pub const SOURCE_UNPLANNED: u32 = 8;
    /// A steered connect kept the source address the application had bound.
    pub const SOURCE_KEPT: u32 = 9;
    pub const COUNT: u32 = 10;
    pub const NAMES: [&str; COUNT as usize] = [
        "steered",
        "retried",
        "port_in_use",
        "app_bound",
        "miss",
        "error",
        "released",
        "port_at_bind",
        "source_unplanned",
        "source_kept",
    ];
}

/// A steered destination: receiver address and port (0: every port), and
/// the source address the socket was bound to (zero: none; the table of
/// the route's source address). Addresses are the kernel's
/// `user_ip4`/`user_ip6` words, network byte order; an IPv4 address is word
/// 0 and the rest are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestKey {
    pub family: u32,
    /// Destination port, host byte order; 0 matches any port.
    pub port: u32,
    pub addr: [u32; 4],
    pub src: [u32; 4],
}

/// Where a destination's steering data lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestValue {
    /// Index of the [`TableRow`].
    pub table: u32,
    /// Receiver index: its CPU occupancy is shared by all its tables.
    pub receiver: u32,
}

/// The per-(source, receiver) part of the linear decomposition.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableRow {
    /// Source address to bind, in the same form as [`DestKey::addr`].
    pub src_addr: [u32; 4],
    /// The same address as an `AF_INET6` socket binds it: the IPv6 address,
    /// or `::ffff:a.b.c.d` for an IPv4 table (a dual-stack socket connecting
    /// to an IPv4 receiver). One field for both cases keeps `connect6`'s
    /// paths identical after the destination lookup, which the kernel's
    /// verifier needs to stay within its instruction budget.
    pub src_addr6: [u32; 4],
    /// Low k bits of the index with both ports zero.
    pub base: u32,
    /// Index of the [`LayoutRow`].
    pub layout: u32,
}

/// The per-RSS-configuration part: what depends on the receiver's key and
/// indirection table only, shared by every table toward such a receiver.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutRow {
    /// Slots in use (distinct receiver CPUs), at most [`MAX_SLOTS`].
    pub slots: u32,
    /// First row of this layout's slots in [`SLOTS_MAP`].
    pub slot_base: u32,
    /// First row of this layout's values in [`VALUES_MAP`].
    pub value_base: u32,
    /// Values in use (2^k, or the slot count for one-port layouts).
    pub values: u32,
    /// `D(dport)` = `dport_low[dport & 0xff] ^ dport_high[dport >> 8]`.
    pub dport_low: [u16; 256],
    pub dport_high: [u16; 256],
}

impl Default for LayoutRow {
    fn default() -> Self {
        Self {
            slots: 0,
            slot_base: 0,
            value_base: 0,
            values: 0,
            dport_low: [0; 256],
            dport_high: [0; 256],
        }
    }
}

impl LayoutRow {
    /// The value of `S(port)` that, with destination port `dport` and the
    /// table's `base`, selects indirection entry `entry`. Shared by the hook
    /// and the tests.
    #[inline(always)]
    pub fn value_for(&self, base: u32, entry: u32, dport: u16) -> u32 {
        let d =
            self.dport_low[usize::from(dport & 0xff)] ^ self.dport_high[usize::from(dport >> 8)];
        (entry ^ base ^ u32::from(d)) & (MAX_VALUES - 1)
    }
}

/// Indirection entries that land on one slot's CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEntries {
    /// The receiver CPU this slot stands for (for reports).
    pub cpu: u32,
    pub count: u32,
    pub entries: [u16; ENTRIES_PER_SLOT],
}

/// Source ports whose `S(port)` is one value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValuePorts {
    pub count: u32,
    pub ports: [u16; PORTS_PER_VALUE],
}

/// One receiver's CPU slots as the hook sees them: flows per slot, and the
/// slots of each occupancy level as bitmaps, so the least-occupied slot is
/// found without looking at every slot. A slot's count and bits change only
/// under that slot's claim lock; the bitmaps are a hint the hook checks
/// against the count, and repairs, before it trusts them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverSlots {
    /// Rotates where the search starts, so ties spread over slots.
    pub cursor: u64,
    /// Slots in use: bits at or past it are never set.
    pub slots: u32,
    pub _pad: u32,
    /// `levels[k]` bit `s`: slot `s` has `k` flows (the last: `k` or more).
    pub levels: [[u64; SLOT_WORDS]; LEVELS],
    /// Open flows per slot.
    pub flows: [u32; MAX_SLOTS as usize],
}

impl Default for ReceiverSlots {
    fn default() -> Self {
        Self {
            cursor: 0,
            slots: 0,
            _pad: 0,
            levels: [[0; SLOT_WORDS]; LEVELS],
            flows: [0; MAX_SLOTS as usize],
        }
    }
}

impl ReceiverSlots {
    /// The state for `slots` slots holding `flows` (slots past `slots`
    /// keep their counts, so flows still open there free them on close).
    pub fn rebuilt(slots: u32, flows: &[u32; MAX_SLOTS as usize], cursor: u64) -> Self {
        let slots = slots.min(MAX_SLOTS);
        let mut out = Self {
            cursor,
            slots,
            flows: *flows,
            ..Self::default()
        };
        for s in 0..slots {
            let level = level_of(flows[s as usize]);
            out.levels[level][(s / 64) as usize] |= 1 << (s % 64);
        }
        out
    }
}

/// The occupancy level of a slot with `flows` flows.
#[inline(always)]
pub fn level_of(flows: u32) -> usize {
    if flows as usize >= LEVELS - 1 {
        LEVELS - 1
    } else {
        flows as usize
    }
}

/// Index of the lowest set bit of a non-zero word (64 for 0): the bits
/// below it, counted without branches (BPF has no count-trailing-zeros
/// instruction, and branches multiply the paths the kernel's verifier walks).
#[inline(always)]
pub fn lowest_bit(word: u64) -> u32 {
    let below = (word & word.wrapping_neg()).wrapping_sub(1);
    let mut v = below - ((below >> 1) & 0x5555_5555_5555_5555);
    v = (v & 0x3333_3333_3333_3333) + ((v >> 2) & 0x3333_3333_3333_3333);
    v = (v + (v >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    (v.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32
}

/// The first slot set in `words` at or after `start`, wrapping around;
/// always reads every word once, so the cost does not depend on the slot
/// count.
#[inline(always)]
pub fn first_set_from(words: &[u64; SLOT_WORDS], start: u32) -> Option<u32> {
    let start = start % MAX_SLOTS;
    let (first, shift) = (start / 64, start % 64);
    let mut i = 0;
    while i <= SLOT_WORDS as u32 {
        let w = (first + i) % SLOT_WORDS as u32;
        let mut word = words[w as usize];
        if i == 0 {
            word &= u64::MAX << shift;
        } else if i == SLOT_WORDS as u32 {
            // Back at the first word: the bits before `start`.
            word &= !(u64::MAX << shift);
        }
        if word != 0 {
            return Some(w * 64 + lowest_bit(word));
        }
        i += 1;
    }
    None
}

/// The slots a receiver agent granted this sender toward one receiver, and
/// how many flows other senders hold on each. Kept apart from
/// [`ReceiverSlots`] so the agent can replace a grant without writing over
/// the flow counts the hook updates. The hook searches the *effective*
/// level of each granted slot (its own flows plus the base) and never
/// looks at a slot outside the grant, so claim and release paths need not
/// know about grants: the level bitmaps keep covering every slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotGrant {
    /// 0: no grant in force (no receiver agent grants, or none yet): every
    /// slot is usable with base 0.
    pub active: u32,
    pub _pad: u32,
    /// `by_base[b]` bit `s`: slot `s` is granted and other senders hold `b`
    /// flows on its CPU (the last: `b` or more).
    pub by_base: [[u64; SLOT_WORDS]; LEVELS],
}

impl SlotGrant {
    /// A grant of `slots` (slot, base) pairs; slots past [`MAX_SLOTS`] are
    /// left out.
    pub fn of(slots: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut grant = Self {
            active: 1,
            ..Self::default()
        };
        for (slot, base) in slots {
            if slot < MAX_SLOTS {
                grant.by_base[level_of(base)][(slot / 64) as usize] |= 1 << (slot % 64);
            }
        }
        grant
    }

    /// Whether `slot` is granted (always, without an active grant).
    pub fn allows(&self, slot: u32) -> bool {
        if self.active == 0 {
            return true;
        }
        slot < MAX_SLOTS
            && self
                .by_base
                .iter()
                .any(|words| words[(slot / 64) as usize] & (1 << (slot % 64)) != 0)
    }

    /// Word `w` of the slots with base `b` (without an active grant, every
    /// slot has base 0). Branch-free for the hook.
    #[inline(always)]
    pub fn base_word(&self, b: usize, w: usize) -> u64 {
        let active = u64::from(self.active != 0).wrapping_neg();
        let default = if b == 0 { u64::MAX } else { 0 };
        (self.by_base[b % LEVELS][w % SLOT_WORDS] & active) | (default & !active)
    }
}

/// Which slot a steered socket holds, so closing it frees the slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketSlot {
    pub receiver: u32,
    pub slot: u32,
}

/// Global binder settings (one entry).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinderConfig {
    /// `SO_MAX_PACING_RATE` for steered sockets, bytes per second; 0: none.
    pub pacing_rate: u64,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;

    // SAFETY: all are `#[repr(C)]`, `Copy`, integers and arrays of integers
    // with no implicit padding, so every bit pattern is a valid value.
    unsafe impl aya::Pod for DestKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for DestValue {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TableRow {}
    // SAFETY: as above (4 × 4 + 2 × 256 × 2 bytes, no padding).
    unsafe impl aya::Pod for LayoutRow {}
    // SAFETY: as above (8 + 4 + 4 + 4 × 8 × 8 + 512 × 4 bytes, no padding).
    unsafe impl aya::Pod for ReceiverSlots {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SlotEntries {}
    // SAFETY: as above (4 + 8 × 2 = 20 bytes, no padding).
    unsafe impl aya::Pod for ValuePorts {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SocketSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for BinderConfig {}
    // SAFETY: as above (4 + 4 + 4 × 8 × 8 bytes, no padding).
    unsafe impl aya::Pod for SlotGrant {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_bit_is_trailing_zeros() {
        for word in [
            1u64,
            2,
            3,
            0x80,
            0x100,
            1 << 63,
            0xf0f0_0000_0000_0000,
            u64::MAX,
        ] {
            assert_eq!(lowest_bit(word), word.trailing_zeros(), "{word:#x}");
        }
        assert_eq!(lowest_bit(0), 64);
    }

    #[test]
    fn first_set_from_wraps_and_starts_where_told() {
        let mut words = [0u64; SLOT_WORDS];
        assert_eq!(first_set_from(&words, 7), None);
        words[0] = 1 << 3;
        words[5] = 1 << 9;
        assert_eq!(first_set_from(&words, 0), Some(3));
        assert_eq!(first_set_from(&words, 3), Some(3));
        assert_eq!(first_set_from(&words, 4), Some(5 * 64 + 9));
        assert_eq!(first_set_from(&words, 5 * 64 + 10), Some(3), "wraps");
        words[0] = 1 << 40;
        assert_eq!(first_set_from(&words, 5 * 64 + 10), Some(40));
        // Bits before the start in its own word are found last.
        words = [0; SLOT_WORDS];
        words[2] = 1 << 1;
        assert_eq!(first_set_from(&words, 2 * 64 + 5), Some(2 * 64 + 1));
    }

    #[test]
    fn a_grant_files_each_slot_under_its_base() {
        let grant = SlotGrant::of([(1, 0), (70, 2), (5, 9), (600, 0)]);
        assert!(grant.allows(1) && grant.allows(70) && grant.allows(5));
        assert!(!grant.allows(0) && !grant.allows(600));
        assert_eq!(grant.base_word(0, 0), 1 << 1);
        assert_eq!(grant.base_word(2, 1), 1 << 6);
        assert_eq!(grant.base_word(LEVELS - 1, 0), 1 << 5);
        let none = SlotGrant::default();
        assert!(none.allows(0) && none.allows(511));
        assert_eq!(none.base_word(0, 3), u64::MAX);
        assert_eq!(none.base_word(1, 3), 0);
    }

    #[test]
    fn rebuilt_state_puts_each_slot_in_its_level() {
        let mut flows = [0u32; MAX_SLOTS as usize];
        flows[1] = 1;
        flows[2] = 7;
        flows[600 % MAX_SLOTS as usize] = 0;
        let state = ReceiverSlots::rebuilt(70, &flows, 9);
        assert_eq!(state.slots, 70);
        assert_eq!(state.cursor, 9);
        assert_eq!(first_set_from(&state.levels[1], 0), Some(1));
        assert_eq!(first_set_from(&state.levels[LEVELS - 1], 0), Some(2));
        assert_eq!(first_set_from(&state.levels[0], 69), Some(69));
        assert_eq!(
            first_set_from(&state.levels[0], 70),
            Some(0),
            "none past the slots"
        );
        let set: u32 = state.levels.iter().flatten().map(|w| w.count_ones()).sum();
        assert_eq!(set, 70, "each slot in exactly one level");
    }
}
