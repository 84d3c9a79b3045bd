//! What travels between a session and the client's handle: each validated
//! description, the link's state, the receiver's reports and the grant
//! channels. Plain data on watch channels: it must not read or write the
//! connection.

use srap_common::{
    rss::{KeyProvenance, RssDescription},
    wire::{CpuGrant, DemandReport, LandingReport, NicGrants, ReceiverNics, SeenFlows},
};
use tokio::sync::watch;

/// A validated description from the receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The receiver's version number (restarts at 1 with the receiver).
    pub version: u64,
    pub description: RssDescription,
    /// Where its key comes from, which learned model, how far the
    /// landings back it (a change alone comes under the same version).
    pub key: KeyProvenance,
}

/// The link's state, for status displays and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerStatus {
    Connecting,
    Connected,
    /// Not connected; why the last attempt or session ended.
    Away(String),
}

/// What the receiver says of this sender's own flows (protocol 7).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SeenReport {
    /// Not connected yet.
    #[default]
    NotConnected,
    /// Connected in protocol 7 or later; no report yet.
    Waiting,
    /// The receiver speaks this older version: it says nothing of flows.
    Unsupported(u16),
    /// Its latest report.
    Flows(SeenFlows),
}

/// What the receiver says of its NICs and listeners (protocol 8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NicsReport {
    /// Not connected yet.
    #[default]
    NotConnected,
    /// Connected in protocol 8 or later; no report yet.
    Waiting,
    /// The receiver speaks this older version: it serves one NIC as far as
    /// this sender can know.
    Unsupported(u16),
    /// Its latest report (checked).
    Nics(ReceiverNics),
}

/// The receiver's reports on landings, from a session to the handle.
pub struct Reports {
    /// Its verdict on its description.
    pub landings: watch::Sender<Option<LandingReport>>,
    /// This sender's flows as it saw them.
    pub seen: watch::Sender<SeenReport>,
    /// Its NICs and which addresses accept each port.
    pub nics: watch::Sender<NicsReport>,
}

/// The grant coming in and the demand going out, for [`Session::run`](super::Session::run).
#[derive(Clone)]
pub struct GrantChannels {
    pub grants: watch::Sender<Option<CpuGrant>>,
    pub nic_grants: watch::Sender<Option<NicGrants>>,
    pub demand: watch::Receiver<Option<DemandReport>>,
}
