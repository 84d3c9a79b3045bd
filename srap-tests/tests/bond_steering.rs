//! A bonded QEMU guest as a steered SRAP sender, judged by ground truth
//! ([`srap_harness::guest::bond_lab`]): the guest bonds 2 or 4 virtio-net NICs
//! and runs the sender agent, following a receiver agent in the host's
//! namespace that serves the lab's described 32-CPU RSS NIC. Rounds of 16
//! flows open at once, with kernel ports and under `srap exec`; each is
//! judged by the members' own `tx_bytes` and by the described model's hash
//! of the tuples the host's sink accepted — never by SRAP's status.
//!
//! Steered flows must land on 16 distinct receiver CPUs and spread evenly
//! over the bond's usable members (8/8, 4/4/4/4), with every member up and
//! after members fail: the sender agent follows the usable members and
//! re-plans.
//!
//! One guest at a time.

use std::time::{Duration, Instant};

use srap_harness::guest::{
    GuestKernel,
    bond::BondMode,
    bond_lab::{
        BondLab, BondRound, Ports, RECEIVER_CPUS, ROUND_FLOW_BYTES, ROUND_FLOWS, RoundFlow,
        SINK_PORT,
    },
};
use srap_tests::{built_binary, guest_image, require_privileged};

use crate::ONE_GUEST;

/// Every usable member carries the same share of the round's flows, by its
/// own counters and by the model; a member that is down carries none.
fn assert_members_balanced(round: &BondRound) {
    if let Err(why) = members_balanced(round) {
        panic!("{why}\n{}", round.render());
    }
}

/// What [`assert_members_balanced`] asserts, as a verdict: why not, if not.
/// Evenly: every usable member carries the round's flows over the usable
/// count, rounded down or up (16 over 3: 5 or 6), by its counters and by
/// the model alike.
fn members_balanced(round: &BondRound) -> Result<(), String> {
    let usable = round.usable.len();
    if usable == 0 {
        return Err("no usable member".into());
    }
    // No flows spread evenly over any members: no verdict without them.
    if round.flows.len() < ROUND_FLOWS {
        return Err(format!(
            "{} of the {ROUND_FLOWS} flows opened were judged",
            round.flows.len()
        ));
    }
    let (low, high) = (
        round.flows.len() / usable,
        round.flows.len().div_ceil(usable),
    );
    let counted = round.by_counters();
    let modelled = round.by_model();
    for (i, member) in round.slaves.iter().enumerate() {
        let even = |n: usize| {
            if round.usable.contains(member) {
                (low..=high).contains(&n)
            } else {
                n == 0
            }
        };
        let want = if round.usable.contains(member) {
            format!("{low} to {high}")
        } else {
            "0".into()
        };
        if !counted[i].is_some_and(even) {
            return Err(format!(
                "{member} carried {:?} flows by its tx_bytes, not {want}",
                counted[i]
            ));
        }
        if !even(modelled[i]) {
            return Err(format!(
                "{member} carried {} flows by the model, not {want}",
                modelled[i]
            ));
        }
    }
    Ok(())
}

/// What holds for every round: all flows accepted and open at once, and
/// the members' counters account for the model's members.
fn assert_round_judged(round: &BondRound) {
    let table = round.render();
    assert_eq!(round.flows.len(), ROUND_FLOWS, "{table}");
    assert_eq!(
        round.open_at_once, ROUND_FLOWS,
        "the flows were not all open at once\n{table}"
    );
    assert!(
        round.counters_agree_with_model(),
        "the members' tx_bytes do not account for the model's members\n{table}"
    );
}

/// A steered round: judged, on [`ROUND_FLOWS`] distinct receiver CPUs, and
/// evenly over the usable members.
fn steered_round(lab: &mut BondLab, title: &str) -> BondRound {
    let round = lab.round(Ports::Steered, title).unwrap_or_else(|err| {
        panic!(
            "{title}: {err:#}\nthe guest's sender log:\n{}",
            lab.sender_log()
        )
    });
    let table = round.render();
    println!("{table}");
    assert_round_judged(&round);
    assert_eq!(
        round.distinct_cpus(),
        ROUND_FLOWS,
        "steered flows share receiver CPUs\n{table}\nthe guest's sender log:\n{}",
        lab.sender_log()
    );
    assert_members_balanced(&round);
    assert_loop_agrees(lab, &round);
    round
}

