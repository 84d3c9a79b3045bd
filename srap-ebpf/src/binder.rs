//! The port binder: on `connect()` of a steered workload's TCP socket, bind a
//! source port that the receiver's RSS puts on its least-occupied CPU.
//!
//! The tables and the arithmetic are described in `srap_common::binder`. A
//! port is chosen by its 4-tuple, as the kernel's own `connect()` does: any
//! port of the slot whose tuple toward this destination is free, shared
//! with every other destination (`SO_REUSEADDR`). The exact tuple is looked
//! up before the bind, because a bind that succeeds onto a tuple in use
//! would make the `connect()` itself fail.
//!
//! Every path returns 1 ("allow"): when anything is missing or fails, the
//! socket is left as it was and the kernel picks the port, so SRAP never
//! fails a connect. Each outcome is counted in `SRAP_STATS`.

use core::{
    ffi::c_void,
    intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd},
    ptr::{addr_of_mut, read_volatile},
};

use aya_ebpf::{
    bindings::{
        bpf_sock, bpf_sock_tuple, bpf_sock_tuple__bindgen_ty_1__bindgen_ty_1 as Tuple4,
        bpf_sock_tuple__bindgen_ty_1__bindgen_ty_2 as Tuple6,
    },
    helpers::{
        bpf_bind, bpf_get_socket_cookie, bpf_getsockopt, bpf_setsockopt,
        generated::{
            bpf_probe_read_kernel, bpf_sk_release, bpf_skc_lookup_tcp, bpf_skc_to_tcp_timewait_sock,
        },
    },
    macros::{cgroup_sock, cgroup_sock_addr, map},
    maps::{Array, HashMap, PerCpuArray},
    programs::{SockAddrContext, SockContext},
};
use srap_common::binder::{
    BinderSizes, CosetRow, DestKey, DestValue, JOINT_ATTEMPTS, JOINT_MEMBERS, JointRow, LEVELS,
    LOCAL_ROW, LayoutRow, MAX_BIND_ATTEMPTS, MAX_SLOTS, ReceiverSlots, SLOT_WORDS, SOCKET_PROBES,
    SlotGrant, SlotRow, SocketRow, SocketSlot, TableRow, level_of, outcome, slot_turn, slot_word,
    socket_home,
};
use srap_common::family::Family;

