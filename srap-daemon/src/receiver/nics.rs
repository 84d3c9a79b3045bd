//! The NICs a receiver serves (`--iface`, once per NIC) and where its
//! listeners accept: what [`ReceiverNics`] tells senders of protocol 8,
//! and the per-NIC rows of the status.
//!
//! The first NIC is the one the rest of the receiver is about: its
//! description is the one [`RssUpdate`](srap_common::wire::RssUpdate)
//! serves (all a peer of protocol 7 or older learns), its observer closes
//! the loop, its grant is what a peer of protocol 8 or older holds. Every
//! NIC's CPUs are granted on their own ([`super::grants::per_nic`], told
//! to senders of protocol 9). Every further NIC gets its own
//! description watcher and its own verifier ([`Monitor`] that publishes
//! nothing to senders), so its landings are judged against its own table
//! (each observer keeps only the flows to its own interface's addresses,
//! whatever its hook).
//!
//! Where a port is accepted is read from the kernel (sock_diag's listening
//! sockets), never guessed from configuration: [`accepting`] maps each
//! listener to the served addresses it accepts on.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
    time::Duration,
};

use srap_common::{
    rss::RssDescription,
    wire::{
        LandingReport, MAX_LISTEN_PORTS, MAX_NIC_ADDRS, NicInfo, NicLink, PortAcceptance,
        ReceiverNics,
    },
};
use srap_host::{cpus::Offer, link::Link};
use srap_status::{ListenerRow, NicRow, Status};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{info, warn};

use super::{
    monitor::{self, Monitor},
    server::Server,
    source::{self, LearnedKey, ServedDescription, Source},
};
use crate::{
    observer::HookChoice,
    sock_diag::{Listener, TcpDiag},
};

/// What the kernel says of one served NIC now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicFacts {
    pub name: String,
    /// 0 when the interface is not there.
    pub ifindex: u32,
    /// Not link-local, ascending, at most [`MAX_NIC_ADDRS`].
    pub addrs: Vec<IpAddr>,
    pub numa_node: Option<u32>,
    pub link: NicLink,
    pub speed_mbps: Option<u32>,
}

/// Reads `names` from this namespace (blocking: netlink, getifaddrs, sysfs).
pub fn read_facts(names: &[String]) -> Vec<NicFacts> {
    let holders = srap_host::local::holders().unwrap_or_else(|err| {
        warn!("reading this host's addresses: {err}");
        Vec::new()
    });
    names
        .iter()
        .map(|name| {
            let link = Link::by_name(name).ok().flatten();
            let addrs: Vec<IpAddr> = holders
                .iter()
                .find(|h| &h.name == name)
                .map(|h| h.addresses.iter().copied().take(MAX_NIC_ADDRS).collect())
                .unwrap_or_default();
            NicFacts {
                name: name.clone(),
                ifindex: link.as_ref().map_or(0, |l| l.index),
                addrs,
                numa_node: srap_host::numa::iface_node(name).ok().flatten(),
                link: match &link {
                    Some(l) if l.running => NicLink::Up,
                    Some(_) => NicLink::Down,
                    None => NicLink::Unknown,
                },
                speed_mbps: link.as_ref().and_then(speed_of),
            }
        })
        .collect()
}

/// `/sys/class/net/NAME/speed` when `/sys` shows this namespace and the
/// driver says (-1, or an error while the link is down, is unknown).
fn speed_of(link: &Link) -> Option<u32> {
    let dir = link.sysfs_dir().ok()?;
    let text = std::fs::read_to_string(dir.join("speed")).ok()?;
    text.trim().parse::<u32>().ok().filter(|s| *s > 0)
}

