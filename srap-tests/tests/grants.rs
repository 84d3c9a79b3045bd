//! Receiver-granted CPU slots on a real kernel: one receiver namespace
//! (a 16-queue description, a bridge) reached by up to four sender
//! namespaces, each with its own `srap-agent sender --peer` and a workload
//! under `srap exec` (the set-up: `srap_tests::grants`, shared with
//! `benches/grants.rs`). Where a flow lands is judged from the (source
//! address, port) pairs the receiver accepted, hashed with the model.
//! Subnet 66.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use srap_tests::{
    grants::{Cluster, QUEUES},
    require_privileged,
};

const SUBNET: u8 = 66;
const FLOWS: usize = 5;

/// Not a test on its own: the workload process (tests/support/workload.rs).
#[test]
fn workload_process() {
    srap_tests::workload::serve_if_asked();
}

/// Flows per CPU over all 16 CPUs (CPUs without flows count as 0).
fn per_cpu(cpus: &[u32]) -> BTreeMap<u32, u32> {
    let mut load: BTreeMap<u32, u32> = (0..QUEUES).map(|c| (c, 0)).collect();
    for cpu in cpus {
        *load.entry(*cpu).or_insert(0) += 1;
    }
    load
}

fn granted_cpus(peer: &serde_json::Value) -> BTreeSet<u32> {
    let list = peer["granted"].as_str().unwrap_or_default();
    srap_host::cpulist::parse(list).unwrap_or_default()
}

#[test]
fn three_senders_land_on_fifteen_cpus_and_a_fourth_stays_balanced() {
    if !require_privileged("grants across sender namespaces") {
        return;
    }
    let mut cluster = Cluster::new(SUBNET);
    for _ in 0..3 {
        cluster.add_sender();
    }
    let peers = cluster.wait_settled(3, 0);
    let grants: Vec<BTreeSet<u32>> = peers.iter().map(granted_cpus).collect();
    let all: BTreeSet<u32> = grants.iter().flatten().copied().collect();
    assert_eq!(
        grants.iter().map(BTreeSet::len).sum::<usize>(),
        all.len(),
        "idle senders hold disjoint grants: {grants:?}"
    );
    assert_eq!(all.len(), QUEUES as usize, "covering every CPU: {grants:?}");
    // What the binders hold: the same split in each sender's pinned map.
    cluster.wait_pinned_balanced(&[0, 1, 2], Duration::from_millis(50));

    let mut landed = Vec::new();
    for i in 0..3 {
        landed.extend(cluster.open(i, FLOWS));
    }
    let distinct: BTreeSet<u32> = landed.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        3 * FLOWS,
        "15 flows from three senders on 15 distinct CPUs: {landed:?}"
    );

    cluster.wait_settled(3, 3 * FLOWS as u64);
    let fourth = cluster.add_sender();
    cluster.wait_settled(4, 3 * FLOWS as u64);
    landed.extend(cluster.open(fourth, FLOWS));
    let load = per_cpu(&landed);
    let (max, min) = (
        load.values().max().copied().unwrap_or(0),
        load.values().min().copied().unwrap_or(0),
    );
    assert!(
        max - min <= 1,
        "20 flows on 16 CPUs: max {max} min {min} per CPU: {load:?}"
    );

    // The fourth leaves (its flows closed, its agent gone): its CPUs go
    // back to the others, disjoint again.
    cluster.senders[fourth]
        .workload
        .as_mut()
        .expect("workload")
        .close(FLOWS);
    cluster.senders[fourth].stop_agent();
    let peers = cluster.wait_settled(3, 3 * FLOWS as u64);
    let grants: Vec<BTreeSet<u32>> = peers.iter().map(granted_cpus).collect();
    let all: BTreeSet<u32> = grants.iter().flatten().copied().collect();
    assert_eq!(all.len(), QUEUES as usize, "re-granted: {grants:?}");
    assert_eq!(
        grants.iter().map(BTreeSet::len).sum::<usize>(),
        all.len(),
        "disjoint again: {grants:?}"
    );
}