/// The agent's own closed loop over the members' counters judged the round
/// (its count of judged samples rose while the round's flows were open)
/// and found the hash right: it did not pause the balancing on a bond that
/// does what the model says.
fn assert_loop_agrees(lab: &mut BondLab, round: &BondRound) {
    let status = lab.sender_status().expect("the guest's sender status");
    let bond = status.bonds.first().expect("the agent shows its bond");
    let before = round.judged_before.expect("a steered round");
    assert!(
        bond.counters_judged > before,
        "the agent's member loop judged no sample of the round (still {before}): {bond:?}\n\
         the guest's sender log:\n{}",
        lab.sender_log()
    );
    assert_eq!(
        bond.counters.as_deref(),
        Some("agree"),
        "the agent's member loop: {bond:?}\nthe guest's sender log:\n{}",
        lab.sender_log()
    );
    assert!(
        bond.why_not
            .as_deref()
            .is_none_or(|why| !why.starts_with("paused")),
        "balancing paused: {bond:?}"
    );
}

/// How soon the sender agent must plan for the members left after a
/// failure: it reads the bond every second, whatever its `--interval`
/// (left at its 10 s default here); the guest's shell and status under
/// emulation take the rest (0.2 to 1.3 s measured).
const FOLLOW_WITHIN: Duration = Duration::from_secs(6);

/// A guest bonding `order.len()` NICs in `mode`, its sender agent started
/// with `sender_args`: a kernel-ports round (printed), a steered round,
/// then for each step of `failures` those members' links down, the agent
/// following, and a steered round over the rest.
fn bonded_sender_steers(order: &[u32], mode: BondMode, sender_args: &str, failures: &[&[&str]]) {
    let started = Instant::now();
    let image = guest_image(GuestKernel::V6_1);
    let agent = built_binary("srap-agent");
    let mut lab =
        BondLab::start(&image, &agent, order, mode, sender_args).expect("the bonded guest's lab");
    let ready = started.elapsed();
    let all = lab.bond.enslaved.len();
    let name = mode.sysfs();

    let kernel = lab
        .round(
            Ports::Kernel,
            &format!(
                "kernel ports: {ROUND_FLOWS} flows over {all} members ({name}) to {RECEIVER_CPUS} receiver CPUs"
            ),
        )
        .expect("a round with kernel ports");
    println!("{}", kernel.render());
    assert_round_judged(&kernel);

    steered_round(
        &mut lab,
        &format!(
            "SRAP ports: {ROUND_FLOWS} flows over {all} members ({name}) to {RECEIVER_CPUS} receiver CPUs"
        ),
    );

    let mut down: Vec<&str> = Vec::new();
    for step in failures {
        for member in *step {
            lab.take_down(member).expect("a member down");
        }
        down.extend_from_slice(step);
        fails_over(&mut lab, &down, all, name);
    }
    println!(
        "{}",
        lab.sender_status_text().expect("srap status in the guest")
    );
    println!(
        "wall time: {:.0} s ({:.0} s to boot, bond and start the agents)",
        started.elapsed().as_secs_f64(),
        ready.as_secs_f64()
    );
}

/// With `down` members' links down: the bond's own usable list, the agent
/// following it, and a steered round balanced over the rest, the down
/// members silent by their counters.
fn fails_over(lab: &mut BondLab, down: &[&str], all: usize, name: &str) {
    let usable = lab.bond.usable(&mut lab.guest).expect("the usable members");
    let expected: Vec<String> = lab
        .bond
        .enslaved
        .iter()
        .filter(|m| !down.contains(&m.as_str()))
        .cloned()
        .collect();
    assert_eq!(usable, expected, "usable after {down:?} went down");
    let followed = lab
        .await_followed(&usable, FOLLOW_WITHIN)
        .expect("the agent follows the bond");
    println!(
        "the sender agent planned for {} usable members {:.1} s after the bond's own list \
         showed them",
        usable.len(),
        followed.as_secs_f64()
    );
    let after = steered_round(
        lab,
        &format!(
            "SRAP ports: {ROUND_FLOWS} flows with {} down ({} of {all} usable, {name})",
            down.join(", "),
            usable.len()
        ),
    );
    for member in down {
        let i = after
            .slaves
            .iter()
            .position(|m| m == member)
            .expect("a slave");
        assert_eq!(
            after.by_counters()[i],
            Some(0),
            "{member} is down, yet sent flows\n{}",
            after.render()
        );
    }
}

