//! One connection to the receiver: connect, authenticate, then receive
//! descriptions and send plans and keepalives until it ends.

use srap_common::{
    rss::{DescriptionError, RssDescription, RssModel},
    wire::{
        self, CpuGrant, CpuListError, DecodeError, ErrorReport, Hello, LandingReport, MAX_FRAME,
        MIN_PROTOCOL_VERSION, Message, NicGrants, NicGrantsError, NicListError, Nonce,
        PROTOCOL_VERSION, PlanReport, Psk, ReceiverNics, Response, Role, RssUpdate, SeenFlows,
    },
};
use thiserror::Error;
use tokio::{
    net::{TcpStream, lookup_host},
    sync::watch,
    time::{Instant, timeout},
};
use tracing::{info, warn};

use super::{
    backoff::Delays,
    channels::{GrantChannels, NicsReport, Reports, SeenReport, Update},
    config::PeerConfig,
};
use crate::framed::{self, FrameError, Inbound, Outbound, ReadLimits, printable};

/// Why a connection to the receiver failed or ended.
#[derive(Debug, Error)]
pub enum PeerError {
    // No address in these two: every place that shows a peer's error names
    // the peer beside it.
    #[error("cannot resolve the name: {reason}")]
    Resolve { reason: String },
    #[error("cannot connect: {reason}")]
    Connect { reason: String },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the receiver refused: {0}")]
    Refused(String),
    // The four below read as the receiver refusing too, as they always have.
    #[error("the receiver refused: invalid first description: {0}")]
    BadFirstDescription(#[source] DescriptionError),
    #[error("the receiver refused: the receiver sent a bad NIC list: {0}")]
    BadNics(#[source] NicListError),
    #[error("the receiver refused: the receiver sent a bad grant: {0}")]
    BadGrant(#[source] CpuListError),
    #[error("the receiver refused: the receiver sent bad NIC grants: {0}")]
    BadNicGrants(#[source] NicGrantsError),
    #[error("the receiver requires a pre-shared key (--psk-file)")]
    NeedPsk,
    #[error(
        "the receiver did not authenticate itself (does it have --psk-file?); \
         not trusting its description"
    )]
    Unauthenticated,
    #[error("the receiver could not prove the pre-shared key: wrong key, or not our receiver")]
    WrongKey,
    #[error(transparent)]
    Downgrade(#[from] wire::Downgrade),
    #[error("the receiver sent {got} where {expected} was expected")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("cannot make a challenge: {0}")]
    Random(getrandom::Error),
    #[error(
        "the receiver speaks protocol version {version} and this agent versions \
         {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}; run a newer SRAP release on the receiver \
         (the receiver said: {reason})"
    )]
    OtherVersion { version: u16, reason: String },
}

/// An authenticated connection that has not yet received a description.
pub struct Session {
    stream: TcpStream,
    /// Plain without a PSK, sealed with the session's keys with one.
    inbound: Inbound,
    outbound: Outbound,
    config: PeerConfig,
    first: Update,
    /// The protocol version of the session (the receiver's, when older).
    version: u16,
}

impl Session {
    /// Connects to `config.addr` and completes the handshake, up to the
    /// first description (which must be valid).
    pub async fn connect(config: &PeerConfig) -> Result<Self, PeerError> {
        let t = config.timeouts;
        let mut stream = connect_any(&config.addr, t.connect).await?;
        let nonce = Nonce::random().map_err(PeerError::Random)?;
        let hello = Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            agent: concat!("srap-agent ", env!("CARGO_PKG_VERSION")).into(),
            nonce,
            key: config.psk.as_ref().map(Psk::id),
        });
        // Under the oldest header this agent speaks, which every receiver
        // it can work with reads; the receiver answers in the version of
        // the session.
        framed::write(&mut stream, &hello, MIN_PROTOCOL_VERSION, t.write).await?;
        let limits = ReadLimits {
            max: MAX_FRAME,
            idle: t.frame,
            frame: t.frame,
        };
        let payload = framed::read_payload(&mut stream, limits).await?;
        let reply = plain_reply(&payload)?;
        // `plain_reply` accepted the header: a version both sides speak.
        let version = wire::version_of(&payload).unwrap_or(MIN_PROTOCOL_VERSION);
        let answer = answer_to(&reply, config.psk.is_some());
        let (inbound, outbound, reply) = match (answer, &reply, &config.psk) {
            (Answer::Prove, Message::Challenge(challenge), Some(psk)) => {
                let offered = PROTOCOL_VERSION;
                if let Err(err) =
                    wire::downgrade::check_challenge(psk, offered, version, &nonce, challenge)
                {
                    return Err(refuse_challenge(&mut stream, err, config).await);
                }
                let response = Message::Response(Response {
                    proof: psk.sender_proof(version, &nonce, &challenge.nonce),
                });
                framed::write(&mut stream, &response, version, t.write).await?;
                let (mut inbound, outbound) =
                    framed::session(Some(psk), Role::Sender, version, &nonce, &challenge.nonce);
                let payload = framed::read_payload(&mut stream, limits).await?;
                let reply = first_sealed(&mut inbound, &payload)?;
                (inbound, outbound, reply)
            }
            (Answer::NeedPsk, ..) => return Err(PeerError::NeedPsk),
            (Answer::RefuseUnauthenticated, ..) => {
                let _ = refuse(&mut stream, "this sender requires a pre-shared key", config).await;
                return Err(PeerError::Unauthenticated);
            }
            _ => (Inbound::default(), Outbound::plain(version), reply),
        };
        let first = first_update(reply)?;
        Ok(Self {
            stream,
            inbound,
            outbound,
            config: config.clone(),
            first,
            version,
        })
    }

    /// The protocol version of the session.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The description the receiver sent on connecting.
    pub fn first(&self) -> &Update {
        &self.first
    }

    /// Publishes descriptions on `updates` and sends the plan on `plan`
    /// until the connection ends, putting the version of each plan sent on
    /// `reported`. Resets `delays` once the session has proved itself
    /// (first description in).
    pub async fn run(
        self,
        updates: &watch::Sender<Option<Update>>,
        reports: &Reports,
        mut plan: watch::Receiver<Option<PlanReport>>,
        reported: &watch::Sender<Option<u64>>,
        grant_channels: GrantChannels,
        delays: &mut Delays,
    ) -> Result<(), PeerError> {
        let GrantChannels {
            grants,
            nic_grants,
            mut demand,
        } = grant_channels;
        let Self {
            mut stream,
            mut inbound,
            mut outbound,
            config,
            first,
            version,
        } = self;
        let t = config.timeouts;
        delays.reset();
        publish(updates, first);
        reports.seen.send_replace(seen_at_start(version));
        reports.nics.send_replace(nics_at_start(version));
        // A receiver run's grants per NIC (protocol 9) come right after its
        // first grant; those of an earlier run (or an older receiver) name
        // NICs it may no longer serve.
        nic_grants.send_replace(None);
        let (mut rd, mut wr) = stream.split();
        // The current plan (if any) goes out first: the receiver lost it
        // with the last connection.
        plan.mark_changed();
        // So is the demand: the receiver grants from it.
        demand.mark_changed();
        let limits = ReadLimits {
            max: MAX_FRAME,
            idle: t.idle,
            frame: t.frame,
        };
        let reads = async {
            loop {
                match received(inbound.read(&mut rd, limits).await?)? {
                    Received::Nothing => {}
                    Received::Update(update) => publish(updates, update),
                    Received::BadUpdate { version, reason } => warn!(
                        "receiver {}: ignoring version {version}: {reason}; keeping the last good description",
                        config.addr
                    ),
                    Received::Landings(report) => {
                        reports.landings.send_replace(Some(report));
                    }
                    Received::Seen(flows) => {
                        reports.seen.send_replace(SeenReport::Flows(flows));
                    }
                    Received::Nics(nics) => {
                        let old = reports.nics.send_replace(NicsReport::Nics(nics.clone()));
                        say_nic_changes(&config.addr, &old, &nics);
                    }
                    Received::Grant(grant) => {
                        grants.send_replace(Some(grant));
                    }
                    Received::NicGrants(grants) => {
                        nic_grants.send_replace(Some(grants));
                    }
                }
            }
        };
        tokio::pin!(reads);
        let mut keepalive = tokio::time::interval_at(Instant::now() + t.keepalive, t.keepalive);
        let mut plans_open = true;
        let mut demand_open = true;
        loop {
            tokio::select! {
                outcome = &mut reads => {
                    tell_receiver(&outcome, &mut outbound, &mut wr, t.write).await;
                    return outcome;
                }
                changed = demand.changed(), if demand_open => {
                    if changed.is_err() {
                        demand_open = false;
                        continue;
                    }
                    let report = demand.borrow_and_update().clone();
                    if let Some(report) = report {
                        outbound.write(&mut wr, &Message::Demand(report), t.write).await?;
                    }
                }
                changed = plan.changed(), if plans_open => {
                    if changed.is_err() {
                        plans_open = false;
                        continue;
                    }
                    let report = plan.borrow_and_update().clone();
                    if let Some(report) = report {
                        let version = report.version;
                        outbound.write(&mut wr, &Message::PlanReport(report), t.write).await?;
                        reported.send_replace(Some(version));
                    }
                }
                _ = keepalive.tick() => {
                    outbound.write(&mut wr, &Message::Keepalive, t.write).await?;
                }
            }
        }
    }
}

