//! Ethtool over generic netlink, just enough of it to ask for a device's
//! RSS (`ETHTOOL_MSG_RSS_GET`): the request and the parsing of its reply.
//! The socket, the framing and the kernel's errors are [`crate::netlink`]'s.
//!
//! Encoding and parsing are pure functions over bytes, so every reply layout
//! (and every truncated or hostile one) is testable without a NIC. Layouts
//! follow the kernel's `ethtool_netlink_generated.h`.

pub use crate::netlink::NetlinkError;
use crate::netlink::{
    Attr, Message, NLA_F_NESTED, NLM_F_REQUEST, Protocol, REPLY_TIMEOUT, Socket, check_error,
    encode, genl_body, parse_attrs, parse_genl, put_attr, put_str_attr,
};
use srap_common::protocol::FlowType;

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
const ETHTOOL_A_FLOW_UDP4: u16 = 6;
const ETHTOOL_A_FLOW_UDP6: u16 = 7;

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
    /// `RXH_*` bits hashed per flow type SRAP knows (Linux ≥ 6.17 reports
    /// them here), in the reply's order.
    pub flow_hash: Vec<(FlowType, u64)>,
}

impl RssReply {
    /// The bits of `flow`, if the reply carried them.
    pub fn flow_hash_of(&self, flow: FlowType) -> Option<u64> {
        self.flow_hash
            .iter()
            .find(|(f, _)| *f == flow)
            .map(|(_, bits)| *bits)
    }
}

/// The body (genlmsghdr and attributes) of `ETHTOOL_MSG_RSS_GET` for the
/// default context of `ifname`.
fn rss_get_body(ifname: &str) -> Vec<u8> {
    let mut header = Vec::new();
    put_str_attr(&mut header, ETHTOOL_A_HEADER_DEV_NAME, ifname);
    let mut attrs = Vec::new();
    put_attr(&mut attrs, ETHTOOL_A_RSS_HEADER | NLA_F_NESTED, &header);
    genl_body(ETHTOOL_MSG_RSS_GET, ETHTOOL_GENL_VERSION, &attrs)
}

/// `ETHTOOL_MSG_RSS_GET` for the default context of `ifname`, as sent.
pub fn rss_get_request(family: u16, seq: u32, ifname: &str) -> Vec<u8> {
    encode(family, NLM_F_REQUEST, seq, &rss_get_body(ifname))
}

/// `NLA_UINT`: 4 or 8 bytes, whichever the value needed.
fn attr_uint(attr: &Attr<'_>, what: &'static str) -> Result<u64, NetlinkError> {
    match attr.payload.len() {
        4 => attr.u32(what).map(u64::from),
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

/// An `ETHTOOL_MSG_RSS_GET_REPLY` (or the kernel's error).
pub fn parse_rss_reply(msg: &Message<'_>) -> Result<RssReply, NetlinkError> {
    check_error(msg)?;
    let (cmd, attrs) = parse_genl(msg)?;
    if cmd != ETHTOOL_MSG_RSS_GET_REPLY {
        return Err(NetlinkError::Malformed(format!(
            "expected an RSS_GET reply (command {ETHTOOL_MSG_RSS_GET_REPLY}), got command {cmd}"
        )));
    }
    let mut reply = RssReply::default();
    for attr in &attrs {
        match attr.kind {
            ETHTOOL_A_RSS_HFUNC => reply.hfunc = Some(attr.u32("hfunc")?),
            ETHTOOL_A_RSS_INPUT_XFRM => reply.input_xfrm = Some(attr.u32("input_xfrm")?),
            ETHTOOL_A_RSS_HKEY => reply.key = attr.payload.to_vec(),
            ETHTOOL_A_RSS_INDIR => reply.indir = indirection_table(attr)?,
            ETHTOOL_A_RSS_FLOW_HASH => flow_hashes(attr, &mut reply)?,
            // Header, context and attributes of newer kernels.
            _ => {}
        }
    }
    Ok(reply)
}

/// `ETHTOOL_A_RSS_INDIR`: whole u32 entries, or an error.
fn indirection_table(attr: &Attr<'_>) -> Result<Vec<u32>, NetlinkError> {
    if !attr.payload.len().is_multiple_of(4) {
        return Err(NetlinkError::Malformed(format!(
            "the indirection table has {} bytes, not a whole number of u32 entries",
            attr.payload.len()
        )));
    }
    Ok(attr
        .payload
        .chunks_exact(4)
        .map(|e| u32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
        .collect())
}

/// `ETHTOOL_A_RSS_FLOW_HASH`: the hashed fields of the flow types SRAP
/// knows (TCP and UDP over IPv4 and IPv6; the others are skipped).
fn flow_hashes(attr: &Attr<'_>, reply: &mut RssReply) -> Result<(), NetlinkError> {
    for nested in parse_attrs(attr.payload)? {
        let flow = match nested.kind {
            ETHTOOL_A_FLOW_TCP4 => FlowType::TCP4,
            ETHTOOL_A_FLOW_TCP6 => FlowType::TCP6,
            ETHTOOL_A_FLOW_UDP4 => FlowType::UDP4,
            ETHTOOL_A_FLOW_UDP6 => FlowType::UDP6,
            _ => continue,
        };
        let bits = attr_uint(&nested, "a flow type's hashed fields")?;
        reply.flow_hash.push((flow, bits));
    }
    Ok(())
}

/// Asks the kernel (in the caller's network namespace) for `ifname`'s RSS.
pub fn rss_get(ifname: &str) -> Result<RssReply, NetlinkError> {
    let mut socket = Socket::open(Protocol::Generic, REPLY_TIMEOUT)?;
    let family = socket.genl_family(ETHTOOL_GENL_NAME, "CONFIG_ETHTOOL_NETLINK")?;
    socket.request(family, &rss_get_body(ifname), parse_rss_reply)
}

#[cfg(test)]
pub(crate) mod tests {
    //! Replies are built here byte by byte from the kernel's layouts, not with
    //! the encoder above, so the two cannot share a mistake.

    use super::*;
    use crate::netlink::{
        NLM_F_ACK_TLVS, NLM_F_CAPPED, NLMSG_ERROR, parse_family_reply, parse_messages,
        tests::{attr, message},
    };

    const FAMILY: u16 = 0x15;

    fn u32_attr(kind: u16, value: u32) -> Vec<u8> {
        attr(kind, &value.to_ne_bytes())
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
            nest.extend(u32_attr(6, 0x30)); // udp4
            nest.extend(u32_attr(2, 0x30)); // ip4: not a flow type SRAP reads
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
        assert_eq!(reply.flow_hash, []);
    }

    #[test]
    fn ice_like_reply_512_entries_52_byte_key_sym_xor_and_flow_hash() {
        let indir = round_robin(512, 24);
        let bytes = rss_reply("ens1f0", &indir, &key(52), Some(1), Some((0xf0, 0x30)));
        let reply = parse(&bytes).unwrap();
        assert_eq!(reply.indir.len(), 512);
        assert_eq!(reply.key.len(), 52);
        assert_eq!(reply.input_xfrm, Some(1));
        assert_eq!(
            reply.flow_hash,
            [
                (FlowType::TCP4, 0xf0),
                (FlowType::TCP6, 0x30),
                (FlowType::UDP4, 0x30)
            ]
        );
        assert_eq!(reply.flow_hash_of(FlowType::UDP6), None);
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
        assert_eq!(reply.flow_hash_of(FlowType::TCP4), Some(0xf0));
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
    }
}
