//! The one netlink layer SRAP talks to the kernel through: RSS discovery
//! (generic netlink, ethtool), the device's queue count and parent
//! (rtnetlink, [`crate::link`]) and the receive observer's socket counters
//! (sock_diag). Each client builds its own request bodies and reads its own
//! replies; this module owns what they share:
//!
//! * the socket ([`Socket`]): opened in the caller's network namespace, with
//!   a read timeout and the kernel's error text asked for;
//! * one request at a time, numbered, with its answer found by sequence
//!   number (stale answers to an earlier, timed-out request are skipped);
//! * multi-part (dump) replies read to their `NLMSG_DONE`, bounded in reads;
//! * datagrams sized before they are read, so none is truncated;
//! * `NLMSG_ERROR` (and a dump's failing `NLMSG_DONE`) as
//!   [`NetlinkError::Kernel`] with the extended-ack text;
//! * message and attribute encoding and parsing, as pure functions over
//!   bytes, so every layout (and every truncated or hostile one) is testable
//!   without the kernel.
//!
//! Numbers are in host byte order, as netlink carries them. Layouts follow the
//! kernel's `include/uapi/linux/netlink.h` and `genetlink.h`.

use std::{
    io,
    os::fd::{AsRawFd as _, OwnedFd},
    time::Duration,
};

use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink::SocketAddrNetlink,
    sockopt::Timeout,
};
use thiserror::Error;

/// `struct nlmsghdr`: length, type, flags, sequence, port id.
pub const NLMSG_HDR_LEN: usize = 16;
/// `struct nlattr`: length, type.
pub const NLA_HDR_LEN: usize = 4;
/// `struct genlmsghdr`: command, version, reserved.
pub const GENL_HDR_LEN: usize = 4;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;
pub const NLM_F_REQUEST: u16 = 0x1;
/// Root | match: every object of the kind.
pub const NLM_F_DUMP: u16 = 0x300;
/// The error message carries only the header of our request, not all of it.
pub const NLM_F_CAPPED: u16 = 0x100;
/// Extended-ack attributes follow the error.
pub const NLM_F_ACK_TLVS: u16 = 0x200;
/// Ask for an acknowledgement (a request that returns no object).
pub const NLM_F_ACK: u16 = 0x4;
/// New objects: fail if it exists already.
pub const NLM_F_EXCL: u16 = 0x200;
/// New objects: create it.
pub const NLM_F_CREATE: u16 = 0x400;
/// How long a reply may take before a request is given up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
const NLMSGERR_ATTR_MSG: u16 = 1;
pub const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;

/// Datagrams one request may take before it is given up, whatever the
/// kernel keeps sending (a dump answers in a few per hundred objects).
const MAX_READS: usize = 100_000;

/// What went wrong talking to the kernel, or in what it said.
#[derive(Debug, Error)]
pub enum NetlinkError {
    #[error("netlink reply truncated: {what} needs {need} bytes, {have} are left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("malformed netlink reply: {0}")]
    Malformed(String),
    #[error("the kernel refused the request: {}{}", io::Error::from_raw_os_error(*.errno),
        .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel { errno: i32, message: Option<String> },
    #[error("this kernel has no generic netlink family `{family}` ({config} is off)")]
    NoFamily {
        family: &'static str,
        config: &'static str,
    },
    #[error("netlink socket: no answer from the kernel within {0:?}")]
    TimedOut(Duration),
    #[error("netlink socket: {op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

impl NetlinkError {
    /// The kernel's errno, when it was the kernel that said no.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Encoding.

/// Appends one attribute (header, payload, padding to 4 bytes).
pub fn put_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = NLA_HDR_LEN + payload.len();
    // Attributes here are tiny (a device name at most); the u16 cannot overflow.
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(align4(buf.len()), 0);
}

/// Appends a NUL-terminated string attribute.
pub fn put_str_attr(buf: &mut Vec<u8>, kind: u16, text: &str) {
    let mut payload = text.as_bytes().to_vec();
    payload.push(0);
    put_attr(buf, kind, &payload);
}

/// One whole message: nlmsghdr (`flags` | `NLM_F_REQUEST`), then `body`.
pub fn encode(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDR_LEN + body.len();
    let mut msg = Vec::with_capacity(len);
    // Requests are a few hundred bytes at most.
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    msg.extend_from_slice(body);
    msg
}

/// A generic netlink body: genlmsghdr (`cmd`, `version`), then `attrs`.
pub fn genl_body(cmd: u8, version: u8, attrs: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(GENL_HDR_LEN + attrs.len());
    body.extend_from_slice(&[cmd, version, 0, 0]);
    body.extend_from_slice(attrs);
    body
}

/// `CTRL_CMD_GETFAMILY` for `name`: generic netlink families get their ids
/// at boot.
pub fn family_request(seq: u32, name: &str) -> Vec<u8> {
    let mut attrs = Vec::new();
    put_str_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, name);
    encode(
        GENL_ID_CTRL,
        0,
        seq,
        &genl_body(CTRL_CMD_GETFAMILY, 1, &attrs),
    )
}

