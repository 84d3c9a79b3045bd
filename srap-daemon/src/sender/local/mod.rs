//! This host, as the sender plans for it: the addresses its flows leave
//! from and the interfaces that hold them. The raw reads are
//! `srap_host`'s (the route lookup, `getifaddrs`, sysfs); this module
//! composes them into what the plan takes.
//!
//! * [`LocalHost`]: one snapshot of this host toward the receivers — for
//!   each, the route's source address, the other addresses an application
//!   may bind ([`ReceiverSources`]), and the bond the route leaves by
//!   ([`bond`]), and this host's NICs as one list ([`nics`]: addresses,
//!   NUMA node, link state, which NIC holds each address), and what the
//!   routing lacks for flows to follow their NIC's address ([`routing`]). The plan is
//!   made for one snapshot and keeps it; a re-plan is due when a new
//!   snapshot differs from it.
//! * [`nic_choice`]: the rows the connect hook chooses a NIC by under
//!   `--local-nics numa|balance`, and which NICs reach each receiver.
//! * [`nic`]: this host's own NIC, described as a receiver agent describes
//!   its own, when flows are placed on it (`--steer local|both`).
//! * [`source_models`]: which NIC's description each source address is
//!   placed with there (the NIC that holds it, or a named fallback).
//! * [`reader`]: the reader rows of `--local-placement reader` (each CPU's
//!   nearest offered slots, from this host's CPU topology).
//!
//! Nothing here knows a running binder: the loops that follow this host
//! (`super::local_end`, `super::replan`) stand on it.

pub mod bond;
pub mod link_watch;
pub mod nic;
pub mod nic_choice;
pub mod nics;
pub mod reader;
pub mod routing;
pub mod source_models;
pub mod source_rules;

use std::{collections::BTreeSet, net::IpAddr};

use srap_common::bond::MemberPlan;
use srap_host::{HostError, local, route};

use self::{
    bond::{BondSettings, EgressBond},
    nics::{HostNic, LocalNics, NicSettings},
    routing::RoutingReport,
};
use super::error::SenderError;

/// This host toward the receivers, one [`ReceiverSources`] per receiver
/// address in the order asked for, and its NICs: what a plan is made for.
/// Two snapshots are equal when they plan alike (see [`ReceiverSources`]'s
/// equality) and their NICs are the same (addresses, node, link state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalHost {
    pub toward: Vec<ReceiverSources>,
    pub nics: LocalNics,
    /// What the routing lacks for flows to leave and come back by the NIC
    /// of their address ([`routing`]), checked with every read when the
    /// policy places flows by NIC; what `--source-rules install` did
    /// ([`LocalHost::install_source_rules`]).
    pub routing: RoutingReport,
}

impl LocalHost {
    /// Reads this host now: toward each of `receivers`, the route's source
    /// address, the other local addresses an application may bind, and
    /// the bond the route leaves by (its members balanced unless `bonds`
    /// says not); and this host's NICs (`nics`: the given ones and their
    /// descriptions). Blocking (netlink, `getifaddrs`, sysfs).
    pub fn discover(
        receivers: &[IpAddr],
        bonds: &BondSettings,
        nics: &NicSettings,
    ) -> Result<Self, SenderError> {
        Self::read(receivers, bonds, nics, None)
    }

    /// Reads this host again for the plan made for `self`: as
    /// [`LocalHost::discover`], but a receiver with no route now (the NIC
    /// it was reached by went down, say) keeps the sources it was planned
    /// with, so the rest of the host, its NICs among them, is still
    /// followed. Connects toward it fail in the kernel whatever SRAP
    /// binds; its route coming back is a change like any other.
    pub fn rediscover(
        &self,
        receivers: &[IpAddr],
        bonds: &BondSettings,
        nics: &NicSettings,
    ) -> Result<Self, SenderError> {
        Self::read(receivers, bonds, nics, Some(self))
    }

    fn read(
        receivers: &[IpAddr],
        bonds: &BondSettings,
        nics: &NicSettings,
        planned: Option<&Self>,
    ) -> Result<Self, SenderError> {
        let kept = |r: IpAddr| planned?.toward.iter().find(|t| t.receiver == r);
        let toward = receivers
            .iter()
            .map(|&r| match (route::source_toward(r), kept(r)) {
                (Ok(route), _) => Ok(ReceiverSources {
                    receiver: r,
                    route,
                    others: local::addresses_toward(r)?,
                    bond: EgressBond::toward(r, bonds),
                }),
                (Err(HostError::NoRoute { .. }), Some(kept)) => {
                    tracing::debug!("no route to {r} now: its sources stay as planned");
                    Ok(kept.clone())
                }
                (Err(err), _) => Err(err.into()),
            })
            .collect::<Result<_, SenderError>>()?;
        let found = LocalNics::discover(nics)?;
        let routing = routing::report(nics.policy, nics.source_rules, &found, receivers);
        Ok(Self {
            toward,
            nics: found,
            routing,
        })
    }

