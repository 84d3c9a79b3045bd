//! The `mptcp_pm` family's numbers (`include/uapi/linux/mptcp_pm.h`) and
//! the bodies of the requests SRAP sends, as pure functions over bytes so
//! each layout is testable without the kernel.
//!
//! Ports: an address attribute's `PORT` is a u16 in host order (the kernel
//! converts it), while the events carry ports in network order
//! ([`super::events`]).

use std::net::{IpAddr, SocketAddr};

use crate::netlink::{Attr, NLA_F_NESTED, NetlinkError, genl_body, parse_attrs, put_attr};

/// The family's name and version.
pub const FAMILY: &str = "mptcp_pm";
pub const VERSION: u8 = 1;
/// The multicast group of the connection and subflow events.
pub const EVENTS_GROUP: &str = "mptcp_pm_events";

/// `MPTCP_PM_CMD_*`.
pub const CMD_GET_ADDR: u8 = 3;
pub const CMD_GET_LIMITS: u8 = 6;
pub const CMD_SET_FLAGS: u8 = 7;
pub const CMD_ANNOUNCE: u8 = 8;
pub const CMD_SUBFLOW_CREATE: u8 = 10;
pub const CMD_SUBFLOW_DESTROY: u8 = 11;

/// `MPTCP_PM_ATTR_*`: the request's top level.
const ATTR_ADDR: u16 = 1;
const ATTR_RCV_ADD_ADDRS: u16 = 2;
const ATTR_SUBFLOWS: u16 = 3;
const ATTR_TOKEN: u16 = 4;
const ATTR_ADDR_REMOTE: u16 = 6;

/// `MPTCP_PM_ADDR_ATTR_*`: inside a nested address.
const ADDR_FAMILY: u16 = 1;
const ADDR_ID: u16 = 2;
const ADDR_ADDR4: u16 = 3;
const ADDR_ADDR6: u16 = 4;
const ADDR_PORT: u16 = 5;
const ADDR_FLAGS: u16 = 6;
const ADDR_IF_IDX: u16 = 7;

/// `MPTCP_PM_ADDR_FLAG_*`.
pub const FLAG_SIGNAL: u32 = 1 << 0;
pub const FLAG_SUBFLOW: u32 = 1 << 1;
pub const FLAG_BACKUP: u32 = 1 << 2;

/// One end of a subflow as the path manager names it: the connection's id
/// for the address (0 is the first subflow's, which the kernel gives), the
/// address and port (port 0: the kernel picks), and the interface to bind
/// to, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmEndpoint {
    pub id: u8,
    pub addr: SocketAddr,
    pub ifindex: Option<u32>,
}

/// `SUBFLOW_CREATE`: a subflow of connection `token` from `local` (its
/// port bound as given) to `remote`.
pub fn subflow_create(token: u32, local: &PmEndpoint, remote: SocketAddr) -> Vec<u8> {
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ATTR_TOKEN, &token.to_ne_bytes());
    put_nested(&mut attrs, ATTR_ADDR, &endpoint(local, 0));
    put_nested(&mut attrs, ATTR_ADDR_REMOTE, &address(remote));
    genl_body(CMD_SUBFLOW_CREATE, VERSION, &attrs)
}

/// `SUBFLOW_DESTROY`: closes the subflow of `token` between `local` and
/// `remote` (both with their ports).
pub fn subflow_destroy(token: u32, local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ATTR_TOKEN, &token.to_ne_bytes());
    put_nested(&mut attrs, ATTR_ADDR, &address(local));
    put_nested(&mut attrs, ATTR_ADDR_REMOTE, &address(remote));
    genl_body(CMD_SUBFLOW_DESTROY, VERSION, &attrs)
}

/// `SET_FLAGS`: the subflow of `token` between `local` and `remote` (both
/// with their ports, so exactly one subflow matches) marked backup or not;
/// the kernel tells the peer by `MP_PRIO`.
pub fn set_backup(token: u32, local: SocketAddr, remote: SocketAddr, backup: bool) -> Vec<u8> {
    let flags = if backup { FLAG_BACKUP } else { 0 };
    let mut local_attrs = address(local);
    put_attr(&mut local_attrs, ADDR_FLAGS, &flags.to_ne_bytes());
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ATTR_TOKEN, &token.to_ne_bytes());
    put_nested(&mut attrs, ATTR_ADDR, &local_attrs);
    put_nested(&mut attrs, ATTR_ADDR_REMOTE, &address(remote));
    genl_body(CMD_SET_FLAGS, VERSION, &attrs)
}

