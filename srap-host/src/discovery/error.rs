//! Why discovery could not describe a device, or read the kernel's default
//! RSS key. Each names the interface or file at fault; none of discovery's
//! reading or deciding lives here.

use std::{io, path::PathBuf};

use srap_common::rss::DescriptionError;
use thiserror::Error;

use super::{hashing::HashingError, ioctl::IoctlError, netlink::NetlinkError};

/// Why a device could not be described.
#[derive(Debug, Error)]
pub enum DiscoveryError {
    #[error("no interface `{iface}` in this network namespace (`ip link` lists them)")]
    NoSuchInterface { iface: String },
    #[error(
        "{iface} has no RSS that SRAP can use: {reason}. Describe the receiver in a \
         file and pass it with --rss FILE (see docs/how-it-works.md, \"RSS description file\")"
    )]
    NoRss { iface: String, reason: String },
    #[error("cannot read the RSS of {iface}: netlink said: {netlink}; the ioctl said: {ioctl}")]
    Query {
        iface: String,
        netlink: NetlinkError,
        ioctl: IoctlError,
    },
    #[error("{iface}: {problem}")]
    Unsupported { iface: String, problem: String },
    #[error("{iface}: {source}")]
    Transform {
        iface: String,
        #[source]
        source: HashingError,
    },
    #[error("{iface}: rx-flow-hash {flow}: {source}")]
    FlowHash {
        iface: String,
        flow: &'static str,
        #[source]
        source: HashingError,
    },
    #[error("{iface}: the discovered RSS cannot be modelled: {source}")]
    Unmodelled {
        iface: String,
        #[source]
        source: DescriptionError,
    },
}

/// Why the kernel's default RSS key (`net.core.netdev_rss_key`) is not
/// known.
#[derive(Debug, Error)]
pub enum KernelKeyError {
    #[error(
        "{} is unreadable ({source}); it exists only in the initial network namespace",
        .path.display()
    )]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a key", .path.display())]
    NotAKey { path: PathBuf },
    #[error("{} is all zeros", .path.display())]
    AllZeros { path: PathBuf },
}
