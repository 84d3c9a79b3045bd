//! This host's CPU topology from sysfs: which CPUs share a core (SMT
//! siblings), a last-level cache and a NUMA node. `--local-placement
//! reader` places a flow on the connecting CPU's own queue, else on the
//! nearest CPU a queue is served by, and "nearest" is read here.
//!
//! Every part may be missing (a container's partial `/sys`, a kernel
//! without NUMA, a CPU whose cache is not described): a missing part is an
//! empty set, and the nearness it stands for is then skipped, never
//! guessed.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

use crate::cpulist;

/// The CPUs near one CPU, by how near (each set holds the CPU itself when
/// known).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Neighbours {
    /// `thread_siblings_list`: the CPUs of its core.
    pub core: BTreeSet<u32>,
    /// The `shared_cpu_list` of its highest-level cache.
    pub last_level_cache: BTreeSet<u32>,
    /// The `cpulist` of its NUMA node.
    pub node: BTreeSet<u32>,
}

/// The topology of every online CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub cpus: BTreeMap<u32, Neighbours>,
}

impl Topology {
    /// The running host's (`/sys`).
    pub fn of_this_host() -> Self {
        Self::read(Path::new("/sys"))
    }

    /// The topology under a sysfs root (`/sys`, or a test's copy).
    pub fn read(sys: &Path) -> Self {
        let system = sys.join("devices/system");
        let online = read_list(&system.join("cpu/online")).unwrap_or_default();
        // Best effort, as every list here: a node unread gives no node.
        let nodes = crate::numa::node_cpus_under(sys).unwrap_or_default();
        let cpus = online
            .into_iter()
            .map(|cpu| {
                let dir = system.join(format!("cpu/cpu{cpu}"));
                let node = nodes
                    .values()
                    .find(|cpus| cpus.contains(&cpu))
                    .cloned()
                    .unwrap_or_default();
                let neighbours = Neighbours {
                    core: read_list(&dir.join("topology/thread_siblings_list")).unwrap_or_default(),
                    last_level_cache: last_level_cache(&dir.join("cache")),
                    node,
                };
                (cpu, neighbours)
            })
            .collect();
        Self { cpus }
    }
}

/// A cpulist file; `None` when it is missing or unreadable.
fn read_list(path: &Path) -> Option<BTreeSet<u32>> {
    let text = fs::read_to_string(path).ok()?;
    cpulist::parse(text.trim()).ok()
}

/// The CPUs sharing the highest-level cache under `cache/` (`indexN/level`
/// and `shared_cpu_list`): L3 on most servers, L2 where that is the last.
fn last_level_cache(dir: &Path) -> BTreeSet<u32> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let level: u32 = fs::read_to_string(e.path().join("level"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((level, read_list(&e.path().join("shared_cpu_list"))?))
        })
        .max_by_key(|(level, _)| *level)
        .map(|(_, cpus)| cpus)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A sysfs tree of two cores with two threads each, one L3 per core
    /// pair, on one node; CPU 3 has no cache directory.
    fn tree() -> (PathBuf, impl Drop) {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = fs::remove_dir_all(&self.0);
            }
        }
        let root = std::env::temp_dir().join(format!("srap-topology-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("dir");
            fs::write(path, text).expect("file");
        };
        write("devices/system/cpu/online", "0-3\n");
        write("devices/system/node/node0/cpulist", "0-3\n");
        write("devices/system/node/possible", "0\n");
        for cpu in 0..4 {
            let core = if cpu % 2 == 0 { "0,2" } else { "1,3" };
            write(
                &format!("devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"),
                core,
            );
            if cpu == 3 {
                continue;
            }
            for (index, level, shared) in [(0, "1", core), (2, "2", core), (3, "3", "0-3")] {
                let dir = format!("devices/system/cpu/cpu{cpu}/cache/index{index}");
                write(&format!("{dir}/level"), level);
                write(&format!("{dir}/shared_cpu_list"), shared);
            }
        }
        (root.clone(), Gone(root))
    }

    #[test]
    fn siblings_cache_and_node_are_read_and_a_missing_part_is_empty() {
        let (root, _gone) = tree();
        let topology = Topology::read(&root);
        assert_eq!(topology.cpus.len(), 4);
        let cpu0 = &topology.cpus[&0];
        assert_eq!(cpu0.core, BTreeSet::from([0, 2]));
        assert_eq!(cpu0.last_level_cache, BTreeSet::from([0, 1, 2, 3]));
        assert_eq!(cpu0.node, BTreeSet::from([0, 1, 2, 3]));
        let cpu3 = &topology.cpus[&3];
        assert_eq!(cpu3.core, BTreeSet::from([1, 3]));
        assert!(cpu3.last_level_cache.is_empty(), "no cache described");
    }

    #[test]
    fn no_sysfs_is_an_empty_topology() {
        let topology = Topology::read(Path::new("/nonexistent-srap-sys"));
        assert!(topology.cpus.is_empty());
    }
}
