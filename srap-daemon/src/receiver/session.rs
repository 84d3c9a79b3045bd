//! One sender's connection: handshake (PSK challenge when configured), then
//! the current description, every new version, and the sender's plan
//! reports, until either side goes away or breaks the protocol.

use std::net::SocketAddr;

use srap_common::wire::{
    self, Challenge, CpuListError, DecodeError, DemandReport, ErrorReport, Hello, KeyId,
    LandingReport, LandingVerdict, MAX_FRAME, MAX_HANDSHAKE_FRAME, MIN_PROTOCOL_VERSION, Message,
    PROTOCOL_VERSION, PlanReport, Psk, Response, Role, RssUpdate, SeenFlows,
};
use thiserror::Error;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{
        TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
    time::{Instant, timeout},
};
use tracing::{debug, info, warn};

use super::{pace::DemandPace, rewrite, seen, shared::Shared, source::ServedDescription};
use crate::{
    framed::{self, FrameError, Inbound, Outbound, ReadLimits, printable},
    psk::Keys,
};

/// Why a session ended early.
#[derive(Debug, Error)]
pub(super) enum SessionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("expected {expected}, got {got}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("authentication failed: wrong pre-shared key")]
    WrongKey,
    #[error(
        "this receiver requires a pre-shared key: give the sender --psk-file FILE \
         (`psk-file` in its TOML) with the receiver's key"
    )]
    NoKey,
    #[error("the sender's pre-shared key (id {id}) is none of this receiver's (id {ours})")]
    UnknownKey { id: KeyId, ours: String },
    #[error(
        "the pre-shared key this session authenticated with (id {0}) is no longer accepted \
         (key rotation); reconnect with the current key"
    )]
    KeyWithdrawn(KeyId),
    #[error("the peer reported an error: {0}")]
    PeerError(String),
    #[error("cannot make a challenge: {0}")]
    Random(getrandom::Error),
    #[error("the receiver is shutting down")]
    Shutdown,
    #[error(transparent)]
    BadDemand(CpuListError),
    #[error(
        "the sender speaks protocol version {0}; this receiver speaks versions \
         {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}: run a newer SRAP release on the sender"
    )]
    OldSender(u16),
}

impl SessionError {
    /// What to tell the peer before closing, if it can still be told.
    fn report(&self) -> Option<String> {
        match self {
            Self::Frame(err) if err.worth_reporting() => Some(err.to_string()),
            Self::Frame(_) | Self::PeerError(_) => None,
            Self::Random(_) => Some("internal error".into()),
            // The receiver's key ids are for its own log.
            Self::UnknownKey { id, .. } => Some(format!(
                "the sender's pre-shared key (id {id}) is not one this receiver accepts: \
                 give both hosts the same key file"
            )),
            other => Some(other.to_string()),
        }
    }

    /// The frame telling the peer [`Self::report`]: sealed when the session
    /// is; under the peer's own header when it speaks an older version, so
    /// an agent of an older release can read why it is refused.
    fn report_frame(&self, outbound: &mut Outbound) -> Option<Vec<u8>> {
        let report = ErrorReport::new(self.report()?);
        let older = match self {
            Self::Frame(FrameError::Decode(DecodeError::WrongVersion { got, .. })) => {
                Some(*got).filter(|v| (1..MIN_PROTOCOL_VERSION).contains(v))
            }
            _ => None,
        };
        match older {
            Some(version) if !outbound.sealed() => wire::encode_error_for(version, &report).ok(),
            _ => outbound.frame(&Message::Error(report)).ok(),
        }
    }
}

/// Runs a session to its end and closes the connection.
pub(super) async fn run(stream: TcpStream, peer: SocketAddr, shared: &Shared) {
    let local = stream.local_addr().map(|a| a.ip()).ok();
    let (mut rd, mut wr) = stream.into_split();
    let mut outbound = Outbound::default();
    let outcome = converse(&mut rd, &mut wr, &mut outbound, peer, local, shared).await;
    shared.plans.remove(&peer);
    shared.peers.remove(&peer);
    shared.grants.leave(&peer);
    match &outcome {
        Ok(()) | Err(SessionError::Frame(FrameError::Closed)) => info!("{peer}: disconnected"),
        Err(err) => warn!("{peer}: {err}"),
    }
    let report = outcome
        .err()
        .and_then(|err| err.report_frame(&mut outbound));
    close_with(rd, wr, report, shared).await;
}