/// The eBPF-side expansion of `srap_common::binder_pinned_maps!`: one
/// `#[map]` static per pinned map, typed from that one list and declared
/// at the default sizes (the agent sets each map's size at load, from its
/// `--max-*` settings).
macro_rules! declare_maps {
    ($($(#[$doc:meta])* $constant:ident = $name:ident: $kind:ident<$key:ty, $value:ty>
        [$entries:path, $flags:expr];)*) => {
        $($(#[$doc])* #[map]
        static $name: declare_maps!(@type $kind, $key, $value) =
            $kind::with_max_entries($entries(&BinderSizes::DEFAULT), $flags);)*
    };
    (@type Array, $key:ty, $value:ty) => { Array<$value> };
    (@type PerCpuArray, $key:ty, $value:ty) => { PerCpuArray<$value> };
    (@type HashMap, $key:ty, $value:ty) => { HashMap<$key, $value> };
}

srap_common::binder_pinned_maps!(declare_maps);

/// Where [`tuple_holder`] builds its lookup tuple: one per CPU, not on the
/// stack. The kernel allows 512 bytes of stack along a call chain and
/// Linux 6.1 rounds every frame up to 32 bytes: with a 36-byte tuple (and
/// the `memset` subprogram zeroing it) on the stack, the chain hook →
/// `bind_jointly` → `tuple_holder` came to 544 and 6.1 refused the binder.
/// Not pinned: it holds nothing between runs, and a connect hook runs to
/// its end on one CPU.
#[map]
static SRAP_TUPLE_SCRATCH: PerCpuArray<bpf_sock_tuple> = PerCpuArray::with_max_entries(1, 0);

const SOCK_STREAM: u32 = 1;
const SOL_SOCKET: i32 = 1;
const SO_REUSEADDR: i32 = 2;
const SO_REUSEPORT: i32 = 15;
const SO_MAX_PACING_RATE: i32 = 47;
const EADDRINUSE: i64 = 98;
/// `bpf_sock.state` of a socket in TIME_WAIT and of a listening one.
const TCP_TIME_WAIT: u32 = 6;
const TCP_LISTEN: u32 = 10;
/// `BPF_F_CURRENT_NETNS`: look the tuple up in the socket's own namespace.
const CURRENT_NETNS: u64 = u64::MAX;
/// Times a connect looks for a free slot when others keep taking the one it
/// found.
const CLAIM_ATTEMPTS: u32 = 3;
/// Times a closing socket tries its slot's lock before freeing the flow
/// without updating the level bitmaps (the next claim repairs them).
const RELEASE_ATTEMPTS: u32 = 4;
/// Compare-and-exchange tries of one update of a slot word that others
/// keep changing.
const WORD_ATTEMPTS: u32 = 3;
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

/// Frees the slot of a steered socket when it is closed, and forgets it.
#[cgroup_sock(sock_release)]
pub fn srap_sock_release(ctx: SockContext) -> i32 {
    // SAFETY: the context pointer is the kernel's socket.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock.cast::<c_void>()) };
    let Some(held) = forget(cookie) else {
        return 1;
    };
    if held.receiver != SocketSlot::NONE {
        release_slot(held.receiver, held.slot);
        count(outcome::RELEASED);
    }
    if held.local != SocketSlot::NONE {
        release_slot(LOCAL_ROW, held.local);
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

/// The socket of a sock_addr context.
#[inline(always)]
fn sock_of(ctx: &SockAddrContext) -> *mut bpf_sock {
    // SAFETY: `sk` of a sock_addr context is the kernel's socket, never null.
    unsafe { read_volatile(&raw const (*ctx.sock_addr).__bindgen_anon_1.sk) }
}

/// The row of `cookie`'s `probe`-th place in the socket table of
/// `mask + 1` rows ([`socket_mask`]).
#[inline(always)]
fn socket_row(cookie: u64, probe: u32, mask: u32) -> Option<*mut SocketRow> {
    let index = socket_home(cookie, mask).wrapping_add(probe) & mask;
    SRAP_SOCKETS.get_ptr_mut(index)
}

/// The socket table's rows less one, as the agent sized it
/// (`--max-sockets`); 0 before the agent wrote its config (one row: a
/// record then finds its row taken sooner, nothing worse).
#[inline(always)]
fn socket_mask() -> u32 {
    SRAP_CONFIG.get(0).map_or(0, |config| config.socket_mask)
}

/// Records `held` for the socket `cookie`: the first free row of its places,
/// taken with one compare-and-exchange. False when all are taken.
#[inline(always)]
fn remember(cookie: u64, held: SocketSlot) -> bool {
    let mask = socket_mask();
    for probe in 0..SOCKET_PROBES {
        let Some(row) = socket_row(cookie, probe, mask) else {
            return false;
        };
        // SAFETY: valid, aligned map memory.
        let cookie_word = unsafe { addr_of_mut!((*row).cookie) };
        if exchange(cookie_word, 0, cookie) {
            // SAFETY: the row is this socket's now; only its own hooks
            // touch it until it is freed.
            unsafe { (*row).held = held };
            return true;
        }
    }
    false
}

/// The record of socket `cookie`, if any.
#[inline(always)]
fn recalled(cookie: u64) -> Option<(*mut SocketRow, SocketSlot)> {
    let mask = socket_mask();
    for probe in 0..SOCKET_PROBES {
        let row = socket_row(cookie, probe, mask)?;
        // SAFETY: valid map memory.
        if unsafe { read_volatile(&raw const (*row).cookie) } == cookie {
            // SAFETY: as above.
            return Some((row, unsafe { read_volatile(&raw const (*row).held) }));
        }
    }
    None
}

/// Takes the record of socket `cookie` out of the table.
#[inline(always)]
fn forget(cookie: u64) -> Option<SocketSlot> {
    let (row, held) = recalled(cookie)?;
    // SAFETY: valid, aligned map memory.
    exchange(unsafe { addr_of_mut!((*row).cookie) }, cookie, 0).then_some(held)
}

/// The socket's cookie: its key in `SRAP_SOCKETS`.
#[inline(always)]
fn cookie_of(ctx: &SockAddrContext) -> u64 {
    // SAFETY: the context pointer is the kernel's.
    unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) }
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
    let _ = remember(cookie_of(ctx), SocketSlot::BOUND_AT_BIND);
}

/// The socket's bound source address (zero: none) and port, in the key's
/// form: a v4-mapped source of a dual-stack socket toward an IPv4 receiver
/// becomes its IPv4 address.
#[inline(always)]
fn bound_source(ctx: &SockAddrContext, family: Family, mapped: bool) -> ([u32; 4], u32) {
    let sk = sock_of(ctx);
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

/// The destination's steering entry, in one lookup when every destination
/// port of the receiver is steered: the any-port key is looked up first,
/// and only a receiver steered on named ports (its any-port entry says
/// [`DestValue::BY_PORT`]) takes a second lookup, for the port.
#[inline(always)]
fn dest_of(key: DestKey) -> Option<DestValue> {
    let any = DestKey { port: 0, ..key };
    // SAFETY: values are copied out at once.
    let dest = unsafe { SRAP_DESTS.get(any) }.copied()?;
    if dest.table != DestValue::BY_PORT {
        return Some(dest);
    }
    if key.port == 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe { SRAP_DESTS.get(key) }.copied()
}

/// Where a steered connect goes: the receiver's address (the IPv4 one of a
/// v4-mapped destination), its port, and the family its tuple is looked up
/// in.
#[derive(Clone, Copy)]
struct Peer {
    addr: [u32; 4],
    port: u16,
    v4: bool,
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
    let peer = if mapped {
        Peer {
            addr: [addr[3], 0, 0, 0],
            port: dport,
            v4: true,
        }
    } else {
        Peer {
            addr,
            port: dport,
            v4: family == Family::Inet,
        }
    };
    let key = DestKey {
        family: if peer.v4 {
            Family::Inet.as_u32()
        } else {
            Family::Inet6.as_u32()
        },
        port: u32::from(dport),
        addr: peer.addr,
        src,
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
    let result = bind_steered(ctx, family, &dest, peer, bound_addr);
    if bound_addr && (result == outcome::STEERED || result == outcome::RETRIED) {
        count(outcome::SOURCE_KEPT);
    }
    result
}

/// Why a socket already has a port: `bind(addr, 0)`, or the application's
/// own choice.
fn bound_port_outcome(ctx: &SockAddrContext) -> u32 {
    if recalled(cookie_of(ctx)).is_some_and(|(_, held)| held == SocketSlot::BOUND_AT_BIND) {
        outcome::PORT_AT_BIND
    } else {
        outcome::APP_BOUND
    }
}

/// The maps' rows one steered connect works with.
struct Steering<'a> {
    table: &'a TableRow,
    layout: &'a LayoutRow,
    row: &'a SlotRow,
    word: *mut u64,
}

/// Claims a slot of the destination's receiver and binds a port of it whose
/// tuple is free. A failed bind clears the socket's address: when the
/// application had bound one and no port binds, it is bound again (port 0:
/// the address alone), so the kernel's port goes with the application's
/// address.
#[inline(always)]
fn bind_steered(
    ctx: &SockAddrContext,
    family: Family,
    dest: &DestValue,
    peer: Peer,
    bound_addr: bool,
) -> u32 {
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
    // Past this layout's slots only while a re-plan shrinks the receiver:
    // the ports of another slot, the claim's count kept where it was made.
    let rows = (
        SRAP_SLOTS.get(layout.slot_base.wrapping_add(slot % slots)),
        slot_word_of(dest.receiver, slot),
    );
    let (Some(row), Some(word)) = rows else {
        release_slot(dest.receiver, slot);
        return outcome::ERROR;
    };
    let steering = Steering {
        table,
        layout,
        row,
        word,
    };
    let (result, local) = match port_sharing(ctx) {
        Some(sharing) => bind_for_ends(ctx, family, dest, &steering, peer, turn, sharing),
        None => (outcome::ERROR, SocketSlot::NONE),
    };
    if result == outcome::STEERED || result == outcome::RETRIED {
        let held = SocketSlot {
            receiver: dest.receiver,
            slot,
            local,
            _pad: 0,
        };
        hold(ctx, held);
        pace(ctx);
        return result;
    }
    release_slot(dest.receiver, slot);
    if result == outcome::NO_FREE_PORT {
        note_dry(state, slot);
    }
    if bound_addr {
        let _ = bind_port(ctx, family, table, 0);
    }
    result
}

/// A both-ends connect's claimed receiver slot and what binding its ports
/// needs, for [`bind_jointly`].
struct Joint<'a> {
    remote: &'a Steering<'a>,
    peer: &'a Peer,
    /// The receiver slot's turn.
    turn: u32,
    /// The application's own port sharing ([`port_sharing`]).
    sharing: u32,
}

/// Binds a port of the receiver slot. With this host's NIC planned too
/// (`--steer both`), one from the joint map for a claimed CPU of this host
/// first ([`bind_jointly`]); without, or when none of those binds (the
/// receiver's placement is kept: `local_missed`), one of the slot's own
/// rotation (from `turn`; `sharing`: the application's own,
/// [`port_sharing`]). Returns the outcome and this host's slot now held
/// ([`SocketSlot::NONE`] without one).
#[inline(always)]
fn bind_for_ends(
    ctx: &SockAddrContext,
    family: Family,
    dest: &DestValue,
    steering: &Steering<'_>,
    peer: Peer,
    turn: u32,
    sharing: u32,
) -> (u32, u32) {
    if let Some(side) = claim_local(dest) {
        let joint = Joint {
            remote: steering,
            peer: &peer,
            turn,
            sharing,
        };
        let result = bind_jointly(ctx, family, &joint, &side);
        if result != NOT_BOUND {
            count(outcome::JOINT);
            return (result, side.slot);
        }
        release_slot(LOCAL_ROW, side.slot);
        count(outcome::LOCAL_MISSED);
    }
    let result = bind_free_port(ctx, family, steering, peer, turn, sharing);
    (result, SocketSlot::NONE)
}

/// This host's side of a both-ends destination: its table, layout, joint
/// row, and its claimed slot and that slot's row. Not the slot's word: its
/// rotation is not used, the receiver slot's turn enumerates the pairs
/// ([`joint_port`]).
struct LocalSide<'a> {
    table: &'a TableRow,
    layout: &'a LayoutRow,
    row: &'a SlotRow,
    joint: &'a JointRow,
    slot: u32,
}

/// [`bind_jointly`] bound nothing.
const NOT_BOUND: u32 = u32::MAX;

/// Binds a port that lands on the receiver slot's entry and on this host's
/// claimed CPU, from the joint map (no scan): the receiver entry's coset,
/// the local entry's value, one solution and its members, each tried as
/// [`bind_one`] tries a port. Returns the outcome, [`NOT_BOUND`] when none
/// bound within the attempts (the caller gives the local claim back). Not
/// inlined: its frame stands apart from the hook's (the kernel allows 512
/// bytes along a call chain).
#[inline(never)]
fn bind_jointly(
    ctx: &SockAddrContext,
    family: Family,
    joint: &Joint<'_>,
    local: &LocalSide<'_>,
) -> u32 {
    let (remote, peer) = (joint.remote, joint.peer);
    // In a register: the verifier then knows it from the first attempt on
    // and walks each later attempt one way, not both (read from `joint`
    // each time, the hook passes the verifier's million instructions).
    let sharing = joint.sharing;
    let mut reuse_set = false;
    let mut turn = joint.turn;
    for attempt in 0..JOINT_ATTEMPTS {
        if attempt > 0 {
            let Some(next) = take_turn(remote.word) else {
                continue;
            };
            turn = next;
        }
        let Some(port) = joint_port(remote, local, turn, peer.port) else {
            continue;
        };
        match bind_one(
            ctx,
            family,
            (remote.table, peer, sharing),
            port,
            &mut reuse_set,
        ) {
            Bind::Bound => return turn_outcome(attempt),
            Bind::Skipped => {}
            Bind::Failed => break,
        }
    }
    restore_sharing(ctx, reuse_set, sharing);
    NOT_BOUND
}

/// The local table, layout and joint row of `dest`, and a claimed slot of
/// this host's CPUs; `None` for a destination planned for one NIC.
#[inline(always)]
fn claim_local(dest: &DestValue) -> Option<LocalSide<'static>> {
    if dest.local_table == DestValue::NO_LOCAL {
        return None;
    }
    let table = SRAP_TABLES.get(dest.local_table)?;
    let layout = SRAP_LAYOUTS.get(table.layout)?;
    let joint = SRAP_JOINTS.get(dest.joint)?;
    let state = SRAP_RECEIVERS.get_ptr_mut(LOCAL_ROW)?;
    let grant = SRAP_GRANTS.get(LOCAL_ROW)?;
    let slots = layout.slots;
    if slots == 0 || slots > MAX_SLOTS || joint.kernel_len == 0 {
        return None;
    }
    let (slot, _) = claim_slot(state, grant, LOCAL_ROW)?;
    let Some(row) = SRAP_SLOTS.get(layout.slot_base.wrapping_add(slot % slots)) else {
        release_slot(LOCAL_ROW, slot);
        return None;
    };
    Some(LocalSide {
        table,
        layout,
        row,
        joint,
        slot,
    })
}

