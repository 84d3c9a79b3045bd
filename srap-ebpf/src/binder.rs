//! The port binder: on `connect()` of a steered workload's TCP socket, bind a
//! source port that the receiver's RSS puts on its least-occupied CPU.
//!
//! The tables and the arithmetic are described in `srap_common::binder`. Every
//! path returns 1 ("allow"): when anything is missing or fails, the socket is
//! left as it was and the kernel picks the port, so SRAP never fails a
//! connect. Each outcome is counted in `SRAP_STATS`.

use core::{
    ffi::c_void,
    intrinsics::{AtomicOrdering, atomic_xadd},
};

use aya_ebpf::{
    helpers::{bpf_bind, bpf_get_socket_cookie, bpf_setsockopt},
    macros::{cgroup_sock, cgroup_sock_addr, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::{SockAddrContext, SockContext},
};
use srap_common::binder::{
    BinderConfig, DestKey, DestValue, FAMILY_INET, FAMILY_INET6, MAX_BIND_ATTEMPTS, MAX_DESTS,
    MAX_RECEIVERS, MAX_SLOTS, MAX_TABLES, MAX_VALUES, SOCKETS_MAX_ENTRIES, SlotEntries, SocketSlot,
    SteerTable, ValuePorts, outcome,
};

#[map]
static SRAP_DESTS: HashMap<DestKey, DestValue> = HashMap::with_max_entries(MAX_DESTS, 0);
#[map]
static SRAP_TABLES: Array<SteerTable> = Array::with_max_entries(MAX_TABLES, 0);
#[map]
static SRAP_SLOTS: Array<SlotEntries> = Array::with_max_entries(MAX_TABLES * MAX_SLOTS, 0);
#[map]
static SRAP_VALUES: Array<ValuePorts> = Array::with_max_entries(MAX_TABLES * MAX_VALUES, 0);
#[map]
static SRAP_OCCUPANCY: Array<u64> = Array::with_max_entries(MAX_RECEIVERS * MAX_SLOTS, 0);
#[map]
static SRAP_CURSORS: Array<u64> = Array::with_max_entries(MAX_RECEIVERS, 0);
#[map]
static SRAP_SOCKETS: LruHashMap<u64, SocketSlot> =
    LruHashMap::with_max_entries(SOCKETS_MAX_ENTRIES, 0);
/// Slots being claimed right now (`receiver * MAX_SLOTS + slot`): a lock
/// held for a few instructions by one connect at a time.
#[map]
static SRAP_CLAIMS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_RECEIVERS * MAX_SLOTS, 0);
#[map]
static SRAP_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(outcome::COUNT, 0);
#[map]
static SRAP_CONFIG: Array<BinderConfig> = Array::with_max_entries(1, 0);

const SOCK_STREAM: u32 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const SOL_SOCKET: i32 = 1;
const SO_MAX_PACING_RATE: i32 = 47;
const EADDRINUSE: i64 = 98;
const EINVAL: i64 = 22;
/// `bpf_map_update_elem` flag: only if the key is absent.
const BPF_NOEXIST: u64 = 1;
/// Ports tried on one slot before moving to the next.
const ATTEMPTS_PER_SLOT: u32 = 4;
/// Times a connect looks for a free slot when others keep taking the one it
/// found.
const CLAIM_ATTEMPTS: u32 = 3;
/// Word 2 of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), as the kernel's
/// `user_ip6` holds it (network byte order).
const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

#[repr(C)]
struct SockaddrIn {
    family: u16,
    port_be: u16,
    addr: u32,
    zero: [u8; 8],
}

#[repr(C)]
struct SockaddrIn6 {
    family: u16,
    port_be: u16,
    flowinfo: u32,
    addr: [u32; 4],
    scope_id: u32,
}

#[cgroup_sock_addr(connect4)]
pub fn srap_connect4(ctx: SockAddrContext) -> i32 {
    count(steer(&ctx, FAMILY_INET));
    1
}

#[cgroup_sock_addr(connect6)]
pub fn srap_connect6(ctx: SockAddrContext) -> i32 {
    count(steer(&ctx, FAMILY_INET6));
    1
}

/// Frees the slot of a steered socket when it is closed.
#[cgroup_sock(sock_release)]
pub fn srap_sock_release(ctx: SockContext) -> i32 {
    // SAFETY: the context pointer is the kernel's socket.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock as *mut c_void) };
    // SAFETY: the value is copied out before the entry is removed.
    if let Some(held) = unsafe { SRAP_SOCKETS.get(cookie) }.copied() {
        let _ = SRAP_SOCKETS.remove(cookie);
        if let Some(flows) = occupancy(held.receiver, held.slot) {
            // SAFETY: valid, aligned map memory. Adding u64::MAX subtracts
            // one; the check keeps a lost race from wrapping below zero.
            unsafe {
                if *flows > 0 {
                    atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(flows, u64::MAX);
                }
            }
        }
        count(outcome::RELEASED);
    }
    1
}

