//! The accept loop the control socket and `/metrics` share: a bounded
//! number of connections at once (more wait in the kernel's backlog, not in
//! our memory), each served under a deadline, so a slow or hostile client
//! can neither pile up tasks nor hold one forever. An accept error (out of
//! file descriptors, say) is logged and retried after a pause rather than
//! ending the server.

use std::{fmt, future::Future, io, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    sync::{Semaphore, watch},
    time::timeout,
};
use tracing::{debug, warn};

/// How long the loop waits after an accept error before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What a server accepts connections on.
pub trait Listener {
    /// One accepted connection.
    type Stream: Send + 'static;
    /// Who is on the other end, for the logs.
    type Peer: fmt::Display + Send + 'static;
    /// The next connection.
    fn next(&self) -> impl Future<Output = io::Result<(Self::Stream, Self::Peer)>> + Send;
}

/// A Unix socket's peer has no useful address: its logs say `client`.
#[derive(Debug, Clone, Copy)]
pub struct UnixClient;

impl fmt::Display for UnixClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("client")
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    type Peer = UnixClient;
    async fn next(&self) -> io::Result<(UnixStream, UnixClient)> {
        let (stream, _) = self.accept().await?;
        Ok((stream, UnixClient))
    }
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    type Peer = std::net::SocketAddr;
    async fn next(&self) -> io::Result<(TcpStream, std::net::SocketAddr)> {
        self.accept().await
    }
}

/// What bounds a server: its name in the logs, how many connections it
/// serves at once and how long each may take.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub name: &'static str,
    pub at_once: usize,
    pub deadline: Duration,
}

/// Accepts on `listener` and runs `exchange` on each connection (in its own
/// task, at most `bounds.at_once` of them at a time, each cut off at
/// `bounds.deadline`), until the task running this is dropped or aborted.
pub async fn serve<L, H, F>(listener: L, bounds: Bounds, exchange: H)
where
    L: Listener,
    H: Fn(L::Stream) -> F,
    F: Future<Output = io::Result<()>> + Send + 'static,
{
    let Bounds {
        name,
        at_once,
        deadline,
    } = bounds;
    let slots = Arc::new(Semaphore::new(at_once));
    loop {
        // A free slot first, then the accept: a connection past the bound
        // waits in the kernel's backlog. The semaphore is never closed:
        // this only waits.
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.next().await {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!("{name}: accepting: {err}");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let exchange = exchange(stream);
        tokio::spawn(async move {
            let _permit = permit;
            match timeout(deadline, exchange).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => debug!("{name}: {peer}: {err}"),
                Err(_) => debug!("{name}: {peer}: too slow, dropped"),
            }
        });
    }
}

/// [`serve`] for the agents' two servers: each connection is answered from
/// the latest of `status` (the control socket's JSON line, `/metrics`'
/// text), read when the connection is, not when it was accepted.
pub async fn serve_latest<L, T, H, F>(
    listener: L,
    bounds: Bounds,
    status: watch::Receiver<Arc<T>>,
    exchange: H,
) where
    L: Listener,
    H: Fn(L::Stream, watch::Receiver<Arc<T>>) -> F,
    F: Future<Output = io::Result<()>> + Send + 'static,
{
    serve(listener, bounds, |stream| exchange(stream, status.clone())).await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// Two connections at once at most: a third is accepted by the kernel
    /// but served only when a slot frees, and a client that never finishes
    /// is cut off at the deadline, freeing its slot.
    #[tokio::test]
    async fn at_most_at_once_are_served_and_a_slow_one_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let bounds = Bounds {
            name: "test",
            at_once: 2,
            deadline: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve(
            listener,
            bounds,
            |mut stream: TcpStream| async move {
                // Echo one byte, then wait for the client to close.
                let mut byte = [0u8; 1];
                stream.read_exact(&mut byte).await?;
                stream.write_all(&byte).await?;
                while stream.read(&mut byte).await? > 0 {}
                Ok(())
            },
        ));
        let mut hung = Vec::new();
        for _ in 0..2 {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            client.write_all(b"h").await.expect("send");
            hung.push(client);
        }
        let mut third = TcpStream::connect(addr).await.expect("connect");
        third.write_all(b"x").await.expect("send");
        let started = std::time::Instant::now();
        let mut byte = [0u8; 1];
        third
            .read_exact(&mut byte)
            .await
            .expect("served once a slot frees");
        assert_eq!(&byte, b"x");
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "served before the hung clients' deadline: {:?}",
            started.elapsed()
        );
        server.abort();
    }
}
