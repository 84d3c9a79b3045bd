//! CPU grants per receiver NIC ("grants cover CPUs per NIC"), on
//! a real kernel: a receiver namespace reached by two veth links on two
//! subnets, its agent serving both (`--iface` twice) with a description
//! each (`--rss` twice: a veth has no RSS) whose queues sit on different
//! CPUs, 0-3 on the first and 4-7 on the second; two sender agents (each
//! on a cgroup and pin directory of its own) follow it under
//! `--receiver-nics spread`, so each plans a slot per (NIC, CPU).
//!
//! The receiver shares each NIC's CPUs between the two senders on their
//! own. Judged by the tuples the server accepted, not by SRAP's report:
//! each accepted flow, hashed with the description of the link it entered
//! by, lands on a CPU its sender's grant on that NIC covers; the two
//! senders' grants are disjoint on each NIC and within its CPUs; each
//! sender's flows use both NICs; no connect fails. Everything lives in the
//! test's namespaces, cgroups, pin directories and temporary directory,
//! removed on drop.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    ops::ControlFlow,
    time::Duration,
};

use srap_common::rss::{RssDescription, RssModel, embedded_default};
use srap_status::sender::ReceiverRow;
use srap_tests::{
    TwoHosts, built_binary,
    flows::{Sink, listen_deep},
    harness::{ReceiverAgent, SenderAgent, SenderOpts, TempDir, landings, poll_until},
    require_privileged,
    subnet::Subnet,
    test_workload::Workload,
    two_links,
};

/// The service port.
const DPORT: u16 = 5201;
const TIMEOUT: Duration = Duration::from_secs(20);
/// Flows each sender opens: two per NIC, as many as its grant there holds.
const FLOWS: usize = 4;
const KIB: u32 = 64;

/// A 4-queue description (the embedded key) whose queues sit on `cpus`.
fn four_queues_on(cpus: [u32; 4]) -> RssDescription {
    let mut description = embedded_default();
    for (n, entry) in description.indir.iter_mut().enumerate() {
        *entry = (n % 4) as u32;
    }
    description.queue_cpu = Some(cpus.to_vec());
    description
}

/// The receiver's two NICs' descriptions, first then second.
fn descriptions() -> [RssDescription; 2] {
    [four_queues_on([0, 1, 2, 3]), four_queues_on([4, 5, 6, 7])]
}

