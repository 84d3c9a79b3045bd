//! SRAP against more than one RSS implementation it did not write: QEMU
//! 10's igb (Intel 82576, Linux's `igb` driver, a key the driver never
//! reports) and virtio-net, under Debian's generic 6.1 (ethtool ioctl) and
//! 6.12 (ethtool netlink) kernels. Every verdict comes from the guest
//! itself: `ethtool -x/-l/-S`, `/proc/interrupts`, `/proc/irq`, the kernel's
//! own `netdev_rss_key`, and the source ports its server accepted hashed
//! with the key the device really uses ([`truth::device_key`]).
//!
//! Each test boots its own guests (10 to 15 s each under software
//! emulation); they run one at a time.

use std::{collections::BTreeSet, net::SocketAddr};

use srap_common::rss::{FlowTuple, RssDescription};
use srap_harness::guest::{
    Guest, GuestFiles, GuestImage, GuestKernel, GuestNet, GuestNic, GuestShape, truth,
};
use srap_lab::virtio::{GUEST_CONTROL, GuestRun, VirtioLab};
use srap_tests::{built_binary, require_privileged};

use crate::ONE_GUEST;

fn image(kernel: GuestKernel) -> GuestImage {
    let agent = built_binary("srap-agent");
    let cache = GuestImage::default_cache(&agent);
    let files = GuestFiles::locate(None, &agent).expect("the guest files");
    GuestImage::prepare(&files, kernel, &cache, &agent, &built_binary("srap"))
        .expect("the guest image")
}

fn iperf3(flows: usize) -> Vec<String> {
    format!("iperf3 -c {{server}} -p {{port}} -P {flows} -t 2")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The IRQ of receive queue `queue` by the driver's own vector names.
fn queue_irq(guest: &mut Guest, queue: u32) -> String {
    let pattern = match guest.shape.nic {
        // igb names separate rx vectors `eth0-rx-N` (with as many vectors as
        // vCPUs and queues) or shared ones `eth0-TxRx-N`.
        GuestNic::Igb => format!("eth0-(rx|TxRx)-{queue}$"),
        GuestNic::Virtio => format!("virtio0-input.{queue}$"),
    };
    let irq = guest
        .run(&format!(
            "grep -E '{pattern}' /proc/interrupts | cut -d: -f1"
        ))
        .expect("the queue's IRQ");
    irq.trim().to_owned()
}

/// The CPU /proc says queue `queue`'s interrupt runs on: its one affinity
/// CPU, or where it is routed now when it may run on several.
fn proc_cpu(guest: &mut Guest, queue: u32) -> u32 {
    let irq = queue_irq(guest, queue);
    let read = |guest: &mut Guest, file: &str| {
        guest
            .run(&format!("cat /proc/irq/{irq}/{file}"))
            .expect("an IRQ file")
            .trim()
            .to_owned()
    };
    let affinity = read(guest, "smp_affinity_list");
    let cpu = if affinity.contains(['-', ',']) {
        read(guest, "effective_affinity_list")
    } else {
        affinity
    };
    cpu.parse().expect("one CPU")
}

/// `srap rss show` in the guest says what the guest's own tools say, on igb
/// (6.1: ioctl; 6.12: netlink) and virtio-net under 6.12 (netlink): the
/// table of `ethtool -x`, the queue count of `ethtool -l`, for each queue
/// the CPU /proc gives its IRQ, and the key — `ethtool -x`'s for virtio-net,
/// the first 40 bytes of the kernel's `netdev_rss_key` for igb, whose driver
/// reports none (said so in the output).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn discovery_agrees_with_ethtool_and_proc_on_igb_and_virtio() {
    require_privileged("discovery_agrees_with_ethtool_and_proc_on_igb_and_virtio");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    for (nic, kernel) in [
        (GuestNic::Igb, GuestKernel::V6_1),
        (GuestNic::Igb, GuestKernel::V6_12),
        (GuestNic::Virtio, GuestKernel::V6_12),
    ] {
        let what = format!("{nic:?} on {kernel}");
        let net = GuestNet::new().expect("namespace with a tap");
        let shape = GuestShape::with_nic(nic, 4, None).expect("shape");
        let mut guest = Guest::boot(&net, &image(kernel), shape).expect("guest boots");
        guest.enable_rss().expect("RSS on");

        let text = guest
            .run("srap rss show --iface eth0")
            .expect("srap rss show");
        let path = match kernel {
            GuestKernel::V6_1 => "read over ethtool ioctl",
            GuestKernel::V6_12 => "read over ethtool netlink",
        };
        assert!(text.contains(path), "{what}: {text}");
        let shown = guest
            .run("srap rss show --iface eth0 --json 2>/dev/null")
            .expect("srap rss show --json");
        let shown = RssDescription::from_json(&shown).expect("its JSON");
        let ethtool = truth::ethtool_rss(&mut guest).expect("ethtool -x");
        assert_eq!(shown.indir, ethtool.indir, "{what}");
        match nic {
            GuestNic::Igb => {
                assert_eq!(ethtool.key, "", "{what}: igb reports no key");
                let kernel_key = guest
                    .run("cat /proc/sys/net/core/netdev_rss_key")
                    .expect("netdev_rss_key");
                let first_40: Vec<&str> = kernel_key.trim().split(':').take(40).collect();
                assert_eq!(shown.key, first_40.join(":"), "{what}");
                assert!(
                    text.contains("from net.core.netdev_rss_key"),
                    "{what}: {text}"
                );
            }
            GuestNic::Virtio => assert_eq!(shown.key, ethtool.key, "{what}"),
        }

        let channels = guest.run("ethtool -l eth0").expect("ethtool -l");
        let current = channels
            .split("Current hardware settings:")
            .nth(1)
            .and_then(|c| c.lines().find_map(|l| l.trim().strip_prefix("Combined:")))
            .map(str::trim);
        assert_eq!(current, Some("4"), "{what}: {channels}");
        let queue_cpu = shown.queue_cpu.expect("queue → CPU");
        assert_eq!(queue_cpu.len(), 4, "{what}");
        for (queue, &cpu) in (0u32..).zip(&queue_cpu) {
            assert_eq!(
                proc_cpu(&mut guest, queue),
                cpu,
                "{what}: rx-{queue}\n{text}"
            );
        }
        if nic == GuestNic::Igb {
            assert!(text.contains("no IRQ affinity hint"), "{what}: {text}");
        }
    }
}

