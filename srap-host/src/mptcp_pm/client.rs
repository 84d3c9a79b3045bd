//! The two sockets of a path manager in user space: one sends requests
//! and waits for each one's answer ([`PathManager`]); the other only
//! hears the namespace's events ([`PmEvents`]), so no event is lost while
//! a request waits and no answer is mistaken for an event. Both stay in
//! the network namespace of the thread that opened them.

use std::{net::SocketAddr, time::Duration};

use super::{
    events::{PmEvent, parse_event},
    message::{self, EVENTS_GROUP, FAMILY, PmEndpoint, PmEndpointEntry, PmLimits},
};
use crate::netlink::{
    NLM_F_ACK, NetlinkError, Protocol, REPLY_TIMEOUT, Socket, check_error, parse_genl,
    parse_messages,
};

/// The kernel option that provides the family, for its absence's error.
const CONFIG: &str = "CONFIG_MPTCP";

/// Sends the userspace path manager's requests. The kernel refuses them
/// (`EINVAL`, with its reason) for a connection of the in-kernel manager.
#[derive(Debug)]
pub struct PathManager {
    socket: Socket,
    family: u16,
}

impl PathManager {
    /// Opens the socket and looks the family up. Needs `CAP_NET_ADMIN`
    /// for the requests (the lookup needs none).
    pub fn open() -> Result<Self, NetlinkError> {
        let mut socket = Socket::open(Protocol::Generic, REPLY_TIMEOUT)?;
        let family = socket.genl_family(FAMILY, CONFIG)?;
        Ok(Self { socket, family })
    }

    /// Opens a subflow of `token` from `local` (bound to its port) to
    /// `remote`; it is established (or failed) when its event says so.
    pub fn create_subflow(
        &mut self,
        token: u32,
        local: &PmEndpoint,
        remote: SocketAddr,
    ) -> Result<(), NetlinkError> {
        self.send(&message::subflow_create(token, local, remote))
    }

    /// Closes the subflow of `token` between `local` and `remote`.
    pub fn destroy_subflow(
        &mut self,
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<(), NetlinkError> {
        self.send(&message::subflow_destroy(token, local, remote))
    }

    /// Marks the subflow of `token` between `local` and `remote` backup or
    /// not, and tells the peer (`MP_PRIO`).
    pub fn set_backup(
        &mut self,
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<(), NetlinkError> {
        self.send(&message::set_backup(token, local, remote, backup))
    }

    /// Announces `local` to the peer of `token` (`ADD_ADDR`).
    pub fn announce(&mut self, token: u32, local: &PmEndpoint) -> Result<(), NetlinkError> {
        self.send(&message::announce(token, local))
    }

    /// The namespace's endpoints (`ip mptcp endpoint show`).
    pub fn endpoints(&mut self) -> Result<Vec<PmEndpointEntry>, NetlinkError> {
        let mut out = Vec::new();
        let family = self.family;
        self.socket.dump(family, &message::get_endpoints(), |msg| {
            let (_, attrs) = parse_genl(msg)?;
            out.extend(message::parse_endpoint(&attrs)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The namespace's limits (`ip mptcp limits show`).
    pub fn limits(&mut self) -> Result<PmLimits, NetlinkError> {
        let family = self.family;
        self.socket.request(family, &message::get_limits(), |msg| {
            check_error(msg)?;
            let (_, attrs) = parse_genl(msg)?;
            message::parse_limits(&attrs)
        })
    }

    fn send(&mut self, body: &[u8]) -> Result<(), NetlinkError> {
        self.socket.acked(self.family, NLM_F_ACK, body)
    }
}

/// Hears the `mptcp_pm_events` group of the namespace: every path
/// manager's connections and subflows. Needs `CAP_NET_ADMIN` to join.
#[derive(Debug)]
pub struct PmEvents {
    socket: Socket,
    family: u16,
}

impl PmEvents {
    /// Joins the group; reads wait up to `timeout`.
    pub fn open(timeout: Duration) -> Result<Self, NetlinkError> {
        let mut socket = Socket::open(Protocol::Generic, timeout)?;
        let family = socket.genl_family_groups(FAMILY, CONFIG)?;
        let group = family.group(EVENTS_GROUP).ok_or_else(|| {
            NetlinkError::Malformed(format!("the {FAMILY} family has no {EVENTS_GROUP} group"))
        })?;
        socket.join_group(group)?;
        Ok(Self {
            socket,
            family: family.id,
        })
    }

    /// The events of the next datagram, waiting up to the timeout
    /// ([`NetlinkError::TimedOut`] when none came). A notice that does not
    /// parse is an error for its datagram only: the next call reads on.
    pub fn next(&self) -> Result<Vec<PmEvent>, NetlinkError> {
        let datagram = self.socket.notices()?;
        let mut events = Vec::new();
        for msg in parse_messages(&datagram)? {
            if let Some(event) = parse_event(&msg, self.family)? {
                events.push(event);
            }
        }
        Ok(events)
    }
}