/// What the sender answers the receiver's first reply with.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A challenge, and this sender has a key: prove it.
    Prove,
    /// A challenge, and this sender has no key.
    NeedPsk,
    /// A description without a challenge, and this sender has a key: the
    /// receiver cannot prove it is ours, so its description is not trusted.
    RefuseUnauthenticated,
    /// Neither side has a key (or the reply is an error): a plain session,
    /// whose first message [`first_update`] judges.
    Plain,
}

fn answer_to(reply: &Message, has_psk: bool) -> Answer {
    match (reply, has_psk) {
        (Message::Challenge(_), true) => Answer::Prove,
        (Message::Challenge(_), false) => Answer::NeedPsk,
        (Message::RssUpdate(_), true) => Answer::RefuseUnauthenticated,
        _ => Answer::Plain,
    }
}

/// The receiver's first message after the handshake: its description,
/// which must be one SRAP can model.
fn first_update(reply: Message) -> Result<Update, PeerError> {
    match reply {
        Message::RssUpdate(update) => validate(update).map_err(PeerError::BadFirstDescription),
        Message::Error(report) => Err(PeerError::Refused(printable(&report.reason))),
        other => Err(PeerError::Unexpected {
            expected: "RssUpdate",
            got: other.kind(),
        }),
    }
}

