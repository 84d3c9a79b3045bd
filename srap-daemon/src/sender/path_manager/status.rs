//! The path manager in the agent's status: its counters and a row per
//! followed connection, made from the connection table and the times the
//! manager took to follow each move. Pure.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use srap_host::mptcp_pm::PathManagerKind;
use srap_status::sender::{FollowedRow, FollowedSubflowRow, PathManagerRow};

use super::connections::{Connection, Connections, FollowedNic, Owner};

/// How long each connection's moves take to follow: from the first
/// sample read on a new node to the sample that moved its flags.
#[derive(Debug, Default)]
pub struct MoveTimes {
    /// A move under way: when its first sample on the new node was taken.
    began: BTreeMap<u32, Instant>,
    /// The last move followed, in milliseconds.
    last: BTreeMap<u32, u64>,
}

impl MoveTimes {
    /// Takes one sample of `token`'s reads at `now`, a sample period
    /// after the one before: `pending` when a new node leads but is not
    /// believed yet, `moved` when it just was. The first sample on the
    /// new node counted the period before it, so a move takes that
    /// period more than the time between the samples.
    pub fn sampled(
        &mut self,
        token: u32,
        now: Instant,
        period: Duration,
        pending: bool,
        moved: bool,
    ) {
        if moved {
            let began = self.began.remove(&token).unwrap_or(now);
            let took = now.duration_since(began) + period;
            self.last.insert(token, took.as_millis() as u64);
        } else if pending {
            self.began.entry(token).or_insert(now);
        } else {
            self.began.remove(&token);
        }
    }

    /// Forgets the connections no longer in `table`.
    pub fn prune(&mut self, table: &Connections) {
        self.began.retain(|t, _| table.by_token.contains_key(t));
        self.last.retain(|t, _| table.by_token.contains_key(t));
    }
}

/// The status row of the path manager over `table`.
pub fn row(
    table: &Connections,
    before: PathManagerKind,
    nics: &[FollowedNic],
    times: &MoveTimes,
) -> PathManagerRow {
    let conns = table.by_token.values();
    PathManagerRow {
        before: match before {
            PathManagerKind::Kernel => "kernel",
            PathManagerKind::Userspace => "userspace",
        }
        .into(),
        connections: table.by_token.len(),
        moves: conns.clone().map(|c| c.reader.moves).sum(),
        flips: table.flips,
        subflows_made: table.subflows_made,
        refused: conns.clone().map(|c| c.refused).sum(),
        followed: conns
            .filter(|c| matches!(c.owner, Owner::Steered | Owner::Adopted))
            .map(|c| followed(c, nics, times.last.get(&c.token).copied()))
            .collect(),
    }
}

fn followed(conn: &Connection, nics: &[FollowedNic], last_move_ms: Option<u64>) -> FollowedRow {
    FollowedRow {
        token: conn.token,
        server_side: conn.server_side,
        reader_node: conn.reader.node(),
        moves: conn.reader.moves,
        last_move_ms,
        subflows: conn
            .subflows
            .iter()
            .map(|s| FollowedSubflowRow {
                local: s.local,
                remote: s.remote,
                backup: s.backup,
                nic: nics
                    .iter()
                    .find(|n| n.addresses.contains(&s.local.ip()))
                    .map(|n| n.name.clone()),
            })
            .collect(),
        unplaced: conn.unplaced.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    #[test]
    fn a_move_takes_from_its_first_sample_on_the_new_node_to_the_flip() {
        let (mut times, start) = (MoveTimes::default(), Instant::now());
        times.sampled(7, start, TICK, false, false);
        times.sampled(7, start + TICK, TICK, true, false);
        times.sampled(7, start + 2 * TICK, TICK, false, true);
        assert_eq!(times.last.get(&7), Some(&200), "two samples of 100 ms");
        assert!(times.began.is_empty());
    }

    #[test]
    fn a_blip_that_went_back_is_no_move_and_starts_nothing() {
        let (mut times, start) = (MoveTimes::default(), Instant::now());
        times.sampled(7, start, TICK, true, false);
        times.sampled(7, start + TICK, TICK, false, false);
        times.sampled(7, start + 5 * TICK, TICK, true, false);
        times.sampled(7, start + 6 * TICK, TICK, false, true);
        assert_eq!(times.last.get(&7), Some(&200), "timed from the second lead");
    }
}
