//! The occupancy audit's judgement, without I/O: given what the agent read
//! (slot words before and after the socket table, the table's records, the
//! kernel's open sockets), what disagrees, and which of it is stable enough
//! to repair.
//!
//! The hooks change occupancy in two steps that are never one atomic act:
//! a connect claims its slot (count + 1) *before* it writes the socket's
//! record, and a close forgets the record *before* it releases the slot.
//! So a reader can always catch a count that differs from the records for
//! a few microseconds. Only what holds across two audits (an interval
//! apart) is repaired:
//!
//! * a **stale record** (its cookie is no open socket) seen in two
//!   consecutive audits, the same row holding the same slots both times;
//! * a **count mismatch** whose slot word (count, lock *and* turn: every
//!   claim takes a turn) was the same in all four reads of two consecutive
//!   audits, disagreeing the same way both times: no claim or release
//!   touched the slot in between, so no record can be in flight.

use std::collections::{BTreeMap, HashMap, HashSet};

use srap_common::binder::{LOCAL_ROW, SocketRecord, slot_word};

/// What one audit read.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Slot words by (binder row, slot), read before the socket table.
    pub before: BTreeMap<(u32, u32), u64>,
    /// The same words read again after the kernel's sockets.
    pub after: BTreeMap<(u32, u32), u64>,
    /// The socket table's rows in use: (row index, cookie, slots held).
    pub records: Vec<(u32, u64, SocketRecord)>,
    /// Cookies of the open sockets (full, held by an application) of every
    /// namespace the steered cgroup uses; `None` when some namespace could
    /// not be read (then no record is judged stale).
    pub open: Option<HashSet<u64>>,
}

/// A socket record whose cookie is no open socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleRecord {
    /// Its row in the socket table.
    pub index: u32,
    pub cookie: u64,
    pub held: SocketRecord,
}

/// A slot whose flow count differs from the records that hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CountMismatch {
    pub receiver: u32,
    pub slot: u32,
    /// The slot word, the same before and after the table was read.
    pub word: u64,
    /// Records holding the slot: the count it should have.
    pub records: u32,
}

impl CountMismatch {
    /// The count the slot word says.
    pub fn flows(&self) -> u32 {
        slot_word::flows(self.word)
    }
}

/// What one snapshot shows, stable or not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub stale: Vec<StaleRecord>,
    pub mismatches: Vec<CountMismatch>,
}

/// The disagreements of one snapshot. A slot whose word changed between
/// its two reads, or was locked, is skipped: a hook was at work there.
pub fn examine(snapshot: &Snapshot) -> Findings {
    let stale = match &snapshot.open {
        Some(open) => snapshot
            .records
            .iter()
            .filter(|(_, cookie, _)| !open.contains(cookie))
            .map(|&(index, cookie, held)| StaleRecord {
                index,
                cookie,
                held,
            })
            .collect(),
        None => Vec::new(),
    };
    let holders = holders(&snapshot.records);
    let mut mismatches = Vec::new();
    for (&(receiver, slot), &word) in &snapshot.before {
        if snapshot.after.get(&(receiver, slot)) != Some(&word) || word & slot_word::LOCK != 0 {
            continue;
        }
        let records = holders.get(&(receiver, slot)).copied().unwrap_or(0);
        if slot_word::flows(word) != records {
            mismatches.push(CountMismatch {
                receiver,
                slot,
                word,
                records,
            });
        }
    }
    // A slot a record holds whose word was not read (a row outside the
    // plan) is not judged: the agent reads the rows records name.
    Findings { stale, mismatches }
}

/// Records holding each (binder row, slot): a receiver slot, and this
/// host's slot (row [`LOCAL_ROW`]) with both ends planned.
fn holders(records: &[(u32, u64, SocketRecord)]) -> HashMap<(u32, u32), u32> {
    let mut out = HashMap::new();
    for (_, _, held) in records {
        if held.receiver != SocketRecord::NONE {
            *out.entry((held.receiver, held.slot)).or_default() += 1;
        }
        if held.local != SocketRecord::NONE {
            *out.entry((LOCAL_ROW, held.local)).or_default() += 1;
        }
    }
    out
}

