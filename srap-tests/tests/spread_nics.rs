//! The receiver's NICs, judged in a QEMU receiver guest with
//! two virtio-net NICs with RSS, each on its own tap and subnet of the
//! test's namespace ([`srap_harness::guest::receiver_nics_lab`]: two nodes
//! of 8 vCPUs, on each an 8-queue NIC with every queue's IRQ pinned to a
//! vCPU of its own, no RPS).
//! The guest runs the receiver agent over both NICs and `iperf3 -s` on the
//! wildcard address; the namespace runs the sender agent with
//! `--receiver-nics spread` and one `iperf3 -c` of 16 streams to the
//! FIRST NIC's address.
//!
//! Side by side in one boot:
//! * the kernel's ports: every stream enters by the address asked for, and
//!   the second NIC idles;
//! * SRAP: the streams split 8/8 over the NICs, on 16 distinct (NIC, CPU)
//!   pairs, 16 distinct CPUs of the receiver, and the application never
//!   notices (`getpeername()`, which iperf3 reports as each stream's
//!   `remote_host`, is the address it asked for);
//! * a server bound to the first address only: SRAP moves no stream.
//!
//! Nothing is judged by SRAP's own report: the NIC a stream used is the
//! address the guest's server accepted it on, its queue the one that NIC's
//! own key and table give the accepted tuple, its CPU the one that queue's
//! interrupt was pinned to (and seen to move to) at boot, and the NICs' own
//! `rx_bytes` and per-queue packet counters must carry them.

use srap_harness::guest::receiver_nics_lab::{ReceiverRound, RoundSpec, TwoNicReceiver};
use srap_tests::{require_privileged, two_nic_receiver};

use crate::ONE_GUEST;

/// Parallel streams of the transfer.
const STREAMS: usize = 16;
/// Seconds each transfer runs.
const SECONDS: u64 = 4;

fn round(
    lab: &mut TwoNicReceiver,
    title: &str,
    steered: bool,
    port: u16,
    bind_first: bool,
) -> ReceiverRound {
    let spec = RoundSpec {
        title,
        steered,
        port,
        bind_first,
        streams: STREAMS,
        seconds: SECONDS,
    };
    lab.round(&spec)
        .unwrap_or_else(|err| panic!("{title}: {err:#}\n{}", lab.logs()))
}

#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn a_transfer_to_one_address_spreads_over_both_receiver_nics_beside_the_kernels_one() {
    require_privileged("a_transfer_to_one_address_spreads_over_both_receiver_nics");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let mut lab = two_nic_receiver(&["--receiver-nics", "spread"]);
    let asked = lab.asked();
    let mut tables = lab.numa.render();
    let mut wrong = Vec::new();

    let kernel = round(&mut lab, "kernel ports (no SRAP)", false, 5501, false);
    tables.push_str(&kernel.render(&lab.numa));
    if kernel.through(0) != STREAMS {
        wrong.push(format!(
            "kernel: {} of {STREAMS} streams through NIC 0, the address asked for",
            kernel.through(0)
        ));
    }

    let spread = round(&mut lab, "SRAP --receiver-nics spread", true, 5502, false);
    tables.push_str(&spread.render(&lab.numa));
    for nic in 0..2 {
        if spread.through(nic) != STREAMS / 2 {
            wrong.push(format!(
                "spread: {} of {STREAMS} streams through NIC {nic}",
                spread.through(nic)
            ));
        }
    }
    if spread.pairs().len() != STREAMS || spread.cpus().len() != STREAMS {
        wrong.push(format!(
            "spread: {} distinct (NIC, CPU) pairs and {} distinct CPUs for {STREAMS} streams",
            spread.pairs().len(),
            spread.cpus().len()
        ));
    }
    for s in spread.peers_not(asked) {
        wrong.push(format!(
            "spread: port {}'s getpeername() said {:?}, not {asked} that it asked for",
            s.port, s.peer_seen
        ));
    }

    let bound = round(
        &mut lab,
        "SRAP --receiver-nics spread, the server bound to NIC 0's address",
        true,
        5503,
        true,
    );
    tables.push_str(&bound.render(&lab.numa));
    if bound.through(0) != STREAMS {
        wrong.push(format!(
            "bound server: {} of {STREAMS} streams through NIC 0, the only address that accepts",
            bound.through(0)
        ));
    }
    for (name, r) in [("kernel", &kernel), ("spread", &spread), ("bound", &bound)] {
        wrong.extend(
            r.judge_counters()
                .into_iter()
                .map(|w| format!("{name}: {w}")),
        );
    }
    println!("{tables}");
    assert!(
        wrong.is_empty(),
        "{}\n{tables}\n{}",
        wrong.join("\n"),
        lab.logs()
    );
}
