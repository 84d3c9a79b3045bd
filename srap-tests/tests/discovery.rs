//! `srap rss show` on a real kernel: devices without RSS (a veth, even a
//! multi-queue one, and `lo`) must get the clear message that points at
//! `--rss FILE`, not a raw errno. Run inside a namespace the test made.
//! And discovery entered into a namespace answers for that namespace.

use std::{
    fs,
    process::{Command, Output},
};

use srap_host::discovery::Device;
use srap_tests::{NetNs, TwoHosts, VethConfig, built_binary, require_privileged, unique_name};

/// Runs `srap ARGS` inside namespace `ns`, whatever its exit status.
fn srap_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(built_binary("srap"))
        .args(args)
        .output()
        .expect("running srap through ip netns exec")
}

#[track_caller]
fn assert_no_rss(output: &Output, iface: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "srap rss show --iface {iface} succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    for needle in [&format!("{iface} has no RSS"), "--rss FILE"] {
        assert!(stderr.contains(needle), "stderr lacks `{needle}`: {stderr}");
    }
    assert!(
        output.stdout.is_empty(),
        "nothing belongs on stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn veth_and_lo_have_no_rss_and_say_so() {
    require_privileged("srap rss show on a veth and lo");
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: 4,
        rx_queues: 4,
        ..VethConfig::default()
    })
    .expect("two namespaces joined by a veth");
    let ns = hosts.receiver.name();
    let veth = hosts.receiver_end.ifname.as_str();
    for json in [false, true] {
        let mut args = vec!["rss", "show", "--iface", veth];
        if json {
            args.push("--json");
        }
        assert_no_rss(&srap_in(ns, &args), veth);
    }
    assert_no_rss(&srap_in(ns, &["rss", "show", "--iface", "lo"]), "lo");
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_missing_interface_is_named() {
    require_privileged("srap rss show on a missing interface");
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    // The sender's end exists, but not in the receiver's namespace.
    let output = srap_in(
        hosts.receiver.name(),
        &["rss", "show", "--iface", &hosts.sender_end.ifname],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("no interface `{}`", hosts.sender_end.ifname)),
        "{stderr}"
    );
}

/// A veth pair in the test's own (the host's) namespace, deleted on drop.
struct HostVeth(String);

impl HostVeth {
    fn new(name: &str, queues: u32) -> Self {
        let queues = queues.to_string();
        let peer = format!("{name}p");
        let status = Command::new("ip")
            .args([
                "link",
                "add",
                name,
                "numrxqueues",
                &queues,
                "numtxqueues",
                &queues,
            ])
            .args(["type", "veth", "peer", "name", &peer])
            .args(["numrxqueues", &queues, "numtxqueues", &queues])
            .status()
            .expect("running ip link add");
        assert!(status.success(), "ip link add {name} failed: {status}");
        Self(name.to_owned())
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        // Deleting one end deletes the pair.
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// Receive queues under `/sys/class/net/NAME/queues` as this thread's
/// `/sys` shows them.
fn sysfs_rx_queues(name: &str) -> usize {
    fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0)
}

/// Entered into a namespace with `setns` (as `nsenter --net` and the lab
/// do: `/sys` stays the host's), discovery reports the namespace's device,
/// not the host's device of the same name: its index and queue count as
/// the kernel shows them through the namespace's own `/sys` (`ip netns
/// exec`), and no RPS mask or NUMA node read from the host's device.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn discovery_entered_into_a_namespace_reports_the_namespaces_device() {
    require_privileged("discovery in a namespace entered with setns");
    let name = unique_name("q");
    let _host = HostVeth::new(&name, 2);
    // The host's device steers queue 0 to CPU 0; a discovery that read the
    // host's /sys for the namespace's device would report it.
    fs::write(format!("/sys/class/net/{name}/queues/rx-0/rps_cpus"), "1\n")
        .expect("setting the host device's RPS mask");
    let ns = NetNs::new().expect("namespace");
    let peer = format!("{name}p");
    ns.ip([
        "link",
        "add",
        &name,
        "numrxqueues",
        "8",
        "numtxqueues",
        "8",
        "type",
        "veth",
        "peer",
        "name",
        &peer,
        "numrxqueues",
        "8",
        "numtxqueues",
        "8",
    ])
    .expect("the namespace's veth, named like the host's");
    // Ground truth from the kernel through the namespace's own /sys and ip.
    let listing = ns
        .exec("ls", [format!("/sys/class/net/{name}/queues")])
        .expect("ip netns exec ls");
    let truth_queues = String::from_utf8_lossy(&listing.stdout)
        .split_whitespace()
        .filter(|q| q.starts_with("rx-"))
        .count();
    let shown = ns.ip(["-o", "link", "show", &name]).expect("ip link show");
    let truth_index: u32 = String::from_utf8_lossy(&shown.stdout)
        .split(':')
        .next()
        .and_then(|i| i.trim().parse().ok())
        .expect("an index in `ip -o link show`");
    assert_eq!(truth_queues, 8);

    // In the host's namespace: the host's device, /sys trusted, RPS read.
    let host = Device::find(&name).expect("the host's device");
    assert_eq!(host.rx_queues, 2);
    let rps = host.rps_dir().expect("/sys is the host's own here");
    let mask = fs::read_to_string(rps.join("rx-0/rps_cpus")).expect("rps_cpus");
    assert_eq!(
        srap_host::discovery::rps::parse_cpu_mask(&mask),
        Ok(vec![0])
    );

    let (inside, host_sysfs_queues, numa) = ns
        .run(|| {
            (
                Device::find(&name),
                sysfs_rx_queues(&name),
                srap_host::cpus::local_cpus(&name),
            )
        })
        .expect("entering the namespace");
    // The trap is armed: /sys in there still shows the host's 2 queues.
    assert_eq!(host_sysfs_queues, 2);
    let inside = inside.expect("the namespace's device");
    assert_eq!(inside.link.index, truth_index);
    assert_eq!(inside.rx_queues as usize, truth_queues);
    let why = inside
        .rps_dir()
        .expect_err("/sys is the host's: RPS must not be read")
        .to_string();
    assert!(why.contains("another network namespace"), "{why}");
    assert!(why.contains("ip netns exec"), "{why}");
    // A veth sits on no bus device (the kernel says so over rtnetlink):
    // no NUMA node, and nothing read from the host's device of that name.
    assert!(matches!(numa, Ok(None)), "{numa:?}");
}
