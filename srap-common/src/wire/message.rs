//! The messages. Plain data with bincode's derive; the RSS description
//! travels as [`WireDescription`], a field-for-field mirror of
//! [`RssDescription`] (whose serde attributes suit JSON, not bincode),
//! whose layout is the one part that depends on the session's version: it
//! carries UDP's hashed fields from [`UDP_FIELDS_SINCE`] on. Messages are
//! decoded with the version of their frame's header as bincode's context,
//! and encoded as that version has them (`Message::at_version`).

use std::{
    borrow::Cow,
    net::{IpAddr, SocketAddr},
};

use bincode::{
    Decode, Encode,
    de::Decoder,
    enc::Encoder,
    error::{DecodeError, EncodeError},
};
use thiserror::Error;

use super::{KeyId, Mac, Nonce};
use crate::{
    protocol::FlowType,
    rss::{FieldsDescription, KeyProvenance, RssDescription},
};

/// The first protocol version whose [`WireDescription`] carries UDP's
/// hashed fields ([`UdpFields`]); a peer of an older one is sent, and
/// sends, the layout without them.
pub const UDP_FIELDS_SINCE: u16 = 10;

/// Longest [`ErrorReport::reason`] sent; longer ones are cut.
pub const MAX_REASON_LEN: usize = 512;

/// Everything either side can send. Decoded with the frame's protocol
/// version as context (a [`WireDescription`]'s layout depends on it).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
#[bincode(decode_context = "u16")]
pub enum Message {
    Hello(Hello),
    Challenge(Challenge),
    Response(Response),
    RssUpdate(RssUpdate),
    PlanReport(PlanReport),
    /// Sent while idle so each side can tell a quiet peer from a dead one.
    Keepalive,
    Error(ErrorReport),
    /// The receiver's verdict on its own description, from where flows land.
    Landings(LandingReport),
    /// Sender → receiver: the flows it has open per receiver CPU (protocol 4).
    Demand(DemandReport),
    /// Receiver → sender: the CPUs its new flows may use (protocol 4).
    Grant(CpuGrant),
    /// Receiver → sender: that sender's flows as the receiver's observer
    /// saw them (protocol 7; never sent in a session of an older version).
    SeenFlows(SeenFlows),
    /// Receiver → sender: every NIC it serves and where each port is
    /// listened on (protocol 8; never sent in a session of an older
    /// version, whose peer knows the first NIC only).
    ReceiverNics(super::ReceiverNics),
    /// Receiver → sender: its grant on each NIC the receiver serves
    /// (protocol 9; never sent in a session of an older version, whose
    /// peer holds the first NIC's grant only, [`Message::Grant`]).
    NicGrants(super::NicGrants),
}

impl Message {
    /// The message's kind, for errors and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello(_) => "Hello",
            Self::Challenge(_) => "Challenge",
            Self::Response(_) => "Response",
            Self::RssUpdate(_) => "RssUpdate",
            Self::PlanReport(_) => "PlanReport",
            Self::Keepalive => "Keepalive",
            Self::Error(_) => "Error",
            Self::Landings(_) => "Landings",
            Self::Demand(_) => "Demand",
            Self::Grant(_) => "Grant",
            Self::SeenFlows(_) => "SeenFlows",
            Self::ReceiverNics(_) => "ReceiverNics",
            Self::NicGrants(_) => "NicGrants",
        }
    }

    /// This message as a session of `version` carries it: its
    /// descriptions with UDP's fields from [`UDP_FIELDS_SINCE`] on and
    /// without them below, the layout a peer of that version reads. Only
    /// a message holding a description is copied.
    pub(super) fn at_version(&self, version: u16) -> Cow<'_, Self> {
        let carried = version >= UDP_FIELDS_SINCE;
        match self {
            Self::RssUpdate(update) => {
                let mut update = update.clone();
                update.description.carry_udp(carried);
                Cow::Owned(Self::RssUpdate(update))
            }
            Self::ReceiverNics(nics) => {
                let mut nics = nics.clone();
                let described = nics.nics.iter_mut().filter_map(|n| n.description.as_mut());
                described.for_each(|d| d.carry_udp(carried));
                Cow::Owned(Self::ReceiverNics(nics))
            }
            other => Cow::Borrowed(other),
        }
    }
}

/// Whether the flows the receiver sees land where its description says.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum LandingVerdict {
    /// Too few flows judged since the description last changed.
    #[default]
    Unknown,
    /// Recent flows land on the queue the description computes.
    Agreed,
    /// Recent flows do not: RSS is off, the device uses another key or
    /// table than it reports, or the tuple is rewritten on the way.
    Contradicted,
    /// Said to one sender only: its connection arrives from another address
    /// than the source its plan names, so a NAT or proxy rewrites its tuples
    /// and no port it plans lands where it computed (protocol 3).
    TupleRewritten,
}

