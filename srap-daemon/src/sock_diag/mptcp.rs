//! MPTCP's subflows as sock_diag shows them: each TCP socket that carries
//! the `mptcp` upper-layer protocol, with the token of the MPTCP connection
//! it belongs to and its address ids (what `ss -tni` prints as
//! `tcp-ulp-mptcp … token:…`).
//!
//! Every subflow of one connection carries the connection's local token,
//! the first (kernel-made or not) and those the path manager adds, so the
//! token groups subflows into connections without asking `mptcp_diag`.
//! The kernel adds the upper-layer protocol's attribute to a TCP socket's
//! message when `tcp_info` is asked for and the reader has `CAP_NET_ADMIN`
//! in the namespace; without it the dump simply names no subflow.

use std::{collections::HashMap, net::SocketAddr};

use srap_host::netlink::{Attr, NetlinkError, parse_attrs};

use super::{DIAG_MSG_LEN, DIAG_REQ_LEN, INET_DIAG_INFO, TCP, TCP_LISTEN, TcpDiag, addresses};

/// `INET_DIAG_ULP_INFO`: the upper-layer protocol of a TCP socket (nested).
const INET_DIAG_ULP_INFO: u16 = 19;
/// In it: `INET_ULP_INFO_NAME` (a string) and `INET_ULP_INFO_MPTCP` (nested).
const INET_ULP_INFO_NAME: u16 = 1;
const INET_ULP_INFO_MPTCP: u16 = 3;
/// In that: `MPTCP_SUBFLOW_ATTR_TOKEN_LOC` (u32), `…_ID_REM` and `…_ID_LOC`
/// (u8).
const MPTCP_SUBFLOW_ATTR_TOKEN_LOC: u16 = 2;
const MPTCP_SUBFLOW_ATTR_ID_REM: u16 = 9;
const MPTCP_SUBFLOW_ATTR_ID_LOC: u16 = 10;
/// `INET_DIAG_CGROUP_ID`: the cgroup2 id of the socket's cgroup (a u64,
/// sent for every socket by kernels with cgroup socket data, 5.9 on).
/// MPTCP puts each subflow in its connection's cgroup.
const INET_DIAG_CGROUP_ID: u16 = 21;

/// One subflow: the MPTCP connection it belongs to, by the connection's
/// local token, and its address ids on each side (0 for the first
/// subflow's addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubflowSeen {
    pub token: u32,
    pub local_id: u8,
    pub remote_id: u8,
    /// The cgroup2 id of its connection's cgroup, when the kernel says.
    pub cgroup: Option<u64>,
}

/// The namespace's MPTCP subflows by (local, remote) address.
pub type Subflows = HashMap<(SocketAddr, SocketAddr), SubflowSeen>;

impl TcpDiag {
    /// Every TCP socket of the namespace that is an MPTCP subflow (not
    /// listening), by its (local, remote) address.
    pub fn mptcp_subflows(&self) -> Result<Subflows, NetlinkError> {
        self.dump_tcp(subflow_request, parse_subflow)
    }
}

/// `struct inet_diag_req_v2` for every non-listening TCP socket of `family`,
/// asking for `tcp_info`: the upper-layer protocol's attribute comes only
/// with it.
fn subflow_request(family: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(DIAG_REQ_LEN);
    body.extend_from_slice(&[family, TCP, 1 << (INET_DIAG_INFO - 1), 0]);
    let states: u32 = !(1u32 << TCP_LISTEN);
    body.extend_from_slice(&states.to_ne_bytes());
    body.resize(DIAG_REQ_LEN, 0);
    body
}

