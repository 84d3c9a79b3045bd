//! Bind the slot's port unless that would make the connect fail,
//! sharing a port in use by 4-tuple as the kernel's own `connect()` does:
//! any port of the slot whose tuple toward this destination is free,
//! shared with every other destination (`SO_REUSEADDR`). The exact tuple
//! is looked up before the bind, because a bind that succeeds onto a tuple
//! in use would make the `connect()` itself fail: by the socket's
//! protocol ([`super::tuple`]), the const generic `PROTOCOL` of every
//! function here.

use core::ptr::write_volatile;

use aya_ebpf::{helpers::bpf_bind, programs::SockAddrContext};
use srap_common::{
    binder::{
        BIND_ERRNOS, DestValue, JOINT_ATTEMPTS, LOCAL_ROW, MAX_BIND_ATTEMPTS, SocketRecord,
        TableRow, event, outcome,
    },
    family::Family,
};

use crate::sockaddr::{EADDRINUSE, SockaddrIn};

use super::{
    claim::{LocalSide, claim_local, release_slot, take_turn},
    context::Peer,
    maps::{SRAP_BIND_ERRNOS, count},
    ports::{PlanRows, joint_port, port_at},
    sockopt::{SO_REUSEADDR, SO_REUSEPORT, set_socket_option, socket_option},
    tuple::{Holder, tuple_holder},
};

#[repr(C)]
pub(super) struct SockaddrIn6 {
    family: u16,
    port_be: u16,
    flowinfo: u32,
    addr: [u32; 4],
    scope_id: u32,
}

/// A both-ends connect's claimed receiver slot and what binding its ports
/// needs, for [`bind_jointly`].
pub(super) struct Joint<'a> {
    remote: &'a PlanRows<'a>,
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
/// ([`SocketRecord::NONE`] without one).
#[inline(always)]
pub(super) fn bind_for_ends<const AT_BIND: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    dest: &DestValue,
    rows: &PlanRows<'_>,
    peer: Peer,
    turn: u32,
    sharing: u32,
) -> (u32, u32) {
    if let Some(side) = claim_local(dest) {
        let joint = Joint {
            remote: rows,
            peer: &peer,
            turn,
            sharing,
        };
        let result = bind_jointly::<AT_BIND, PROTOCOL>(ctx, family, &joint, &side);
        if result != NOT_BOUND {
            count(event::JOINT);
            return (result, side.slot);
        }
        release_slot(LOCAL_ROW, side.slot);
        count(event::LOCAL_MISSED);
    }
    let result = bind_free_port::<AT_BIND, PROTOCOL>(ctx, family, rows, peer, turn, sharing);
    (result, SocketRecord::NONE)
}

/// [`bind_jointly`] bound nothing.
pub(super) const NOT_BOUND: u32 = u32::MAX;

/// Binds a port that lands on the receiver slot's entry and on this host's
/// claimed CPU, from the joint map (no scan): the receiver entry's coset,
/// the local entry's value, one solution and its members, each tried as
/// [`bind_one`] tries a port. Returns the outcome, [`NOT_BOUND`] when none
/// bound within the attempts (the caller gives the local claim back). Not
/// inlined: its frame stands apart from the hook's (the kernel allows 512
/// bytes along a call chain).
#[inline(never)]
pub(super) fn bind_jointly<const AT_BIND: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    joint: &Joint<'_>,
    local: &LocalSide<'_>,
) -> u32 {
    let (remote, peer) = (joint.remote, joint.peer);
    // In a register: the kernel's verifier then knows it from the first attempt on
    // and walks each later attempt one way, not both (read from `joint`
    // each time, the hook would pass the kernel verifier's million instructions).
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
        match bind_one::<AT_BIND, PROTOCOL>(
            ctx,
            family,
            (remote.table, peer, sharing),
            port,
            &mut reuse_set,
        ) {
            Bind::Bound => return turn_outcome(attempt),
            Bind::Skipped => {}
            Bind::Failed(_) => break,
        }
    }
    restore_sharing(ctx, reuse_set, sharing);
    NOT_BOUND
}

/// Tries the slot's ports in its rotation, from `turn`, until one binds
/// ([`bind_one`]).
#[inline(always)]
pub(super) fn bind_free_port<const AT_BIND: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    rows: &PlanRows<'_>,
    peer: Peer,
    first_turn: u32,
    sharing: u32,
) -> u32 {
    let mut reuse_set = false;
    let mut turn = first_turn;
    let mut result = outcome::NO_FREE_PORT;
    for attempt in 0..MAX_BIND_ATTEMPTS {
        if attempt > 0 {
            let Some(next) = take_turn(rows.word) else {
                continue;
            };
            turn = next;
        }
        let Some(port) = port_at(rows, turn, peer.port) else {
            continue;
        };
        match bind_one::<AT_BIND, PROTOCOL>(
            ctx,
            family,
            (rows.table, &peer, sharing),
            port,
            &mut reuse_set,
        ) {
            Bind::Bound => return turn_outcome(attempt),
            Bind::Skipped => {}
            Bind::Failed(verdict) => {
                result = verdict;
                break;
            }
        }
    }
    restore_sharing(ctx, reuse_set, sharing);
    result
}

/// What trying one port came to.
pub(super) enum Bind {
    Bound,
    /// Its tuple is taken or another socket holds it: try the next.
    Skipped,
    /// The kernel refused what binding needs: the connect's verdict
    /// (`option_refused`, `bind_refused`), no port is tried after it.
    Failed(u32),
}