/// Boots `nic` on 6.12 with 4 queues (and sock_diag for TCP or not), runs
/// 4 steered iperf3 flows, and checks them by the guest: 4 accepted ports
/// on 4 distinct queues by the device's real key and table, exactly those
/// queues busy by `ethtool -S`, and SRAP's own observer reporting each
/// flow on the queue the guest's counters show.
fn steered_flows_on(nic: GuestNic, sock_diag: bool) -> srap_status::Status {
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let net = GuestNet::new().expect("namespace with a tap");
    let mut shape = GuestShape::with_nic(nic, 4, None).expect("shape");
    if !sock_diag {
        shape = shape.without_sock_diag();
    }
    let image = image(GuestKernel::V6_12);
    let mut lab = VirtioLab::start_with(&net, &image, shape, &built_binary("srap-agent"))
        .expect("guest and agents");
    let run = lab
        .run_workload(&iperf3(4), true, 2)
        .expect("steered workload");
    let report = format!(
        "{}\nreceiver:\n{}",
        run.render(&format!("{nic:?}, steered"), 2.0),
        lab.receiver_log()
    );
    assert_eq!(run.accepted.len(), 4, "{report}");
    assert_eq!(run.distinct_queues(), 4, "{report}");
    let planned: BTreeSet<u32> = run.accepted.iter().map(|&(_, q)| q).collect();
    assert_eq!(run.busy_queues, planned, "{report}");
    let seen: BTreeSet<u32> = run.srap.flows.iter().filter_map(|f| f.queue).collect();
    assert_eq!(run.srap.flows.len(), 4, "{report}");
    assert_eq!(
        seen, run.busy_queues,
        "SRAP's observer vs ethtool -S\n{report}"
    );
    if !sock_diag {
        // tc ingress, the one hook that reads the NIC's hash.
        assert!(run.status.nic_hash.read, "{:?}", run.status.observer);
        nic_hashes_are_the_devices(&mut lab, &run, &report);
    }
    lab.status().expect("receiver status")
}

/// Each accepted data stream's NIC hash, as SRAP's tc hook recorded it from
/// the guest driver's skb->hash, equals Toeplitz of its tuple under the key
/// the device really uses (the kernel's, for igb), and the receiver counts
/// every hashed flow as agreeing with the served key.
fn nic_hashes_are_the_devices(lab: &mut VirtioLab<'_>, run: &GuestRun, report: &str) {
    let device = truth::device_model(&mut lab.guest).expect("the device's key and table");
    let host = lab.net.host_ip;
    for &(sport, _) in &run.accepted {
        let flow = run
            .status
            .flows
            .iter()
            .find(|f| f.src == SocketAddr::from((host, sport)))
            .unwrap_or_else(|| panic!("no status row of port {sport}\n{report}"));
        let tuple = FlowTuple::from_sockets(flow.src, flow.dst).expect("tuple");
        assert_eq!(
            flow.nic_hash,
            Some(device.hash(&tuple)),
            "{} -> {}: the NIC's hash vs the device's Toeplitz\n{report}",
            flow.src,
            flow.dst
        );
        assert_eq!(flow.nic_hash_agrees, Some(true), "{flow:?}");
    }
    let counts = run.status.nic_hash;
    // What `srap status` says of it in the guest (docs/devices.md shows it).
    let shown = lab
        .guest
        .run(&format!("srap status --control {GUEST_CONTROL} --once"))
        .unwrap_or_default();
    eprintln!("srap status in the guest:\n{shown}");
    assert_eq!(counts.differ, 0, "{counts:?}\n{report}");
    assert!(counts.agree >= run.accepted.len(), "{counts:?}\n{report}");
}

