//! The receiver's CPUs as it offers them to senders: `--cpus` (a
//! [`crate::cpulist`]), the CPUs of the NIC's NUMA node (offered first), and
//! the offer's tiers. Here rather than in the daemon so `srap rss show` can
//! print the same offer the receiver agent would make.

use std::{collections::BTreeSet, path::Path};

use srap_common::rss::{RssDescription, RssModel};
use thiserror::Error;
use tracing::warn;

use crate::{
    link::{Link, SYSFS_HINT, SysfsElsewhere},
    netlink::NetlinkError,
    numa::NumaError,
};

/// Why the CPUs of an interface's NUMA node are not known.
#[derive(Debug, Error)]
pub enum LocalCpusError {
    #[error("NUMA node of {iface} not read: {source}")]
    Link {
        iface: String,
        #[source]
        source: NetlinkError,
    },
    #[error("NUMA node of {iface} not read: no such interface here")]
    NoInterface { iface: String },
    #[error("NUMA node of {iface} not read: {source}; {SYSFS_HINT}")]
    Sysfs {
        iface: String,
        #[source]
        source: SysfsElsewhere,
    },
    #[error("NUMA node of {iface} not read: {source}")]
    Node {
        iface: String,
        #[source]
        source: NumaError,
    },
    #[error("CPUs of NUMA node {node} not read: {source}")]
    NodeCpus {
        node: u32,
        #[source]
        source: NumaError,
    },
    #[error("CPUs of NUMA node {node} not read: sysfs lists no node{node}")]
    NoNode { node: u32 },
}

/// Which CPUs the receiver offers and in what order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offer {
    /// `--cpus`: only these (default: every CPU a queue reaches).
    pub cpus: Option<BTreeSet<u32>>,
    /// The CPUs of the NIC's NUMA node, offered first (`None`: unknown,
    /// one tier).
    pub local: Option<BTreeSet<u32>>,
}

impl Offer {
    /// The offered CPUs in tiers (local node, then the others) for
    /// `description`.
    pub fn tiers(&self, description: &RssDescription) -> Vec<Vec<u32>> {
        let reachable = match RssModel::from_description(description) {
            Ok(model) => model.reachable_cpus(),
            Err(err) => {
                warn!("cannot model the served description ({err}): no CPUs to grant");
                BTreeSet::new()
            }
        };
        let offered: Vec<u32> = reachable
            .into_iter()
            .filter(|c| self.cpus.as_ref().is_none_or(|only| only.contains(c)))
            .collect();
        match &self.local {
            Some(local) => {
                let (near, far): (Vec<u32>, Vec<u32>) =
                    offered.into_iter().partition(|c| local.contains(c));
                [near, far].into_iter().filter(|t| !t.is_empty()).collect()
            }
            None => vec![offered],
        }
    }
}

/// The CPUs of the NUMA node `iface`'s device (in the caller's network
/// namespace) sits on; `Ok(None)` when it has none (virtual devices,
/// single-node machines), `Err` with what was not read and how to read it.
///
/// The device is found over rtnetlink and its node read from its bus
/// device's directory, which `/sys` shows whatever namespace it was mounted
/// in; kernels before 5.15 do not name the bus device, and then the
/// interface's own `/sys/class/net` entry is read only when it is this
/// namespace's.
pub fn local_cpus(iface: &str) -> Result<Option<BTreeSet<u32>>, LocalCpusError> {
    let link = Link::by_name(iface)
        .map_err(|source| LocalCpusError::Link {
            iface: iface.into(),
            source,
        })?
        .ok_or_else(|| LocalCpusError::NoInterface {
            iface: iface.into(),
        })?;
    let device = match (link.parent_dir(), link.sits_on_a_device()) {
        (Some(dir), _) => dir,
        // A virtual device, or a parent /sys does not show: no node to read.
        (None, Some(_)) => return Ok(None),
        (None, None) => match link.sysfs_dir() {
            Ok(dir) => dir.join("device"),
            Err(source) => {
                return Err(LocalCpusError::Sysfs {
                    iface: iface.into(),
                    source,
                });
            }
        },
    };
    let node = match crate::numa::device_node(Path::new("/sys/devices"), &device) {
        Ok(Some(node)) => node,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(LocalCpusError::Node {
                iface: iface.into(),
                source,
            });
        }
    };
    let mut nodes =
        crate::numa::node_cpus().map_err(|source| LocalCpusError::NodeCpus { node, source })?;
    nodes
        .remove(&node)
        .map(Some)
        .ok_or(LocalCpusError::NoNode { node })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpulist;

    fn desc(queue_cpu: Vec<u32>) -> RssDescription {
        RssDescription {
            indir: (0..queue_cpu.len() as u32).collect(),
            queue_cpu: Some(queue_cpu),
            ..srap_common::rss::embedded_default()
        }
    }

    #[test]
    fn cpu_lists_parse_like_the_kernels() {
        // `--cpus` as it always read (the syntax itself is cpulist's).
        assert_eq!(
            cpulist::parse_some("0-3,8,10-11\n").expect("list"),
            [0, 1, 2, 3, 8, 10, 11].into_iter().collect()
        );
        assert!(
            cpulist::parse_some("3-1")
                .expect_err("backwards")
                .to_string()
                .contains("backwards")
        );
        assert!(
            cpulist::parse_some("a")
                .expect_err("bad")
                .to_string()
                .contains("`a`")
        );
        assert!(cpulist::parse_some("").is_err());
        assert_eq!(cpulist::format([8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
    }

    /// `lo` sits on no bus device: no NUMA node, and no error.
    #[test]
    fn a_virtual_device_has_no_numa_node() {
        assert!(matches!(local_cpus("lo"), Ok(None)));
        assert!(local_cpus("srap-no-such0").is_err());
    }

    #[test]
    fn offer_filters_and_puts_the_local_node_first() {
        let d = desc((0..8).collect());
        let offer = Offer {
            cpus: Some([1, 2, 5, 6, 7, 40].into_iter().collect()),
            local: Some([4, 5, 6, 7].into_iter().collect()),
        };
        assert_eq!(offer.tiers(&d), vec![vec![5, 6, 7], vec![1, 2]]);
        assert_eq!(Offer::default().tiers(&d), vec![(0..8).collect::<Vec<_>>()]);
    }
}
