//! A greedy sender: a client of the receiver's protocol that holds the
//! key (so it is authenticated) but claims flows on every CPU, and floods
//! demand reports, thousands a second, flipping between two claims so that
//! each one differs. What a misconfigured or hostile sender agent could do;
//! the receiver must keep the honest senders' CPUs theirs.
//!
//! Blocking sockets and its own two threads (one writes demands, one reads
//! and drops whatever the receiver sends, so the receiver never blocks on
//! it); both stop when it drops.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, bail};
use srap_common::wire::{
    self, CpuCount, DemandReport, Hello, MAX_FRAME, Message, Nonce, PROTOCOL_VERSION, Psk,
    Response, Role,
};

use crate::NetNs;

/// Demand frames written per burst, and the pause between bursts: about
/// 3000 a second.
const BURST: u32 = 30;
const PAUSE: Duration = Duration::from_millis(10);

/// A running greedy client; stops on drop.
pub struct Greedy {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Greedy {
    /// Connects from `ns` to the receiver agent at `peer`, authenticates
    /// with `psk` as `agent`, then claims `per_cpu` flows on every CPU of
    /// `cpus` (and every other time one fewer on the first), as fast as
    /// `BURST` and `PAUSE` allow.
    pub fn start(
        ns: &NetNs,
        peer: SocketAddr,
        psk: &Psk,
        agent: &str,
        cpus: &[u32],
        per_cpu: u32,
    ) -> anyhow::Result<Self> {
        let mut stream = ns
            .run(|| TcpStream::connect_timeout(&peer, Duration::from_secs(5)))?
            .with_context(|| format!("connecting to {peer}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let nonce = Nonce::random().map_err(|e| anyhow::anyhow!("{e}"))?;
        let hello = Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            agent: agent.to_owned(),
            nonce,
            key: Some(psk.id()),
        });
        stream.write_all(&wire::encode(&hello)?)?;
        let challenge = match read_plain(&mut stream)? {
            Message::Challenge(challenge) => challenge,
            other => bail!("the receiver answered {other:?}, not a challenge"),
        };
        let v = PROTOCOL_VERSION;
        if !psk.verify_receiver(v, &nonce, &challenge.nonce, &challenge.proof) {
            bail!("the receiver could not prove the key");
        }
        let response = Message::Response(Response {
            proof: psk.sender_proof(v, &nonce, &challenge.nonce),
        });
        stream.write_all(&wire::encode(&response)?)?;
        let (sealer, _) = wire::seal::session(psk, Role::Sender, v, &nonce, &challenge.nonce);
        stream.set_read_timeout(None)?;
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let claims = [claim(cpus, per_cpu, 0), claim(cpus, per_cpu, 1)];
        let writer = {
            let (mut stream, stop, sent) = (stream.try_clone()?, stop.clone(), sent.clone());
            std::thread::spawn(move || flood(&mut stream, sealer, &claims, &stop, &sent))
        };
        let reader = {
            let mut stream = stream.try_clone()?;
            std::thread::spawn(move || {
                let mut sink = [0u8; 64 * 1024];
                while stream.read(&mut sink).is_ok_and(|n| n > 0) {}
            })
        };
        Ok(Self {
            stream,
            stop,
            sent,
            threads: vec![writer, reader],
        })
    }

    /// Demand frames written so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Whether it is still writing (the receiver has not closed on it).
    pub fn flooding(&self) -> bool {
        !self.threads.first().is_some_and(JoinHandle::is_finished)
    }
}

impl Drop for Greedy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.stream.shutdown(Shutdown::Both);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// `per_cpu` flows on each of `cpus`, `less` fewer on the first.
fn claim(cpus: &[u32], per_cpu: u32, less: u32) -> Message {
    let flows = cpus
        .iter()
        .enumerate()
        .map(|(i, &cpu)| CpuCount {
            cpu,
            count: if i == 0 { per_cpu - less } else { per_cpu },
        })
        .collect();
    Message::Demand(DemandReport { applied: 0, flows })
}

/// Writes `claims` in turn, sealed, in bursts, until `stop` or an error.
fn flood(
    stream: &mut TcpStream,
    mut sealer: wire::Sealer,
    claims: &[Message; 2],
    stop: &AtomicBool,
    sent: &AtomicU64,
) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..BURST {
            let Ok(frame) = sealer.seal(&claims[n % 2]) else {
                return;
            };
            if stream.write_all(&frame).is_err() {
                return;
            }
            n += 1;
            sent.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(PAUSE);
    }
}

/// One plain frame.
fn read_plain(stream: &mut TcpStream) -> anyhow::Result<Message> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix)?;
    let len = wire::payload_len(prefix, MAX_FRAME)?;
    let mut frame = prefix.to_vec();
    frame.resize(4 + len, 0);
    stream.read_exact(&mut frame[4..])?;
    Ok(wire::decode_frame(&frame, MAX_FRAME)?.0)
}
