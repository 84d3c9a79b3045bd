//! Choose the receiver's NIC (`--receiver-nics spread`,
//! `srap_common::receiver_nics`). A connect the application bound no
//! address for, toward a receiver address whose plan has a row of
//! addresses (the same receiver's that accept the port), takes the next
//! address of that row in turn: the hook looks it up as a destination of
//! its own, rewrites the connect's address to it and goes on with that
//! destination's entry, so the port is placed on that address's own slots
//! (a CPU of the NIC the flow enters). The address asked for is kept per
//! socket ([`SRAP_ASKED`]) for the `getpeername4/6` programs
//! ([`peer_name`]) to give back. Whatever is missing, the connect keeps
//! the address asked for (counted `dest_kept` when a row was there).
//!
//! An MPTCP connection keeps it too: its first subflow's connect is the
//! one this hook sees, but the application's `getpeername()` runs on the
//! MPTCP socket, another socket with another cookie, which would then
//! name the address used. Its path manager reaches the receiver's other
//! addresses with subflows of its own, each steered at its bind
//! ([`super::subflow`]).
//!
//! A moved socket's SYN that gets no answer by its first retransmit
//! timeout (about 1 s) marks the address it was sent to failing
//! (`SRAP_SPREAD_FAILING`, [`syn_timed_out`], from `srap_tcp_close`): from
//! then on a turn that falls on that address keeps the asked one, at
//! once, until the agent re-admits it. Only moved sockets ask the kernel
//! for retransmit-timeout callbacks ([`watch_syn`]); under `asked`
//! nothing new is read but the config word.
//!
//! As [`super::nic`] does, the choice is made in a subprogram that writes
//! the destination it chose to this CPU's scratch row whichever way it
//! went, and the hook reads it back: the kernel's verifier meets the later
//! steps in one state for every way the choice can go.

use core::ptr::{read_volatile, write_volatile};

use aya_ebpf::{
    bindings::{BPF_SOCK_OPS_RTO_CB_FLAG, BPF_TCP_SYN_SENT},
    helpers::bpf_ktime_get_ns,
    macros::map,
    maps::{LruHashMap, PerCpuArray},
    programs::{SockAddrContext, SockOpsContext},
};
use srap_common::{
    binder::{DestKey, DestValue, event},
    family::Family,
    protocol::Protocol,
    receiver_nics::{self, MAX_SPREAD, SpreadFailing, spread_choice},
};

use super::{
    claim::exchange,
    config,
    context::{Peer, V4_MAPPED_WORD, cookie_of, field, is_subflow},
    maps::{SRAP_DESTS, SRAP_SPREAD, SRAP_SPREAD_FAILING, count},
    nic::bound_any,
};

/// Sockets a moved connect remembers the asked address of at once; the
/// least recently used is forgotten first (a socket is forgotten when it
/// closes, [`forget_asked`]).
const ASKED_SOCKETS: u32 = 16_384;

/// The address each moved socket's application asked for, by socket
/// cookie, in the form of `DestKey::addr` (an IPv4 address in word 0, for
/// a dual-stack socket too). Not pinned: only this object's programs read
/// it.
#[map]
static SRAP_ASKED: LruHashMap<u64, [u32; 4]> = LruHashMap::with_max_entries(ASKED_SOCKETS, 0);

/// Where [`spread_into`] hands its choice back: the destination's entry
/// (table, receiver, local table, joint) and its address. One per CPU,
/// not pinned.
#[map]
static SRAP_SPREAD_SCRATCH: PerCpuArray<[u32; 8]> = PerCpuArray::with_max_entries(1, 0);

/// Chooses the receiver address a `PROTOCOL` connect toward `dest` and
/// `peer` is sent to (among that protocol's destinations); returns this
/// CPU's scratch row holding the choice, read with
/// [`chosen_route`] and [`chosen_receiver`] (`None` only without the row:
/// never, once loaded). Read each part as late as it is needed: a value
/// kept across a later subprogram's call goes through the stack, and the
/// kernel's verifier would then walk `connect6` past its limit.
#[inline(always)]
pub(super) fn spread_dest<const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    dest: &DestValue,
    peer: &Peer,
) -> Option<*mut [u32; 8]> {
    let scratch = SRAP_SPREAD_SCRATCH.get_ptr_mut(0)?;
    let start = [
        dest.table,
        dest.receiver,
        dest.local_table,
        dest.joint,
        peer.addr[0],
        peer.addr[1],
        peer.addr[2],
        peer.addr[3],
    ];
    // SAFETY: this CPU's scratch row.
    unsafe { write_volatile(scratch, start) };
    if family == Family::Inet {
        spread_into::<false, PROTOCOL>(ctx, scratch);
    } else {
        spread_into::<true, PROTOCOL>(ctx, scratch);
    }
    Some(scratch)
}