/// Binds `port` unless that would make the connect fail. A port nobody
/// holds is bound at once: a bind without `SO_REUSEADDR` succeeds only
/// then, and then no socket can have its tuple, so no lookup is needed
/// (the common case). A port in use is shared by tuple: its
/// exact tuple is looked up, skipped when taken, and bound with
/// `SO_REUSEADDR` otherwise (set once per connect: `reuse_set`). A steered
/// socket keeps `SO_REUSEADDR` set, so later connects to other
/// destinations may share its port.
///
/// `AT_BIND`: from a bind hook ([`super::subflow`]), where `bpf_bind()` is
/// not offered and the port is taken by rewriting the one the `bind()`
/// asks for ([`take_port`]); whether the port is free shows only when the
/// kernel binds it after the hook, so every port is looked up.
#[inline(always)]
pub(super) fn bind_one<const AT_BIND: bool, const PROTOCOL: u8>(
    ctx: &SockAddrContext,
    family: Family,
    (table, peer, sharing): (&TableRow, &Peer, u32),
    port: u16,
    reuse_set: &mut bool,
) -> Bind {
    // An application that lets its socket share ports: even a bind that
    // succeeds may share one, so every port is looked up.
    if !AT_BIND && sharing == 0 && !*reuse_set {
        match bind_port(ctx, family, table, port) {
            0 => {
                // Failing leaves the port unshared, nothing worse.
                let _ = set_socket_option(ctx, SO_REUSEADDR, 1);
                return Bind::Bound;
            }
            e if e == -EADDRINUSE => {}
            e => return refused(e),
        }
    }
    let reused = match tuple_holder::<PROTOCOL>(ctx, table, peer, port) {
        Holder::Nobody => false,
        Holder::TimeWait => true,
        Holder::Tuple => {
            count(event::TUPLE_TAKEN);
            return Bind::Skipped;
        }
        Holder::Listener => {
            count(event::PORT_HELD);
            return Bind::Skipped;
        }
    };
    if !*reuse_set {
        if set_socket_option(ctx, SO_REUSEADDR, 1) != 0 {
            return Bind::Failed(outcome::OPTION_REFUSED);
        }
        *reuse_set = true;
    }
    match take_port::<AT_BIND>(ctx, family, table, port) {
        0 => {
            if reused {
                count(event::TIME_WAIT_REUSED);
            }
            Bind::Bound
        }
        e if e == -EADDRINUSE => {
            count(event::PORT_HELD);
            Bind::Skipped
        }
        e => refused(e),
    }
}

/// Takes `port`: `bpf_bind()` from a connect hook ([`bind_port`]), or,
/// from a bind hook, the port the `bind()` asks for rewritten to it (the
/// kernel binds it once the hook returns, to the address asked for).
#[inline(always)]
fn take_port<const AT_BIND: bool>(
    ctx: &SockAddrContext,
    family: Family,
    table: &TableRow,
    port: u16,
) -> i64 {
    if !AT_BIND {
        return bind_port(ctx, family, table, port);
    }
    // SAFETY: `user_port` of a bind hook's context is writable; it holds
    // the port in network byte order in its low 16 bits.
    unsafe { write_volatile(&raw mut (*ctx.sock_addr).user_port, u32::from(port.to_be())) };
    0
}

/// The application's own port sharing on the connecting socket: bit 0
/// `SO_REUSEADDR`, bit 1 `SO_REUSEPORT` (`None`: unreadable).
#[inline(always)]
pub(super) fn port_sharing(ctx: &SockAddrContext) -> Option<u32> {
    let addr = socket_option(ctx, SO_REUSEADDR)?;
    let port = socket_option(ctx, SO_REUSEPORT)?;
    Some(u32::from(addr != 0) | (u32::from(port != 0) << 1))
}

/// When no port bound: `SO_REUSEADDR` back off if this connect set it and
/// the application had not. Failing leaves it set, which only lets later
/// explicit binds share the port.
#[inline(always)]
pub(super) fn restore_sharing(ctx: &SockAddrContext, reuse_set: bool, sharing: u32) {
    if reuse_set && sharing & 1 == 0 {
        let _ = set_socket_option(ctx, SO_REUSEADDR, 0);
    }
}

/// A bind on attempt `attempt`: steered at the first port tried, else
/// retried.
#[inline(always)]
pub(super) fn turn_outcome(attempt: u32) -> u32 {
    if attempt == 0 {
        outcome::STEERED
    } else {
        outcome::RETRIED
    }
}

/// `bpf_bind()` to the table's source address (the route's, or the one the
/// application bound) and `port`. Not inlined: its address stays out of
/// the callers' frames (a both-ends connect binds from [`bind_jointly`]'s,
/// and the kernel allows 512 bytes of stack along a call chain).
#[inline(never)]
pub(super) fn bind_port(ctx: &SockAddrContext, family: Family, table: &TableRow, port: u16) -> i64 {
    if family == Family::Inet {
        let mut addr = SockaddrIn::new(table.src_addr[0], port);
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

/// A bind the kernel refused with `errno` (not for a port in use): counted
/// by errno in `SRAP_BIND_ERRNOS`, and the connect's verdict.
#[inline(always)]
pub(super) fn refused(errno: i64) -> Bind {
    let index = errno.unsigned_abs().min(u64::from(BIND_ERRNOS - 1)) as u32;
    if let Some(counter) = SRAP_BIND_ERRNOS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, valid map memory.
        unsafe { *counter += 1 };
    }
    Bind::Failed(outcome::BIND_REFUSED)
}
