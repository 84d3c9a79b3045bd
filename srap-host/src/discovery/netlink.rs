//! Generic netlink, just enough of it to ask ethtool for a device's RSS
//! (`ETHTOOL_MSG_RSS_GET`): message and attribute encoding, reply parsing,
//! and a thin blocking socket.
//!
//! Encoding and parsing are pure functions over bytes, so every reply layout
//! (and every truncated or hostile one) is testable without a NIC. Numbers are
//! in host byte order, as netlink carries them. Layouts follow the kernel's
//! `include/uapi/linux/netlink.h`, `genetlink.h` and
//! `ethtool_netlink_generated.h`.

use std::{
    io,
    os::fd::{AsRawFd as _, OwnedFd},
    time::Duration,
};

use thiserror::Error;

/// `struct nlmsghdr`: length, type, flags, sequence, port id.
const NLMSG_HDR_LEN: usize = 16;
/// `struct genlmsghdr`: command, version, reserved.
const GENL_HDR_LEN: usize = 4;
/// `struct nlattr`: length, type.
const NLA_HDR_LEN: usize = 4;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
/// The error message carries only the header of our request, not all of it.
const NLM_F_CAPPED: u16 = 0x100;
/// Extended-ack attributes follow the error.
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

const ETHTOOL_GENL_NAME: &str = "ethtool";
const ETHTOOL_GENL_VERSION: u8 = 1;
/// Request and reply share the number (38) in their separate enums.
pub const ETHTOOL_MSG_RSS_GET: u8 = 38;
pub const ETHTOOL_MSG_RSS_GET_REPLY: u8 = 38;

const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_RSS_HEADER: u16 = 1;
const ETHTOOL_A_RSS_HFUNC: u16 = 3;
const ETHTOOL_A_RSS_INDIR: u16 = 4;
const ETHTOOL_A_RSS_HKEY: u16 = 5;
const ETHTOOL_A_RSS_INPUT_XFRM: u16 = 6;
/// Linux ≥ 6.17: the `rx-flow-hash` fields of every flow type, nested.
const ETHTOOL_A_RSS_FLOW_HASH: u16 = 8;
const ETHTOOL_A_FLOW_TCP4: u16 = 4;
const ETHTOOL_A_FLOW_TCP6: u16 = 5;

/// How long a reply may take before the request is given up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

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
    #[error("this kernel has no ethtool netlink family (CONFIG_ETHTOOL_NETLINK is off)")]
    NoEthtoolFamily,
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

/// Everything `ETHTOOL_MSG_RSS_GET_REPLY` says about context 0. Absent
/// attributes stay `None`/empty: the kernel leaves out zero values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RssReply {
    /// `ETH_RSS_HASH_*` bit of the active hash function.
    pub hfunc: Option<u32>,
    pub indir: Vec<u32>,
    pub key: Vec<u8>,
    /// `RXH_XFRM_*` bits (Linux ≥ 6.8 reports them).
    pub input_xfrm: Option<u32>,
    /// `RXH_*` bits hashed for TCP over IPv4 (Linux ≥ 6.17 reports them here).
    pub flow_hash_tcp4: Option<u64>,
    pub flow_hash_tcp6: Option<u64>,
}

// ---------------------------------------------------------------------------
// Encoding.

fn put_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = NLA_HDR_LEN + payload.len();
    // Attributes here are tiny (a device name at most); the u16 cannot overflow.
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(align4(buf.len()), 0);
}

fn put_str_attr(buf: &mut Vec<u8>, kind: u16, text: &str) {
    let mut payload = text.as_bytes().to_vec();
    payload.push(0);
    put_attr(buf, kind, &payload);
}

/// One generic netlink request: nlmsghdr + genlmsghdr + `attrs`.
fn genl_request(family: u16, seq: u32, cmd: u8, version: u8, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDR_LEN + GENL_HDR_LEN + attrs.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&family.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    msg.extend_from_slice(&[cmd, version, 0, 0]);
    msg.extend_from_slice(attrs);
    msg
}

