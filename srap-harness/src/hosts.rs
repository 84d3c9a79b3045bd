//! Hosts beyond a pair: one hub namespace with a bridge that any number of
//! host namespaces join, each on a veth of its own (a rack of senders and
//! one receiver, say). A pair is [`crate::veth::TwoHosts`]; one host wired to
//! several others is [`crate::veth::link`] per wire.

use std::net::IpAddr;

use anyhow::Context as _;

use crate::{netns::NetNs, subnet::Subnet};

/// The bridge in the hub namespace.
const BRIDGE: &str = "br0";
/// A host's interface, inside its own namespace.
const HOST_IFACE: &str = "eth0";

/// The hub (`10.199.<subnet>.1` on its bridge, a leased subnet) and the
/// hosts on it (host `i` is `10.199.<subnet>.<10 + i>`). Every namespace goes with the last
/// handle to it, and the veths and the bridge with them.
pub struct Bridge {
    hosts: Vec<NetNs>,
    /// The hub's namespace, which holds the bridge.
    pub hub: NetNs,
    /// Held until the namespaces are gone ([`Subnet`]).
    subnet: Subnet,
}

impl Bridge {
    /// The hub's namespace with its bridge up, no hosts yet.
    pub fn new() -> anyhow::Result<Self> {
        let subnet = Subnet::lease()?;
        let hub = NetNs::new()?;
        let bridge = Self {
            hosts: Vec::new(),
            hub,
            subnet,
        };
        let ip = format!("{}/24", bridge.hub_ip());
        bridge
            .hub
            .ip(["link", "add", BRIDGE, "type", "bridge"])
            .context("creating the bridge")?;
        bridge.hub.ip(["addr", "add", &ip, "dev", BRIDGE])?;
        bridge.hub.ip(["link", "set", BRIDGE, "up"])?;
        Ok(bridge)
    }

    /// The hub's address on the bridge.
    pub fn hub_ip(&self) -> IpAddr {
        IpAddr::V4(self.subnet.ipv4(1))
    }

    /// A new host namespace on the bridge; returns its index.
    pub fn add_host(&mut self) -> anyhow::Result<usize> {
        self.add_host_with_queues(1)
    }

    /// A new host namespace on the bridge, its veth with `queues` queues
    /// each way (a multi-queue receiver NIC, with an RSS emulator on the
    /// hub's end: [`Bridge::port`]); returns its index.
    pub fn add_host_with_queues(&mut self, queues: u32) -> anyhow::Result<usize> {
        let i = self.hosts.len();
        let last = u8::try_from(10 + i).context("at most 245 hosts on a bridge")?;
        let ns = NetNs::new()?;
        let port = Self::port(i);
        let queues = queues.to_string();
        self.hub
            .ip([
                "link",
                "add",
                &port,
                "numtxqueues",
                &queues,
                "numrxqueues",
                &queues,
                "type",
                "veth",
                "peer",
                "name",
                HOST_IFACE,
                "numtxqueues",
                &queues,
                "numrxqueues",
                &queues,
                "netns",
                ns.name(),
            ])
            .context("creating a host's veth")?;
        self.hub
            .ip(["link", "set", &port, "master", BRIDGE, "up"])
            .context("putting the veth on the bridge")?;
        let ip = format!("{}/24", self.subnet.ipv4(last));
        ns.ip(["addr", "add", &ip, "dev", HOST_IFACE])?;
        ns.ip(["link", "set", HOST_IFACE, "up"])?;
        self.hosts.push(ns);
        Ok(i)
    }

    /// The hub's end of host `i`'s veth, a port of the bridge: what the
    /// bridge sends host `i` leaves through it.
    pub fn port(i: usize) -> String {
        format!("s{i}")
    }

    /// Host `i`'s namespace.
    pub fn host(&self, i: usize) -> &NetNs {
        &self.hosts[i]
    }

    /// Host `i`'s address.
    pub fn host_ip(&self, i: usize) -> IpAddr {
        let last = u8::try_from(10 + i).unwrap_or(u8::MAX);
        IpAddr::V4(self.subnet.ipv4(last))
    }
}