/// `ANNOUNCE`: tells the peer of connection `token` (by `ADD_ADDR`) that
/// it may open a subflow to `local`.
pub fn announce(token: u32, local: &PmEndpoint) -> Vec<u8> {
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ATTR_TOKEN, &token.to_ne_bytes());
    put_nested(&mut attrs, ATTR_ADDR, &endpoint(local, FLAG_SIGNAL));
    genl_body(CMD_ANNOUNCE, VERSION, &attrs)
}

/// One of the namespace's endpoints (`ip mptcp endpoint`): what the
/// in-kernel path manager opens subflows from (`FLAG_SUBFLOW`) or
/// announces (`FLAG_SIGNAL`) for every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmEndpointEntry {
    pub end: PmEndpoint,
    pub flags: u32,
}

/// The namespace's limits (`ip mptcp limits`): further subflows per
/// connection, and addresses a peer announces that are used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmLimits {
    pub subflows: u32,
    pub add_addr_accepted: u32,
}

/// `GET_ADDR` as a dump: every endpoint.
pub fn get_endpoints() -> Vec<u8> {
    genl_body(CMD_GET_ADDR, VERSION, &[])
}

/// `GET_LIMITS`.
pub fn get_limits() -> Vec<u8> {
    genl_body(CMD_GET_LIMITS, VERSION, &[])
}

