//! Per-connection TCP counters from the kernel's sock_diag netlink interface
//! (`NETLINK_SOCK_DIAG`, `inet_diag` with `INET_DIAG_INFO`): what the socket
//! observer reads every interval instead of counting packets itself.
//!
//! A [`TcpDiag`] is a netlink socket bound to the network namespace it was
//! opened in, so a caller can open it inside a namespace and read it from
//! anywhere. Reading is one dump per address family; nothing is changed.
//!
//! TCP only, and named so: every request asks for
//! [`Protocol::Tcp`](srap_common::protocol::Protocol) sockets (the kernel's
//! `tcp_diag`), whose states, `tcp_info` and TIME_WAIT it reads. UDP's
//! sockets are another dump (`udp_diag`, no `tcp_info`, no states), so
//! another type beside this one.

use std::{
    collections::HashMap,
    fmt, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    process::ExitStatus,
    sync::Mutex,
    time::Duration,
};

use srap_host::netlink::{NetlinkError, Protocol, Socket, parse_attrs};
use thiserror::Error;

pub mod mptcp;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// The protocol every request asks for (`IPPROTO_TCP`: `tcp_diag`).
const TCP: u8 = srap_common::protocol::Protocol::Tcp.as_u8();
/// `struct inet_diag_msg`: family, state, timer, retrans, sockid (48), then
/// expires, rqueue, wqueue, uid, inode.
const DIAG_MSG_LEN: usize = 72;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, sockid (48).
const DIAG_REQ_LEN: usize = 56;
const INET_DIAG_INFO: u16 = 2;
/// `TCP_LISTEN`: listeners carry no flow, every other state may.
const TCP_LISTEN: u32 = 10;
/// Offsets in `struct tcp_info` (stable UAPI, appended to only).
const TCPI_LAST_DATA_RECV: usize = 52;
const TCPI_BYTES_ACKED: usize = 120;
const TCPI_BYTES_RECEIVED: usize = 128;
const TCPI_SEGS_IN: usize = 140;
/// No answer for this long: the dump failed.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The connections of a namespace by (remote, local) address.
pub type Connections = HashMap<(SocketAddr, SocketAddr), TcpCounters>;

/// What `tcp_info` says about one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Payload bytes received (`tcpi_bytes_received`).
    pub bytes_received: u64,
    /// Payload bytes sent and acknowledged (`tcpi_bytes_acked`): what the
    /// connection really carried out of this host.
    pub bytes_acked: u64,
    /// Segments received (`tcpi_segs_in`; GRO aggregates count per segment).
    pub segs_in: u64,
    /// Milliseconds since the last data arrived (`tcpi_last_data_recv`).
    pub last_data_recv_ms: u32,
}

/// Why there is no sock_diag socket that answers for TCP.
#[derive(Debug, Error)]
pub enum SockDiagError {
    #[error("cannot open sock_diag: {0}")]
    Open(#[source] NetlinkError),
    #[error(
        "this kernel has no sock_diag for TCP (inet_diag and tcp_diag: reading TCP sockets \
         through sock_diag says `{first}`; `modprobe tcp_diag` {modprobe})"
    )]
    NoTcpDiag {
        /// What the first dump said.
        #[source]
        first: NetlinkError,
        modprobe: Modprobe,
    },
}

/// What `modprobe tcp_diag` did when the first dump failed.
#[derive(Debug)]
pub enum Modprobe {
    /// It succeeded, and the dump still fails.
    LoadedStillFails,
    /// It ran and failed.
    Failed { status: ExitStatus, stderr: String },
    /// It could not be run.
    NotRun(io::Error),
}

impl fmt::Display for Modprobe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LoadedStillFails => f.write_str("loaded it, but it still fails"),
            Self::Failed { status, stderr } => write!(f, "failed: {status}: {stderr}"),
            Self::NotRun(err) => write!(f, "failed: {err}"),
        }
    }
}

