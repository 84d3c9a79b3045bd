//! NUMA nodes from sysfs: the node a network interface's device sits on,
//! and each node's CPUs (`devices/system/node/nodeN/cpulist`).
//!
//! The node of an interface is read on the device, not always on
//! `class/net/X/device`: a PCI NIC's `device` is the PCI function and holds
//! `numa_node`, but virtio-net's `device` is the virtio device, which has
//! none; the PCI function is one level up. So the walk goes up from the
//! device to the first ancestor that has the file. `-1` there means the
//! firmware does not say: unknown, never node 0. A bond's node is its
//! members', when they agree. A virtual interface (veth, bridge, lo) has
//! no device and no node.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs, io,
    path::{Path, PathBuf},
};

use thiserror::Error;

use crate::{cpulist, link::Link, netlink::NetlinkError};

/// Why a node could not be read; a node the host does not know is not an
/// error but `None`.
#[derive(Debug, Error)]
pub enum NumaError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} holds `{text}`, not a NUMA node (a number, -1 for none)")]
    Node { path: PathBuf, text: String },
    #[error("{path} is not a CPU list: {problem}")]
    CpuList { path: PathBuf, problem: String },
    #[error("NUMA node of {iface}: {source}")]
    Netlink { iface: String, source: NetlinkError },
    #[error("NUMA node of {iface}: no such interface in this network namespace")]
    NoInterface { iface: String },
}

/// The node of `iface` in the caller's network namespace; `Ok(None)` when
/// unknown (a virtual interface, `-1`, a bond whose members disagree, or
/// a `/sys` that shows another namespace).
///
/// The device is found over rtnetlink where the kernel names it (5.15+):
/// bus devices are not namespaced, so their directory holds wherever
/// `/sys` was mounted. Otherwise `/sys/class/net/IFACE` is read only when
/// it is this namespace's very device.
pub fn iface_node(iface: &str) -> Result<Option<u32>, NumaError> {
    let link = Link::by_name(iface)
        .map_err(|source| NumaError::Netlink {
            iface: iface.to_owned(),
            source,
        })?
        .ok_or_else(|| NumaError::NoInterface {
            iface: iface.to_owned(),
        })?;
    if let Some(dir) = link.parent_dir() {
        return device_node(Path::new("/sys/devices"), &dir);
    }
    match link.sysfs_dir() {
        Ok(_) => iface_node_under(Path::new("/sys"), iface),
        Err(_) => Ok(None),
    }
}

/// The node of `iface` as the sysfs tree under `sys` shows it (`/sys`, or
/// a test's copy): a bond's from its members, any other interface's from
/// its device; `None` for an interface without a device.
pub fn iface_node_under(sys: &Path, iface: &str) -> Result<Option<u32>, NumaError> {
    let dir = sys.join("class/net").join(iface);
    if let Some(members) = bond_members(&dir)? {
        return agreed_node(sys, &members);
    }
    device_node(&sys.join("devices"), &dir.join("device"))
}

/// The node every member of a bond agrees on; `None` when one is unknown,
/// they differ, or there is no member.
fn agreed_node(sys: &Path, members: &[String]) -> Result<Option<u32>, NumaError> {
    let mut agreed = None;
    for member in members {
        match (iface_node_under(sys, member)?, agreed) {
            (None, _) => return Ok(None),
            (Some(node), Some(seen)) if node != seen => return Ok(None),
            (node, _) => agreed = node,
        }
    }
    Ok(agreed)
}

/// A bond's members (`bonding/slaves`); `None` when `dir` is no bond.
fn bond_members(dir: &Path) -> Result<Option<Vec<String>>, NumaError> {
    let path = dir.join("bonding/slaves");
    match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.split_whitespace().map(str::to_owned).collect())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(NumaError::Read { path, source }),
    }
}

/// The `numa_node` of `device` or of its nearest ancestor that has one,
/// not looking above `devices` (the sysfs `devices` directory): `None`
/// when there is no such device, none has the file, or it says -1.
pub fn device_node(devices: &Path, device: &Path) -> Result<Option<u32>, NumaError> {
    let canonical = |path: &Path| {
        fs::canonicalize(path).map_err(|source| NumaError::Read {
            path: path.to_owned(),
            source,
        })
    };
    if fs::symlink_metadata(device).is_err() {
        return Ok(None);
    }
    let (devices, device) = (canonical(devices)?, canonical(device)?);
    for dir in device.ancestors().take_while(|d| d.starts_with(&devices)) {
        let path = dir.join("numa_node");
        match fs::read_to_string(&path) {
            Ok(text) => return parse_node(&path, &text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(NumaError::Read { path, source }),
        }
    }
    Ok(None)
}

/// A `numa_node` file's text: a node, or -1 for none.
fn parse_node(path: &Path, text: &str) -> Result<Option<u32>, NumaError> {
    match text.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(node) => u32::try_from(node).map(Some).map_err(|_| NumaError::Node {
            path: path.to_owned(),
            text: text.trim().to_owned(),
        }),
        Err(_) => Err(NumaError::Node {
            path: path.to_owned(),
            text: text.trim().to_owned(),
        }),
    }
}

/// Each NUMA node's CPUs on this host (`/sys`).
pub fn node_cpus() -> Result<BTreeMap<u32, BTreeSet<u32>>, NumaError> {
    node_cpus_under(Path::new("/sys"))
}