/// [`Message::Landings`]: the receiver's verdict on description `version`,
/// over its `judged` most recent flows, `matched` of them on the queue the
/// description computes. A sender stops steering toward a receiver that says
/// [`LandingVerdict::Contradicted`] or [`LandingVerdict::TupleRewritten`]
/// and resumes on [`LandingVerdict::Agreed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode)]
pub struct LandingReport {
    pub version: u64,
    pub verdict: LandingVerdict,
    pub matched: u32,
    pub judged: u32,
}

/// Most flows one [`SeenFlows`] carries. A receiver that sees more of one
/// sender's active flows sends the first this many in (destination,
/// source) order; the sender shows the others' receiver CPU as unknown.
/// A longer list is a decode error, refused before anything is allocated.
pub const MAX_SEEN_FLOWS: usize = 512;

/// [`Message::SeenFlows`]: the part of the receiver's landing report that
/// is one sender's own: its active flows (those whose source address is the
/// address the sender's session comes from, never another sender's) as the
/// receiver's observer saw them. Sent whenever the list changes, at most
/// once per observer sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode)]
pub struct SeenFlows {
    /// At most [`MAX_SEEN_FLOWS`].
    pub flows: Vec<SeenFlow>,
}

impl<Context> Decode<Context> for SeenFlows {
    /// The layout of a `Vec` (a length, then the flows), with the length
    /// checked against [`MAX_SEEN_FLOWS`] before anything is allocated.
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        let len = u64::decode(decoder)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|n| *n <= MAX_SEEN_FLOWS)
            .ok_or_else(|| {
                bincode::error::DecodeError::OtherString(format!(
                    "a SeenFlows report claims {len} flows; at most {MAX_SEEN_FLOWS} are allowed"
                ))
            })?;
        decoder.claim_container_read::<SeenFlow>(len)?;
        let mut flows = Vec::with_capacity(len);
        for _ in 0..len {
            decoder.unclaim_bytes_read(core::mem::size_of::<SeenFlow>());
            flows.push(SeenFlow::decode(decoder)?);
        }
        Ok(Self { flows })
    }
}
bincode::impl_borrow_decode!(SeenFlows);

/// One flow as the receiver saw it: the tuple as it arrived (a NAT on the
/// way shows here as a source the sender never bound) and where it landed.
/// A TCP flow: the protocol is implied, as the receive observer records
/// TCP only (`crate::observer::FlowKey::protocol`); naming it here would
/// change the layout, so a new protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct SeenFlow {
    /// The sender's address and port, as the receiver sees them.
    pub src: SocketAddr,
    /// The receiver's address and port.
    pub dst: SocketAddr,
    /// The receive queue (`None`: the observer's hook cannot tell).
    pub queue: Option<u32>,
    /// The receive CPU, on the basis the receiver counts by (`None`: it
    /// cannot tell, e.g. an emulated queue with no CPU in the description).
    pub cpu: Option<u32>,
}

/// The sender's first message.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Hello {
    /// [`super::PROTOCOL_VERSION`] of the sender (the frame header carries it
    /// too; this one is for logs and for a later version to negotiate).
    pub version: u16,
    /// The sender's software, e.g. `srap-agent 0.1.0`, for the receiver's logs.
    pub agent: String,
    /// The sender's half of the challenge: the receiver's proof covers it.
    pub nonce: Nonce,
    /// The id of the sender's pre-shared key, when it has one (protocol 5):
    /// a receiver holding several keys proves this one.
    pub key: Option<KeyId>,
}

/// The receiver's answer to [`Hello`] when it has a PSK.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Challenge {
    /// The receiver's half: the sender's proof covers it.
    pub nonce: Nonce,
    /// [`super::auth::Psk::receiver_proof`]: shows the receiver knows the PSK.
    pub proof: Mac,
}

/// The sender's proof of the PSK, [`super::auth::Psk::sender_proof`].
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Response {
    pub proof: Mac,
}

/// A receiver's RSS description, version `version`. Versions only grow
/// during one run of a receiver agent; a restarted receiver starts again at
/// 1, so senders compare descriptions, not just versions. The same version
/// is sent again when only `key` changed (the landings back it further).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
#[bincode(decode_context = "u16")]
pub struct RssUpdate {
    pub version: u64,
    pub description: WireDescription,
    /// Where the description's key comes from (the driver, the kernel's
    /// default, learned from landings), the learned model's revision, and
    /// how far the landings back it (protocol 6).
    pub key: KeyProvenance,
}