/// `CTRL_CMD_GETFAMILY` for "ethtool": the family id is assigned at boot.
pub fn family_request(seq: u32) -> Vec<u8> {
    let mut attrs = Vec::new();
    put_str_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME);
    genl_request(GENL_ID_CTRL, seq, CTRL_CMD_GETFAMILY, 1, &attrs)
}

/// `ETHTOOL_MSG_RSS_GET` for the default context of `ifname`.
pub fn rss_get_request(family: u16, seq: u32, ifname: &str) -> Vec<u8> {
    let mut header = Vec::new();
    put_str_attr(&mut header, ETHTOOL_A_HEADER_DEV_NAME, ifname);
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ETHTOOL_A_RSS_HEADER | NLA_F_NESTED, &header);
    genl_request(
        family,
        seq,
        ETHTOOL_MSG_RSS_GET,
        ETHTOOL_GENL_VERSION,
        &attrs,
    )
}

// ---------------------------------------------------------------------------
// Parsing.

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn take<'a>(
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

fn u16_at(buf: &[u8], at: usize, what: &'static str) -> Result<u16, NetlinkError> {
    let bytes = take(buf, at, 2, what)?;
    Ok(u16::from_ne_bytes([bytes[0], bytes[1]]))
}

fn u32_at(buf: &[u8], at: usize, what: &'static str) -> Result<u32, NetlinkError> {
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

fn attr_u32(attr: &Attr<'_>, what: &'static str) -> Result<u32, NetlinkError> {
    match attr.payload {
        [a, b, c, d] => Ok(u32::from_ne_bytes([*a, *b, *c, *d])),
        other => Err(NetlinkError::Malformed(format!(
            "{what} has {} bytes, not a u32",
            other.len()
        ))),
    }
}

/// `NLA_UINT`: 4 or 8 bytes, whichever the value needed.
fn attr_uint(attr: &Attr<'_>, what: &'static str) -> Result<u64, NetlinkError> {
    match attr.payload.len() {
        4 => attr_u32(attr, what).map(u64::from),
        8 => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(attr.payload);
            Ok(u64::from_ne_bytes(bytes))
        }
        n => Err(NetlinkError::Malformed(format!(
            "{what} has {n} bytes, not a u32 or u64"
        ))),
    }
}

/// Turns an `NLMSG_ERROR` into `Err` (or `Ok` for a plain ack); other
/// messages pass through.
fn check_error(msg: &Message<'_>) -> Result<(), NetlinkError> {
    if msg.kind != NLMSG_ERROR {
        return Ok(());
    }
    let errno = u32_at(msg.payload, 0, "nlmsgerr")? as i32;
    if errno == 0 {
        return Ok(());
    }
    // After the error code: our request's header (capped) or all of it, then
    // extended-ack attributes. A message we cannot find is not worth failing on.
    let message = (msg.flags & NLM_F_ACK_TLVS != 0)
        .then(|| {
            let request_len = if msg.flags & NLM_F_CAPPED != 0 {
                NLMSG_HDR_LEN
            } else {
                u32_at(msg.payload, 4, "nlmsgerr request").ok()? as usize
            };
            let tlvs = msg.payload.get(4 + align4(request_len)..)?;
            let attrs = parse_attrs(tlvs).ok()?;
            let text = attrs.iter().find(|a| a.kind == NLMSGERR_ATTR_MSG)?.payload;
            let text = text.split(|b| *b == 0).next().unwrap_or_default();
            Some(String::from_utf8_lossy(text).into_owned())
        })
        .flatten()
        .filter(|m| !m.is_empty());
    Err(NetlinkError::Kernel {
        errno: -errno,
        message,
    })
}

/// The generic netlink command and attributes of a reply message.
fn genl_body<'a>(msg: &Message<'a>) -> Result<(u8, Vec<Attr<'a>>), NetlinkError> {
    let header = take(msg.payload, 0, GENL_HDR_LEN, "genlmsghdr")?;
    Ok((header[0], parse_attrs(&msg.payload[GENL_HDR_LEN..])?))
}

