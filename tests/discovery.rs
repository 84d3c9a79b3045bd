//! `srap rss show` on a real kernel: devices without RSS (a veth, even a
//! multi-queue one, and `lo`) must get the clear message that points at
//! `--rss FILE`, not a raw errno. Run inside a namespace the test made.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use srap_suite::{TwoHosts, VethConfig, require_privileged};

/// The `srap` binary next to this test's directory (`cargo test` at the
/// workspace root builds it), or in `SRAP_BIN_DIR`.
fn srap_bin() -> PathBuf {
    let dir = std::env::var_os("SRAP_BIN_DIR").map_or_else(
        || {
            let exe = std::env::current_exe().expect("current exe");
            // target/<profile>/deps/discovery-… → target/<profile>
            exe.parent()
                .and_then(Path::parent)
                .expect("test binary in target/<profile>/deps")
                .to_path_buf()
        },
        PathBuf::from,
    );
    let path = dir.join("srap");
    assert!(
        path.exists(),
        "{} not found: build it first (`cargo build -p srap-cli`), or point SRAP_BIN_DIR at it",
        path.display()
    );
    path
}

/// Runs `srap ARGS` inside namespace `ns`, whatever its exit status.
fn srap_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(srap_bin())
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