/// The chosen destination's route table and local twin.
#[inline(always)]
pub(super) fn chosen_route(scratch: *mut [u32; 8]) -> (u32, u32) {
    // SAFETY: this CPU's scratch row, written by `spread_dest`.
    unsafe { (read_volatile(&(*scratch)[0]), read_volatile(&(*scratch)[2])) }
}

/// `dest` and `peer` with the chosen destination's receiver row, joint
/// row and address.
#[inline(always)]
pub(super) fn chosen_receiver(
    scratch: *mut [u32; 8],
    dest: DestValue,
    peer: Peer,
) -> (DestValue, Peer) {
    // SAFETY: this CPU's scratch row, written by `spread_dest`.
    let row = unsafe { read_volatile(scratch) };
    (
        DestValue {
            receiver: row[1],
            joint: row[3],
            ..dest
        },
        Peer {
            addr: [row[4], row[5], row[6], row[7]],
            ..peer
        },
    )
}

/// Leaves `scratch` (the asked destination's entry and address) as it is,
/// or writes the chosen address's entry and address there after rewriting
/// the connect's address to it. Not inlined: see the module. What it
/// needs of the connect (bound or not, IPv4 or not, the port) is read here
/// again from the context, not passed: the kernel's verifier narrows every
/// copy of a value it branches on, the hook's own included, and each
/// narrowed copy split every later step's walk in two.
#[inline(never)]
fn spread_into<const INET6: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    scratch: *mut [u32; 8],
) {
    if !spreading() || bound_any(ctx, !INET6) || is_subflow(ctx) {
        return;
    }
    // The asked address alone: a copy of the whole row would take 16 bytes
    // more of this frame, which with the hook's own Linux 6.1 refuses past
    // 512 (each frame rounded up to 32).
    // SAFETY: this CPU's scratch row.
    let asked_addr = unsafe {
        [
            read_volatile(&(*scratch)[4]),
            read_volatile(&(*scratch)[5]),
            read_volatile(&(*scratch)[6]),
            read_volatile(&(*scratch)[7]),
        ]
    };
    let v4 = !INET6 || mapped(ctx);
    // SAFETY: the kernel's bpf_sock_addr; the port in network byte order
    // in its low 16 bits.
    let port = u16::from_be(unsafe { field(&raw const (*ctx.sock_addr).user_port) } as u16);
    let family = if v4 { Family::Inet } else { Family::Inet6 };
    // One key in this frame, changed in place for each lookup: with three
    // copies (the asked, the chosen and its any-port form), this frame and
    // the hook's came to 544 bytes on Linux 6.1, which rounds each frame up
    // to 32 and refuses past 512.
    let protocol = const { Protocol::known(PROTOCOL) };
    let mut key = DestKey::new(protocol, family, port, asked_addr, [0; 4]);
    let Some(chosen) = choose(&key) else {
        return;
    };
    key.addr = chosen;
    let Some(dest) = dest_at(&mut key) else {
        count(event::DEST_KEPT);
        return;
    };
    // `key.addr` is `chosen`: the failing mark is looked up with the key
    // already in this frame, no copy.
    if chosen == asked_addr || failing(&key.addr) {
        count(event::DEST_KEPT);
        return;
    }
    let _ = SRAP_ASKED.insert(cookie_of(ctx), asked_addr, 0);
    set_peer_addr::<INET6>(ctx, v4, chosen);
    count(event::DEST_SPREAD);
    // SAFETY: this CPU's scratch row.
    unsafe {
        write_volatile(
            scratch,
            [
                dest.table,
                dest.receiver,
                dest.local_table,
                dest.joint,
                chosen[0],
                chosen[1],
                chosen[2],
                chosen[3],
            ],
        );
    }
}