/// The CPUs each of a receiver's NICs grants this sender, by NIC name,
/// once every NIC's grant is told and both addresses are planned.
fn grants_per_nic(row: &ReceiverRow) -> Option<BTreeMap<String, BTreeSet<u32>>> {
    if row.addresses.len() < 2 || row.nics.len() < 2 {
        return None;
    }
    row.nics
        .iter()
        .map(|nic| {
            let cpus: BTreeSet<u32> = nic.granted.as_ref()?.iter().copied().collect();
            (!cpus.is_empty()).then(|| (nic.name.clone(), cpus))
        })
        .collect()
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn two_senders_get_disjoint_cpus_of_each_nic_and_their_flows_land_there() {
    require_privileged("a receiver of two veth links granting each NIC's CPUs to two senders");
    let second = Subnet::lease().expect("a second subnet");
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let (_near, far) = hosts.second_link(&second).expect("a second veth link");
    let files = TempDir::new("nic-grants").expect("a temporary directory");
    let [first_rss, second_rss] = descriptions();
    let second_file = files
        .write("second.json", second_rss.to_json_pretty())
        .expect("the second NIC's description");
    let opts = two_links::receiver_opts(&hosts, &far)
        .rss(first_rss.clone())
        .args(["--rss".into(), second_file.display().to_string()]);
    let receiver = ReceiverAgent::start(&hosts.receiver, opts).expect("the receiver agent");
    let addrs = [hosts.receiver_end.ip(false), far.ip(false)];
    let listener = hosts
        .receiver
        .run(|| listen_deep(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DPORT)))
        .expect("receiver netns")
        .expect("listen");
    let sink = Sink::start(listener);

    let senders: Vec<SenderAgent> = (0..2)
        .map(|_| {
            let opts = SenderOpts::new(built_binary("srap-agent"))
                .peer(receiver.peer())
                .args([
                    "--receiver".to_owned(),
                    addrs[0].to_string(),
                    "--receiver-nics".to_owned(),
                    "spread".to_owned(),
                ]);
            let mut sender = SenderAgent::new(&hosts.sender, opts).expect("a sender agent");
            sender.launch().expect("the sender agent steers");
            sender
        })
        .collect();

    // Each sender's grant on each NIC, once both are told theirs and the
    // split is disjoint (the second sender's arrival re-balances).
    let nic_names = [hosts.receiver_end.ifname.clone(), far.ifname.clone()];
    let mut last = Vec::new();
    let settled = poll_until(TIMEOUT, Duration::from_millis(100), || {
        last = senders
            .iter()
            .map(|s| {
                let status = s.status().expect("a sender's status");
                status.receivers.first().and_then(grants_per_nic)
            })
            .collect();
        let [Some(a), Some(b)] = [&last[0], &last[1]] else {
            return ControlFlow::Continue(());
        };
        let disjoint = nic_names
            .iter()
            .all(|nic| matches!((a.get(nic), b.get(nic)), (Some(x), Some(y)) if x.is_disjoint(y)));
        if disjoint {
            ControlFlow::Break([a.clone(), b.clone()])
        } else {
            ControlFlow::Continue(())
        }
    });
    let grants = settled.unwrap_or_else(|_| {
        panic!(
            "both senders told disjoint grants on each NIC within {TIMEOUT:?}; last: {last:?}\n\
             receiver log:\n{}",
            receiver.log().tail()
        )
    });
    println!(
        "grants per NIC: sender 0 {:?}, sender 1 {:?}",
        grants[0], grants[1]
    );
    for (nic, offered) in nic_names.iter().zip([0..4u32, 4..8]) {
        for grant in &grants {
            let cpus = &grant[nic];
            assert!(
                cpus.iter().all(|c| offered.contains(c)),
                "{nic}: granted {cpus:?}, outside its CPUs {offered:?}"
            );
        }
    }
    if let Ok(status) = receiver.status() {
        for peer in &status.peers {
            println!("receiver: {} granted {:?}", peer.addr, peer.granted_nics);
        }
    }

    // Each sender's flows, by the local ports its workload opened.
    let mut owner = BTreeMap::new();
    let mut workloads = Vec::new();
    for (i, sender) in senders.iter().enumerate() {
        let cgroup = sender.cgroup().to_path_buf();
        let asked = SocketAddr::new(addrs[0], DPORT);
        let mut workload = Workload::spawn(&hosts.sender, Some(&cgroup), asked);
        let opened = workload.bulk(FLOWS, KIB);
        assert_eq!(opened.len(), FLOWS, "sender {i}: {opened:?}");
        assert!(
            opened.iter().all(|p| *p != 0),
            "sender {i}: a connect failed: {opened:?}"
        );
        owner.extend(opened.iter().map(|port| (*port, i)));
        workloads.push(workload);
    }
    let accepted = sink.finish(Duration::from_millis(500));
    for workload in workloads {
        workload.finish();
    }
    assert_eq!(accepted.len(), 2 * FLOWS, "{accepted:?}");

    // Where each accepted flow lands, by the description of its link.
    let models = [&first_rss, &second_rss]
        .map(|d| RssModel::from_description(d).expect("a model of the test's description"));
    let mut nics_used = [BTreeSet::new(), BTreeSet::new()];
    for flow in &accepted {
        let nic = addrs
            .iter()
            .position(|a| *a == flow.local.ip())
            .expect("accepted on one of the two addresses");
        let sender = *owner
            .get(&flow.peer.port())
            .unwrap_or_else(|| panic!("flow {flow:?} from neither workload: {owner:?}"));
        let service = SocketAddr::new(addrs[nic], DPORT);
        let landing = landings(&models[nic], &[flow.peer], service).expect("landing")[0];
        let granted = &grants[sender][&nic_names[nic]];
        println!(
            "sender {sender}: {} -> {} on {} CPU {} (granted {granted:?})",
            flow.peer, flow.local, nic_names[nic], landing.cpu
        );
        assert!(
            granted.contains(&landing.cpu),
            "sender {sender}'s flow {} entered by {} on CPU {}, outside its grant there \
             {granted:?}",
            flow.peer,
            nic_names[nic],
            landing.cpu
        );
        nics_used[sender].insert(nic);
    }
    for (sender, used) in nics_used.iter().enumerate() {
        assert_eq!(
            used.len(),
            2,
            "sender {sender}'s flows spread over both NICs: {used:?}"
        );
    }
}