/// One endpoint of a `GET_ADDR` dump's message; `None` for a message
/// without one.
pub fn parse_endpoint(attrs: &[Attr<'_>]) -> Result<Option<PmEndpointEntry>, NetlinkError> {
    let Some(addr) = attrs.iter().find(|a| a.kind == ATTR_ADDR) else {
        return Ok(None);
    };
    let fields = parse_attrs(addr.payload)?;
    let find = |kind| fields.iter().find(|a| a.kind == kind);
    let ip = match (find(ADDR_ADDR4), find(ADDR_ADDR6)) {
        (Some(v4), _) => IpAddr::from(<[u8; 4]>::try_from(v4.payload).map_err(|_| bad("ADDR4"))?),
        (None, Some(v6)) => {
            IpAddr::from(<[u8; 16]>::try_from(v6.payload).map_err(|_| bad("ADDR6"))?)
        }
        (None, None) => return Ok(None),
    };
    let port = match find(ADDR_PORT).map(|a| a.payload) {
        Some([a, b, ..]) => u16::from_ne_bytes([*a, *b]),
        _ => 0,
    };
    let id = find(ADDR_ID)
        .and_then(|a| a.payload.first().copied())
        .unwrap_or(0);
    let flags = find(ADDR_FLAGS)
        .map(|a| a.u32("flags"))
        .transpose()?
        .unwrap_or(0);
    let ifindex = find(ADDR_IF_IDX)
        .map(|a| a.u32("interface"))
        .transpose()?
        .filter(|i| *i != 0);
    Ok(Some(PmEndpointEntry {
        end: PmEndpoint {
            id,
            addr: SocketAddr::new(ip, port),
            ifindex,
        },
        flags,
    }))
}

/// The limits in a `GET_LIMITS` reply.
pub fn parse_limits(attrs: &[Attr<'_>]) -> Result<PmLimits, NetlinkError> {
    let get = |kind| -> Result<u32, NetlinkError> {
        attrs
            .iter()
            .find(|a| a.kind == kind)
            .map_or(Ok(0), |a| a.u32("limit"))
    };
    Ok(PmLimits {
        subflows: get(ATTR_SUBFLOWS)?,
        add_addr_accepted: get(ATTR_RCV_ADD_ADDRS)?,
    })
}

fn bad(what: &str) -> NetlinkError {
    NetlinkError::Malformed(format!("an endpoint's {what} of the wrong size"))
}

/// A nested address with its id, flags and interface.
fn endpoint(end: &PmEndpoint, flags: u32) -> Vec<u8> {
    let mut attrs = address(end.addr);
    put_attr(&mut attrs, ADDR_ID, &[end.id]);
    put_attr(&mut attrs, ADDR_FLAGS, &flags.to_ne_bytes());
    if let Some(ifindex) = end.ifindex {
        put_attr(&mut attrs, ADDR_IF_IDX, &ifindex.to_ne_bytes());
    }
    attrs
}

/// A nested address's family, address and port.
fn address(addr: SocketAddr) -> Vec<u8> {
    let mut attrs = Vec::new();
    match addr.ip() {
        IpAddr::V4(ip) => {
            put_attr(
                &mut attrs,
                ADDR_FAMILY,
                &(libc::AF_INET as u16).to_ne_bytes(),
            );
            put_attr(&mut attrs, ADDR_ADDR4, &ip.octets());
        }
        IpAddr::V6(ip) => {
            put_attr(
                &mut attrs,
                ADDR_FAMILY,
                &(libc::AF_INET6 as u16).to_ne_bytes(),
            );
            put_attr(&mut attrs, ADDR_ADDR6, &ip.octets());
        }
    }
    put_attr(&mut attrs, ADDR_PORT, &addr.port().to_ne_bytes());
    attrs
}

fn put_nested(buf: &mut Vec<u8>, kind: u16, inner: &[u8]) {
    put_attr(buf, kind | NLA_F_NESTED, inner);
}

#[cfg(test)]
mod tests {
    //! Expected bytes are written out from the kernel's layouts, not with
    //! the encoders above.

    use super::*;
    use crate::netlink::tests::attr;

    fn nested(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
        attr(kind | NLA_F_NESTED, &parts.concat())
    }

    #[test]
    fn a_subflow_request_names_the_token_the_local_port_and_the_remote() {
        let local = PmEndpoint {
            id: 3,
            addr: "10.2.0.1:40123".parse().expect("address"),
            ifindex: Some(7),
        };
        let remote = "10.2.0.2:5201".parse().expect("address");
        let body = subflow_create(0xdead_beef, &local, remote);
        let expected = [
            vec![CMD_SUBFLOW_CREATE, 1, 0, 0],
            attr(4, &0xdead_beef_u32.to_ne_bytes()),
            nested(
                1,
                &[
                    attr(1, &2u16.to_ne_bytes()),
                    attr(3, &[10, 2, 0, 1]),
                    attr(5, &40123u16.to_ne_bytes()),
                    attr(2, &[3]),
                    attr(6, &0u32.to_ne_bytes()),
                    attr(7, &7u32.to_ne_bytes()),
                ],
            ),
            nested(
                6,
                &[
                    attr(1, &2u16.to_ne_bytes()),
                    attr(3, &[10, 2, 0, 2]),
                    attr(5, &5201u16.to_ne_bytes()),
                ],
            ),
        ]
        .concat();
        assert_eq!(body, expected);
    }

    #[test]
    fn a_backup_request_carries_the_flag_beside_the_local_address() {
        let local: SocketAddr = "[fd00::1]:1000".parse().expect("address");
        let remote: SocketAddr = "[fd00::2]:2000".parse().expect("address");
        let mut v6 = [0u8; 16];
        v6[0] = 0xfd;
        v6[15] = 1;
        let local_part = [
            attr(1, &10u16.to_ne_bytes()),
            attr(4, &v6),
            attr(5, &1000u16.to_ne_bytes()),
        ];
        for (backup, flags) in [(true, FLAG_BACKUP), (false, 0)] {
            let body = set_backup(1, local, remote, backup);
            let mut inner = local_part.to_vec();
            inner.push(attr(6, &flags.to_ne_bytes()));
            let head = [vec![CMD_SET_FLAGS, 1, 0, 0], attr(4, &1u32.to_ne_bytes())].concat();
            let expected_local = nested(1, &inner);
            assert_eq!(&body[..head.len()], &head[..]);
            assert_eq!(
                &body[head.len()..head.len() + expected_local.len()],
                &expected_local[..]
            );
        }
    }

    #[test]
    fn an_announcement_is_a_signal_address() {
        let local = PmEndpoint {
            id: 2,
            addr: "192.0.2.1:0".parse().expect("address"),
            ifindex: None,
        };
        let body = announce(9, &local);
        let signal = attr(6, &FLAG_SIGNAL.to_ne_bytes());
        assert!(body.windows(signal.len()).any(|w| w == signal));
        assert_eq!(body[0], CMD_ANNOUNCE);
    }
}
