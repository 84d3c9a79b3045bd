//! Where a description's key comes from. A driver may report no key (igb)
//! or one its device does not use (virtio_net on 6.12); the description then
//! says what its key is, so every reader (`srap rss show`, the receiver's
//! log and status, the senders) knows how far to trust it.

use std::fmt;

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

/// The origin of a description's Toeplitz key.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, Encode, Decode,
)]
#[serde(rename_all = "kebab-case")]
pub enum KeySource {
    /// The driver reported it (ethtool), or a user wrote it (`--rss FILE`).
    #[default]
    Reported,
    /// The driver reports none: the kernel's default key,
    /// `net.core.netdev_rss_key`, which drivers fill their keys from (its
    /// first bytes, as many as the device uses).
    KernelDefault,
    /// Learned from where flows landed (see the receiver's learner): exact
    /// for the address pairs its probes covered.
    Learned,
    /// The driver reports none and the kernel's default is unavailable (a
    /// receiver outside the initial network namespace): a placeholder
    /// until the landings teach the key; senders do not steer by it.
    Unknown,
}

impl KeySource {
    /// Its name in JSON and metric labels (`kernel-default`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Reported => "reported",
            Self::KernelDefault => "kernel-default",
            Self::Learned => "learned",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Reported => "reported by the driver",
            Self::KernelDefault => "net.core.netdev_rss_key (the driver reports none)",
            Self::Learned => "learned from landings",
            Self::Unknown => "unknown: the driver reports none and net.core.netdev_rss_key is unavailable; to be learned from landings",
        })
    }
}

/// How far the landings back a served key, in counts anyone can check
/// against the flows they sent (protocol 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct KeyConfidence {
    /// Landings (flows whose receive queue the observer saw) the key was
    /// tested against: the most recent, since learning last started over.
    pub tested: u32,
    /// Of them, those on the queue the served key computes.
    pub agreeing: u32,
    /// Independent GF(2) equations over the key bits the landings gave.
    pub rank: u32,
    /// Independent combinations of key bits that placing every source port
    /// of each flow group seen (sender → receiver:port) needs: per group,
    /// the queue-deciding hash bits of port 0 and how each port bit flips
    /// them.
    pub needed: u32,
    /// Of those, the ones the landings determine: where `known == needed`
    /// the served key puts every source port of those groups where the
    /// device does, whatever the key's other bits.
    pub known: u32,
}

impl KeyConfidence {
    /// The landings determine everything planning the groups seen needs.
    pub fn complete(&self) -> bool {
        self.needed > 0 && self.known == self.needed
    }
}

impl fmt::Display for KeyConfidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} landings agree, rank {}, {} of {} bits planning needs",
            self.agreeing, self.tested, self.rank, self.known, self.needed
        )
    }
}

/// Where a served key comes from, which learned model it is, and how far
/// the landings back it: what a receiver tells its senders with each
/// description (protocol 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct KeyProvenance {
    pub source: KeySource,
    /// The learned model's revision: grows each time the receiver serves a
    /// newly learned key or withdraws one (0: nothing learned this run).
    pub revision: u32,
    pub confidence: KeyConfidence,
}

impl KeyProvenance {
    /// Whether `self` tells a sender something `sent` did not: another
    /// source, model or rank, more bits known or needed, a landing that
    /// disagrees, or twice the landings tested. Counts that only creep up
    /// are not resent on every sample.
    pub fn worth_resending(&self, sent: &Self) -> bool {
        let (c, s) = (self.confidence, sent.confidence);
        (self.source, self.revision, c.rank, c.needed, c.known)
            != (sent.source, sent.revision, s.rank, s.needed, s.known)
            || c.tested - c.agreeing.min(c.tested) != s.tested - s.agreeing.min(s.tested)
            || c.tested >= s.tested.saturating_mul(2).max(1)
            || c.tested < s.tested
    }
}

impl fmt::Display for KeyProvenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}", self.source)?;
        if self.source == KeySource::Learned {
            write!(f, ", model {}", self.revision)?;
        }
        if self.confidence.tested > 0 || self.confidence.needed > 0 {
            write!(f, ": {}", self.confidence)?;
        }
        Ok(())
    }
}