/// The binder rows an audit reads: the plan's, and every row a record
/// names.
pub fn rows_to_read(plan_rows: &[u32], records: &[(u32, u64, SocketRecord)]) -> Vec<u32> {
    let mut rows: std::collections::BTreeSet<u32> = plan_rows.iter().copied().collect();
    for (_, _, held) in records {
        if held.receiver != SocketRecord::NONE {
            rows.insert(held.receiver);
        }
        if held.local != SocketRecord::NONE {
            rows.insert(LOCAL_ROW);
        }
    }
    rows.into_iter().collect()
}

/// The last audit's findings, to tell stable ones from a hook caught at
/// work.
#[derive(Debug, Default)]
pub struct Stability {
    /// (row, cookie, receiver, slot, local) of each stale record.
    stale: HashSet<(u32, u64, u32, u32, u32)>,
    mismatches: HashSet<CountMismatch>,
}

impl Stability {
    /// Of `now`'s findings, those the previous audit found too (the same
    /// record, the same slot word and record count); remembers `now` for
    /// the next audit.
    pub fn confirm(&mut self, now: &Findings) -> Findings {
        let stable = Findings {
            stale: now
                .stale
                .iter()
                .filter(|s| self.stale.contains(&key(s)))
                .copied()
                .collect(),
            mismatches: now
                .mismatches
                .iter()
                .filter(|m| self.mismatches.contains(m))
                .copied()
                .collect(),
        };
        self.stale = now.stale.iter().map(key).collect();
        self.mismatches = now.mismatches.iter().copied().collect();
        stable
    }

    /// Forgets everything seen (after repairs: what they touched must be
    /// seen twice afresh).
    pub fn clear(&mut self) {
        self.stale.clear();
        self.mismatches.clear();
    }
}

