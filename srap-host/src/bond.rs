//! A Linux bond as sysfs shows it (`/sys/class/net/BOND/bonding/`): its
//! mode, its transmit hash policy and its members in enslavement order,
//! each with whether it can transmit now. Which member a flow leaves on is
//! `srap_common::bond`'s; whether the source port decides it, and over
//! which members, is read here.

use std::{fs, path::Path};

use srap_common::bond::HashPolicy;

/// One member (slave) of a bond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `bonding_slave/mii_status` up: the bonding driver's own view of the
    /// link.
    pub up: bool,
    /// `bonding_slave/ad_aggregator_id` (802.3ad only).
    pub aggregator: Option<u32>,
    /// `bonding_slave/ad_actor_oper_port_state` (802.3ad only).
    pub port_state: Option<u8>,
}

/// The actor state bit of an 802.3ad port that distributes (sends).
pub const LACP_DISTRIBUTING: u8 = 0x20;

/// A bond and its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bond {
    pub name: String,
    /// `bonding/mode`'s name: `balance-xor`, `802.3ad`, `active-backup`, …
    pub mode: String,
    /// `bonding/xmit_hash_policy`'s name as sysfs gives it.
    pub policy_name: String,
    /// The policy, when this build knows it.
    pub policy: Option<HashPolicy>,
    /// `bonding/ad_aggregator`: the active aggregator (802.3ad only).
    pub active_aggregator: Option<u32>,
    /// Every member, in enslavement order (`bonding/slaves`).
    pub members: Vec<Member>,
}

impl Bond {
    /// The modes whose transmit member is `usable[hash % n]`.
    fn hashes(&self) -> bool {
        matches!(self.mode.as_str(), "balance-xor" | "802.3ad")
    }

    /// Whether a TCP flow's source port decides its member: a hashing
    /// mode under `layer3+4`.
    pub fn port_decides(&self) -> bool {
        self.hashes() && self.policy.is_some_and(HashPolicy::port_decides)
    }

    /// The members that can transmit, in enslavement order: up, and in
    /// 802.3ad in the active aggregator and distributing. A flow's member
    /// is this list at `hash % len`. A port shows in the aggregator
    /// seconds before it distributes; until then the driver sends nothing
    /// on it (seen in the bonded guests: every flow left on the first
    /// port meanwhile).
    pub fn usable(&self) -> Vec<&Member> {
        self.members
            .iter()
            .filter(|m| m.up)
            .filter(|m| {
                self.mode != "802.3ad"
                    || (m.aggregator.is_some()
                        && m.aggregator == self.active_aggregator
                        && m.port_state.is_some_and(|s| s & LACP_DISTRIBUTING != 0))
            })
            .collect()
    }

    /// Why the port does not decide the member (`None` when it does), for
    /// `srap rss show`.
    pub fn why_not_port(&self) -> Option<String> {
        if !self.hashes() {
            return Some(format!(
                "mode {} does not hash flows onto members",
                self.mode
            ));
        }
        match self.policy {
            Some(HashPolicy::Layer34) => None,
            Some(HashPolicy::Encap34) => Some(
                "xmit_hash_policy encap3+4 takes the socket's random hash for TCP this host \
                 sends, not its ports"
                    .into(),
            ),
            Some(_) => Some(format!(
                "xmit_hash_policy {} hashes no port",
                self.policy_name
            )),
            None => Some(format!(
                "xmit_hash_policy {} is unknown to this build",
                self.policy_name
            )),
        }
    }
}

/// `iface`'s own `tx_bytes` counter (`/sys/class/net/IFACE/statistics`).
pub fn tx_bytes(iface: &str) -> Option<u64> {
    fs::read_to_string(
        Path::new("/sys/class/net")
            .join(iface)
            .join("statistics/tx_bytes"),
    )
    .ok()?
    .trim()
    .parse()
    .ok()
}

/// `iface` as a bond, from `/sys`; `None` when it is not one.
pub fn read(iface: &str) -> Option<Bond> {
    read_from(Path::new("/sys"), iface)
}

