//! The closed loop over a bond's members' own counters: the status shows
//! each bond the plan leaves by with the flows the driver's hash puts on
//! each member ([`add_bonds`]), and [`MemberLoop`] judges the hash by what
//! the members really sent; a bond they contradict is paused (its members
//! left out of the plan) until they agree again. The bond itself, as
//! planned for, is [`super::local::bond`]'s.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    time::Instant,
};

use srap_common::{bond::member_index, rss::FlowTuple};
use srap_status::sender::{BondRow, MemberRow, SenderFlowRow, SenderStatus};

use super::{binder::RunningBinder, local::bond::EgressBond};
use crate::sock_diag::Connections;

/// Adds the bonds `binder`'s plan leaves by to `status`, once each: every
/// member with the open flows (`status.flows`, already filled) the driver's
/// hash puts on it among the usable members, and its own counters.
pub fn add_bonds(status: &mut SenderStatus, binder: &RunningBinder, judged: &MemberLoop) {
    let mut seen = Vec::new();
    for bond in binder.plan.receivers.iter().filter_map(|r| r.bond.as_ref()) {
        if seen.contains(&bond.name) {
            continue;
        }
        seen.push(bond.name.clone());
        let row = bond_row(bond, status, judged);
        status.bonds.push(row);
    }
}

/// The index among `members` usable members the driver's hash gives an
/// open flow of the status (`None`: its addresses are unknown).
fn member_of(flow: &SenderFlowRow, members: u32) -> Option<usize> {
    let tuple = FlowTuple::from_sockets(flow.src?, flow.dst?).ok()?;
    member_index(&tuple, members).map(|i| i as usize)
}

fn bond_row(bond: &EgressBond, status: &SenderStatus, judged: &MemberLoop) -> BondRow {
    let usable = bond.usable();
    let mut flows = vec![0u32; usable.len()];
    for flow in &status.flows {
        if let Some(count) = member_of(flow, usable.len() as u32).and_then(|i| flows.get_mut(i)) {
            *count += 1;
        }
    }
    let members = bond
        .members
        .iter()
        .map(|(name, up)| MemberRow {
            name: name.clone(),
            usable: *up,
            flows: usable
                .iter()
                .position(|u| u == name)
                .and_then(|i| flows.get(i).copied())
                .unwrap_or(0),
            tx_bytes: srap_host::bond::tx_bytes(name).unwrap_or(0),
            tx_bytes_per_s: judged.rates.get(name).copied(),
        })
        .collect();
    BondRow {
        name: bond.name.clone(),
        mode: bond.mode.clone(),
        policy: bond.policy.clone(),
        balanced: bond.plan.is_some(),
        why_not: bond.why_not.clone(),
        counters: judged.last.get(&bond.name).cloned(),
        counters_judged: judged.judged.get(&bond.name).copied().unwrap_or(0),
        members,
    }
}

/// Bytes below which a member's share of an interval is not judged: a
/// few idle flows' keepalives say nothing.
const MIN_JUDGED_BYTES: u64 = 256 * 1024;
/// Contradicting samples in a row that pause a bond's balancing.
const PAUSE_AFTER: u32 = 2;
/// Agreeing samples in a row (paused) that resume it.
const RESUME_AFTER: u32 = 3;

/// What a bond's members' own counters say of the driver's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberVerdict {
    /// Every member that should have sent much did.
    Agreed,
    /// A member sent far less than the flows the hash puts on it: the
    /// driver does not choose as the model says (a policy or kernel the
    /// model does not know, a member list read wrong).
    Contradicted(String),
    /// Too little was sent to judge.
    Undecided,
}

/// Judges one interval: `expected[i]` is what the open flows the hash puts
/// on usable member `i` sent (their own `tcpi_bytes_acked` rise),
/// `observed[i]` what the member's own `tx_bytes` rose by. A member's
/// counter also counts headers and other traffic, so it only ever exceeds
/// its flows' payload when the model is right; half of it is the bar.
pub fn judge(names: &[&str], expected: &[u64], observed: &[u64]) -> MemberVerdict {
    let mut judged = false;
    for ((name, want), got) in names.iter().zip(expected).zip(observed) {
        if *want < MIN_JUDGED_BYTES {
            continue;
        }
        judged = true;
        if got.saturating_mul(2) < *want {
            return MemberVerdict::Contradicted(format!(
                "{name} sent {got} bytes while the flows the driver's hash puts on it sent {want}"
            ));
        }
    }
    if judged {
        MemberVerdict::Agreed
    } else {
        MemberVerdict::Undecided
    }
}

