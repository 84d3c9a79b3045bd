//! The port binder's maps, and the one piece of arithmetic the `connect()`
//! hook and user space must agree on.
//!
//! A *steering table* describes one (sender source address, receiver
//! address[, destination port]) pair. Toeplitz is linear, so the receiver's
//! indirection index of a flow is
//! `index = base ⊕ S(source port) ⊕ D(destination port)` (low k bits), and
//! the table holds `base`, `D` as two byte tables, for every CPU slot a few
//! indirection entries that land on that CPU, and for every value `v` of
//! `S(port)` a few source ports with that value. The hook picks entry `t` of
//! the least-occupied slot and binds a port of value `t ⊕ base ⊕ D(dport)`:
//! any destination port, no per-port state, no scan.
//!
//! Where the index is not linear in both ports (`sym-or-xor`, a table size
//! that is not a power of two), a table is built for one destination port:
//! `base` and `D` are zero, slot `s` has the single entry `s`, and value `s`
//! lists ports that land on slot `s`'s CPU. The hook runs the same code.

/// CPU slots (distinct receiver CPUs) one steering table can hold.
pub const MAX_SLOTS: u32 = 128;
/// Indirection entries kept per slot (any entry of the slot's CPU will do).
pub const ENTRIES_PER_SLOT: usize = 16;
/// Values of `S(port)` per table: 2^k for tables of up to 2048 entries.
pub const MAX_VALUES: u32 = 2048;
/// Source ports kept per value: the first choice and its fallbacks.
pub const PORTS_PER_VALUE: usize = 8;
/// Steering tables the binder holds.
pub const MAX_TABLES: u32 = 64;
/// Receivers whose CPU occupancy the binder tracks.
pub const MAX_RECEIVERS: u32 = 64;
/// Steered destinations (receiver address and port, or any port).
pub const MAX_DESTS: u32 = 1024;
/// `bpf_bind()` attempts per connect before the kernel is left to choose.
pub const MAX_BIND_ATTEMPTS: u32 = 12;

/// Hash: [`DestKey`] → [`DestValue`].
pub const DESTS_MAP: &str = "SRAP_DESTS";
/// Array of [`SteerTable`], index = table.
pub const TABLES_MAP: &str = "SRAP_TABLES";
/// Array of [`SlotEntries`], index `table * MAX_SLOTS + slot`.
pub const SLOTS_MAP: &str = "SRAP_SLOTS";
/// Array of [`ValuePorts`], index `table * MAX_VALUES + value`.
pub const VALUES_MAP: &str = "SRAP_VALUES";
/// `u64` flows per (receiver, slot), index `receiver * MAX_SLOTS + slot`.
pub const OCCUPANCY_MAP: &str = "SRAP_OCCUPANCY";
/// `u64` per receiver: rotates ties between slots and the entries and ports tried.
pub const CURSORS_MAP: &str = "SRAP_CURSORS";
/// LRU hash: socket cookie → [`SocketSlot`].
pub const SOCKETS_MAP: &str = "SRAP_SOCKETS";
/// Per-CPU array of `u64`, index = [`outcome`].
pub const STATS_MAP: &str = "SRAP_STATS";
/// Array of one [`BinderConfig`].
pub const CONFIG_MAP: &str = "SRAP_CONFIG";

pub const CONNECT4_PROGRAM: &str = "srap_connect4";
pub const CONNECT6_PROGRAM: &str = "srap_connect6";
pub const RELEASE_PROGRAM: &str = "srap_sock_release";

/// Capacity of the socket → slot map that lets a closing socket free its slot.
pub const SOCKETS_MAX_ENTRIES: u32 = 65_536;

/// Outcomes of the `connect()` hook, as indexes into [`STATS_MAP`].
pub mod outcome {
    /// Bound on the first attempt.
    pub const STEERED: u32 = 0;
    /// Bound after one or more ports were in use.
    pub const RETRIED: u32 = 1;
    /// Every attempt found its port in use: the kernel chose.
    pub const PORT_IN_USE: u32 = 2;
    /// The application had bound the socket itself: left alone.
    pub const APP_BOUND: u32 = 3;
    /// The destination is not steered.
    pub const MISS: u32 = 4;
    /// A map or helper failed: the kernel chose.
    pub const ERROR: u32 = 5;
    /// A steered socket closed and freed its slot.
    pub const RELEASED: u32 = 6;
    pub const COUNT: u32 = 7;
    pub const NAMES: [&str; COUNT as usize] = [
        "steered",
        "retried",
        "port_in_use",
        "app_bound",
        "miss",
        "error",
        "released",
    ];
}

/// `DestKey::family` values (`AF_INET`, `AF_INET6`).
pub const FAMILY_INET: u32 = 2;
pub const FAMILY_INET6: u32 = 10;

/// A steered destination: receiver address and port (0: every port).
/// Addresses are the kernel's `user_ip4`/`user_ip6` words, network byte order;
/// an IPv4 address is word 0 and the rest are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DestKey {
    pub family: u32,
    /// Destination port, host byte order; 0 matches any port.
    pub port: u32,
    pub addr: [u32; 4],
}

/// Where a destination's steering data lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestValue {
    /// Index of the [`SteerTable`].
    pub table: u32,
    /// Receiver index: its CPU occupancy is shared by all its tables.
    pub receiver: u32,
}

/// The per-destination part of the linear decomposition.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteerTable {
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
    /// Slots in use (distinct receiver CPUs), at most [`MAX_SLOTS`].
    pub slots: u32,
    /// `D(dport)` = `dport_low[dport & 0xff] ^ dport_high[dport >> 8]`.
    pub dport_low: [u32; 256],
    pub dport_high: [u32; 256],
}

impl Default for SteerTable {
    fn default() -> Self {
        Self {
            src_addr: [0; 4],
            src_addr6: [0; 4],
            base: 0,
            slots: 0,
            dport_low: [0; 256],
            dport_high: [0; 256],
        }
    }
}

impl SteerTable {
    /// The value of `S(port)` that, with destination port `dport`, selects
    /// indirection entry `entry`. Shared by the hook and the tests.
    #[inline(always)]
    pub fn value_for(&self, entry: u32, dport: u16) -> u32 {
        let d =
            self.dport_low[usize::from(dport & 0xff)] ^ self.dport_high[usize::from(dport >> 8)];
        (entry ^ self.base ^ d) & (MAX_VALUES - 1)
    }
}

/// Indirection entries that land on one slot's CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEntries {
    /// The receiver CPU this slot stands for (for reports).
    pub cpu: u32,
    pub count: u32,
    pub entries: [u32; ENTRIES_PER_SLOT],
}

/// Source ports whose `S(port)` is one value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValuePorts {
    pub count: u32,
    pub ports: [u16; PORTS_PER_VALUE],
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
    unsafe impl aya::Pod for SteerTable {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SlotEntries {}
    // SAFETY: as above (4 + 8 × 2 = 20 bytes, no padding).
    unsafe impl aya::Pod for ValuePorts {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SocketSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for BinderConfig {}
}
