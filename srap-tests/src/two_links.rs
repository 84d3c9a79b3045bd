//! Two links between the pair's namespaces: the pair's own veth and a
//! second one (`TwoHosts::second_link`). A receiver agent over both, which
//! the kernel tests of the receiver's NICs start from, and a service
//! address the sender reaches by either, which the tests of the sender's
//! NICs start from.

use std::net::{Ipv4Addr, SocketAddr};

use srap_common::rss::embedded_default;
use srap_harness::{PEER_PORT, ReceiverOpts, TwoHosts, veth::VethEnd};

use crate::built_binary;

/// `srap-agent receiver` on the pair's receiver end and on `far` (the
/// second link's receiver end), with the embedded description on the
/// first (a veth has no RSS), the socket observer, listening on the first
/// end and serving the sender's first address only.
pub fn receiver_opts(hosts: &TwoHosts, far: &VethEnd) -> ReceiverOpts {
    let listen = SocketAddr::new(hosts.receiver_end.ip(false), PEER_PORT);
    ReceiverOpts::new(
        built_binary("srap-agent"),
        &hosts.receiver_end.ifname,
        listen,
    )
    .rss(embedded_default())
    .args([
        "--iface".to_owned(),
        far.ifname.clone(),
        "--hook".to_owned(),
        "sock".to_owned(),
        "--allow".to_owned(),
        format!("{}/32", hosts.sender_end.ip(false)),
    ])
}

/// Puts `service` on the receiver's loopback and routes the sender to it
/// by both links: the pair's own (link A) first, at metric 10, and the
/// second (`near` the sender's end, `far` the receiver's) at 200, so a
/// flow bound to link B's address or device can leave by it.
pub fn serve_over_both(
    hosts: &TwoHosts,
    near: &VethEnd,
    far: &VethEnd,
    service: Ipv4Addr,
) -> anyhow::Result<()> {
    hosts
        .receiver
        .ip(["addr", "add", &format!("{service}/32"), "dev", "lo"])?;
    let prefix = format!("{service}/32");
    let via_a = hosts.receiver_end.ipv4.to_string();
    let via_b = far.ipv4.to_string();
    let a = &hosts.sender_end.ifname;
    for (via, dev, metric) in [(&via_a, a, "10"), (&via_b, &near.ifname, "200")] {
        hosts.sender.ip([
            "route", "add", &prefix, "via", via, "dev", dev, "metric", metric,
        ])?;
    }
    Ok(())
}