/// Per listening port, the served addresses that accept it: a listener on
/// a wildcard accepts on every served address of its family (`::` without
/// `IPV6_V6ONLY` on IPv4's too), one bound to an address only there, and
/// one bound to a device (`SO_BINDTODEVICE`) only on that NIC's. Ports no
/// served address accepts are left out; at most [`MAX_LISTEN_PORTS`],
/// the lowest.
pub fn accepting(nics: &[NicFacts], listeners: &[Listener]) -> Vec<PortAcceptance> {
    let mut ports = BTreeMap::<u16, BTreeSet<IpAddr>>::new();
    for listener in listeners {
        let bound = listener.addr.ip();
        let accepted = nics
            .iter()
            .filter(|nic| listener.ifindex == 0 || nic.ifindex == listener.ifindex)
            .flat_map(|nic| nic.addrs.iter().copied())
            .filter(|addr| match (bound.is_unspecified(), bound) {
                (false, _) => *addr == bound,
                (true, IpAddr::V4(_)) => addr.is_ipv4(),
                (true, IpAddr::V6(_)) => !listener.v6only || addr.is_ipv6(),
            });
        ports
            .entry(listener.addr.port())
            .or_default()
            .extend(accepted);
    }
    ports
        .into_iter()
        .filter(|(_, addrs)| !addrs.is_empty())
        .take(MAX_LISTEN_PORTS)
        .map(|(port, addrs)| PortAcceptance {
            port,
            addrs: addrs.into_iter().collect(),
        })
        .collect()
}

/// A NIC after the first: its own description and verifier.
struct FurtherNic {
    name: String,
    /// `None`: its RSS could not be read at start (the reason in `error`).
    updates: Option<watch::Receiver<ServedDescription>>,
    watcher: Option<JoinHandle<()>>,
    error: Option<String>,
    monitor: Monitor,
    status: watch::Receiver<Arc<Status>>,
}

impl Drop for FurtherNic {
    fn drop(&mut self) {
        if let Some(task) = &self.watcher {
            task.abort();
        }
    }
}

/// What the receiver's verifiers are started with, for every NIC alike.
#[derive(Debug, Clone)]
pub struct Verify<'a> {
    pub hook: Option<HookChoice>,
    pub cgroup: Option<&'a std::path::Path>,
    pub interval: Duration,
    pub poll: Duration,
}

/// Every NIC served, the listeners, and what senders were last told.
pub struct NicSet {
    names: Vec<String>,
    further: Vec<FurtherNic>,
    offer: Offer,
    diag: Option<TcpDiag>,
    listen_error: Option<String>,
    facts: Vec<NicFacts>,
    listeners: Vec<PortAcceptance>,
}

