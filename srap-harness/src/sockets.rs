//! Socket and thread helpers shared by the reading threads ([`readers`],
//! [`moving_readers`]) and the data sources at their other end: pinning,
//! the socket options `std` has no call for, MPTCP sockets, and the one
//! bounded accept loop every source serves its flows from.
//!
//! [`readers`]: crate::readers
//! [`moving_readers`]: crate::moving_readers

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    sync::atomic::{AtomicBool, Ordering},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};

/// How long a source waits for all its connections: a client that has
/// not connected in a minute is not coming.
pub(crate) const ACCEPT_WAIT: Duration = Duration::from_secs(60);

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_to(cpu: u32) -> anyhow::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    let index = usize::try_from(cpu).context("CPU number")?;
    if index >= rustix::thread::CpuSet::MAX_CPU {
        bail!("CPU {cpu} is past the largest CPU set");
    }
    set.set(index);
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(std::io::Error::from)
        .with_context(|| format!("pinning to CPU {cpu} (sched_setaffinity)"))
}

/// The CPU the calling thread runs on now (`sched_getcpu`).
pub(crate) fn current_cpu() -> u32 {
    u32::try_from(rustix::thread::sched_getcpu()).unwrap_or(u32::MAX)
}

/// `getsockopt(SOL_SOCKET, option)` of an `int` option.
pub(crate) fn socket_option(stream: &TcpStream, option: libc::c_int) -> std::io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is the stream's own and open; `value` and `len`
    // are live locals of the size `len` says, which the kernel writes at
    // most `len` bytes of.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

/// `setsockopt(SOL_SOCKET, option)` of a 64-bit option.
pub(crate) fn set_socket_option_u64(
    stream: &TcpStream,
    option: libc::c_int,
    value: u64,
) -> anyhow::Result<()> {
    // SAFETY: the descriptor is the stream's own and open; the kernel reads
    // `size_of::<u64>()` bytes from `value`, a live local of that size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// A timed-out or interrupted read or write: the loop looks at the clock
/// and the stop flag, then tries again.
pub(crate) fn transient(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// An MPTCP stream socket (`IPPROTO_MPTCP`) of `addr`'s family, in the
/// calling thread's namespace. A kernel without MPTCP, or a namespace with
/// it switched off, gets an error that says which, and the sysctl to set:
/// a plain TCP socket instead would measure something else silently.
pub(crate) fn mptcp_socket(addr: SocketAddr) -> anyhow::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::MPTCP),
    )
    .map_err(|err| match err.raw_os_error() {
        Some(libc::EPROTONOSUPPORT | libc::ENOPROTOOPT | libc::EINVAL) => anyhow!(
            "cannot make an MPTCP socket ({err}): this kernel lacks MPTCP or its network \
             namespace has net.mptcp.enabled=0 (`sysctl -w net.mptcp.enabled=1`)"
        ),
        _ => anyhow::Error::new(err).context("making an MPTCP socket"),
    })
}

/// An MPTCP listener on `addr`, in the calling thread's namespace,
/// non-blocking for [`accept_within`].
pub(crate) fn mptcp_listener(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = mptcp_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding an MPTCP listener to {addr}"))?;
    socket.listen(128)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Accepts one connection from the non-blocking `listener` (the stream
/// made blocking), polling until `until`: `None` when none came by then.
pub(crate) fn accept_within(
    listener: &TcpListener,
    until: Instant,
    stop: &AtomicBool,
) -> anyhow::Result<Option<(TcpStream, SocketAddr)>> {
    loop {
        if stop.load(Ordering::Relaxed) {
            bail!("stopped");
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(false)?;
                return Ok(Some((stream, peer)));
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(err) => return Err(err).context("accepting"),
        }
    }
}

/// Accepts `flows` connections (for at most [`ACCEPT_WAIT`]) and serves
/// each with `serve` on a thread of its own until all are done; what each
/// served, in accept order. `what` names the source in its errors.
pub(crate) fn serve_each<T: Send>(
    listener: &TcpListener,
    flows: usize,
    stop: &AtomicBool,
    what: &str,
    serve: impl Fn(TcpStream, SocketAddr) -> T + Sync,
) -> anyhow::Result<Vec<T>> {
    let until = Instant::now() + ACCEPT_WAIT;
    std::thread::scope(|scope| {
        let mut served = Vec::new();
        while served.len() < flows {
            let Some((stream, peer)) = accept_within(listener, until, stop)? else {
                bail!(
                    "{what} accepted {} of {flows} connections in {ACCEPT_WAIT:?}",
                    served.len()
                );
            };
            let serve = &serve;
            served.push(scope.spawn(move || serve(stream, peer)));
        }
        served
            .into_iter()
            .map(|flow| {
                flow.join()
                    .map_err(|_| anyhow!("a flow's thread of {what} panicked"))
            })
            .collect()
    })
}

/// Waits (up to `within`) for a source's `thread` to end and returns what
/// it returned; past `within` it raises `stop`, joins the thread and
/// fails. `what` names the source.
pub(crate) fn finish_within<T>(
    thread: JoinHandle<anyhow::Result<T>>,
    stop: &AtomicBool,
    within: Duration,
    what: &str,
) -> anyhow::Result<T> {
    let until = Instant::now() + within;
    while !thread.is_finished() {
        if Instant::now() >= until {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
            bail!("{what} did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    thread.join().map_err(|_| anyhow!("{what} panicked"))?
}
