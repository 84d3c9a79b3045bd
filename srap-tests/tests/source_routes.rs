//! Routing that follows the source address, on a real
//! kernel: a sender namespace with two veth links to a receiver namespace,
//! each its own subnet, the receiver's service address reached via link A
//! by the main table (and via B only at a worse metric). With `--local-nics
//! numa` over both links, the check reports link B's missing source rule
//! with the exact command; with `--source-rules install` the rule and its
//! table's route appear (read back over netlink), and a TCP connect bound
//! to B's address leaves by B — judged by B's own `tx_bytes`, the kernel's
//! count, not SRAP's — and is answered. Removing what SRAP installed (what
//! `srap-agent detach` and a clean stop run) takes exactly those away: a
//! rule and route someone else put in SRAP's priority and table range stay.
//! Everything lives in the test's namespaces, deleted on drop.

use std::{
    io::Write as _,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use socket2::{Domain, Socket, Type};
use srap_daemon::sender::{
    ends::{LocalNicsPolicy, SourceRules},
    local::{
        LocalHost,
        bond::{BondMembers, BondSettings},
        nics::{GivenNic, NicSettings},
        routing::{PROTOCOL, RULE_PRIORITY, RoutingFinding, TABLE_BASE},
        source_rules,
    },
};
use srap_host::fib;
use srap_tests::{NetNs, TwoHosts, harness::Listener, require_privileged, subnet::Subnet};

const PAYLOAD: usize = 64 * 1024;

/// `iface`'s `tx_bytes` in `ns`, as its kernel keeps it.
fn tx_bytes(ns: &NetNs, iface: &str) -> u64 {
    ns.iface_counter(iface, "tx_bytes")
        .expect("reading tx_bytes")
}

fn settings(a: &str, b: &str, source_rules: SourceRules) -> NicSettings {
    let given = |name: &str| GivenNic {
        name: name.into(),
        description: None,
    };
    NicSettings {
        policy: LocalNicsPolicy::Numa,
        given: vec![given(a), given(b)],
        source_rules,
    }
}

/// Connects from `from` to `to` in `ns`, sends [`PAYLOAD`] bytes.
fn send_from(ns: &NetNs, from: IpAddr, to: SocketAddr) -> std::io::Result<()> {
    ns.run(|| {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        socket.bind(&SocketAddr::new(from, 0).into())?;
        socket.connect_timeout(&to.into(), Duration::from_secs(3))?;
        let mut stream = std::net::TcpStream::from(socket);
        stream.write_all(&[0x5a; PAYLOAD])?;
        stream.flush()
    })
    .expect("entering the sender's namespace")
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_missing_source_rule_is_reported_installed_followed_by_the_kernel_and_removed() {
    require_privileged("policy routing in a namespace with two veth links");
    // Declared first, dropped last: held until the namespaces are gone.
    let second = Subnet::lease().expect("a second subnet");
    let service_net = Subnet::lease().expect("the receiver's service subnet");
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let (near, far) = hosts.second_link(&second).expect("a second veth link");
    let (a, b) = (&hosts.sender_end.ifname, &near.ifname);
    let service = service_net.ipv4(1);
    let prefix = format!("{}/24", service_net.ipv4(0));
    hosts
        .receiver
        .ip(["addr", "add", &format!("{service}/32"), "dev", "lo"])
        .expect("the service address");
    let via_a = hosts.receiver_end.ipv4.to_string();
    let via_b = far.ipv4.to_string();
    for (via, dev, metric) in [(&via_a, a, "10"), (&via_b, b, "200")] {
        hosts
            .sender
            .ip([
                "route", "add", &prefix, "via", via, "dev", dev, "metric", metric,
            ])
            .expect("a route toward the service");
    }
    // Someone else's rule and route in SRAP's priority and table range.
    let foreign_table = (TABLE_BASE + 0xf00).to_string();
    hosts
        .sender
        .ip([
            "rule",
            "add",
            "from",
            "192.0.2.1",
            "table",
            &foreign_table,
            "priority",
            &RULE_PRIORITY.to_string(),
        ])
        .expect("a foreign rule");
    hosts
        .sender
        .ip([
            "route",
            "add",
            &prefix,
            "via",
            &via_a,
            "dev",
            a,
            "table",
            &foreign_table,
        ])
        .expect("a foreign route");
    let receivers = [IpAddr::from(service)];
    let bonds = BondSettings::new(BondMembers::Balance);
    let ifindex_b = hosts
        .sender
        .run(|| fib::ifindex(b))
        .expect("entering the sender's namespace")
        .expect("B's index");
    let table = TABLE_BASE + ifindex_b;

    // check: B's missing rule, with the exact command; nothing for A.
    // As the planner does: read the host, then install what it lacks (only
    // under `install`; the read itself changes nothing).
    let read = |mode| {
        hosts
            .sender
            .run(|| {
                let nics = settings(a, b, mode);
                let mut host = LocalHost::discover(&receivers, &bonds, &nics)?;
                host.install_source_rules(&nics, &receivers);
                Ok::<_, srap_daemon::sender::SenderError>(host)
            })
            .expect("entering the sender's namespace")
            .expect("reading this host")
    };
    let checked = read(SourceRules::Check);
    assert!(checked.routing.checked, "{:?}", checked.routing);
    let expected = format!(
        "{b}: flows from {} to {service} do not leave by {b} (the route leaves by {a}); add a \
         source rule: ip rule add from {} table {table} && ip route add {prefix} via {via_b} dev \
         {b} table {table}",
        near.ipv4, near.ipv4
    );
    let messages: Vec<String> = checked
        .routing
        .findings
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        messages.contains(&expected),
        "{expected}\nnot in {messages:#?}"
    );
    assert!(
        !checked.routing.findings.iter().any(|f| matches!(f,
            RoutingFinding::MissingSourceRule { nic, .. } if nic == a)),
        "A is the route's NIC: {messages:#?}"
    );
    assert!(
        checked.routing.installed.is_empty(),
        "check installs nothing"
    );

    // rp_filter strict on B is said with its fix; loose, it is not.
    let rp_filter = |value: &str| {
        let key = format!("net.ipv4.conf.{b}.rp_filter={value}");
        hosts
            .sender
            .exec("sysctl", ["-w", &key])
            .expect("setting rp_filter");
    };
    rp_filter("1");
    let strict = read(SourceRules::Check);
    let fix = format!("sysctl -w net.ipv4.conf.{b}.rp_filter=2");
    assert!(
        strict.routing.findings.iter().any(|f| matches!(f,
            RoutingFinding::StrictReversePath { nic, .. } if nic == b)
            && f.to_string().ends_with(&fix)),
        "{:#?}",
        strict.routing.findings
    );
    rp_filter("2");

    // Without the rule, the kernel sends a flow bound to B's address by A.
    let mut listener = Listener::bind(
        &hosts.receiver,
        SocketAddr::new(service.into(), 0),
        Duration::from_secs(5),
    )
    .expect("a listener on the service address");
    let to = SocketAddr::new(
        service.into(),
        listener.local_addr().expect("its port").port(),
    );
    let a_before = tx_bytes(&hosts.sender, a);
    send_from(&hosts.sender, near.ipv4.into(), to).expect("a connect from B's address, by A");
    listener.accept(1).expect("the receiver accepts");
    let a_sent = tx_bytes(&hosts.sender, a) - a_before;
    assert!(
        a_sent >= PAYLOAD as u64,
        "without the rule A sent {a_sent} bytes"
    );

    // install: the rule and route appear, and the check is satisfied.
    let installed = read(SourceRules::Install);
    assert_eq!(
        installed.routing.installed.len(),
        1,
        "{:?}",
        installed.routing
    );
    assert!(
        !installed
            .routing
            .findings
            .iter()
            .any(|f| matches!(f, RoutingFinding::MissingSourceRule { .. })),
        "{:?}",
        installed.routing
    );
    let (rules, routes) = ipv4_fib(&hosts.sender);
    let rule = rules
        .iter()
        .find(|r| r.table == table)
        .unwrap_or_else(|| panic!("a rule for table {table} in {rules:#?}"));
    assert_eq!(rule.src, Some(IpAddr::from(near.ipv4).into()));
    assert_eq!((rule.priority, rule.protocol), (RULE_PRIORITY, PROTOCOL));
    let route = routes
        .iter()
        .find(|r| r.table == table)
        .unwrap_or_else(|| panic!("a route in table {table}"));
    assert_eq!(route.dst.to_string(), prefix);
    assert_eq!(
        (route.oif, route.gateway),
        (Some(ifindex_b), Some(far.ipv4.into()))
    );

    // A rule an earlier run left for an address no NIC holds now is
    // removed by the next install; the one still needed stays.
    let stale = fib::SourceRule {
        src: "192.0.2.9".parse().expect("ip"),
        table: TABLE_BASE + 0xe00,
        priority: RULE_PRIORITY,
        protocol: PROTOCOL,
    };
    hosts
        .sender
        .run(|| fib::add_rule(&stale))
        .expect("entering the sender's namespace")
        .expect("a stale SRAP rule");
    let restarted = read(SourceRules::Install);
    assert_eq!(restarted.routing.installed, installed.routing.installed);
    let rules = hosts
        .sender
        .run(|| fib::rules(libc::AF_INET as u8).expect("rules"))
        .expect("entering the sender's namespace");
    assert!(!rules.iter().any(|r| r.table == stale.table), "{rules:#?}");
    assert!(rules.iter().any(|r| r.table == table), "{rules:#?}");

    // A connect bound to B's address leaves by B and is answered.
    let (a_before, b_before) = (tx_bytes(&hosts.sender, a), tx_bytes(&hosts.sender, b));
    send_from(&hosts.sender, near.ipv4.into(), to)
        .expect("the connect bound to B's address succeeds");
    let peers = listener.accept(1).expect("the receiver accepts");
    assert_eq!(
        peers[0].ip(),
        IpAddr::from(near.ipv4),
        "the source the receiver saw"
    );
    let (a_sent, b_sent) = (
        tx_bytes(&hosts.sender, a) - a_before,
        tx_bytes(&hosts.sender, b) - b_before,
    );
    assert!(
        b_sent >= PAYLOAD as u64,
        "B sent {b_sent} bytes, A {a_sent}"
    );
    assert!(
        a_sent < PAYLOAD as u64 / 4,
        "A sent {a_sent} bytes of a flow bound to B"
    );

    // Removing what SRAP installed: exactly the rule and its route.
    let removed = hosts
        .sender
        .run(source_rules::remove_installed)
        .expect("entering the sender's namespace")
        .expect("removing SRAP's source rules");
    assert_eq!(removed, 2, "one rule and one route");
    let (rules, routes) = ipv4_fib(&hosts.sender);
    assert!(!rules.iter().any(|r| r.table == table), "{rules:#?}");
    assert!(!routes.iter().any(|r| r.table == table), "{routes:#?}");
    let foreign: u32 = foreign_table.parse().expect("a number");
    assert!(
        rules.iter().any(|r| r.table == foreign),
        "the foreign rule stays: {rules:#?}"
    );
    assert!(
        routes.iter().any(|r| r.table == foreign),
        "the foreign route stays"
    );
    let again = read(SourceRules::Check);
    assert!(
        again
            .routing
            .findings
            .iter()
            .any(|f| f.to_string() == expected),
        "reported again"
    );
}

/// `ns`'s IPv4 FIB rules and the routes of every table, as srap-host reads
/// them there.
fn ipv4_fib(ns: &NetNs) -> (Vec<fib::FibRule>, Vec<fib::FibRoute>) {
    ns.run(|| {
        let family = libc::AF_INET as u8;
        (
            fib::rules(family).expect("rules"),
            fib::routes(family).expect("routes"),
        )
    })
    .expect("entering the sender's namespace")
}