/// A sock_diag netlink socket for TCP sockets, in the namespace it was
/// opened in. One dump at a time: the lock keeps two readers from taking
/// each other's answers.
#[derive(Debug)]
pub struct TcpDiag {
    socket: Mutex<Socket>,
}

impl TcpDiag {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> Result<Self, NetlinkError> {
        let socket = Socket::open(Protocol::SockDiag, READ_TIMEOUT)?;
        Ok(Self {
            socket: Mutex::new(socket),
        })
    }

    /// A sock_diag socket that answers for TCP. A kernel whose `inet_diag` and
    /// `tcp_diag` are modules loads them on first use only from a full system;
    /// when the first dump fails, `modprobe tcp_diag` is tried once. The error
    /// says exactly what is missing. The probe dumps the listeners only: the
    /// kernel then walks its listening table, not every connection (tens of
    /// thousands in TIME_WAIT on a host that opens many).
    pub fn loaded() -> Result<Self, SockDiagError> {
        let diag = Self::open().map_err(SockDiagError::Open)?;
        let first = match diag.tcp_listeners() {
            Ok(_) => return Ok(diag),
            Err(err) => err,
        };
        let modprobe = match std::process::Command::new("modprobe")
            .arg("tcp_diag")
            .output()
        {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(Modprobe::Failed {
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            }),
            Err(err) => Some(Modprobe::NotRun(err)),
        };
        if modprobe.is_none() && diag.tcp_listeners().is_ok() {
            tracing::info!("loaded tcp_diag (sock_diag for TCP)");
            return Ok(diag);
        }
        Err(SockDiagError::NoTcpDiag {
            first,
            modprobe: modprobe.unwrap_or(Modprobe::LoadedStillFails),
        })
    }

    /// Every non-listening TCP socket of the namespace, keyed by (remote,
    /// local) address: the remote end is the sender of what this host receives.
    pub fn tcp_connections(&self) -> Result<Connections, NetlinkError> {
        self.dump_tcp(request, parse_diag_msg)
    }

    /// Dumps the TCP sockets of both families that `request` asks for,
    /// keeping what `parse` reads of each message (a message it cannot
    /// read is skipped).
    fn dump_tcp<K: std::hash::Hash + Eq, V>(
        &self,
        request: fn(u8) -> Vec<u8>,
        parse: fn(&[u8]) -> Option<(K, V)>,
    ) -> Result<HashMap<K, V>, NetlinkError> {
        let mut socket = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = HashMap::new();
        for family in [libc::AF_INET, libc::AF_INET6] {
            socket.dump(SOCK_DIAG_BY_FAMILY, &request(family as u8), |msg| {
                if msg.kind == SOCK_DIAG_BY_FAMILY
                    && let Some((key, value)) = parse(msg.payload)
                {
                    out.insert(key, value);
                }
                Ok(())
            })?;
        }
        Ok(out)
    }
}

/// One TCP socket as the occupancy audit needs it: whether a socket
/// record may name it, and its addresses for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketSeen {
    /// A full socket an application still holds: not in TIME_WAIT (which
    /// keeps the cookie of the socket it was, closed), not orphaned (closed
    /// by the application, still finishing its FIN exchange: inode 0).
    pub open: bool,
    /// The kernel's `TCP_*` state.
    pub state: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// Every TCP socket of a namespace, by cookie.
pub type SocketsByCookie = HashMap<u64, SocketSeen>;

/// `TCP_NEW_SYN_RECV`: a listener's request socket, never a steered one.
const TCP_NEW_SYN_RECV: u32 = 12;
/// `TCP_TIME_WAIT`.
const TCP_TIME_WAIT: u8 = 6;
/// Offsets in `struct inet_diag_msg`: the cookie (two `u32`, low first)
/// at the end of the sockid, and the inode.
const DIAG_COOKIE: usize = 44;
const DIAG_INODE: usize = 68;