// ---------------------------------------------------------------------------
// Parsing.

pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// `len` bytes of `buf` from `at`, or what is missing.
pub fn take<'a>(
    buf: &'a [u8],
    at: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], NetlinkError> {
    buf.get(at..at.saturating_add(len))
        .ok_or(NetlinkError::Truncated {
            what,
            need: len,
            have: buf.len().saturating_sub(at),
        })
}

pub fn u16_at(buf: &[u8], at: usize, what: &'static str) -> Result<u16, NetlinkError> {
    let bytes = take(buf, at, 2, what)?;
    Ok(u16::from_ne_bytes([bytes[0], bytes[1]]))
}

pub fn u32_at(buf: &[u8], at: usize, what: &'static str) -> Result<u32, NetlinkError> {
    let bytes = take(buf, at, 4, what)?;
    Ok(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// One netlink message of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// Everything after the nlmsghdr.
    pub payload: &'a [u8],
}

/// Splits a received datagram into its messages.
pub fn parse_messages(buf: &[u8]) -> Result<Vec<Message<'_>>, NetlinkError> {
    let mut messages = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let len = u32_at(buf, at, "nlmsghdr")? as usize;
        if len < NLMSG_HDR_LEN {
            return Err(NetlinkError::Malformed(format!(
                "message length {len} is shorter than its own header"
            )));
        }
        let whole = take(buf, at, len, "netlink message")?;
        messages.push(Message {
            kind: u16_at(whole, 4, "nlmsghdr")?,
            flags: u16_at(whole, 6, "nlmsghdr")?,
            seq: u32_at(whole, 8, "nlmsghdr")?,
            payload: &whole[NLMSG_HDR_LEN..],
        });
        at = at.saturating_add(align4(len));
    }
    Ok(messages)
}

/// One attribute: type (flags stripped), whether it says it is nested, payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub nested: bool,
    pub payload: &'a [u8],
}

/// Splits an attribute stream; any attribute running past the end is an error.
pub fn parse_attrs(buf: &[u8]) -> Result<Vec<Attr<'_>>, NetlinkError> {
    let mut attrs = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let len = u16_at(buf, at, "nlattr header")? as usize;
        let raw_kind = u16_at(buf, at + 2, "nlattr header")?;
        if len < NLA_HDR_LEN {
            return Err(NetlinkError::Malformed(format!(
                "attribute {} has length {len}, shorter than its header",
                raw_kind & NLA_TYPE_MASK
            )));
        }
        let whole = take(buf, at, len, "attribute")?;
        attrs.push(Attr {
            kind: raw_kind & NLA_TYPE_MASK,
            nested: raw_kind & NLA_F_NESTED != 0,
            payload: &whole[NLA_HDR_LEN..],
        });
        at = at.saturating_add(align4(len));
    }
    Ok(attrs)
}