/// [`RssDescription`] as it travels: TCP's hashed fields, and UDP's in a
/// session of protocol [`UDP_FIELDS_SINCE`] on. Its layout is the
/// version-6 one up to `queue_cpu`; `udp` follows it from protocol 10 on,
/// so a peer of 9 or older reads the layout it knows (and plans TCP, which
/// needs nothing more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireDescription {
    pub hfunc: String,
    pub key: String,
    pub indir: Vec<u32>,
    pub input_xfrm: String,
    pub fields_tcp4: String,
    pub fields_tcp6: String,
    pub queue_cpu: Option<Vec<u32>>,
    /// UDP's fields: `Some` (each part `None` where the NIC did not say)
    /// in a session of protocol 10 on, `None` in an older one, which does
    /// not carry them. Encoding sets it as the session's version has it
    /// (`Message::at_version`).
    pub udp: Option<UdpFields>,
}

/// UDP's hashed fields over IPv4 and IPv6, in ethtool letters (protocol
/// 10 on; `None` where the NIC did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct UdpFields {
    pub udp4: Option<String>,
    pub udp6: Option<String>,
}

impl WireDescription {
    /// With UDP's fields carried or not, as a session that does (or does
    /// not) carry them encodes this description.
    fn carry_udp(&mut self, carried: bool) {
        if !carried {
            self.udp = None;
        } else if self.udp.is_none() {
            self.udp = Some(UdpFields::default());
        }
    }
}

impl Encode for WireDescription {
    /// The version-6 layout, then `udp` when it is carried (protocol 10 on:
    /// `Message::at_version` set it so).
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        self.hfunc.encode(encoder)?;
        self.key.encode(encoder)?;
        self.indir.encode(encoder)?;
        self.input_xfrm.encode(encoder)?;
        self.fields_tcp4.encode(encoder)?;
        self.fields_tcp6.encode(encoder)?;
        self.queue_cpu.encode(encoder)?;
        match &self.udp {
            Some(udp) => udp.encode(encoder),
            None => Ok(()),
        }
    }
}

impl Decode<u16> for WireDescription {
    /// The layout of the frame's version (the decoder's context): `udp`
    /// read from protocol 10 on.
    fn decode<D: Decoder<Context = u16>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            hfunc: Decode::decode(decoder)?,
            key: Decode::decode(decoder)?,
            indir: Decode::decode(decoder)?,
            input_xfrm: Decode::decode(decoder)?,
            fields_tcp4: Decode::decode(decoder)?,
            fields_tcp6: Decode::decode(decoder)?,
            queue_cpu: Decode::decode(decoder)?,
            udp: if *decoder.context() >= UDP_FIELDS_SINCE {
                Some(UdpFields::decode(decoder)?)
            } else {
                None
            },
        })
    }
}
bincode::impl_borrow_decode_with_context!(WireDescription, u16);

impl From<&RssDescription> for WireDescription {
    fn from(d: &RssDescription) -> Self {
        let udp = |flow| d.fields.of(flow).map(str::to_owned);
        Self {
            hfunc: d.hfunc.clone(),
            key: d.key.clone(),
            indir: d.indir.clone(),
            input_xfrm: d.input_xfrm.clone(),
            fields_tcp4: d.fields.tcp4.clone(),
            fields_tcp6: d.fields.tcp6.clone(),
            queue_cpu: d.queue_cpu.clone(),
            udp: Some(UdpFields {
                udp4: udp(FlowType::UDP4),
                udp6: udp(FlowType::UDP6),
            }),
        }
    }
}

impl From<WireDescription> for RssDescription {
    fn from(w: WireDescription) -> Self {
        let mut fields = FieldsDescription::tcp(w.fields_tcp4, w.fields_tcp6);
        let udp = w.udp.unwrap_or_default();
        for (flow, letters) in [(FlowType::UDP4, udp.udp4), (FlowType::UDP6, udp.udp6)] {
            if let Some(letters) = letters {
                fields.set(flow, letters);
            }
        }
        Self {
            hfunc: w.hfunc,
            key: w.key,
            indir: w.indir,
            input_xfrm: w.input_xfrm,
            fields,
            queue_cpu: w.queue_cpu,
        }
    }
}

/// What a sender planned against description `version`: for each receiver
/// address (and destination port, or all ports), the source ports it will
/// bind for each receiver CPU. The receiver's observer can then tell a
/// misprediction (flow on another CPU than planned) from a collision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct PlanReport {
    pub version: u64,
    /// Toward each receiver address, the tables from the sender's route
    /// source (what an unbound socket, the agent's own connection among
    /// them, leaves from) come first, then those of the other local
    /// addresses an application may bind.
    pub tables: Vec<PlannedTable>,
}