/// The address the connect toward `key` takes its turn on, when its row
/// lists more than one.
#[inline(always)]
fn choose(key: &DestKey) -> Option<[u32; 4]> {
    let row = SRAP_SPREAD.get_ptr_mut(key)?;
    // SAFETY: valid, aligned map memory.
    let (turn_word, count) = unsafe { (&raw mut (*row).turn, read_volatile(&(*row).count)) };
    if count < 2 {
        return None;
    }
    // SAFETY: as above.
    let turn = unsafe { read_volatile(turn_word) };
    let _ = exchange(turn_word, turn, turn.wrapping_add(1));
    // Opaque to the compiler, so the mask stays: the kernel's verifier
    // bounds no remainder, and indexes the row only with a masked one.
    let i = core::hint::black_box(spread_choice(turn, count)) & (MAX_SPREAD - 1);
    // SAFETY: as above; `i` is below the row's addresses.
    Some(unsafe { read_volatile(&(*row).addrs[i as usize]) })
}

/// Whether `addr` is marked failing: a moved connect's SYN got no answer
/// there, and the agent has not re-admitted it yet.
#[inline(always)]
fn failing(addr: &[u32; 4]) -> bool {
    // SAFETY: only whether the entry is there is read.
    unsafe { SRAP_SPREAD_FAILING.get(addr) }.is_some()
}

/// The plan's entry for `key`, as [`super::classify::dest_of`] finds it
/// (any port first, then the key's own port), with the port changed in
/// place: no copy of the key in this frame.
#[inline(always)]
// A borrow, not the copy a by-value key would make in this frame.
#[allow(clippy::needless_borrows_for_generic_args)]
fn dest_at(key: &mut DestKey) -> Option<DestValue> {
    let port = key.port;
    key.port = 0;
    // SAFETY: values are copied out at once.
    let any = unsafe { SRAP_DESTS.get(&*key) }.copied()?;
    if any.table != DestValue::BY_PORT {
        return Some(any);
    }
    if port == 0 {
        return None;
    }
    key.port = port;
    // SAFETY: as above.
    unsafe { SRAP_DESTS.get(&*key) }.copied()
}

/// Writes `addr` as the connect's destination address: `user_ip4`, or all
/// of `user_ip6` (`::ffff:a.b.c.d` for an IPv4 peer). Every store at a
/// fixed offset of its own: the kernel's verifier refuses a context field
/// reached through a computed offset, which stores shared between
/// branches became.
#[inline(always)]
fn set_peer_addr<const INET6: bool>(ctx: &SockAddrContext, v4: bool, addr: [u32; 4]) {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel lets a connect hook write these fields.
    unsafe {
        if !INET6 {
            write_volatile(&raw mut (*sa).user_ip4, addr[0]);
            return;
        }
        let words = if v4 {
            [0, 0, V4_MAPPED_WORD, addr[0]]
        } else {
            addr
        };
        write_volatile(&raw mut (*sa).user_ip6[0], words[0]);
        write_volatile(&raw mut (*sa).user_ip6[1], words[1]);
        write_volatile(&raw mut (*sa).user_ip6[2], words[2]);
        write_volatile(&raw mut (*sa).user_ip6[3], words[3]);
    }
}

/// `getpeername()` of a moved socket: the address its application asked
/// for, in place of the one the connect was sent to. `family` is the
/// hook's; a dual-stack socket toward an IPv4 receiver gets its v4-mapped
/// form back.
#[inline(always)]
pub(super) fn peer_name(ctx: &SockAddrContext, family: Family) {
    // SAFETY: values are copied out at once.
    let Some(asked) = (unsafe { SRAP_ASKED.get(cookie_of(ctx)) }).copied() else {
        return;
    };
    if family == Family::Inet {
        set_peer_addr::<false>(ctx, true, asked);
    } else {
        set_peer_addr::<true>(ctx, mapped(ctx), asked);
    }
}

/// Whether the context's IPv6 address is v4-mapped (`::ffff:a.b.c.d`).
#[inline(always)]
fn mapped(ctx: &SockAddrContext) -> bool {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel's bpf_sock_addr.
    unsafe {
        field(&raw const (*sa).user_ip6[0]) == 0
            && field(&raw const (*sa).user_ip6[1]) == 0
            && field(&raw const (*sa).user_ip6[2]) == V4_MAPPED_WORD
    }
}

