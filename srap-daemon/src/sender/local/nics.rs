//! This host's NICs as one list ([`LocalNics`]): every interface (a bond
//! included) that holds an address a flow could leave from, and every NIC
//! given with `--local-iface`, each with its addresses, NUMA node, link
//! state and, for the given ones, its RSS description. It is part of the
//! [`super::LocalHost`] snapshot, so a NIC going down or up, an address
//! added or removed, or a NIC added changes the snapshot and the plan is
//! made again. Which NIC holds a source address is answered here
//! ([`LocalNics::holding`]), once for the whole sender.
//!
//! `--local-nics` ([`LocalNicsPolicy`]) names how flows are spread over
//! the given ones: [`super::nic_choice`] turns this list into the rows the
//! connect hook chooses a NIC's address by.

use std::{collections::BTreeSet, net::IpAddr, sync::Arc};

use srap_common::rss::RssDescription;
use srap_host::{bond, link::Link, local, numa};
use tracing::debug;

use crate::sender::{
    ends::{LocalNicsPolicy, SourceRules},
    error::SenderError,
};

/// How often the running agent asks whether a NIC the hook chooses among
/// went down or came up, under `--local-nics numa|balance`
/// ([`LocalNics::links_moved`]): a new flow that picks a NIC whose link
/// just went down cannot connect, so the maps follow it well within the
/// second (the full read of the NICs stays at one a second).
pub const LINKS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// What the list is read with: the policy, and the NICs given with
/// `--local-iface` with the description each was read with at start
/// (`None` when it could not be described).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicSettings {
    pub policy: LocalNicsPolicy,
    pub given: Vec<GivenNic>,
    /// `--source-rules`: check the routing those NICs need, or install it.
    pub source_rules: SourceRules,
}

/// One `--local-iface`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenNic {
    pub name: String,
    pub description: Option<Arc<RssDescription>>,
}

/// This host's NICs, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalNics {
    pub nics: Vec<HostNic>,
}

/// One interface of this host as the sender sees it. Equal when every
/// field is: a NIC whose link, node or addresses change is a new snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNic {
    pub name: String,
    /// Its addresses a flow could leave from (not link-local), sorted.
    pub addresses: BTreeSet<IpAddr>,
    /// The NUMA node of its device (a bond's: its members' when they
    /// agree); `None` when unknown (virtual devices, `-1`), never node 0.
    pub node: Option<u32>,
    /// Operationally up (administratively up and its carrier on).
    pub up: bool,
    /// A bond's members in enslavement order (empty: not a bond).
    pub members: Vec<String>,
    /// Given with `--local-iface`: flows may be placed on its queues.
    pub given: bool,
    /// Its RSS description with its queue → CPU map, when given and
    /// described.
    pub description: Option<Arc<RssDescription>>,
}

impl HostNic {
    /// Its queue → CPU map, when described.
    pub fn queue_cpu(&self) -> Option<&[u32]> {
        self.description.as_ref()?.queue_cpu.as_deref()
    }
}

impl LocalNics {
    /// Reads this host's NICs now (blocking: `getifaddrs`, a netlink
    /// request per given NIC without an address, sysfs for the nodes).
    pub fn discover(settings: &NicSettings) -> Result<Self, SenderError> {
        let holders = local::holders()?;
        Ok(Self::from_parts(holders, settings, read_link, read_extras))
    }

    /// The list of `holders` and the given NICs, each completed by `link`
    /// (link state of a NIC that holds no address: `None` when it is gone)
    /// and `extras` (node, bond members): the pure part of
    /// [`LocalNics::discover`].
    fn from_parts(
        holders: Vec<local::Holder>,
        settings: &NicSettings,
        link: impl Fn(&str) -> Option<bool>,
        extras: impl Fn(&str) -> (Option<u32>, Vec<String>),
    ) -> Self {
        let mut nics: Vec<HostNic> = holders
            .into_iter()
            .map(|h| HostNic {
                name: h.name,
                addresses: h.addresses,
                node: None,
                up: h.up,
                members: Vec::new(),
                given: false,
                description: None,
            })
            .collect();
        for given in &settings.given {
            let at = match nics.iter().position(|n| n.name == given.name) {
                Some(at) => at,
                None => {
                    nics.push(HostNic {
                        name: given.name.clone(),
                        addresses: BTreeSet::new(),
                        node: None,
                        up: link(&given.name).unwrap_or(false),
                        members: Vec::new(),
                        given: false,
                        description: None,
                    });
                    nics.len() - 1
                }
            };
            nics[at].given = true;
            nics[at].description = given.description.clone();
        }
        for nic in &mut nics {
            (nic.node, nic.members) = extras(&nic.name);
        }
        nics.sort_by(|a, b| a.name.cmp(&b.name));
        Self { nics }
    }

    /// The NIC that holds `ip` (`None`: none of this host's).
    pub fn holding(&self, ip: IpAddr) -> Option<&HostNic> {
        self.nics.iter().find(|n| n.addresses.contains(&ip))
    }