/// The session after accepting: `outbound` turns sealed once the handshake
/// set up keys, so the error report [`run`] sends at the end is too.
async fn converse(
    rd: &mut OwnedReadHalf,
    wr: &mut OwnedWriteHalf,
    outbound: &mut Outbound,
    peer: SocketAddr,
    local: Option<std::net::IpAddr>,
    shared: &Shared,
) -> Result<(), SessionError> {
    let t = &shared.config.timeouts;
    let handshake = ReadLimits {
        max: MAX_HANDSHAKE_FRAME,
        idle: t.handshake,
        frame: t.handshake,
    };
    let (hello, version) = greeted(framed::read(rd, handshake).await?)?;
    *outbound = Outbound::plain(version);
    let (mut inbound, key) = authenticate(rd, wr, outbound, &hello, handshake, shared).await?;
    let agent = printable(&hello.agent);
    shared.peers.connected(peer, &agent, key);
    let name = match key {
        Some(key) => format!("{peer} ({agent}, key {key})"),
        None => format!("{peer} ({agent})"),
    };
    info!(
        "{peer}: {agent} connected{}",
        key.map(|k| format!(" (authenticated, key {k})"))
            .unwrap_or_default()
    );
    let mut keys = shared.keys.subscribe();

    let mut updates = shared.updates.clone();
    let current = updates.borrow_and_update().clone();
    send_update(wr, outbound, &current, shared).await?;
    // The grant comes right after the first description, so the sender's
    // binder has it before its first flows (it is granted the CPUs no one
    // else holds).
    let joined = shared
        .grants
        .join(peer, &name, shared.config.offer.tiers(&current.description));
    let (mut grant, mut nic_grants) = (joined.grant, joined.nics);
    let first = grant.borrow_and_update().clone();
    outbound.write(wr, &Message::Grant(first), t.write).await?;
    // Its grant on every NIC (protocol 9 on, several NICs only): at once,
    // then on every change. An older peer holds the first NIC's grant only.
    if nic_grants.borrow().epoch != 0 {
        nic_grants.mark_changed();
    }
    if version < 9 && !nic_grants.borrow().nics.is_empty() {
        info!(
            "{peer}: speaks protocol {version}, so it is granted CPUs of the first NIC only \
             (NicGrants needs 9)"
        );
    }
    let mut landings = shared.landings.subscribe();
    if tell_at_once(&landings.borrow_and_update()) {
        landings.mark_changed();
    } else {
        landings.mark_unchanged();
    }

    // This peer's own flows as the observer saw them (protocol 7 on):
    // the latest sample's go out at once, then each sample that changes them.
    let mut seen_board = shared.seen.subscribe();
    seen_board.mark_changed();
    let mut told = None::<SeenFlows>;
    if version < 7 {
        info!(
            "{peer}: speaks protocol {version}, so it is not told where its flows land \
             (SeenFlows needs 7)"
        );
    }

    // Every NIC served and the ports each address accepts (protocol 8 on):
    // at once, then on every change. An older peer knows the first NIC
    // only, from the description it is served.
    let mut nics = shared.nics.subscribe();
    nics.mark_changed();
    if version < 8 {
        info!(
            "{peer}: speaks protocol {version}, so it is told of the first NIC only \
             (ReceiverNics needs 8)"
        );
    }

    // Set by a plan report whose source address is not where this peer's
    // connection comes from: its tuples are rewritten on the way.
    let (rewritten_tx, mut rewritten) = watch::channel(None::<RewrittenPlan>);
    // The latest demand read; applied at the pace [`DemandPace`] allows, so
    // a sender flooding demands costs the others no re-balancing.
    let (demand_tx, mut demands) = watch::channel(None::<DemandReport>);
    let mut pace = DemandPace::new(Instant::now());
    let demands_read = std::sync::atomic::AtomicU64::new(0);
    let limits = ReadLimits {
        max: MAX_FRAME,
        idle: t.idle,
        frame: t.frame,
    };
    // Reads live in one future for the whole session, so a frame is never
    // cut in half by a write taking its turn.
    let reads = async {
        loop {
            match received(inbound.read(rd, limits).await?)? {
                Received::Nothing => {}
                Received::Plan(report) => {
                    let ports: usize = report
                        .tables
                        .iter()
                        .flat_map(|t| &t.cpus)
                        .map(|c| c.ports.len())
                        .sum();
                    info!(
                        "{peer}: plan for version {}: {} table(s), {ports} source ports",
                        report.version,
                        report.tables.len()
                    );
                    shared.peers.reported(peer, report.version);
                    let next = rewritten_plan(peer.ip(), local, &report);
                    rewritten_tx.send_if_modified(|now| std::mem::replace(now, next) != next);
                    shared.plans.insert(peer, report);
                }
                Received::Demand(report) => {
                    demands_read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    demand_tx.send_replace(Some(report));
                }
            }
        }
    };
    tokio::pin!(reads);
    let mut keepalive = tokio::time::interval_at(Instant::now() + t.keepalive, t.keepalive);
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            outcome = &mut reads => return outcome,
            changed = updates.changed() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let current = updates.borrow_and_update().clone();
                send_update(wr, outbound, &current, shared).await?;
                debug!("{peer}: sent version {}", current.version);
                shared.grants.offer(shared.config.offer.tiers(&current.description));
            }
            changed = grant.changed() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let now = grant.borrow_and_update().clone();
                debug!("{peer}: grant {}: {} CPUs", now.epoch, now.cpus.len());
                outbound.write(wr, &Message::Grant(now), t.write).await?;
            }
            changed = nic_grants.changed(), if version >= 9 => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let now = nic_grants.borrow_and_update().clone();
                debug!("{peer}: NIC grants {}: {} NIC(s)", now.epoch, now.nics.len());
                outbound.write(wr, &Message::NicGrants(now), t.write).await?;
            }
            changed = landings.changed() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let report = *landings.borrow_and_update();
                let report = overridden(report, *rewritten.borrow());
                outbound.write(wr, &Message::Landings(report), t.write).await?;
                debug!("{peer}: sent landings {:?} for version {}", report.verdict, report.version);
            }
            changed = seen_board.changed(), if version >= 7 => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let mine = seen::of_peer(&seen_board.borrow_and_update(), peer.ip());
                if let Some(news) = seen_news(&mut told, mine) {
                    outbound.write(wr, &Message::SeenFlows(news), t.write).await?;
                }
            }
            changed = nics.changed(), if version >= 8 => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let now = nics.borrow_and_update().clone();
                debug!("{peer}: sent {} NIC(s), {} listening port(s)", now.nics.len(), now.ports.len());
                outbound.write(wr, &Message::ReceiverNics(now), t.write).await?;
            }
            changed = rewritten.changed() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                let now = *rewritten.borrow_and_update();
                let report = overridden(*landings.borrow(), now);
                if let Some(plan) = now {
                    warn!(
                        "{peer}: plans its flows from {} but its connection arrives from {}: \
                         a NAT or proxy rewrites the tuple on the way, so its flows cannot land \
                         where it plans; telling it to stop steering",
                        plan.source,
                        peer.ip()
                    );
                } else {
                    info!("{peer}: its connection now comes from the address it plans from");
                }
                outbound.write(wr, &Message::Landings(report), t.write).await?;
            }
            changed = demands.changed() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                demands.borrow_and_update();
                if let Some(flood) = pace.arrived(
                    Instant::now(),
                    demands_read.load(std::sync::atomic::Ordering::Relaxed),
                ) {
                    warn!(
                        "{name}: sent {} demands in {:.1?}; applying at most one per {:?} \
                         (the latest wins)",
                        flood.count, flood.over, flood.applied_every
                    );
                }
            }
            () = tokio::time::sleep_until(pace.due()), if pace.pending() => {
                if let Some(report) = demands.borrow().clone() {
                    shared.grants.demand(peer, &report);
                }
                pace.applied(Instant::now());
            }
            changed = keys.changed(), if key.is_some() => {
                if changed.is_err() {
                    return Err(SessionError::Shutdown);
                }
                if let Some(err) = withdrawn(key, &keys.borrow_and_update()) {
                    return Err(err);
                }
            }
            _ = keepalive.tick() => {
                outbound.write(wr, &Message::Keepalive, t.write).await?;
            }
            _ = shutdown.changed() => return Err(SessionError::Shutdown),
        }
    }
}

