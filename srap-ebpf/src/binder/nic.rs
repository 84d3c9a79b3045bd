//! Choose this host's NIC (`--local-nics numa|balance`,
//! `srap_common::local_nics`). A connect the application bound no address
//! for takes the table of the NIC the policy chooses — the one on the
//! connecting CPU's NUMA node, or the NICs in turn — when that NIC reaches
//! the destination: the table binds the NIC's address with a port placed
//! as on any steered connect. Otherwise the route's table stands, and the
//! connect counts `nic_fallback`.
//!
//! The choice is made in a subprogram that writes the table it chose to
//! this CPU's scratch row, whichever way it went, and the hook reads it
//! back: the kernel's verifier then meets the later steps in one state for
//! every way the choice can go and walks them once. (Handed back in
//! registers, each way would keep its own knowledge of the values, and the
//! verifier would walk `bind_steered` once per way: past its million
//! instructions.)

use core::ptr::{read_volatile, write_volatile};

use aya_ebpf::{helpers::generated::bpf_get_numa_node_id, programs::SockAddrContext};
use srap_common::{
    binder::{DestValue, event},
    family::Family,
    local_nics::{NicTables, balance_choice, numa_choice, policy, usable},
};

use super::{
    claim::exchange,
    config,
    context::{field, sock_of},
    maps::{
        SRAP_NIC_SCRATCH, SRAP_NIC_TABLES, SRAP_NIC_TURN, SRAP_NICS_DOWN, SRAP_NODE_NICS, count,
    },
};

/// `dest` with the table (and local twin) of the NIC the policy chooses,
/// or as it is: when the application bound an address (it keeps it),
/// under `route`, or (counted) when the policy finds no NIC that reaches
/// the destination. `None` only without this CPU's scratch row (never,
/// once loaded).
#[inline(always)]
pub(super) fn choose_nic(
    ctx: &SockAddrContext,
    family: Family,
    dest: DestValue,
) -> Option<DestValue> {
    if config::local_nics() == policy::ROUTE {
        return Some(dest);
    }
    let scratch = SRAP_NIC_SCRATCH.get_ptr_mut(0)?;
    choose_into(
        ctx,
        family == Family::Inet,
        (dest.table, dest.local_table),
        scratch,
    );
    // SAFETY: this CPU's scratch row, just written.
    let (table, local_table) =
        unsafe { (read_volatile(&(*scratch)[0]), read_volatile(&(*scratch)[1])) };
    Some(DestValue {
        table,
        local_table,
        ..dest
    })
}

/// Writes to `scratch` the chosen NIC's table and local twin, or the
/// route's (`route_table`, `route_local`). Not inlined: see the module.
/// Whether the application bound an address is read here again, not
/// passed: a branch on the hook's own copy would split every later step's
/// walk in two (bound, unbound).
#[inline(never)]
fn choose_into(
    ctx: &SockAddrContext,
    v4: bool,
    (route_table, route_local): (u32, u32),
    scratch: *mut [u32; 2],
) {
    let config = if bound_any(ctx, v4) {
        None
    } else {
        Some((config::local_nics(), nics_down()))
    };
    let chosen = match config {
        Some((policy::NUMA, down)) => Some(nic_tables(route_table, true, down)),
        Some((policy::BALANCE, down)) => Some(nic_tables(route_table, false, down)),
        _ => None,
    };
    let (table, local) = match chosen {
        Some(Some(tables)) => {
            count(event::NIC_CHOSEN);
            tables
        }
        Some(None) => {
            count(event::NIC_FALLBACK);
            (route_table, route_local)
        }
        None => (route_table, route_local),
    };
    // SAFETY: this CPU's scratch row.
    unsafe {
        write_volatile(&raw mut (*scratch)[0], table);
        write_volatile(&raw mut (*scratch)[1], local);
    }
}

/// The chosen NIC's table and local twin toward the destination whose
/// route table is `route_table`: the node's NIC (`numa`) or the next in
/// turn (`balance`), when it reaches the destination and is not among
/// the NICs `down` now (`SRAP_NICS_DOWN`).
#[inline(always)]
fn nic_tables(route_table: u32, numa: bool, down: u32) -> Option<(u32, u32)> {
    let row: &NicTables = SRAP_NIC_TABLES.get(route_table)?;
    let reach = usable(row.reach, down);
    let nic = if numa {
        numa_choice(node_nic()?, reach)
    } else {
        balance_choice(reach, take_turn()?)
    }?;
    row.of(nic)
}

/// Whether the socket has a source address (a dual-stack socket's
/// `::ffff:a.b.c.d` included; unbound, every word is zero).
#[inline(always)]
pub(super) fn bound_any(ctx: &SockAddrContext, v4: bool) -> bool {
    let sk = sock_of(ctx);
    // SAFETY: field addresses within the kernel's bpf_sock.
    unsafe {
        if v4 {
            field(&raw const (*sk).src_ip4) != 0
        } else {
            (field(&raw const (*sk).src_ip6[0])
                | field(&raw const (*sk).src_ip6[1])
                | field(&raw const (*sk).src_ip6[2])
                | field(&raw const (*sk).src_ip6[3]))
                != 0
        }
    }
}

/// The NICs down now, by the agent's link watcher (none without its row).
#[inline(always)]
fn nics_down() -> u32 {
    SRAP_NICS_DOWN.get(0).copied().unwrap_or(0)
}

/// The NIC on the connecting CPU's NUMA node.
#[inline(always)]
fn node_nic() -> Option<u32> {
    // SAFETY: a helper of the base set, no arguments.
    let node = unsafe { bpf_get_numa_node_id() } as u32;
    SRAP_NODE_NICS.get(node).copied()
}

/// The `balance` policy's next turn: taken with one compare-and-exchange
/// (the BPF target here has no fetching add), so two connects racing for
/// it may share a turn, never fail.
#[inline(always)]
fn take_turn() -> Option<u32> {
    let word = SRAP_NIC_TURN.get_ptr_mut(0)?;
    // SAFETY: valid, aligned map memory.
    let turn = unsafe { read_volatile(word) };
    let _ = exchange(word, turn, turn.wrapping_add(1));
    Some(turn as u32)
}
