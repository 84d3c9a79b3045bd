//! A workload started at once after the agent: `srap exec` holds it until
//! the kernel shows the binder's connect hooks on the cgroup, and the agent
//! creates the cgroup only after every program is verified, so its first
//! connect is steered — judged by the tuples the receiver accepted, hashed
//! with the RSS model, never by the agent's report.

use std::time::Instant;

use srap_common::binder::outcome;
use srap_tests::{require_privileged, test_workload::Workload};

use super::{Lab, assert_distinct_cpus};

/// Rounds of agent start + workload start.
const ROUNDS: usize = 10;
/// Connections each round's workload opens at once.
const FLOWS: usize = 16;

/// Ten times: the agent started and, at once, a workload under `srap
/// exec` opening 16 connections. Every round lands its 16 flows on 16
/// receiver CPUs with 16 steered connects. Odd rounds make the cgroup
/// beforehand (an administrator's, or a unit's slice): `srap exec` then
/// finds it without SRAP's hooks and must wait for them, not run in.
#[test]
#[ignore = "kernel: needs root, netns, bpffs; run as root by `cargo xtask test`"]
fn a_workload_started_with_the_agent_is_steered_from_its_first_connect() {
    require_privileged("binder: a workload started with the agent is steered");
    let mut lab = Lab::new(false);
    let mut server = lab.listen();
    for round in 0..ROUNDS {
        if round % 2 == 1 {
            std::fs::create_dir_all(lab.agent.cgroup()).expect("the cgroup, made beforehand");
        }
        let started = Instant::now();
        lab.agent.spawn().expect("start the sender agent");
        let mut workload = Workload::spawn(
            &lab.hosts.sender,
            Some(lab.agent.cgroup()),
            lab.server_addr(),
        );
        let opened = workload.open(FLOWS);
        let accepted = server.accept(FLOWS);
        eprintln!(
            "round {round}: {} connections accepted {} ms after the agent started",
            accepted.len(),
            started.elapsed().as_millis()
        );
        assert_eq!(opened.len(), FLOWS, "round {round}: connections opened");
        assert_distinct_cpus(&lab, &accepted);
        let stats = lab.stats();
        assert_eq!(
            stats.get(outcome::STEERED) + stats.get(outcome::RETRIED),
            FLOWS as u64,
            "round {round}: every connect steered: {stats}"
        );
        workload.finish();
        server.await_closed(&accepted);
        server.close(&accepted);
        lab.agent.reset();
        // The cgroup the agent did not make is left by detach: remove it.
        let _ = std::fs::remove_dir(lab.agent.cgroup());
    }
}
