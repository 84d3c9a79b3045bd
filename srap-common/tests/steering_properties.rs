//! The binder's tables, walked the way the connect() hook walks them, put
//! every flow on the CPU of the slot it was given — checked by hashing the
//! resulting 4-tuple with the model, for random receivers and ports.

use std::net::IpAddr;

use proptest::prelude::*;
use srap_common::{
    binder::{ENTRIES_PER_SLOT, MAX_SLOTS, PORTS_PER_VALUE},
    rss::{FieldsDescription, FlowTuple, RssDescription, RssModel, embedded_default},
    solver::PortRange,
    steering::{Scope, SteeringError, TablePlan},
};

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

/// Walks every slot, entry and port choice as the hook may, and checks each
/// bound port lands on the slot's CPU for `dport`.
fn check_table(
    model: &RssModel,
    table: &TablePlan,
    src: IpAddr,
    dst: IpAddr,
    dport: u16,
) -> Result<usize, TestCaseError> {
    let mut checked = 0;
    for (slot, entries) in table.slots().iter().enumerate() {
        for entry_choice in 0..ENTRIES_PER_SLOT {
            for port_choice in 0..PORTS_PER_VALUE {
                if let Some(port) = table.port_for(slot, entry_choice, port_choice, dport) {
                    let landing = model.landing(&FlowTuple::new(src, port, dst, dport).unwrap());
                    prop_assert_eq!(
                        landing.cpu,
                        entries.cpu,
                        "slot {} port {} dport {}",
                        slot,
                        port,
                        dport
                    );
                    checked += 1;
                }
            }
        }
    }
    Ok(checked)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_port_tables_steer_every_destination_port(
        model in receiver(),
        (src, dst) in addresses(),
        dports in prop::collection::vec(any::<u16>(), 1..4),
    ) {
        match TablePlan::build(&model, src, dst, None, PortRange::DEFAULT) {
            Ok(table) => {
                prop_assert_eq!(table.scope(), Scope::AnyPort);
                prop_assert_eq!(table.slots().len(), model.reachable_cpus().len().min(MAX_SLOTS as usize));
                let mut checked = 0;
                for dport in dports {
                    checked += check_table(&model, &table, src, dst, dport)?;
                }
                prop_assert!(checked > 0, "no usable port at all");
            }
            Err(SteeringError::NeedsPort { reason }) => {
                let linear = model.index_bits().is_some_and(|b| b <= 11)
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
        let table = TablePlan::build(&model, src, dst, Some(dport), PortRange::DEFAULT).unwrap();
        let checked = check_table(&model, &table, src, dst, dport)?;
        prop_assert!(checked > 0);
        for port in table.ports() {
            prop_assert!(PortRange::DEFAULT.contains(port));
        }
    }
}

#[test]
fn the_default_receiver_gets_one_any_port_table_with_a_slot_per_cpu() {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let table = TablePlan::build(&model, src, dst, None, PortRange::DEFAULT).unwrap();
    assert_eq!(table.scope(), Scope::AnyPort);
    assert_eq!(table.slots().len(), 32);
    assert!(
        table.slots().iter().all(|s| s.count == 4),
        "128 entries over 32 CPUs"
    );
    assert_eq!(table.layout.values.len(), 128);
    assert!(
        table
            .layout
            .values
            .iter()
            .all(|v| v.count as usize == PORTS_PER_VALUE)
    );
    assert_eq!(table.ports().len(), 128 * PORTS_PER_VALUE);
}

#[test]
fn sym_or_xor_receivers_need_named_ports() {
    let desc = RssDescription {
        input_xfrm: "sym-or-xor".into(),
        ..embedded_default()
    };
    let model = RssModel::from_description(&desc).unwrap();
    let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let err = TablePlan::build(&model, src, dst, None, PortRange::DEFAULT).unwrap_err();
    assert!(
        err.to_string().contains("name each port the workload uses"),
        "{err}"
    );
    let table = TablePlan::build(&model, src, dst, Some(5201), PortRange::DEFAULT).unwrap();
    assert_eq!(table.scope(), Scope::Port(5201));
}
