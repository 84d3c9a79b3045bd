//! Both ends of a flow against the Toeplitz model: the local end hashes the
//! reverse tuple (checked on the published vectors), and the joint map's
//! ports land on the pair of entries it names, for random keys, table
//! sizes, transforms and tuples; the both-ends planner places flows on
//! distinct CPUs of both NICs where the map allows, and keeps the
//! receiver's placement where it does not.

use std::{collections::BTreeSet, net::IpAddr};

use proptest::prelude::*;
use serde_json::Value;
use srap_common::{
    ends::{End, JointMap, JointTables, plan_both},
    port_range::PortRange,
    port_tables::{LayoutPlan, TablePlan},
    protocol::Protocol,
    rss::{FlowTuple, InputXfrm, RssDescription, RssModel, embedded_default},
    solver::PortHash,
};

/// The protocol the tables here are built for, as SRAP steers it.
const TCP: Protocol = Protocol::Tcp;

const VECTORS: &str = include_str!("vectors/toeplitz-ms.json");

/// Each published case read as the reverse packets of a connection the
/// vector's destination opened: its `dst_port` is the port that host chose.
#[test]
fn the_local_end_of_a_connection_hashes_the_published_vectors() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let model = RssModel::from_description(&RssDescription {
        key: doc["key"].as_str().unwrap().into(),
        ..embedded_default()
    })
    .unwrap()
    .facing(End::Local);
    for case in doc["cases"].as_array().unwrap() {
        let ip = |f: &str| case[f].as_str().unwrap().parse::<IpAddr>().unwrap();
        let port = |f: &str| case[f].as_u64().unwrap() as u16;
        let expected = u32::from_str_radix(
            case["hash_ip_tcp"]
                .as_str()
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        // The connecting host (the vector's destination) toward the server.
        let connection =
            FlowTuple::new(ip("dst"), port("dst_port"), ip("src"), port("src_port")).unwrap();
        assert_eq!(model.hash(&connection), expected, "{case}");
        assert_eq!(
            PortHash::new(&model, &connection.with_sport(0)).hash(port("dst_port")),
            expected,
            "the chosen port's affine map, {case}"
        );
    }
}

fn nic(queues: u32, bits: u32, key: &[u8], xfrm: InputXfrm, seed: u64) -> RssModel {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    RssModel::from_description(&RssDescription {
        key: key.iter().map(|b| format!("{b:02x}")).collect(),
        indir: (0..1u32 << bits).map(|i| i % queues).collect(),
        queue_cpu: Some((0..queues).map(|_| (next() % 64) as u32).collect()),
        input_xfrm: xfrm.to_string(),
        ..embedded_default()
    })
    .unwrap()
}

fn linear_xfrm() -> impl Strategy<Value = InputXfrm> {
    prop_oneof![Just(InputXfrm::None), Just(InputXfrm::SymXor)]
}

