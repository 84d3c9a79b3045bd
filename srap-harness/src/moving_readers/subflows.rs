//! An MPTCP socket's subflows as its own kernel counts them:
//! `getsockopt(SOL_MPTCP, MPTCP_SUBFLOW_ADDRS)` for each subflow's
//! addresses and `getsockopt(SOL_MPTCP, MPTCP_TCPINFO)` for its
//! `struct tcp_info`, of which `tcpi_bytes_received` is what came in by it
//! (`linux/mptcp.h`, Linux ≥ 5.16). Both answers are a `struct
//! mptcp_subflow_data` header and an array, one element per subflow, in the
//! order of the connection's subflow list; they are paired by index.

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpStream},
    os::fd::AsRawFd as _,
};

use anyhow::{Context as _, bail};

use super::SubflowBytes;

/// `SOL_MPTCP` (`linux/socket.h`).
const SOL_MPTCP: libc::c_int = 284;
/// `MPTCP_TCPINFO`: a `struct tcp_info` per subflow.
const MPTCP_TCPINFO: libc::c_int = 2;
/// `MPTCP_SUBFLOW_ADDRS`: a `struct mptcp_subflow_addrs` per subflow.
const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;
/// `struct mptcp_subflow_data`: four `__u32`s.
const HEADER: usize = 16;
/// `struct mptcp_subflow_addrs`: two `__kernel_sockaddr_storage` (128
/// bytes each), local then remote.
const ADDRS: usize = 256;
const SOCKADDR_STORAGE: usize = 128;
/// Our `struct tcp_info`, as the kernel should fill it.
const TCP_INFO: usize = std::mem::size_of::<libc::tcp_info>();
/// Where `tcpi_bytes_received` sits in `struct tcp_info` (128 in the uapi
/// header; the unit tests check libc agrees).
pub(super) const BYTES_RECEIVED: usize = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_received);
/// How many subflows the first ask makes room for; a connection with more
/// gets a second ask sized by the kernel's count.
const ROOM: usize = 8;

/// The connection's subflows with their bytes received. The addresses are
/// read first, then the counters; a subflow made or closed between the two
/// (their counts differ) gets one more try, then an error.
pub(crate) fn subflow_bytes(stream: &TcpStream) -> anyhow::Result<Vec<SubflowBytes>> {
    for _ in 0..2 {
        let addrs = subflow_data(stream, MPTCP_SUBFLOW_ADDRS, ADDRS, ADDRS)
            .context("getsockopt(SOL_MPTCP, MPTCP_SUBFLOW_ADDRS)")?;
        let infos = subflow_data(stream, MPTCP_TCPINFO, TCP_INFO, BYTES_RECEIVED + 8)
            .context("getsockopt(SOL_MPTCP, MPTCP_TCPINFO)")?;
        if addrs.len() != infos.len() {
            continue;
        }
        return addrs
            .iter()
            .zip(&infos)
            .map(|(addrs, info)| {
                Ok(SubflowBytes {
                    local: sockaddr(&addrs[..SOCKADDR_STORAGE]).context("a local address")?,
                    remote: sockaddr(&addrs[SOCKADDR_STORAGE..]).context("a remote address")?,
                    bytes_received: read_u64(info, BYTES_RECEIVED),
                })
            })
            .collect();
    }
    bail!("the subflows changed between MPTCP_SUBFLOW_ADDRS and MPTCP_TCPINFO, twice")
}

/// One `SOL_MPTCP` subflow array, each element as many bytes as the
/// kernel copied of it: it shortens `size_user` to its own element's size
/// and packs the array at that stride. `needed` is how much of an element
/// the caller reads: a kernel whose element is shorter fails here.
fn subflow_data(
    stream: &TcpStream,
    option: libc::c_int,
    size: usize,
    needed: usize,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut room = ROOM;
    for _ in 0..2 {
        let (buf, len) = ask(stream, option, size, room)?;
        let num = read_u32(&buf, 4) as usize;
        let stride = read_u32(&buf, 12) as usize;
        if num > room {
            room = num;
            continue;
        }
        if num == 0 {
            return Ok(Vec::new());
        }
        if stride < needed {
            bail!("the kernel's element is {stride} bytes, {needed} are needed");
        }
        let filled = len.saturating_sub(HEADER) / stride;
        if filled < num {
            bail!("the kernel counts {num} subflows but filled {filled}");
        }
        return Ok(buf[HEADER..len]
            .chunks_exact(stride)
            .take(num)
            .map(<[u8]>::to_vec)
            .collect());
    }
    bail!("the connection's subflows kept growing past the room made for them")
}

/// The raw answer to one ask with room for `room` elements, and the length
/// the kernel says it wrote.
fn ask(
    stream: &TcpStream,
    option: libc::c_int,
    size: usize,
    room: usize,
) -> anyhow::Result<(Vec<u8>, usize)> {
    let mut buf = vec![0u8; HEADER + size * room];
    buf[0..4].copy_from_slice(&(HEADER as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&u32::try_from(size)?.to_ne_bytes());
    let mut len = libc::socklen_t::try_from(buf.len())?;
    // SAFETY: the descriptor is the stream's own and open; `buf` is a live
    // buffer of `len` bytes, which the kernel writes at most `len` of, and
    // it sets `len` to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            SOL_MPTCP,
            option,
            buf.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok((buf, len as usize))
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[at..at + 4]);
    u32::from_ne_bytes(bytes)
}

fn read_u64(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_ne_bytes(bytes)
}

/// A `sockaddr_in` or `sockaddr_in6` in a `__kernel_sockaddr_storage`.
fn sockaddr(storage: &[u8]) -> anyhow::Result<SocketAddr> {
    let family = u16::from_ne_bytes([storage[0], storage[1]]);
    let port = u16::from_be_bytes([storage[2], storage[3]]);
    match libc::c_int::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = storage[4..8].try_into()?;
            Ok(SocketAddrV4::new(Ipv4Addr::from(ip), port).into())
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = storage[8..24].try_into()?;
            let scope = read_u32(storage, 24);
            Ok(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope).into())
        }
        other => bail!("address family {other}, neither AF_INET nor AF_INET6"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_puts_bytes_received_where_the_uapi_header_does() {
        assert_eq!(BYTES_RECEIVED, 128);
        const { assert!(TCP_INFO >= BYTES_RECEIVED + 8) };
    }

    #[test]
    fn socket_addresses_are_read_from_their_storage() {
        let mut v4 = [0u8; SOCKADDR_STORAGE];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&5201u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 1, 2, 3]);
        assert_eq!(sockaddr(&v4).unwrap(), "10.1.2.3:5201".parse().unwrap());
        let mut v6 = [0u8; SOCKADDR_STORAGE];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&443u16.to_be_bytes());
        v6[8..24].copy_from_slice(&"fd00::5".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(sockaddr(&v6).unwrap(), "[fd00::5]:443".parse().unwrap());
        assert!(sockaddr(&[0u8; SOCKADDR_STORAGE]).is_err());
    }
}