/// The port, toward destination port `dport`, of the receiver slot's
/// `turn`-th combination of its entry, the local slot's entry and a member
/// of their pair: within the receiver entry's coset, the members `j` with
/// `K(j) = δ` (one solution, then its kernel's span), the first in the port
/// range from the member's round. One rotation walks all three, receiver
/// entry fastest, so a receiver slot's turns visit every port that lands on
/// its CPU and the local one before coming back to one (a rotation of its
/// own per side repeated after as few as 512 connects). `None` when the
/// pair has no member in the range (a rank-deficient map, a narrow range).
#[inline(always)]
fn joint_port(remote: &Steering<'_>, local: &LocalSide<'_>, turn: u32, dport: u16) -> Option<u16> {
    let (row, layout) = (remote.row, remote.layout);
    let local_row = local.row;
    if row.count == 0 || local_row.count == 0 {
        return None;
    }
    let (position, pairing) = slot_turn(turn, row.count);
    let (local_position, round) = slot_turn(pairing, local_row.count);
    let entry = *SRAP_ENTRIES.get(
        layout
            .entry_base
            .wrapping_add(row.first)
            .wrapping_add(position),
    )?;
    let value = layout.value_for(remote.table.base, entry, dport);
    if value >= layout.values {
        return None;
    }
    let coset: &CosetRow = SRAP_COSETS.get(layout.coset_base.wrapping_add(value))?;
    if coset.count == 0 {
        return None;
    }
    let local_layout = local.layout;
    let local_entry = *SRAP_ENTRIES.get(
        local_layout
            .entry_base
            .wrapping_add(local_row.first)
            .wrapping_add(local_position),
    )?;
    let local_value = local_layout.value_for(local.table.base, local_entry, dport);
    let joint = local.joint;
    let delta = joint.delta(coset.port0 as u16, local_value);
    let j0 = *SRAP_SOLUTIONS.get(joint.solution_base.wrapping_add(delta))?;
    if j0 == JointRow::NONE {
        return None;
    }
    for k in 0..JOINT_MEMBERS {
        let j = joint.member(j0, round.wrapping_add(k));
        if j.wrapping_sub(coset.first) < coset.count {
            let span =
                layout.span_low[(j & 0xff) as usize] ^ layout.span_high[((j >> 8) & 0xff) as usize];
            return Some(coset.port0 as u16 ^ span);
        }
    }
    None
}

