//! The binder's tables, walked the way the connect() hook walks them, put
//! every flow on the CPU of the slot it was given — checked by hashing the
//! resulting 4-tuple with the model, for random receivers and ports — and
//! together cover every port of the range.

use std::{collections::BTreeSet, net::IpAddr, sync::Arc};

use proptest::prelude::*;
use srap_common::{
    binder::{LISTED_PORTS_PER_SLOT, MAX_SLOTS},
    bond::{MemberPlan, member_index},
    port_range::PortRange,
    port_tables::{LayoutPlan, PortTableError, Scope, TablePlan},
    protocol::{FlowType, Protocol},
    rss::{FieldsDescription, FlowTuple, RssDescription, RssModel, embedded_default},
};

/// The protocol the tables here are built for, as SRAP steers it.
const TCP: Protocol = Protocol::Tcp;

prop_compose! {
    fn receiver()(
        key in prop::collection::vec(any::<u8>(), 40..=52),
        bits in 0u32..=11,
        odd_len in 3usize..=300,
        power_of_two in prop::bool::weighted(0.8),
        queues in 1u32..=64,
        cpus in 1u32..=160,
        xfrm in prop_oneof![Just("none"), Just("sym-xor"), Just("sym-or-xor")],
        seed in any::<u64>(),
    ) -> RssModel {
        let mut state = seed | 1;
        let mut next = move || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
        let len = if power_of_two { 1usize << bits } else { odd_len };
        let desc = RssDescription {
            hfunc: "toeplitz".into(),
            key: key.iter().map(|b| format!("{b:02x}")).collect(),
            indir: (0..len).map(|_| (next() % u64::from(queues)) as u32).collect(),
            input_xfrm: xfrm.into(),
            fields: FieldsDescription::default(),
            queue_cpu: Some((0..queues).map(|_| (next() % u64::from(cpus)) as u32).collect()),
        };
        RssModel::from_description(&desc).unwrap()
    }
}

fn addresses() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(a, b)| (a.into(), b.into())),
        (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(a, b)| (a.into(), b.into())),
    ]
}

