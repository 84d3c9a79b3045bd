//! Property tests: the solver's and the planner's answers agree with hashing
//! every port by brute force, for random keys, tuples, table sizes, queue →
//! CPU maps and input transforms.

use std::{collections::BTreeMap, net::IpAddr};

use proptest::prelude::*;
use srap_common::{
    planner::plan,
    port_range::PortRange,
    rss::{FlowTuple, InputXfrm, RssDescription, RssModel},
    solver::PortSolver,
};

fn xfrm() -> impl Strategy<Value = InputXfrm> {
    prop_oneof![
        Just(InputXfrm::None),
        Just(InputXfrm::SymXor),
        Just(InputXfrm::SymOrXor)
    ]
}

fn fields() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("sdfn"),
        Just("sdfn"),
        Just("sd"),
        Just("sdf"),
        Just("fn")
    ]
}

/// Table sizes: powers of two (the linear path) and others (the scan).
fn table_len() -> impl Strategy<Value = usize> {
    prop_oneof![(0u32..=9).prop_map(|k| 1usize << k), 1usize..=200,]
}

prop_compose! {
    fn model()(
        key in prop::collection::vec(any::<u8>(), 40..=52),
        len in table_len(),
        queues in 1u32..=40,
        cpus in 1u32..=48,
        xfrm in xfrm(),
        f4 in fields(),
        f6 in fields(),
        seed in any::<u64>(),
    ) -> RssModel {
        let mut state = seed | 1;
        let mut next = move || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
        let indir: Vec<u32> = (0..len).map(|_| (next() % u64::from(queues)) as u32).collect();
        let queue_cpu: Vec<u32> = (0..queues).map(|_| (next() % u64::from(cpus)) as u32).collect();
        let desc = RssDescription {
            hfunc: "toeplitz".into(),
            key: key.iter().map(|b| format!("{b:02x}")).collect(),
            indir,
            input_xfrm: xfrm.to_string(),
            fields: srap_common::rss::FieldsDescription::tcp(f4, f6),
            queue_cpu: Some(queue_cpu),
        };
        RssModel::from_description(&desc).unwrap()
    }
}

prop_compose! {
    fn template()(v4 in any::<bool>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), dport in any::<u16>()) -> FlowTuple {
        let (src, dst): (IpAddr, IpAddr) = if v4 {
            ([a[0], a[1], a[2], a[3]].into(), [b[0], b[1], b[2], b[3]].into())
        } else {
            (a.into(), b.into())
        };
        FlowTuple::new(src, 0, dst, dport).unwrap()
    }
}

prop_compose! {
    fn range()(start in 1u16..=65535, width in 0u16..=4096) -> PortRange {
        PortRange::new(start, start.saturating_add(width)).unwrap()
    }
}

fn brute_force_by_cpu(
    model: &RssModel,
    template: &FlowTuple,
    range: PortRange,
) -> BTreeMap<u32, Vec<u16>> {
    let mut by_cpu: BTreeMap<u32, Vec<u16>> = BTreeMap::new();
    for port in range.start()..=range.end() {
        by_cpu
            .entry(model.landing(&template.with_sport(port)).cpu)
            .or_default()
            .push(port);
    }
    by_cpu
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_port_is_where_brute_force_puts_it(model in model(), template in template()) {
        let solver = PortSolver::new(&model, &template);
        let table = solver.cpu_table();
        for (index, ports) in solver.ports_by_index().iter().enumerate() {
            for port in ports {
                let truth = model.landing(&template.with_sport(*port));
                prop_assert_eq!(truth.index as usize, index);
                prop_assert_eq!(table[usize::from(*port)], truth.cpu);
                prop_assert_eq!(solver.landing(*port), truth);
            }
        }
        prop_assert_eq!(solver.ports_by_index().iter().map(Vec::len).sum::<usize>(), 1 << 16);
    }

    #[test]
    fn ports_by_cpu_equals_brute_force(model in model(), template in template(), range in range()) {
        let solver = PortSolver::new(&model, &template);
        prop_assert_eq!(solver.ports_by_cpu(range), brute_force_by_cpu(&model, &template, range));
    }

    #[test]
    fn plans_spread_flows_as_evenly_as_the_cpus_allow(
        model in model(),
        template in template(),
        flows in 1usize..=96,
    ) {
        let range = PortRange::DEFAULT;
        let plan = plan(&model, &template, flows, range).unwrap();
        prop_assert_eq!(plan.flows.len(), flows);
        let mut ports: Vec<u16> = plan.flows.iter().map(|f| f.port).collect();
        ports.sort_unstable();
        ports.dedup();
        prop_assert_eq!(ports.len(), flows, "a port was planned twice");
        for flow in &plan.flows {
            prop_assert!(range.contains(flow.port));
            prop_assert_eq!(model.landing(&template.with_sport(flow.port)), flow.landing);
        }
        let reachable = brute_force_by_cpu(&model, &template, range).len();
        let loads = plan.cpu_loads();
        if flows <= reachable {
            prop_assert_eq!(loads.len(), flows, "flows share a CPU while others are free");
        } else {
            let (min, max) = (loads.values().min().unwrap(), loads.values().max().unwrap());
            prop_assert_eq!(loads.len(), reachable);
            prop_assert!(max - min <= 1, "loads {:?}", loads);
        }
    }
}

#[test]
fn sym_or_xor_is_affine_in_the_source_port_for_a_fixed_destination_port() {
    // The OR half is not linear in general, but with the destination port
    // fixed each OR bit is either forced to 1 or passes the source bit on.
    let desc = RssDescription {
        input_xfrm: "sym-or-xor".into(),
        ..srap_common::rss::embedded_default()
    };
    let model = RssModel::from_description(&desc).unwrap();
    let template = FlowTuple::new(
        "10.1.2.3".parse().unwrap(),
        0,
        "10.9.8.7".parse().unwrap(),
        0xa5a5,
    )
    .unwrap();
    let solver = PortSolver::new(&model, &template);
    for port in (0..=u16::MAX).step_by(7) {
        assert_eq!(
            solver.port_hash().hash(port),
            model.hash(&template.with_sport(port))
        );
    }
}