/// The family id in a `CTRL_CMD_NEWFAMILY` reply.
pub fn parse_family_reply(msg: &Message<'_>) -> Result<u16, NetlinkError> {
    check_error(msg)?;
    let (cmd, attrs) = genl_body(msg)?;
    if cmd != CTRL_CMD_NEWFAMILY {
        return Err(NetlinkError::Malformed(format!(
            "expected a new-family reply (command {CTRL_CMD_NEWFAMILY}), got command {cmd}"
        )));
    }
    let id = attrs
        .iter()
        .find(|a| a.kind == CTRL_ATTR_FAMILY_ID)
        .ok_or_else(|| NetlinkError::Malformed("the family reply has no family id".into()))?;
    match id.payload {
        [a, b, ..] => Ok(u16::from_ne_bytes([*a, *b])),
        _ => Err(NetlinkError::Malformed("the family id is not a u16".into())),
    }
}

/// An `ETHTOOL_MSG_RSS_GET_REPLY` (or the kernel's error).
pub fn parse_rss_reply(msg: &Message<'_>) -> Result<RssReply, NetlinkError> {
    check_error(msg)?;
    let (cmd, attrs) = genl_body(msg)?;
    if cmd != ETHTOOL_MSG_RSS_GET_REPLY {
        return Err(NetlinkError::Malformed(format!(
            "expected an RSS_GET reply (command {ETHTOOL_MSG_RSS_GET_REPLY}), got command {cmd}"
        )));
    }
    let mut reply = RssReply::default();
    for attr in &attrs {
        match attr.kind {
            ETHTOOL_A_RSS_HFUNC => reply.hfunc = Some(attr_u32(attr, "hfunc")?),
            ETHTOOL_A_RSS_INPUT_XFRM => reply.input_xfrm = Some(attr_u32(attr, "input_xfrm")?),
            ETHTOOL_A_RSS_HKEY => reply.key = attr.payload.to_vec(),
            ETHTOOL_A_RSS_INDIR => {
                if attr.payload.len() % 4 != 0 {
                    return Err(NetlinkError::Malformed(format!(
                        "the indirection table has {} bytes, not a whole number of u32 entries",
                        attr.payload.len()
                    )));
                }
                reply.indir = attr
                    .payload
                    .chunks_exact(4)
                    .map(|e| u32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
                    .collect();
            }
            ETHTOOL_A_RSS_FLOW_HASH => {
                for flow in parse_attrs(attr.payload)? {
                    match flow.kind {
                        ETHTOOL_A_FLOW_TCP4 => {
                            reply.flow_hash_tcp4 = Some(attr_uint(&flow, "flow hash tcp4")?);
                        }
                        ETHTOOL_A_FLOW_TCP6 => {
                            reply.flow_hash_tcp6 = Some(attr_uint(&flow, "flow hash tcp6")?);
                        }
                        _ => {}
                    }
                }
            }
            // Header, context and attributes of newer kernels.
            _ => {}
        }
    }
    Ok(reply)
}

// ---------------------------------------------------------------------------
// The socket.

/// A blocking `NETLINK_GENERIC` socket that sends one request at a time.
struct GenlSocket {
    fd: OwnedFd,
    seq: u32,
}

fn io_err(op: &'static str) -> NetlinkError {
    NetlinkError::Io {
        op,
        source: io::Error::last_os_error(),
    }
}

impl GenlSocket {
    fn open() -> Result<Self, NetlinkError> {
        let fd = crate::netlink::open(libc::SOCK_RAW, libc::NETLINK_GENERIC, REPLY_TIMEOUT)
            .map_err(|source| NetlinkError::Io {
                op: "socket",
                source,
            })?;
        let one: libc::c_int = 1;
        for opt in [libc::NETLINK_EXT_ACK, libc::NETLINK_CAP_ACK] {
            // Best effort: without them errors just carry no text.
            // SAFETY: valid fd, option value of the size passed.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_NETLINK,
                    opt,
                    (&raw const one).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Ok(Self { fd, seq: 0 })
    }

    /// Sends a request built by `build(seq)` and returns the datagram holding
    /// the reply to it.
    fn request(&mut self, build: impl FnOnce(u32) -> Vec<u8>) -> Result<Vec<u8>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let msg = build(seq);
        crate::netlink::send_to_kernel(&self.fd, &msg).map_err(|source| NetlinkError::Io {
            op: "sendto",
            source,
        })?;
        loop {
            let datagram = self.receive()?;
            let ours = parse_messages(&datagram)?
                .iter()
                .any(|m| m.seq == seq && m.kind != NLMSG_DONE);
            if ours {
                return Ok(datagram);
            }
        }
    }

    fn receive(&self) -> Result<Vec<u8>, NetlinkError> {
        // Peek with MSG_TRUNC for the datagram's real size: indirection tables
        // can be large (64 Ki entries are 256 KiB).
        let mut probe = [0u8; 1];
        // SAFETY: valid fd and buffer.
        let size = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                probe.as_mut_ptr().cast(),
                probe.len(),
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        };
        if size < 0 {
            return Err(io_err("recv"));
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: valid fd and buffer of the length passed.
        let got = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 {
            return Err(io_err("recv"));
        }
        buf.truncate(got as usize);
        Ok(buf)
    }
}

/// The message of `datagram` that answers `seq`.
fn reply_to(datagram: &[u8], seq: u32) -> Result<Message<'_>, NetlinkError> {
    parse_messages(datagram)?
        .into_iter()
        .find(|m| m.seq == seq)
        .ok_or_else(|| NetlinkError::Malformed("no reply to our request".into()))
}