    /// Installs the source rules `--source-rules install` asks for that this
    /// snapshot found missing, and takes in what the routing is then: the
    /// one change to the host a (re)plan makes, called by whoever plans
    /// after the read (the read itself changes nothing).
    pub fn install_source_rules(&mut self, nics: &NicSettings, receivers: &[IpAddr]) {
        source_rules::apply(&mut self.routing, nics.policy, &self.nics, receivers);
    }

    /// The NIC that holds the source address `ip`.
    pub fn holder_of(&self, ip: IpAddr) -> Option<&HostNic> {
        self.nics.holding(ip)
    }

    /// True when this host's NICs are no longer as planned (a link down or
    /// up, an address added or removed, a NIC added or gone, a node read
    /// differently): cheap enough to ask every second. A NIC that cannot
    /// be read now is no change (the full read at the interval reports it).
    pub fn nics_moved(&self, settings: &NicSettings) -> bool {
        LocalNics::discover(settings).is_ok_and(|now| now != self.nics)
    }

    /// True when a bond this snapshot leaves by is no longer as it was (a
    /// member down or up, a port out of the aggregator, its balancing
    /// paused): cheap enough to ask every second, between the full reads.
    pub fn bonds_moved(&self, bonds: &BondSettings) -> bool {
        self.toward
            .iter()
            .filter(|r| r.bond.is_some())
            .any(|r| EgressBond::toward(r.receiver, bonds) != r.bond)
    }
}

/// One receiver and where flows to it may come from.
#[derive(Debug, Clone)]
pub struct ReceiverSources {
    pub receiver: IpAddr,
    /// The route's source address toward it.
    pub route: IpAddr,
    /// Other local addresses an application may bind (other families are
    /// ignored).
    pub others: Vec<IpAddr>,
    /// The bond the route leaves by, if it is one: with a member plan, each
    /// slot's ports also leave on one member.
    pub bond: Option<EgressBond>,
}

impl ReceiverSources {
    /// A receiver reached from its route's source address only.
    pub fn routed(receiver: IpAddr, route: IpAddr) -> Self {
        Self {
            receiver,
            route,
            others: Vec::new(),
            bond: None,
        }
    }

    /// The members to balance flows to this receiver over, if any.
    pub fn members(&self) -> Option<MemberPlan> {
        self.bond.as_ref().and_then(|b| b.plan)
    }

    /// Route source first, then the other addresses of its family, once each.
    pub fn sources(&self) -> Vec<IpAddr> {
        let mut seen = BTreeSet::new();
        std::iter::once(self.route)
            .chain(self.others.iter().copied())
            .filter(|ip| ip.is_ipv4() == self.receiver.is_ipv4() && seen.insert(*ip))
            .collect()
    }

    /// The addresses a table is planned for, as a set.
    fn source_set(&self) -> BTreeSet<IpAddr> {
        self.sources().into_iter().collect()
    }
}

/// Equal as the plan sees them: the same receiver, route source, bond,
/// and set of addresses of the receiver's family. The order `getifaddrs`
/// lists addresses in, and addresses of the other family, are no change.
impl PartialEq for ReceiverSources {
    fn eq(&self, other: &Self) -> bool {
        self.receiver == other.receiver
            && self.route == other.route
            && self.bond == other.bond
            && self.source_set() == other.source_set()
    }
}

impl Eq for ReceiverSources {}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    /// A snapshot changes when an address of the family comes or goes, or
    /// the route's source moves; not when discovery lists the same
    /// addresses in another order or one of the other family appears.
    #[test]
    fn snapshots_differ_only_where_the_plan_would() {
        let ip = |last: u8| IpAddr::from([10, 0, 0, last]);
        let planned = ReceiverSources {
            others: vec![ip(2), ip(3)],
            ..ReceiverSources::routed(ip(9), ip(1))
        };
        let reordered = ReceiverSources {
            others: vec![ip(3), ip(2), Ipv6Addr::LOCALHOST.into()],
            ..planned.clone()
        };
        assert_eq!(planned, reordered);
        let added = ReceiverSources {
            others: vec![ip(2), ip(3), ip(4)],
            ..planned.clone()
        };
        assert_ne!(planned, added);
        let rerouted = ReceiverSources {
            route: ip(2),
            others: vec![ip(1), ip(3)],
            ..planned.clone()
        };
        assert_ne!(planned, rerouted, "the same set from another route source");
        let one = LocalHost {
            toward: vec![planned.clone()],
            ..LocalHost::default()
        };
        let two = LocalHost {
            toward: vec![planned.clone(), planned],
            ..LocalHost::default()
        };
        assert_ne!(one, two);
    }
}