/// A plan made from another source address than the one the peer's
/// connection arrives from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RewrittenPlan {
    source: std::net::IpAddr,
    version: u64,
}

/// The landings to tell a peer: the receiver's verdict, unless the peer's
/// tuples are rewritten on the way, which contradicts its plan whatever the
/// landings say.
fn overridden(report: LandingReport, rewritten: Option<RewrittenPlan>) -> LandingReport {
    match rewritten {
        Some(plan) => LandingReport {
            version: plan.version,
            verdict: LandingVerdict::TupleRewritten,
            matched: 0,
            judged: 0,
        },
        None => report,
    }
}

/// The PSK challenge, when the receiver has keys: with the one the
/// sender's [`Hello::key`] names. Returns the session's reading side and
/// the key's id and, once the sender's proof verified, makes `outbound`
/// sealed; a failed handshake is reported in plain frames (the peer has no
/// session keys to check them with).
async fn authenticate(
    rd: &mut OwnedReadHalf,
    wr: &mut OwnedWriteHalf,
    outbound: &mut Outbound,
    hello: &Hello,
    limits: ReadLimits,
    shared: &Shared,
) -> Result<(Inbound, Option<KeyId>), SessionError> {
    let keys = shared.keys.borrow().clone();
    let Some((id, psk)) = key_for(&keys, hello)? else {
        return Ok((Inbound::default(), None));
    };
    let version = outbound.version();
    // Marked when the session runs below this build's version, so a sender
    // that offered more detects a Hello rewritten on the way.
    let nonce = wire::downgrade::receiver_nonce(version).map_err(SessionError::Random)?;
    let challenge = Challenge {
        nonce,
        proof: psk.receiver_proof(version, &hello.nonce, &nonce),
    };
    framed::write(
        wr,
        &Message::Challenge(challenge),
        version,
        shared.config.timeouts.write,
    )
    .await?;
    let response = answered(framed::read(rd, limits).await?)?;
    if !psk.verify_sender(version, &hello.nonce, &nonce, &response.proof) {
        return Err(SessionError::WrongKey);
    }
    let (inbound, sealed) =
        framed::session(Some(psk), Role::Receiver, version, &hello.nonce, &nonce);
    *outbound = sealed;
    Ok((inbound, Some(id)))
}