/// igb under 6.12 (netlink; no key reported: the kernel's default key).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn steered_flows_land_on_distinct_igb_queues() {
    require_privileged("steered_flows_land_on_distinct_igb_queues");
    let status = steered_flows_on(GuestNic::Igb, true);
    assert!(status.observer.limits.is_empty(), "{:?}", status.observer);
}

/// A guest kernel without sock_diag for TCP (`inet_diag`/`tcp_diag` gone):
/// the observer says so and what it costs, moves to tc ingress, and still
/// reports every steered flow on the queue the guest's counters show. At
/// tc ingress it also records igb's own RSS hash of every flow, which must
/// equal Toeplitz under the kernel's key (the one igb uses).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn a_guest_without_tcp_diag_still_verifies_every_flow() {
    require_privileged("a_guest_without_tcp_diag_still_verifies_every_flow");
    let status = steered_flows_on(GuestNic::Igb, false);
    let limits = &status.observer.limits;
    assert_eq!(limits.len(), 1, "{:?}", status.observer);
    assert_eq!(limits[0].missing, "sock_diag");
    assert!(
        limits[0].detail.contains("modprobe tcp_diag") && limits[0].detail.contains("tc ingress"),
        "{:?}",
        limits[0]
    );
    assert!(
        status
            .observer
            .hook
            .as_deref()
            .is_some_and(|h| h.starts_with("tc ingress")),
        "{:?}",
        status.observer
    );
}

/// A device whose key SRAP is not told: virtio-net under 6.12 (its driver
/// shows a key one byte off the one the device uses) and igb with the
/// kernel's default key unreadable (the driver reports none). The landings
/// of the first flows contradict the description (or the key is unknown);
/// senders stop steering and probe; the receiver learns the key from where
/// the probes and flows land and serves it as a new version; the landings
/// then agree, steering resumes, and 4 steered flows land on 4 distinct
/// queues by the guest's own counters and by the device's real key.
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn a_hidden_or_misreported_key_is_learned_from_landings() {
    require_privileged("a_hidden_or_misreported_key_is_learned_from_landings");
    use srap_common::wire::LandingVerdict;

    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = image(GuestKernel::V6_12);
    for (nic, hide_key) in [(GuestNic::Virtio, false), (GuestNic::Igb, true)] {
        let what = format!("{nic:?} on 6.12");
        let net = GuestNet::new().expect("namespace with a tap");
        let mut shape = GuestShape::with_nic(nic, 4, None).expect("shape");
        if hide_key {
            shape = shape.without_kernel_key();
        }
        let mut lab = VirtioLab::start_with(&net, &image, shape, &built_binary("srap-agent"))
            .expect("guest and agents");
        let status = lab
            .drive_until(LandingVerdict::Agreed, 8)
            .expect("rounds of flows");
        let log = lab.receiver_log();
        assert_eq!(
            status.learning.key_source, "learned from landings",
            "{what}\n{log}"
        );
        assert_eq!(
            status.landings.verdict,
            LandingVerdict::Agreed,
            "{what}\n{log}"
        );
        assert_eq!(status.learning.conflicts, 0, "{what}");
        assert!(
            !status.learning.covered.is_empty(),
            "{what}: {:?}",
            status.learning
        );
        // The learned key is the device's own where it matters: the
        // accepted ports of a steered run hash, with the key the device
        // really uses, to 4 distinct queues — those the guest counted.
        let run = lab
            .run_workload(&iperf3(4), true, 2)
            .expect("steered workload");
        let report = run.render(&format!("{what}, steered after learning"), 2.0);
        assert_eq!(run.accepted.len(), 4, "{report}");
        assert_eq!(run.distinct_queues(), 4, "{report}");
        let planned: BTreeSet<u32> = run.accepted.iter().map(|&(_, q)| q).collect();
        assert_eq!(run.busy_queues, planned, "{report}");
        let ports: BTreeSet<u16> = run.accepted.iter().map(|&(p, _)| p).collect();
        assert!(
            ports.iter().all(|&p| p < 32_768),
            "SRAP-chosen ports, not kernel ones: {report}"
        );
    }
}
