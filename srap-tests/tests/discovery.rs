//! `srap rss show` on a real kernel: devices without RSS (a veth, even a
//! multi-queue one, and `lo`) must get the clear message that points at
//! `--rss FILE`, not a raw errno. Run inside a namespace the test made.

use std::process::{Command, Output};

use srap_tests::{TwoHosts, VethConfig, built_binary, require_privileged};

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
fn veth_and_lo_have_no_rss_and_say_so() {
    if !require_privileged("srap rss show on a veth and lo") {
        return;
    }
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: 4,
        rx_queues: 4,
        subnet: 41,
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
fn a_missing_interface_is_named() {
    if !require_privileged("srap rss show on a missing interface") {
        return;
    }
    let hosts = TwoHosts::new(VethConfig {
        subnet: 42,
        ..VethConfig::default()
    })
    .expect("two namespaces joined by a veth");
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
