//! The senders' plan reports, indexed by 4-tuple, so each observed flow can
//! be matched to the receiver CPU its source port was planned for.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
};

use srap_common::wire::PlanReport;

/// (sender ip, source port, receiver ip, destination port) → planned CPU.
#[derive(Debug, Clone, Default)]
pub struct PlanIndex(HashMap<(IpAddr, u16, IpAddr, u16), u32>);

impl PlanIndex {
    /// Every port of every table of `reports`. Where two senders claim the
    /// same 4-tuple (they cannot both be using it) the later report wins.
    pub fn new<'a>(reports: impl IntoIterator<Item = &'a PlanReport>) -> Self {
        let mut index = HashMap::new();
        for report in reports {
            for table in &report.tables {
                let (src, dst) = (table.source.to_canonical(), table.receiver.to_canonical());
                for cpu in &table.cpus {
                    for &port in &cpu.ports {
                        index.insert((src, port, dst, table.dst_port), cpu.cpu);
                    }
                }
            }
        }
        Self(index)
    }

    /// The CPU planned for the flow `src` → `dst`, if a sender reported one.
    pub fn planned_cpu(&self, src: SocketAddr, dst: SocketAddr) -> Option<u32> {
        self.0
            .get(&(
                src.ip().to_canonical(),
                src.port(),
                dst.ip().to_canonical(),
                dst.port(),
            ))
            .copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use srap_common::wire::{CpuPorts, PlannedTable};

    use super::*;

    #[test]
    fn finds_the_cpu_of_a_reported_port_only() {
        let report = PlanReport {
            version: 1,
            tables: vec![PlannedTable {
                receiver: "10.0.0.2".parse().expect("ip"),
                source: "10.0.0.1".parse().expect("ip"),
                dst_port: 5201,
                cpus: vec![
                    CpuPorts {
                        cpu: 3,
                        ports: vec![40000, 40007],
                    },
                    CpuPorts {
                        cpu: 4,
                        ports: vec![40001],
                    },
                ],
            }],
        };
        let index = PlanIndex::new([&report]);
        let dst: SocketAddr = "10.0.0.2:5201".parse().expect("addr");
        let at = |s: &str| index.planned_cpu(s.parse().expect("addr"), dst);
        assert_eq!(at("10.0.0.1:40007"), Some(3));
        assert_eq!(at("10.0.0.1:40001"), Some(4));
        assert_eq!(at("10.0.0.1:40002"), None);
        assert_eq!(at("10.0.0.9:40001"), None, "another sender");
        // A v4-mapped address is the same sender.
        assert_eq!(
            index.planned_cpu(
                "[::ffff:10.0.0.1]:40001".parse().expect("addr"),
                "[::ffff:10.0.0.2]:5201".parse().expect("addr")
            ),
            Some(4)
        );
    }
}
