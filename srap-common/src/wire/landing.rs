//! The receiver's verdict on its own description, from where the flows it
//! sees land. Plain data: judging the landings is the receiver's job, and
//! acting on the verdict the sender's; neither belongs here.

use bincode::{Decode, Encode};

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
///
/// [`Message::Landings`]: super::Message::Landings
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode)]
pub struct LandingReport {
    pub version: u64,
    pub verdict: LandingVerdict,
    pub matched: u32,
    pub judged: u32,
}