impl TcpDiag {
    /// Every TCP socket of the namespace but a listener's request sockets
    /// and those in TIME_WAIT, by cookie; on Linux 6.7+ also those bound
    /// and not connected (a connect that failed and is still held), which
    /// older kernels do not list. A TIME_WAIT socket is no application's
    /// any more, and a host that opens many connections holds tens of
    /// thousands of them: left out, the kernel skips them in its walk and
    /// nothing reads them.
    pub fn sockets_by_cookie(&self) -> Result<SocketsByCookie, NetlinkError> {
        self.dump_tcp(cookie_request, parse_socket)
    }
}

/// One listening TCP socket: where it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Listener {
    /// Its bound address (the wildcard: every address of its family, and
    /// `::` without `IPV6_V6ONLY` IPv4's too) and port; a v4-mapped IPv6
    /// address is given as the IPv4 one it stands for.
    pub addr: SocketAddr,
    /// `IPV6_V6ONLY` (`INET_DIAG_SKV6ONLY`; false for IPv4 sockets).
    pub v6only: bool,
    /// The interface it is bound to (`SO_BINDTODEVICE`), 0 for none.
    pub ifindex: u32,
}

/// `INET_DIAG_SKV6ONLY`: a `u8`, sent for every IPv6 listener.
const INET_DIAG_SKV6ONLY: u16 = 11;
/// Offset in `struct inet_diag_msg` of the sockid's interface.
const DIAG_IF: usize = 40;

impl TcpDiag {
    /// Every listening TCP socket of the namespace, both families, as the
    /// kernel lists them (several on one address and port, `SO_REUSEPORT`,
    /// are one).
    pub fn tcp_listeners(&self) -> Result<Vec<Listener>, NetlinkError> {
        let mut listeners: Vec<Listener> = self
            .dump_tcp(listen_request, parse_listener)?
            .into_keys()
            .collect();
        listeners.sort_unstable();
        Ok(listeners)
    }
}

/// `struct inet_diag_req_v2` for the TCP listeners of `family`.
fn listen_request(family: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(DIAG_REQ_LEN);
    body.extend_from_slice(&[family, TCP, 0, 0]);
    let states: u32 = 1u32 << TCP_LISTEN;
    body.extend_from_slice(&states.to_ne_bytes());
    body.resize(DIAG_REQ_LEN, 0);
    body
}

/// What a listener's `inet_diag_msg` says of where it accepts.
fn parse_listener(body: &[u8]) -> Option<(Listener, ())> {
    if u32::from(*body.get(1)?) != TCP_LISTEN {
        return None;
    }
    let (local, _) = addresses(body)?;
    let attrs = parse_attrs(body.get(DIAG_MSG_LEN..)?).ok()?;
    let v6only = attrs
        .iter()
        .find(|a| a.kind == INET_DIAG_SKV6ONLY)
        .and_then(|a| a.payload.first())
        .is_some_and(|b| *b != 0);
    let ip = match local.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let listener = Listener {
        addr: SocketAddr::new(ip, local.port()),
        v6only,
        ifindex: u32_at(body, DIAG_IF)?,
    };
    Some((listener, ()))
}

/// `struct inet_diag_req_v2` for every TCP socket of `family` but request
/// and TIME_WAIT sockets (bit 13, `TCP_BOUND_INACTIVE`, is ignored by
/// kernels before 6.7).
fn cookie_request(family: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(DIAG_REQ_LEN);
    body.extend_from_slice(&[family, TCP, 0, 0]);
    let states: u32 = !(1u32 << TCP_NEW_SYN_RECV | 1u32 << TCP_TIME_WAIT);
    body.extend_from_slice(&states.to_ne_bytes());
    body.resize(DIAG_REQ_LEN, 0);
    body
}

/// The cookie and what the audit needs of one `inet_diag_msg`.
fn parse_socket(body: &[u8]) -> Option<(u64, SocketSeen)> {
    let state = *body.get(1)?;
    let (local, remote) = addresses(body)?;
    let cookie =
        u64::from(u32_at(body, DIAG_COOKIE)?) | (u64::from(u32_at(body, DIAG_COOKIE + 4)?) << 32);
    let inode = u32_at(body, DIAG_INODE)?;
    let seen = SocketSeen {
        open: state != TCP_TIME_WAIT && inode != 0,
        state,
        local,
        remote,
    };
    Some((cookie, seen))
}

