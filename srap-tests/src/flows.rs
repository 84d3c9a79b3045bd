//! Both ends of test traffic: the receiver's listener that keeps what it
//! accepted, and a child process's output as a channel of lines.

use std::{
    io::{BufRead as _, BufReader, Read as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use srap_harness::Listener;

use crate::NetNs;

/// The receiver's listener for tests: the harness's [`Listener`], whose
/// failures panic with what went wrong.
pub struct Server(Listener);

impl Server {
    /// Listens on `addr` inside `ns`; every wait is bounded by `timeout`.
    pub fn bind(ns: &NetNs, addr: SocketAddr, timeout: Duration) -> Self {
        Self(Listener::bind(ns, addr, timeout).expect("listen in the receiver's namespace"))
    }

    /// Listens with MPTCP (`IPPROTO_MPTCP`) on `addr` inside `ns`: it
    /// accepts MPTCP connections, and plain TCP ones as TCP.
    pub fn bind_mptcp(ns: &NetNs, addr: SocketAddr, timeout: Duration) -> Self {
        let listener = ns
            .run(|| mptcp_listener(addr))
            .expect("enter the receiver's namespace")
            .unwrap_or_else(|err| panic!("an MPTCP listener on {addr}: {err}"));
        Self(Listener::adopt(listener, timeout).expect("a non-blocking listener"))
    }

    /// Closes the receiver's side of the accepted connections from
    /// `ports`: an MPTCP client whose peer never closes keeps its subflows
    /// until its close timeout (a minute), a TCP one does not.
    pub fn close(&mut self, ports: &[u16]) {
        for (stream, peer) in self.0.accepted() {
            if ports.contains(&peer.port()) {
                // Already closed by a reset: nothing left to close.
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Accepts `n` more connections; returns their source ports.
    pub fn accept(&mut self, n: usize) -> Vec<u16> {
        self.accept_peers(n).iter().map(SocketAddr::port).collect()
    }

    /// Accepts `n` more connections; returns their source addresses and ports.
    pub fn accept_peers(&mut self, n: usize) -> Vec<SocketAddr> {
        self.0.accept(n).expect("accept")
    }

    /// Waits until the peer of every accepted connection from `ports` has
    /// closed it, so the sender's close has reached the kernel.
    pub fn await_closed(&mut self, ports: &[u16]) {
        self.0.await_closed(ports).expect("the peers close");
    }
}

/// The lines of `out` (a child's stdout or stderr), read on a thread.
pub fn line_channel(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// One connection a [`Sink`] accepted.
#[derive(Debug, Clone, Copy)]
pub struct Accepted {
    pub peer: SocketAddr,
    /// The receiver address it was made to.
    pub local: SocketAddr,
    /// When, from the sink's start.
    pub at: Duration,
}

/// A receiver for many connections: accepts every one on a thread, in
/// order, and drops each once its peer closed it (the client closes first,
/// as a connection per object does), keeping one that stays open (a long
/// flow) until the sink finishes. Never blocks on one connection, so the
/// listener's backlog never fills. Bounded: it stops when told to.
pub struct Sink {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<Vec<Accepted>>>,
}

impl Sink {
    pub fn start(listener: TcpListener) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = thread::spawn(move || {
            listener
                .set_nonblocking(true)
                .expect("nonblocking listener");
            let (started, mut accepted, mut open) = (Instant::now(), Vec::new(), Vec::new());
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let mut busy = false;
                while let Ok((stream, peer)) = listener.accept() {
                    busy = true;
                    let local = stream.local_addr().expect("local address");
                    accepted.push(Accepted {
                        peer,
                        local,
                        at: started.elapsed(),
                    });
                    if stream.set_nonblocking(true).is_ok() {
                        open.push(stream);
                    }
                }
                open.retain_mut(|stream| !closed_by_peer(stream));
                if !busy {
                    thread::sleep(Duration::from_micros(200));
                }
            }
            accepted
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Accepts for `settle` more (connections still on their way), then
    /// stops and returns every connection accepted, in order.
    pub fn finish(mut self, settle: Duration) -> Vec<Accepted> {
        thread::sleep(settle);
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().expect("sink thread"))
            .unwrap_or_default()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads what a non-blocking connection has; true once its peer closed it
/// (or reset it).
fn closed_by_peer(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Connections a [`listen_deep`] listener queues before the kernel drops a
/// SYN (std's `TcpListener::bind` asks for 128, which a hot loop overruns
/// whenever the accepting thread is off its CPU for a few milliseconds, and
/// each dropped SYN then costs the client a one-second retransmission).
pub const DEEP_BACKLOG: i32 = 4096;

/// An MPTCP listener on `addr`, in the caller's namespace.
pub fn mptcp_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::MPTCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(128)?;
    Ok(socket.into())
}

/// A listener on `addr` (in the caller's namespace) with [`DEEP_BACKLOG`].
pub fn listen_deep(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(DEEP_BACKLOG)?;
    Ok(socket.into())
}
