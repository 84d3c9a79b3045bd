//! The ground truth SRAP did not compute: the source addresses and ports
//! the receiver's server accepted, and where the receiver's NIC puts each
//! of those tuples by the RSS model.

use std::{
    io::Read as _,
    net::{SocketAddr, TcpListener, TcpStream},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use srap_common::rss::{FlowTuple, Landing, RssModel};

use crate::{netns::NetNs, support::poll_until};

/// A listener in the receiver's namespace that keeps every connection it
/// accepted (open) and the address each came from.
pub struct Listener {
    listener: TcpListener,
    accepted: Vec<(TcpStream, SocketAddr)>,
    /// Bound on every wait.
    timeout: Duration,
}

impl Listener {
    /// Listens on `addr` inside `ns`; waits are bounded by `timeout`.
    pub fn bind(ns: &NetNs, addr: SocketAddr, timeout: Duration) -> anyhow::Result<Self> {
        let listener = ns
            .run(|| TcpListener::bind(addr))?
            .with_context(|| format!("listening on {addr}"))?;
        Self::adopt(listener, timeout)
    }

    /// Accepts on `listener`, a listening stream socket made by the caller
    /// (in the namespace and of the protocol it chose: MPTCP, say); waits
    /// are bounded by `timeout`.
    pub fn adopt(listener: TcpListener, timeout: Duration) -> anyhow::Result<Self> {
        // Non-blocking, so every wait stays bounded.
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            accepted: Vec::new(),
            timeout,
        })
    }

    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// Accepts `n` more connections; returns the addresses they came from
    /// (the tuples as the receiver saw them).
    pub fn accept(&mut self, n: usize) -> anyhow::Result<Vec<SocketAddr>> {
        let mut peers = Vec::new();
        let (listener, accepted) = (&self.listener, &mut self.accepted);
        let all = poll_until(self.timeout, Duration::from_millis(5), || {
            while peers.len() < n {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        peers.push(peer);
                        accepted.push((stream, peer));
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                        return ControlFlow::Continue(());
                    }
                    Err(err) => return ControlFlow::Break(Err(err)),
                }
            }
            ControlFlow::Break(Ok(()))
        });
        match all {
            Ok(done) => done.context("accepting")?,
            Err(()) => bail!(
                "accepted {} of {n} connections within {:?}",
                peers.len(),
                self.timeout
            ),
        }
        Ok(peers)
    }

    /// The connections accepted so far, with their peers.
    pub fn accepted(&mut self) -> &mut [(TcpStream, SocketAddr)] {
        &mut self.accepted
    }

    /// Waits until the peer of every accepted connection from `ports` has
    /// closed it (EOF, after any data it sent), so the sender's close has
    /// reached the kernel.
    pub fn await_closed(&mut self, ports: &[u16]) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timeout;
        for (stream, peer) in &mut self.accepted {
            if !ports.contains(&peer.port()) {
                continue;
            }
            stream.set_nonblocking(false)?;
            let left = deadline.saturating_duration_since(Instant::now());
            stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            // Whatever the sender wrote first, then EOF (the read timeout
            // bounds the loop).
            let mut buf = [0u8; 256];
            while stream
                .read(&mut buf)
                .with_context(|| format!("reading {peer} until it closes"))?
                > 0
            {}
        }
        Ok(())
    }
}

/// Where each of `clients`' flows to `server` lands by `model`: the tuple
/// the receiver accepted, hashed as its NIC hashes it. A dual-stack
/// client's `::ffff:a.b.c.d` counts as the IPv4 address it is.
pub fn landings(
    model: &RssModel,
    clients: &[SocketAddr],
    server: SocketAddr,
) -> anyhow::Result<Vec<Landing>> {
    clients
        .iter()
        .map(|client| {
            let tuple = FlowTuple::new(
                client.ip().to_canonical(),
                client.port(),
                server.ip().to_canonical(),
                server.port(),
            )?;
            Ok(model.landing(&tuple))
        })
        .collect()
}