impl Attr<'_> {
    /// The payload as a u32, or what it is instead.
    pub fn u32(&self, what: &'static str) -> Result<u32, NetlinkError> {
        match self.payload {
            [a, b, c, d] => Ok(u32::from_ne_bytes([*a, *b, *c, *d])),
            other => Err(NetlinkError::Malformed(format!(
                "{what} has {} bytes, not a u32",
                other.len()
            ))),
        }
    }

    /// The payload as a string, up to its NUL.
    pub fn str(&self) -> String {
        let text = self.payload.split(|b| *b == 0).next().unwrap_or_default();
        String::from_utf8_lossy(text).into_owned()
    }
}

/// Turns an `NLMSG_ERROR` into `Err` (or `Ok` for a plain ack); other
/// messages pass through.
pub fn check_error(msg: &Message<'_>) -> Result<(), NetlinkError> {
    if msg.kind != NLMSG_ERROR {
        return Ok(());
    }
    let errno = u32_at(msg.payload, 0, "nlmsgerr")? as i32;
    if errno == 0 {
        return Ok(());
    }
    // After the error code: our request's header (capped) or all of it, then
    // extended-ack attributes.
    let message = (msg.flags & NLM_F_ACK_TLVS != 0)
        .then(|| {
            let request_len = if msg.flags & NLM_F_CAPPED != 0 {
                NLMSG_HDR_LEN
            } else {
                u32_at(msg.payload, 4, "nlmsgerr request").ok()? as usize
            };
            ack_text(msg.payload.get(4 + align4(request_len)..)?)
        })
        .flatten();
    Err(NetlinkError::Kernel {
        errno: -errno,
        message,
    })
}

/// A dump's `NLMSG_DONE`: `Err` when it carries the error the dump ended on
/// (then followed by extended-ack attributes, no request).
pub fn check_done(msg: &Message<'_>) -> Result<(), NetlinkError> {
    let errno = match msg.payload.get(..4) {
        Some(&[a, b, c, d]) => i32::from_ne_bytes([a, b, c, d]),
        _ => return Ok(()),
    };
    if errno >= 0 {
        return Ok(());
    }
    let message = (msg.flags & NLM_F_ACK_TLVS != 0)
        .then(|| ack_text(&msg.payload[4..]))
        .flatten();
    Err(NetlinkError::Kernel {
        errno: -errno,
        message,
    })
}

/// The kernel's error text among extended-ack attributes. A text we cannot
/// find is not worth failing on.
fn ack_text(tlvs: &[u8]) -> Option<String> {
    let attrs = parse_attrs(tlvs).ok()?;
    let text = attrs.iter().find(|a| a.kind == NLMSGERR_ATTR_MSG)?.str();
    (!text.is_empty()).then_some(text)
}

/// The generic netlink command and attributes of a reply message.
pub fn parse_genl<'a>(msg: &Message<'a>) -> Result<(u8, Vec<Attr<'a>>), NetlinkError> {
    let header = take(msg.payload, 0, GENL_HDR_LEN, "genlmsghdr")?;
    Ok((header[0], parse_attrs(&msg.payload[GENL_HDR_LEN..])?))
}

/// A generic netlink family as the kernel describes it: the id its
/// requests go to and its multicast groups (name, id), which carry its
/// notices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenlFamily {
    pub id: u16,
    pub groups: Vec<(String, u32)>,
}

impl GenlFamily {
    /// The id of the multicast group `name`, if the family has one.
    pub fn group(&self, name: &str) -> Option<u32> {
        self.groups
            .iter()
            .find_map(|(group, id)| (group == name).then_some(*id))
    }
}

/// The family id in a `CTRL_CMD_NEWFAMILY` reply.
pub fn parse_family_reply(msg: &Message<'_>) -> Result<u16, NetlinkError> {
    parse_family(msg).map(|family| family.id)
}

