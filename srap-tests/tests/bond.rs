//! The bonding driver's member choice against SRAP's model of it: a QEMU
//! guest bonds 2 or 4 virtio-net NICs (`balance-xor` or `802.3ad`, with
//! `xmit_hash_policy=layer3+4`, each NIC on its own tap of a bridge in the
//! test namespace; for 802.3ad a minimal LACP partner answers on the taps), sends flows one at a time with kernel-chosen source
//! ports, and the member whose `tx_packets` rose by each flow — the guest
//! kernel's own count — must be the one `srap_common::bond::member_index`
//! gives the tuple the host's sink accepted. Then a member's link goes
//! down, and the next flows must follow the model over the rest,
//! re-indexed modulo n − 1. Under `xmit_hash_policy=encap3+4` the port does
//! not decide: the counters put flows on the `layer3+4` model's member only
//! by chance, and one 4-tuple sent again takes other members.
//!
//! This machine's kernel has no bonding; the guest's Debian kernel ships
//! it. One guest at a time.

use srap_common::bond::HashPolicy;
use srap_harness::guest::{
    Guest, GuestImage, GuestKernel, GuestNet, GuestShape,
    bond::{self, BondFlow, BondMode, GuestBond, LacpPartner},
};
use srap_tests::{guest_image, require_privileged};

use crate::ONE_GUEST;

/// Flows per member count with every member up.
const FLOWS: usize = 16;
/// Flows after a member's link went down.
const FLOWS_AFTER_FAILURE: usize = 8;

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
    require_privileged("flows_leave_on_the_member_the_model_picks");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = guest_image(GuestKernel::V6_1);
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
    require_privileged("lacp_flows_leave_on_the_member_the_model_picks");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = guest_image(GuestKernel::V6_1);
    members_follow_the_model(&image, &[2, 0, 3, 1], BondMode::Lacp);
}

/// `balance-xor` with 4 members on the 6.12 guest: the same driver hash
/// (design notes: the same instructions in both kernels' `bonding.ko`).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn flows_leave_on_the_member_the_model_picks_on_6_12() {
    require_privileged("flows_leave_on_the_member_the_model_picks_on_6_12");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let image = guest_image(GuestKernel::V6_12);
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

/// Flows with kernel ports under `encap3+4`.
const ENCAP_FLOWS: usize = 24;
/// Sends of one 4-tuple (a fixed source port) under `encap3+4`.
const ENCAP_SAME_TUPLE: usize = 8;
/// The fixed source port those sends use.
const ENCAP_SPORT: u16 = 40_000;

/// `xmit_hash_policy=encap3+4` on the 6.1 guest: the source port does not
/// decide the member (the driver takes the skb's L4 hash, for TCP the guest
/// sends the socket's random `sk_txhash`), so SRAP must not balance members
/// by ports there (`HashPolicy::port_decides`).
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn encap34_port_does_not_decide_the_member() {
    require_privileged("encap34_port_does_not_decide_the_member");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    port_does_not_decide_under_encap34(&guest_image(GuestKernel::V6_1));
}

/// The same on the 6.12 guest.
#[test]
#[ignore = "QEMU: needs root, QEMU/KVM and netns; run as root by `cargo xtask test`"]
fn encap34_port_does_not_decide_the_member_on_6_12() {
    require_privileged("encap34_port_does_not_decide_the_member_on_6_12");
    let _alone = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    port_does_not_decide_under_encap34(&guest_image(GuestKernel::V6_12));
}

/// `balance-xor` over 4 members with `encap3+4`: [`ENCAP_FLOWS`] flows with
/// kernel ports, judged by the members' `tx_packets` against the
/// `layer3+4` model's member, and one 4-tuple sent [`ENCAP_SAME_TUPLE`]
/// times (a new connection from [`ENCAP_SPORT`] each time).
///
/// Were the port deciding, every flow would be on the model's member and
/// every send of the tuple on one member. With a random hash per
/// connection, a flow is on the model's member 1 time in 4 (24 flows: 6 on
/// average; 17 or more about once in 10⁵ runs) and 8 sends of one tuple
/// all take one member 4⁻⁷ of the time (6 · 10⁻⁵). A flow whose hash is
/// redrawn mid-way (a retransmission timeout) is split over two members
/// and the counters name none: counted apart.
fn port_does_not_decide_under_encap34(image: &GuestImage) {
    let order = [2u32, 0, 3, 1];
    let net = GuestNet::bonded(order.len() as u32).expect("namespace with a bridge and taps");
    let shape = GuestShape::bonded(order.len() as u32).expect("shape");
    let mut guest = Guest::boot(&net, image, shape).expect("guest boots");
    let bond = GuestBond::create_with_policy(
        &mut guest,
        &net,
        &order,
        BondMode::BalanceXor,
        HashPolicy::Encap34,
    )
    .expect("bond0 in the guest");
    GuestBond::no_time_wait(&mut guest).expect("no TIME_WAIT in the guest");
    let members = bond.slaves(&mut guest).expect("the bond's slaves");
    let kernel = guest.kernel.series();

    let flows: Vec<BondFlow> = (0..ENCAP_FLOWS)
        .map(|_| {
            bond.send_flow(&mut guest, &net)
                .expect("a flow over the bond")
        })
        .collect();
    let table = bond::render(
        &format!(
            "kernel ports: {ENCAP_FLOWS} flows on {} members (balance-xor, encap3+4; {kernel} guest); \
             \"model\" is layer3+4's member",
            members.len()
        ),
        &members,
        &flows,
    );
    println!("{table}");
    let clear = flows.iter().filter(|f| f.by_counters.is_some()).count();
    let on_model = flows.iter().filter(|f| f.agrees()).count();
    println!(
        "  encap3+4: {on_model} of {clear} flows the counters name on the layer3+4 model's member \
         ({} split or unclear)",
        ENCAP_FLOWS - clear
    );
    assert!(
        clear * 3 >= ENCAP_FLOWS * 2,
        "the counters name a member for only {clear} of {ENCAP_FLOWS} flows\n{table}"
    );
    assert!(
        on_model * 3 <= clear * 2,
        "{on_model} of {clear} flows on the layer3+4 model's member: under encap3+4 the port \
         looks like it decides\n{table}"
    );

    let same: Vec<BondFlow> = (0..ENCAP_SAME_TUPLE)
        .map(|_| {
            bond.send_flow_from(&mut guest, &net, Some(ENCAP_SPORT))
                .expect("a flow from the fixed port")
        })
        .collect();
    let table = bond::render(
        &format!(
            "one tuple: {ENCAP_SAME_TUPLE} connections from port {ENCAP_SPORT} \
             (balance-xor, encap3+4; {kernel} guest)"
        ),
        &members,
        &same,
    );
    println!("{table}");
    let mut seen: Vec<&str> = same
        .iter()
        .filter_map(|f| f.by_counters.as_deref())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    println!(
        "  one tuple, {ENCAP_SAME_TUPLE} connections: {} distinct members ({})",
        seen.len(),
        seen.join(", ")
    );
    assert!(
        seen.len() >= 2,
        "{ENCAP_SAME_TUPLE} connections of one tuple all left on {seen:?}\n{table}"
    );
}