/// One `inet_diag_msg` as a subflow, or `None` for a socket that is not one
/// (or a message it cannot read).
fn parse_subflow(body: &[u8]) -> Option<((SocketAddr, SocketAddr), SubflowSeen)> {
    let (local, remote) = addresses(body)?;
    let attrs = parse_attrs(body.get(DIAG_MSG_LEN..)?).ok()?;
    let ulp = attrs.iter().find(|a| a.kind == INET_DIAG_ULP_INFO)?;
    let ulp = parse_attrs(ulp.payload).ok()?;
    let name = ulp.iter().find(|a| a.kind == INET_ULP_INFO_NAME)?.str();
    if name != "mptcp" {
        return None;
    }
    let info = ulp.iter().find(|a| a.kind == INET_ULP_INFO_MPTCP)?;
    let info = parse_attrs(info.payload).ok()?;
    let find = |kind| info.iter().find(|a: &&Attr<'_>| a.kind == kind);
    let seen = SubflowSeen {
        token: find(MPTCP_SUBFLOW_ATTR_TOKEN_LOC)?.u32("token").ok()?,
        local_id: find(MPTCP_SUBFLOW_ATTR_ID_LOC).map_or(0, first_byte),
        remote_id: find(MPTCP_SUBFLOW_ATTR_ID_REM).map_or(0, first_byte),
        cgroup: attrs
            .iter()
            .find(|a| a.kind == INET_DIAG_CGROUP_ID)
            .and_then(|a| Some(u64::from_ne_bytes(a.payload.try_into().ok()?))),
    };
    Some(((local, remote), seen))
}

fn first_byte(attr: &Attr<'_>) -> u8 {
    attr.payload.first().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One attribute, padded to 4 bytes.
    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// An IPv4 `inet_diag_msg` from 10.0.0.1:10001 to 10.0.0.2:5201 with
    /// `ulp` as its upper-layer attribute.
    fn message(ulp: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; DIAG_MSG_LEN];
        body[0] = libc::AF_INET as u8;
        body[4..6].copy_from_slice(&10001u16.to_be_bytes());
        body[6..8].copy_from_slice(&5201u16.to_be_bytes());
        body[8..12].copy_from_slice(&[10, 0, 0, 1]);
        body[24..28].copy_from_slice(&[10, 0, 0, 2]);
        body.extend_from_slice(&attr(INET_DIAG_ULP_INFO, ulp));
        body
    }

    fn mptcp_ulp(token: u32, local_id: u8) -> Vec<u8> {
        let info = [
            attr(1, &0x1111_u32.to_ne_bytes()),
            attr(MPTCP_SUBFLOW_ATTR_TOKEN_LOC, &token.to_ne_bytes()),
            attr(MPTCP_SUBFLOW_ATTR_ID_REM, &[0]),
            attr(MPTCP_SUBFLOW_ATTR_ID_LOC, &[local_id]),
        ]
        .concat();
        [
            attr(INET_ULP_INFO_NAME, b"mptcp\0"),
            attr(INET_ULP_INFO_MPTCP, &info),
        ]
        .concat()
    }

    #[test]
    fn a_subflow_reads_as_its_connections_token_and_ids() {
        let mut body = message(&mptcp_ulp(0xdead_beef, 2));
        body.extend_from_slice(&attr(INET_DIAG_CGROUP_ID, &4242u64.to_ne_bytes()));
        let (tuple, seen) = parse_subflow(&body).expect("subflow");
        assert_eq!(tuple.0, "10.0.0.1:10001".parse().expect("addr"));
        assert_eq!(tuple.1, "10.0.0.2:5201".parse().expect("addr"));
        assert_eq!(
            seen,
            SubflowSeen {
                token: 0xdead_beef,
                local_id: 2,
                remote_id: 0,
                cgroup: Some(4242),
            }
        );
    }

    #[test]
    fn other_sockets_and_broken_attributes_are_not_subflows() {
        // A plain TCP socket: no upper-layer attribute.
        let mut plain = message(&[]);
        plain.truncate(DIAG_MSG_LEN);
        assert_eq!(parse_subflow(&plain), None);
        // TLS is another upper-layer protocol.
        assert_eq!(
            parse_subflow(&message(&attr(INET_ULP_INFO_NAME, b"tls\0"))),
            None
        );
        // A nested attribute that runs past its end.
        let mut broken = message(&mptcp_ulp(7, 1));
        broken.truncate(broken.len() - 6);
        assert_eq!(parse_subflow(&broken), None);
        // No token: not read as a subflow of connection 0.
        let no_token = [
            attr(INET_ULP_INFO_NAME, b"mptcp\0"),
            attr(INET_ULP_INFO_MPTCP, &attr(MPTCP_SUBFLOW_ATTR_ID_LOC, &[1])),
        ]
        .concat();
        assert_eq!(parse_subflow(&message(&no_token)), None);
    }
}
