//! One followed receiver agent's I/O: its rows of the binder's maps (its
//! grant, its part of the plan and its demand) and its client; what it
//! holds is the loop's [`Peer`] state.

use std::{collections::BTreeSet, time::Duration};

use srap_common::wire::{CpuGrant, DemandReport, LandingReport, LandingVerdict, PlanReport};
use tracing::{info, warn};

use super::machine::Peer;
use crate::{
    receiver_client::{self, PeerHandle},
    sender::{binder::RunningBinder, grant},
};

/// Receiver `peer`'s I/O: the binder's maps and its client.
pub struct Link<'a> {
    pub peer: &'a Peer,
    pub handle: &'a PeerHandle,
}

impl Link<'_> {
    /// Puts this receiver's grants into its rows of the grant map, each
    /// row with the grant of the NIC its address is on
    /// ([`Peer::row_grants`]), and says them.
    pub fn take_grant(&self, binder: &mut RunningBinder) {
        if self.peer.granted.is_none() && self.peer.nic_granted.is_none() {
            return;
        }
        self.apply(binder, true, "cannot apply its grant");
    }

    /// Writes its rows' grants; `say`s each grant in force (the one
    /// grant, or one line per NIC granted apart).
    fn apply(&self, binder: &mut RunningBinder, say: bool, failing: &str) {
        if self.peer.model.is_none() {
            return;
        }
        let grants = self.peer.row_grants();
        let outcome = grant::apply_each(&mut binder.ebpf, &binder.plan, |row| {
            grants.get(&row).map(Option::as_ref)
        });
        match outcome {
            Ok(applied) if say => self.say_grants(&applied),
            Ok(_) => {}
            Err(err) => warn!("receiver {}: {failing}: {err}", self.peer.addr),
        }
    }

    /// The `grant` line of an applied grant (and a warning for granted
    /// CPUs no queue reaches), and with grants per NIC a `grant … on NIC`
    /// line for each.
    fn say_grants(&self, applied: &grant::Applied) {
        if let Some(grant) = &self.peer.granted {
            // With grants per NIC the last row written may be another
            // NIC's: the grant's own size then.
            let slots = match self.peer.nic_granted {
                Some(_) => grant.cpus.len(),
                None => applied.slots,
            };
            println!(
                "grant {} from {}: {slots} receiver CPUs [{}]",
                grant.epoch,
                self.peer.addr,
                grant_cpus(grant)
            );
        }
        for nic in self.peer.nic_granted.iter().flat_map(|g| &g.nics) {
            let grant = CpuGrant {
                epoch: self.peer.nic_granted.as_ref().map_or(0, |g| g.epoch),
                cpus: nic.cpus.clone(),
            };
            println!(
                "grant {} from {} on {}: {} receiver CPUs [{}]",
                grant.epoch,
                self.peer.addr,
                nic.name,
                grant.cpus.len(),
                grant_cpus(&grant)
            );
        }
        if applied.unknown > 0 {
            warn!(
                "grant from {}: {} granted CPUs are not reached by any queue of \
                 the description this sender planned with",
                self.peer.addr, applied.unknown
            );
        }
    }

    /// After a re-plan (slots may be renumbered): its grants again; `say`
    /// them (the first plan: a grant that came before the binder existed
    /// gets its `grant` line as later ones do).
    pub fn reapply(&self, binder: &mut RunningBinder, say: bool) {
        let say = say && (self.peer.granted.is_some() || self.peer.nic_granted.is_some());
        self.apply(binder, say, "cannot re-apply its grant after a re-plan");
    }

    /// Hands its part of the plan to its client, which sends it now and
    /// after reconnecting.
    pub fn report(&self, binder: &RunningBinder, dports: &[u16]) {
        let Some(version) = self.peer.current.as_ref().map(|c| c.version) else {
            return;
        };
        let rows = self.peer.row_set();
        let report: PlanReport =
            receiver_client::plan_report_for(version, &binder.plan, dports, |i| rows.contains(&i));
        if report.tables.is_empty() {
            warn!(
                "the plan for {} version {version} is reported without ports: every \
                 destination port is steered; name the ports to report with --report-port P",
                self.peer.addr
            );
        }
        self.handle.report_plan(report);
    }

    /// Tells it the flows the binder holds toward it per CPU (the client
    /// sends it only when it changed).
    pub fn report_demand(&self, binder: &RunningBinder) {
        if self.peer.model.is_none() {
            return;
        }
        if let Some(report) = demand_of(binder, &self.peer.row_set(), self.peer.granted.as_ref()) {
            self.handle.report_demand(report);
        }
    }

    /// Says what a landing verdict just changed (its `paused` is set).
    pub fn say_landing(&self, report: &LandingReport) {
        let addr = &self.peer.addr;
        let version = report.version;
        let counts = format!(
            "{} of its last {} flows on the predicted queue",
            report.matched, report.judged
        );
        match (report.verdict, self.peer.paused) {
            (LandingVerdict::TupleRewritten, true) => {
                warn!(
                    "receiver {addr}: this sender's connection reaches it from another address \
                     than the source of the plan for version {version}: a NAT or proxy rewrites \
                     the tuple on the way, so no planned port lands where computed; steering \
                     toward it paused, new connections get kernel ports"
                );
                println!("steering paused: a NAT or proxy rewrites this sender's tuples to {addr}");
            }
            (_, true) => {
                warn!(
                    "receiver {addr}: its landings contradict description version {version} \
                     ({counts}): steering toward it paused, new connections get kernel ports"
                );
                println!(
                    "steering paused: the landings of receiver {addr} contradict its description"
                );
            }
            (_, false) => {
                info!(
                    "receiver {addr}: flows land as description version {version} says again \
                     ({counts}): steering resumed"
                );
                println!("steering resumed: receiver {addr} reports agreement");
            }
        }
    }

    /// `--once`: waits (at most `limit`) until its plan went out.
    pub async fn wait_reported(&self, limit: Duration) {
        let Some(version) = self.peer.current.as_ref().map(|c| c.version) else {
            return;
        };
        let mut reported = self.handle.reported();
        let sent = tokio::time::timeout(
            limit,
            reported.wait_for(|v| v.is_some_and(|v| v >= version)),
        )
        .await;
        match sent {
            Ok(Ok(_)) => info!("plan for {} version {version} reported", self.peer.addr),
            _ => warn!(
                "the plan for {} version {version} was not reported within {limit:?}",
                self.peer.addr
            ),
        }
    }
}

/// The grant's CPUs as `cpu` or `cpu+flows`.
fn grant_cpus(grant: &CpuGrant) -> String {
    let cpus: Vec<String> = grant
        .cpus
        .iter()
        .map(|c| {
            if c.count == 0 {
                c.cpu.to_string()
            } else {
                format!("{}+{}", c.cpu, c.count)
            }
        })
        .collect();
    cpus.join(" ")
}

/// The demand report of the flows the binder holds toward `rows`.
fn demand_of(
    binder: &RunningBinder,
    rows: &BTreeSet<u32>,
    grant: Option<&CpuGrant>,
) -> Option<DemandReport> {
    match grant::demand(&binder.ebpf, &binder.plan, |i| rows.contains(&i)) {
        Ok(flows) => Some(DemandReport {
            applied: grant.map_or(0, |g| g.epoch),
            flows,
        }),
        Err(err) => {
            warn!("reading the binder's open flows: {err}");
            None
        }
    }
}