/// Tries the slot's ports in its rotation, from `turn`, until one binds
/// ([`bind_one`]).
#[inline(always)]
fn bind_free_port(
    ctx: &SockAddrContext,
    family: Family,
    steering: &Steering<'_>,
    peer: Peer,
    first_turn: u32,
    sharing: u32,
) -> u32 {
    let mut reuse_set = false;
    let mut turn = first_turn;
    let mut result = outcome::NO_FREE_PORT;
    for attempt in 0..MAX_BIND_ATTEMPTS {
        if attempt > 0 {
            let Some(next) = take_turn(steering.word) else {
                continue;
            };
            turn = next;
        }
        let Some(port) = port_at(steering, turn, peer.port) else {
            continue;
        };
        match bind_one(
            ctx,
            family,
            (steering.table, &peer, sharing),
            port,
            &mut reuse_set,
        ) {
            Bind::Bound => return turn_outcome(attempt),
            Bind::Skipped => {}
            Bind::Failed => {
                result = outcome::ERROR;
                break;
            }
        }
    }
    restore_sharing(ctx, reuse_set, sharing);
    result
}

/// What trying one port came to.
enum Bind {
    Bound,
    /// Its tuple is taken or another socket holds it: try the next.
    Skipped,
    /// A bind or option the kernel refused for another reason: stop.
    Failed,
}

