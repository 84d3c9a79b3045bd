//! Turns the sender's plan into the [`PlanReport`] the receiver is told:
//! for each receiver and destination port, the source ports the binder may
//! bind for each receiver CPU — the hook's own choices, enumerated (every
//! port of the range: each is some CPU's).

use srap_common::{
    port_tables::{Scope, TablePlan},
    protocol::Protocol,
    wire::{CpuPorts, PlanReport, PlannedTable},
};

use crate::sender::plan::Plan;

/// Ports one report lists at most: ~3 bytes each on the wire, well inside
/// a frame (1 MiB). A table past it is left out, and said so.
pub const MAX_REPORTED_PORTS: usize = 200_000;

/// The protocol whose tables are reported: the receiver judges a plan by
/// its observer's flows, which are TCP's, and a [`PlannedTable`] names no
/// protocol.
const REPORTED: Protocol = Protocol::Tcp;

/// The report of `plan`, made against description `version`. Port-scoped
/// tables are reported for their port; any-port tables (where a source
/// port's CPU depends on the destination port) for each of `any_port_dports`
/// — the ports the workload uses, when known — and not at all without them.
pub fn plan_report(version: u64, plan: &Plan, any_port_dports: &[u16]) -> PlanReport {
    plan_report_for(version, plan, any_port_dports, |_| true)
}

/// [`plan_report`] of the receivers (binder rows) `keep` accepts: what one
/// receiver host is told when the sender follows several.
pub fn plan_report_for(
    version: u64,
    plan: &Plan,
    any_port_dports: &[u16],
    keep: impl Fn(u32) -> bool,
) -> PlanReport {
    let mut tables = Vec::new();
    let mut listed = 0;
    for receiver in plan.receivers.iter().filter(|r| keep(r.index)) {
        let reported = receiver.tables.iter().filter_map(|&t| plan.tables.get(t));
        for table in reported.filter(|t| t.layout.protocol == REPORTED) {
            let dports: Vec<u16> = match table.scope() {
                Scope::Port(port) => vec![port],
                Scope::AnyPort => any_port_dports.to_vec(),
            };
            for dport in dports {
                let cpus = cpu_ports(table, dport);
                let count: usize = cpus.iter().map(|c| c.ports.len()).sum();
                if listed + count > MAX_REPORTED_PORTS {
                    tracing::warn!(
                        "the plan report leaves out {} -> {}:{dport} and what follows: more \
                         than {MAX_REPORTED_PORTS} ports (report fewer ports with --report-port)",
                        table.source,
                        receiver.receiver
                    );
                    return PlanReport { version, tables };
                }
                listed += count;
                tables.push(PlannedTable {
                    receiver: receiver.receiver,
                    source: table.source,
                    dst_port: dport,
                    cpus,
                });
            }
        }
    }
    PlanReport { version, tables }
}

/// Every port each slot's CPU may get toward `dport`.
fn cpu_ports(table: &TablePlan, dport: u16) -> Vec<CpuPorts> {
    table
        .slots()
        .iter()
        .enumerate()
        .map(|(slot, row)| CpuPorts {
            cpu: row.cpu,
            ports: table.slot_ports(slot, dport).into_iter().collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use srap_common::{
        port_range::PortRange,
        rss::{FlowTuple, RssModel, embedded_default},
    };

    use super::*;
    use crate::sender::local::ReceiverSources;

    #[test]
    fn every_reported_port_lands_on_its_cpu() {
        let model = RssModel::from_description(&embedded_default()).expect("valid");
        let receiver: IpAddr = "10.0.0.2".parse().expect("ip");
        let source: IpAddr = "10.0.0.1".parse().expect("ip");
        let range = PortRange::new(32768, 60999).expect("range");
        for ports in [vec![5201u16], vec![]] {
            let plan = Plan::build(
                &model,
                &[ReceiverSources::routed(receiver, source)],
                &ports,
                range,
            )
            .expect("plan");
            let report = plan_report(3, &plan, &[5201]);
            assert_eq!(report.version, 3);
            assert_eq!(report.tables.len(), 1);
            let table = &report.tables[0];
            assert_eq!(
                (table.receiver, table.source, table.dst_port),
                (receiver, source, 5201)
            );
            assert_eq!(table.cpus.len(), 32, "one entry per receiver CPU");
            let reported: usize = table.cpus.iter().map(|c| c.ports.len()).sum();
            assert_eq!(reported, range.len(), "every port of the range");
            for cpu in &table.cpus {
                assert!(!cpu.ports.is_empty(), "cpu {} has ports", cpu.cpu);
                for &sport in &cpu.ports {
                    let flow = FlowTuple::new(source, sport, receiver, 5201).expect("tuple");
                    assert_eq!(model.landing(&flow).cpu, cpu.cpu, "port {sport}");
                }
            }
        }
    }

    #[test]
    fn any_port_tables_need_a_destination_port() {
        let model = RssModel::from_description(&embedded_default()).expect("valid");
        let ends = (
            "10.0.0.2".parse().expect("ip"),
            "10.0.0.1".parse().expect("ip"),
        );
        let range = PortRange::new(32768, 60999).expect("range");
        let plan = Plan::build(
            &model,
            &[ReceiverSources::routed(ends.0, ends.1)],
            &[],
            range,
        )
        .expect("plan");
        assert!(plan_report(1, &plan, &[]).tables.is_empty());
        assert_eq!(plan_report(1, &plan, &[80, 443]).tables.len(), 2);
    }
}
