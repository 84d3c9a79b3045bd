//! This host's NICs as the connect hook chooses among them (`--local-nics
//! numa|balance`): which NIC's address a steered connect binds
//! when the application bound none. One home for the rows the agent writes
//! and the choice the hook makes from them, so the host's tests ask the
//! same question the hook does.
//!
//! The plan already has a port table per (destination, local address): an
//! application may bind any of them. The agent numbers the NICs given with
//! `--local-iface` (by name, at most [`MAX_LOCAL_NICS`]) and writes, for
//! each destination's route table, a [`NicTables`] row: which NICs reach
//! that destination (up, an address of its family with a table, and the
//! routing sends that address out by that NIC) and, for each, the table
//! under its address. It also writes which NIC each NUMA node has
//! (`NODE_NICS_MAP`). The hook picks a NIC by the policy
//! ([`numa_choice`], [`balance_choice`]) and swaps the route's table for
//! that NIC's: no second lookup of the destination, and every path after
//! the choice is the route's, so the kernel's verifier walks it once.
//! Whatever is missing, the flow is placed by the route, as without a
//! policy, and counted (`event::NIC_FALLBACK`).
//!
//! The connecting CPU's node is the kernel's own (`bpf_get_numa_node_id()`,
//! `numa_node_id()` of the CPU the hook runs on): no CPU → node row to
//! fill or keep in step with CPU hot-plug, and no lookup.

/// NICs a flow may be placed on (bits of [`NicTables::reach`]).
pub const MAX_LOCAL_NICS: u32 = 8;
/// NUMA nodes with a row in `NODE_NICS_MAP`; a CPU on a node past them is
/// placed by the route.
pub const MAX_NODES: u32 = 64;
/// A node without a NIC (none on it, or its NIC down), and a NIC without
/// a table toward the destination.
pub const NO_NIC: u32 = u32::MAX;

/// `--local-nics`, as `BinderConfig::local_nics` holds it.
pub mod policy {
    /// The route's source address: the hook chooses no NIC.
    pub const ROUTE: u32 = 0;
    /// The NIC on the connecting CPU's NUMA node.
    pub const NUMA: u32 = 1;
    /// The NICs in turn.
    pub const BALANCE: u32 = 2;
}

/// One destination's tables under each NIC's address, indexed by the
/// table of its route entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicTables {
    /// Bit `n`: NIC `n` reaches the destination (its `tables[n]` is set).
    pub reach: u32,
    pub _pad: u32,
    /// The table under NIC `n`'s address ([`NO_NIC`]: none).
    pub tables: [u32; MAX_LOCAL_NICS as usize],
    /// Its local twin (`--steer both`), else `DestValue::NO_LOCAL`.
    pub locals: [u32; MAX_LOCAL_NICS as usize],
}

impl Default for NicTables {
    fn default() -> Self {
        Self {
            reach: 0,
            _pad: 0,
            tables: [NO_NIC; MAX_LOCAL_NICS as usize],
            locals: [NO_NIC; MAX_LOCAL_NICS as usize],
        }
    }
}

impl NicTables {
    /// Records that NIC `nic` reaches the destination through `table` (and
    /// its local twin `local`).
    pub fn set(&mut self, nic: u32, table: u32, local: u32) {
        if nic < MAX_LOCAL_NICS {
            self.reach |= 1 << nic;
            self.tables[nic as usize] = table;
            self.locals[nic as usize] = local;
        }
    }

    /// The table and local twin under NIC `nic` (`None`: it does not
    /// reach the destination).
    #[inline(always)]
    pub fn of(&self, nic: u32) -> Option<(u32, u32)> {
        let at = (nic & (MAX_LOCAL_NICS - 1)) as usize;
        let table = self.tables[at];
        (nic < MAX_LOCAL_NICS && table != NO_NIC).then_some((table, self.locals[at]))
    }
}

/// The NICs of `reach` that are not `down` (`NICS_DOWN_MAP`):
/// a NIC the kernel said went down is out from that notice on, though the
/// rows still name it until the re-plan rewrites them.
#[inline(always)]
pub fn usable(reach: u32, down: u32) -> u32 {
    reach & !down
}

/// Under `numa`: the node's NIC `nic` (`NODE_NICS_MAP`) when it reaches
/// the destination (its bit in `reach`).
#[inline(always)]
pub fn numa_choice(nic: u32, reach: u32) -> Option<u32> {
    if nic < MAX_LOCAL_NICS && reach & (1 << nic) != 0 {
        Some(nic)
    } else {
        None
    }
}

/// Under `balance`: the `turn`-th of the NICs that reach the destination
/// (set bits of `reach`), so successive connects take them in turn.
#[inline(always)]
pub fn balance_choice(reach: u32, turn: u32) -> Option<u32> {
    let reach = reach & ((1 << MAX_LOCAL_NICS) - 1);
    let count = reach.count_ones();
    if count == 0 {
        return None;
    }
    let mut left = turn % count;
    for nic in 0..MAX_LOCAL_NICS {
        if reach & (1 << nic) != 0 {
            if left == 0 {
                return Some(nic);
            }
            left -= 1;
        }
    }
    None
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, `Copy`, `u32`s only, no padding.
unsafe impl aya::Pod for NicTables {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_takes_the_reaching_nics_in_turn() {
        let picks: [Option<u32>; 6] = core::array::from_fn(|t| balance_choice(0b1010, t as u32));
        assert_eq!(picks, [1, 3, 1, 3, 1, 3].map(Some));
        assert_eq!(balance_choice(0, 5), None);
        assert_eq!(
            balance_choice(1 << MAX_LOCAL_NICS, 0),
            None,
            "past the NICs"
        );
    }

    #[test]
    fn numa_takes_the_nodes_nic_only_when_it_reaches() {
        assert_eq!(numa_choice(1, 0b10), Some(1));
        assert_eq!(numa_choice(0, 0b10), None);
        assert_eq!(numa_choice(NO_NIC, u32::MAX), None);
    }

    #[test]
    fn a_nic_down_is_out_of_either_choice() {
        let reach = usable(0b111, 0b010);
        assert_eq!(reach, 0b101);
        assert_eq!(numa_choice(1, reach), None, "the node's NIC is down");
        let picks: [Option<u32>; 4] = core::array::from_fn(|t| balance_choice(reach, t as u32));
        assert_eq!(picks, [0, 2, 0, 2].map(Some));
    }

    #[test]
    fn a_row_gives_each_reaching_nics_table() {
        let mut row = NicTables::default();
        row.set(2, 7, 8);
        row.set(MAX_LOCAL_NICS, 9, 9);
        assert_eq!(row.reach, 0b100);
        assert_eq!(row.of(2), Some((7, 8)));
        assert_eq!(row.of(1), None);
        assert_eq!(row.of(2 + MAX_LOCAL_NICS), None, "past the NICs");
    }
}
