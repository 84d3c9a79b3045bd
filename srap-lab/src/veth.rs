//! A veth pair joining two fresh namespaces: the smallest "two hosts on a
//! wire" a test can have.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::Context as _;

use super::{NetNs, unique_name};

/// Shape of the pair.
#[derive(Clone, Copy, Debug)]
pub struct VethConfig {
    /// `numtxqueues` of both ends.
    pub tx_queues: u32,
    /// `numrxqueues` of both ends. Native XDP on a veth wants at least as
    /// many rx queues as its peer has tx queues.
    pub rx_queues: u32,
    /// Third octet of `10.199.<subnet>.0/24` and last group of
    /// `fd00:5a:0:<subnet>::/64`.
    pub subnet: u8,
}

impl Default for VethConfig {
    fn default() -> Self {
        Self {
            tx_queues: 1,
            rx_queues: 1,
            subnet: 1,
        }
    }
}

/// One end of the pair: its interface and addresses (inside its namespace).
#[derive(Clone, Debug)]
pub struct VethEnd {
    /// Interface name.
    pub ifname: String,
    /// `10.199.<subnet>.<host>`.
    pub ipv4: Ipv4Addr,
    /// `fd00:5a:0:<subnet>::<host>`.
    pub ipv6: Ipv6Addr,
}

impl VethEnd {
    /// The end's address of the wanted family.
    pub fn ip(&self, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.ipv6)
        } else {
            IpAddr::V4(self.ipv4)
        }
    }
}

/// A sender and a receiver namespace joined by a veth pair.
///
/// Field order is drop order: nothing to undo for the veth (deleting a
/// namespace destroys its end, and the pair goes with it), then the
/// namespaces.
#[derive(Debug)]
pub struct TwoHosts {
    /// The sender's end (host `.1` / `::1`).
    pub sender_end: VethEnd,
    /// The receiver's end (host `.2` / `::2`).
    pub receiver_end: VethEnd,
    /// The sender's namespace.
    pub sender: NetNs,
    /// The receiver's namespace.
    pub receiver: NetNs,
    /// How the pair was made.
    pub config: VethConfig,
}

impl TwoHosts {
    /// Makes both namespaces and the pair, with addresses and links up.
    pub fn new(config: VethConfig) -> anyhow::Result<Self> {
        let sender = NetNs::new()?;
        let receiver = NetNs::new()?;
        let sender_end = end(&unique_name("t"), config.subnet, 1);
        let receiver_end = end(&unique_name("r"), config.subnet, 2);
        let (tx, rx) = (config.tx_queues.to_string(), config.rx_queues.to_string());
        sender
            .ip([
                "link",
                "add",
                &sender_end.ifname,
                "numtxqueues",
                &tx,
                "numrxqueues",
                &rx,
                "type",
                "veth",
                "peer",
                "name",
                &receiver_end.ifname,
                "netns",
                receiver.name(),
                "numtxqueues",
                &tx,
                "numrxqueues",
                &rx,
            ])
            .context("creating the veth pair")?;
        for (ns, end) in [(&sender, &sender_end), (&receiver, &receiver_end)] {
            configure(ns, end)?;
        }
        Ok(Self {
            sender_end,
            receiver_end,
            sender,
            receiver,
            config,
        })
    }
}

fn end(ifname: &str, subnet: u8, host: u8) -> VethEnd {
    VethEnd {
        ifname: ifname.to_owned(),
        ipv4: Ipv4Addr::new(10, 199, subnet, host),
        ipv6: Ipv6Addr::new(0xfd00, 0x5a, 0, u16::from(subnet), 0, 0, 0, u16::from(host)),
    }
}

fn configure(ns: &NetNs, end: &VethEnd) -> anyhow::Result<()> {
    ns.ip([
        "addr",
        "add",
        &format!("{}/24", end.ipv4),
        "dev",
        &end.ifname,
    ])?;
    // nodad: the address is usable at once instead of after duplicate
    // address detection (no one else is on this wire).
    ns.ip([
        "addr",
        "add",
        &format!("{}/64", end.ipv6),
        "dev",
        &end.ifname,
        "nodad",
    ])?;
    ns.ip(["link", "set", &end.ifname, "up"])?;
    Ok(())
}
