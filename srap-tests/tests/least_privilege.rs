//! Least privilege, the other half (the first is
//! `lab::agents_with_only_their_units_capabilities_steer_and_verify`: with
//! exactly their units' capabilities both agents do SRAP's whole job):
//! without any one of them, an agent fails, and says which call failed.
//! Each agent runs bounded to its unit's set minus one capability
//! (`setpriv --bounding-set`) in a namespace of the test's own: the receiver
//! keeps serving and names why its observer is off; the sender stops before
//! steering anything and names the call.

use std::{collections::BTreeMap, net::SocketAddr};

use srap_common::rss::embedded_default;
use srap_tests::{
    NetNs, built_binary,
    caps::{RECEIVER_UNIT, SENDER_UNIT, bounding_set},
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts},
    require_privileged,
};

/// What fails without each capability: (capability, agent, the words the
/// agent's error must hold).
const WITHOUT: &[(&str, &str, &str)] = &[
    ("bpf", "receiver", "failed to create map"),
    ("bpf", "sender", "failed to create map"),
    (
        "net_admin",
        "receiver",
        "BPF_PROG_LOAD syscall returned Operation not permitted",
    ),
    (
        "net_admin",
        "sender",
        "BPF_PROG_LOAD syscall returned Operation not permitted",
    ),
    // The kernel's verifier rejects the programs (EACCES).
    (
        "perfmon",
        "receiver",
        "BPF_PROG_LOAD syscall returned Permission denied",
    ),
    (
        "perfmon",
        "sender",
        // The bind hook, the first program loaded after the release
        // hook's, names the MPTCP helper the kernel gives only to a
        // perfmon-capable loader (Invalid argument): it tells a subflow
        // from plain TCP with it.
        "program srap_bind4: the BPF_PROG_LOAD syscall returned",
    ),
    ("dac_override", "sender", "Permission denied"),
];

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn without_each_capability_the_agents_name_the_call_that_fails() {
    require_privileged("least privilege: each capability removed");
    for (unit, agent) in [(RECEIVER_UNIT, "receiver"), (SENDER_UNIT, "sender")] {
        let tried: Vec<&str> = WITHOUT
            .iter()
            .filter(|(_, a, _)| *a == agent)
            .map(|(cap, _, _)| *cap)
            .collect();
        assert_eq!(
            bounding_set(unit),
            tried,
            "every capability of the {agent}'s unit is tried here"
        );
    }
    let ns = NetNs::new().expect("netns");
    ns.ip(["link", "set", "lo", "up"]).expect("lo up");
    let mut seen = BTreeMap::new();
    for (cap, agent, words) in WITHOUT {
        let unit = if *agent == "receiver" {
            RECEIVER_UNIT
        } else {
            SENDER_UNIT
        };
        let caps: Vec<String> = bounding_set(unit)
            .into_iter()
            .filter(|c| c != cap)
            .collect();
        let error = if *agent == "receiver" {
            receiver_error(&ns, caps)
        } else {
            sender_error(&ns, caps)
        };
        assert!(
            error.contains(words),
            "without CAP_{}: the {agent}'s error lacks {words:?}: {error}",
            cap.to_uppercase()
        );
        seen.insert(
            format!("without CAP_{} the {agent}", cap.to_uppercase()),
            summary(&error, words),
        );
    }
    for (what, error) in seen {
        println!("{what}: {error}");
    }
}

/// The line of `error` that holds `words` (up to the verifier's log), and
/// the verifier's own reason when it rejected a program.
fn summary(error: &str, words: &str) -> String {
    let lines: Vec<&str> = error.split(" | ").flat_map(str::lines).collect();
    let line = lines
        .iter()
        .find(|l| l.contains(words))
        .map_or(error, |l| l.trim());
    let line = line
        .split_once(". Observer output:")
        .map_or(line, |(head, _)| head);
    let reason = lines
        .iter()
        .position(|l| l.contains("verification time"))
        .and_then(|i| i.checked_sub(1))
        .map(|i| lines[i].trim());
    match reason {
        Some(reason) => format!("{line}; the kernel's verifier: {reason}"),
        None => line.to_owned(),
    }
}

/// Why the bounded receiver's observer is off (it serves on regardless).
fn receiver_error(ns: &NetNs, caps: Vec<String>) -> String {
    let opts = ReceiverOpts::new(
        built_binary("srap-agent"),
        "lo",
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .rss(embedded_default())
    .args(["--hook", "tc"])
    .capabilities(caps);
    let receiver = ReceiverAgent::start(ns, opts).expect("the receiver serves without an observer");
    receiver
        .wait_for_log("why the observer is off", |l| {
            l.contains("receive observer is off")
        })
        .expect("the receiver says why its observer is off");
    // The kernel verifier's log, when it rejected a program, follows on
    // the next lines.
    let log = receiver.log().text();
    let from = log.find("receive observer is off: ").unwrap_or(0);
    log[from..]
        .trim_start_matches("receive observer is off: ")
        .lines()
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The bounded sender's error: it sets up once (`--once`) from a
/// description file and must fail (what it got as far as is detached
/// when it drops, with every capability).
fn sender_error(ns: &NetNs, caps: Vec<String>) -> String {
    let opts = SenderOpts::new(built_binary("srap-agent"))
        .rss(embedded_default())
        .args(["--receiver", "127.0.0.1"])
        .capabilities(caps.clone());
    let sender = SenderAgent::new(ns, opts).expect("a sender agent");
    let out = sender
        .command(&["--once"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the sender");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "the sender set up with {caps:?} only:\n{stderr}"
    );
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}
