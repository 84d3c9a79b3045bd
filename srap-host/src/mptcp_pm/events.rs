//! The `mptcp_pm_events` group's notices: one per connection or subflow
//! change of the namespace, whichever path manager runs it. The genetlink
//! command is the event's kind; its attributes (`MPTCP_ATTR_*`) name the
//! connection by token and, for subflows, their two ends (ports in network
//! order, unlike the requests' address attributes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::netlink::{Attr, Message, NetlinkError, parse_genl};

/// `MPTCP_ATTR_*`.
const TOKEN: u16 = 1;
const LOC_ID: u16 = 3;
const REM_ID: u16 = 4;
const SADDR4: u16 = 5;
const SADDR6: u16 = 6;
const DADDR4: u16 = 7;
const DADDR6: u16 = 8;
const SPORT: u16 = 9;
const DPORT: u16 = 10;
const BACKUP: u16 = 11;
const ERROR: u16 = 12;
const IF_IDX: u16 = 15;
const SERVER_SIDE: u16 = 18;

/// What happened (`enum mptcp_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmEventKind {
    /// A connection began (its first subflow's SYN went out or came in).
    Created,
    /// Its first subflow is established.
    Established,
    /// The connection is gone.
    Closed,
    /// The peer announced an address (`ADD_ADDR`).
    Announced,
    /// The peer withdrew one (`RM_ADDR`).
    Removed,
    /// A further subflow is established.
    SubEstablished,
    /// A subflow closed, or failed to open (`error` says why).
    SubClosed,
    /// A subflow's backup flag changed, on either side.
    SubPriority,
    /// Anything else (listener events and kinds newer than this code).
    Other(u8),
}

impl PmEventKind {
    fn of(cmd: u8) -> Self {
        match cmd {
            1 => Self::Created,
            2 => Self::Established,
            3 => Self::Closed,
            6 => Self::Announced,
            7 => Self::Removed,
            10 => Self::SubEstablished,
            11 => Self::SubClosed,
            13 => Self::SubPriority,
            other => Self::Other(other),
        }
    }
}

/// One notice, with what its kind carries: `local` and `remote` are the
/// subflow's ends (the first subflow's for a connection event; the
/// announced address, as `remote`, for [`PmEventKind::Announced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmEvent {
    pub kind: PmEventKind,
    pub token: u32,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub local_id: Option<u8>,
    pub remote_id: Option<u8>,
    pub backup: bool,
    /// This host accepted the connection.
    pub server_side: bool,
    pub ifindex: Option<u32>,
    /// A failed subflow's errno.
    pub error: Option<u8>,
}

impl PmEvent {
    /// An event of `kind` for connection `token` that carries nothing
    /// else (yet).
    pub fn new(kind: PmEventKind, token: u32) -> Self {
        Self {
            kind,
            token,
            local: None,
            remote: None,
            local_id: None,
            remote_id: None,
            backup: false,
            server_side: false,
            ifindex: None,
            error: None,
        }
    }
}

/// The event of one notice; `None` for a message of another kind (an
/// error or an ack on an event socket).
pub fn parse_event(msg: &Message<'_>, family: u16) -> Result<Option<PmEvent>, NetlinkError> {
    if msg.kind != family {
        return Ok(None);
    }
    let (cmd, attrs) = parse_genl(msg)?;
    let mut event = PmEvent::new(PmEventKind::of(cmd), 0);
    let mut ends = Ends::default();
    for attr in &attrs {
        read_attr(attr, &mut event, &mut ends)?;
    }
    event.local = ends.saddr.map(|ip| SocketAddr::new(ip, ends.sport));
    event.remote = ends.daddr.map(|ip| SocketAddr::new(ip, ends.dport));
    Ok(Some(event))
}

/// The addresses and ports, gathered before they are paired.
#[derive(Default)]
struct Ends {
    saddr: Option<IpAddr>,
    daddr: Option<IpAddr>,
    sport: u16,
    dport: u16,
}