/// Forgets the asked address of a closing socket (nothing when it was
/// never moved).
#[inline(always)]
pub(crate) fn forget_asked(cookie: u64) {
    if spreading() {
        let _ = SRAP_ASKED.remove(cookie);
    }
}

/// At a socket's connect (`BPF_SOCK_OPS_TCP_CONNECT_CB`): one the spread
/// step moved asks the kernel for its retransmit timeouts, keeping the
/// flags another program asked for; any other socket asks for nothing (one
/// config read under `asked`, one hash lookup under `spread`).
#[inline(always)]
pub(crate) fn watch_syn(ctx: &SockOpsContext, cookie: u64) {
    // SAFETY: only whether the entry is there is read.
    if !spreading() || unsafe { SRAP_ASKED.get(cookie) }.is_none() {
        return;
    }
    // Refused only for a socket that is not a full one, which a
    // connecting socket is; then its SYN is not watched.
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_RTO_CB_FLAG) as i32);
}

/// A retransmit timeout of a socket that asked for them (a moved one,
/// [`watch_syn`]): while its SYN is still unanswered, the address it was
/// sent to is marked failing (its first timeout counts the socket,
/// `spread_syn_unanswered`; each later one of a SYN still unanswered
/// keeps the mark). A timeout after the handshake marks nothing.
#[inline(always)]
pub(crate) fn syn_timed_out(ctx: &SockOpsContext, cookie: u64) {
    // SAFETY: the kernel's bpf_sock_ops.
    if unsafe { (*ctx.ops).state } != BPF_TCP_SYN_SENT {
        return;
    }
    // SAFETY: values are copied out at once.
    let Some(asked) = (unsafe { SRAP_ASKED.get(cookie) }).copied() else {
        return;
    };
    let first = ctx.arg(0) == 0;
    let used = remote_addr(ctx);
    if let Some(mark) = SRAP_SPREAD_FAILING.get_ptr_mut(used) {
        if first {
            // SAFETY: valid map memory; a lost increment of two racing
            // timeouts only undercounts.
            unsafe { (*mark).syns = (*mark).syns.wrapping_add(1) };
        }
    } else {
        let mark = SpreadFailing {
            asked,
            // SAFETY: a helper of the base set, no arguments.
            since_ns: unsafe { bpf_ktime_get_ns() },
            syns: 1,
            port: u32::from(u16::from_be((ctx.remote_port() >> 16) as u16)),
        };
        // A full map marks no more: connects keep spreading to an address
        // it could not mark.
        let _ = SRAP_SPREAD_FAILING.insert(used, mark, 0);
    }
    if first {
        count(event::SPREAD_SYN_UNANSWERED);
    }
}

/// The socket's peer in the form of `DestKey::addr` (an IPv4 address in
/// word 0, a dual-stack socket's `::ffff:a.b.c.d` too). Each word read at
/// a fixed offset of its own: the kernel's verifier refuses a context
/// field reached through a computed one, which a copy of the array is.
#[inline(always)]
fn remote_addr(ctx: &SockOpsContext) -> [u32; 4] {
    let ops = ctx.ops;
    // SAFETY: field addresses within the kernel's bpf_sock_ops.
    unsafe {
        if field(&raw const (*ops).family) == AF_INET {
            return [field(&raw const (*ops).remote_ip4), 0, 0, 0];
        }
        let ip6 = [
            field(&raw const (*ops).remote_ip6[0]),
            field(&raw const (*ops).remote_ip6[1]),
            field(&raw const (*ops).remote_ip6[2]),
            field(&raw const (*ops).remote_ip6[3]),
        ];
        if ip6[0] == 0 && ip6[1] == 0 && ip6[2] == V4_MAPPED_WORD {
            [ip6[3], 0, 0, 0]
        } else {
            ip6
        }
    }
}

/// `AF_INET`, as `bpf_sock_ops::family` holds it.
const AF_INET: u32 = 2;

/// Whether the agent asked for `--receiver-nics spread` (its config's
/// word): under `asked` neither the spread row nor the asked address is
/// touched. A socket moved before the agent turned it off is forgotten by
/// the LRU's own eviction.
#[inline(always)]
fn spreading() -> bool {
    config::receiver_nics() == receiver_nics::mode::SPREAD
}
