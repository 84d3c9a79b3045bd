//! The receiver's CPUs as it offers them to senders: `--cpus` cpulists, the
//! CPUs of the NIC's NUMA node (offered first), and the offer's tiers. Here
//! rather than in the daemon so `srap rss show` can print the same offer
//! the receiver agent would make.

use std::collections::BTreeSet;

use srap_common::rss::{RssDescription, RssModel};
use tracing::warn;

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

/// Parses `--cpus`: `0-3,8,10-11` as the kernel's cpulists.
pub fn parse_cpu_list(text: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{part}` is not a CPU number or range (e.g. 0-3,8)"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (number(lo)?, number(hi)?),
            None => (number(part)?, number(part)?),
        };
        if lo > hi {
            return Err(format!("`{part}`: the range runs backwards"));
        }
        if hi - lo >= 4096 {
            return Err(format!("`{part}`: more than 4096 CPUs"));
        }
        cpus.extend(lo..=hi);
    }
    if cpus.is_empty() {
        return Err("no CPUs given (e.g. 0-3,8)".into());
    }
    Ok(cpus)
}

/// `cpus` as a cpulist: `0-3,8` (sorted, ranges joined).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPUs of the NUMA node `iface`'s device sits on, from sysfs; `None`
/// when the device has no node (virtual devices, single-node machines).
pub fn local_cpus(iface: &str) -> Option<BTreeSet<u32>> {
    let node = std::fs::read_to_string(format!("/sys/class/net/{iface}/device/numa_node")).ok()?;
    let node: i32 = node.trim().parse().ok()?;
    if node < 0 {
        return None;
    }
    let list =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    parse_cpu_list(&list).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(queue_cpu: Vec<u32>) -> RssDescription {
        RssDescription {
            indir: (0..queue_cpu.len() as u32).collect(),
            queue_cpu: Some(queue_cpu),
            ..srap_common::rss::embedded_default()
        }
    }

    #[test]
    fn cpu_lists_parse_like_the_kernels() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").expect("list"),
            [0, 1, 2, 3, 8, 10, 11].into_iter().collect()
        );
        assert!(
            parse_cpu_list("3-1")
                .expect_err("backwards")
                .contains("backwards")
        );
        assert!(parse_cpu_list("a").expect_err("bad").contains("`a`"));
        assert!(parse_cpu_list("").is_err());
        assert_eq!(format_cpu_list(&[8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
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
