//! A network device as the caller's network namespace knows it, asked of
//! the kernel over rtnetlink (`RTM_GETLINK`): its index, address, queue
//! counts and the device it sits on.
//!
//! Why not `/sys/class/net/DEV`: sysfs shows the network namespace it was
//! *mounted* in, not the caller's. A process that entered a namespace with
//! `setns`/`nsenter --net` still sees the host's devices there, and a device
//! named like one of the host's would be mixed up with it. What only `/sys`
//! tells (RPS masks) is read through [`Link::sysfs_dir`], which says when
//! `/sys` belongs to another namespace.

use std::{
    fs,
    path::{Path, PathBuf},
};

use thiserror::Error;

use crate::netlink::{
    Message, NetlinkError, Protocol, REPLY_TIMEOUT, Socket, check_error, parse_attrs, put_str_attr,
    take,
};

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `IFF_RUNNING` of `ifi_flags`.
const IFF_RUNNING: u32 = 0x40;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
/// Linux ≥ 5.15: the device the interface sits on, and its bus.
const IFLA_PARENT_DEV_NAME: u16 = 56;
const IFLA_PARENT_DEV_BUS_NAME: u16 = 57;

/// From this kernel on, every device that sits on a bus device says which.
const NAMES_PARENTS: (u32, u32) = (5, 15);

/// How `/sys` is told to show this namespace, for messages.
pub const SYSFS_HINT: &str = "run it under `ip netns exec NAME`, which mounts \
    the namespace's own /sys";

/// One network device of the caller's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// The hardware address (empty for devices without one, such as `lo`).
    pub address: Vec<u8>,
    /// Receive queues the device was made with (`IFLA_NUM_RX_QUEUES`): at
    /// least those in use, more when channels were reduced (`ethtool -L`).
    pub rx_queues: Option<u32>,
    pub tx_queues: Option<u32>,
    /// The device it sits on, as its bus names it (`pci`, `0000:08:00.0`);
    /// `None` for virtual devices and kernels before 5.15.
    pub parent: Option<Parent>,
    /// Operationally up (`IFF_RUNNING` in `ifi_flags`: administratively
    /// up and its carrier on).
    pub running: bool,
}

/// The bus device under a network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub bus: String,
    pub device: String,
}

/// Why `/sys` cannot be trusted for a device.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("/sys shows another network namespace than this one ({0})")]
pub struct SysfsElsewhere(String);

impl Link {
    /// `iface` in the caller's network namespace; `None` when it has none.
    pub fn by_name(iface: &str) -> Result<Option<Self>, NetlinkError> {
        // No interface can have such a name (IFNAMSIZ is 16 with the NUL).
        if iface.is_empty() || iface.len() >= 16 || iface.contains(['/', '\0']) {
            return Ok(None);
        }
        let mut socket = Socket::open(Protocol::Route, REPLY_TIMEOUT)?;
        match socket.request(RTM_GETLINK, &request(iface), parse_link) {
            Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENODEV => Ok(None),
            other => other.map(Some),
        }
    }

    /// `/sys/class/net/NAME`, when `/sys` shows the caller's network
    /// namespace: the directory there must be this very device (same index
    /// and hardware address); otherwise why not.
    pub fn sysfs_dir(&self) -> Result<PathBuf, SysfsElsewhere> {
        self.sysfs_dir_under(Path::new("/sys"))
    }

    fn sysfs_dir_under(&self, sys: &Path) -> Result<PathBuf, SysfsElsewhere> {
        let dir = sys.join("class/net").join(&self.name);
        let read = |file: &str| fs::read_to_string(dir.join(file)).map(|t| t.trim().to_owned());
        let Ok(index) = read("ifindex") else {
            return Err(SysfsElsewhere(format!("it has no `{}`", self.name)));
        };
        if index != self.index.to_string() {
            return Err(SysfsElsewhere(format!(
                "its `{}` has index {index}, this namespace's has {}",
                self.name, self.index
            )));
        }
        let address = read("address").unwrap_or_default();
        if !self.address.is_empty() && address != hex_address(&self.address) {
            return Err(SysfsElsewhere(format!(
                "its `{}` has address {address}, this namespace's has {}",
                self.name,
                hex_address(&self.address)
            )));
        }
        Ok(dir)
    }

