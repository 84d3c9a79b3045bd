use srap_common::wire::{NicInfo, PortAcceptance};

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

fn nic(name: &str, addr: &str, link: NicLink) -> NicInfo {
    NicInfo {
        name: name.into(),
        addrs: vec![ip(addr)],
        numa_node: None,
        link,
        speed_mbps: None,
        description: None,
        verifier: None,
        cpus: vec![0, 1],
    }
}

/// A receiver of two NICs (10.0.1.2, 10.0.2.2); port 5201 accepted on
/// both, port 22 on the first only.
fn two_nics(second: NicLink) -> ReceiverNics {
    ReceiverNics {
        nics: vec![
            nic("eth0", "10.0.1.2", NicLink::Up),
            nic("eth1", "10.0.2.2", second),
        ],
        ports: vec![
            PortAcceptance {
                port: 22,
                addrs: vec![ip("10.0.1.2")],
            },
            PortAcceptance {
                port: 5201,
                addrs: vec![ip("10.0.1.2"), ip("10.0.2.2")],
            },
        ],
    }
}

/// The plan's any-port destination (unbound source) toward each address.
fn planned(addrs: &[&str]) -> Vec<(DestKey, DestValue)> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (family, words) = addr_words(ip(a));
            let family = srap_common::family::Family::from_raw(family).expect("family");
            let key = DestKey::new(Protocol::Tcp, family, 0, words, [0; 4]);
            let value = DestValue {
                table: i as u32,
                receiver: 1 + i as u32,
                local_table: DestValue::NO_LOCAL,
                joint: 0,
            };
            (key, value)
        })
        .collect()
}

fn peer(nics: ReceiverNics) -> SpreadPeer {
    SpreadPeer {
        asked: vec![ip("10.0.1.2")],
        nics,
    }
}

#[test]
fn the_default_is_the_address_asked_for() {
    assert_eq!(ReceiverNicsMode::default(), ReceiverNicsMode::Asked);
}

#[test]
fn a_port_accepted_on_both_addresses_spreads_over_both() {
    let rows = rows(
        &planned(&["10.0.1.2", "10.0.2.2"]),
        &[peer(two_nics(NicLink::Up))],
    );
    assert_eq!(rows.len(), 1, "port 5201 only: 22 is accepted on one");
    let (key, row) = rows[0];
    assert_eq!(key.port, 5201);
    assert_eq!(key.addr, addr_words(ip("10.0.1.2")).1);
    assert_eq!(row.count, 2);
    assert_eq!(row.addrs[0], addr_words(ip("10.0.1.2")).1, "asked first");
    assert_eq!(row.addrs[1], addr_words(ip("10.0.2.2")).1);
}

#[test]
fn a_nic_down_or_an_address_without_a_plan_is_no_alternative() {
    let down = rows(
        &planned(&["10.0.1.2", "10.0.2.2"]),
        &[peer(two_nics(NicLink::Down))],
    );
    assert!(down.is_empty(), "{down:?}");
    let unrouted = rows(&planned(&["10.0.1.2"]), &[peer(two_nics(NicLink::Up))]);
    assert!(unrouted.is_empty(), "{unrouted:?}");
}

#[test]
fn the_extra_addresses_are_the_accepting_ones_not_asked() {
    let mut nics = two_nics(NicLink::Up);
    nics.ports[1].addrs.push(ip("fe80::1"));
    nics.nics[1].addrs.push(ip("fe80::1"));
    assert_eq!(extra_addrs(&[ip("10.0.1.2")], &nics), [ip("10.0.2.2")]);
}

#[test]
fn a_new_verdict_plans_nothing_a_link_or_listener_does() {
    let now = two_nics(NicLink::Up);
    let mut verdict = now.clone();
    verdict.nics[1].cpus = vec![0];
    assert!(same_plan(&now, &verdict), "CPUs and verdicts plan nothing");
    assert!(!same_plan(&now, &two_nics(NicLink::Down)));
    let mut gone = now.clone();
    gone.ports.pop();
    assert!(!same_plan(&now, &gone));
}

#[test]
fn a_faster_nic_takes_more_turns_and_an_unknown_speed_one_each() {
    let (a, b) = (ip("10.0.1.2"), ip("10.0.2.2"));
    assert_eq!(
        weighted(&[(a, Some(100_000)), (b, Some(200_000))]),
        [a, b, b]
    );
    assert_eq!(weighted(&[(a, Some(100_000)), (b, None)]), [a, b]);
    assert_eq!(
        weighted(&[(a, Some(1_000)), (b, Some(100_000))]),
        [a, b],
        "past MAX_SPREAD"
    );
}

#[test]
fn a_second_address_of_one_nic_is_no_second_turn() {
    let mut nics = two_nics(NicLink::Up);
    nics.nics[1].addrs.push(ip("10.0.2.3"));
    nics.ports[1].addrs.push(ip("10.0.2.3"));
    let rows = rows(
        &planned(&["10.0.1.2", "10.0.2.2", "10.0.2.3"]),
        &[peer(nics)],
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1.count, 2, "{:?}", rows[0].1);
}