/// The (local, remote) addresses of an `inet_diag_msg`'s sockid.
fn addresses(body: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
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
    Some((
        SocketAddr::new(ip(src)?, sport),
        SocketAddr::new(ip(dst)?, dport),
    ))
}

/// `struct inet_diag_req_v2` for every non-listening TCP socket of
/// `family`, with `tcp_info`.
fn request(family: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(DIAG_REQ_LEN);
    body.push(family);
    body.push(TCP);
    body.push(1 << (INET_DIAG_INFO - 1)); // idiag_ext: ask for tcp_info
    body.push(0);
    let states: u32 = !(1u32 << TCP_LISTEN);
    body.extend_from_slice(&states.to_ne_bytes());
    body.resize(DIAG_REQ_LEN, 0); // inet_diag_sockid: all wildcards
    body
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

/// One `inet_diag_msg` and its `INET_DIAG_INFO` attribute.
fn parse_diag_msg(body: &[u8]) -> Option<((SocketAddr, SocketAddr), TcpCounters)> {
    let (local, remote) = addresses(body)?;
    let attrs = parse_attrs(body.get(DIAG_MSG_LEN..)?).ok()?;
    let info = attrs.iter().find(|a| a.kind == INET_DIAG_INFO)?.payload;
    let counters = TcpCounters {
        bytes_received: u64_at(info, TCPI_BYTES_RECEIVED).unwrap_or(0),
        bytes_acked: u64_at(info, TCPI_BYTES_ACKED).unwrap_or(0),
        segs_in: u64::from(u32_at(info, TCPI_SEGS_IN).unwrap_or(0)),
        last_data_recv_ms: u32_at(info, TCPI_LAST_DATA_RECV).unwrap_or(u32::MAX),
    };
    Some(((remote, local), counters))
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
        const NLMSG_HDRLEN: usize = 16;
        msg.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&body);
        msg
    }

    /// A datagram as a dump delivers it, through the shared netlink parser.
    fn connections(datagram: &[u8]) -> Result<(Connections, bool), NetlinkError> {
        let mut out = HashMap::new();
        let mut done = false;
        for msg in srap_host::netlink::parse_messages(datagram)? {
            if msg.kind == srap_host::netlink::NLMSG_DONE {
                srap_host::netlink::check_done(&msg)?;
                done = true;
            }
            if msg.kind == SOCK_DIAG_BY_FAMILY
                && let Some((key, counters)) = parse_diag_msg(msg.payload)
            {
                out.insert(key, counters);
            }
        }
        Ok((out, done))
    }

    #[test]
    fn parses_a_connection_and_the_end_of_the_dump() {
        const NLMSG_HDRLEN: usize = 16;
        let mut buf = message(123_456);
        let mut done = vec![0u8; NLMSG_HDRLEN + 4];
        done[0..4].copy_from_slice(&((NLMSG_HDRLEN + 4) as u32).to_ne_bytes());
        done[4..6].copy_from_slice(&srap_host::netlink::NLMSG_DONE.to_ne_bytes());
        buf.extend_from_slice(&done);
        let (out, ended) = connections(&buf).expect("parses");
        assert!(ended);
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
        assert!(connections(&buf[..buf.len() - 10]).is_err());
        // Even a cut inside the header is an error, not an empty read.
        assert!(connections(&buf[..5]).is_err());
    }

    /// The kernel's cookies: a connected socket is listed open by its
    /// cookie (the one `SO_COOKIE` gives), and once closed by its owner it
    /// is listed no longer open (orphaned or in TIME_WAIT: same cookie).
    #[test]
    fn the_kernel_lists_sockets_by_cookie() {
        use std::os::fd::AsFd as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let cookie = rustix::net::sockopt::socket_cookie(client.as_fd()).expect("SO_COOKIE");
        let diag = TcpDiag::open().expect("sock_diag socket");
        let seen = diag.sockets_by_cookie().expect("dump");
        let entry = seen.get(&cookie).expect("the client socket is listed");
        assert!(entry.open, "{entry:?}");
        assert_eq!(entry.local, client.local_addr().expect("addr"));
        drop(client);
        drop(server);
        let after = diag.sockets_by_cookie().expect("dump");
        assert!(
            after.get(&cookie).is_none_or(|e| !e.open),
            "{:?}",
            after.get(&cookie)
        );
    }

    /// A socket in TIME_WAIT (its application closed first, the peer's FIN
    /// came back) is left out of the audit's dump, though the kernel would
    /// list it under the same cookie.
    #[test]
    fn the_dump_by_cookie_leaves_time_wait_out() {
        use std::{io::Read as _, os::fd::AsFd as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        let cookie = rustix::net::sockopt::socket_cookie(client.as_fd()).expect("SO_COOKIE");
        let local = client.local_addr().expect("addr");
        drop(client);
        // The client's FIN read, the server closes: the client's end goes
        // to TIME_WAIT.
        assert_eq!(server.read(&mut [0u8; 8]).expect("EOF"), 0);
        drop(server);
        // The kernel's own listing: `/proc/net/tcp`, local address as
        // `0100007F:PORT` in hex, state `06`.
        let port = format!(":{:04X} ", local.port());
        let in_time_wait = || {
            std::fs::read_to_string("/proc/net/tcp")
                .expect("/proc/net/tcp")
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .any(|f| f.len() > 3 && format!("{} ", f[1]).ends_with(&port) && f[3] == "06")
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !in_time_wait() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(in_time_wait(), "the client's end is listed, in TIME_WAIT");
        let diag = TcpDiag::open().expect("sock_diag socket");
        let seen = diag.sockets_by_cookie().expect("dump");
        assert!(!seen.contains_key(&cookie), "{:?}", seen.get(&cookie));
    }

    /// The kernel itself: a dump of this namespace's TCP sockets finds a
    /// connection made here over loopback, with the bytes it carried.
    #[test]
    fn the_kernel_reports_a_loopback_connection() {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        client.write_all(&[7; 1000]).expect("send");
        let mut got = [0u8; 1000];
        server.read_exact(&mut got).expect("receive");
        let diag = TcpDiag::open().expect("sock_diag socket");
        let live = diag.tcp_connections().expect("dump");
        let key = (
            client.local_addr().expect("addr"),
            server.local_addr().expect("addr"),
        );
        let counters = live.get(&key).expect("the connection is in the dump");
        assert_eq!(counters.bytes_received, 1000);
        // Twice on one socket: the numbering keeps the dumps apart.
        assert!(
            diag.tcp_connections()
                .expect("dump again")
                .contains_key(&key)
        );
    }

    /// The kernel itself: a listener on loopback and one on `::` with
    /// `IPV6_V6ONLY` are listed as bound, and a closed one is gone.
    #[test]
    fn the_kernel_lists_listeners() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let v6 = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)
            .expect("socket");
        v6.set_only_v6(true).expect("v6only");
        v6.bind(&"[::]:0".parse::<SocketAddr>().expect("addr").into())
            .expect("bind");
        v6.listen(4).expect("listen");
        let v6_addr = v6.local_addr().expect("addr").as_socket().expect("inet");
        let diag = TcpDiag::open().expect("sock_diag socket");
        let listeners = diag.tcp_listeners().expect("dump");
        let mine = Listener {
            addr: v4.local_addr().expect("addr"),
            v6only: false,
            ifindex: 0,
        };
        assert!(listeners.contains(&mine), "{listeners:?}");
        let wildcard = Listener {
            addr: v6_addr,
            v6only: true,
            ifindex: 0,
        };
        assert!(listeners.contains(&wildcard), "{listeners:?}");
        drop(v4);
        assert!(
            !diag.tcp_listeners().expect("dump").contains(&mine),
            "a closed listener is still listed"
        );
    }
}
