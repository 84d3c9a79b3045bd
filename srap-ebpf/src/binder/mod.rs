//! The port binder: on `connect()` of a steered workload's socket of a
//! steered protocol (TCP: `srap_common::binder::STEERED`), bind a source
//! port that the receiver's RSS puts on its least-occupied CPU.
//!
//! The tables and the arithmetic are described in `srap_common::binder`,
//! the claim and release of a CPU slot in `srap_common::occupancy`. Every
//! path returns 1 ("allow"): when anything is missing or fails, the socket
//! is left as it was and the kernel picks the port, so SRAP never fails a
//! connect. Each connect counts one verdict in `SRAP_STATS`
//! (`srap_common::binder::outcome`), each failure under its own name: the
//! steps return it, and the hook counts it, here and nowhere else. What
//! happened on the way counts as an `event` beside it, where it happened.
//!
//! A connect goes through steps named by what they do, one file each, in
//! the order [`connect::connect`] runs them:
//!
//! * read the connect ([`context`]): the socket's type and protocol, its
//!   destination, its bound source address and port;
//! * classify it ([`classify`]): is the socket of a steered protocol (TCP:
//!   a UDP `connect()` is `protocol_not_steered`), is the destination
//!   steered, and is the port SRAP's to choose;
//! * choose the receiver's NIC ([`spread`], under `--receiver-nics
//!   spread`): another address of the receiver in turn, the connect's
//!   address rewritten to it and given back by `getpeername()`
//!   (`getpeername4/6`);
//! * choose this host's NIC ([`nic`], under `--local-nics numa|balance`):
//!   the destination's entry under the address of the NIC the policy
//!   chooses (the route's when it finds none, counted);
//! * claim the least-occupied CPU slot of the receiver, and of this host
//!   with `--steer both` ([`claim`]);
//! * pick the slot's next port from the plan's tables ([`ports`]);
//! * bind it unless its tuple is taken, sharing ports by tuple ([`bind`]),
//!   the tuple looked up by the socket's protocol ([`tuple`]);
//! * record the socket's slots, so closing it releases exactly what it
//!   claimed ([`record`]).
//!
//! A further subflow of an MPTCP connection, which the kernel binds with
//! port 0 before it connects, is steered at that bind by the same steps
//! ([`subflow`]) toward the destination the kernel's path manager passes
//! its own call, which two tracing programs record ([`path_manager`]): its
//! connect then counts `subflow_steered`.
//!
//! Closing releases through one step, [`record::release`], from two
//! programs, a file each: [`sock_release`] (`cgroup/sock_release`, an
//! application's socket) and [`sock_ops`] (`srap_tcp_close`, at the TCP
//! close of the sockets the release hook never sees: MPTCP's subflows).
//! Whichever runs first frees the socket; the other finds no record.
//!
//! [`maps`] declares the maps and counts in `SRAP_STATS`, [`sockopt`]
//! reads and sets socket options.
//! Which functions are inlined and which stay subprograms is part of the
//! design: the kernel's verifier must walk every path of `connect4` and
//! `connect6` (and of `bind4` and `bind6`, which steer MPTCP subflows)
//! within a million instructions, and the connect hooks take a large share
//! of it (docs/benchmarks.md has one run's counts). A step's data kept
//! across a subprogram call through the stack, or a lookup into every way
//! a bind can end, would double their walk (so would a branch on whether
//! the application bound an address: [`nic`] hands its choice back through
//! a scratch row). The steps import downwards only, never from this file:
//! `subflow` → `connect`, `path_manager`, `tuple`; `connect` → every step;
//! `sock_ops`, `sock_release` → `record`, `spread`; `spread` → `classify`,
//! `nic`, `claim`; `classify` → `record`; `record` → `claim`, `sockopt`;
//! `bind` → `ports`, `claim`, `sockopt`, `tuple`; `nic`, `ports` →
//! `claim`; and each of them → `maps`, most also → `context`, `config`.
//! A protocol is a const generic of the steps after `classify` (the
//! socket's, the kernel's number): each steered protocol's walk is its
//! own, with no dispatch in it. `cargo run -p
//! srap-tests --example kernel_verifier_walk` prints what each program
//! costs it.
//!
//! # Glossary
//!
//! * **slot**: one CPU of a receiver (or of this host), an index into its
//!   occupancy row; its **word** holds its open flows, a claim lock and its
//!   port rotation's turn.
//! * **level**: 0, 1, 2 or 3-or-more flows; one bitmap of slots per level
//!   finds a least-occupied slot in constant time.
//! * **grant**: the slots a receiver agent lets this sender use, with the
//!   flows other senders hold on each (their **base** level).
//! * **turn**: a slot's count of ports handed out; it selects an entry of
//!   the slot and, every **round** through the slot's entries, the next
//!   member of that entry's coset.
//! * **entry**: an indirection-table index that lands on the slot's CPU.
//! * **coset**: the source ports whose hash selects one entry toward one
//!   destination port (a coset of the hash's kernel over GF(2)); its
//!   **members** are its ports, ascending.
//! * **joint**: one port placed on a receiver entry and on an entry of
//!   this host's NIC at once (`--steer both`).
//! * **record**: the socket table's row for one socket: the slots it holds.

