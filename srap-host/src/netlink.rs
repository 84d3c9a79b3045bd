//! The netlink socket plumbing both of SRAP's netlink clients share: RSS
//! discovery (generic netlink, ethtool) and the receive verifier's socket
//! counters (sock_diag). Each builds and parses its own messages.

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    time::Duration,
};

/// A netlink socket of `protocol` (e.g. `NETLINK_GENERIC`) whose reads give
/// up after `timeout`, so a kernel that never answers costs a bounded wait.
pub fn open(kind: libc::c_int, protocol: libc::c_int, timeout: Duration) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, kind | libc::SOCK_CLOEXEC, protocol) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let timeout = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: 0,
    };
    // SAFETY: a valid socket and a timeval of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Sends one request datagram to the kernel.
pub fn send_to_kernel(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_nl is plain integers, for which all zeroes is valid.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: valid fd; the buffer and the address outlive the call.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&raw const kernel).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