/// The family id and multicast groups in a `CTRL_CMD_NEWFAMILY` reply.
pub fn parse_family(msg: &Message<'_>) -> Result<GenlFamily, NetlinkError> {
    check_error(msg)?;
    let (cmd, attrs) = parse_genl(msg)?;
    if cmd != CTRL_CMD_NEWFAMILY {
        return Err(NetlinkError::Malformed(format!(
            "expected a new-family reply (command {CTRL_CMD_NEWFAMILY}), got command {cmd}"
        )));
    }
    let id = attrs
        .iter()
        .find(|a| a.kind == CTRL_ATTR_FAMILY_ID)
        .ok_or_else(|| NetlinkError::Malformed("the family reply has no family id".into()))?;
    let id = match id.payload {
        [a, b, ..] => u16::from_ne_bytes([*a, *b]),
        _ => return Err(NetlinkError::Malformed("the family id is not a u16".into())),
    };
    let groups = match attrs.iter().find(|a| a.kind == CTRL_ATTR_MCAST_GROUPS) {
        Some(groups) => parse_groups(groups.payload)?,
        None => Vec::new(),
    };
    Ok(GenlFamily { id, groups })
}

/// `CTRL_ATTR_MCAST_GROUPS`: one nested attribute per group, each with its
/// name and id.
fn parse_groups(payload: &[u8]) -> Result<Vec<(String, u32)>, NetlinkError> {
    let mut groups = Vec::new();
    for entry in parse_attrs(payload)? {
        let fields = parse_attrs(entry.payload)?;
        let name = fields.iter().find(|a| a.kind == CTRL_ATTR_MCAST_GRP_NAME);
        let id = fields.iter().find(|a| a.kind == CTRL_ATTR_MCAST_GRP_ID);
        if let (Some(name), Some(id)) = (name, id) {
            groups.push((name.str(), id.u32("multicast group id")?));
        }
    }
    Ok(groups)
}

// ---------------------------------------------------------------------------
// The socket.

/// Which netlink protocol a [`Socket`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// rtnetlink: links, addresses, routes.
    Route,
    /// Generic netlink: ethtool and the other named families.
    Generic,
    /// sock_diag: the sockets of the namespace.
    SockDiag,
}

/// What one message of an answer means for the exchange.
enum Step {
    /// Keep reading (a dump's next part).
    More,
    /// The answer is complete.
    Done,
}

/// A blocking netlink socket of the caller's network namespace (it stays in
/// that namespace for its life, wherever it is used from), sending one
/// request at a time.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
    timeout: Duration,
}

impl Socket {
    /// Opens a socket whose reads give up after `timeout`, so a kernel that
    /// never answers costs a bounded wait.
    pub fn open(protocol: Protocol, timeout: Duration) -> Result<Self, NetlinkError> {
        let fd = raw_socket(protocol, SocketFlags::empty())?;
        rustix::net::sockopt::set_socket_timeout(&fd, Timeout::Recv, Some(timeout))
            .map_err(io_error("SO_RCVTIMEO"))?;
        ask_for_error_text(&fd);
        Ok(Self {
            fd,
            seq: 0,
            timeout,
        })
    }

    /// Sends `body` as a `kind` request and gives the message that answers
    /// it to `parse`.
    pub fn request<T>(
        &mut self,
        kind: u16,
        body: &[u8],
        parse: impl FnOnce(&Message<'_>) -> Result<T, NetlinkError>,
    ) -> Result<T, NetlinkError> {
        let mut parse = Some(parse);
        let mut answer = None;
        self.exchange(kind, 0, body, |msg| {
            let parse = parse.take().ok_or_else(|| {
                NetlinkError::Malformed("a second answer to a single request".into())
            })?;
            answer = Some(parse(msg)?);
            Ok(Step::Done)
        })?;
        answer.ok_or_else(|| {
            NetlinkError::Malformed("the kernel acknowledged without a reply".into())
        })
    }

    /// Sends `body` as a `kind` dump request and gives every message of the
    /// multi-part answer to `each`, up to its `NLMSG_DONE`.
    pub fn dump(
        &mut self,
        kind: u16,
        body: &[u8],
        mut each: impl FnMut(&Message<'_>) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        self.exchange(kind, NLM_F_DUMP, body, |msg| {
            each(msg)?;
            Ok(Step::More)
        })
    }

