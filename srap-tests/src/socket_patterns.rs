//! The ways an application may come to `connect()` that the binder must
//! release exactly what it claimed for: its own address bound first with
//! `IP_BIND_ADDRESS_NO_PORT` (HAProxy's `source`, nginx's `proxy_bind`), a
//! failed connect retried on the same socket, sockets shared with a forked
//! child, an MPTCP socket (whose subflows are the kernel's own sockets).
//! Used by the test workload ([`crate::test_workload`]).

use std::{
    net::{IpAddr, SocketAddr, TcpStream},
    os::fd::AsRawFd as _,
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};

/// `IP_BIND_ADDRESS_NO_PORT` (linux/in.h): bind the address now, the port
/// at `connect()`.
const IP_BIND_ADDRESS_NO_PORT: libc::c_int = 24;

/// A connection from `src` (port 0, bound before connecting with
/// `IP_BIND_ADDRESS_NO_PORT`, as proxies bind their upstream address).
pub fn from_own_address(dst: SocketAddr, src: IpAddr, timeout: Duration) -> TcpStream {
    let socket = tcp_socket(dst);
    let on: libc::c_int = 1;
    // SAFETY: a valid int option of the size given, on an open socket.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            IP_BIND_ADDRESS_NO_PORT,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(
        set,
        0,
        "IP_BIND_ADDRESS_NO_PORT: {}",
        std::io::Error::last_os_error()
    );
    socket
        .bind(&SocketAddr::new(src, 0).into())
        .expect("bind the source address");
    socket
        .connect_timeout(&dst.into(), timeout)
        .expect("connect from the bound address");
    socket.into()
}

/// A connection whose socket first tried a port nobody listens on
/// (`dst`'s port + 1: refused, a blocking connect as a retrying client
/// makes it), then `dst`, on the same socket.
pub fn after_a_refused_connect(dst: SocketAddr, timeout: Duration) -> TcpStream {
    let socket = tcp_socket(dst);
    let closed = SocketAddr::new(dst.ip(), dst.port().wrapping_add(1));
    let refused = socket.connect(&closed.into());
    assert!(refused.is_err(), "{closed} accepted a connection");
    socket
        .connect_timeout(&dst.into(), timeout)
        .expect("connect again on the same socket");
    socket.into()
}

/// Hands every socket in `open` to a forked child that holds them for
/// `hold` and exits, and closes the parent's copies now: the kernel closes
/// each socket once, when the child's last reference goes.
pub fn share_with_a_child(open: &mut Vec<TcpStream>, hold: Duration) {
    // SAFETY: the child calls only async-signal-safe functions (sleep,
    // _exit) before it exits; the parent just goes on.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            let seconds = hold.as_secs().max(1) as libc::c_uint;
            // SAFETY: async-signal-safe calls in the forked child.
            unsafe {
                libc::sleep(seconds);
                libc::_exit(0);
            }
        }
        _child => open.clear(),
    }
}

/// An MPTCP connection (`IPPROTO_MPTCP`, as `mptcpize` makes a program's
/// TCP sockets): the kernel connects it through its first subflow, a TCP
/// socket of its own, and adds subflows as its path manager's endpoints
/// say; toward a server without MPTCP it falls back to plain TCP on that
/// first subflow.
pub fn mptcp(dst: SocketAddr, timeout: Duration) -> TcpStream {
    let socket = Socket::new(
        Domain::for_address(dst),
        Type::STREAM,
        Some(Protocol::MPTCP),
    )
    .expect("an MPTCP socket (net.mptcp.enabled=1)");
    socket
        .connect_timeout(&dst.into(), timeout)
        .expect("MPTCP connect");
    socket.into()
}

fn tcp_socket(dst: SocketAddr) -> Socket {
    Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP)).expect("socket")
}