/// Binds `port` unless that would make the connect fail. A port nobody
/// holds is bound at once: a bind without `SO_REUSEADDR` succeeds only
/// then, and then no socket can have its tuple, so no lookup is needed
/// (the common case, ~100 ns saved). A port in use is shared by tuple: its
/// exact tuple is looked up, skipped when taken, and bound with
/// `SO_REUSEADDR` otherwise (set once per connect: `reuse_set`). A steered
/// socket keeps `SO_REUSEADDR` set, so later connects to other
/// destinations may share its port.
#[inline(always)]
fn bind_one(
    ctx: &SockAddrContext,
    family: Family,
    (table, peer, sharing): (&TableRow, &Peer, u32),
    port: u16,
    reuse_set: &mut bool,
) -> Bind {
    // An application that lets its socket share ports: even a bind that
    // succeeds may share one, so every port is looked up.
    if sharing == 0 && !*reuse_set {
        match bind_port(ctx, family, table, port) {
            0 => {
                // Failing leaves the port unshared, nothing worse.
                let _ = set_socket_option(ctx, SO_REUSEADDR, 1);
                return Bind::Bound;
            }
            e if e == -EADDRINUSE => {}
            _ => return Bind::Failed,
        }
    }
    let reused = match tuple_holder(ctx, table, peer, port) {
        Holder::Nobody => false,
        Holder::TimeWait => true,
        Holder::Tuple => {
            count(outcome::TUPLE_TAKEN);
            return Bind::Skipped;
        }
        Holder::Listener => {
            count(outcome::PORT_HELD);
            return Bind::Skipped;
        }
    };
    if !*reuse_set {
        if set_socket_option(ctx, SO_REUSEADDR, 1) != 0 {
            return Bind::Failed;
        }
        *reuse_set = true;
    }
    match bind_port(ctx, family, table, port) {
        0 => {
            if reused {
                count(outcome::TIME_WAIT_REUSED);
            }
            Bind::Bound
        }
        e if e == -EADDRINUSE => {
            count(outcome::PORT_HELD);
            Bind::Skipped
        }
        _ => Bind::Failed,
    }
}