fn count(what: u32) {
    if let Some(counter) = SRAP_STATS.get_ptr_mut(what) {
        // SAFETY: per-CPU slot, valid map memory.
        unsafe { *counter += 1 };
    }
}

/// The flow count of one receiver CPU slot (shared by all CPUs: update atomically).
fn occupancy(receiver: u32, slot: u32) -> Option<*mut u64> {
    if receiver >= MAX_RECEIVERS || slot >= MAX_SLOTS {
        return None;
    }
    SRAP_OCCUPANCY.get_ptr_mut(receiver * MAX_SLOTS + slot)
}

/// Binds a steered port if the destination is steered; returns the outcome.
/// Inlined so each program keeps only its own family's path.
#[inline(always)]
fn steer(ctx: &SockAddrContext, family: u32) -> u32 {
    let sa = ctx.sock_addr;
    // Context fields are read one by one at fixed offsets (volatile keeps the
    // compiler from deriving one field's address from another's, which the
    // kernel's verifier refuses for context pointers).
    // SAFETY: the kernel passes a valid bpf_sock_addr.
    let field = |ptr: *const u32| unsafe { core::ptr::read_volatile(ptr) };
    // SAFETY: field addresses within the context, not dereferenced here.
    let (sock_type, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).user_port),
        )
    };
    if sock_type != SOCK_STREAM {
        return outcome::MISS;
    }
    // user_port holds the port in network byte order in its low 16 bits.
    let dport = u16::from_be(user_port as u16);
    // SAFETY: as above.
    let addr = unsafe {
        if family == FAMILY_INET {
            [field(&raw const (*sa).user_ip4), 0, 0, 0]
        } else {
            [
                field(&raw const (*sa).user_ip6[0]),
                field(&raw const (*sa).user_ip6[1]),
                field(&raw const (*sa).user_ip6[2]),
                field(&raw const (*sa).user_ip6[3]),
            ]
        }
    };
    // A dual-stack AF_INET6 socket connecting to an IPv4 receiver (the JDK's
    // default): steer it with the receiver's IPv4 plan, bind `::ffff:src`.
    let mapped =
        family == FAMILY_INET6 && addr[0] == 0 && addr[1] == 0 && addr[2] == V4_MAPPED_WORD;
    let mut key = if mapped {
        DestKey {
            family: FAMILY_INET,
            port: u32::from(dport),
            addr: [addr[3], 0, 0, 0],
        }
    } else {
        DestKey {
            family,
            port: u32::from(dport),
            addr,
        }
    };
    // SAFETY: values are copied out at once.
    let dest = match unsafe { SRAP_DESTS.get(key) } {
        Some(dest) => *dest,
        None => {
            key.port = 0;
            match unsafe { SRAP_DESTS.get(key) } {
                Some(dest) => *dest,
                None => return outcome::MISS,
            }
        }
    };
    let Some(table) = SRAP_TABLES.get(dest.table) else {
        return outcome::ERROR;
    };
    let slots = table.slots;
    if slots == 0 || slots > MAX_SLOTS || dest.receiver >= MAX_RECEIVERS || dest.table >= MAX_TABLES
    {
        return outcome::ERROR;
    }
    let Some(cursor) = SRAP_CURSORS.get_ptr_mut(dest.receiver) else {
        return outcome::ERROR;
    };
    // SAFETY: valid map memory; a lost update only changes the rotation.
    let turn = unsafe {
        let turn = *cursor;
        *cursor = turn.wrapping_add(1);
        turn
    } as u32;
    let first = claim_slot(dest.receiver, slots, turn % slots);

    for attempt in 0..MAX_BIND_ATTEMPTS {
        let slot = (first + attempt / ATTEMPTS_PER_SLOT) % slots;
        let Some(port) = port_for(dest.table, table, slot, turn.wrapping_add(attempt), dport)
        else {
            continue;
        };
        let bound = if family == FAMILY_INET {
            let mut addr = SockaddrIn {
                family: AF_INET,
                port_be: port.to_be(),
                addr: table.src_addr[0],
                zero: [0; 8],
            };
            // SAFETY: a valid sockaddr_in of the size given.
            unsafe {
                bpf_bind(
                    ctx.sock_addr.cast(),
                    (&mut addr as *mut SockaddrIn).cast(),
                    size_of::<SockaddrIn>() as i32,
                )
            }
        } else {
            let mut addr = SockaddrIn6 {
                family: AF_INET6,
                port_be: port.to_be(),
                flowinfo: 0,
                addr: table.src_addr6,
                scope_id: 0,
            };
            // SAFETY: a valid sockaddr_in6 of the size given.
            unsafe {
                bpf_bind(
                    ctx.sock_addr.cast(),
                    (&mut addr as *mut SockaddrIn6).cast(),
                    size_of::<SockaddrIn6>() as i32,
                )
            }
        };
        match bound {
            0 => {
                hold(ctx, dest.receiver, first, slot);
                pace(ctx);
                return if attempt == 0 {
                    outcome::STEERED
                } else {
                    outcome::RETRIED
                };
            }
            e if e == -EADDRINUSE => continue,
            // The socket is bound already: the application chose its port.
            e if e == -EINVAL => {
                add_flows(dest.receiver, first, u64::MAX);
                return outcome::APP_BOUND;
            }
            _ => {
                add_flows(dest.receiver, first, u64::MAX);
                return outcome::ERROR;
            }
        }
    }
    add_flows(dest.receiver, first, u64::MAX);
    outcome::PORT_IN_USE
}