mod bind;
mod claim;
mod classify;
mod config;
mod connect;
mod context;
mod maps;
mod nic;
mod path_manager;
mod ports;
/// Public to the crate for the lab object's drift injector (`crate::inject`),
/// which records a socket as the hooks do.
pub(crate) mod record;
mod sock_ops;
mod sock_release;
mod sockopt;
mod spread;
mod subflow;
mod tuple;

use aya_ebpf::{
    macros::{cgroup_sock_addr, fentry, fexit},
    programs::{FEntryContext, FExitContext, SockAddrContext},
};
use srap_common::family::Family;

/// What the occupancy audit's repair programs (`crate::repair`) do as the
/// hooks do.
pub(crate) use claim::{MapRow, release_slot};
pub(crate) use record::forget;

#[cgroup_sock_addr(connect4)]
pub fn srap_connect4(ctx: SockAddrContext) -> i32 {
    maps::count(connect::connect(&ctx, Family::Inet));
    1
}

#[cgroup_sock_addr(connect6)]
pub fn srap_connect6(ctx: SockAddrContext) -> i32 {
    maps::count(connect::connect(&ctx, Family::Inet6));
    1
}

/// `getpeername()` of a socket [`spread`] moved: the IPv4 address its
/// application asked for.
#[cgroup_sock_addr(getpeername4)]
pub fn srap_getpeername4(ctx: SockAddrContext) -> i32 {
    spread::peer_name(&ctx, Family::Inet);
    1
}

/// As [`srap_getpeername4`], for `AF_INET6` sockets (a dual-stack one
/// toward an IPv4 receiver included).
#[cgroup_sock_addr(getpeername6)]
pub fn srap_getpeername6(ctx: SockAddrContext) -> i32 {
    spread::peer_name(&ctx, Family::Inet6);
    1
}

#[cgroup_sock_addr(bind4)]
pub fn srap_bind4(ctx: SockAddrContext) -> i32 {
    if !config::steers_mptcp() || !subflow::steer_at_bind::<false>(&ctx) {
        record::note_port_zero_bind(&ctx);
    }
    1
}

#[cgroup_sock_addr(bind6)]
pub fn srap_bind6(ctx: SockAddrContext) -> i32 {
    if !config::steers_mptcp() || !subflow::steer_at_bind::<true>(&ctx) {
        record::note_port_zero_bind(&ctx);
    }
    1
}

/// The entry of the kernel path manager's `__mptcp_subflow_connect(sk,
/// local, remote)`: the subflow's destination, for the bind hooks
/// ([`path_manager`]).
#[fentry(function = "__mptcp_subflow_connect")]
pub fn srap_subflow_connect(ctx: FEntryContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let remote: *const u8 = ctx.arg(2);
    path_manager::note_remote(sk, remote);
    0
}

/// Its exit: the destination forgotten.
#[fexit(function = "__mptcp_subflow_connect")]
pub fn srap_subflow_connected(_ctx: FExitContext) -> i32 {
    path_manager::forget_remote();
    0
}
