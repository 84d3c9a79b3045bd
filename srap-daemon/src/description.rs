//! Where a NIC's RSS description comes from: discovered on an interface,
//! or read from a file. The receiver agent serves its own NIC's
//! ([`crate::receiver::source`]); the sender plans this host's NIC from it
//! with `--steer local|both` ([`crate::sender::local::nic`]). Kept beneath
//! both, so neither side imports the other.

use std::path::PathBuf;

use srap_common::rss::{DescriptionFileError, KeySource, RssDescription};
use srap_host::discovery::{self, DiscoveryError};
use thiserror::Error;

/// Where a NIC's description is read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Discover the RSS of this interface.
    Iface(String),
    /// Read this JSON file (`--rss`): for devices without RSS, or to override.
    File(PathBuf),
}

#[derive(Debug, Error)]
pub enum SourceError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    File(#[from] DescriptionFileError),
}

impl Source {
    /// The current description, validated. Blocking (file or netlink I/O).
    pub fn read(&self) -> Result<RssDescription, SourceError> {
        self.read_with_origin(&mut Vec::new()).map(|(d, _)| d)
    }

    /// The description, where its key comes from, and discovery's warnings.
    pub(crate) fn read_with_origin(
        &self,
        warnings: &mut Vec<String>,
    ) -> Result<(RssDescription, KeySource), SourceError> {
        match self {
            Self::Iface(iface) => {
                let found = discovery::discover(iface)?;
                warnings.extend(found.warnings.iter().map(|w| format!("{iface}: {w}")));
                Ok((found.description, found.key_source))
            }
            Self::File(path) => Ok((RssDescription::load(path)?.0, KeySource::Reported)),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Iface(iface) => write!(f, "the RSS of {iface}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}
