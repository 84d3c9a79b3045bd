//! Why a host operation failed, in words that say what to do.

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
    PortList {
        path: String,
        source: crate::reserved::PortListError,
    },
    #[error("{path}: {source}")]
    Btf {
        path: String,
        source: crate::btf::BtfError,
    },
}