/// What makes a stale record the same one in two audits.
fn key(s: &StaleRecord) -> (u32, u64, u32, u32, u32) {
    (
        s.index,
        s.cookie,
        s.held.receiver,
        s.held.slot,
        s.held.local,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use srap_common::binder::FIRST_RECEIVER_ROW;

    const TURN: u64 = slot_word::TURN;

    fn held(receiver: u32, slot: u32) -> SocketRecord {
        SocketRecord {
            receiver,
            slot,
            local: SocketRecord::NONE,
            _pad: 0,
        }
    }

    /// Row 0's slots 0..4 with `flows` each, turn 5, read the same twice.
    fn words(flows: [u64; 4]) -> BTreeMap<(u32, u32), u64> {
        (0..4)
            .map(|s| ((0, s), flows[s as usize] + 5 * TURN))
            .collect()
    }

    fn snapshot(flows: [u64; 4], records: Vec<(u32, u64, SocketRecord)>, open: &[u64]) -> Snapshot {
        Snapshot {
            before: words(flows),
            after: words(flows),
            records,
            open: Some(open.iter().copied().collect()),
        }
    }

    #[test]
    fn occupancy_that_matches_its_open_sockets_has_no_findings() {
        let records = vec![
            (10, 100, held(0, 1)),
            (11, 101, held(0, 1)),
            (12, 102, held(0, 3)),
        ];
        let snap = snapshot([0, 2, 0, 1], records, &[100, 101, 102, 555]);
        assert_eq!(examine(&snap), Findings::default());
    }

    #[test]
    fn a_record_of_a_closed_socket_is_stale_and_its_slot_still_agrees() {
        // The leak the audit repairs: the socket closed, its second record
        // stayed, and so did the flow it counts.
        let records = vec![(10, 100, held(0, 1)), (11, 101, held(0, 2))];
        let snap = snapshot([0, 1, 1, 0], records, &[100]);
        let found = examine(&snap);
        assert_eq!(
            found.stale,
            vec![StaleRecord {
                index: 11,
                cookie: 101,
                held: held(0, 2)
            }]
        );
        assert!(found.mismatches.is_empty(), "{found:?}");
    }

    #[test]
    fn a_count_without_records_is_a_mismatch() {
        let snap = snapshot([0, 3, 0, 0], vec![(10, 100, held(0, 1))], &[100]);
        let found = examine(&snap);
        assert_eq!(found.mismatches.len(), 1);
        let m = found.mismatches[0];
        assert_eq!((m.receiver, m.slot, m.flows(), m.records), (0, 1, 3, 1));
        assert!(found.stale.is_empty());
    }

    #[test]
    fn a_slot_a_hook_touched_between_the_reads_is_not_judged() {
        // A claim between the reads: count and turn moved; its record may
        // or may not be in the table read between them.
        let mut snap = snapshot([0, 0, 0, 0], vec![], &[]);
        snap.after.insert((0, 2), 1 + 6 * TURN);
        // A locked slot: a hook is moving its level bits.
        snap.before.insert((0, 3), 1 | slot_word::LOCK | (5 * TURN));
        snap.after.insert((0, 3), 1 | slot_word::LOCK | (5 * TURN));
        assert_eq!(examine(&snap), Findings::default());
    }

    #[test]
    fn without_every_namespace_read_no_record_is_stale() {
        let mut snap = snapshot([0, 1, 0, 0], vec![(10, 100, held(0, 1))], &[]);
        snap.open = None;
        assert!(examine(&snap).stale.is_empty());
    }

    #[test]
    fn this_hosts_slots_count_their_records_too() {
        let both = SocketRecord {
            receiver: 0,
            slot: 1,
            local: 7,
            _pad: 0,
        };
        let mut snap = snapshot([0, 1, 0, 0], vec![(10, 100, both)], &[100]);
        snap.before.insert((LOCAL_ROW, 7), 1);
        snap.after.insert((LOCAL_ROW, 7), 1);
        assert_eq!(examine(&snap), Findings::default());
        // A receiver's row (rows from 1) and this host's (row 0) are read.
        let toward_first = SocketRecord {
            receiver: FIRST_RECEIVER_ROW,
            ..both
        };
        assert_eq!(
            rows_to_read(&[FIRST_RECEIVER_ROW], &[(10, 100, toward_first)]),
            vec![LOCAL_ROW, FIRST_RECEIVER_ROW]
        );
        // A record bound at `bind(addr, 0)` holds no slot.
        assert_eq!(
            rows_to_read(&[], &[(1, 2, SocketRecord::BOUND_AT_BIND)]),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn only_what_two_audits_agree_on_is_stable() {
        let mut stability = Stability::default();
        let first = examine(&snapshot([0, 1, 2, 0], vec![(11, 101, held(0, 1))], &[]));
        assert_eq!(first.stale.len(), 1);
        assert_eq!(first.mismatches.len(), 1, "slot 2 counts 2, no record");
        assert_eq!(stability.confirm(&first), Findings::default(), "seen once");
        // Next audit: the same stale record; slot 2 took a turn (a claim
        // and a release): not the same mismatch.
        let mut snap = snapshot([0, 1, 2, 0], vec![(11, 101, held(0, 1))], &[]);
        snap.before.insert((0, 2), 2 + 6 * TURN);
        snap.after.insert((0, 2), 2 + 6 * TURN);
        let stable = stability.confirm(&examine(&snap));
        assert_eq!(stable.stale, first.stale);
        assert!(stable.mismatches.is_empty(), "{stable:?}");
        // A third with slot 2 unchanged since the second: now stable.
        let stable = stability.confirm(&examine(&snap));
        assert_eq!(stable.mismatches.len(), 1);
        assert_eq!(stable.mismatches[0].word, 2 + 6 * TURN);
        stability.clear();
        assert_eq!(stability.confirm(&examine(&snap)), Findings::default());
    }

    #[test]
    fn a_record_that_moved_rows_is_not_the_same_stale_record() {
        let mut stability = Stability::default();
        stability.confirm(&examine(&snapshot(
            [0, 1, 0, 0],
            vec![(11, 101, held(0, 1))],
            &[],
        )));
        let moved = examine(&snapshot([0, 1, 0, 0], vec![(12, 101, held(0, 1))], &[]));
        assert!(stability.confirm(&moved).stale.is_empty());
    }
}