/// The application's own port sharing on the connecting socket: bit 0
/// `SO_REUSEADDR`, bit 1 `SO_REUSEPORT` (`None`: unreadable).
#[inline(always)]
fn port_sharing(ctx: &SockAddrContext) -> Option<u32> {
    let addr = socket_option(ctx, SO_REUSEADDR)?;
    let port = socket_option(ctx, SO_REUSEPORT)?;
    Some(u32::from(addr != 0) | (u32::from(port != 0) << 1))
}

/// When no port bound: `SO_REUSEADDR` back off if this connect set it and
/// the application had not. Failing leaves it set, which only lets later
/// explicit binds share the port.
#[inline(always)]
fn restore_sharing(ctx: &SockAddrContext, reuse_set: bool, sharing: u32) {
    if reuse_set && sharing & 1 == 0 {
        let _ = set_socket_option(ctx, SO_REUSEADDR, 0);
    }
}

/// A bind on attempt `attempt`: steered at the first port tried, else
/// retried.
#[inline(always)]
fn turn_outcome(attempt: u32) -> u32 {
    if attempt == 0 {
        outcome::STEERED
    } else {
        outcome::RETRIED
    }
}

/// A `SOL_SOCKET` option of the connecting socket (`None`: unreadable).
#[inline(always)]
fn socket_option(ctx: &SockAddrContext, name: i32) -> Option<u32> {
    let mut value = 0u32;
    // SAFETY: a valid u32 of the size given.
    let read = unsafe {
        bpf_getsockopt(
            ctx.sock_addr.cast(),
            SOL_SOCKET,
            name,
            core::ptr::from_mut(&mut value).cast(),
            size_of::<u32>() as i32,
        )
    };
    (read == 0).then_some(value)
}

/// Sets a `SOL_SOCKET` option of the connecting socket.
#[inline(always)]
fn set_socket_option(ctx: &SockAddrContext, name: i32, value: u32) -> i64 {
    let mut value = value;
    // SAFETY: a valid u32 of the size given.
    unsafe {
        bpf_setsockopt(
            ctx.sock_addr.cast(),
            SOL_SOCKET,
            name,
            core::ptr::from_mut(&mut value).cast(),
            size_of::<u32>() as i32,
        )
    }
}

/// The slot's `turn`-th port toward destination port `dport`; `None` when
/// that entry's coset has no port in the range.
#[inline(always)]
fn port_at(steering: &Steering<'_>, turn: u32, dport: u16) -> Option<u16> {
    let (row, layout) = (steering.row, steering.layout);
    if row.count == 0 {
        return None;
    }
    let (position, round) = slot_turn(turn, row.count);
    let index = layout
        .entry_base
        .wrapping_add(row.first)
        .wrapping_add(position);
    let entry = *SRAP_ENTRIES.get(index)?;
    let value = layout.value_for(steering.table.base, entry, dport);
    if value >= layout.values {
        return None;
    }
    let coset: &CosetRow = SRAP_COSETS.get(layout.coset_base.wrapping_add(value))?;
    layout.port_of(coset, round)
}

/// Who, if anyone, has the tuple (source address, `port`, receiver).
enum Holder {
    Nobody,
    /// A TIME_WAIT socket with a TCP timestamp: the `connect()` of a socket
    /// bound to the port takes the tuple over.
    TimeWait,
    /// A socket with this exact tuple: established, connecting, a request,
    /// or TIME_WAIT without a timestamp.
    Tuple,
    /// A listener on the port (the lookup falls back to listeners).
    Listener,
}

/// Looks the exact tuple up as the kernel's `connect()` will check it:
/// binding onto a taken tuple would succeed and make the connect fail.
/// Not inlined, so its frame stays out of the callers' (the kernel allows
/// 512 bytes of stack along a call chain).
#[inline(never)]
fn tuple_holder(ctx: &SockAddrContext, table: &TableRow, peer: &Peer, port: u16) -> Holder {
    let Some(tuple) = SRAP_TUPLE_SCRATCH.get_ptr_mut(0) else {
        // Cannot look: the port counts as taken, the next one is tried.
        return Holder::Tuple;
    };
    // The lookup is the receive path's: "source" is the remote end.
    // SAFETY: `tuple` is this CPU's scratch row, valid for this run; each
    // branch writes every byte the lookup reads (the size it passes).
    let size = unsafe {
        let fields = &mut (*tuple).__bindgen_anon_1;
        if peer.v4 {
            fields.ipv4.saddr = peer.addr[0];
            fields.ipv4.daddr = table.src_addr[0];
            fields.ipv4.sport = peer.port.to_be();
            fields.ipv4.dport = port.to_be();
            size_of::<Tuple4>()
        } else {
            fields.ipv6.saddr = peer.addr;
            fields.ipv6.daddr = table.src_addr6;
            fields.ipv6.sport = peer.port.to_be();
            fields.ipv6.dport = port.to_be();
            size_of::<Tuple6>()
        }
    };
    // SAFETY: a tuple of the size given, in a map value.
    let sk =
        unsafe { bpf_skc_lookup_tcp(ctx.sock_addr.cast(), tuple, size as u32, CURRENT_NETNS, 0) };
    if sk.is_null() {
        return Holder::Nobody;
    }
    // SAFETY: a socket the lookup returned, released once read.
    let state = unsafe { read_volatile(&raw const (*sk).state) };
    let holder = match state {
        TCP_LISTEN => Holder::Listener,
        TCP_TIME_WAIT if has_timestamp(sk) => Holder::TimeWait,
        _ => Holder::Tuple,
    };
    // SAFETY: as above.
    unsafe { bpf_sk_release(sk.cast()) };
    holder
}

