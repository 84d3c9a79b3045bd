//! What the connect hook chooses this host's NIC by (`--local-nics
//! numa|balance`; the rows and the choice are `srap_common::local_nics`):
//! the NICs given with `--local-iface` numbered by name (at most
//! [`MAX_LOCAL_NICS`]), the NIC of each NUMA node ([`node_nics`]), and for
//! each receiver the NICs that reach it with the address each would bind
//! ([`reaching`]). Pure, over a [`LocalHost`] snapshot: a NIC going down
//! or an address changing is a new snapshot, re-planned within the second
//! (`crate::sender::follow`), and these rows with it.

use std::net::IpAddr;

use srap_common::local_nics::{MAX_LOCAL_NICS, MAX_NODES, NO_NIC};

use super::{
    LocalHost, ReceiverSources,
    nics::{HostNic, LocalNics},
    routing::RoutingFinding,
};

/// The NICs the hook may choose, in index order: the given ones, by name.
pub fn chosen(nics: &LocalNics) -> Vec<&HostNic> {
    nics.nics
        .iter()
        .filter(|n| n.given)
        .take(MAX_LOCAL_NICS as usize)
        .collect()
}

/// The NIC of each NUMA node (`NODE_NICS_MAP`): its first chosen NIC that
/// is up, [`NO_NIC`] for none (a node no NIC is on, or only NICs whose node
/// is unknown: a veth's, a virtio NIC without an expander bridge).
pub fn node_nics(nics: &LocalNics) -> Vec<u32> {
    let chosen = chosen(nics);
    (0..MAX_NODES)
        .map(|node| {
            chosen
                .iter()
                .position(|n| n.up && n.node == Some(node))
                .map_or(NO_NIC, |index| index as u32)
        })
        .collect()
}

/// The chosen NICs that reach `sources.receiver`, each with the address a
/// flow through it binds (its least of the receiver's family): it is up,
/// that address has a table toward the receiver, and a connect from it
/// leaves by that NIC (the routing check found nothing missing for it;
/// unchecked, with fewer than two NICs, only the route's own source does).
pub fn reaching(host: &LocalHost, sources: &ReceiverSources) -> Vec<(u32, IpAddr)> {
    let receiver = sources.receiver;
    let planned = sources.sources();
    let routed = |nic: &HostNic, address: IpAddr| {
        if !host.routing.checked {
            return address == sources.route;
        }
        !host.routing.findings.iter().any(|f| {
            matches!(f, RoutingFinding::MissingSourceRule { nic: name, address: a,
                receiver: r, .. } if *name == nic.name && *a == address && *r == receiver)
        })
    };
    chosen(&host.nics)
        .into_iter()
        .enumerate()
        .filter_map(|(index, nic)| {
            let address = nic
                .addresses
                .iter()
                .copied()
                .find(|a| a.is_ipv4() == receiver.is_ipv4())?;
            (nic.up && planned.contains(&address) && routed(nic, address))
                .then_some((index as u32, address))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::local::routing::RoutingReport;

    fn nic(name: &str, addresses: &[&str], node: Option<u32>, up: bool) -> HostNic {
        HostNic {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().expect("ip")).collect(),
            node,
            up,
            members: Vec::new(),
            given: name.starts_with("eth"),
            description: None,
        }
    }

    fn host(nics: Vec<HostNic>, findings: Vec<RoutingFinding>) -> LocalHost {
        LocalHost {
            toward: Vec::new(),
            nics: LocalNics { nics },
            routing: RoutingReport {
                checked: true,
                findings,
                ..RoutingReport::default()
            },
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    /// Each node the index of its first given NIC that is up; a NIC down,
    /// not given or of an unknown node gives its node none.
    #[test]
    fn each_node_gets_its_nic() {
        let nics = LocalNics {
            nics: vec![
                nic("eth0", &["10.0.0.1"], Some(1), true),
                nic("eth1", &["10.1.0.1"], Some(0), true),
                nic("eth2", &["10.2.0.1"], Some(2), false),
                nic("eth3", &["10.3.0.1"], None, true),
                nic("lo", &["127.0.0.1"], Some(3), true),
            ],
        };
        let nodes = node_nics(&nics);
        assert_eq!(nodes.len(), MAX_NODES as usize);
        assert_eq!(&nodes[..4], [1, 0, NO_NIC, NO_NIC]);
        assert!(nodes[4..].iter().all(|n| *n == NO_NIC));
    }

    /// A NIC reaches a receiver when up, planned and routed by its own
    /// link; down, unrouted, unplanned or without an address of the
    /// family, not.
    #[test]
    fn only_a_nic_that_is_up_planned_and_routed_reaches() {
        let receiver = ip("10.9.0.1");
        let sources = ReceiverSources {
            others: vec![ip("10.1.0.1"), ip("10.2.0.1")],
            ..ReceiverSources::routed(receiver, ip("10.0.0.1"))
        };
        let nics = vec![
            nic("eth0", &["10.0.0.1", "fd00::1"], None, true),
            nic("eth1", &["10.1.0.1"], None, true),
            nic("eth2", &["10.2.0.1"], None, false),
            nic("eth3", &["fd00::3"], None, true),
            nic("eth4", &["10.4.0.1"], None, true),
        ];
        let unrouted = RoutingFinding::MissingSourceRule {
            nic: "eth1".into(),
            address: ip("10.1.0.1"),
            receiver,
            leaves_by: Some("eth0".into()),
            table: 1,
            fix: None,
        };
        let both = [(0, ip("10.0.0.1")), (1, ip("10.1.0.1"))];
        assert_eq!(reaching(&host(nics.clone(), vec![]), &sources), both);
        assert_eq!(
            reaching(&host(nics.clone(), vec![unrouted]), &sources),
            both[..1]
        );
        let mut unchecked = host(nics, vec![]);
        unchecked.routing.checked = false;
        assert_eq!(reaching(&unchecked, &sources), both[..1], "the route's own");
    }
}
