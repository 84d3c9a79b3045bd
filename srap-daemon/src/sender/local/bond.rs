//! The bond a receiver's flows leave by: found on the route toward it,
//! read from sysfs (`srap_host::bond`) every second, and planned for when
//! the source port decides the member (`layer3+4` in `balance-xor` or
//! `802.3ad`; [`MemberPlan`]). A member going down or up, or a port leaving
//! the aggregator, changes the usable list: this host's snapshot differs
//! from the plan's and the agent re-plans
//! ([`crate::sender::replan::replan_if_sources_changed`]), so new
//! connections balance over the members that can send. The members' own
//! counters judge the driver's hash
//! ([`crate::sender::bond_members::MemberLoop`]); a bond they contradict is
//! paused in [`BondSettings`], and re-planned without its members until
//! they agree again.

use std::{collections::BTreeMap, net::IpAddr};

use srap_common::bond::MemberPlan;

pub use crate::sender::choices::BondMembers;
use srap_host::bond::Bond;

/// How the plan treats bonds: `--bond-members`, and the bonds whose
/// members' counters paused their balancing, with why (kept with the
/// options, so every re-plan leaves their members out until cleared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BondSettings {
    pub members: BondMembers,
    pub paused: BTreeMap<String, String>,
}

impl BondSettings {
    /// The settings of `--bond-members`, nothing paused.
    pub fn new(members: BondMembers) -> Self {
        Self {
            members,
            paused: BTreeMap::new(),
        }
    }

    /// Pauses (`Some(why)`) or resumes (`None`) `bond`'s balancing.
    pub fn set_paused(&mut self, bond: &str, why: Option<String>) {
        match why {
            Some(why) => self.paused.insert(bond.to_owned(), why),
            None => self.paused.remove(bond),
        };
    }
}

/// A bond on the route toward a receiver, as the plan was built for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressBond {
    pub name: String,
    pub mode: String,
    pub policy: String,
    /// Every member in enslavement order, with whether it can send now.
    pub members: Vec<(String, bool)>,
    /// The balancing planned (`None`: see `why_not`).
    pub plan: Option<MemberPlan>,
    /// Why the members are not balanced, when they are not.
    pub why_not: Option<String>,
}

impl EgressBond {
    /// The bond the route toward `dst` leaves by, if it is one; its plan
    /// left out with `--bond-members ignore`, and while the members'
    /// counters have it paused.
    pub fn toward(dst: IpAddr, settings: &BondSettings) -> Option<Self> {
        let iface = srap_host::route::egress_iface(dst)?;
        let mut bond = Self::of(&srap_host::bond::read(&iface)?);
        let off = match settings.members {
            BondMembers::Ignore => Some("--bond-members ignore".to_owned()),
            BondMembers::Balance => settings
                .paused
                .get(&bond.name)
                .map(|why| format!("paused: {why}")),
        };
        if bond.plan.is_some()
            && let Some(why) = off
        {
            bond.plan = None;
            bond.why_not = Some(why);
        }
        Some(bond)
    }

    /// What a plan makes of `bond`.
    pub fn of(bond: &Bond) -> Self {
        let usable: Vec<&str> = bond.usable().iter().map(|m| m.name.as_str()).collect();
        let count = usable.len() as u32;
        let why_not = bond.why_not_port().or_else(|| match count {
            0 => Some("no member can send".into()),
            1 => Some("one usable member: nothing to balance".into()),
            n if n > MemberPlan::MOST => Some(format!(
                "{n} usable members: more than the {} a plan balances",
                MemberPlan::MOST
            )),
            _ => None,
        });
        Self {
            name: bond.name.clone(),
            mode: bond.mode.clone(),
            policy: bond.policy_name.clone(),
            members: bond
                .members
                .iter()
                .map(|m| (m.name.clone(), usable.contains(&m.name.as_str())))
                .collect(),
            plan: why_not.is_none().then(|| MemberPlan::new(count)).flatten(),
            why_not,
        }
    }

    /// The usable members in enslavement order: index `i` of the driver's
    /// `hash % n` is `usable()[i]`.
    pub fn usable(&self) -> Vec<&str> {
        self.members
            .iter()
            .filter(|(_, up)| *up)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// One line for the log and the plan summary.
    pub fn describe(&self) -> String {
        let usable = self.usable();
        let state = match (&self.plan, &self.why_not) {
            (Some(plan), _) if plan.linear_bits().is_some() => {
                format!("flows balanced over {} members", plan.members())
            }
            (Some(plan), _) => format!(
                "flows balanced over {n} members toward named ports (--port) only: the \
                 member is the hash modulo {n}, not linear in the port",
                n = plan.members()
            ),
            (None, Some(why)) => format!("members not balanced: {why}"),
            (None, None) => "members not balanced".into(),
        };
        format!(
            "egress {} ({}, {}): usable {} of {} [{}]; {state}",
            self.name,
            self.mode,
            self.policy,
            usable.len(),
            self.members.len(),
            usable.join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use srap_host::bond::{Bond, Member};

    use super::*;

    fn bond(mode: &str, policy: &str, up: &[bool]) -> Bond {
        Bond {
            name: "bond0".into(),
            mode: mode.into(),
            policy_name: policy.into(),
            policy: srap_common::bond::HashPolicy::parse(policy),
            active_aggregator: None,
            members: up
                .iter()
                .enumerate()
                .map(|(i, up)| Member {
                    name: format!("eth{i}"),
                    up: *up,
                    aggregator: None,
                    port_state: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_layer34_bond_of_four_is_balanced_by_bits_and_of_three_by_named_ports() {
        let four = EgressBond::of(&bond("balance-xor", "layer3+4 1", &[true; 4]));
        assert_eq!(four.plan.map(MemberPlan::members), Some(4));
        assert_eq!(four.usable(), ["eth0", "eth1", "eth2", "eth3"]);
        let three = EgressBond::of(&bond(
            "balance-xor",
            "layer3+4 1",
            &[true, false, true, true],
        ));
        assert_eq!(three.plan.map(MemberPlan::members), Some(3));
        assert_eq!(three.plan.and_then(MemberPlan::linear_bits), None);
        assert!(
            three.describe().contains("modulo 3"),
            "{}",
            three.describe()
        );
        assert_eq!(three.usable(), ["eth0", "eth2", "eth3"]);
        let two = EgressBond::of(&bond(
            "balance-xor",
            "layer3+4 1",
            &[false, true, false, true],
        ));
        assert_eq!(two.plan.map(MemberPlan::members), Some(2));
    }

    #[test]
    fn a_bond_whose_port_does_not_decide_says_why() {
        let l23 = EgressBond::of(&bond("balance-xor", "layer2+3 2", &[true; 2]));
        assert_eq!(l23.plan, None);
        assert!(
            l23.describe().contains("hashes no port"),
            "{}",
            l23.describe()
        );
        let backup = EgressBond::of(&bond("active-backup", "layer3+4 1", &[true; 2]));
        assert!(backup.why_not.is_some());
    }
}