fn read_attr(attr: &Attr<'_>, event: &mut PmEvent, ends: &mut Ends) -> Result<(), NetlinkError> {
    match attr.kind {
        TOKEN => event.token = attr.u32("token")?,
        LOC_ID => event.local_id = Some(byte(attr, "local id")?),
        REM_ID => event.remote_id = Some(byte(attr, "remote id")?),
        SADDR4 => ends.saddr = Some(v4(attr)?),
        SADDR6 => ends.saddr = Some(v6(attr)?),
        DADDR4 => ends.daddr = Some(v4(attr)?),
        DADDR6 => ends.daddr = Some(v6(attr)?),
        SPORT => ends.sport = be16(attr, "source port")?,
        DPORT => ends.dport = be16(attr, "destination port")?,
        BACKUP => event.backup = byte(attr, "backup")? != 0,
        ERROR => event.error = Some(byte(attr, "error")?),
        IF_IDX => event.ifindex = Some(attr.u32("interface index")?),
        SERVER_SIDE => event.server_side = byte(attr, "server side")? != 0,
        _ => {}
    }
    Ok(())
}

fn byte(attr: &Attr<'_>, what: &str) -> Result<u8, NetlinkError> {
    attr.payload
        .first()
        .copied()
        .ok_or_else(|| NetlinkError::Malformed(format!("the event's {what} is empty")))
}

fn be16(attr: &Attr<'_>, what: &str) -> Result<u16, NetlinkError> {
    match attr.payload {
        [a, b, ..] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(NetlinkError::Malformed(format!(
            "the event's {what} is not a u16"
        ))),
    }
}

fn v4(attr: &Attr<'_>) -> Result<IpAddr, NetlinkError> {
    let octets: [u8; 4] = attr
        .payload
        .try_into()
        .map_err(|_| NetlinkError::Malformed("an IPv4 address of the wrong size".into()))?;
    Ok(IpAddr::V4(Ipv4Addr::from(octets)))
}

fn v6(attr: &Attr<'_>) -> Result<IpAddr, NetlinkError> {
    let octets: [u8; 16] = attr
        .payload
        .try_into()
        .map_err(|_| NetlinkError::Malformed("an IPv6 address of the wrong size".into()))?;
    Ok(IpAddr::V6(Ipv6Addr::from(octets)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{
        parse_messages,
        tests::{attr, message},
    };

    const FAMILY: u16 = 0x1d;

    fn notice(cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body = [vec![cmd, 1, 0, 0], attrs.concat()].concat();
        message(FAMILY, 0, 0, &body)
    }

    #[test]
    fn a_subflow_notice_gives_both_ends_with_their_ports_in_network_order() {
        let datagram = notice(
            10,
            &[
                attr(1, &7u32.to_ne_bytes()),
                attr(2, &2u16.to_ne_bytes()),
                attr(3, &[1]),
                attr(4, &[0]),
                attr(5, &[10, 2, 0, 1]),
                attr(7, &[10, 2, 0, 2]),
                attr(9, &40123u16.to_be_bytes()),
                attr(10, &5201u16.to_be_bytes()),
                attr(11, &[1]),
                attr(15, &4u32.to_ne_bytes()),
            ],
        );
        let messages = parse_messages(&datagram).expect("parses");
        let event = parse_event(&messages[0], FAMILY)
            .expect("valid")
            .expect("an event");
        assert_eq!(event.kind, PmEventKind::SubEstablished);
        assert_eq!(event.token, 7);
        assert_eq!(event.local, Some("10.2.0.1:40123".parse().expect("addr")));
        assert_eq!(event.remote, Some("10.2.0.2:5201".parse().expect("addr")));
        assert_eq!((event.local_id, event.remote_id), (Some(1), Some(0)));
        assert!(event.backup);
        assert_eq!(event.ifindex, Some(4));
    }

    #[test]
    fn another_family_is_no_event_and_a_cut_address_is_an_error() {
        let other = message(FAMILY + 1, 0, 0, &[1, 1, 0, 0]);
        let messages = parse_messages(&other).expect("parses");
        assert_eq!(parse_event(&messages[0], FAMILY).expect("valid"), None);
        let cut = notice(1, &[attr(5, &[10, 2, 0])]);
        let messages = parse_messages(&cut).expect("parses");
        assert!(parse_event(&messages[0], FAMILY).is_err());
    }

    #[test]
    fn unknown_kinds_and_attributes_pass() {
        let datagram = notice(200, &[attr(1, &3u32.to_ne_bytes()), attr(99, &[1, 2])]);
        let messages = parse_messages(&datagram).expect("parses");
        let event = parse_event(&messages[0], FAMILY)
            .expect("valid")
            .expect("an event");
        assert_eq!((event.kind, event.token), (PmEventKind::Other(200), 3));
    }
}
