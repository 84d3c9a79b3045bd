//! The other end of the moving readers, in a namespace of the test's: an
//! MPTCP source that accepts the readers' connections ([`MptcpSource::listen`])
//! or makes them to readers that listen ([`MptcpSource::connect`]), and
//! writes to each for a while, paced, then closes it. The same threads
//! carry the closed-loop request client ([`MptcpSource::requests`],
//! `super::requests`), an `MptcpSource<RequestFlow>`.

use std::{
    net::{SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    netns::NetNs,
    readers::{SinkFlow, paced_write_for},
    sockets::{finish_within, mptcp_listener, mptcp_socket, serve_each},
};

/// How long [`MptcpSource::connect`] keeps trying each connection while the
/// readers' listener comes up.
const CONNECT_RETRIES_FOR: Duration = Duration::from_secs(30);
/// One attempt's timeout, and the pause between attempts.
const ATTEMPT: Duration = Duration::from_secs(2);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// An MPTCP data source in a namespace, serving its flows on threads of its
/// own; dropping it stops and joins them. `T` is what each flow's thread
/// returns: a [`SourceFlow`], or for the request client a
/// [`RequestFlow`](super::RequestFlow).
pub struct MptcpSource<T = SourceFlow> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<Vec<T>>>>,
}

/// One connection as the source served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFlow {
    /// The source's own address of it, and the reader's.
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// Bytes written (what `write` took, all of which the close delivers).
    pub bytes: u64,
    /// What ended its writing early, if anything did.
    pub error: Option<String>,
}

impl MptcpSource<SourceFlow> {
    /// Listens with MPTCP on `addr` inside `ns` (the socket stays the
    /// namespace's), accepts `connections` within a minute and writes to
    /// each for `seconds` from its accept, paced to `pace` bytes a second if
    /// given, then closes it. The pacing is the source's own: MPTCP sockets
    /// refuse `SO_MAX_PACING_RATE` (`EOPNOTSUPP` on 6.18), and the
    /// subflows' TCP sockets are not the application's to set.
    pub fn listen(
        ns: &NetNs,
        addr: SocketAddr,
        connections: usize,
        seconds: u64,
        pace: Option<u64>,
    ) -> anyhow::Result<Self> {
        let listener = ns
            .run(|| mptcp_listener(addr))?
            .with_context(|| format!("the MPTCP source's listener on {addr} in {}", ns.name()))?;
        Ok(Self::spawn(move |stop| {
            serve_each(
                &listener,
                connections,
                stop,
                "the MPTCP source",
                |stream, peer| serve(stream, peer, seconds, pace, stop),
            )
        }))
    }

    /// Opens `connections` MPTCP connections from inside `ns` to `target`,
    /// one at a time (each retried for up to 30 s while the listener comes
    /// up), and writes to each for `seconds` from its connect, paced as
    /// [`MptcpSource::listen`], then closes it.
    pub fn connect(
        ns: &NetNs,
        target: SocketAddr,
        connections: usize,
        seconds: u64,
        pace: Option<u64>,
    ) -> anyhow::Result<Self> {
        Self::connecting(ns, target, connections, move |stream, stop| {
            serve(stream, target, seconds, pace, stop)
        })
    }
}

impl<T: Send + 'static> MptcpSource<T> {
    /// Opens `connections` MPTCP connections from inside `ns` to `target`,
    /// one at a time, each retried while the listener comes up, and hands
    /// each to `serve` on a thread of its own.
    pub(super) fn connecting(
        ns: &NetNs,
        target: SocketAddr,
        connections: usize,
        serve: impl Fn(TcpStream, &AtomicBool) -> T + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        // Fail here, not on the thread, when the namespace has no MPTCP.
        ns.run(|| mptcp_socket(target).map(drop))??;
        let ns = ns.clone();
        Ok(Self::spawn(move |stop| {
            let _inside = ns.enter()?;
            connect_each(target, connections, stop, &serve)
        }))
    }

    fn spawn(serve: impl FnOnce(&AtomicBool) -> anyhow::Result<Vec<T>> + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || serve(&stopping));
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Waits (up to `within`) until every connection was made and served;
    /// each one's record, in accept (or connect) order.
    pub fn finish(mut self, within: Duration) -> anyhow::Result<Vec<T>> {
        let thread = self
            .thread
            .take()
            .context("the MPTCP source already ended")?;
        finish_within(thread, &self.stop, within, "the MPTCP source")
    }
}

impl<T> Drop for MptcpSource<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Connects `connections` times, in order, and serves each connection on
/// a thread of its own; a connection that cannot be made ends it.
fn connect_each<T: Send>(
    target: SocketAddr,
    connections: usize,
    stop: &AtomicBool,
    serve: &(impl Fn(TcpStream, &AtomicBool) -> T + Sync),
) -> anyhow::Result<Vec<T>> {
    std::thread::scope(|scope| {
        let mut served = Vec::new();
        for index in 0..connections {
            let stream = connect_retrying(target, stop)
                .with_context(|| format!("the MPTCP source's connection {index} to {target}"))?;
            served.push(scope.spawn(move || serve(stream, stop)));
        }
        served
            .into_iter()
            .map(|flow| {
                flow.join()
                    .map_err(|_| anyhow::anyhow!("a source flow panicked"))
            })
            .collect()
    })
}

/// One MPTCP connection to `target`, tried until it is made, for at most
/// [`CONNECT_RETRIES_FOR`] (or until `stop`).
fn connect_retrying(target: SocketAddr, stop: &AtomicBool) -> anyhow::Result<TcpStream> {
    let until = Instant::now() + CONNECT_RETRIES_FOR;
    let attempts = CONNECT_RETRIES_FOR.as_millis() / RETRY_PAUSE.as_millis();
    let mut last = None;
    for _ in 0..attempts {
        if stop.load(Ordering::Relaxed) || Instant::now() >= until {
            break;
        }
        let socket = mptcp_socket(target)?;
        match socket.connect_timeout(&target.into(), ATTEMPT) {
            Ok(()) => return Ok(socket.into()),
            Err(err) => last = Some(err),
        }
        std::thread::sleep(RETRY_PAUSE);
    }
    match last {
        Some(err) => Err(err).context(format!("not connected within {CONNECT_RETRIES_FOR:?}")),
        None => bail!("stopped before connecting"),
    }
}

/// Writes to one connection for `seconds`, paced to `pace`, then closes
/// it; its record, with the error that ended it early if one did.
fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    seconds: u64,
    pace: Option<u64>,
    stop: &AtomicBool,
) -> SourceFlow {
    let local = stream
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut flow = SinkFlow::new(peer);
    let outcome = paced_write_for(stream, seconds, pace, stop, &mut flow);
    SourceFlow {
        local,
        peer,
        bytes: flow.bytes,
        error: outcome.err().map(|err| format!("{err:#}")),
    }
}