/// One port table of the sender's plan.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct PlannedTable {
    /// The receiver address flows go to.
    pub receiver: IpAddr,
    /// The sender address they come from.
    pub source: IpAddr,
    /// The destination port the ports were planned for (with an any-port
    /// table the CPU of a source port depends on it).
    pub dst_port: u16,
    pub cpus: Vec<CpuPorts>,
}

/// Source ports planned to land on one receiver CPU.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct CpuPorts {
    pub cpu: u32,
    pub ports: Vec<u16>,
}

/// Why the sending side is about to close the connection.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ErrorReport {
    pub reason: String,
}

impl ErrorReport {
    /// A report of `reason`, cut to [`MAX_REASON_LEN`] bytes on a character
    /// boundary.
    pub fn new(reason: impl Into<String>) -> Self {
        let mut reason = reason.into();
        if reason.len() > MAX_REASON_LEN {
            let mut end = MAX_REASON_LEN;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Self { reason }
    }
}

/// Most CPUs one [`CpuGrant`] or [`DemandReport`] names: the binder's slots
/// per receiver ([`crate::binder::MAX_SLOTS`]). A longer list is refused.
pub const MAX_GRANT_CPUS: usize = crate::binder::MAX_SLOTS as usize;

/// [`Message::Demand`]: what a sender has open toward this receiver, so the
/// receiver can grant CPUs that follow demand. Sent after every grant the
/// sender applied and whenever its open flows change (at most every 100 ms).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct DemandReport {
    /// [`CpuGrant::epoch`] of the grant the sender's binder uses now (0:
    /// none yet), so the receiver knows when a new grant is in force.
    pub applied: u64,
    /// Open steered flows per receiver CPU (CPUs with none left out), at
    /// most [`MAX_GRANT_CPUS`] entries.
    pub flows: Vec<CpuCount>,
}

/// [`Message::Grant`]: the receiver's CPUs this sender's new flows may use.
/// Between senders the granted sets are disjoint while their flows fit the
/// receiver's offered CPUs; when they do not, every sender is granted every
/// offered CPU with the flows other senders hold there as `base`, and its
/// binder fills the least-loaded first, which keeps max − min flows per CPU
/// within one. A sender uses only granted CPUs and keeps its last grant while
/// the receiver is away.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct CpuGrant {
    /// Grows with every grant of one receiver run.
    pub epoch: u64,
    /// The granted CPUs, each with the flows other senders hold on it (the
    /// `count` of a [`CpuCount`]); at most [`MAX_GRANT_CPUS`] entries.
    pub cpus: Vec<CpuCount>,
}

/// A receiver CPU and a count of flows on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Encode, Decode)]
pub struct CpuCount {
    pub cpu: u32,
    pub count: u32,
}

/// A CPU list of a grant or demand that a peer may not take as it is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("{what} names {count} CPUs; at most {MAX_GRANT_CPUS} are allowed")]
    TooMany { what: &'static str, count: usize },
    #[error("{what} names CPU {cpu} twice")]
    Repeated { what: &'static str, cpu: u32 },
}

/// Checks a CPU list against [`MAX_GRANT_CPUS`] and for repeated CPUs;
/// the error says which.
fn check_cpus(what: &'static str, cpus: &[CpuCount]) -> Result<(), CpuListError> {
    if cpus.len() > MAX_GRANT_CPUS {
        return Err(CpuListError::TooMany {
            what,
            count: cpus.len(),
        });
    }
    let mut seen: Vec<u32> = cpus.iter().map(|c| c.cpu).collect();
    seen.sort_unstable();
    if let Some(pair) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(CpuListError::Repeated { what, cpu: pair[0] });
    }
    Ok(())
}

impl DemandReport {
    /// Whether a receiver may take this report as it is.
    pub fn check(&self) -> Result<(), CpuListError> {
        check_cpus("a Demand report", &self.flows)
    }
}

impl CpuGrant {
    /// A grant of `cpus` that no other sender holds flows on (every base
    /// 0).
    pub fn uncontended(epoch: u64, cpus: impl IntoIterator<Item = u32>) -> Self {
        Self {
            epoch,
            cpus: cpus
                .into_iter()
                .map(|cpu| CpuCount { cpu, count: 0 })
                .collect(),
        }
    }

    /// Whether a sender may apply this grant as it is.
    pub fn check(&self) -> Result<(), CpuListError> {
        check_cpus("a Grant", &self.cpus)
    }
}
