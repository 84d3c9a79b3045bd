//! The kernel's own notices of links and addresses changing: an rtnetlink
//! socket that joined the link and address multicast groups. A NIC taken
//! down is known here in the microseconds after `ip link set down` (or a
//! cable pulled) returns, where asking every link's state on a timer knows
//! it only at the next tick: a connect the hook sends through that NIC in
//! between is a connect that fails.
//!
//! The socket is non-blocking: [`LinkEvents::wait`] waits for a notice (or
//! an event loop waits on its descriptor, [`AsFd`]), and
//! [`LinkEvents::drain`] reads what is queued. A
//! notice lost because the socket's buffer overran is reported as
//! [`Drained::overran`]: the caller re-reads the state it follows.

use std::{
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    time::Duration,
};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{RecvFlags, SocketFlags, netlink::SocketAddrNetlink};

use crate::netlink::{
    NetlinkError, Protocol, io_error, parse_attrs, parse_messages, raw_socket, take,
};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
/// `RTMGRP_LINK`, `RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`.
const GROUPS: u32 = 0x1 | 0x10 | 0x100;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `struct ifaddrmsg`: family, prefix length, flags, scope, index.
const IFADDRMSG_LEN: usize = 8;
const IFF_RUNNING: u32 = 0x40;
const IFLA_IFNAME: u16 = 3;
/// Datagrams read per [`LinkEvents::drain`], so a storm of notices cannot
/// hold the caller's loop.
const MAX_READS: usize = 256;
/// One notice is a few hundred bytes; a link's carries its statistics.
const DATAGRAM: usize = 64 * 1024;

/// One link's state as a notice gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkNotice {
    pub index: u32,
    pub name: String,
    /// Operationally up (`IFF_RUNNING`); false for a link removed.
    pub running: bool,
}

/// What one [`LinkEvents::drain`] read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drained {
    /// Links whose state was announced, in the order of the notices.
    pub links: Vec<LinkNotice>,
    /// Interfaces (by index) whose addresses were added or removed.
    pub addresses: Vec<u32>,
    /// Notices were lost (`ENOBUFS`): what is followed must be re-read.
    pub overran: bool,
}

impl Drained {
    /// Nothing was read.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.addresses.is_empty() && !self.overran
    }
}

/// A non-blocking rtnetlink socket of the caller's network namespace that
/// hears every link and address notice of it.
#[derive(Debug)]
pub struct LinkEvents {
    fd: OwnedFd,
}

impl LinkEvents {
    /// Joins the link and address groups. Needs no privilege.
    pub fn open() -> Result<Self, NetlinkError> {
        let fd = raw_socket(Protocol::Route, SocketFlags::NONBLOCK)?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, GROUPS)).map_err(io_error("bind"))?;
        Ok(Self { fd })
    }

    /// Waits up to `timeout` for a notice; true when one is queued.
    pub fn wait(&self, timeout: Duration) -> Result<bool, NetlinkError> {
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(ready) => Ok(ready > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(io_error("poll")(e)),
        }
    }

    /// Reads every notice queued now; empty when none is. Past
    /// `MAX_READS` datagrams, or on one that does not parse (logged), the
    /// rest counts as lost ([`Drained::overran`]): a notice is a hint to
    /// re-read, never the state itself.
    pub fn drain(&self) -> Result<Drained, NetlinkError> {
        let mut drained = Drained {
            overran: true,
            ..Drained::default()
        };
        let mut buf = vec![0u8; DATAGRAM];
        let mut lost = false;
        for _ in 0..MAX_READS {
            match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::DONTWAIT) {
                Ok((got, _)) => {
                    if let Err(err) = read_notices(&buf[..got], &mut drained) {
                        tracing::debug!("a link notice that does not parse: {err}");
                        lost = true;
                    }
                }
                Err(rustix::io::Errno::AGAIN) => {
                    drained.overran = lost;
                    break;
                }
                Err(rustix::io::Errno::NOBUFS) => lost = true,
                Err(e) => return Err(io_error("recv")(e)),
            }
        }
        Ok(drained)
    }
}

impl AsFd for LinkEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Adds the notices of one datagram to `drained`.
fn read_notices(datagram: &[u8], drained: &mut Drained) -> Result<(), NetlinkError> {
    for msg in parse_messages(datagram)? {
        match msg.kind {
            RTM_NEWLINK | RTM_DELLINK => {
                let mut notice = link_notice(msg.payload)?;
                notice.running &= msg.kind == RTM_NEWLINK;
                drained.links.push(notice);
            }
            RTM_NEWADDR | RTM_DELADDR => {
                let header = take(msg.payload, 0, IFADDRMSG_LEN, "ifaddrmsg")?;
                let index = u32::from_ne_bytes([header[4], header[5], header[6], header[7]]);
                drained.addresses.push(index);
            }
            _ => {}
        }
    }
    Ok(())
}

/// The link a `RTM_NEWLINK`/`RTM_DELLINK` payload names.
fn link_notice(payload: &[u8]) -> Result<LinkNotice, NetlinkError> {
    let header = take(payload, 0, IFINFOMSG_LEN, "ifinfomsg")?;
    let flags = u32::from_ne_bytes([header[8], header[9], header[10], header[11]]);
    let name = parse_attrs(&payload[IFINFOMSG_LEN..])?
        .into_iter()
        .find(|a| a.kind == IFLA_IFNAME)
        .map(|a| a.str())
        .unwrap_or_default();
    Ok(LinkNotice {
        index: u32::from_ne_bytes([header[4], header[5], header[6], header[7]]),
        name,
        running: flags & IFF_RUNNING != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{encode, put_str_attr};

    fn link_message(kind: u16, index: u32, flags: u32, name: &str) -> Vec<u8> {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        body[8..12].copy_from_slice(&flags.to_ne_bytes());
        put_str_attr(&mut body, IFLA_IFNAME, name);
        encode(kind, 0, 0, &body)
    }

    /// A link up, one going down and one removed, then an address notice:
    /// each read as what it says; a removed link is not running.
    #[test]
    fn notices_say_which_link_and_whether_it_runs() {
        let mut datagram = link_message(RTM_NEWLINK, 3, IFF_RUNNING | 1, "eth0");
        datagram.extend(link_message(RTM_NEWLINK, 4, 1, "eth1"));
        datagram.extend(link_message(RTM_DELLINK, 5, IFF_RUNNING, "eth2"));
        let mut addr = vec![0u8; IFADDRMSG_LEN];
        addr[4..8].copy_from_slice(&7u32.to_ne_bytes());
        datagram.extend(encode(RTM_NEWADDR, 0, 0, &addr));
        let mut drained = Drained::default();
        read_notices(&datagram, &mut drained).expect("parses");
        let states: Vec<_> = drained
            .links
            .iter()
            .map(|l| (l.index, l.name.as_str(), l.running))
            .collect();
        assert_eq!(
            states,
            [(3, "eth0", true), (4, "eth1", false), (5, "eth2", false)]
        );
        assert_eq!(drained.addresses, [7]);
        assert!(!drained.overran);
    }

    /// A notice cut short is an error, never a panic.
    #[test]
    fn a_short_notice_is_an_error() {
        let datagram = encode(RTM_NEWLINK, 0, 0, &[0u8; 4]);
        assert!(read_notices(&datagram, &mut Drained::default()).is_err());
    }
}