prop_compose! {
    fn flow()(v6 in any::<bool>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), dport in 1u16..)
        -> FlowTuple {
        let ip = |bytes: [u8; 16]| -> IpAddr {
            if v6 { bytes.into() } else { [bytes[0], bytes[1], bytes[2], bytes[3]].into() }
        };
        FlowTuple::new(ip(a), 0, ip(b), dport).unwrap()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every port the map gives a pair lands on that pair by hashing both
    /// tuples; the pairs reached, times the ports each, cover every port.
    #[test]
    fn joint_ports_land_on_their_pair(
        k1 in 1u32..=9, k2 in 1u32..=9,
        key1 in prop::collection::vec(any::<u8>(), 40..=52),
        key2 in prop::collection::vec(any::<u8>(), 40..=52),
        x1 in linear_xfrm(), x2 in linear_xfrm(),
        flow in flow(), seed in any::<u64>(),
        picks in prop::collection::vec((any::<u32>(), any::<u32>()), 8),
    ) {
        let remote = nic(8, k1, &key1, x1, seed);
        let local = nic(8, k2, &key2, x2, !seed).facing(End::Local);
        let joint = JointMap::new(&remote, &local, &flow).unwrap();
        prop_assert!(joint.rank() <= (k1 + k2).min(16));
        prop_assert_eq!(joint.ports_per_pair() as u64 * joint.pairs_reached(), 1 << 16);
        let mut reached = 0u64;
        for (r, l) in picks {
            let (r, l) = (r % (1 << k1), l % (1 << k2));
            let ports = joint.ports_for(r, l);
            if ports.is_empty() {
                prop_assert!(joint.solve(r, l).is_none());
                continue;
            }
            reached += 1;
            prop_assert_eq!(ports.len(), joint.ports_per_pair());
            for port in ports {
                let f = flow.with_sport(port);
                prop_assert_eq!(remote.landing(&f).index, r);
                prop_assert_eq!(local.landing(&f).index, l);
            }
        }
        if joint.full_rank() {
            prop_assert_eq!(reached, 8, "full rank reaches every pair");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The binder's joint tables, as the hook uses them (the receiver
    /// entry's coset, the local entry's value, the solution and its
    /// members) give exactly the ports of the range whose tuple lands on
    /// both entries, by hashing each with both models.
    #[test]
    fn joint_tables_give_every_port_of_a_pair_and_no_other(
        k1 in 4u32..=9, k2 in 4u32..=9,
        key1 in prop::collection::vec(any::<u8>(), 40..=52),
        key2 in prop::collection::vec(any::<u8>(), 40..=52),
        x1 in linear_xfrm(), x2 in linear_xfrm(),
        flow in flow(), seed in any::<u64>(),
        start in 1u16..=60000, len in 1u16..=5000,
        picks in prop::collection::vec((any::<u32>(), any::<u32>()), 3),
    ) {
        let range = PortRange::new(start, start.saturating_add(len)).unwrap();
        let remote = nic(8, k1, &key1, x1, seed);
        let local = nic(8, k2, &key2, x2, !seed).facing(End::Local);
        let (src, dst) = (flow.src(), flow.dst());
        let remote_layout = std::sync::Arc::new(
            LayoutPlan::any_port(&remote, TCP, dst, range).unwrap().unwrap());
        let local_layout = std::sync::Arc::new(
            LayoutPlan::any_port(&local, TCP, dst, range).unwrap().unwrap());
        let remote_table = TablePlan::with_layout(&remote, remote_layout.clone(), src, dst).unwrap();
        let local_table = TablePlan::with_layout(&local, local_layout.clone(), src, dst).unwrap();
        let joint = JointTables::new(&remote_layout.layout, &local, TCP, dst).unwrap();
        for (r, l) in picks {
            let (t1, t2) = (r % (1 << k1), l % (1 << k2));
            let v1 = remote_layout.layout.value_for(remote_table.table.base, t1, flow.dport);
            let v2 = local_layout.layout.value_for(local_table.table.base, t2, flow.dport);
            let coset = &remote_layout.cosets[v1 as usize];
            let ports = joint.ports(&remote_layout.layout, coset, v2);
            let lands = |p: u16| {
                let f = flow.with_sport(p);
                remote.landing(&f).index == t1 && local.landing(&f).index == t2
            };
            for port in &ports {
                prop_assert!(range.contains(*port) && lands(*port), "{port}");
            }
            let every: Vec<u16> = (range.start()..=range.end()).filter(|p| lands(*p)).collect();
            prop_assert_eq!(ports, every);
        }
    }
}

/// 16 flows with two 128-entry NICs: 16 distinct CPUs on each, every port
/// from the joint map, each landing where the model says.
#[test]
fn sixteen_flows_land_on_sixteen_cpus_of_each_nic() {
    let remote = RssModel::from_description(&embedded_default()).unwrap();
    let local = nic(16, 7, &[0x3c; 40], InputXfrm::None, 7);
    let local = RssModel::from_description(&RssDescription {
        queue_cpu: Some((0..16).collect()),
        ..local.to_description()
    })
    .unwrap()
    .facing(End::Local);
    let template = FlowTuple::new(
        "10.199.250.1".parse().unwrap(),
        0,
        "10.199.250.2".parse().unwrap(),
        5201,
    )
    .unwrap();
    let range: PortRange = "32768-60999".parse().unwrap();
    let flows = plan_both(&remote, &local, &template, 16, range, None).unwrap();
    let remote_cpus: BTreeSet<u32> = flows.iter().map(|f| f.remote.cpu).collect();
    let local_cpus: BTreeSet<u32> = flows.iter().map(|f| f.local.cpu).collect();
    assert_eq!((remote_cpus.len(), local_cpus.len()), (16, 16));
    for f in &flows {
        assert!(f.joint && range.contains(f.port));
        let tuple = template.with_sport(f.port);
        assert_eq!(remote.landing(&tuple), f.remote);
        assert_eq!(local.landing(&tuple), f.local);
        let local_nic = RssModel::from_description(&local.to_description()).unwrap();
        assert_eq!(
            local_nic.landing(&tuple.reversed()),
            f.local,
            "the NIC's own view"
        );
    }
    // Only CPUs 8-15 of this host: two flows on each, receivers untouched.
    let only: BTreeSet<u32> = (8..16).collect();
    let flows = plan_both(&remote, &local, &template, 16, range, Some(&only)).unwrap();
    assert!(flows.iter().all(|f| only.contains(&f.local.cpu)));
    assert_eq!(
        flows
            .iter()
            .map(|f| f.remote.cpu)
            .collect::<BTreeSet<_>>()
            .len(),
        16
    );
}

/// A rank-deficient map (the same key and sym-xor on both NICs: both hashes
/// are equal) keeps the receiver's placement; the local CPU is what the
/// remote entry allows, the least occupied of those.
#[test]
fn a_rank_deficient_map_keeps_the_receivers_placement() {
    let sym = |queues: u32| {
        RssModel::from_description(&RssDescription {
            input_xfrm: "sym-xor".into(),
            indir: (0..128).map(|i| i % queues).collect(),
            queue_cpu: Some((0..queues).collect()),
            ..embedded_default()
        })
        .unwrap()
    };
    let (remote, local) = (sym(32), sym(8).facing(End::Local));
    let template = FlowTuple::new(
        "10.0.0.1".parse().unwrap(),
        0,
        "10.0.0.2".parse().unwrap(),
        443,
    )
    .unwrap();
    let joint = JointMap::new(&remote, &local, &template).unwrap();
    assert_eq!(joint.rank(), 7);
    let flows = plan_both(&remote, &local, &template, 16, PortRange::DEFAULT, None).unwrap();
    let remote_cpus: BTreeSet<u32> = flows.iter().map(|f| f.remote.cpu).collect();
    assert_eq!(remote_cpus.len(), 16, "the receiver's placement is kept");
    for f in &flows {
        // Equal hashes, tables 32 and 8 queues round-robin: local = remote mod 8.
        assert_eq!(f.local.cpu, f.remote.cpu % 8);
    }
    let local_cpus: BTreeSet<u32> = flows.iter().map(|f| f.local.cpu).collect();
    assert_eq!(local_cpus.len(), 8, "spread as the remote placement allows");
}

/// A range too narrow for every pair: the flows still get distinct
/// receiver CPUs; those whose pair has no port in the range are marked.
#[test]
fn a_narrow_range_keeps_the_receivers_placement() {
    let remote = RssModel::from_description(&embedded_default()).unwrap();
    let local = nic(16, 7, &[0x5a; 40], InputXfrm::None, 3).facing(End::Local);
    let template = FlowTuple::new(
        "10.0.0.1".parse().unwrap(),
        0,
        "10.0.0.2".parse().unwrap(),
        80,
    )
    .unwrap();
    let range: PortRange = "40000-40255".parse().unwrap();
    let flows = plan_both(&remote, &local, &template, 16, range, None).unwrap();
    assert!(flows.iter().all(|f| range.contains(f.port)));
    let remote_cpus: BTreeSet<u32> = flows.iter().map(|f| f.remote.cpu).collect();
    assert_eq!(remote_cpus.len(), 16);
    let tiny: PortRange = "40000-40003".parse().unwrap();
    let err = plan_both(&remote, &local, &template, 5, tiny, None).unwrap_err();
    assert!(err.to_string().contains("40000-40003"), "{err}");
}
