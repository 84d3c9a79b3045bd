//! Both ends of test traffic: the receiver's listener that keeps what it
//! accepted, and a child process's output as a channel of lines.

use std::{
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    sync::mpsc,
    thread,
    time::Duration,
};

use srap_lab::harness::Listener;

use crate::NetNs;

/// The receiver's listener for tests: the harness's [`Listener`], whose
/// failures panic with what went wrong.
pub struct Server(Listener);

impl Server {
    /// Listens on `addr` inside `ns`; every wait is bounded by `timeout`.
    pub fn bind(ns: &NetNs, addr: SocketAddr, timeout: Duration) -> Self {
        Self(Listener::bind(ns, addr, timeout).expect("listen in the receiver's namespace"))
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