/// The closed loop over the members' counters: every status sample, each
/// bond's verdict ([`judge`]); two contradictions in a row pause its
/// balancing (new connections then get the receiver's placement only),
/// three agreements in a row resume it. Judged paused too: the hash still
/// says where the kernel's ports go. Its samples of each member's
/// `tx_bytes` also give the member's rate for the status.
#[derive(Debug, Default)]
pub struct MemberLoop {
    /// Each open flow's `tcpi_bytes_acked` at the previous sample.
    acked: HashMap<(SocketAddr, SocketAddr), u64>,
    /// Each member's `tx_bytes` at the previous sample, and when.
    tx: BTreeMap<String, (Instant, u64)>,
    /// Each member's bytes a second between the last two samples.
    rates: BTreeMap<String, u64>,
    streaks: BTreeMap<String, (u32, u32)>,
    /// Each bond's last verdict that judged, for the status.
    last: BTreeMap<String, String>,
    /// Each bond's samples that judged, for the status.
    judged: BTreeMap<String, u64>,
}

/// A bond's balancing paused (`Some(why)`) or resumed (`None`) by its
/// members' counters.
pub type PauseChange = (String, Option<String>);

impl MemberLoop {
    /// One sample of `status` (its flows and bonds filled in) and the
    /// namespace's connections, the bonds `paused` as the plan has them:
    /// the bonds to pause or resume.
    pub fn sample(
        &mut self,
        status: &SenderStatus,
        connections: &Connections,
        paused: &BTreeMap<String, String>,
    ) -> Vec<PauseChange> {
        let mut changes = Vec::new();
        for bond in &status.bonds {
            let rises = self.tx_rises(bond);
            let usable: Vec<&str> = bond
                .members
                .iter()
                .filter(|m| m.usable)
                .map(|m| m.name.as_str())
                .collect();
            let expected = self.expected(status, connections, usable.len() as u32);
            // A member first read now has no rise yet: nothing to judge.
            let observed: Option<Vec<u64>> = usable
                .iter()
                .map(|name| rises.get(*name).copied().flatten())
                .collect();
            let verdict = match observed {
                Some(observed) => judge(&usable, &expected, &observed),
                None => MemberVerdict::Undecided,
            };
            self.record(&bond.name, &verdict);
            let is_paused = paused.contains_key(&bond.name);
            if let Some(change) = self.follow(&bond.name, &verdict, is_paused) {
                changes.push((bond.name.clone(), change));
            }
        }
        self.acked = status
            .flows
            .iter()
            .filter_map(|f| Some((f.dst?, f.src?)))
            .filter_map(|key| Some((key, connections.get(&key)?.bytes_acked)))
            .collect();
        changes
    }

    /// Keeps a verdict that judged as the bond's last, and counts it.
    fn record(&mut self, bond: &str, verdict: &MemberVerdict) {
        let last = match verdict {
            MemberVerdict::Agreed => "agree".to_owned(),
            MemberVerdict::Contradicted(why) => format!("contradict: {why}"),
            MemberVerdict::Undecided => return,
        };
        self.last.insert(bond.to_owned(), last);
        *self.judged.entry(bond.to_owned()).or_default() += 1;
    }

    /// Each member's `tx_bytes` rise since the previous sample (`None` for
    /// one first read now), its rate kept for the status.
    fn tx_rises(&mut self, bond: &BondRow) -> BTreeMap<String, Option<u64>> {
        let now = Instant::now();
        bond.members
            .iter()
            .map(|m| {
                let before = self.tx.insert(m.name.clone(), (now, m.tx_bytes));
                let rise = before.map(|(then, bytes)| {
                    let rise = m.tx_bytes.saturating_sub(bytes);
                    let seconds = now.duration_since(then).as_secs_f64();
                    if seconds > 0.0 {
                        self.rates
                            .insert(m.name.clone(), (rise as f64 / seconds) as u64);
                    }
                    rise
                });
                (m.name.clone(), rise)
            })
            .collect()
    }

