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
    ptr::{addr_of_mut, read_volatile},
};

use aya_ebpf::{
    bindings::bpf_sock,
    helpers::{bpf_bind, bpf_get_socket_cookie, bpf_setsockopt},
    macros::{cgroup_sock, cgroup_sock_addr, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::{SockAddrContext, SockContext},
};
use srap_common::binder::{
    CLAIMS_MAX_ENTRIES, DestKey, DestValue, LEVELS, LayoutRow, MAX_BIND_ATTEMPTS, MAX_SLOTS,
    MAX_VALUES, ReceiverSlots, SLOT_WORDS, SOCKETS_MAX_ENTRIES, SlotGrant, SocketSlot, TableRow,
    level_of, outcome,
};
use srap_common::family::Family;

/// The eBPF-side expansion of `srap_common::binder_pinned_maps!`: one
/// `#[map]` static per pinned map, typed and sized from that one list.
macro_rules! declare_maps {
    ($($(#[$doc:meta])* $constant:ident = $name:ident: $kind:ident<$key:ty, $value:ty>
        [$entries:expr, $flags:expr];)*) => {
        $($(#[$doc])* #[map]
        static $name: declare_maps!(@type $kind, $key, $value) =
            $kind::with_max_entries($entries, $flags);)*
    };
    (@type Array, $key:ty, $value:ty) => { Array<$value> };
    (@type PerCpuArray, $key:ty, $value:ty) => { PerCpuArray<$value> };
    (@type HashMap, $key:ty, $value:ty) => { HashMap<$key, $value> };
    (@type LruHashMap, $key:ty, $value:ty) => { LruHashMap<$key, $value> };
}

srap_common::binder_pinned_maps!(declare_maps);

/// Slots being claimed or freed right now (`receiver * MAX_SLOTS + slot`):
/// a lock held for a few instructions by one hook at a time.
#[map]
static SRAP_CLAIMS: HashMap<u32, u32> = HashMap::with_max_entries(CLAIMS_MAX_ENTRIES, 0);
/// TCP sockets of the cgroup bound with port 0 (`bind(addr, 0)`): the
/// kernel picked their port at bind time. Not removed on close (cookies are
/// never reused; the LRU ages entries out), which keeps the release hook of
/// every other socket one lookup shorter.
#[map]
static SRAP_BOUND: LruHashMap<u64, u32> = LruHashMap::with_max_entries(SOCKETS_MAX_ENTRIES, 0);

const SOCK_STREAM: u32 = 1;
const SOL_SOCKET: i32 = 1;
const SO_MAX_PACING_RATE: i32 = 47;
const EADDRINUSE: i64 = 98;
/// `bpf_map_update_elem` flag: only if the key is absent.
const BPF_NOEXIST: u64 = 1;
/// Times a connect looks for a free slot when others keep taking the one it
/// found.
const CLAIM_ATTEMPTS: u32 = 3;
/// Times a closing socket tries its slot's lock before freeing the flow
/// without updating the level bitmaps (the next claim repairs them).
const RELEASE_ATTEMPTS: u32 = 4;
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
    count(steer(&ctx, Family::Inet));
    1
}

#[cgroup_sock_addr(connect6)]
pub fn srap_connect6(ctx: SockAddrContext) -> i32 {
    count(steer(&ctx, Family::Inet6));
    1
}

#[cgroup_sock_addr(bind4)]
pub fn srap_bind4(ctx: SockAddrContext) -> i32 {
    note_port_zero_bind(&ctx);
    1
}

#[cgroup_sock_addr(bind6)]
pub fn srap_bind6(ctx: SockAddrContext) -> i32 {
    note_port_zero_bind(&ctx);
    1
}

/// Frees the slot of a steered socket when it is closed.
#[cgroup_sock(sock_release)]
pub fn srap_sock_release(ctx: SockContext) -> i32 {
    // SAFETY: the context pointer is the kernel's socket.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock.cast::<c_void>()) };
    // SAFETY: the value is copied out before the entry is removed.
    if let Some(held) = unsafe { SRAP_SOCKETS.get(cookie) }.copied() {
        let _ = SRAP_SOCKETS.remove(cookie);
        release_slot(held.receiver, held.slot);
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

/// Reads one context field (volatile keeps the compiler from deriving one
/// field's address from another's, which the kernel's verifier refuses for
/// context pointers).
#[inline(always)]
fn field(ptr: *const u32) -> u32 {
    // SAFETY: callers pass addresses of fields of a kernel context.
    unsafe { read_volatile(ptr) }
}

/// Records a TCP socket the application binds with port 0: the kernel
/// chooses its port now, before any destination is known, so its connect
/// is counted as [`outcome::PORT_AT_BIND`], not as an application's port.
#[inline(always)]
fn note_port_zero_bind(ctx: &SockAddrContext) {
    let sa = ctx.sock_addr;
    // SAFETY: field addresses within the context.
    let (sock_type, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).user_port),
        )
    };
    if sock_type != SOCK_STREAM || user_port != 0 {
        return;
    }
    // SAFETY: the context pointer is the kernel's.
    let cookie = unsafe { bpf_get_socket_cookie(sa.cast()) };
    let _ = SRAP_BOUND.insert(cookie, 1, 0);
}

/// The socket's bound source address (zero: none) and port, in the key's
/// form: a v4-mapped source of a dual-stack socket toward an IPv4 receiver
/// becomes its IPv4 address.
#[inline(always)]
fn bound_source(ctx: &SockAddrContext, family: Family, mapped: bool) -> ([u32; 4], u32) {
    // SAFETY: `sk` of a sock_addr context is the kernel's socket, never null.
    let sk: *mut bpf_sock =
        unsafe { read_volatile(&raw const (*ctx.sock_addr).__bindgen_anon_1.sk) };
    // SAFETY: field addresses within the kernel's bpf_sock.
    unsafe {
        let port = field(&raw const (*sk).src_port);
        if family == Family::Inet {
            return ([field(&raw const (*sk).src_ip4), 0, 0, 0], port);
        }
        let words = [
            field(&raw const (*sk).src_ip6[0]),
            field(&raw const (*sk).src_ip6[1]),
            field(&raw const (*sk).src_ip6[2]),
            field(&raw const (*sk).src_ip6[3]),
        ];
        if mapped {
            // `::ffff:a.b.c.d` or `::` (unbound): its IPv4 word, or zero.
            ([words[3], 0, 0, 0], port)
        } else {
            (words, port)
        }
    }
}

/// The destination's steering entry: for its port, else for any port.
#[inline(always)]
fn dest_of(mut key: DestKey) -> Option<DestValue> {
    // SAFETY: values are copied out at once.
    unsafe {
        if let Some(dest) = SRAP_DESTS.get(key) {
            return Some(*dest);
        }
        key.port = 0;
        SRAP_DESTS.get(key).copied()
    }
}

/// Binds a steered port if the destination is steered; returns the outcome.
/// Inlined so each program keeps only its own family's path.
#[inline(always)]
fn steer(ctx: &SockAddrContext, family: Family) -> u32 {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel passes a valid bpf_sock_addr.
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
        if family == Family::Inet {
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
        family == Family::Inet6 && addr[0] == 0 && addr[1] == 0 && addr[2] == V4_MAPPED_WORD;
    let (src, sport) = bound_source(ctx, family, mapped);
    let key = if mapped {
        DestKey {
            family: Family::Inet.as_u32(),
            port: u32::from(dport),
            addr: [addr[3], 0, 0, 0],
            src,
        }
    } else {
        DestKey {
            family: family.as_u32(),
            port: u32::from(dport),
            addr,
            src,
        }
    };
    let bound_addr = src != [0; 4];
    let Some(dest) = dest_of(key) else {
        if bound_addr && dest_of(DestKey { src: [0; 4], ..key }).is_some() {
            return outcome::SOURCE_UNPLANNED;
        }
        return outcome::MISS;
    };
    if sport != 0 {
        return bound_port_outcome(ctx);
    }
    let result = bind_steered(ctx, family, &dest, dport);
    if bound_addr && (result == outcome::STEERED || result == outcome::RETRIED) {
        count(outcome::SOURCE_KEPT);
    }
    result
}

/// Why a socket already has a port: `bind(addr, 0)`, or the application's
/// own choice.
fn bound_port_outcome(ctx: &SockAddrContext) -> u32 {
    // SAFETY: the context pointer is the kernel's.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // SAFETY: only the presence is read.
    if unsafe { SRAP_BOUND.get(cookie) }.is_some() {
        outcome::PORT_AT_BIND
    } else {
        outcome::APP_BOUND
    }
}

/// Claims a slot of the destination's receiver and binds one of its ports.
#[inline(always)]
fn bind_steered(ctx: &SockAddrContext, family: Family, dest: &DestValue, dport: u16) -> u32 {
    let Some(table) = SRAP_TABLES.get(dest.table) else {
        return outcome::ERROR;
    };
    let Some(layout) = SRAP_LAYOUTS.get(table.layout) else {
        return outcome::ERROR;
    };
    let Some(state) = SRAP_RECEIVERS.get_ptr_mut(dest.receiver) else {
        return outcome::ERROR;
    };
    let slots = layout.slots;
    if slots == 0 || slots > MAX_SLOTS {
        return outcome::ERROR;
    }
    let Some(grant) = SRAP_GRANTS.get(dest.receiver) else {
        return outcome::ERROR;
    };
    let Some((slot, turn)) = claim_slot(state, grant, dest.receiver) else {
        return outcome::ERROR;
    };
    // Past this layout's slots only while a re-plan shrinks the receiver.
    let slot = slot % slots;
    for attempt in 0..MAX_BIND_ATTEMPTS {
        let Some(port) = port_for(layout, table.base, slot, turn.wrapping_add(attempt), dport)
        else {
            continue;
        };
        match bind_port(ctx, family, table, port) {
            0 => {
                hold(ctx, dest.receiver, slot);
                pace(ctx);
                return if attempt == 0 {
                    outcome::STEERED
                } else {
                    outcome::RETRIED
                };
            }
            e if e == -EADDRINUSE => continue,
            _ => {
                release_slot(dest.receiver, slot);
                return outcome::ERROR;
            }
        }
    }
    release_slot(dest.receiver, slot);
    outcome::PORT_IN_USE
}

/// `bpf_bind()` to the table's source address (the route's, or the one the
/// application bound) and `port`.
#[inline(always)]
fn bind_port(ctx: &SockAddrContext, family: Family, table: &TableRow, port: u16) -> i64 {
    if family == Family::Inet {
        let mut addr = SockaddrIn {
            family: Family::Inet.as_u16(),
            port_be: port.to_be(),
            addr: table.src_addr[0],
            zero: [0; 8],
        };
        // SAFETY: a valid sockaddr_in of the size given.
        unsafe {
            bpf_bind(
                ctx.sock_addr.cast(),
                core::ptr::from_mut(&mut addr).cast(),
                size_of::<SockaddrIn>() as i32,
            )
        }
    } else {
        let mut addr = SockaddrIn6 {
            family: Family::Inet6.as_u16(),
            port_be: port.to_be(),
            flowinfo: 0,
            addr: table.src_addr6,
            scope_id: 0,
        };
        // SAFETY: a valid sockaddr_in6 of the size given.
        unsafe {
            bpf_bind(
                ctx.sock_addr.cast(),
                core::ptr::from_mut(&mut addr).cast(),
                size_of::<SockaddrIn6>() as i32,
            )
        }
    }
}

/// Claims the least-occupied slot of a receiver for one new flow; returns
/// it and the rotation turn. The slot is found in the lowest non-empty
/// level bitmap, from a rotating start, then locked (an entry inserted with
/// `BPF_NOEXIST`: one hook at a time gets it); under the lock its count is
/// checked against what the bitmap said and the flow added. A claim that
/// finds the lock taken or the count changed looks again, a bounded number
/// of times, so two connects at the same moment never share a slot while a
/// free one exists. (BPF v1 cannot read the result of an atomic add, hence
/// the lock.)
///
/// Only slots of the receiver agent's grant are candidates, each at the
/// level of its own flows plus the flows other senders hold there.
fn claim_slot(state: *mut ReceiverSlots, grant: &SlotGrant, receiver: u32) -> Option<(u32, u32)> {
    // SAFETY: valid map memory; a lost cursor update only changes the rotation.
    let (slots, turn) = unsafe {
        let slots = read_volatile(&raw const (*state).slots);
        let turn = read_volatile(&raw const (*state).cursor);
        (*state).cursor = turn.wrapping_add(1);
        (slots, turn as u32)
    };
    if slots == 0 || slots > MAX_SLOTS {
        return None;
    }
    for attempt in 0..CLAIM_ATTEMPTS {
        let start = turn.wrapping_add(attempt) % slots;
        if let Some(slot) = try_claim(state, grant, receiver, slots, start) {
            return Some((slot, turn));
        }
    }
    // Still contended: take the rotation's granted slot (its bits are
    // repaired by the next claim that finds them wrong).
    let start = granted_from(grant, turn % slots, slots);
    add_flows(state, start, 1);
    Some((start, turn))
}

/// The first granted slot at or after `start` (below `slots`); `start`
/// itself when none is.
#[inline(always)]
fn granted_from(grant: &SlotGrant, start: u32, slots: u32) -> u32 {
    let granted = |w: usize| {
        let mut word = 0;
        for b in 0..LEVELS {
            word |= grant.base_word(b, w);
        }
        word
    };
    match first_set_where(masked(start, MAX_SLOTS) as u32, granted) {
        Some(slot) if slot < slots => slot,
        _ => start,
    }
}

/// One claim attempt from `start`; `None` when the slot found was taken or
/// changed meanwhile.
#[inline(always)]
fn try_claim(
    state: *mut ReceiverSlots,
    grant: &SlotGrant,
    receiver: u32,
    slots: u32,
    start: u32,
) -> Option<u32> {
    let (found, level) = lowest_level_slot(state, grant, start);
    // Nothing granted in the levels searched (every granted slot fuller
    // than the last level, or bits past the slots of a shrunk receiver):
    // the first granted slot from the start.
    let slot = if found < slots {
        found
    } else {
        granted_from(grant, start, slots)
    };
    let seen = flows_of(state, slot)?;
    let level = if found < slots { level } else { level_of(seen) };
    let lock = receiver * MAX_SLOTS + slot;
    SRAP_CLAIMS.insert(lock, 1, BPF_NOEXIST).ok()?;
    let now = flows_of(state, slot).unwrap_or(seen);
    let claimed = now == seen && level_of(now) == level;
    if claimed {
        add_flows(state, slot, 1);
        move_bit(state, slot, level, level_of(now + 1));
    } else {
        move_bit(state, slot, level, level_of(now));
    }
    let _ = SRAP_CLAIMS.remove(lock);
    claimed.then_some(slot)
}

/// The first granted slot, from `start`, of the lowest non-empty effective
/// level (own flows plus base), and its own level; `MAX_SLOTS` when none.
#[inline(always)]
fn lowest_level_slot(state: *mut ReceiverSlots, grant: &SlotGrant, start: u32) -> (u32, usize) {
    for eff in 0..LEVELS {
        let effective = |w: usize| {
            let mut word = 0;
            for base in 0..=eff {
                // SAFETY: valid map memory; a word changing meanwhile only
                // skews this choice, which the lock then checks.
                let own = unsafe { read_volatile(level_word(state, eff - base, w as u32 * 64)) };
                word |= own & grant.base_word(base, w);
            }
            word
        };
        if let Some(slot) = first_set_where(masked(start, MAX_SLOTS) as u32, effective) {
            return (slot, eff.saturating_sub(base_of(grant, slot)));
        }
    }
    (MAX_SLOTS, 0)
}

/// The first slot set, at or after `start` and wrapping around, in the
/// bitmap whose word `w` is `word(w)`: `first_set_from` without the array
/// on the stack (the kernel allows the hook 512 bytes of stack in all).
#[inline(always)]
fn first_set_where(start: u32, word: impl Fn(usize) -> u64) -> Option<u32> {
    let (first, shift) = (start / 64, start % 64);
    let mut i = 0;
    while i <= SLOT_WORDS as u32 {
        let w = (first + i) % SLOT_WORDS as u32;
        let mut bits = word(w as usize);
        if i == 0 {
            bits &= u64::MAX << shift;
        } else if i == SLOT_WORDS as u32 {
            bits &= !(u64::MAX << shift);
        }
        if bits != 0 {
            return Some(w * 64 + srap_common::binder::lowest_bit(bits));
        }
        i += 1;
    }
    None
}

/// The base level of a granted slot (0 when it is in none).
#[inline(always)]
fn base_of(grant: &SlotGrant, slot: u32) -> usize {
    let w = masked(slot / 64, SLOT_WORDS as u32);
    let bit = 1u64 << (slot % 64);
    let mut base = 0;
    for b in 1..LEVELS {
        base |= b & (usize::from(grant.base_word(b, w) & bit != 0)).wrapping_neg();
    }
    base
}

/// `i` masked below `n`, a power of two, on the very value used:
/// `black_box` keeps the compiler from dropping the mask as proven by a
/// check elsewhere (made on a register the kernel's verifier does not
/// connect to this one). Callers check `i < n` for meaning first.
#[inline(always)]
fn masked(i: u32, n: u32) -> usize {
    (core::hint::black_box(i) & (n - 1)) as usize
}

/// The open flows of `slot`.
#[inline(always)]
fn flows_of(state: *mut ReceiverSlots, slot: u32) -> Option<u32> {
    if slot >= MAX_SLOTS {
        return None;
    }
    // SAFETY: in bounds of valid map memory.
    Some(unsafe { read_volatile(&raw const (*state).flows[masked(slot, MAX_SLOTS)]) })
}

/// Adds `delta` (`u32::MAX`: minus one) to a slot's flow count.
#[inline(always)]
fn add_flows(state: *mut ReceiverSlots, slot: u32, delta: u32) {
    if slot >= MAX_SLOTS {
        return;
    }
    // SAFETY: in bounds of valid, aligned map memory.
    unsafe {
        let flows = addr_of_mut!((*state).flows[masked(slot, MAX_SLOTS)]);
        atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(flows, delta);
    }
}

/// The bitmap word of `slot` in `level`.
#[inline(always)]
fn level_word(state: *mut ReceiverSlots, level: usize, slot: u32) -> *mut u64 {
    const WORDS: u32 = (LEVELS * SLOT_WORDS) as u32;
    let index = masked(level as u32 * SLOT_WORDS as u32 + slot / 64, WORDS);
    // SAFETY: `levels` is WORDS contiguous u64s and `index` is below WORDS.
    unsafe { addr_of_mut!((*state).levels).cast::<u64>().add(index) }
}

/// Moves `slot`'s bit from level `from` to level `to`. Only the holder of
/// the slot's lock changes its bits, so reading a bit then adding to its
/// word is safe; the adds never carry into other slots' bits.
#[inline(always)]
fn move_bit(state: *mut ReceiverSlots, slot: u32, from: usize, to: usize) {
    if from == to || from >= LEVELS || to >= LEVELS || slot >= MAX_SLOTS {
        return;
    }
    let bit = 1u64 << (slot % 64);
    // SAFETY: valid, aligned map memory.
    unsafe {
        let from_word = level_word(state, from, slot);
        if read_volatile(from_word) & bit != 0 {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(from_word, bit.wrapping_neg());
        }
        let to_word = level_word(state, to, slot);
        if read_volatile(to_word) & bit == 0 {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(to_word, bit);
        }
    }
}

/// Frees one flow of a slot: under the slot's lock when it can be had, so
/// the level bitmaps follow; else the count alone (the next claim that
/// finds the slot's bit wrong repairs it).
fn release_slot(receiver: u32, slot: u32) {
    let Some(state) = SRAP_RECEIVERS.get_ptr_mut(receiver) else {
        return;
    };
    let lock = receiver.wrapping_mul(MAX_SLOTS).wrapping_add(slot);
    for _ in 0..RELEASE_ATTEMPTS {
        if SRAP_CLAIMS.insert(lock, 1, BPF_NOEXIST).is_err() {
            continue;
        }
        if let Some(flows) = flows_of(state, slot).filter(|f| *f > 0) {
            add_flows(state, slot, u32::MAX);
            // SAFETY: valid map memory.
            let slots = unsafe { read_volatile(&raw const (*state).slots) };
            if slot < slots {
                move_bit(state, slot, level_of(flows), level_of(flows - 1));
            }
        }
        let _ = SRAP_CLAIMS.remove(lock);
        return;
    }
    if flows_of(state, slot).is_some_and(|f| f > 0) {
        add_flows(state, slot, u32::MAX);
    }
}

/// A port of `slot` for destination port `dport`; `turn` picks which.
#[inline(always)]
fn port_for(layout: &LayoutRow, base: u32, slot: u32, turn: u32, dport: u16) -> Option<u16> {
    let entries = SRAP_SLOTS.get(layout.slot_base.wrapping_add(slot))?;
    if entries.count == 0 {
        return None;
    }
    let entry = *entries.entries.get((turn % entries.count) as usize)?;
    let value = layout.value_for(base, u32::from(entry), dport);
    if value >= layout.values || value >= MAX_VALUES {
        return None;
    }
    let ports = SRAP_VALUES.get(layout.value_base.wrapping_add(value))?;
    if ports.count == 0 {
        return None;
    }
    ports
        .ports
        .get(((turn / entries.count) % ports.count) as usize)
        .copied()
}

/// Remembers the socket's slot so closing frees it.
fn hold(ctx: &SockAddrContext, receiver: u32, slot: u32) {
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
            core::ptr::from_mut(&mut rate).cast(),
            size_of::<u32>() as i32,
        )
    };
}