/// Walks every slot's rotation as the hook does (a full round of every
/// entry, and the ports each slot lists) and checks each bound port lands on
/// the slot's CPU for `dport`; returns the ports seen.
fn check_table(
    model: &RssModel,
    table: &TablePlan,
    src: IpAddr,
    dst: IpAddr,
    dport: u16,
) -> Result<BTreeSet<u16>, TestCaseError> {
    let lands_on = |port: u16, cpu: u32, slot: usize| -> Result<(), TestCaseError> {
        let landing = model.landing(&FlowTuple::new(src, port, dst, dport).unwrap());
        prop_assert_eq!(
            landing.cpu,
            cpu,
            "slot {} port {} dport {}",
            slot,
            port,
            dport
        );
        Ok(())
    };
    let mut seen = BTreeSet::new();
    for (slot, row) in table.slots().iter().enumerate() {
        // The hook's first turns: each entry once, then the next round.
        for turn in 0..2 * row.count {
            if let Some(port) = table.port_for(slot, turn, dport) {
                lands_on(port, row.cpu, slot)?;
                prop_assert!(PortRange::DEFAULT.contains(port));
            }
        }
        for port in table.slot_ports(slot, dport) {
            lands_on(port, row.cpu, slot)?;
            prop_assert!(seen.insert(port), "port {} in two slots", port);
        }
    }
    Ok(seen)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_port_tables_steer_every_destination_port(
        model in receiver(),
        (src, dst) in addresses(),
        dports in prop::collection::vec(any::<u16>(), 1..4),
    ) {
        match TablePlan::build(&model, TCP, (src, dst), None, PortRange::DEFAULT) {
            Ok(table) => {
                prop_assert_eq!(table.scope(), Scope::AnyPort);
                prop_assert_eq!(table.slots().len(), model.reachable_cpus().len().min(MAX_SLOTS as usize));
                for dport in dports {
                    let seen = check_table(&model, &table, src, dst, dport)?;
                    // Every port of the range is some slot's (CPUs past
                    // MAX_SLOTS aside).
                    if model.reachable_cpus().len() <= MAX_SLOTS as usize {
                        prop_assert_eq!(seen.len(), PortRange::DEFAULT.len());
                    }
                }
            }
            Err(PortTableError::NeedsPort { reason }) => {
                let linear = model.index_bits().is_some()
                    && model.xfrm().to_string() != "sym-or-xor";
                prop_assert!(!linear, "linear receiver refused: {}", reason);
            }
            Err(other) => prop_assert!(false, "{}", other),
        }
    }

    #[test]
    fn one_port_tables_steer_their_port(
        model in receiver(),
        (src, dst) in addresses(),
        dport in any::<u16>(),
    ) {
        let table = TablePlan::build(&model, TCP, (src, dst), Some(dport), PortRange::DEFAULT).unwrap();
        let seen = check_table(&model, &table, src, dst, dport)?;
        prop_assert!(!seen.is_empty());
        match model.index_bits() {
            // Affine in the source port: the whole range, as any-port tables.
            Some(_) if model.reachable_cpus().len() <= MAX_SLOTS as usize => {
                prop_assert_eq!(seen.len(), PortRange::DEFAULT.len());
            }
            Some(_) => {}
            // Listed: up to LISTED_PORTS_PER_SLOT of each slot's ports.
            None => {
                let listed = (0..table.slots().len()).map(|slot| table.slot_ports(slot, dport).len());
                prop_assert!(listed.max().unwrap_or(0) <= LISTED_PORTS_PER_SLOT);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With a bond to balance, every port a slot's rotation visits lands on
    /// the slot's receiver CPU (the model's Toeplitz) and leaves on the
    /// slot's member by the driver's own formula ([`member_index`], the
    /// modulo, not the linear bits the tables were built from); the slots
    /// still cover the range between them.
    #[test]
    fn member_balanced_tables_put_each_slot_on_its_cpu_and_its_member(
        model in receiver(),
        (src, dst) in addresses(),
        members in prop_oneof![Just(2u32), Just(4), Just(8)],
        dport in any::<u16>(),
    ) {
        let plan = MemberPlan::new(members).unwrap();
        let layout = match LayoutPlan::any_port_over(&model, TCP, dst, PortRange::DEFAULT, Some(plan)) {
            Ok(Some(layout)) => layout,
            // Not linear, or too many bits together: nothing to check.
            Ok(None) | Err(PortTableError::MembersTooWide { .. }) => return Ok(()),
            Err(other) => return Err(TestCaseError::fail(other.to_string())),
        };
        let table = TablePlan::with_layout(&model, Arc::new(layout), src, dst).unwrap();
        let seen = check_table(&model, &table, src, dst, dport)?;
        for slot in 0..table.slots().len() {
            let want = plan.member_of_slot(slot);
            for port in table.slot_ports(slot, dport) {
                let tuple = FlowTuple::new(src, port, dst, dport).unwrap();
                prop_assert_eq!(member_index(&tuple, members), Some(want), "slot {} port {}", slot, port);
            }
        }
        // And every port of the range whose CPU and member are a slot's
        // plan is in that slot's rotation: nothing the plan allows is lost.
        if model.reachable_cpus().len() <= MAX_SLOTS as usize {
            let slot_of: std::collections::BTreeMap<u32, usize> =
                table.slots().iter().enumerate().map(|(s, row)| (row.cpu, s)).collect();
            let allowed = (PortRange::DEFAULT.start()..=PortRange::DEFAULT.end())
                .filter(|&port| {
                    let tuple = FlowTuple::new(src, port, dst, dport).unwrap();
                    let slot = slot_of[&model.landing(&tuple).cpu];
                    member_index(&tuple, members) == Some(plan.member_of_slot(slot))
                })
                .count();
            prop_assert_eq!(seen.len(), allowed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A member count that is not a power of two, toward a named port:
    /// every listed port of a slot lands on its CPU and leaves on its
    /// member by the driver's modulo.
    #[test]
    fn listed_member_tables_put_each_port_on_its_cpu_and_its_member(
        model in receiver(),
        (src, dst) in addresses(),
        members in prop_oneof![Just(3u32), Just(5), Just(6), Just(7)],
        dport in any::<u16>(),
    ) {
        let plan = MemberPlan::new(members).unwrap();
        let table = match TablePlan::one_port_over(&model, TCP, (src, dst), dport, PortRange::DEFAULT, Some(plan)) {
            Ok(table) => table,
            Err(PortTableError::NoPorts { .. }) => return Ok(()),
            Err(other) => return Err(TestCaseError::fail(other.to_string())),
        };
        let seen = check_table(&model, &table, src, dst, dport)?;
        prop_assert!(!seen.is_empty());
        for slot in 0..table.slots().len() {
            for port in table.slot_ports(slot, dport) {
                let tuple = FlowTuple::new(src, port, dst, dport).unwrap();
                prop_assert_eq!(member_index(&tuple, members), Some(plan.member_of_slot(slot)));
            }
        }
    }
}

#[test]
fn the_default_receiver_gets_one_any_port_table_with_a_slot_per_cpu() {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let range = PortRange::new(32768, 60999).unwrap();
    let table = TablePlan::build(&model, TCP, (src, dst), None, range).unwrap();
    assert_eq!(table.scope(), Scope::AnyPort);
    assert_eq!(table.slots().len(), 32);
    assert!(
        table.slots().iter().all(|s| s.count == 4),
        "128 entries over 32 CPUs"
    );
    assert_eq!(table.layout.cosets.len(), 128);
    assert_eq!(table.layout.port_count(), 28232, "the kernel's whole range");
    // The rotation of slot 0 visits every port it has: its entries take
    // turns, each walking its coset, so entries × the longest coset turns.
    let ports = table.slot_ports(0, 5201);
    let longest = table
        .layout
        .entries_of(0)
        .iter()
        .map(|e| {
            let value = table.layout.layout.value_for(table.table.base, *e, 5201);
            table.layout.cosets[value as usize].count
        })
        .max()
        .unwrap();
    let visited: BTreeSet<u16> = (0..4 * longest)
        .filter_map(|turn| table.port_for(0, turn, 5201))
        .collect();
    assert_eq!(visited, ports);
    assert!(ports.len() > 800, "{} ports on slot 0", ports.len());
}

#[test]
fn a_protocols_tables_are_built_with_its_own_fields_or_refused_by_name() {
    let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let range = PortRange::DEFAULT;
    let tcp_only = RssModel::from_description(&embedded_default()).unwrap();
    let err = TablePlan::build(&tcp_only, Protocol::Udp, (src, dst), None, range).unwrap_err();
    assert!(matches!(err, PortTableError::Unhashed(_)), "{err}");
    assert!(err.to_string().contains("udp4 flows"), "{err}");
    // UDP hashed as TCP is: the same ports on the same slots, for UDP.
    let mut desc = embedded_default();
    desc.fields.set(FlowType::UDP4, "sdfn".into());
    let both = RssModel::from_description(&desc).unwrap();
    let udp = TablePlan::build(&both, Protocol::Udp, (src, dst), None, range).unwrap();
    let tcp = TablePlan::build(&both, TCP, (src, dst), None, range).unwrap();
    assert_eq!(udp.layout.protocol, Protocol::Udp);
    assert_eq!(udp.slot_ports(0, 53), tcp.slot_ports(0, 53));
}

#[test]
fn sym_or_xor_receivers_need_named_ports() {
    let desc = RssDescription {
        input_xfrm: "sym-or-xor".into(),
        ..embedded_default()
    };
    let model = RssModel::from_description(&desc).unwrap();
    let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let err = TablePlan::build(&model, TCP, (src, dst), None, PortRange::DEFAULT).unwrap_err();
    assert!(
        err.to_string().contains("name each port the workload uses"),
        "{err}"
    );
    let table = TablePlan::build(&model, TCP, (src, dst), Some(5201), PortRange::DEFAULT).unwrap();
    assert_eq!(table.scope(), Scope::Port(5201));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Re-slotted onto a CPU list (several NICs' union), slot `s` is the
    /// list's `s`-th CPU in the layout; a CPU the NIC reaches keeps exactly
    /// its ports (each landing on it), and one it does not reach lends the
    /// ports of one it does. None only where a CPU it reaches has none at
    /// this destination port itself: under a symmetric transform the ports
    /// of an entry depend on the destination port, and the lender is chosen
    /// for every port at once.
    #[test]
    fn reslotted_layouts_keep_each_cpus_ports_on_the_shared_slots(
        model in receiver(),
        (src, dst) in addresses(),
        extra in prop::collection::btree_set(0u32..200, 0..6),
        dport in any::<u16>(),
    ) {
        let Ok(Some(layout)) = LayoutPlan::any_port(&model, TCP, dst, PortRange::DEFAULT) else {
            return Ok(());
        };
        let own = TablePlan::with_layout(&model, Arc::new(layout.clone()), src, dst).unwrap();
        check_table(&model, &own, src, dst, dport)?;
        let cpus: Vec<u32> = model.reachable_cpus().into_iter().chain(extra).collect::<BTreeSet<_>>()
            .into_iter().rev().collect();
        let shared = TablePlan::with_layout(&model, Arc::new(layout.reslotted(&cpus)), src, dst).unwrap();
        let kept = cpus.len().min(MAX_SLOTS as usize);
        prop_assert_eq!(shared.slots().len(), kept);
        prop_assert_eq!(shared.layout.layout.slots as usize, kept);
        let by_own: Vec<BTreeSet<u16>> =
            (0..own.slots().len()).map(|s| own.slot_ports(s, dport)).collect();
        for (slot, row) in shared.slots().iter().enumerate() {
            prop_assert_eq!(row.cpu, cpus[slot]);
            let ports = shared.slot_ports(slot, dport);
            match own.slots().iter().position(|r| r.cpu == row.cpu) {
                Some(s) => prop_assert_eq!(&ports, &by_own[s]),
                None => prop_assert!(
                    by_own.contains(&ports)
                        && (by_own.iter().any(BTreeSet::is_empty) || !ports.is_empty()),
                    "slot {} (CPU {}) lends another CPU's ports", slot, row.cpu
                ),
            }
        }
    }
}
