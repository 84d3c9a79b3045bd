//! The device discovery describes, as the caller's network namespace has
//! it: found over rtnetlink, its queues counted by ethtool, and `/sys` read
//! only when `/sys` shows this namespace (see [`crate::link`]).

use std::{fs, path::PathBuf};

use thiserror::Error;
use tracing::debug;

use super::{error::DiscoveryError, ioctl::EthtoolSocket};
use crate::link::{Link, SYSFS_HINT, SysfsElsewhere, count_rx_queues};

/// Why a device's RPS masks were not read: its `/sys` is not this
/// namespace's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("RPS masks of {iface} were not read: {source}; {SYSFS_HINT}")]
pub struct RpsUnread {
    pub iface: String,
    #[source]
    pub source: SysfsElsewhere,
}

/// A network device of the caller's namespace and what discovery needs of
/// it besides its RSS.
#[derive(Debug, Clone)]
pub struct Device {
    pub link: Link,
    /// Receive queues in use: `ETHTOOL_GCHANNELS`, else the count under
    /// `/sys` when it is this namespace's, else the count the device was
    /// made with (`IFLA_NUM_RX_QUEUES`, at least the one in use).
    pub rx_queues: u32,
    /// The device's `/sys/class/net` directory, or why `/sys` was not read.
    pub sysfs: Result<PathBuf, SysfsElsewhere>,
}

impl Device {
    /// `iface` in the caller's network namespace.
    pub fn find(iface: &str) -> Result<Self, DiscoveryError> {
        let link = Link::by_name(iface)
            .map_err(|e| DiscoveryError::Unsupported {
                iface: iface.to_owned(),
                problem: format!("looking it up over rtnetlink: {e}"),
            })?
            .ok_or_else(|| DiscoveryError::NoSuchInterface {
                iface: iface.to_owned(),
            })?;
        let sysfs = link.sysfs_dir();
        let rx_queues = rx_queues(&link, sysfs.as_ref().ok());
        Ok(Self {
            link,
            rx_queues,
            sysfs,
        })
    }

    /// Where `rps_cpus` of receive queue N lives, or the warning to give
    /// instead of reading it.
    pub fn rps_dir(&self) -> Result<PathBuf, RpsUnread> {
        self.sysfs
            .clone()
            .map(|dir| dir.join("queues"))
            .map_err(|source| RpsUnread {
                iface: self.link.name.clone(),
                source,
            })
    }

    /// `K` when the interface sits on `virtioK` (virtio_net): from the
    /// parent rtnetlink names, else from `/sys` when it is this namespace's.
    pub fn virtio_index(&self) -> Option<u32> {
        let name = match &self.link.parent {
            Some(parent) => parent.device.clone(),
            None => {
                let device = fs::read_link(self.sysfs.as_ref().ok()?.join("device")).ok()?;
                device.file_name()?.to_str()?.to_owned()
            }
        };
        name.strip_prefix("virtio")?.parse().ok()
    }
}

/// The receive queues `link` has in use, asked in the caller's namespace.
fn rx_queues(link: &Link, sysfs: Option<&PathBuf>) -> u32 {
    let channels = EthtoolSocket::open(&link.name).and_then(|socket| socket.rx_channels());
    match channels {
        Ok(queues) if queues > 0 => return queues,
        Ok(_) => debug!(iface = link.name, "ETHTOOL_GCHANNELS reports no channels"),
        Err(err) => debug!(iface = link.name, error = %err, "no ETHTOOL_GCHANNELS"),
    }
    sysfs
        .map(|dir| count_rx_queues(dir))
        .or(link.rx_queues)
        .unwrap_or(0)
}