/// A sender's first frame: its Hello and the version of the session (the
/// lower of the two: its frames are what the peer reads).
fn greeted(message: Message) -> Result<(Hello, u16), SessionError> {
    let hello = match message {
        Message::Hello(hello) => hello,
        other => return Err(unexpected("Hello", &other)),
    };
    let version =
        wire::session_version(hello.version).ok_or(SessionError::OldSender(hello.version))?;
    Ok((hello, version))
}

/// The key the sender's [`Hello::key`] names, when this receiver has keys
/// (`None`: it has none, the session stays plain).
fn key_for<'k>(keys: &'k Keys, hello: &Hello) -> Result<Option<(KeyId, &'k Psk)>, SessionError> {
    if keys.is_empty() {
        return Ok(None);
    }
    let id = hello.key.ok_or(SessionError::NoKey)?;
    let psk = keys.find(id).ok_or_else(|| SessionError::UnknownKey {
        id,
        ours: keys.to_string(),
    })?;
    Ok(Some((id, psk)))
}

/// The sender's answer to the challenge.
fn answered(message: Message) -> Result<Response, SessionError> {
    match message {
        Message::Response(response) => Ok(response),
        // The sender refused the challenge (a wrong proof, a downgrade on
        // the path): its reason is what the log should say.
        Message::Error(report) => Err(SessionError::PeerError(printable(&report.reason))),
        other => Err(unexpected("Response", &other)),
    }
}