/// [`read`] under a sysfs root (`/sys`, or a test's copy).
pub fn read_from(sys: &Path, iface: &str) -> Option<Bond> {
    let net = sys.join("class/net");
    let dir = net.join(iface).join("bonding");
    let word = |file: &str| first_word(&dir.join(file));
    let mode = word("mode")?;
    let policy_name = word("xmit_hash_policy").unwrap_or_default();
    let members = fs::read_to_string(dir.join("slaves"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|name| member(&net, name))
        .collect();
    Some(Bond {
        name: iface.to_owned(),
        policy: HashPolicy::parse(&policy_name),
        policy_name,
        active_aggregator: word("ad_aggregator").and_then(|w| w.parse().ok()),
        mode,
        members,
    })
}

fn member(net: &Path, name: &str) -> Member {
    let dir = net.join(name).join("bonding_slave");
    let word = |file: &str| first_word(&dir.join(file));
    Member {
        name: name.to_owned(),
        up: word("mii_status").as_deref() == Some("up"),
        aggregator: word("ad_aggregator_id").and_then(|w| w.parse().ok()),
        port_state: word("ad_actor_oper_port_state").and_then(|w| w.parse().ok()),
    }
}

/// The first word of a sysfs file (`balance-xor 2` → `balance-xor`).
fn first_word(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    text.split_whitespace().next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    struct Tree(PathBuf);

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    impl Tree {
        fn new(name: &str) -> Self {
            Self(std::env::temp_dir().join(format!("srap-bond-{name}-{}", std::process::id())))
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.0.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("dir");
            fs::write(path, text).expect("file");
        }

        /// bond0 of `mode` over eth1 then eth0 (enslaved in that order);
        /// `down` has its link down.
        fn bond(name: &str, mode: &str, down: &str) -> Self {
            let tree = Self::new(name);
            tree.write("class/net/bond0/bonding/mode", &format!("{mode} 2\n"));
            tree.write("class/net/bond0/bonding/xmit_hash_policy", "layer3+4 1\n");
            tree.write("class/net/bond0/bonding/slaves", "eth1 eth0\n");
            tree.write("class/net/bond0/bonding/ad_aggregator", "1\n");
            for eth in ["eth0", "eth1"] {
                let state = if eth == down { "down" } else { "up" };
                let slave = format!("class/net/{eth}/bonding_slave");
                tree.write(&format!("{slave}/mii_status"), state);
                tree.write(&format!("{slave}/ad_aggregator_id"), "1");
                // Collecting and distributing, in sync, aggregating.
                tree.write(&format!("{slave}/ad_actor_oper_port_state"), "61");
            }
            tree
        }
    }

    fn names(bond: &Bond) -> Vec<&str> {
        bond.usable().iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn members_are_usable_in_enslavement_order_and_a_down_one_drops_out() {
        let tree = Tree::bond("order", "balance-xor", "");
        let bond = read_from(&tree.0, "bond0").expect("a bond");
        assert_eq!(names(&bond), ["eth1", "eth0"]);
        assert!(bond.port_decides() && bond.why_not_port().is_none());
        let tree = Tree::bond("down", "802.3ad", "eth1");
        let bond = read_from(&tree.0, "bond0").expect("a bond");
        assert_eq!(names(&bond), ["eth0"]);
        assert_eq!(bond.active_aggregator, Some(1));
    }

    /// In 802.3ad a port in the active aggregator that does not distribute
    /// yet sends nothing: it is not usable.
    #[test]
    fn an_aggregated_port_not_yet_distributing_is_not_usable() {
        let tree = Tree::bond("joining", "802.3ad", "");
        // In sync and collecting, not yet distributing.
        tree.write(
            "class/net/eth1/bonding_slave/ad_actor_oper_port_state",
            "29",
        );
        let bond = read_from(&tree.0, "bond0").expect("a bond");
        assert_eq!(names(&bond), ["eth0"]);
    }

    #[test]
    fn modes_and_policies_that_do_not_hash_the_port_say_why() {
        let tree = Tree::bond("backup", "active-backup", "");
        let bond = read_from(&tree.0, "bond0").expect("a bond");
        assert!(!bond.port_decides());
        assert!(
            bond.why_not_port()
                .is_some_and(|w| w.contains("active-backup"))
        );
        let encap = Bond {
            policy: Some(HashPolicy::Encap34),
            policy_name: "encap3+4".into(),
            mode: "802.3ad".into(),
            ..bond
        };
        assert!(
            encap
                .why_not_port()
                .is_some_and(|w| w.contains("random hash"))
        );
    }

    #[test]
    fn an_interface_without_bonding_is_no_bond() {
        let tree = Tree::new("plain");
        tree.write("class/net/eth0/bonding_slave/mii_status", "up");
        assert_eq!(read_from(&tree.0, "eth0"), None);
    }
}