/// Each NUMA node's CPUs under the sysfs tree `sys`
/// (`devices/system/node/nodeN/cpulist`), the one reader of those files;
/// empty on a kernel without NUMA (no `devices/system/node`).
pub fn node_cpus_under(sys: &Path) -> Result<BTreeMap<u32, BTreeSet<u32>>, NumaError> {
    let dir = sys.join("devices/system/node");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(NumaError::Read { path: dir, source }),
    };
    let mut nodes = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(node) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path().join("cpulist");
        let text = fs::read_to_string(&path).map_err(|source| NumaError::Read {
            path: path.clone(),
            source,
        })?;
        let cpus = cpulist::parse(text.trim()).map_err(|e| NumaError::CpuList {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        nodes.insert(node, cpus);
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A fake sysfs under the temporary directory, removed on drop.
    struct Sysfs(PathBuf);

    impl Drop for Sysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    impl Sysfs {
        fn new(name: &str) -> Self {
            let root =
                std::env::temp_dir().join(format!("srap-numa-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("class/net")).expect("fixture");
            Self(root)
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.0.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("fixture");
            fs::write(path, text).expect("fixture");
        }

        /// `class/net/IFACE/device` → `devices/DEVICE`.
        fn nic(&self, iface: &str, device: &str) {
            fs::create_dir_all(self.0.join("devices").join(device)).expect("fixture");
            let dir = self.0.join("class/net").join(iface);
            fs::create_dir_all(&dir).expect("fixture");
            symlink(self.0.join("devices").join(device), dir.join("device")).expect("fixture");
        }

        fn node(&self, iface: &str) -> Result<Option<u32>, NumaError> {
            iface_node_under(&self.0, iface)
        }
    }

    #[test]
    fn a_pci_nic_holds_its_node_on_its_own_device() {
        let sys = Sysfs::new("pci");
        sys.nic("enp8s0f0", "pci0000:00/0000:00:01.0/0000:08:00.0");
        sys.write("devices/pci0000:00/0000:00:01.0/numa_node", "0\n");
        sys.write(
            "devices/pci0000:00/0000:00:01.0/0000:08:00.0/numa_node",
            "1\n",
        );
        assert_eq!(sys.node("enp8s0f0").expect("read"), Some(1));
    }

    /// virtio-net's `device` is the virtio device, which has no node: the
    /// PCI function one level up has it.
    #[test]
    fn virtio_reads_the_node_one_level_up() {
        let sys = Sysfs::new("virtio");
        sys.nic("eth1", "pci0000:20/0000:20:00.0/0000:21:00.0/virtio3");
        sys.write(
            "devices/pci0000:20/0000:20:00.0/0000:21:00.0/numa_node",
            "1\n",
        );
        assert_eq!(sys.node("eth1").expect("read"), Some(1));
    }

    /// -1 is unknown, not node 0; so is a device with no node anywhere
    /// above it, and an interface with no device at all.
    #[test]
    fn minus_one_and_no_node_are_unknown_never_node_zero() {
        let sys = Sysfs::new("unknown");
        sys.nic("eth0", "pci0000:00/0000:00:03.0/virtio0");
        sys.write("devices/pci0000:00/0000:00:03.0/numa_node", "-1\n");
        assert_eq!(sys.node("eth0").expect("read"), None);
        sys.nic("eth2", "platform/nowhere");
        assert_eq!(sys.node("eth2").expect("read"), None);
        fs::create_dir_all(sys.0.join("class/net/veth0")).expect("fixture");
        assert_eq!(sys.node("veth0").expect("read"), None);
    }

    /// A bond is on its members' node when they agree, else unknown.
    #[test]
    fn a_bond_is_on_its_members_node_when_they_agree() {
        let sys = Sysfs::new("bond");
        sys.nic("eth0", "pci0000:00/0000:00:03.0");
        sys.nic("eth1", "pci0000:00/0000:00:04.0");
        sys.nic("eth2", "pci0000:20/0000:20:00.0");
        sys.write("devices/pci0000:00/0000:00:03.0/numa_node", "0\n");
        sys.write("devices/pci0000:00/0000:00:04.0/numa_node", "0\n");
        sys.write("devices/pci0000:20/0000:20:00.0/numa_node", "1\n");
        sys.write("class/net/bond0/bonding/slaves", "eth0 eth1\n");
        sys.write("class/net/bond1/bonding/slaves", "eth0 eth2\n");
        sys.write("class/net/bond2/bonding/slaves", "\n");
        assert_eq!(sys.node("bond0").expect("read"), Some(0));
        assert_eq!(sys.node("bond1").expect("read"), None);
        assert_eq!(sys.node("bond2").expect("read"), None);
    }

    #[test]
    fn a_node_file_that_is_no_number_is_an_error_naming_it() {
        let sys = Sysfs::new("garbage");
        sys.nic("eth0", "pci0000:00/0000:00:03.0");
        sys.write("devices/pci0000:00/0000:00:03.0/numa_node", "zero\n");
        let err = sys.node("eth0").unwrap_err().to_string();
        assert!(err.contains("numa_node holds `zero`"), "{err}");
        sys.write("devices/pci0000:00/0000:00:03.0/numa_node", "-2\n");
        assert!(sys.node("eth0").is_err());
    }

    #[test]
    fn each_node_lists_its_cpus() {
        let sys = Sysfs::new("cpus");
        assert!(node_cpus_under(&sys.0).expect("no NUMA").is_empty());
        sys.write("devices/system/node/node0/cpulist", "0-1,4\n");
        sys.write("devices/system/node/node1/cpulist", "2-3\n");
        sys.write("devices/system/node/possible", "0-1\n");
        let nodes = node_cpus_under(&sys.0).expect("read");
        assert_eq!(
            nodes.into_iter().collect::<Vec<_>>(),
            vec![(0, BTreeSet::from([0, 1, 4])), (1, BTreeSet::from([2, 3]))]
        );
        sys.write("devices/system/node/node2/cpulist", "x\n");
        let err = node_cpus_under(&sys.0).unwrap_err().to_string();
        assert!(err.contains("node2/cpulist is not a CPU list"), "{err}");
    }
}
