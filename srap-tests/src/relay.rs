//! A man in the middle for protocol tests: a TCP relay, run by the test
//! inside a namespace it created, between a real sender agent and a real
//! receiver agent. It forwards whole frames and, when told, attacks one
//! frame from the receiver: flips a byte of it, or puts an earlier frame of
//! the session in its place; or rewrites the version negotiation of every
//! session from then on ([`Rewrite`]).
//!
//! New sessions wait for a permit ([`Relay::allow`]) before the relay
//! connects on, so a test can look at the sender between a dropped
//! connection and its reconnection. Threads and sockets end on drop.

use std::{
    fs::File,
    io::{self, Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    ops::ControlFlow,
    os::fd::AsFd as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::{self, JoinHandle},
    time::Duration,
};

use srap_common::wire::{self, Message};
use srap_harness::{NetNs, poll_until};

/// Frames from the receiver longer than this are descriptions (RssUpdate);
/// the handshake, keepalives and landings are far shorter.
const DESCRIPTION_MIN: usize = 256;
/// Largest payload the relay forwards (the protocol's own limit is 1 MiB).
const MAX_PAYLOAD: usize = 2 << 20;
/// How long a session waits for a permit, or the relay for the receiver.
const WAIT: Duration = Duration::from_secs(30);

/// What to do to the next description the receiver sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Flip one bit of the byte in the middle of its payload.
    FlipByte,
    /// Send the session's first description again in its place.
    ReplayFirst,
}

/// A rewrite of the version negotiation: the session is forced down to
/// [`wire::MIN_PROTOCOL_VERSION`] between two agents that speak more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// The sender's `Hello` offers the oldest version instead of its own.
    HelloVersion,
    /// The sender's `Hello` offers this version instead of its own (when
    /// its own is higher): without a key, a sender of that version as far
    /// as the receiver can tell.
    HelloVersionTo(u16),
    /// The receiver's first answer comes under the oldest version's header.
    AnswerHeader,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    attack: Mutex<Option<Attack>>,
    /// Attacks carried out.
    done: AtomicU32,
    rewrite: Mutex<Option<Rewrite>>,
    /// Versions rewritten.
    rewritten: AtomicU32,
    permits: AtomicU32,
    /// Both ends of every session, to shut down on drop.
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

pub struct Relay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `127.0.0.1` inside `ns` and relays to `upstream`, which
    /// the relay reaches from `ns` too (so the receiver sees the sender's
    /// own address, as without the relay).
    pub fn start(ns: &NetNs, upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = ns.run(|| TcpListener::bind("127.0.0.1:0"))??;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let netns = File::open(format!("/run/netns/{}", ns.name()))?;
        let shared = Arc::new(Shared::default());
        let inner = Arc::clone(&shared);
        let accept = thread::spawn(move || {
            // This thread (and the ones it starts) stay in `ns`: the
            // connections upstream leave from there.
            if let Err(err) = rustix::thread::move_into_link_name_space(
                netns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            ) {
                eprintln!("relay: setns: {err}");
                return;
            }
            accept_loop(&listener, upstream, &inner);
        });
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets `n` more sessions through.
    pub fn allow(&self, n: u32) {
        self.shared.permits.fetch_add(n, Ordering::SeqCst);
    }

    /// Attacks the next description from the receiver.
    pub fn arm(&self, attack: Attack) {
        *lock(&self.shared.attack) = Some(attack);
    }

    /// How many attacks were carried out.
    pub fn attacks(&self) -> u32 {
        self.shared.done.load(Ordering::SeqCst)
    }

    /// Rewrites the version negotiation of every session from now on.
    pub fn rewrite(&self, rewrite: Rewrite) {
        *lock(&self.shared.rewrite) = Some(rewrite);
    }

    /// How many versions were rewritten.
    pub fn rewrites(&self) -> u32 {
        self.shared.rewritten.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for socket in lock(&self.shared.sockets).drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let threads: Vec<_> = lock(&self.shared.threads).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(err) = start_session(client, upstream, shared) {
                    eprintln!("relay: session not started: {err}");
                }
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(err) => {
                eprintln!("relay: accept: {err}");
                return;
            }
        }
    }
}