/// Whether a TIME_WAIT socket's connection carried TCP timestamps
/// (`tw_ts_recent_stamp` non-zero, read at the offset the agent found in
/// the kernel's BTF): then the kernel lets a bound socket reuse its tuple.
#[inline(always)]
fn has_timestamp(sk: *mut bpf_sock) -> bool {
    let offset = match SRAP_CONFIG.get(0) {
        Some(config) if config.tw_stamp_offset != 0 => config.tw_stamp_offset,
        _ => return false,
    };
    // SAFETY: `sk` is a live socket the caller holds a reference to.
    let tw = unsafe { bpf_skc_to_tcp_timewait_sock(sk.cast()) };
    if tw.is_null() {
        return false;
    }
    let mut stamp = 0u32;
    // SAFETY: a kernel read of four bytes inside the TIME_WAIT socket
    // (the offset is its field's, from BTF); a failed read leaves zero.
    let read = unsafe {
        bpf_probe_read_kernel(
            core::ptr::from_mut(&mut stamp).cast(),
            size_of::<u32>() as u32,
            tw.cast::<u8>().wrapping_add(offset as usize).cast(),
        )
    };
    read == 0 && stamp != 0
}

/// `bpf_bind()` to the table's source address (the route's, or the one the
/// application bound) and `port`. Not inlined: its address stays out of
/// the callers' frames (a both-ends connect binds from [`bind_jointly`]'s,
/// and the kernel allows 512 bytes of stack along a call chain).
#[inline(never)]
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

/// The word of a receiver's slot in `SRAP_SLOT_STATE`: `row_slots` words
/// per binder row, as the agent sized the map (`--max-cpus`).
#[inline(always)]
fn slot_word_of(receiver: u32, slot: u32) -> Option<*mut u64> {
    let row_slots = SRAP_CONFIG.get(0)?.row_slots;
    if slot >= MAX_SLOTS || slot >= row_slots {
        return None;
    }
    SRAP_SLOT_STATE.get_ptr_mut(receiver.wrapping_mul(row_slots).wrapping_add(slot))
}

/// Compare-and-exchange on a word of map memory.
#[inline(always)]
fn exchange(word: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: valid, aligned map memory.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(word, old, new)
    }
    .1
}

/// Adds `delta` to a slot word atomically (a few tries against others
/// changing it); returns the word before.
#[inline(always)]
fn bump(word: *mut u64, delta: u64) -> Option<u64> {
    for _ in 0..WORD_ATTEMPTS {
        // SAFETY: valid map memory.
        let old = unsafe { read_volatile(word) };
        if exchange(word, old, old.wrapping_add(delta)) {
            return Some(old);
        }
    }
    None
}

/// Takes the next turn of a slot's port rotation.
#[inline(always)]
fn take_turn(word: *mut u64) -> Option<u32> {
    bump(word, slot_word::TURN).map(slot_word::turn)
}

/// Clears a slot's lock, which the caller holds.
#[inline(always)]
fn unlock(word: *mut u64) {
    // SAFETY: valid, aligned map memory.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(word, slot_word::LOCK.wrapping_neg())
    };
}

/// Claims the least-occupied slot of a receiver for one new flow; returns
/// it and its rotation's turn. The slot is found in the lowest non-empty
/// level bitmap, from just past the last slot claimed (this host's row:
/// from its claim count, [`local_start`]); one
/// compare-and-exchange of its word then checks its count is still what
/// the bitmap said, adds the flow, takes the lock and a turn. Under the
/// lock the slot's bit moves up a level. A claim that finds the slot
/// locked or changed looks again, a bounded number of times, so two
/// connects at the same moment never share a slot while a free one exists.
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
    let local = receiver == LOCAL_ROW;
    let turn = if local { local_start(turn) } else { turn };
    for attempt in 0..CLAIM_ATTEMPTS {
        let start = turn.wrapping_add(attempt) % slots;
        if let Some((slot, turn)) = try_claim(state, grant, receiver, slots, start) {
            // A receiver's next search starts past this slot: among equally
            // occupied slots, connects take turns (a slot right after a run
            // of fuller ones is not favoured). This host's row counts on.
            if !local {
                // SAFETY: valid map memory.
                unsafe { (*state).cursor = u64::from(slot) + 1 };
            }
            return Some((slot, turn));
        }
    }
    // Still contended: take the rotation's granted slot (its bits are
    // repaired by the next claim that finds them wrong).
    let slot = granted_from(grant, turn % slots, slots);
    let word = bump(slot_word_of(receiver, slot)?, 1 + slot_word::TURN)?;
    Some((slot, slot_word::turn(word)))
}

