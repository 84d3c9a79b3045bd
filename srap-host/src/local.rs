//! The host's own addresses: an application may bind any of them before it
//! connects (`IP_BIND_ADDRESS_NO_PORT`, as HAProxy, nginx `proxy_bind` and
//! Envoy do), and SRAP keeps the address it chose, so each gets a table.

use std::{collections::BTreeSet, net::IpAddr};

use crate::error::HostError;

/// Every address configured on an interface of this network namespace that
/// an application could bind toward `receiver`: same family, not
/// link-local, and loopback only toward a loopback receiver.
pub fn addresses_toward(receiver: IpAddr) -> Result<Vec<IpAddr>, HostError> {
    Ok(interface_addresses()?
        .into_iter()
        .filter(|ip| usable_toward(*ip, receiver))
        .collect())
}

fn usable_toward(ip: IpAddr, receiver: IpAddr) -> bool {
    if ip.is_ipv4() != receiver.is_ipv4() || ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    if ip.is_loopback() != receiver.is_loopback() {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => !v4.is_link_local(),
        IpAddr::V6(v6) => !v6.is_unicast_link_local(),
    }
}

/// Addresses from `getifaddrs(3)`, sorted, once each.
fn interface_addresses() -> Result<BTreeSet<IpAddr>, HostError> {
    Ok(interfaces()?.iter().map(if_addrs::Interface::ip).collect())
}

/// The interface `ip` is configured on in this network namespace: where
/// the packets of flows bound to it arrive (`None`: on no interface).
pub fn interface_of(ip: IpAddr) -> Result<Option<String>, HostError> {
    Ok(interfaces()?
        .into_iter()
        .find(|i| i.ip() == ip)
        .map(|i| i.name))
}

/// One interface of this network namespace with the addresses it holds
/// that a flow could leave from (not link-local, not multicast).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub name: String,
    /// Sorted, once each, both families.
    pub addresses: BTreeSet<IpAddr>,
    /// Operationally up (`IFF_RUNNING`: up, and its carrier on).
    pub up: bool,
}

/// Every interface holding an address a flow could leave from, by name,
/// with its addresses and whether it is up (`getifaddrs(3)`).
pub fn holders() -> Result<Vec<Holder>, HostError> {
    let mut by_name = std::collections::BTreeMap::<String, Holder>::new();
    for interface in interfaces()? {
        let ip = interface.ip();
        if !sendable_from(ip) {
            continue;
        }
        let up = interface.is_oper_up();
        let holder = by_name
            .entry(interface.name.clone())
            .or_insert_with(|| Holder {
                name: interface.name,
                addresses: BTreeSet::new(),
                up,
            });
        holder.addresses.insert(ip);
    }
    Ok(by_name.into_values().collect())
}

/// Every sendable address of this namespace with its prefix (the subnet
/// it is on) and the interface holding it: two NICs on one subnet answer
/// ARP for each other's addresses unless told not to.
pub fn subnets() -> Result<Vec<(String, ipnet::IpNet)>, HostError> {
    Ok(interfaces()?
        .into_iter()
        .filter(|i| sendable_from(i.ip()))
        .filter_map(|i| {
            let net = match &i.addr {
                if_addrs::IfAddr::V4(v4) => ipnet::IpNet::new(v4.ip.into(), v4.prefixlen),
                if_addrs::IfAddr::V6(v6) => ipnet::IpNet::new(v6.ip.into(), v6.prefixlen),
            };
            Some((i.name, net.ok()?))
        })
        .collect())
}

/// An address a flow could leave from toward some receiver.
fn sendable_from(ip: IpAddr) -> bool {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    !(ip.is_unspecified() || ip.is_multicast() || link_local)
}

fn interfaces() -> Result<Vec<if_addrs::Interface>, HostError> {
    if_addrs::get_if_addrs().map_err(|source| HostError::Io {
        what: "listing the host's addresses (getifaddrs)".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn loopback_receivers_get_loopback_addresses_only() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let found = addresses_toward(lo).expect("getifaddrs");
        assert!(found.contains(&lo), "{found:?}");
        assert!(found.iter().all(|ip| ip.is_loopback()));
    }

    /// `lo` holds 127.0.0.1 in every namespace, and is up where tests run.
    #[test]
    fn loopback_holds_its_address() {
        let found = holders().expect("getifaddrs");
        let lo = found.iter().find(|h| h.name == "lo").expect("lo listed");
        assert!(
            lo.addresses.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{lo:?}"
        );
        assert!(!sendable_from("169.254.1.1".parse().expect("ip")));
        assert!(!sendable_from("fe80::1".parse().expect("ip")));
        assert!(sendable_from("fd00::1".parse().expect("ip")));
    }

    #[test]
    fn link_local_and_other_families_are_left_out() {
        let receiver: IpAddr = "10.0.0.2".parse().expect("ip");
        for (ip, usable) in [
            ("10.0.0.1", true),
            ("169.254.1.1", false),
            ("127.0.0.1", false),
            ("fd00::1", false),
        ] {
            assert_eq!(
                usable_toward(ip.parse().expect("ip"), receiver),
                usable,
                "{ip}"
            );
        }
        let v6: IpAddr = "fd00::2".parse().expect("ip");
        assert!(!usable_toward("fe80::1".parse().expect("ip"), v6));
        assert!(usable_toward("fd00::1".parse().expect("ip"), v6));
    }
}