/// What a sender's frame after the handshake asks of the session.
#[derive(Debug, PartialEq)]
enum Received {
    /// A keepalive: nothing but the proof the sender is there.
    Nothing,
    /// Its plan for a description version.
    Plan(PlanReport),
    /// The flows it holds per granted CPU (checked).
    Demand(DemandReport),
}

/// Sorts a sender's frame: what it carries, or why the session ends.
fn received(message: Message) -> Result<Received, SessionError> {
    match message {
        Message::Keepalive => Ok(Received::Nothing),
        Message::PlanReport(report) => Ok(Received::Plan(report)),
        Message::Demand(report) => {
            report.check().map_err(SessionError::BadDemand)?;
            Ok(Received::Demand(report))
        }
        Message::Error(report) => Err(SessionError::PeerError(printable(&report.reason))),
        other => Err(unexpected("PlanReport, Demand or Keepalive", &other)),
    }
}

/// The plan `report` when it is made from another source address than
/// `peer`, the one its connection to `local` arrives from.
fn rewritten_plan(
    peer: std::net::IpAddr,
    local: Option<std::net::IpAddr>,
    report: &PlanReport,
) -> Option<RewrittenPlan> {
    let source = rewrite::rewritten_source(peer, local?, report)?;
    Some(RewrittenPlan {
        source,
        version: report.version,
    })
}

/// Whether the landings verdict a session finds goes out at once: one
/// already made does; Unknown is the default the sender assumes.
fn tell_at_once(report: &LandingReport) -> bool {
    report.verdict != LandingVerdict::Unknown
}

/// The peer's flows `mine` when they differ from what it was `told` last
/// (then they are what it was told).
fn seen_news(told: &mut Option<SeenFlows>, mine: SeenFlows) -> Option<SeenFlows> {
    if told.as_ref() == Some(&mine) {
        return None;
    }
    *told = Some(mine.clone());
    Some(mine)
}

/// The error that ends a session whose key (`key`) is no longer among
/// `keys` (key rotation).
fn withdrawn(key: Option<KeyId>, keys: &Keys) -> Option<SessionError> {
    key.filter(|k| !keys.contains(*k))
        .map(SessionError::KeyWithdrawn)
}

async fn send_update(
    wr: &mut OwnedWriteHalf,
    outbound: &mut Outbound,
    current: &ServedDescription,
    shared: &Shared,
) -> Result<(), SessionError> {
    let update = Message::RssUpdate(RssUpdate {
        version: current.version,
        description: (&current.description).into(),
        key: current.key,
    });
    outbound
        .write(wr, &update, shared.config.timeouts.write)
        .await?;
    Ok(())
}

fn unexpected(expected: &'static str, got: &Message) -> SessionError {
    SessionError::Unexpected {
        expected,
        got: got.kind(),
    }
}

/// Sends `report` (if any) in a plain frame, then closes ([`close_with`]).
pub(super) async fn close(
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    report: Option<String>,
    shared: &Shared,
) {
    let frame =
        report.and_then(|reason| wire::encode(&Message::Error(ErrorReport::new(reason))).ok());
    close_with(rd, wr, frame, shared).await;
}

/// Sends `frame` (if any), then closes: FIN first, then whatever the peer
/// still sends is read and dropped for a moment, so the kernel does not
/// answer it with a reset that could destroy the report before the peer
/// reads it.
async fn close_with(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    frame: Option<Vec<u8>>,
    shared: &Shared,
) {
    let linger = shared.config.timeouts.linger;
    if let Some(frame) = frame {
        let _ = framed::write_frame(&mut wr, &frame, linger).await;
    }
    let _ = timeout(linger, wr.shutdown()).await;
    drain(&mut rd, linger).await;
}

/// Reads and drops up to 64 KiB for at most `linger`.
pub(super) async fn drain<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
    linger: std::time::Duration,
) {
    let mut sink = [0u8; 4096];
    let mut left = 64 * 1024usize;
    let _ = timeout(linger, async {
        while left > 0 {
            match rd.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
