//! The maps' logic without a kernel: which destinations a refill writes
//! and removes, what a fill writes in which order into the in-memory maps
//! ([`super::fake`]), what a refused write leaves, and how the binder's
//! counters read.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr},
};

use srap_common::{
    binder::{
        BinderConfig, BinderSizes, CONFIG_MAP, COSETS_MAP, COUNTERS, DESTS_MAP, DestKey, DestValue,
        ENTRIES_MAP, LAYOUTS_MAP, NIC_TABLES_MAP, NODE_NICS_MAP, RECEIVERS_MAP, ReceiverSlots,
        SLOT_STATE_MAP, SLOTS_MAP, TABLES_MAP, outcome, slot_word,
    },
    local_nics::{NO_NIC, NicTables},
    port_range::PortRange,
    rss::{RssModel, embedded_default},
};

use super::{
    BinderStats, dest_changes,
    fake::{FakeMaps, Write},
    fill_maps, put_dests,
};
use crate::sender::{error::SenderError, local::ReceiverSources, plan::Plan};

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

/// A plan toward two receivers (binder rows 1 and 2) of the embedded
/// default NIC, every port.
fn two_receivers() -> Plan {
    let model = RssModel::from_description(&embedded_default()).expect("model");
    let routed = |last| {
        ReceiverSources::routed(
            IpAddr::V4(Ipv4Addr::new(10, 199, 9, last)),
            IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
        )
    };
    Plan::build(&model, &[routed(2), routed(3)], &[], PortRange::DEFAULT).expect("plan")
}

fn config() -> BinderConfig {
    let sizes = BinderSizes::DEFAULT;
    BinderConfig {
        pacing_rate: 12_345,
        row_slots: sizes.cpus,
        sizes,
        ..BinderConfig::default()
    }
}

fn inserted(maps: &FakeMaps) -> Vec<DestKey> {
    let keys = maps.writes.iter().filter_map(|w| match w {
        Write::Insert(key) => Some(*key),
        _ => None,
    });
    keys.collect()
}

#[test]
fn a_fill_writes_the_config_first_and_the_destinations_last() {
    let plan = two_receivers();
    let mut maps = FakeMaps::default();
    fill_maps(&mut maps, &plan, config()).expect("fill");
    assert_eq!(
        maps.map_order(),
        vec![
            CONFIG_MAP,
            LAYOUTS_MAP,
            SLOTS_MAP,
            ENTRIES_MAP,
            COSETS_MAP,
            TABLES_MAP,
            SLOT_STATE_MAP,
            RECEIVERS_MAP,
            NIC_TABLES_MAP,
            DESTS_MAP,
        ],
        "no joints without a local plan; the fresh rows' turns before their slot counts; \
         no node rows without this host's NICs"
    );
    assert_eq!(maps.writes[0], Write::Row(CONFIG_MAP, 0));
    assert_eq!(maps.row::<BinderConfig>(CONFIG_MAP, 0), config());
    let tables: Vec<u32> = (0..plan.tables.len() as u32).collect();
    assert_eq!(maps.written(TABLES_MAP), tables);
    assert_eq!(maps.written(LAYOUTS_MAP), vec![0], "both share one layout");
    assert_eq!(maps.written(RECEIVERS_MAP), vec![1, 2]);
    let planned: Vec<(DestKey, DestValue)> = plan.dests.clone();
    let held: Vec<(DestKey, DestValue)> = maps.dests.clone().into_iter().collect();
    assert_eq!(held.len(), planned.len());
    assert!(
        planned.iter().all(|d| held.contains(d)),
        "every planned row"
    );
    for receiver in plan.rows() {
        let row: ReceiverSlots = maps.row(RECEIVERS_MAP, receiver.index);
        assert_eq!(row.slots, receiver.slots, "row {}", receiver.index);
    }
}

/// The NIC rows go in before the destinations that lead to them: every
/// table's row (empty where no NIC reaches), each node's NIC.
#[test]
fn a_fill_writes_the_nic_rows_before_the_destinations() {
    let mut plan = two_receivers();
    let mut row = NicTables::default();
    row.set(1, 0, DestValue::NO_LOCAL);
    plan.nic_tables = vec![(0, row)];
    plan.node_nics = vec![NO_NIC, 1];
    let mut maps = FakeMaps::default();
    fill_maps(&mut maps, &plan, config()).expect("fill");
    let order = maps.map_order();
    let at = |map| order.iter().position(|m| *m == map).expect("written");
    assert!(at(NIC_TABLES_MAP) < at(DESTS_MAP) && at(NODE_NICS_MAP) < at(DESTS_MAP));
    let tables: Vec<u32> = (0..plan.tables.len() as u32).collect();
    assert_eq!(maps.written(NIC_TABLES_MAP), tables);
    assert_eq!(maps.row::<NicTables>(NIC_TABLES_MAP, 0), row);
    assert_eq!(
        maps.row::<NicTables>(NIC_TABLES_MAP, 1),
        NicTables::default(),
        "a table no NIC reaches gets an empty row"
    );
    assert_eq!(maps.written(NODE_NICS_MAP), vec![0, 1]);
    assert_eq!(maps.row::<u32>(NODE_NICS_MAP, 1), 1);
}

