//! Per-connection TCP counters from the kernel's sock_diag netlink interface
//! (`NETLINK_SOCK_DIAG`, `inet_diag` with `INET_DIAG_INFO`): what the socket
//! verifier reads every interval instead of counting packets itself.
//!
//! A [`SockDiag`] is a netlink socket bound to the network namespace it was
//! opened in, so a caller can open it inside a namespace and read it from
//! anywhere. Reading is one dump per address family; nothing is changed.

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::{AsRawFd as _, OwnedFd},
    time::Duration,
};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
/// `struct inet_diag_msg`: family, state, timer, retrans, sockid (48), then
/// expires, rqueue, wqueue, uid, inode.
const DIAG_MSG_LEN: usize = 72;
const INET_DIAG_INFO: u16 = 2;
/// `TCP_LISTEN`: listeners carry no flow, every other state may.
const TCP_LISTEN: u32 = 10;
/// Offsets in `struct tcp_info` (stable UAPI, appended to only).
const TCPI_LAST_DATA_RECV: usize = 52;
const TCPI_BYTES_RECEIVED: usize = 128;
const TCPI_SEGS_IN: usize = 140;
/// A dump is answered in a few messages per hundred sockets; this bounds the
/// reads of one dump even if the kernel kept answering.
const MAX_READS: usize = 100_000;
/// No answer for this long: the dump failed.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What `tcp_info` says about one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Payload bytes received (`tcpi_bytes_received`).
    pub bytes_received: u64,
    /// Segments received (`tcpi_segs_in`; GRO aggregates count per segment).
    pub segs_in: u64,
    /// Milliseconds since the last data arrived (`tcpi_last_data_recv`).
    pub last_data_recv_ms: u32,
}

/// A sock_diag netlink socket in the namespace it was opened in.
#[derive(Debug)]
pub struct SockDiag {
    fd: OwnedFd,
}

impl SockDiag {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Self> {
        let fd = srap_host::netlink::open(libc::SOCK_DGRAM, libc::NETLINK_SOCK_DIAG, READ_TIMEOUT)?;
        Ok(Self { fd })
    }

    /// Every non-listening TCP socket of the namespace, keyed by (remote,
    /// local) address: the remote end is the sender of what this host receives.
    pub fn tcp_connections(&self) -> io::Result<HashMap<(SocketAddr, SocketAddr), TcpCounters>> {
        let mut out = HashMap::new();
        for family in [libc::AF_INET, libc::AF_INET6] {
            self.dump(family as u8, &mut out)?;
        }
        Ok(out)
    }

    fn dump(
        &self,
        family: u8,
        out: &mut HashMap<(SocketAddr, SocketAddr), TcpCounters>,
    ) -> io::Result<()> {
        self.send_request(family)?;
        let mut buf = vec![0u8; 64 * 1024];
        for _ in 0..MAX_READS {
            // SAFETY: recv into a buffer we own, of the length given.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if parse_messages(&buf[..n], out)? {
                return Ok(());
            }
        }
        Err(io::Error::other("sock_diag dump did not end"))
    }

    fn send_request(&self, family: u8) -> io::Result<()> {
        let mut msg = Vec::with_capacity(NLMSG_HDRLEN + 72);
        let len = (NLMSG_HDRLEN + 72) as u32;
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        // struct inet_diag_req_v2
        msg.push(family);
        msg.push(libc::IPPROTO_TCP as u8);
        msg.push(1 << (INET_DIAG_INFO - 1)); // idiag_ext: ask for tcp_info
        msg.push(0);
        let states: u32 = !(1u32 << TCP_LISTEN);
        msg.extend_from_slice(&states.to_ne_bytes());
        msg.resize(NLMSG_HDRLEN + 72, 0); // inet_diag_sockid: all wildcards
        srap_host::netlink::send_to_kernel(&self.fd, &msg)
    }
}

fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(buf.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

/// Parses one datagram of netlink messages into `out`; `true` at the end of
/// the dump.
fn parse_messages(
    mut buf: &[u8],
    out: &mut HashMap<(SocketAddr, SocketAddr), TcpCounters>,
) -> io::Result<bool> {
    while buf.len() >= NLMSG_HDRLEN {
        let truncated = || io::Error::other("truncated sock_diag message");
        let len = u32_at(buf, 0).ok_or_else(truncated)? as usize;
        let kind = u16_at(buf, 4).ok_or_else(truncated)?;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(truncated());
        }
        let body = &buf[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).map_or(0, |e| e as i32);
                if errno != 0 {
                    return Err(io::Error::from_raw_os_error(-errno));
                }
            }
            SOCK_DIAG_BY_FAMILY => {
                if let Some((key, counters)) = parse_diag_msg(body) {
                    out.insert(key, counters);
                }
            }
            _ => {}
        }
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(false)
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One `inet_diag_msg` and its `INET_DIAG_INFO` attribute.
fn parse_diag_msg(body: &[u8]) -> Option<((SocketAddr, SocketAddr), TcpCounters)> {
    let family = *body.first()?;
    // sockid at 4: sport, dport (network order), src[16], dst[16].
    let sport = u16::from_be_bytes(body.get(4..6)?.try_into().ok()?);
    let dport = u16::from_be_bytes(body.get(6..8)?.try_into().ok()?);
    let src: [u8; 16] = body.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = body.get(24..40)?.try_into().ok()?;
    let ip = |bytes: [u8; 16]| -> Option<IpAddr> {
        match i32::from(family) {
            libc::AF_INET => Some(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into()),
            libc::AF_INET6 => Some(Ipv6Addr::from(bytes).into()),
            _ => None,
        }
    };
    let local = SocketAddr::new(ip(src)?, sport);
    let remote = SocketAddr::new(ip(dst)?, dport);
    let mut attrs = body.get(DIAG_MSG_LEN..)?;
    while attrs.len() >= 4 {
        let len = usize::from(u16_at(attrs, 0)?);
        let kind = u16_at(attrs, 2)?;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if kind == INET_DIAG_INFO {
            let info = &attrs[4..len];
            let counters = TcpCounters {
                bytes_received: u64_at(info, TCPI_BYTES_RECEIVED).unwrap_or(0),
                segs_in: u64::from(u32_at(info, TCPI_SEGS_IN).unwrap_or(0)),
                last_data_recv_ms: u32_at(info, TCPI_LAST_DATA_RECV).unwrap_or(u32::MAX),
            };
            return Some(((remote, local), counters));
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One SOCK_DIAG_BY_FAMILY message as the kernel lays it out.
    fn message(bytes_received: u64) -> Vec<u8> {
        let mut body = vec![0u8; DIAG_MSG_LEN];
        body[0] = libc::AF_INET as u8;
        body[4..6].copy_from_slice(&5201u16.to_be_bytes());
        body[6..8].copy_from_slice(&40000u16.to_be_bytes());
        body[8..12].copy_from_slice(&[10, 199, 62, 2]);
        body[24..28].copy_from_slice(&[10, 199, 62, 1]);
        let mut info = vec![0u8; 232];
        info[TCPI_BYTES_RECEIVED..TCPI_BYTES_RECEIVED + 8]
            .copy_from_slice(&bytes_received.to_ne_bytes());
        info[TCPI_SEGS_IN..TCPI_SEGS_IN + 4].copy_from_slice(&7u32.to_ne_bytes());
        info[TCPI_LAST_DATA_RECV..TCPI_LAST_DATA_RECV + 4].copy_from_slice(&3u32.to_ne_bytes());
        body.extend_from_slice(&((info.len() + 4) as u16).to_ne_bytes());
        body.extend_from_slice(&INET_DIAG_INFO.to_ne_bytes());
        body.extend_from_slice(&info);
        let mut msg = Vec::new();
        msg.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn parses_a_connection_and_the_end_of_the_dump() {
        let mut buf = message(123_456);
        let mut done = vec![0u8; NLMSG_HDRLEN + 4];
        done[0..4].copy_from_slice(&((NLMSG_HDRLEN + 4) as u32).to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        buf.extend_from_slice(&done);
        let mut out = HashMap::new();
        assert!(parse_messages(&buf, &mut out).expect("parses"));
        let remote: SocketAddr = "10.199.62.1:40000".parse().expect("addr");
        let local: SocketAddr = "10.199.62.2:5201".parse().expect("addr");
        let counters = out.get(&(remote, local)).expect("the connection");
        assert_eq!(counters.bytes_received, 123_456);
        assert_eq!(counters.segs_in, 7);
        assert_eq!(counters.last_data_recv_ms, 3);
    }

    #[test]
    fn a_truncated_message_is_an_error_not_a_panic() {
        let buf = message(1);
        let mut out = HashMap::new();
        assert!(parse_messages(&buf[..buf.len() - 10], &mut out).is_err());
        assert!(parse_messages(&buf[..5], &mut out).is_ok_and(|done| !done));
    }
}
