//! A receiver agent over two links: the pair's own veth and a second one
//! (`TwoHosts::second_link`), the kernel tests of the receiver's NICs
//! start from.

use std::net::SocketAddr;

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