#[test]
fn a_fresh_row_gets_turns_on_its_free_slots_only() {
    let plan = two_receivers();
    let row_slots = config().row_slots;
    let receiver = &plan.receivers[0];
    // A flow still open in slot 1 of row 1 (its count 3, its turn 5).
    let busy = receiver.index * row_slots + 1;
    let open = 5 * slot_word::TURN + 3;
    let mut maps = FakeMaps::default();
    maps.preset(SLOT_STATE_MAP, busy, open);
    fill_maps(&mut maps, &plan, config()).expect("fill");

    assert_eq!(maps.row::<u64>(SLOT_STATE_MAP, busy), open, "left alone");
    let first = receiver.index * row_slots;
    let expected: Vec<u32> = (first..first + receiver.slots)
        .filter(|&w| w != busy)
        .collect();
    let written = maps.written(SLOT_STATE_MAP);
    assert_eq!(written[..expected.len()], expected[..]);
    for index in written {
        let word: u64 = maps.row(SLOT_STATE_MAP, index);
        assert_eq!(
            slot_word::flows(word),
            0,
            "a turn only, no flows: {word:#x}"
        );
    }
    let mut flows = vec![0; receiver.slots as usize];
    flows[1] = 3;
    let rebuilt = ReceiverSlots::rebuilt(receiver.slots, &flows, &ReceiverSlots::default());
    assert_eq!(
        maps.row::<ReceiverSlots>(RECEIVERS_MAP, receiver.index),
        rebuilt
    );
}

#[test]
fn a_row_with_its_planned_slots_is_left_alone_and_one_resized_keeps_its_turns() {
    let plan = two_receivers();
    let (same, resized) = (&plan.receivers[0], &plan.receivers[1]);
    let mut maps = FakeMaps::default();
    let as_planned = ReceiverSlots {
        slots: same.slots,
        dry: 7,
        ..ReceiverSlots::default()
    };
    let before = ReceiverSlots {
        slots: 2,
        dry: 9,
        ..ReceiverSlots::default()
    };
    maps.preset(RECEIVERS_MAP, same.index, as_planned);
    maps.preset(RECEIVERS_MAP, resized.index, before);
    fill_maps(&mut maps, &plan, config()).expect("fill");

    assert_eq!(maps.written(RECEIVERS_MAP), vec![resized.index]);
    assert!(
        maps.written(SLOT_STATE_MAP).is_empty(),
        "hooks claim in both rows already: no turn is reset"
    );
    let row: ReceiverSlots = maps.row(RECEIVERS_MAP, resized.index);
    assert_eq!((row.slots, row.dry), (resized.slots, 9));
    assert_eq!(
        maps.row::<ReceiverSlots>(RECEIVERS_MAP, same.index),
        as_planned
    );
}

#[test]
fn a_refused_write_stops_the_fill_before_any_destination() {
    let plan = two_receivers();
    let mut maps = FakeMaps::refusing(Write::Row(TABLES_MAP, 1));
    let err = fill_maps(&mut maps, &plan, config()).expect_err("refused");
    assert!(
        matches!(
            err,
            SenderError::Map {
                map: TABLES_MAP,
                ..
            }
        ),
        "{err:?}"
    );
    let text = srap_host::report::Chain(&err).to_string();
    assert!(text.contains(TABLES_MAP), "{text}");
    assert!(text.contains("bpf_map_update_elem"), "{text}");
    assert_eq!(maps.written(TABLES_MAP), vec![0], "stopped at row 1");
    assert!(maps.written(RECEIVERS_MAP).is_empty());
    assert!(
        maps.dests.is_empty(),
        "no destination toward a missing table"
    );
}

#[test]
fn a_refill_replaces_the_planned_destinations_and_removes_the_rest() {
    let plan = two_receivers();
    let mut maps = FakeMaps::default();
    let dropped = key(9);
    maps.dests.insert(dropped, toward(1, 0));
    let (kept, _) = plan.dests[0];
    maps.dests.insert(kept, toward(1, 99));
    put_dests(&mut maps, &plan, &BTreeSet::new()).expect("dests");

    let planned: Vec<DestKey> = plan.dests.iter().map(|(k, _)| *k).collect();
    assert_eq!(inserted(&maps), planned, "each written, in plan order");
    assert_eq!(
        maps.writes.last(),
        Some(&Write::Remove(dropped)),
        "removed last"
    );
    assert_eq!(maps.dests.get(&kept), Some(&plan.dests[0].1), "new value");
    assert_eq!(maps.dests.len(), plan.dests.len());
}

#[test]
fn pausing_a_receiver_takes_out_its_destinations_only() {
    let plan = two_receivers();
    let mut maps = FakeMaps::default();
    put_dests(&mut maps, &plan, &BTreeSet::new()).expect("all");
    let paused: BTreeSet<u32> = [plan.receivers[0].index].into_iter().collect();
    maps.writes.clear();
    put_dests(&mut maps, &plan, &paused).expect("paused");

    let toward_paused = |v: &DestValue| paused.contains(&v.receiver);
    let (out, on): (Vec<&(DestKey, DestValue)>, Vec<_>) =
        plan.dests.iter().partition(|(_, v)| toward_paused(v));
    assert!(!out.is_empty() && !on.is_empty());
    assert!(maps.dests.values().all(|v| !toward_paused(v)));
    assert_eq!(maps.dests.len(), on.len());
    let removed = maps.writes.iter().filter(|w| matches!(w, Write::Remove(_)));
    assert_eq!(removed.count(), out.len());
}

#[test]
fn a_refused_removal_is_the_error_after_every_insert() {
    let plan = two_receivers();
    let stale = key(9);
    let mut maps = FakeMaps::refusing(Write::Remove(stale));
    maps.dests.insert(stale, toward(1, 0));
    let err = put_dests(&mut maps, &plan, &BTreeSet::new()).expect_err("refused");
    assert!(
        matches!(err, SenderError::Map { map: DESTS_MAP, .. }),
        "{err:?}"
    );
    let text = srap_host::report::Chain(&err).to_string();
    assert!(text.contains("bpf_map_delete_elem"), "{text}");
    assert_eq!(inserted(&maps).len(), plan.dests.len());
    assert!(maps.dests.contains_key(&stale));
}
