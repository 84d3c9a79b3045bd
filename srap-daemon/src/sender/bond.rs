//! The bond a receiver's flows leave by: found on the route toward it,
//! read from sysfs (`srap_host::bond`) at every `--interval`, and planned
//! for when the source port decides the member (`layer3+4` in
//! `balance-xor` or `802.3ad`) over a power-of-two count of usable members
//! ([`MemberPlan`]). A member going down or up, or a port leaving the
//! aggregator, changes the usable list: the sources differ from the plan's
//! and the agent re-plans ([`super::replan_if_sources_changed`]), so new
//! connections balance over the members that can send.

use std::{collections::BTreeMap, net::IpAddr, sync::Mutex, time::Instant};

use srap_common::{
    bond::{MemberPlan, member_index},
    rss::FlowTuple,
};
use srap_host::bond::Bond;
use srap_status::sender::{BondRow, MemberRow, SenderStatus};

use super::RunningBinder;

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
    /// The bond the route toward `dst` leaves by, if it is one.
    pub fn toward(dst: IpAddr) -> Option<Self> {
        let iface = srap_host::route::egress_iface(dst)?;
        srap_host::bond::read(&iface).map(|bond| Self::of(&bond))
    }

    /// What a plan makes of `bond`.
    pub fn of(bond: &Bond) -> Self {
        let usable: Vec<&str> = bond.usable().iter().map(|m| m.name.as_str()).collect();
        let count = usable.len() as u32;
        let why_not = bond.why_not_port().or_else(|| match count {
            0 => Some("no member can send".into()),
            1 => Some("one usable member: nothing to balance".into()),
            n if !n.is_power_of_two() => Some(format!(
                "{n} usable members: the member index is the hash modulo {n}, not linear in \
                 the port; flows get receiver CPUs only"
            )),
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
            (Some(plan), _) => format!("flows balanced over {} members", plan.members()),
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

/// Each member's `tx_bytes` at the previous status sample: a member's
/// rate is its own counter's rise, never SRAP's estimate.
#[derive(Debug, Default)]
pub struct MemberRates {
    last: Mutex<BTreeMap<String, (Instant, u64)>>,
}

impl MemberRates {
    /// `member`'s bytes a second since the previous call for it.
    fn rate(&self, member: &str, tx_bytes: u64) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last.insert(member.to_owned(), (now, tx_bytes))?;
        let seconds = now.duration_since(before.0).as_secs_f64();
        (seconds > 0.0).then(|| (tx_bytes.saturating_sub(before.1) as f64 / seconds) as u64)
    }
}

/// Adds the bonds `binder`'s plan leaves by to `status`, once each: every
/// member with the open flows (`status.flows`, already filled) the driver's
/// hash puts on it among the usable members, and its own counters.
pub fn add_bonds(status: &mut SenderStatus, binder: &RunningBinder, rates: &MemberRates) {
    let mut seen = Vec::new();
    for bond in binder.plan.receivers.iter().filter_map(|r| r.bond.as_ref()) {
        if seen.contains(&bond.name) {
            continue;
        }
        seen.push(bond.name.clone());
        let row = bond_row(bond, status, rates);
        status.bonds.push(row);
    }
}

fn bond_row(bond: &EgressBond, status: &SenderStatus, rates: &MemberRates) -> BondRow {
    let usable = bond.usable();
    let mut flows = vec![0u32; usable.len()];
    for flow in &status.flows {
        let (Some(src), Some(dst)) = (flow.src, flow.dst) else {
            continue;
        };
        let index = FlowTuple::from_sockets(src, dst)
            .ok()
            .and_then(|tuple| member_index(&tuple, usable.len() as u32));
        if let Some(count) = index.and_then(|i| flows.get_mut(i as usize)) {
            *count += 1;
        }
    }
    let members = bond
        .members
        .iter()
        .map(|(name, up)| {
            let tx_bytes = srap_host::bond::tx_bytes(name).unwrap_or(0);
            MemberRow {
                name: name.clone(),
                usable: *up,
                flows: usable
                    .iter()
                    .position(|u| u == name)
                    .and_then(|i| flows.get(i).copied())
                    .unwrap_or(0),
                tx_bytes,
                tx_bytes_per_s: rates.rate(name, tx_bytes),
            }
        })
        .collect();
    BondRow {
        name: bond.name.clone(),
        mode: bond.mode.clone(),
        policy: bond.policy.clone(),
        balanced: bond.plan.is_some(),
        why_not: bond.why_not.clone(),
        members,
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
    fn a_layer34_bond_of_four_is_balanced_and_of_three_is_not() {
        let four = EgressBond::of(&bond("balance-xor", "layer3+4 1", &[true; 4]));
        assert_eq!(four.plan.map(MemberPlan::members), Some(4));
        assert_eq!(four.usable(), ["eth0", "eth1", "eth2", "eth3"]);
        let three = EgressBond::of(&bond(
            "balance-xor",
            "layer3+4 1",
            &[true, false, true, true],
        ));
        assert_eq!(three.plan, None);
        assert!(
            three
                .why_not
                .as_deref()
                .is_some_and(|w| w.contains("modulo 3"))
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
