//! A man in the middle for protocol tests: a TCP relay, run by the test
//! inside a namespace it created, between a real sender agent and a real
//! receiver agent. It forwards whole frames and, when told, attacks one
//! frame from the receiver: flips a byte of it, or puts an earlier frame of
//! the session in its place.
//!
//! New sessions wait for a permit ([`Relay::allow`]) before the relay
//! connects on, so a test can look at the sender between a dropped
//! connection and its reconnection. Threads and sockets end on drop.

use std::{
    fs::File,
    io::{self, Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsFd as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use srap_lab::NetNs;

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

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    attack: Mutex<Option<Attack>>,
    /// Attacks carried out.
    done: AtomicU32,
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
    let deadline = Instant::now() + WAIT;
    loop {
        if shared.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            return Err(io::Error::other("no permit"));
        }
        let taken = shared
            .permits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_ok() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let server = TcpStream::connect_timeout(&upstream, WAIT)?;
    server.set_nodelay(true)?;
    client.set_nodelay(true)?;
    lock(&shared.sockets).push(server.try_clone()?);
    let (mut up_from, mut up_to) = (client.try_clone()?, server.try_clone()?);
    let upward = thread::spawn(move || {
        let _ = io::copy(&mut up_from, &mut up_to);
        let _ = up_to.shutdown(Shutdown::Write);
    });
    let inner = Arc::clone(shared);
    let downward = thread::spawn(move || {
        let (mut from, mut to) = (server, client);
        let _ = forward_frames(&mut from, &mut to, &inner);
        let _ = to.shutdown(Shutdown::Write);
    });
    lock(&shared.threads).extend([upward, downward]);
    Ok(())
}

/// Forwards the receiver's frames one by one, attacking the next
/// description when armed.
fn forward_frames(from: &mut TcpStream, to: &mut TcpStream, shared: &Shared) -> io::Result<()> {
    let mut first_description: Option<Vec<u8>> = None;
    loop {
        let mut frame = vec![0u8; 4];
        from.read_exact(&mut frame)?;
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(io::Error::other("frame too large to relay"));
        }
        frame.resize(4 + len, 0);
        from.read_exact(&mut frame[4..])?;
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
