//! The three-sender run of docs/how-it-works.md, reproducible: the grants test's set-up
//! (`srap_tests::grants`) with three sender agents opening 5
//! flows each, then `srap status --once` on the receiver's control socket,
//! printed as captured. Every namespace, agent, pin and cgroup goes when it
//! ends, as in the test.
//!
//! Run as root after `cargo build --bins`:
//! `cargo run -p srap-tests --example grants_status`.

use std::collections::BTreeSet;

use srap_tests::{built_binary, grants::Cluster, privileged_or_skip};

const SENDERS: usize = 3;
const FLOWS: usize = 5;

fn main() {
    if !privileged_or_skip("the three-sender grants example") {
        return;
    }
    let mut cluster = Cluster::new();
    for _ in 0..SENDERS {
        cluster.add_sender();
    }
    cluster.wait_settled(SENDERS, 0);
    for i in 0..SENDERS {
        let cpus = cluster.open(i, FLOWS);
        let distinct: BTreeSet<u32> = cpus.iter().copied().collect();
        println!(
            "sender {i} ({}): {FLOWS} flows on receiver CPUs {distinct:?}",
            cluster.host_ip(i)
        );
    }
    cluster.wait_settled(SENDERS, (SENDERS * FLOWS) as u64);
    let out = std::process::Command::new(built_binary("srap"))
        .args(["status", "--once", "--control"])
        .arg(cluster.control())
        .output()
        .expect("run srap status");
    println!(
        "# srap status --once --control {}",
        cluster.control().display()
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
}
