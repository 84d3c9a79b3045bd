//! This host's NICs as the sender reads them ([`LocalHost`]), on a real
//! kernel: a namespace with two veth links, each with its own address, is
//! read as two NICs with their addresses, up, and no NUMA node (a veth has
//! no device: unknown, never node 0); a link taken down, or an address
//! added, changes the snapshot within a second (the follow driver checks
//! every second and re-plans on a change), and a receiver whose route went
//! with the link keeps its planned sources in a running plan's snapshot.

use std::{ops::ControlFlow, time::Duration};

use srap_daemon::sender::local::{
    LocalHost,
    bond::{BondMembers, BondSettings},
    nics::{LocalNics, NicSettings},
};
use srap_tests::{TwoHosts, harness::poll_until, require_privileged, subnet::Subnet};

/// Reads this host's NICs in the sender's namespace.
fn nics_in(hosts: &TwoHosts) -> LocalNics {
    hosts
        .sender
        .run(|| LocalNics::discover(&NicSettings::default()))
        .expect("entering the sender's namespace")
        .expect("reading this host's NICs")
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn two_links_are_two_nics_and_a_link_down_changes_the_snapshot_within_a_second() {
    require_privileged("reading this host's NICs in a namespace with two veth links");
    // Declared first, dropped last: held until the namespaces are gone.
    let second = Subnet::lease().expect("a second subnet");
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let (near, far) = hosts.second_link(&second).expect("a second veth link");
    let first = &hosts.sender_end;
    let receivers = [hosts.receiver_end.ipv4.into(), far.ipv4.into()];
    let bonds = BondSettings::new(BondMembers::Balance);
    let settings = NicSettings::default();

    let planned = hosts
        .sender
        .run(|| LocalHost::discover(&receivers, &bonds, &settings))
        .expect("entering the sender's namespace")
        .expect("reading this host toward both receivers");
    for (end, receiver) in [(first, receivers[0]), (&near, receivers[1])] {
        let nic = planned
            .nics
            .get(&end.ifname)
            .unwrap_or_else(|| panic!("{} listed: {:?}", end.ifname, planned.nics));
        assert!(nic.addresses.contains(&end.ipv4.into()), "{nic:?}");
        assert!(nic.up, "{nic:?}");
        assert_eq!(nic.node, None, "a veth's node is unknown, not 0: {nic:?}");
        assert!(nic.members.is_empty() && !nic.given, "{nic:?}");
        let holder = planned.holder_of(end.ipv4.into()).map(|n| &n.name);
        assert_eq!(holder, Some(&end.ifname), "who holds {}", end.ipv4);
        let toward = planned
            .toward
            .iter()
            .find(|t| t.receiver == receiver)
            .expect("toward the receiver");
        assert_eq!(
            toward.route,
            std::net::IpAddr::from(end.ipv4),
            "route source toward {receiver}"
        );
    }
    assert_eq!(
        planned.nics,
        nics_in(&hosts),
        "nothing changed: the same snapshot"
    );

    hosts
        .sender
        .ip(["link", "set", &near.ifname, "down"])
        .expect("taking the second link down");
    let moved = poll_until(Duration::from_secs(1), Duration::from_millis(50), || {
        let moved = hosts
            .sender
            .run(|| planned.nics_moved(&settings))
            .expect("entering the sender's namespace");
        if moved {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    assert!(moved.is_ok(), "a link down changed no snapshot within 1 s");
    let down = nics_in(&hosts);
    let nic = down.get(&near.ifname).expect("a link down is still listed");
    assert!(!nic.up, "{nic:?}");
    assert!(nic.addresses.contains(&near.ipv4.into()), "{nic:?}");
    assert!(down.get(&first.ifname).is_some_and(|n| n.up), "{down:?}");
    // The second receiver has no route now: the snapshot of a running plan
    // keeps its sources and still follows the NICs (a fresh read fails).
    let again = hosts
        .sender
        .run(|| planned.rediscover(&receivers, &bonds, &settings))
        .expect("entering the sender's namespace")
        .expect("a running plan's snapshot despite a receiver without a route");
    assert_eq!(again.toward, planned.toward);
    assert_eq!(again.nics, down);
    let fresh = hosts
        .sender
        .run(|| LocalHost::discover(&receivers, &bonds, &settings))
        .expect("entering the sender's namespace");
    assert!(fresh.is_err(), "no route to {}: {fresh:?}", receivers[1]);

    hosts
        .sender
        .ip(["link", "set", &near.ifname, "up"])
        .expect("the second link up again");
    let extra = second.ipv4(3);
    hosts
        .sender
        .ip(["addr", "add", &format!("{extra}/24"), "dev", &first.ifname])
        .expect("an address added");
    let now = nics_in(&hosts);
    assert_ne!(now, planned.nics, "an address added is a new snapshot");
    let holder = now.holding(extra.into()).map(|n| n.name.as_str());
    assert_eq!(holder, Some(first.ifname.as_str()));
}
