//! The receiver's NICs as the connect hook spreads over them
//! (`--receiver-nics spread`): a connect toward one address of a
//! receiver of several NICs may be sent to another of its addresses, so a
//! transfer's flows enter by every NIC. One home for the row the agent
//! writes and the choice the hook makes from it, so the host's tests ask
//! the same question the hook does.
//!
//! Each receiver address is planned as its own destination, with the RSS
//! description of the NIC that holds it and a binder row (occupancy) of
//! its own: a flow's slot is then a (NIC, CPU) pair. For each asked
//! destination (receiver address and a port that a listener accepts
//! there) the agent writes a [`SpreadRow`] under the asked destination's
//! key with the source left zero: the addresses of the same receiver that
//! accept that port, whose NIC is up and that this host has a plan toward,
//! the asked one first. The hook takes them in turn ([`spread_choice`]),
//! looks the chosen one up as a destination of its own, rewrites the
//! connect's address and places the port on that address's own slots. A
//! socket whose application bound an address is never moved; nor is one
//! whose row is missing or lists one address only. The address asked for
//! is given back by `getpeername()` (the binder's `getpeername4/6`
//! programs).

/// Addresses one row may spread over (the asked one included).
pub const MAX_SPREAD: u32 = 8;

/// `--receiver-nics`, as `BinderConfig::receiver_nics` holds it.
pub mod mode {
    /// The address the application asked for: no row is looked up.
    pub const ASKED: u32 = 0;
    /// The receiver's accepting addresses, in turn.
    pub const SPREAD: u32 = 1;
}

/// The addresses a steered connect toward one receiver address and port
/// may be sent to, in turn.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpreadRow {
    /// Connects that took a turn here (one compare-and-exchange each: two
    /// racing connects may share a turn, never fail).
    pub turn: u64,
    /// Addresses in use, 1 to [`MAX_SPREAD`] (0: the row is empty).
    pub count: u32,
    pub _pad: u32,
    /// The addresses, in the form of `crate::binder::DestKey::addr`; the
    /// first is the address asked for.
    pub addrs: [[u32; 4]; MAX_SPREAD as usize],
}

impl SpreadRow {
    /// The row of `addrs` (the asked one first); past [`MAX_SPREAD`] left
    /// out.
    pub fn of(addrs: &[[u32; 4]]) -> Self {
        let mut row = Self::default();
        for (i, addr) in addrs.iter().take(MAX_SPREAD as usize).enumerate() {
            row.addrs[i] = *addr;
            row.count = i as u32 + 1;
        }
        row
    }
}

/// Which of a row's `count` addresses the connect that takes turn `turn`
/// goes to: in turn, so consecutive connects alternate and `n` flows split
/// as evenly as `n` allows. Always below [`MAX_SPREAD`] (the hook indexes
/// with it); 0 for an empty row.
#[inline(always)]
pub fn spread_choice(turn: u64, count: u32) -> u32 {
    if count == 0 {
        return 0;
    }
    let count = count.min(MAX_SPREAD);
    (turn % u64::from(count)) as u32 & (MAX_SPREAD - 1)
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, `Copy`, integers and arrays of integers with no
// implicit padding (8 + 4 + 4 + 8 × 16 bytes).
unsafe impl aya::Pod for SpreadRow {}

/// Receiver addresses that may be marked failing at once.
pub const MAX_FAILING: u32 = 64;

/// A receiver address a moved connect's SYN got no answer from, as the
/// `sock_ops` program marks it at the SYN's first retransmit timeout
/// (about 1 s after it left): while the mark stands the connect hook sends
/// no connect there (the asked address is kept), whatever the rows say.
/// Marked by the kernel at once, read and re-admitted by the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpreadFailing {
    /// The address the connect that found it failing asked for, in the
    /// form of `crate::binder::DestKey::addr`.
    pub asked: [u32; 4],
    /// `CLOCK_MONOTONIC` of the first unanswered SYN (`bpf_ktime_get_ns`).
    pub since_ns: u64,
    /// Moved connects whose SYN got no answer there since it was marked.
    pub syns: u32,
    /// The port the first of them asked for (host order).
    pub port: u32,
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, `Copy`, integers with no implicit padding
// (16 + 8 + 4 + 4 bytes).
unsafe impl aya::Pod for SpreadFailing {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_alternate_over_the_addresses() {
        let picks: Vec<u32> = (0..6).map(|t| spread_choice(t, 2)).collect();
        assert_eq!(picks, [0, 1, 0, 1, 0, 1]);
        let three: Vec<u32> = (0..16).map(|t| spread_choice(t, 3)).collect();
        for a in 0..3 {
            let n = three.iter().filter(|p| **p == a).count();
            assert!((5..=6).contains(&n), "address {a} took {n} of 16");
        }
        assert_eq!(spread_choice(7, 0), 0);
        assert!(spread_choice(u64::MAX, 99) < MAX_SPREAD);
    }

    #[test]
    fn a_row_keeps_the_asked_address_first_and_at_most_max() {
        let addrs: Vec<[u32; 4]> = (1..=10).map(|n| [n, 0, 0, 0]).collect();
        let row = SpreadRow::of(&addrs);
        assert_eq!(row.count, MAX_SPREAD);
        assert_eq!(row.addrs[0], [1, 0, 0, 0]);
        assert_eq!(SpreadRow::of(&[]).count, 0);
        assert_eq!(size_of::<SpreadRow>(), 16 + 16 * MAX_SPREAD as usize);
        assert_eq!(size_of::<SpreadFailing>(), 32);
    }
}