    /// Sends `body` as a `kind` request the kernel only acknowledges (a
    /// write: `flags` carry `NLM_F_ACK` and the create flags), and waits
    /// for the ack; the kernel's refusal is [`NetlinkError::Kernel`].
    pub fn acked(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<(), NetlinkError> {
        self.exchange(kind, flags, body, |_| Ok(Step::More))
    }

    /// Looks up the id of the generic netlink family `name`; `config` names
    /// the kernel option that provides it, for the error when it is absent.
    pub fn genl_family(
        &mut self,
        name: &'static str,
        config: &'static str,
    ) -> Result<u16, NetlinkError> {
        self.genl_family_groups(name, config)
            .map(|family| family.id)
    }

    /// [`Socket::genl_family`], with the family's multicast groups.
    pub fn genl_family_groups(
        &mut self,
        name: &'static str,
        config: &'static str,
    ) -> Result<GenlFamily, NetlinkError> {
        let mut attrs = Vec::new();
        put_str_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, name);
        let body = genl_body(CTRL_CMD_GETFAMILY, 1, &attrs);
        match self.request(GENL_ID_CTRL, &body, parse_family) {
            Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENOENT => {
                Err(NetlinkError::NoFamily {
                    family: name,
                    config,
                })
            }
            other => other,
        }
    }

    /// Joins the multicast group `group` (an id from
    /// [`Socket::genl_family_groups`]): its notices are then queued on this
    /// socket, read with [`Socket::notices`]. Group ids of generic netlink
    /// exceed the 32 bits of `bind`'s mask, hence the socket option.
    pub fn join_group(&self, group: u32) -> Result<(), NetlinkError> {
        // SAFETY: `fd` is an open netlink socket and the value a u32 that
        // outlives the call, of the size passed; setsockopt only reads it.
        // Ours because rustix 1.1 has no netlink membership option.
        let done = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_NETLINK,
                libc::NETLINK_ADD_MEMBERSHIP,
                (&raw const group).cast(),
                size_of::<u32>() as libc::socklen_t,
            )
        };
        if done == 0 {
            Ok(())
        } else {
            Err(NetlinkError::Io {
                op: "NETLINK_ADD_MEMBERSHIP",
                source: io::Error::last_os_error(),
            })
        }
    }

    /// The next datagram of notices (messages the kernel sent unasked, of
    /// a joined group), waiting up to this socket's timeout:
    /// [`NetlinkError::TimedOut`] when none came. `ENOBUFS` (notices lost
    /// while the socket's buffer was full) is [`NetlinkError::Io`] with
    /// that errno: the caller re-reads the state the notices describe.
    pub fn notices(&self) -> Result<Vec<u8>, NetlinkError> {
        self.receive()
    }

    /// One numbered request and its answer: every message of it goes to
    /// `on` (errors, acks, the end of a dump and other requests' messages
    /// are handled here) until `on` or `NLMSG_DONE` says it is complete.
    fn exchange(
        &mut self,
        kind: u16,
        flags: u16,
        body: &[u8],
        mut on: impl FnMut(&Message<'_>) -> Result<Step, NetlinkError>,
    ) -> Result<(), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.send(&encode(kind, flags, seq, body))?;
        for _ in 0..MAX_READS {
            let datagram = self.receive()?;
            for msg in parse_messages(&datagram)? {
                if msg.seq != seq {
                    continue; // an answer to an earlier request that timed out
                }
                let step = match msg.kind {
                    NLMSG_NOOP => Step::More,
                    NLMSG_OVERRUN => {
                        return Err(NetlinkError::Malformed(
                            "the kernel overran this socket's buffer".into(),
                        ));
                    }
                    // An error is `Err` here; a plain ack ends the exchange.
                    NLMSG_ERROR => check_error(&msg).map(|()| Step::Done)?,
                    NLMSG_DONE => check_done(&msg).map(|()| Step::Done)?,
                    _ => on(&msg)?,
                };
                if let Step::Done = step {
                    return Ok(());
                }
            }
        }
        Err(NetlinkError::Malformed(format!(
            "no end of the answer after {MAX_READS} reads"
        )))
    }

    fn send(&self, msg: &[u8]) -> Result<(), NetlinkError> {
        let kernel = SocketAddrNetlink::new(0, 0);
        rustix::net::sendto(&self.fd, msg, SendFlags::empty(), &kernel)
            .map(drop)
            .map_err(|e| NetlinkError::Io {
                op: "sendto",
                source: e.into(),
            })
    }

    /// One whole datagram: peeked at with `MSG_TRUNC` for its real size
    /// first (an indirection table of 64 Ki entries is 256 KiB), so it is
    /// never cut short.
    fn receive(&self) -> Result<Vec<u8>, NetlinkError> {
        let (_, size) = rustix::net::recv(
            &self.fd,
            &mut [0u8; 0][..],
            RecvFlags::PEEK | RecvFlags::TRUNC,
        )
        .map_err(|e| self.recv_error(e))?;
        let mut buf = vec![0u8; size];
        let (got, whole) = rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::empty())
            .map_err(|e| self.recv_error(e))?;
        if whole > got {
            return Err(NetlinkError::Truncated {
                what: "datagram",
                need: whole,
                have: got,
            });
        }
        buf.truncate(got);
        Ok(buf)
    }

    fn recv_error(&self, errno: rustix::io::Errno) -> NetlinkError {
        if errno == rustix::io::Errno::AGAIN {
            NetlinkError::TimedOut(self.timeout)
        } else {
            NetlinkError::Io {
                op: "recv",
                source: errno.into(),
            }
        }
    }
}