/// Claims the least-occupied slot for one new flow. The slot is locked for
/// the moment between re-reading its count and adding the flow (an entry
/// inserted with `BPF_NOEXIST`: one connect at a time gets it); a connect
/// that finds it locked, or finds the count risen since it chose, looks
/// again, a bounded number of times. So two connects at the same moment
/// never share a slot while a free one exists. (BPF v1 cannot read the
/// result of an atomic add, hence the lock.)
fn claim_slot(receiver: u32, slots: u32, start: u32) -> u32 {
    let mut slot = start;
    for _ in 0..CLAIM_ATTEMPTS {
        let (best, seen) = least_occupied(receiver, slots, start);
        slot = best;
        let Some(flows) = occupancy(receiver, best) else {
            return best;
        };
        let lock = receiver * MAX_SLOTS + best;
        if SRAP_CLAIMS.insert(lock, 1, BPF_NOEXIST).is_err() {
            continue;
        }
        // SAFETY: valid map memory, read under the slot's lock.
        let now = unsafe { core::ptr::read_volatile(flows) };
        let free = now <= seen;
        if free {
            add_flows(receiver, best, 1);
        }
        let _ = SRAP_CLAIMS.remove(lock);
        if free {
            return best;
        }
    }
    // Still contended: take the last choice anyway (counted, so freed later).
    add_flows(receiver, slot, 1);
    slot
}

/// Adds `delta` (`u64::MAX`: minus one) to a slot's flow count.
fn add_flows(receiver: u32, slot: u32, delta: u64) {
    if let Some(flows) = occupancy(receiver, slot) {
        // SAFETY: valid, aligned map memory.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(flows, delta) };
    }
}

/// The slot with the fewest flows and that count, searching from `start` so
/// ties rotate.
fn least_occupied(receiver: u32, slots: u32, start: u32) -> (u32, u64) {
    let (mut best, mut best_flows) = (start, u64::MAX);
    for i in 0..MAX_SLOTS {
        if i >= slots {
            break;
        }
        let slot = (start + i) % slots;
        // SAFETY: valid map memory; a stale read only skews one choice.
        let flows = occupancy(receiver, slot).map_or(u64::MAX, |o| unsafe { *o });
        if flows < best_flows {
            best = slot;
            best_flows = flows;
        }
    }
    (best, best_flows)
}

/// A port of `slot` for destination port `dport`; `turn` picks which.
fn port_for(table_index: u32, table: &SteerTable, slot: u32, turn: u32, dport: u16) -> Option<u16> {
    let entries = SRAP_SLOTS.get(table_index * MAX_SLOTS + slot)?;
    if entries.count == 0 {
        return None;
    }
    let entry = *entries.entries.get((turn % entries.count) as usize)?;
    let value = table.value_for(entry, dport);
    let ports = SRAP_VALUES.get(table_index * MAX_VALUES + value)?;
    if ports.count == 0 {
        return None;
    }
    ports
        .ports
        .get(((turn / entries.count) % ports.count) as usize)
        .copied()
}

/// Remembers the socket's slot so closing frees it; moves the count from the
/// `claimed` slot when the port came from the next one.
fn hold(ctx: &SockAddrContext, receiver: u32, claimed: u32, slot: u32) {
    if slot != claimed {
        add_flows(receiver, claimed, u64::MAX);
        add_flows(receiver, slot, 1);
    }
    // SAFETY: the context pointer is the kernel's.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    let _ = SRAP_SOCKETS.insert(cookie, SocketSlot { receiver, slot }, 0);
}

/// Applies the configured pacing rate, if any; failure only loses pacing.
fn pace(ctx: &SockAddrContext) {
    let Some(config) = SRAP_CONFIG.get(0) else {
        return;
    };
    if config.pacing_rate == 0 {
        return;
    }
    // The kernel takes an int here: rates above 4 GB/s (34 Gbit/s) saturate.
    let mut rate = config.pacing_rate.min(u64::from(u32::MAX)) as u32;
    // SAFETY: a valid u32 of the size given.
    let _ = unsafe {
        bpf_setsockopt(
            ctx.sock_addr.cast(),
            SOL_SOCKET,
            SO_MAX_PACING_RATE,
            (&mut rate as *mut u32).cast(),
            size_of::<u32>() as i32,
        )
    };
}
