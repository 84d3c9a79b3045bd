//! Transport (L4) protocols as the kernel numbers them (`IPPROTO_*`): the
//! one definition that flow keys, the binder's classification of a
//! connecting socket and the RSS description's hashed fields use.
//!
//! A protocol is data, carried through rather than written where a flow is
//! handled. Which ones the binder steers is one list,
//! [`crate::binder::STEERED`] (TCP alone): the connect hook answers
//! [`crate::binder::steered_protocol`] from it (a connect of any other
//! protocol is its own verdict,
//! [`crate::binder::outcome::PROTOCOL_NOT_STEERED`]), and the sender agent
//! plans a table per steered protocol from it. A flow's tuple says its
//! protocol (`rss::FlowTuple`); a NIC's model keeps hashed fields per
//! [`FlowType`] (UDP's where the description gives them) and hashes each
//! flow with its own, and a plan for a flow type it has none for is refused
//! by name (`rss::Unhashed`); a port table is one protocol's
//! (`port_tables::LayoutPlan::protocol`) and its destinations are keyed by
//! it ([`crate::binder::DestKey`]); the agents' protocol carries every flow
//! type's fields (`wire::UdpFields`, protocol 10); and the eBPF binder's
//! steps after classification take the protocol as a const generic, so a
//! bind looks its tuple up with that protocol's lookup. TCP's by nature,
//! and named so where they are: the receive observer and this host's
//! landings (they see TCP's handshake), the occupancy audit's socket dump
//! (`tcp_diag`), MPTCP's subflows. docs/workspace.md's exercise "Steering
//! connected UDP" lists what steering UDP would still add.

use crate::family::Family;

/// `SOCK_STREAM`: the kernel's socket type of a TCP socket.
pub const SOCK_STREAM: u32 = 1;
/// `SOCK_DGRAM`: the kernel's socket type of a UDP socket.
pub const SOCK_DGRAM: u32 = 2;

/// A transport protocol SRAP knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Protocol {
    /// `IPPROTO_TCP`.
    Tcp = 6,
    /// `IPPROTO_UDP`.
    Udp = 17,
}

impl Protocol {
    /// Every protocol SRAP knows.
    pub const ALL: [Self; 2] = [Self::Tcp, Self::Udp];

    /// The kernel's number in a `u8` field (an IP header's, a flow key's).
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The kernel's number in a `u32` field (`bpf_sock_addr.protocol`).
    pub const fn as_u32(self) -> u32 {
        self as u32
    }

    /// The protocol the kernel number `raw` names, if SRAP knows it.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            6 => Some(Self::Tcp),
            17 => Some(Self::Udp),
            _ => None,
        }
    }

    /// The protocol numbered `number`, for a number known at compile time
    /// (the eBPF steps' const generic, in a `const` block): an unknown one
    /// fails the build there.
    pub const fn known(number: u8) -> Self {
        match Self::from_raw(number as u32) {
            Some(protocol) => protocol,
            None => panic!("not a protocol SRAP knows"),
        }
    }

    /// The protocol of a socket as a `bpf_sock_addr` (or `bpf_sock`) gives
    /// it: its `type` and its `protocol` number, which must agree. A
    /// stream socket of another protocol (MPTCP's 262, SCTP's 132) is
    /// neither: the kernel's hooks see another socket than a TCP one there.
    pub const fn of_socket(sock_type: u32, protocol: u32) -> Option<Self> {
        match (sock_type, Self::from_raw(protocol)) {
            (SOCK_STREAM, Some(Self::Tcp)) => Some(Self::Tcp),
            (SOCK_DGRAM, Some(Self::Udp)) => Some(Self::Udp),
            _ => None,
        }
    }

    /// Its lower-case name, as ethtool's flow types start (`tcp4`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }
}

/// A protocol over an address family: what ethtool calls a flow type
/// (`tcp4`, `udp6`), the key of a NIC's hashed fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowType {
    pub protocol: Protocol,
    pub family: Family,
}

impl FlowType {
    pub const TCP4: Self = Self::new(Protocol::Tcp, Family::Inet);
    pub const TCP6: Self = Self::new(Protocol::Tcp, Family::Inet6);
    pub const UDP4: Self = Self::new(Protocol::Udp, Family::Inet);
    pub const UDP6: Self = Self::new(Protocol::Udp, Family::Inet6);
    /// Every flow type whose hashing discovery reads, TCP's first.
    pub const ALL: [Self; 4] = [Self::TCP4, Self::TCP6, Self::UDP4, Self::UDP6];

    pub const fn new(protocol: Protocol, family: Family) -> Self {
        Self { protocol, family }
    }

    /// Its position in [`FlowType::ALL`]: where a table kept per flow type
    /// (a model's hashed fields) holds it.
    pub const fn index(self) -> usize {
        match (self.protocol, self.family) {
            (Protocol::Tcp, Family::Inet) => 0,
            (Protocol::Tcp, Family::Inet6) => 1,
            (Protocol::Udp, Family::Inet) => 2,
            (Protocol::Udp, Family::Inet6) => 3,
        }
    }

    /// ethtool's name of it (`tcp4`, `udp6`): the key of the RSS
    /// description's `fields`.
    pub const fn name(self) -> &'static str {
        match (self.protocol, self.family) {
            (Protocol::Tcp, Family::Inet) => "tcp4",
            (Protocol::Tcp, Family::Inet6) => "tcp6",
            (Protocol::Udp, Family::Inet) => "udp4",
            (Protocol::Udp, Family::Inet6) => "udp6",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_numbers_round_trip() {
        for protocol in Protocol::ALL {
            assert_eq!(Protocol::from_raw(protocol.as_u32()), Some(protocol));
            assert_eq!(u32::from(protocol.as_u8()), protocol.as_u32());
        }
        assert_eq!((Protocol::Tcp.as_u8(), Protocol::Udp.as_u8()), (6, 17));
        assert_eq!(Protocol::from_raw(132), None);
        assert_eq!(const { Protocol::known(17) }, Protocol::Udp);
    }

    #[test]
    fn a_socket_is_tcp_by_its_type_and_protocol_both() {
        assert_eq!(Protocol::of_socket(SOCK_STREAM, 6), Some(Protocol::Tcp));
        assert_eq!(Protocol::of_socket(SOCK_DGRAM, 17), Some(Protocol::Udp));
        assert_eq!(Protocol::of_socket(SOCK_STREAM, 262), None, "MPTCP");
        assert_eq!(Protocol::of_socket(SOCK_DGRAM, 6), None);
        assert_eq!(Protocol::of_socket(3, 0), None, "a raw socket");
    }

    #[test]
    fn flow_types_are_named_as_ethtool_names_them() {
        let names = FlowType::ALL.map(FlowType::name);
        assert_eq!(names, ["tcp4", "tcp6", "udp4", "udp6"]);
    }

    #[test]
    fn a_flow_types_index_is_its_place_in_all() {
        for (i, flow) in FlowType::ALL.into_iter().enumerate() {
            assert_eq!(flow.index(), i, "{}", flow.name());
        }
    }
}