/// Waits for a permit, connects upstream and starts both directions.
fn start_session(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    lock(&shared.sockets).push(client.try_clone()?);
    let permit = poll_until(WAIT, Duration::from_millis(20), || {
        if shared.stop.load(Ordering::SeqCst) {
            return ControlFlow::Break(false);
        }
        let taken = shared
            .permits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_ok() {
            ControlFlow::Break(true)
        } else {
            ControlFlow::Continue(())
        }
    });
    if permit != Ok(true) {
        return Err(io::Error::other("no permit"));
    }
    let server = TcpStream::connect_timeout(&upstream, WAIT)?;
    server.set_nodelay(true)?;
    client.set_nodelay(true)?;
    lock(&shared.sockets).push(server.try_clone()?);
    let (mut up_from, mut up_to) = (client.try_clone()?, server.try_clone()?);
    let rewrite = *lock(&shared.rewrite);
    let inner = Arc::clone(shared);
    let upward = thread::spawn(move || {
        let offered = match rewrite {
            Some(Rewrite::HelloVersion) => Some(wire::MIN_PROTOCOL_VERSION),
            Some(Rewrite::HelloVersionTo(version)) => Some(version),
            _ => None,
        };
        if let Some(offered) = offered {
            let _ = forward_hello(&mut up_from, &mut up_to, &inner, offered);
        }
        let _ = io::copy(&mut up_from, &mut up_to);
        let _ = up_to.shutdown(Shutdown::Write);
    });
    let inner = Arc::clone(shared);
    let downward = thread::spawn(move || {
        let (mut from, mut to) = (server, client);
        let _ = forward_frames(&mut from, &mut to, rewrite, &inner);
        let _ = to.shutdown(Shutdown::Write);
    });
    lock(&shared.threads).extend([upward, downward]);
    Ok(())
}

/// One whole frame, length prefix included.
fn read_frame(from: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut frame = vec![0u8; wire::PREFIX_LEN];
    from.read_exact(&mut frame)?;
    let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::other("frame too large to relay"));
    }
    frame.resize(wire::PREFIX_LEN + len, 0);
    from.read_exact(&mut frame[wire::PREFIX_LEN..])?;
    Ok(frame)
}

/// Forwards the sender's first frame, its `Hello` offering `offered`
/// (under the header it came with).
fn forward_hello(
    from: &mut TcpStream,
    to: &mut TcpStream,
    shared: &Shared,
    offered: u16,
) -> io::Result<()> {
    let mut frame = read_frame(from)?;
    let payload = &frame[wire::PREFIX_LEN..];
    let header = wire::version_of(payload);
    if let (Ok(Message::Hello(mut hello)), Some(header)) = (wire::decode_payload(payload), header)
        && hello.version > offered
    {
        hello.version = offered;
        frame = wire::encode_for(&Message::Hello(hello), header).map_err(io::Error::other)?;
        shared.rewritten.fetch_add(1, Ordering::SeqCst);
    }
    to.write_all(&frame)
}

/// The receiver's first frame under the oldest version's header.
fn rewrite_header(frame: &mut [u8], shared: &Shared) {
    let at = wire::PREFIX_LEN + wire::MAGIC.len();
    let oldest = wire::MIN_PROTOCOL_VERSION.to_be_bytes();
    if let Some(version) = frame.get_mut(at..at + 2)
        && *version != oldest
    {
        version.copy_from_slice(&oldest);
        shared.rewritten.fetch_add(1, Ordering::SeqCst);
    }
}

/// Forwards the receiver's frames one by one, attacking the next
/// description when armed, and the first frame's header when `rewrite`
/// says so.
fn forward_frames(
    from: &mut TcpStream,
    to: &mut TcpStream,
    rewrite: Option<Rewrite>,
    shared: &Shared,
) -> io::Result<()> {
    let mut first_description: Option<Vec<u8>> = None;
    let mut first = true;
    loop {
        let mut frame = read_frame(from)?;
        let len = frame.len() - wire::PREFIX_LEN;
        if std::mem::take(&mut first) && rewrite == Some(Rewrite::AnswerHeader) {
            rewrite_header(&mut frame, shared);
        }
        if len > DESCRIPTION_MIN {
            // The session's first description always passes: the attacks
            // are on a session that is under way.
            let attack = if first_description.is_some() {
                lock(&shared.attack).take()
            } else {
                None
            };
            match (&first_description, attack) {
                (None, _) => first_description = Some(frame.clone()),
                (Some(_), Some(Attack::FlipByte)) => {
                    frame[4 + len / 2] ^= 0x01;
                    shared.done.fetch_add(1, Ordering::SeqCst);
                }
                (Some(first), Some(Attack::ReplayFirst)) => {
                    frame = first.clone();
                    shared.done.fetch_add(1, Ordering::SeqCst);
                }
                (Some(_), None) => {}
            }
        }
        to.write_all(&frame)?;
    }
}
