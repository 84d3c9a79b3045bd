//! The messages. Plain data with bincode's derive; the RSS description
//! travels as [`WireDescription`], whose layout is the one part that
//! depends on the session's version: it carries UDP's hashed fields from
//! [`UDP_FIELDS_SINCE`] on. Messages are decoded with the version of their
//! frame's header as bincode's context, and encoded as that version has
//! them (`Message::at_version`).

use std::{
    borrow::Cow,
    net::{IpAddr, SocketAddr},
};

use bincode::{Decode, Encode};

use super::{
    auth::{KeyId, Mac, Nonce},
    cpus::{CpuGrant, DemandReport},
    description::{UDP_FIELDS_SINCE, WireDescription},
    landing::LandingReport,
    nics::{NicGrants, ReceiverNics},
};
use crate::rss::KeyProvenance;

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
    ReceiverNics(ReceiverNics),
    /// Receiver → sender: its grant on each NIC the receiver serves
    /// (protocol 9; never sent in a session of an older version, whose
    /// peer holds the first NIC's grant only, [`Message::Grant`]).
    NicGrants(NicGrants),
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
    /// [`super::version::PROTOCOL_VERSION`] of the sender (the frame header carries it
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
