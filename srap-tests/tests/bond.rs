//! The bonding driver's member choice against SRAP's model of it: a QEMU
//! guest bonds 2 or 4 virtio-net NICs (`balance-xor` or `802.3ad`, with
//! `xmit_hash_policy=layer3+4`, each NIC on its own tap of a bridge in the
//! test namespace; for 802.3ad a minimal LACP partner answers on the taps), sends flows one at a time with kernel-chosen source
//! ports, and the member whose `tx_packets` rose by each flow — the guest
//! kernel's own count — must be the one `srap_common::bond::member_index`
//! gives the tuple the host's sink accepted. Then a member's link goes
//! down, and the next flows must follow the model over the rest,
//! re-indexed modulo n − 1.
//!
//! This machine's kernel has no bonding; the guest's Debian kernel ships
//! it. One guest at a time.

use srap_lab::guest::{
    Guest, GuestFiles, GuestImage, GuestKernel, GuestNet, GuestShape,
    bond::{self, BondFlow, BondMode, GuestBond, LacpPartner},
};
use srap_tests::{built_binary, require_privileged};

/// One guest at a time: two cores cannot emulate two guests well.
static ONE_GUEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Flows per member count with every member up.
const FLOWS: usize = 16;
/// Flows after a member's link went down.
const FLOWS_AFTER_FAILURE: usize = 8;

fn image_of(kernel: GuestKernel) -> GuestImage {
    let agent = built_binary("srap-agent");
    let cache = GuestImage::default_cache(&agent);
    let files = GuestFiles::locate(None, &agent).expect("the guest files");
    GuestImage::prepare(&files, kernel, &cache, &agent, &built_binary("srap"))
        .expect("the guest image")
}

/// `count` flows over `bond`, each judged by the guest's counters and by
/// the model; prints their table and fails on any flow where the two
/// differ (or the counters name no member).
fn flows_follow_the_model(
    guest: &mut Guest,
    net: &GuestNet,
    bond: &GuestBond,
    title: &str,
    count: usize,
) -> Vec<BondFlow> {
    let members = bond.slaves(guest).expect("the bond's slaves");
    let flows: Vec<BondFlow> = (0..count)
        .map(|_| bond.send_flow(guest, net).expect("a flow over the bond"))
        .collect();
    let table = bond::render(title, &members, &flows);
    println!("{table}");
    assert!(flows.iter().all(BondFlow::agrees), "{table}");
    flows
}

/// `balance-xor` with 2 and with 4 members, enslaved out of name order:
/// every flow leaves on the member the model picks; with one member's link
/// down, every later flow leaves on the member the model picks among the
/// rest.
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn flows_leave_on_the_member_the_model_picks() {
    if !require_privileged("flows_leave_on_the_member_the_model_picks") {
        return;
    }
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = image_of(GuestKernel::V6_1);
    for order in [&[1u32, 0][..], &[2, 0, 3, 1]] {
        members_follow_the_model(&image, order, BondMode::BalanceXor);
    }
}

/// The same with `802.3ad` and 4 members, all in one aggregator with a
/// minimal LACP partner on the host's taps; a member whose link goes down
/// leaves the aggregator, and the rest are re-indexed as in `balance-xor`.
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn lacp_flows_leave_on_the_member_the_model_picks() {
    if !require_privileged("lacp_flows_leave_on_the_member_the_model_picks") {
        return;
    }
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = image_of(GuestKernel::V6_1);
    members_follow_the_model(&image, &[2, 0, 3, 1], BondMode::Lacp);
}

/// `balance-xor` with 4 members on the 6.12 guest: the same driver hash
/// (design notes: the same instructions in both kernels' `bonding.ko`).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn flows_leave_on_the_member_the_model_picks_on_6_12() {
    if !require_privileged("flows_leave_on_the_member_the_model_picks_on_6_12") {
        return;
    }
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = image_of(GuestKernel::V6_12);
    members_follow_the_model(&image, &[2, 0, 3, 1], BondMode::BalanceXor);
}

/// A guest bonding its NICs in `order` in `mode`: [`FLOWS`] flows on the
/// model's member, then, with the first-enslaved member's link down,
/// [`FLOWS_AFTER_FAILURE`] more on the model's member among the rest.
fn members_follow_the_model(image: &GuestImage, order: &[u32], mode: BondMode) {
    let members = order.len() as u32;
    let net = GuestNet::bonded(members).expect("namespace with a bridge and taps");
    let _partner =
        (mode == BondMode::Lacp).then(|| LacpPartner::start(&net).expect("the LACP partner"));
    let shape = GuestShape::bonded(members).expect("shape");
    let mut guest = Guest::boot(&net, image, shape).expect("guest boots");
    let bond = GuestBond::create(&mut guest, &net, order, mode).expect("bond0 in the guest");
    let all = bond.enslaved.len();
    let mode_name = mode.sysfs();
    let kernel = guest.kernel.series();
    flows_follow_the_model(
        &mut guest,
        &net,
        &bond,
        &format!(
            "kernel ports: {FLOWS} flows on {all} members ({mode_name}, layer3+4; {kernel} guest)"
        ),
        FLOWS,
    );

    // The first-enslaved member fails: every later one moves down an index,
    // so this is where a model of the usable set shows.
    let failed = bond.enslaved[0].clone();
    bond.take_down(&mut guest, &failed).expect("a member down");
    let usable = bond.usable(&mut guest).expect("the usable members");
    let expected: Vec<String> = bond.enslaved[1..].to_vec();
    assert_eq!(usable, expected, "usable after {failed} went down");
    let after = flows_follow_the_model(
        &mut guest,
        &net,
        &bond,
        &format!(
            "kernel ports: {FLOWS_AFTER_FAILURE} flows with {failed} down ({} usable of {all}, {mode_name}; {kernel} guest)",
            all - 1
        ),
        FLOWS_AFTER_FAILURE,
    );
    assert!(
        after
            .iter()
            .all(|f| f.by_counters.as_deref() != Some(failed.as_str())),
        "a flow left on {failed}, whose link is down"
    );
}