/// `balance-xor` over 2 members enslaved out of name order; then one down.
#[test]
#[ignore = "QEMU: needs root, QEMU and netns; run as root by `cargo xtask test`"]
fn balance_xor_bond_sender_steers_to_distinct_cpus() {
    require_privileged("balance_xor_bond_sender_steers_to_distinct_cpus");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    bonded_sender_steers(&[1, 0], BondMode::BalanceXor, "", &[&["eth1"]]);
}

/// `802.3ad` over 4 members (an LACP partner on the taps) enslaved out of
/// name order, the sink's port named (`--port`); then the first enslaved
/// down, so the rest are re-indexed modulo 3 (balanced by the listed ports
/// of the named port: 6/5/5), then another (8/8 over two).
#[test]
#[ignore = "QEMU: needs root, QEMU and netns; run as root by `cargo xtask test`"]
fn lacp_bond_sender_steers_to_distinct_cpus() {
    require_privileged("lacp_bond_sender_steers_to_distinct_cpus");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    bonded_sender_steers(
        &[2, 0, 3, 1],
        BondMode::Lacp,
        &format!("--port {SINK_PORT}"),
        &[&["eth2"], &["eth3"]],
    );
}

/// A round made by hand: `per_member[i]` flows on the i-th of `slaves`
/// (all usable but `down`), each flow's bytes counted on its member.
fn round_of(slaves: &[&str], down: &[&str], per_member: &[usize]) -> BondRound {
    let wire = ROUND_FLOW_BYTES + ROUND_FLOW_BYTES / 20;
    let flows = slaves
        .iter()
        .zip(per_member)
        .flat_map(|(m, &n)| std::iter::repeat_n(*m, n))
        .enumerate()
        .map(|(i, m)| RoundFlow {
            port: 10_000 + i as u16,
            cpu: i as u32,
            member: m.to_owned(),
        })
        .collect::<Vec<_>>();
    BondRound {
        title: "by hand".into(),
        ports: Ports::Steered,
        slaves: slaves.iter().map(|m| (*m).to_owned()).collect(),
        usable: slaves
            .iter()
            .filter(|m| !down.contains(m))
            .map(|m| (*m).to_owned())
            .collect(),
        open_at_once: flows.len(),
        judged_before: None,
        flows,
        tx_bytes: per_member.iter().map(|&n| n as u64 * wire).collect(),
        seconds: 0.0,
        flow_bytes: ROUND_FLOW_BYTES,
        received: Vec::new(),
    }
}

/// The balance assertion holds for an even split over the usable members
/// and fails for any other: it asserts what it says.
#[test]
fn members_balanced_means_an_even_split_over_the_usable_ones() {
    let four = ["eth2", "eth0", "eth3", "eth1"];
    for (slaves, down, split) in [
        (&four[..], &[][..], &[4, 4, 4, 4][..]),
        (&four, &["eth2", "eth3"], &[0, 8, 0, 8]),
        (&["eth1", "eth0"], &[], &[8, 8]),
        (&four, &["eth2"], &[0, 6, 5, 5]),
    ] {
        let round = round_of(slaves, down, split);
        assert_eq!(
            members_balanced(&round),
            Ok(()),
            "{split:?} with {down:?} down"
        );
    }
    for (down, split) in [
        (&[][..], [3, 3, 5, 5]),
        (&["eth2", "eth3"][..], [0, 7, 0, 9]),
        (&["eth2"][..], [0, 7, 5, 4]),
        // Even over all four, but two of them are down.
        (&["eth2", "eth3"][..], [4, 4, 4, 4]),
    ] {
        let round = round_of(&four, down, &split);
        assert!(
            members_balanced(&round).is_err(),
            "{split:?} with {down:?} down passed"
        );
    }
    // No flows, or fewer than a round opens, evenly split: no verdict.
    for split in [[0, 0, 0, 0], [2, 2, 2, 2]] {
        let round = round_of(&four, &[], &split);
        let why = members_balanced(&round).expect_err("a round without its flows passed");
        assert!(why.contains("of the 16 flows opened"), "{why}");
    }
}