impl NicSet {
    /// Starts a description watcher and a verifier on every NIC after the
    /// first of `names` (`--iface` order), each watching the file of
    /// `files` in its place (`--rss`; the first NIC's is the receiver's
    /// own) or else discovering its device's RSS.
    pub fn start(
        names: &[String],
        files: &[std::path::PathBuf],
        verify: &Verify<'_>,
        offer: Offer,
    ) -> Self {
        let further = names
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, n)| start_further(n, files.get(i).map(|f| f.as_path()), verify))
            .collect();
        let (diag, listen_error) = match TcpDiag::loaded() {
            Ok(diag) => (Some(diag), None),
            Err(err) => {
                warn!("{err}: senders are told no listening port");
                (None, Some(err.to_string()))
            }
        };
        Self {
            names: names.to_vec(),
            further,
            offer,
            diag,
            listen_error,
            facts: Vec::new(),
            listeners: Vec::new(),
        }
    }

    /// Reads the NICs and listeners again and tells senders when any of it
    /// changed, with the first NIC's description and its verifier's report
    /// (`None`: no observer). Cheap enough to run every few hundred
    /// milliseconds.
    pub fn refresh(
        &mut self,
        server: &Server,
        first: &ServedDescription,
        landings: Option<LandingReport>,
    ) {
        self.facts = tokio::task::block_in_place(|| read_facts(&self.names));
        self.listeners = match &self.diag {
            Some(diag) => match tokio::task::block_in_place(|| diag.tcp_listeners()) {
                Ok(listeners) => {
                    if self.listen_error.take().is_some() {
                        info!("reading the listening sockets works again");
                    }
                    accepting(&self.facts, &listeners)
                }
                Err(err) => {
                    let text = format!("reading the listening sockets (sock_diag): {err}");
                    if self.listen_error.as_deref() != Some(&text) {
                        warn!("{text}; telling senders no port until it works");
                        self.listen_error = Some(text);
                    }
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        server.offer_nics(
            self.names.first().map_or("", String::as_str),
            self.further_offers(),
        );
        server.publish_nics(self.report(first, landings));
    }

    /// Every NIC after the first, with the CPUs it offers in tiers (none
    /// while its RSS could not be read): what its grants share out.
    fn further_offers(&self) -> Vec<(String, Vec<Vec<u32>>)> {
        self.further
            .iter()
            .map(|nic| {
                let tiers = nic
                    .updates
                    .as_ref()
                    .map(|u| self.offer.tiers(&u.borrow().description))
                    .unwrap_or_default();
                (nic.name.clone(), tiers)
            })
            .collect()
    }

    /// Samples every further NIC's verifier (the first's is the
    /// receiver's own monitor).
    pub fn sample(&mut self, server: &Server) {
        for nic in &mut self.further {
            let published = nic
                .updates
                .as_ref()
                .map_or_else(placeholder, |u| u.borrow().clone());
            nic.monitor.sample_quietly(server, &published);
        }
    }

    /// What senders of protocol 8 are told.
    fn report(&self, first: &ServedDescription, landings: Option<LandingReport>) -> ReceiverNics {
        let mut nics = Vec::with_capacity(self.facts.len());
        for (i, facts) in self.facts.iter().enumerate() {
            let (description, verifier) = if i == 0 {
                (Some(first.description.clone()), landings)
            } else {
                let Some(nic) = self.further.get(i - 1) else {
                    continue;
                };
                let served = nic.updates.as_ref().map(|u| u.borrow().clone());
                let status = nic.status.borrow();
                let verifier = status.observer.hook.as_ref().map(|_| LandingReport {
                    version: served.as_ref().map_or(0, |s| s.version),
                    verdict: status.landings.verdict,
                    matched: status.landings.matched,
                    judged: status.landings.judged,
                });
                (served.map(|s| s.description), verifier)
            };
            nics.push(NicInfo {
                name: facts.name.clone(),
                addrs: facts.addrs.clone(),
                numa_node: facts.numa_node,
                link: facts.link,
                speed_mbps: facts.speed_mbps,
                cpus: description
                    .as_ref()
                    .map(|d| self.offered(d))
                    .unwrap_or_default(),
                description: description.as_ref().map(Into::into),
                verifier,
            });
        }
        ReceiverNics {
            nics,
            ports: self.listeners.clone(),
        }
    }

    /// The CPUs offered through a NIC of `description`: those its queues
    /// reach, within `--cpus`.
    fn offered(&self, description: &RssDescription) -> Vec<u32> {
        let mut cpus: Vec<u32> = self
            .offer
            .tiers(description)
            .into_iter()
            .flatten()
            .collect();
        cpus.sort_unstable();
        cpus
    }

    /// The status rows: each NIC with its flows, CPUs and rate (the first
    /// from the receiver's own `first` status), and the listeners.
    pub fn rows(
        &self,
        first: &Status,
        served: &ServedDescription,
    ) -> (Vec<NicRow>, Vec<ListenerRow>) {
        let mut rows = Vec::with_capacity(self.facts.len());
        for (i, facts) in self.facts.iter().enumerate() {
            let (status, description, error) = if i == 0 {
                (
                    first.clone(),
                    Some(served.clone()),
                    first.observer.error.clone(),
                )
            } else {
                let Some(nic) = self.further.get(i - 1) else {
                    continue;
                };
                let status = (**nic.status.borrow()).clone();
                let description = nic.updates.as_ref().map(|u| u.borrow().clone());
                let error = nic.error.clone().or_else(|| status.observer.error.clone());
                (status, description, error)
            };
            let mut cpus: Vec<u32> = status.flows.iter().map(|f| f.cpu).collect();
            cpus.sort_unstable();
            cpus.dedup();
            rows.push(NicRow {
                name: facts.name.clone(),
                addrs: facts.addrs.clone(),
                numa_node: facts.numa_node,
                link: facts.link,
                speed_mbps: facts.speed_mbps,
                rss_version: description.as_ref().map(|d| d.version),
                error,
                hook: status.observer.hook.clone(),
                landings: status.landings,
                active_flows: status.active_flows,
                gbps: status.gbps,
                cpus,
                offered: description
                    .map(|d| self.offered(&d.description))
                    .unwrap_or_default(),
            });
        }
        let listeners = self
            .listeners
            .iter()
            .map(|p| ListenerRow {
                port: p.port,
                addrs: p.addrs.clone(),
            })
            .collect();
        (rows, listeners)
    }
}

/// A further NIC's description watcher (of `file` when given) and
/// verifier.
fn start_further(name: &str, file: Option<&std::path::Path>, verify: &Verify<'_>) -> FurtherNic {
    let source = match file {
        Some(file) => Source::File(file.to_path_buf()),
        None => Source::Iface(name.to_owned()),
    };
    let (updates, watcher, error) =
        match source::watch_learning(source, verify.poll, LearnedKey::default()) {
            Ok((updates, watcher)) => (Some(updates), Some(watcher), None),
            Err(err) => {
                warn!("{name}: {err}; describing it to senders without its RSS");
                (None, None, Some(err.to_string()))
            }
        };
    let (mut monitor, status) = Monitor::start(
        name,
        verify.hook,
        verify.cgroup,
        verify.interval,
        LearnedKey::default(),
    );
    monitor.set_receive_cpu(monitor::receive_cpu_of(name, file.is_some()));
    FurtherNic {
        name: name.to_owned(),
        updates,
        watcher,
        error,
        monitor,
        status,
    }
}

/// What a NIC without a description is verified against: nothing (version
/// 0, which the monitor models as no model, so its verdict stays unknown).
fn placeholder() -> ServedDescription {
    ServedDescription::new(0, srap_common::rss::embedded_default())
}

impl std::fmt::Debug for NicSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NicSet")
            .field("names", &self.names)
            .field(
                "further",
                &self.further.iter().map(|n| &n.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn nic(name: &str, ifindex: u32, addrs: &[&str]) -> NicFacts {
        NicFacts {
            name: name.into(),
            ifindex,
            addrs: addrs.iter().map(|a| a.parse().expect("address")).collect(),
            ..NicFacts::default()
        }
    }

    fn listener(addr: &str, v6only: bool, ifindex: u32) -> Listener {
        Listener {
            addr: addr.parse::<SocketAddr>().expect("address"),
            v6only,
            ifindex,
        }
    }

    fn ips(addrs: &[&str]) -> Vec<IpAddr> {
        addrs.iter().map(|a| a.parse().expect("address")).collect()
    }

    fn served() -> Vec<NicFacts> {
        vec![
            nic("eth0", 2, &["10.0.0.2", "fd00::2"]),
            nic("eth1", 3, &["10.0.1.2"]),
        ]
    }

    #[test]
    fn a_wildcard_accepts_on_every_address_of_its_family() {
        let ports = accepting(&served(), &[listener("0.0.0.0:5201", false, 0)]);
        assert_eq!(
            ports,
            [PortAcceptance {
                port: 5201,
                addrs: ips(&["10.0.0.2", "10.0.1.2"])
            }]
        );
        let dual = accepting(&served(), &[listener("[::]:80", false, 0)]);
        assert_eq!(dual[0].addrs, ips(&["10.0.0.2", "10.0.1.2", "fd00::2"]));
        let v6 = accepting(&served(), &[listener("[::]:80", true, 0)]);
        assert_eq!(v6[0].addrs, ips(&["fd00::2"]));
    }

    #[test]
    fn a_bound_listener_accepts_only_on_its_address_or_device() {
        let one = accepting(&served(), &[listener("10.0.1.2:5201", false, 0)]);
        assert_eq!(one[0].addrs, ips(&["10.0.1.2"]));
        let device = accepting(&served(), &[listener("0.0.0.0:22", false, 3)]);
        assert_eq!(device[0].addrs, ips(&["10.0.1.2"]));
        // Two listeners on one port, each on its address: both accept.
        let both = accepting(
            &served(),
            &[
                listener("10.0.0.2:443", false, 0),
                listener("10.0.1.2:443", false, 0),
            ],
        );
        assert_eq!(both[0].addrs, ips(&["10.0.0.2", "10.0.1.2"]));
    }

    #[test]
    fn a_port_no_served_address_accepts_is_left_out() {
        let ports = accepting(
            &served(),
            &[
                listener("127.0.0.1:7447", false, 0),
                listener("192.0.2.1:9", false, 0),
            ],
        );
        assert!(ports.is_empty(), "{ports:?}");
    }
}