/// A netlink socket of `protocol` (close-on-exec, and `flags`).
pub(crate) fn raw_socket(protocol: Protocol, flags: SocketFlags) -> Result<OwnedFd, NetlinkError> {
    let protocol = match protocol {
        // NETLINK_ROUTE is protocol 0.
        Protocol::Route => None,
        Protocol::Generic => Some(rustix::net::netlink::GENERIC),
        Protocol::SockDiag => Some(rustix::net::netlink::SOCK_DIAG),
    };
    rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC | flags,
        protocol,
    )
    .map_err(io_error("socket"))
}

/// A failed system call `op` as a [`NetlinkError`].
pub(crate) fn io_error(op: &'static str) -> impl Fn(rustix::io::Errno) -> NetlinkError {
    move |e| NetlinkError::Io {
        op,
        source: e.into(),
    }
}

/// Asks the kernel for its error text (`NETLINK_EXT_ACK`) and for errors
/// that echo only our request's header (`NETLINK_CAP_ACK`). Best effort:
/// without them (kernels before 4.12) errors just carry no text.
fn ask_for_error_text(fd: &OwnedFd) {
    let one: libc::c_int = 1;
    for option in [libc::NETLINK_EXT_ACK, libc::NETLINK_CAP_ACK] {
        // SAFETY: `fd` is an open socket and the option value is a c_int
        // that outlives the call, of the size passed; setsockopt only reads
        // it. Ours because neither rustix 1.1 nor socket2 0.6 has these
        // netlink options or a raw setsockopt.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_NETLINK,
                option,
                (&raw const one).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Messages are built here byte by byte from the kernel's layouts, not
    //! with the encoder above, so the two cannot share a mistake.

    use super::*;

    /// An attribute: u16 length (header included), u16 type, payload, padding.
    pub(crate) fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    /// A whole message: nlmsghdr (len, type, flags, seq, pid), then `body`.
    pub(crate) fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&4242u32.to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_datagram_splits_into_its_messages_and_a_short_one_is_an_error() {
        let mut datagram = message(20, 2, 7, &[1, 2, 3]); // padded below
        datagram.push(0);
        datagram.extend(message(NLMSG_DONE, 2, 7, &0i32.to_ne_bytes()));
        let messages = parse_messages(&datagram).expect("parses");
        assert_eq!(messages.len(), 2);
        assert_eq!(
            (messages[0].kind, messages[0].seq, messages[0].payload),
            (20, 7, &[1, 2, 3][..])
        );
        assert!(check_done(&messages[1]).is_ok());
        for cut in 1..datagram.len() {
            if cut == 19 || cut == 20 {
                continue; // the whole first message, without or with its padding
            }
            assert!(parse_messages(&datagram[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_failed_dump_ends_with_the_kernels_error_and_text() {
        let mut body = (-libc::EPERM).to_ne_bytes().to_vec();
        body.extend(attr(1, b"dump refused\0"));
        let done = message(NLMSG_DONE, NLM_F_ACK_TLVS, 3, &body);
        let messages = parse_messages(&done).expect("parses");
        match check_done(&messages[0]) {
            Err(NetlinkError::Kernel { errno, message }) => {
                assert_eq!(errno, libc::EPERM);
                assert_eq!(message.as_deref(), Some("dump refused"));
            }
            other => panic!("expected a kernel error, got {other:?}"),
        }
    }

    #[test]
    fn requests_are_laid_out_as_the_kernel_expects() {
        let msg = encode(0x15, NLM_F_DUMP, 9, &[1, 2, 3, 4]);
        assert_eq!(msg.len(), 20);
        assert_eq!(u32::from_ne_bytes(msg[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), 0x15);
        assert_eq!(
            u16::from_ne_bytes([msg[6], msg[7]]),
            NLM_F_REQUEST | NLM_F_DUMP
        );
        assert_eq!(u32::from_ne_bytes(msg[8..12].try_into().unwrap()), 9);
        assert_eq!(&msg[16..], &[1, 2, 3, 4]);

        let msg = family_request(1, "ethtool");
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), GENL_ID_CTRL);
        assert_eq!(&msg[16..18], &[CTRL_CMD_GETFAMILY, 1]);
        assert_eq!(&msg[20..], &attr(2, b"ethtool\0")[..]);
    }

    #[test]
    fn family_reply_gives_the_id() {
        let mut body = vec![CTRL_CMD_NEWFAMILY, 2, 0, 0];
        body.extend(attr(2, b"ethtool\0"));
        body.extend(attr(1, &0x15u16.to_ne_bytes()));
        let bytes = message(GENL_ID_CTRL, 0, 1, &body);
        let messages = parse_messages(&bytes).unwrap();
        assert_eq!(parse_family_reply(&messages[0]).unwrap(), 0x15);
    }

    /// The kernel itself: its generic netlink controller answers for a
    /// family every kernel has, and refuses one that does not exist with
    /// ENOENT, through the whole request path.
    #[test]
    fn the_kernel_answers_a_family_request_and_refuses_a_missing_family() {
        let mut socket = Socket::open(Protocol::Generic, Duration::from_secs(5)).expect("socket");
        let id = socket
            .genl_family("nlctrl", "CONFIG_NET")
            .expect("nlctrl exists wherever generic netlink does");
        assert_eq!(id, GENL_ID_CTRL);
        let err = socket
            .genl_family("srapnofamily", "CONFIG_NOTHING")
            .unwrap_err();
        assert!(
            matches!(
                err,
                NetlinkError::NoFamily {
                    family: "srapnofamily",
                    ..
                }
            ),
            "{err}"
        );
        // A name longer than GENL_NAMSIZ fails the kernel's attribute policy,
        // and the kernel says so in its extended ack.
        let err = socket
            .genl_family("srap-name-beyond-16-bytes", "CONFIG_NOTHING")
            .unwrap_err();
        match &err {
            NetlinkError::Kernel { errno, message } => {
                assert_eq!(*errno, libc::EINVAL);
                assert!(
                    message.as_deref().is_some_and(|m| m.contains("policy")),
                    "{err}"
                );
            }
            other => panic!("expected the kernel's refusal, got {other}"),
        }
        // The socket is still usable after the error: numbering stays in step.
        assert_eq!(
            socket.genl_family("nlctrl", "CONFIG_NET").expect("again"),
            GENL_ID_CTRL
        );
    }
}
