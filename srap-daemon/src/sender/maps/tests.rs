//! The maps' pure parts: which destinations a refill writes and removes,
//! and how the binder's counters read.

use std::collections::BTreeSet;

use srap_common::binder::{COUNTERS, DestKey, DestValue, outcome};

use super::{BinderStats, dest_changes};

fn key(port: u32) -> DestKey {
    DestKey {
        family: 2,
        port,
        ..DestKey::default()
    }
}

fn toward(receiver: u32, table: u32) -> DestValue {
    DestValue {
        table,
        receiver,
        ..DestValue::default()
    }
}

/// Receiver 1 at ports 80 and 81, receiver 2 at port 82.
fn dests() -> Vec<(DestKey, DestValue)> {
    vec![
        (key(80), toward(1, 0)),
        (key(81), toward(1, 1)),
        (key(82), toward(2, 2)),
    ]
}

#[test]
fn nothing_paused_writes_every_destination_and_drops_the_unplanned() {
    let dests = dests();
    let (active, stale) = dest_changes(&dests, &BTreeSet::new(), [key(80), key(99)]);
    let written: Vec<u32> = active.iter().map(|(k, _)| k.port).collect();
    assert_eq!(written, vec![80, 81, 82]);
    assert_eq!(stale, vec![key(99)]);
}

#[test]
fn a_paused_receivers_destinations_come_out_and_the_others_stay() {
    let dests = dests();
    let paused: BTreeSet<u32> = [1].into_iter().collect();
    let present = [key(80), key(81), key(82)];
    let (active, stale) = dest_changes(&dests, &paused, present);
    let written: Vec<u32> = active.iter().map(|(k, _)| k.port).collect();
    assert_eq!(written, vec![82]);
    assert_eq!(stale, vec![key(80), key(81)]);
}

#[test]
fn resuming_puts_them_back() {
    let dests = dests();
    let (active, stale) = dest_changes(&dests, &BTreeSet::new(), [key(82)]);
    assert_eq!(active.len(), 3);
    assert!(stale.is_empty());
}

#[test]
fn the_counters_show_steered_and_what_is_not_zero() {
    let mut stats = BinderStats::default();
    assert_eq!(stats.to_string(), "steered=0 (the rest 0)");
    stats.counts[outcome::STEERED as usize] = 5;
    stats.counts[outcome::MISS as usize] = 2;
    stats.counts[outcome::BIND_REFUSED as usize] = 1;
    stats.bind_errnos = vec![(99, 1)];
    assert_eq!(
        stats.to_string(),
        "steered=5 miss=2 bind_refused=1 bind_errno_99=1 (the rest 0)"
    );
    assert_eq!(
        stats.failures(),
        1,
        "a miss is the application's, not a failure"
    );
    assert_eq!(stats.get(COUNTERS), 0, "past the last counter");
}