/// Where this host's row ([`LOCAL_ROW`]) starts its `count`-th search: one
/// slot on per claim, and one more every [`MAX_SLOTS`] claims. A both-ends
/// connect claims a receiver slot first, and a receiver's search goes one
/// slot on per claim too: in step, receiver CPU `s` would meet this host's
/// CPU `s mod 16` every time (32 and 16 CPUs: 32 of the 512 pairs, and
/// their ~1 800 ports of the range, for connects made one at a time). The
/// extra step moves the pairing on, so every pair comes round.
#[inline(always)]
fn local_start(count: u32) -> u32 {
    count.wrapping_add(count / MAX_SLOTS)
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
/// changed meanwhile (a bitmap found wrong is repaired on the way).
#[inline(always)]
fn try_claim(
    state: *mut ReceiverSlots,
    grant: &SlotGrant,
    receiver: u32,
    slots: u32,
    start: u32,
) -> Option<(u32, u32)> {
    let (found, level) = lowest_level_slot(state, grant, start);
    // Nothing granted in the levels searched (every granted slot fuller
    // than the last level, or bits past the slots of a shrunk receiver):
    // the first granted slot from the start.
    let slot = if found < slots {
        found
    } else {
        granted_from(grant, start, slots)
    };
    let word = slot_word_of(receiver, slot)?;
    // SAFETY: valid map memory.
    let seen = unsafe { read_volatile(word) };
    if seen & slot_word::LOCK != 0 {
        return None;
    }
    let flows = slot_word::flows(seen);
    let level = if found < slots {
        level
    } else {
        level_of(flows)
    };
    if level_of(flows) != level {
        // The bitmap was stale: put the slot's bit where its count says.
        if exchange(word, seen, seen | slot_word::LOCK) {
            move_bit(state, slot, level, level_of(flows));
            unlock(word);
        }
        return None;
    }
    let claimed = seen.wrapping_add(1 + slot_word::TURN) | slot_word::LOCK;
    if !exchange(word, seen, claimed) {
        return None;
    }
    move_bit(state, slot, level, level_of(flows + 1));
    unlock(word);
    Some((slot, slot_word::turn(seen)))
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
                // skews this choice, which the claim then checks.
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
    let (Some(state), Some(word)) = (
        SRAP_RECEIVERS.get_ptr_mut(receiver),
        slot_word_of(receiver, slot),
    ) else {
        return;
    };
    for _ in 0..RELEASE_ATTEMPTS {
        // SAFETY: valid map memory.
        let seen = unsafe { read_volatile(word) };
        let flows = slot_word::flows(seen);
        if flows == 0 {
            return;
        }
        if seen & slot_word::LOCK != 0 || !exchange(word, seen, (seen - 1) | slot_word::LOCK) {
            continue;
        }
        // SAFETY: valid map memory.
        let slots = unsafe { read_volatile(&raw const (*state).slots) };
        if slot < slots {
            move_bit(state, slot, level_of(flows), level_of(flows - 1));
        }
        unlock(word);
        return;
    }
    for _ in 0..WORD_ATTEMPTS {
        // SAFETY: valid map memory.
        let seen = unsafe { read_volatile(word) };
        if slot_word::flows(seen) == 0 || exchange(word, seen, seen - 1) {
            return;
        }
    }
}

/// Counts a connect that found no free port in its slot, and which slot:
/// the agent warns about it.
#[inline(always)]
fn note_dry(state: *mut ReceiverSlots, slot: u32) {
    // SAFETY: valid, aligned map memory.
    unsafe {
        atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(addr_of_mut!((*state).dry), 1);
        (*state).dry_slot = slot;
    }
}

/// Remembers the socket's slots so closing it frees them; with the map
/// full, frees them now (the flow goes uncounted rather than leaked).
fn hold(ctx: &SockAddrContext, held: SocketSlot) {
    if !remember(cookie_of(ctx), held) {
        release_slot(held.receiver, held.slot);
        if held.local != SocketSlot::NONE {
            release_slot(LOCAL_ROW, held.local);
        }
    }
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
    let rate = config.pacing_rate.min(u64::from(u32::MAX)) as u32;
    let _ = set_socket_option(ctx, SO_MAX_PACING_RATE, rate);
}
