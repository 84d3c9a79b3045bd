//! A tuple rewritten between sender and receiver (SNAT, a NAT gateway, a
//! proxy). The receiver's own view stays consistent — the NIC hashes the
//! rewritten tuple and the description predicts it — so landings cannot
//! show it; but the sender plans from the source address its route to us
//! names, and its agent's connection to us takes that same route. When that
//! connection arrives from another address, the data flows do too, and every
//! port the sender planned lands by a tuple it never computed.

use std::net::IpAddr;

use srap_common::wire::PlanReport;

/// The source address `report` plans unbound sockets toward `local` (the
/// address the peer connected to) from, when it is not `peer`, the address
/// the agent's connection — an unbound socket itself — came from. Tables
/// from the sender's other local addresses do not count: a NAT may rewrite
/// to an address the sender also has.
pub fn rewritten_source(peer: IpAddr, local: IpAddr, report: &PlanReport) -> Option<IpAddr> {
    let (peer, local) = (peer.to_canonical(), local.to_canonical());
    let route = report
        .tables
        .iter()
        .find(|t| t.receiver.to_canonical() == local)?
        .source
        .to_canonical();
    (route != peer).then_some(route)
}

#[cfg(test)]
mod tests {
    use srap_common::wire::PlannedTable;

    use super::*;

    fn report(source: &str, receiver: &str) -> PlanReport {
        PlanReport {
            version: 1,
            tables: vec![PlannedTable {
                receiver: receiver.parse().expect("ip"),
                source: source.parse().expect("ip"),
                dst_port: 5201,
                cpus: vec![],
            }],
        }
    }

    #[test]
    fn only_a_plan_toward_the_connected_address_from_elsewhere_is_rewritten() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let here = ip("10.0.0.2");
        // Planned from the address the connection came from: fine.
        assert_eq!(
            rewritten_source(ip("10.0.0.1"), here, &report("10.0.0.1", "10.0.0.2")),
            None
        );
        // A v4-mapped peer address is the same address.
        assert_eq!(
            rewritten_source(ip("::ffff:10.0.0.1"), here, &report("10.0.0.1", "10.0.0.2")),
            None
        );
        // Toward another receiver address (another route): not comparable.
        assert_eq!(
            rewritten_source(ip("10.0.0.9"), here, &report("10.0.0.1", "10.0.1.2")),
            None
        );
        // Planned from .1, arriving from .9: rewritten.
        assert_eq!(
            rewritten_source(ip("10.0.0.9"), here, &report("10.0.0.1", "10.0.0.2")),
            Some(ip("10.0.0.1"))
        );
        // Routed from .1 and planned also for a second local address .9:
        // arriving from .9 is still rewritten (the agent's socket is unbound).
        let mut both = report("10.0.0.1", "10.0.0.2");
        both.tables.extend(report("10.0.0.9", "10.0.0.2").tables);
        assert_eq!(
            rewritten_source(ip("10.0.0.9"), here, &both),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(rewritten_source(ip("10.0.0.1"), here, &both), None);
    }
}