    /// Per usable member, what the open flows the hash puts there sent
    /// since the previous sample.
    fn expected(&self, status: &SenderStatus, connections: &Connections, members: u32) -> Vec<u64> {
        let mut expected = vec![0u64; members as usize];
        for flow in &status.flows {
            let (Some(src), Some(dst)) = (flow.src, flow.dst) else {
                continue;
            };
            let Some(now) = connections.get(&(dst, src)).map(|c| c.bytes_acked) else {
                continue;
            };
            // A flow the previous sample did not list opened since: all it
            // sent, it sent since (the list is every open steered flow).
            let before = self.acked.get(&(dst, src)).unwrap_or(&0);
            if let Some(slot) = member_of(flow, members).and_then(|i| expected.get_mut(i)) {
                *slot += now.saturating_sub(*before);
            }
        }
        expected
    }

    /// Counts `verdict` into the bond's streaks: `Some` when it pauses
    /// (`Some(why)`) or resumes (`None`) the bond, `paused` now or not.
    fn follow(
        &mut self,
        bond: &str,
        verdict: &MemberVerdict,
        paused: bool,
    ) -> Option<Option<String>> {
        let (agreeing, contradicting) = self.streaks.entry(bond.to_owned()).or_default();
        match verdict {
            MemberVerdict::Agreed => (*agreeing, *contradicting) = (*agreeing + 1, 0),
            MemberVerdict::Contradicted(_) => (*agreeing, *contradicting) = (0, *contradicting + 1),
            MemberVerdict::Undecided => return None,
        }
        match verdict {
            MemberVerdict::Contradicted(why) if !paused && *contradicting >= PAUSE_AFTER => {
                tracing::warn!("bond {bond}: member balancing paused: {why}");
                Some(Some(why.clone()))
            }
            MemberVerdict::Agreed if paused && *agreeing >= RESUME_AFTER => {
                tracing::info!("bond {bond}: the members' counters agree again: balancing resumes");
                Some(None)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::local::bond::{BondMembers, BondSettings};

    #[test]
    fn a_member_that_sends_less_than_its_flows_contradicts_the_hash() {
        let names = ["eth0", "eth1"];
        let mb = 1024 * 1024;
        assert_eq!(
            judge(&names, &[4 * mb, 4 * mb], &[4 * mb + 9000, 5 * mb]),
            MemberVerdict::Agreed
        );
        // Other traffic on a member with no flows is no contradiction.
        assert_eq!(
            judge(&names, &[8 * mb, 0], &[9 * mb, 3 * mb]),
            MemberVerdict::Agreed
        );
        assert!(matches!(
            judge(&names, &[4 * mb, 4 * mb], &[8 * mb, 10_000]),
            MemberVerdict::Contradicted(why) if why.starts_with("eth1 sent 10000 bytes")
        ));
        assert_eq!(judge(&names, &[1000, 0], &[0, 0]), MemberVerdict::Undecided);
    }

    #[test]
    fn two_contradictions_pause_and_three_agreements_resume() {
        let mut member_loop = MemberLoop::default();
        let mut settings = BondSettings::new(BondMembers::Balance);
        let bond = "bond0";
        let mut follow = |verdict: &MemberVerdict, settings: &mut BondSettings| {
            let paused = settings.paused.contains_key(bond);
            let change = member_loop.follow(bond, verdict, paused);
            if let Some(why) = change.clone() {
                settings.set_paused(bond, why);
            }
            change.is_some()
        };
        let no = MemberVerdict::Contradicted("eth1 sent nothing".into());
        assert!(!follow(&no, &mut settings));
        assert!(!follow(&MemberVerdict::Undecided, &mut settings));
        assert!(follow(&no, &mut settings), "the second in a row pauses");
        assert!(
            settings
                .paused
                .get(bond)
                .is_some_and(|why| why.contains("eth1"))
        );
        assert!(!follow(&MemberVerdict::Agreed, &mut settings));
        assert!(!follow(&MemberVerdict::Agreed, &mut settings));
        assert!(
            follow(&MemberVerdict::Agreed, &mut settings),
            "the third resumes"
        );
        assert_eq!(settings.paused.get(bond), None);
    }
}