/// Asks the kernel (in the caller's network namespace) for `ifname`'s RSS.
pub fn rss_get(ifname: &str) -> Result<RssReply, NetlinkError> {
    let mut socket = GenlSocket::open()?;
    let datagram = socket.request(family_request)?;
    let family = match parse_family_reply(&reply_to(&datagram, socket.seq)?) {
        Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENOENT => {
            return Err(NetlinkError::NoEthtoolFamily);
        }
        other => other?,
    };
    let datagram = socket.request(|seq| rss_get_request(family, seq, ifname))?;
    parse_rss_reply(&reply_to(&datagram, socket.seq)?)
}

#[cfg(test)]
pub(crate) mod tests {
    //! Replies are built here byte by byte from the kernel's layouts, not with
    //! the encoder above, so the two cannot share a mistake.

    use super::*;

    const FAMILY: u16 = 0x15;

    /// An attribute: u16 length (header included), u16 type, payload, padding.
    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    fn u32_attr(kind: u16, value: u32) -> Vec<u8> {
        attr(kind, &value.to_ne_bytes())
    }

    /// A whole message: nlmsghdr (len, type, flags, seq, pid), then `body`.
    fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&4242u32.to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    /// An RSS_GET reply as the kernel lays it out: header nest (ifindex,
    /// name), hfunc, indir, hkey, then optional input_xfrm and flow hashes.
    pub(crate) fn rss_reply(
        ifname: &str,
        indir: &[u32],
        key: &[u8],
        xfrm: Option<u32>,
        flow_hash: Option<(u32, u32)>,
    ) -> Vec<u8> {
        let mut name = ifname.as_bytes().to_vec();
        name.push(0);
        let mut header = u32_attr(1, 7);
        header.extend(attr(2, &name));
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend(attr(1 | 0x8000, &header));
        body.extend(u32_attr(3, 1)); // ETH_RSS_HASH_TOP
        let table: Vec<u8> = indir.iter().flat_map(|q| q.to_ne_bytes()).collect();
        body.extend(attr(4, &table));
        body.extend(attr(5, key));
        if let Some(xfrm) = xfrm {
            body.extend(u32_attr(6, xfrm));
        }
        if let Some((tcp4, tcp6)) = flow_hash {
            let mut nest = u32_attr(4, tcp4);
            nest.extend(u32_attr(5, tcp6));
            nest.extend(u32_attr(6, 0x30)); // udp4: ignored
            body.extend(attr(8 | 0x8000, &nest));
        }
        message(FAMILY, 0, 2, &body)
    }

