//! A veth pair joining two fresh namespaces: the smallest "two hosts on a
//! wire" a test can have.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};

use anyhow::Context as _;

use crate::{names::unique_name, netns::NetNs, subnet::Subnet};

/// Shape of the pair.
#[derive(Clone, Copy, Debug)]
pub struct VethConfig {
    /// `numtxqueues` of both ends.
    pub tx_queues: u32,
    /// `numrxqueues` of both ends. Native XDP on a veth wants at least as
    /// many rx queues as its peer has tx queues.
    pub rx_queues: u32,
    /// Third octet of `10.199.<subnet>.0/24` and last group of
    /// `fd00:5a:0:<subnet>::/64` for what needs a known address; `None`
    /// (the default): a free one of the pool ([`Subnet::lease`]).
    pub subnet: Option<u8>,
}

impl Default for VethConfig {
    fn default() -> Self {
        Self {
            tx_queues: 1,
            rx_queues: 1,
            subnet: None,
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

/// The one MPTCP endpoint [`TwoHosts::enable_mptcp_with`] makes.
#[derive(Clone, Copy, Debug)]
pub enum MptcpEndpoint {
    /// The sender's end of the second link, an endpoint its path manager
    /// opens a subflow from, toward the connection's remote address.
    SenderSubflow { v6: bool },
    /// The receiver's end of the second link, an address the receiver
    /// announces to its peers (`ADD_ADDR`): the sender's path manager opens
    /// a subflow toward it, from the address its route picks.
    ReceiverSignal { v6: bool },
}

/// A sender and a receiver namespace joined by a veth pair.
///
/// Field order is drop order: nothing to undo for the veth (deleting a
/// namespace destroys its end, and the pair goes with it), then the
/// namespaces, then the subnet.
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
    /// Held until the namespaces are gone ([`Subnet`]).
    subnet: Subnet,
}

impl TwoHosts {
    /// A second link between the two namespaces, on `subnet` (host `.1`
    /// the sender's end, `.2` the receiver's; IPv4 only): the two ends.
    /// The caller holds `subnet` until the namespaces are gone.
    pub fn second_link(&self, subnet: &Subnet) -> anyhow::Result<(VethEnd, VethEnd)> {
        self.second_link_of(subnet, false)
    }

    /// [`TwoHosts::second_link`], with IPv6 addresses on both ends too
    /// when `v6`.
    pub fn second_link_of(&self, subnet: &Subnet, v6: bool) -> anyhow::Result<(VethEnd, VethEnd)> {
        let near = VethEnd::on_subnet(subnet, 1, "t");
        let far = VethEnd::on_subnet(subnet, 2, "r");
        link(
            &self.sender,
            &near,
            &self.receiver,
            &far,
            VethConfig::default(),
            v6,
        )?;
        Ok((near, far))
    }

    /// MPTCP over the two links ([`TwoHosts::second_link`]'s `near` and
    /// `far` ends) as a user sets it up: enabled on both hosts, limits for
    /// two subflows, reverse-path filtering off where a subflow from the
    /// second address comes in on the first link, and `near`'s address an
    /// endpoint the sender's path manager opens a subflow from.
    pub fn enable_mptcp(&self, near: &VethEnd, far: &VethEnd) -> anyhow::Result<()> {
        self.enable_mptcp_with(near, far, MptcpEndpoint::SenderSubflow { v6: false })
    }

    /// MPTCP over the two links as [`TwoHosts::enable_mptcp`] sets it up,
    /// with `endpoint` the one endpoint made (of the family it names).
    pub fn enable_mptcp_with(
        &self,
        near: &VethEnd,
        far: &VethEnd,
        endpoint: MptcpEndpoint,
    ) -> anyhow::Result<()> {
        for ns in [&self.sender, &self.receiver] {
            enable_mptcp_in(ns)?;
            ns.exec("sysctl", ["-qw", "net.ipv4.conf.all.rp_filter=0"])?;
        }
        for iface in [&self.receiver_end.ifname, &far.ifname] {
            let setting = format!("net.ipv4.conf.{iface}.rp_filter=0");
            self.receiver.exec("sysctl", ["-qw", &setting])?;
        }
        match endpoint {
            MptcpEndpoint::SenderSubflow { v6 } => self
                .sender
                .ip([
                    "mptcp",
                    "endpoint",
                    "add",
                    &near.ip(v6).to_string(),
                    "subflow",
                ])
                .context("ip mptcp endpoint add … subflow")?,
            MptcpEndpoint::ReceiverSignal { v6 } => self
                .receiver
                .ip([
                    "mptcp",
                    "endpoint",
                    "add",
                    &far.ip(v6).to_string(),
                    "signal",
                ])
                .context("ip mptcp endpoint add … signal")?,
        };
        Ok(())
    }

    /// Makes both namespaces and the pair, with addresses and links up.
    pub fn new(config: VethConfig) -> anyhow::Result<Self> {
        let subnet = match config.subnet {
            Some(fixed) => Subnet::take(fixed)?,
            None => Subnet::lease()?,
        };
        let sender = NetNs::new()?;
        let receiver = NetNs::new()?;
        let sender_end = VethEnd::on_subnet(&subnet, 1, "t");
        let receiver_end = VethEnd::on_subnet(&subnet, 2, "r");
        link(&sender, &sender_end, &receiver, &receiver_end, config, true)
            .context("creating the veth pair")?;
        Ok(Self {
            sender_end,
            receiver_end,
            sender,
            receiver,
            config,
            subnet,
        })
    }

    /// Two hosts on a leased subnet over a one-queue veth.
    pub fn pair() -> anyhow::Result<Self> {
        Self::new(VethConfig::default())
    }

    /// The subnet of the wire (a test that adds an address takes it here).
    pub fn subnet(&self) -> &Subnet {
        &self.subnet
    }

    /// The receiver's address (of the family asked for) with `port`.
    pub fn receiver_addr(&self, port: u16, v6: bool) -> SocketAddr {
        SocketAddr::new(self.receiver_end.ip(v6), port)
    }

    /// A (blocking) listener on the receiver's IPv4 address and `port`,
    /// made inside the receiver's namespace, and that address.
    pub fn listen(&self, port: u16) -> anyhow::Result<(TcpListener, SocketAddr)> {
        let addr = self.receiver_addr(port, false);
        let listener = self
            .receiver
            .run(|| TcpListener::bind(addr))?
            .with_context(|| format!("listening on {addr}"))?;
        Ok((listener, addr))
    }
}

impl VethEnd {
    /// Host `host` of `subnet` (IPv4 and IPv6), on an interface name of its
    /// own ending in `suffix`.
    pub fn on_subnet(subnet: &Subnet, host: u8, suffix: &str) -> Self {
        VethEnd {
            ifname: unique_name(suffix),
            ipv4: subnet.ipv4(host),
            ipv6: subnet.ipv6(host),
        }
    }
}

/// Joins `a` and `b` by a veth pair shaped by `shape` (its queues): `a_end`
/// in `a`, `b_end` in `b`, each up with its IPv4 address, and its IPv6 one
/// too when `v6`.
pub fn link(
    a: &NetNs,
    a_end: &VethEnd,
    b: &NetNs,
    b_end: &VethEnd,
    shape: VethConfig,
    v6: bool,
) -> anyhow::Result<()> {
    let (tx, rx) = (shape.tx_queues.to_string(), shape.rx_queues.to_string());
    let queues = ["numtxqueues", &tx, "numrxqueues", &rx];
    a.ip(["link", "add", &a_end.ifname]
        .into_iter()
        .chain(queues)
        .chain(["type", "veth", "peer", "name", &b_end.ifname])
        .chain(["netns", b.name()])
        .chain(queues))?;
    for (ns, end) in [(a, a_end), (b, b_end)] {
        configure(ns, end, v6)?;
    }
    Ok(())
}

fn configure(ns: &NetNs, end: &VethEnd, v6: bool) -> anyhow::Result<()> {
    ns.ip([
        "addr",
        "add",
        &format!("{}/24", end.ipv4),
        "dev",
        &end.ifname,
    ])?;
    if v6 {
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
    }
    ns.ip(["link", "set", &end.ifname, "up"])?;
    Ok(())
}

/// MPTCP on in `ns`, as a user turns it on: enabled, and limits of two
/// subflows per connection and two addresses a peer announces.
pub fn enable_mptcp_in(ns: &NetNs) -> anyhow::Result<()> {
    ns.exec("sysctl", ["-qw", "net.mptcp.enabled=1"])?;
    ns.ip([
        "mptcp",
        "limits",
        "set",
        "subflows",
        "2",
        "add_addr_accepted",
        "2",
    ])
    .with_context(|| format!("ip mptcp limits in {}", ns.name()))?;
    Ok(())
}