    /// Whether the interface sits on a bus device (a NIC) rather than being
    /// virtual (veth, bridge, lo); `None` on kernels before 5.15, which do
    /// not say.
    pub fn sits_on_a_device(&self) -> Option<bool> {
        if self.parent.is_some() {
            return Some(true);
        }
        let version = crate::kernel::running_version()?;
        (version >= NAMES_PARENTS).then_some(false)
    }

    /// The device's directory under `/sys/devices` (bus devices are not
    /// namespaced, so this holds wherever `/sys` was mounted).
    pub fn parent_dir(&self) -> Option<PathBuf> {
        let parent = self.parent.as_ref()?;
        fs::canonicalize(
            Path::new("/sys/bus")
                .join(&parent.bus)
                .join("devices")
                .join(&parent.device),
        )
        .ok()
    }
}

/// `aa:bb:cc:…`, as sysfs prints addresses.
fn hex_address(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `queues/rx-*` entries under a device's sysfs directory: the receive
/// queues in use.
pub(crate) fn count_rx_queues(dir: &Path) -> u32 {
    fs::read_dir(dir.join("queues"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(0)
}

/// `RTM_GETLINK` for the device named `iface`.
fn request(iface: &str) -> Vec<u8> {
    let mut body = vec![0u8; IFINFOMSG_LEN]; // AF_UNSPEC, any type, index 0
    put_str_attr(&mut body, IFLA_IFNAME, iface);
    body
}

/// An `RTM_NEWLINK` answer.
fn parse_link(msg: &Message<'_>) -> Result<Link, NetlinkError> {
    check_error(msg)?;
    if msg.kind != RTM_NEWLINK {
        return Err(NetlinkError::Malformed(format!(
            "expected a link (message {RTM_NEWLINK}), got message {}",
            msg.kind
        )));
    }
    let header = take(msg.payload, 0, IFINFOMSG_LEN, "ifinfomsg")?;
    let mut link = Link {
        index: u32::from_ne_bytes([header[4], header[5], header[6], header[7]]),
        running: u32::from_ne_bytes([header[8], header[9], header[10], header[11]]) & IFF_RUNNING
            != 0,
        ..Link::default()
    };
    let (mut bus, mut device) = (None, None);
    for attr in parse_attrs(&msg.payload[IFINFOMSG_LEN..])? {
        match attr.kind {
            IFLA_ADDRESS => link.address = attr.payload.to_vec(),
            IFLA_IFNAME => link.name = attr.str(),
            IFLA_NUM_RX_QUEUES => link.rx_queues = Some(attr.u32("IFLA_NUM_RX_QUEUES")?),
            IFLA_NUM_TX_QUEUES => link.tx_queues = Some(attr.u32("IFLA_NUM_TX_QUEUES")?),
            IFLA_PARENT_DEV_NAME => device = Some(attr.str()),
            IFLA_PARENT_DEV_BUS_NAME => bus = Some(attr.str()),
            _ => {}
        }
    }
    link.parent = bus.zip(device).map(|(bus, device)| Parent { bus, device });
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{
        parse_messages,
        tests::{attr, message},
    };

    /// An `RTM_NEWLINK` as the kernel lays it out for a PCI NIC.
    fn newlink(index: u32) -> Vec<u8> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        // IFF_UP | IFF_BROADCAST | IFF_RUNNING | IFF_MULTICAST | IFF_LOWER_UP
        body[8..12].copy_from_slice(&0x1_1043u32.to_ne_bytes());
        body.extend(attr(3, b"enp8s0f0np0\0"));
        body.extend(attr(4, &1500u32.to_ne_bytes()));
        body.extend(attr(1, &[0x0c, 0x42, 0xa1, 0x01, 0x02, 0x03]));
        body.extend(attr(31, &16u32.to_ne_bytes()));
        body.extend(attr(32, &8u32.to_ne_bytes()));
        body.extend(attr(56, b"0000:08:00.0\0"));
        body.extend(attr(57, b"pci\0"));
        message(RTM_NEWLINK, 0, 1, &body)
    }

    fn parse(bytes: &[u8]) -> Result<Link, NetlinkError> {
        let messages = parse_messages(bytes)?;
        let first = messages
            .first()
            .ok_or_else(|| NetlinkError::Malformed("no message".into()))?;
        parse_link(first)
    }

    #[test]
    fn a_link_reply_gives_index_address_queues_and_parent() {
        let link = parse(&newlink(7)).expect("parses");
        assert_eq!(
            link,
            Link {
                index: 7,
                name: "enp8s0f0np0".into(),
                address: vec![0x0c, 0x42, 0xa1, 0x01, 0x02, 0x03],
                rx_queues: Some(8),
                tx_queues: Some(16),
                parent: Some(Parent {
                    bus: "pci".into(),
                    device: "0000:08:00.0".into()
                }),
                running: true,
            }
        );
        assert_eq!(hex_address(&link.address), "0c:42:a1:01:02:03");
    }

    #[test]
    fn every_truncation_of_a_link_reply_is_an_error() {
        let bytes = newlink(7);
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut]).is_err(), "cut at {cut} parsed");
        }
    }

    /// A sysfs laid out under `root` for `link`.
    fn sysfs(root: &Path, name: &str, index: u32, address: &str, queues: u32) {
        let dir = root.join("class/net").join(name);
        fs::create_dir_all(dir.join("queues")).expect("fixture");
        fs::write(dir.join("ifindex"), format!("{index}\n")).expect("fixture");
        fs::write(dir.join("address"), format!("{address}\n")).expect("fixture");
        for q in 0..queues {
            fs::create_dir_all(dir.join(format!("queues/rx-{q}"))).expect("fixture");
            fs::create_dir_all(dir.join(format!("queues/tx-{q}"))).expect("fixture");
        }
    }

    #[test]
    fn sysfs_is_trusted_only_for_this_very_device() {
        let root = std::env::temp_dir().join(format!("srap-link-{}", std::process::id()));
        let link = parse(&newlink(7)).expect("parses");
        sysfs(&root, "enp8s0f0np0", 7, "0c:42:a1:01:02:03", 8);
        assert_eq!(
            link.sysfs_dir_under(&root),
            Ok(root.join("class/net/enp8s0f0np0"))
        );
        for (index, address, queues, problem) in [
            (3, "0c:42:a1:01:02:03", 8, "index 3, this namespace's has 7"),
            (7, "0c:42:a1:01:02:04", 8, "address 0c:42:a1:01:02:04"),
        ] {
            let _ = fs::remove_dir_all(&root);
            sysfs(&root, "enp8s0f0np0", index, address, queues);
            let err = link.sysfs_dir_under(&root).unwrap_err().to_string();
            assert!(err.contains(problem), "{err}");
            assert!(
                err.starts_with("/sys shows another network namespace"),
                "{err}"
            );
        }
        let _ = fs::remove_dir_all(&root);
        let err = link.sysfs_dir_under(&root).unwrap_err().to_string();
        assert!(err.contains("it has no `enp8s0f0np0`"), "{err}");
    }

    /// The kernel itself: `lo` is index 1 in every namespace, and a device
    /// that does not exist is `None`.
    #[test]
    fn the_kernel_describes_lo_and_knows_no_missing_device() {
        let lo = Link::by_name("lo").expect("rtnetlink").expect("lo exists");
        assert_eq!((lo.index, lo.name.as_str()), (1, "lo"));
        assert!(lo.rx_queues.is_some_and(|q| q >= 1), "{lo:?}");
        assert_eq!(Link::by_name("srap-no-such0").expect("rtnetlink"), None);
        assert_eq!(
            Link::by_name("srap-name-beyond-16").expect("no lookup"),
            None
        );
    }
}