/// What a receiver's frame in a running session carries.
#[derive(Debug, PartialEq)]
enum Received {
    /// A keepalive.
    Nothing,
    /// A description SRAP can model.
    Update(Update),
    /// A description it cannot: ignored, the last good one kept.
    BadUpdate {
        version: u64,
        reason: String,
    },
    Landings(LandingReport),
    Seen(SeenFlows),
    /// Its NICs and listeners (checked).
    Nics(ReceiverNics),
    /// A grant (checked).
    Grant(CpuGrant),
    /// Its grant on each NIC (checked; protocol 9).
    NicGrants(NicGrants),
}

/// Sorts a receiver's frame: what it carries, or why the session ends.
fn received(message: Message) -> Result<Received, PeerError> {
    Ok(match message {
        Message::Keepalive => Received::Nothing,
        Message::RssUpdate(update) => {
            let version = update.version;
            match validate(update) {
                Ok(update) => Received::Update(update),
                Err(reason) => Received::BadUpdate {
                    version,
                    reason: reason.to_string(),
                },
            }
        }
        Message::Landings(report) => Received::Landings(report),
        Message::SeenFlows(flows) => Received::Seen(flows),
        Message::ReceiverNics(nics) => {
            nics.check().map_err(PeerError::BadNics)?;
            Received::Nics(nics)
        }
        Message::Grant(grant) => {
            grant.check().map_err(PeerError::BadGrant)?;
            Received::Grant(grant)
        }
        Message::NicGrants(grants) => {
            grants.check().map_err(PeerError::BadNicGrants)?;
            Received::NicGrants(grants)
        }
        Message::Error(report) => return Err(PeerError::Refused(printable(&report.reason))),
        other => {
            return Err(PeerError::Unexpected {
                expected: "RssUpdate, Landings, SeenFlows, ReceiverNics, Grant, NicGrants or \
                           Keepalive",
                got: other.kind(),
            });
        }
    })
}

/// What the status says of the receiver's view of this sender's flows
/// when a session starts: they come from protocol 7 on.
fn seen_at_start(version: u16) -> SeenReport {
    if version >= 7 {
        SeenReport::Waiting
    } else {
        SeenReport::Unsupported(version)
    }
}

/// Logs what changed in a receiver's NICs and listening ports: a NIC that
/// came, went or changed its link, a port whose accepting addresses
/// changed. One line each, rare: listeners come and go with servers.
fn say_nic_changes(receiver: &str, old: &NicsReport, new: &ReceiverNics) {
    let empty = ReceiverNics::default();
    let old = match old {
        NicsReport::Nics(old) => old,
        _ => &empty,
    };
    for nic in &new.nics {
        if old
            .nics
            .iter()
            .all(|o| o.name != nic.name || o.link != nic.link || o.addrs != nic.addrs)
        {
            info!(
                "receiver {receiver}: NIC {} ({:?}) holds {:?}",
                nic.name, nic.link, nic.addrs
            );
        }
    }
    for gone in old
        .nics
        .iter()
        .filter(|o| new.nics.iter().all(|n| n.name != o.name))
    {
        info!("receiver {receiver}: NIC {} is no longer served", gone.name);
    }
    for port in &new.ports {
        if !old.ports.contains(port) {
            info!(
                "receiver {receiver}: port {} accepted on {:?}",
                port.port, port.addrs
            );
        }
    }
    for gone in old
        .ports
        .iter()
        .filter(|o| new.ports.iter().all(|n| n.port != o.port))
    {
        info!("receiver {receiver}: port {} no longer accepted", gone.port);
    }
}