    pub(crate) fn round_robin(len: usize, queues: u32) -> Vec<u32> {
        (0..len as u32).map(|i| i % queues).collect()
    }

    pub(crate) fn key(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add(0x6d))
            .collect()
    }

    pub(crate) fn parse(datagram: &[u8]) -> Result<RssReply, NetlinkError> {
        let messages = parse_messages(datagram)?;
        let first = messages
            .first()
            .ok_or_else(|| NetlinkError::Malformed("no message".into()))?;
        parse_rss_reply(first)
    }

    #[test]
    fn mlx5_like_reply_256_entries_40_byte_key() {
        let indir = round_robin(256, 16);
        let bytes = rss_reply("eth0", &indir, &key(40), None, None);
        let reply = parse(&bytes).unwrap();
        assert_eq!(reply.hfunc, Some(1));
        assert_eq!(reply.indir, indir);
        assert_eq!(reply.key, key(40));
        assert_eq!(reply.input_xfrm, None);
        assert_eq!(reply.flow_hash_tcp4, None);
    }

    #[test]
    fn ice_like_reply_512_entries_52_byte_key_sym_xor_and_flow_hash() {
        let indir = round_robin(512, 24);
        let bytes = rss_reply("ens1f0", &indir, &key(52), Some(1), Some((0xf0, 0x30)));
        let reply = parse(&bytes).unwrap();
        assert_eq!(reply.indir.len(), 512);
        assert_eq!(reply.key.len(), 52);
        assert_eq!(reply.input_xfrm, Some(1));
        assert_eq!(reply.flow_hash_tcp4, Some(0xf0));
        assert_eq!(reply.flow_hash_tcp6, Some(0x30));
    }

    #[test]
    fn virtio_like_reply_128_entries_40_byte_key() {
        let indir = round_robin(128, 4);
        let reply = parse(&rss_reply("eth0", &indir, &key(40), None, None)).unwrap();
        assert_eq!(reply.indir, indir);
        assert_eq!(reply.key.len(), 40);
    }

    #[test]
    fn flow_hash_may_be_u64() {
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend(attr(8 | 0x8000, &attr(4, &0xf0u64.to_ne_bytes())));
        let reply = parse(&message(FAMILY, 0, 1, &body)).unwrap();
        assert_eq!(reply.flow_hash_tcp4, Some(0xf0));
    }

    #[test]
    fn every_truncation_of_a_reply_is_handled_without_panic() {
        let bytes = rss_reply(
            "eth0",
            &round_robin(128, 4),
            &key(40),
            Some(2),
            Some((0xf0, 0xf0)),
        );
        for cut in 0..bytes.len() {
            // As received (the header's length now runs past the end) ...
            assert!(parse(&bytes[..cut]).is_err(), "cut at {cut} parsed");
            // ... and with the header agreeing, so the attributes see the cut.
            if cut >= 16 {
                let mut short = bytes[..cut].to_vec();
                short[..4].copy_from_slice(&(cut as u32).to_ne_bytes());
                let _ = parse(&short);
            }
        }
        // A cut inside the indirection table is an error, not a shorter table.
        let header_and_genl = 16 + 4;
        let header_nest = 4 + 8 + 12; // ifindex + "eth0\0" padded
        let cut = header_and_genl + header_nest + 8 + 4 + 100;
        let mut short = bytes[..cut].to_vec();
        short[..4].copy_from_slice(&(cut as u32).to_ne_bytes());
        assert!(matches!(parse(&short), Err(NetlinkError::Truncated { .. })));
    }

    #[test]
    fn garbage_attributes_are_errors() {
        // Attribute length below its header.
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend_from_slice(&2u16.to_ne_bytes());
        body.extend_from_slice(&4u16.to_ne_bytes());
        assert!(matches!(
            parse(&message(FAMILY, 0, 1, &body)),
            Err(NetlinkError::Malformed(_))
        ));
        // Attribute length past the end.
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend_from_slice(&400u16.to_ne_bytes());
        body.extend_from_slice(&4u16.to_ne_bytes());
        body.extend_from_slice(&[0; 8]);
        assert!(matches!(
            parse(&message(FAMILY, 0, 1, &body)),
            Err(NetlinkError::Truncated { .. })
        ));
        // An indirection table that is not whole u32s.
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend(attr(4, &[1, 0, 0, 0, 2, 0]));
        assert!(parse(&message(FAMILY, 0, 1, &body)).is_err());
        // A u32 attribute of the wrong size.
        let mut body = vec![ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0];
        body.extend(attr(3, &[1, 0]));
        assert!(parse(&message(FAMILY, 0, 1, &body)).is_err());
        // Wrong command.
        let body = vec![5, 1, 0, 0];
        assert!(parse(&message(FAMILY, 0, 1, &body)).is_err());
        // A message length below the header.
        let mut bytes = message(FAMILY, 0, 1, &[ETHTOOL_MSG_RSS_GET_REPLY, 1, 0, 0]);
        bytes[..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(parse_messages(&bytes).is_err());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut state = 0x1234_5678u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect();
            if let Ok(messages) = parse_messages(&bytes) {
                for m in &messages {
                    let _ = parse_rss_reply(m);
                    let _ = parse_family_reply(m);
                }
            }
            let _ = parse_attrs(&bytes);
        }
    }

    #[test]
    fn kernel_error_with_extended_ack_message() {
        // nlmsgerr: error, the (capped) request header, then NLMSGERR_ATTR_MSG.
        let mut body = (-libc::EOPNOTSUPP).to_ne_bytes().to_vec();
        body.extend(message(FAMILY, 1, 2, &[])); // the request's header only
        body.extend(attr(1, b"no RSS here\0"));
        let bytes = message(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 2, &body);
        match parse(&bytes) {
            Err(NetlinkError::Kernel { errno, message }) => {
                assert_eq!(errno, libc::EOPNOTSUPP);
                assert_eq!(message.as_deref(), Some("no RSS here"));
            }
            other => panic!("expected a kernel error, got {other:?}"),
        }
        // Without TLVs: just the errno.
        let mut body = (-libc::ENODEV).to_ne_bytes().to_vec();
        body.extend(message(FAMILY, 1, 2, &[]));
        let err = parse(&message(NLMSG_ERROR, NLM_F_CAPPED, 2, &body)).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENODEV));
    }

    #[test]
    fn family_reply_gives_the_id() {
        let mut body = vec![CTRL_CMD_NEWFAMILY, 2, 0, 0];
        body.extend(attr(2, b"ethtool\0"));
        body.extend(attr(1, &FAMILY.to_ne_bytes()));
        let bytes = message(GENL_ID_CTRL, 0, 1, &body);
        let messages = parse_messages(&bytes).unwrap();
        assert_eq!(parse_family_reply(&messages[0]).unwrap(), FAMILY);
    }

    #[test]
    fn requests_are_laid_out_as_the_kernel_expects() {
        let msg = rss_get_request(FAMILY, 9, "eth0");
        // nlmsghdr
        assert_eq!(
            u32::from_ne_bytes(msg[0..4].try_into().unwrap()) as usize,
            msg.len()
        );
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), FAMILY);
        assert_eq!(u16::from_ne_bytes([msg[6], msg[7]]), NLM_F_REQUEST);
        assert_eq!(u32::from_ne_bytes(msg[8..12].try_into().unwrap()), 9);
        // genlmsghdr
        assert_eq!(&msg[16..20], &[38, 1, 0, 0]);
        // header nest (type 1 | NLA_F_NESTED) holding DEV_NAME "eth0\0"
        assert_eq!(&msg[20..], &attr(1 | 0x8000, &attr(2, b"eth0\0"))[..]);

        let msg = family_request(1);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), GENL_ID_CTRL);
        assert_eq!(&msg[16..18], &[CTRL_CMD_GETFAMILY, 1]);
        assert_eq!(&msg[20..], &attr(2, b"ethtool\0")[..]);
    }
}