    /// True when a given NIC's link is no longer as in this list (down or
    /// up): one netlink request per given NIC, for [`LINKS_EVERY`]. A NIC
    /// that cannot be read is no change.
    pub fn links_moved(&self) -> bool {
        self.nics
            .iter()
            .filter(|n| n.given)
            .any(|n| read_link(&n.name).is_some_and(|up| up != n.up))
    }

    /// The NIC named `name`.
    pub fn get(&self, name: &str) -> Option<&HostNic> {
        self.nics.iter().find(|n| n.name == name)
    }
}

/// Whether `iface` is running, by netlink; `None` when it is gone.
fn read_link(iface: &str) -> Option<bool> {
    match Link::by_name(iface) {
        Ok(link) => link.map(|l| l.running),
        Err(err) => {
            debug!("link state of {iface}: {err}");
            None
        }
    }
}

/// `iface`'s NUMA node and, for a bond, its members. A node that cannot
/// be read is unknown (logged at debug: this runs every second).
fn read_extras(iface: &str) -> (Option<u32>, Vec<String>) {
    let node = numa::iface_node(iface).unwrap_or_else(|err| {
        debug!("{err}");
        None
    });
    let members = bond::read(iface)
        .map(|b| b.members.into_iter().map(|m| m.name).collect())
        .unwrap_or_default();
    (node, members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(name: &str, addresses: &[&str], up: bool) -> local::Holder {
        local::Holder {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().expect("ip")).collect(),
            up,
        }
    }

    fn settings(given: &[&str]) -> NicSettings {
        NicSettings {
            policy: LocalNicsPolicy::Route,
            given: given
                .iter()
                .map(|name| GivenNic {
                    name: (*name).into(),
                    description: Some(Arc::new(srap_common::rss::embedded_default())),
                })
                .collect(),
            source_rules: SourceRules::Check,
        }
    }

    /// Nodes as a two-node host would have them: eth1 on node 1, bond0 of
    /// members on node 0, lo none.
    fn extras(name: &str) -> (Option<u32>, Vec<String>) {
        match name {
            "eth1" => (Some(1), Vec::new()),
            "bond0" => (Some(0), vec!["eth2".into(), "eth3".into()]),
            _ => (None, Vec::new()),
        }
    }

    fn nics(holders: Vec<local::Holder>, given: &[&str]) -> LocalNics {
        LocalNics::from_parts(holders, &settings(given), |_| Some(false), extras)
    }

    /// One list: each holder with its addresses, node and link, the given
    /// NICs marked and described, a given NIC with no address still
    /// listed; and each address's NIC found.
    #[test]
    fn every_holder_and_every_given_nic_is_one_row() {
        let list = nics(
            vec![
                holder("lo", &["127.0.0.1"], true),
                holder("eth1", &["10.1.0.1", "fd01::1"], true),
                holder("bond0", &["10.0.0.1"], false),
            ],
            &["eth1", "eth4"],
        );
        let names: Vec<&str> = list.nics.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["bond0", "eth1", "eth4", "lo"]);
        let eth1 = list.get("eth1").expect("eth1");
        assert_eq!((eth1.node, eth1.up, eth1.given), (Some(1), true, true));
        assert_eq!(eth1.queue_cpu().map(<[u32]>::len), Some(32));
        let bond = list.get("bond0").expect("bond0");
        assert_eq!((bond.node, bond.up, bond.given), (Some(0), false, false));
        assert_eq!(bond.members, ["eth2", "eth3"]);
        assert!(bond.description.is_none());
        let eth4 = list.get("eth4").expect("a given NIC without an address");
        assert!(eth4.addresses.is_empty() && eth4.given && !eth4.up);
        let lo = list.get("lo").expect("lo");
        assert_eq!(lo.node, None, "no node is unknown, not 0");
        let holding = |ip: &str| list.holding(ip.parse().expect("ip")).map(|n| &n.name[..]);
        assert_eq!(holding("fd01::1"), Some("eth1"));
        assert_eq!(holding("10.0.0.1"), Some("bond0"));
        assert_eq!(holding("10.9.9.9"), None);
    }

    /// The snapshot changes where the host did: a link down, an address
    /// gone, a NIC added; not when nothing did.
    #[test]
    fn a_link_an_address_or_a_nic_changes_the_list() {
        let before = || {
            vec![
                holder("eth0", &["10.0.0.1"], true),
                holder("eth1", &["10.1.0.1"], true),
            ]
        };
        let planned = nics(before(), &[]);
        assert_eq!(planned, nics(before(), &[]));
        let mut down = before();
        down[1].up = false;
        assert_ne!(planned, nics(down, &[]));
        let mut gone = before();
        gone[1].addresses.clear();
        assert_ne!(planned, nics(gone, &[]));
        let mut added = before();
        added.push(holder("eth2", &["10.2.0.1"], true));
        assert_ne!(planned, nics(added, &[]));
        let moved =
            LocalNics::from_parts(before(), &settings(&[]), |_| None, |_| (Some(1), vec![]));
        assert_ne!(planned, moved, "a node read differently");
    }
}
