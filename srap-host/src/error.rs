//! Why a host operation failed, in words that say what to do, and the
//! errors of the parsers it wraps (the kernel's BTF, the reserved-ports
//! list). It names no module of the crate: they all import it.

use std::{io, net::IpAddr, path::PathBuf};

use srap_common::port_range::PortRangeError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HostError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(
        "no cgroup2 file system in /proc/mounts: mount one \
         (`mount -t cgroup2 none /sys/fs/cgroup/unified`); under `ip netns exec`, /sys is \
         remounted without it: use `nsenter --net=/run/netns/NS …` instead"
    )]
    NoCgroup2,
    #[error("cgroup {path} is the cgroup2 root: name a cgroup below it (the default is `srap`)")]
    CgroupIsRoot { path: PathBuf },
    #[error("cgroup {path} is not inside the cgroup2 mount {mount}: give a path below it")]
    CgroupOutside { path: PathBuf, mount: PathBuf },
    #[error("{path}: {problem}")]
    Sysctl { path: String, problem: String },
    #[error("{path}: {source}")]
    PortRange {
        path: String,
        source: PortRangeError,
    },
    #[error("no route to receiver {receiver} from this host (network namespace): {source}")]
    NoRoute { receiver: IpAddr, source: io::Error },
    #[error("{path}: {source}")]
    PortList { path: String, source: PortListError },
    #[error("{path}: {source}")]
    Btf { path: String, source: BtfError },
}

/// A BTF blob `btf` cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BtfError {
    #[error("cut short at byte {at}")]
    CutShort { at: usize },
    #[error("not BTF of this byte order (bad magic)")]
    BadMagic,
    #[error("a {len}-byte header is too short")]
    ShortHeader { len: usize },
    #[error("unknown BTF kind {kind}")]
    UnknownKind { kind: u32 },
}

/// Text that is not the sysctl's list of ports.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PortListError {
    #[error("`{word}` in `{item}` is not a port")]
    NotAPort { word: String, item: String },
    #[error("`{item}` is an empty range")]
    EmptyRange { item: String },
}