/// What the status says of the receiver's NICs when a session starts:
/// they come from protocol 8 on.
fn nics_at_start(version: u16) -> NicsReport {
    if version >= 8 {
        NicsReport::Waiting
    } else {
        NicsReport::Unsupported(version)
    }
}

/// The receiver's first answer, in a plain frame. An older receiver refuses
/// our Hello under its own version's header; its reason is still read.
fn plain_reply(payload: &[u8]) -> Result<Message, PeerError> {
    wire::decode_payload(payload).map_err(|err| {
        match (&err, wire::decode_error_any_version(payload)) {
            (DecodeError::WrongVersion { got, .. }, Some(report)) => PeerError::OtherVersion {
                version: *got,
                reason: printable(&report.reason),
            },
            _ => FrameError::from(err).into(),
        }
    })
}

/// The receiver's first frame after our proof: sealed, or the plain error a
/// receiver sends when it refuses the proof (it has not set up keys then).
/// A plain error can only end the connection, which anyone on the path can
/// do anyway with a reset.
fn first_sealed(inbound: &mut Inbound, payload: &[u8]) -> Result<Message, PeerError> {
    inbound
        .open(payload)
        .map_err(|err| match wire::decode_payload(payload) {
            Ok(Message::Error(report)) => PeerError::Refused(printable(&report.reason)),
            _ => err.into(),
        })
}

/// Tells the receiver why the session ends when it was its frame that was
/// wrong (say, a frame that failed authentication), best effort, bounded.
async fn tell_receiver<W: tokio::io::AsyncWrite + Unpin>(
    outcome: &Result<(), PeerError>,
    outbound: &mut Outbound,
    wr: &mut W,
    limit: std::time::Duration,
) {
    if let Err(PeerError::Frame(err)) = outcome
        && err.worth_reporting()
    {
        let report = Message::Error(ErrorReport::new(err.to_string()));
        let _ = outbound.write(wr, &report, limit).await;
    }
}

/// Connects to the first address of `addr` that answers, within `limit`.
async fn connect_any(addr: &str, limit: std::time::Duration) -> Result<TcpStream, PeerError> {
    let attempt = async {
        let addrs: Vec<_> = lookup_host(addr)
            .await
            .map_err(|err| PeerError::Resolve {
                reason: err.to_string(),
            })?
            .collect();
        let mut last = String::from("no addresses");
        for candidate in addrs {
            match TcpStream::connect(candidate).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                // The address only when a name resolved to it.
                Err(err) if candidate.to_string() == addr => last = err.to_string(),
                Err(err) => last = format!("{candidate}: {err}"),
            }
        }
        Err(PeerError::Connect { reason: last })
    };
    timeout(limit, attempt)
        .await
        .map_err(|_| PeerError::Connect {
            reason: format!("no answer within {limit:?}"),
        })?
}

/// Tells the receiver why its challenge is refused (best effort) and
/// returns the error: a downgrade is named to both sides, since the
/// receiver has no other way to learn of it.
async fn refuse_challenge(
    stream: &mut TcpStream,
    err: wire::ChallengeError,
    config: &PeerConfig,
) -> PeerError {
    match err {
        wire::ChallengeError::WrongKey => {
            let _ = refuse(stream, "authentication failed", config).await;
            PeerError::WrongKey
        }
        wire::ChallengeError::Downgrade(downgrade) => {
            let _ = refuse(stream, &downgrade.to_string(), config).await;
            downgrade.into()
        }
    }
}

/// Tells the receiver why we leave (best effort, bounded).
async fn refuse(
    stream: &mut TcpStream,
    reason: &str,
    config: &PeerConfig,
) -> Result<(), FrameError> {
    let message = Message::Error(ErrorReport::new(reason));
    // Every version reads an Error under any header.
    framed::write(
        stream,
        &message,
        MIN_PROTOCOL_VERSION,
        config.timeouts.write,
    )
    .await
}

/// A description from the receiver, if SRAP can model it.
fn validate(update: RssUpdate) -> Result<Update, DescriptionError> {
    let description: RssDescription = update.description.into();
    RssModel::from_description(&description)?;
    Ok(Update {
        version: update.version,
        description,
        key: update.key,
    })
}

/// Puts `update` on the channel if it differs from what is there.
fn publish(updates: &watch::Sender<Option<Update>>, update: Update) {
    updates.send_if_modified(|current| {
        if current.as_ref() == Some(&update) {
            return false;
        }
        info!(
            "receiver description version {} ({})",
            update.version, update.key
        );
        *current = Some(update);
        true
    });
}

#[cfg(test)]
mod tests;
