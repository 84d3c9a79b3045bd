//! MPTCP into a receiver with two RSS NICs, judged in the QEMU
//! receiver guest of the receiver-NIC issue
//! ([`srap_harness::guest::receiver_nics_lab`]: two nodes of 8 vCPUs, on
//! each an 8-queue virtio-net NIC with every queue's IRQ pinned to a vCPU
//! of its own, each NIC on its own tap and subnet of the test's
//! namespace), set up for MPTCP as a user would
//! ([`srap_harness::guest::mptcp_lab`]): the guest announces each NIC's
//! address (`signal` endpoints), the namespace accepts announced addresses.
//! The guest runs the receiver agent over both NICs and an MPTCP
//! `iperf3 -s` (under `mptcpize`'s library); the namespace runs the sender
//! agent with `--receiver-nics spread` (every accepting address of the
//! receiver planned with its NIC's model, so a subflow toward the announced
//! address is steered as well) and `mptcpize run iperf3 -c` of 7 streams
//! to NIC 0's address: 8 MPTCP connections with the control connection.
//!
//! Side by side in one boot:
//! * the kernel's ports (no SRAP): MPTCP itself puts a subflow of each
//!   connection through each NIC; where they land on the NICs' CPUs is
//!   chance, printed, not judged;
//! * SRAP: every connection has one subflow through each NIC, the 16
//!   subflows sit on 16 distinct (NIC, CPU) pairs (all the guest has),
//!   no connection was moved (`dest_spread` 0: the first subflow keeps the
//!   address asked for, and every stream's `getpeername()` is that
//!   address), the 8 further subflows were steered at their bind (`subflow_steered`),
//!   every subflow's claim is freed at its close (`released_at_close`) and
//!   no connect failed.
//!
//! Nothing is judged by SRAP's own report: the subflows and their
//! connections are what the guest's kernel lists (`ss -tni`: tuple and
//! token), the NIC a subflow used is the one holding its local address,
//! its queue the one that NIC's own key and table give its tuple, its CPU
//! the one that queue's interrupt was pinned to (and seen to move to) at
//! boot; and the NICs' own `rx_bytes` and per-queue packet counters must
//! carry them.

use std::{ops::ControlFlow, time::Duration};

use srap_common::binder::{event, outcome};
use srap_harness::guest::{
    mptcp_lab::{self, MptcpRound, MptcpSpec},
    receiver_nics_lab::TwoNicReceiver,
};
use srap_tests::{require_privileged, two_nic_receiver};

use crate::ONE_GUEST;

/// iperf3's data streams: with its control connection, 8 MPTCP
/// connections of 2 subflows, as many as the guest has (NIC, CPU) pairs.
const STREAMS: usize = 7;
/// MPTCP connections per round.
const CONNECTIONS: usize = STREAMS + 1;
/// Seconds each transfer runs.
const SECONDS: u64 = 6;
/// The guest's NICs.
const NICS: usize = 2;

/// How long after the round the sender may take to free every subflow's
/// claim: the client has ended and the guest's server has written its
/// result, so every subflow is closing or closed.
const RELEASE: Duration = Duration::from_secs(5);

fn round(lab: &mut TwoNicReceiver, title: &str, steered: bool, port: u16) -> MptcpRound {
    let spec = MptcpSpec {
        title,
        steered,
        port,
        streams: STREAMS,
        seconds: SECONDS,
    };
    mptcp_lab::round(lab, &spec).unwrap_or_else(|err| {
        panic!(
            "{title}: {err:#}\n{}\n{}",
            mptcp_lab::endpoints(lab),
            lab.logs()
        )
    })
}

/// The sender's binder counters once every subflow of the SRAP round is
/// released at its close (`released_at_close`), or at [`RELEASE`].
fn released(lab: &TwoNicReceiver) -> anyhow::Result<srap_daemon::sender::BinderStats> {
    let all = 2 * CONNECTIONS as u64;
    let stats = srap_tests::harness::poll_until(RELEASE, Duration::from_millis(100), || match lab
        .sender()
        .stats()
    {
        Ok(stats) if stats.get(event::RELEASED_AT_CLOSE) >= all => ControlFlow::Break(Ok(stats)),
        other => ControlFlow::Continue(other),
    });
    stats.unwrap_or_else(|last| last)
}

#[test]
#[ignore = "QEMU: needs root, QEMU/KVM, netns and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_subflows_enter_through_both_receiver_nics_each_on_its_own_cpu() {
    require_privileged("MPTCP subflows through both receiver NICs, each on its own CPU");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let mut lab = two_nic_receiver(&["--receiver-nics", "spread", "--mptcp", "subflows"]);
    mptcp_lab::enable(&mut lab).unwrap_or_else(|err| panic!("MPTCP in the guest: {err:#}"));
    let mut tables = lab.numa.render();
    tables.push_str(&mptcp_lab::endpoints(&mut lab));
    let mut wrong = Vec::new();

    let kernel = round(&mut lab, "kernel ports (no SRAP)", false, 5601);
    tables.push_str(&kernel.render(&lab.numa));
    let srap = round(&mut lab, "SRAP --receiver-nics spread", true, 5602);
    tables.push_str(&srap.render(&lab.numa));

    for (name, r) in [("kernel", &kernel), ("SRAP", &srap)] {
        wrong.extend(
            r.judge_connections(CONNECTIONS, NICS)
                .into_iter()
                .chain(r.judge_counters())
                .map(|w| format!("{name}: {w}")),
        );
    }
    if srap.pairs().len() != 2 * CONNECTIONS {
        wrong.push(format!(
            "SRAP: {} distinct (NIC, CPU) pairs for {} subflows",
            srap.pairs().len(),
            srap.subflows.len()
        ));
    }
    // The application never notices: iperf3's `remote_host` for each
    // stream is its MPTCP socket's `getpeername()`.
    let asked = lab.asked();
    let moved: Vec<_> = srap
        .peers_seen
        .iter()
        .filter(|(_, p)| *p != asked)
        .collect();
    if srap.peers_seen.len() != STREAMS || !moved.is_empty() {
        wrong.push(format!(
            "SRAP: {} of {STREAMS} streams' getpeername() seen, these not {asked}: {moved:?}",
            srap.peers_seen.len()
        ));
    }
    match released(&lab) {
        Ok(stats) => {
            tables.push_str(&format!("sender binder: {stats}\n"));
            if stats.failures() != 0 {
                wrong.push(format!("SRAP: failed connects: {stats}"));
            }
            if stats.get(event::RELEASED_AT_CLOSE) != 2 * CONNECTIONS as u64 {
                wrong.push(format!(
                    "SRAP: not every subflow's claim freed at its close within {RELEASE:?}: {stats}"
                ));
            }
            // Each further subflow placed at its bind, not by chance.
            if stats.get(outcome::SUBFLOW_STEERED) != CONNECTIONS as u64 {
                wrong.push(format!(
                    "SRAP: not every further subflow steered at its bind: {stats}"
                ));
            }
            // An MPTCP connection keeps the address asked for: its own
            // path manager reaches the other NIC.
            if stats.get(event::DEST_SPREAD) != 0 {
                wrong.push(format!("SRAP: an MPTCP connection was moved: {stats}"));
            }
        }
        Err(err) => wrong.push(format!("the sender's counters: {err:#}")),
    }
    println!("{tables}");
    assert!(
        wrong.is_empty(),
        "{}\n{tables}\n{}",
        wrong.join("\n"),
        lab.logs()
    );
}
