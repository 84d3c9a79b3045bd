//! Both ends of test traffic: the receiver's listener that keeps what it
//! accepted, and a child process's output as a channel of lines.

use std::{
    io::{BufRead as _, BufReader, Read as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

/// The receiver's listener and the connections it accepted (kept open).
pub struct Server {
    pub listener: TcpListener,
    pub accepted: Vec<TcpStream>,
    /// Upper bound on every wait.
    pub timeout: Duration,
}

impl Server {
    /// Wraps `listener` (made non-blocking, so waits stay bounded).
    pub fn new(listener: TcpListener, timeout: Duration) -> Self {
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        Self {
            listener,
            accepted: Vec::new(),
            timeout,
        }
    }

    /// Accepts `n` more connections; returns their source ports.
    pub fn accept(&mut self, n: usize) -> Vec<u16> {
        self.accept_peers(n).iter().map(SocketAddr::port).collect()
    }

    /// Accepts `n` more connections; returns their source addresses and ports.
    pub fn accept_peers(&mut self, n: usize) -> Vec<SocketAddr> {
        let deadline = Instant::now() + self.timeout;
        let mut ports = Vec::new();
        while ports.len() < n {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    ports.push(peer);
                    self.accepted.push(stream);
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "accepted {} of {n} connections",
                        ports.len()
                    );
                    thread::sleep(Duration::from_millis(5));
                }
                Err(err) => panic!("accept: {err}"),
            }
        }
        ports
    }

    /// Waits until the peer of every accepted connection from `ports` has
    /// closed it (EOF, after any data it sent), so the sender's close has
    /// reached the kernel.
    pub fn await_closed(&mut self, ports: &[u16]) {
        let deadline = Instant::now() + self.timeout;
        for stream in &mut self.accepted {
            let port = stream.peer_addr().map(|a| a.port()).unwrap_or(0);
            if !ports.contains(&port) {
                continue;
            }
            stream.set_nonblocking(false).expect("blocking stream");
            stream
                .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))
                .expect("timeout");
            // Whatever the sender wrote first, then EOF (the read timeout
            // bounds the loop).
            let mut buf = [0u8; 256];
            while stream.read(&mut buf).expect("read until EOF") > 0 {}
        }
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
