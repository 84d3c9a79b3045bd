//! Where a description's key comes from. A driver may report no key (igb)
//! or one its device does not use (virtio_net on 6.12); the description then
//! says what its key is, so every reader (`srap rss show`, the receiver's
//! log and status, the senders) knows how far to trust it.

use std::fmt;

/// The origin of a description's Toeplitz key.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    bincode::Encode,
    bincode::Decode,
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
