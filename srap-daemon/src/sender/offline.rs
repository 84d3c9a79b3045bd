//! `srap-agent sender` without a receiver agent to follow: the receiver
//! described by a file (`--rss`), or only this host's own NIC planned
//! (`--steer local`, toward `--receiver` addresses or the addresses of
//! `--peer`). Plans once, then reports the binder's counters, follows the
//! host's addresses and — with this host's NIC planned — runs its closed
//! loop ([`super::local_end`]) and serves `srap status --sender`, until a
//! signal or `srap-agent detach`.

use std::{collections::BTreeSet, convert::Infallible, net::IpAddr, sync::Arc};

use anyhow::Context as _;
use tracing::{info, warn};

use srap_common::{binder::LOCAL_ROW, rss::RssModel};

use super::{
    binder::{RunningBinder, start},
    bond_members::{MemberLoop, add_bonds},
    driver::{self, HostCheck, NoFeed, Shared, Signals, Stopped},
    ends::PlacedEnds,
    error::SenderError,
    grant,
    local::nic::LocalNic,
    local_end::{LocalEnd, apply_local_grant},
    maps,
    options::SenderOptions,
    replan::replan,
    resolve,
    settings::SenderSettings,
    status::StatusServer,
    summary,
    target::Target,
};

/// Steers toward `receivers` with each one's model (`remote`, the
/// receiver's from `--rss`, or none with `--steer local`) and this host's
/// NIC `local` (none with `--steer remote`).
pub async fn run(
    args: &SenderSettings,
    remote: Option<&RssModel>,
    local: Option<LocalNic>,
    object: &[u8],
) -> anyhow::Result<()> {
    let receivers = destinations(args).await?;
    let placed_ends = args.local.placed_ends();
    let (targets, both) = match (remote, &local, placed_ends) {
        (_, Some(nic), PlacedEnds::Local) => (Target::all(&nic.model, &receivers), None),
        (Some(model), Some(nic), PlacedEnds::Both) => {
            (Target::all(model, &receivers), Some(nic.model.clone()))
        }
        (Some(model), _, _) => (Target::all(model, &receivers), None),
        (None, _, _) => anyhow::bail!("no description of the receiver's NIC: give --rss FILE"),
    };
    let mut options = SenderOptions::from_settings(args, targets)?;
    options.local = both;
    let mut binder = start(&options, object)
        .map_err(with_flag_hint)
        .context("setting up the port binder")?;
    apply_grant(&mut binder, local.as_ref())?;
    if args.once {
        println!("{}", summary::describe(&binder));
        return Ok(());
    }
    // With this host's NIC planned the status is the closed loop's only
    // view: its socket is needed. Without, it shows the binder's counters
    // and the occupancy audit, and a socket in use (another agent's) costs
    // only that view.
    let mut published = match &local {
        Some(_) => {
            Some(StatusServer::bind(&args.control()).context("the sender's control socket")?)
        }
        None => StatusServer::bind(&args.control())
            .inspect_err(|err| warn!("no `srap status --sender` for this agent: {err:#}"))
            .ok(),
    };
    if let (Some(published), Some(addr)) = (&mut published, args.metrics) {
        published.serve_metrics(addr)?;
    }
    // Watching before `steering active`: no connection it steers is missed.
    let local = local.map(|nic| LocalEnd::start(nic, placed_ends, &binder, &receivers));
    let path_manager = driver::start_path_manager(&options, &mut binder)?;
    println!("{}", summary::describe(&binder));
    crate::notify::ready(&summary::status_line(&binder));
    let mut run = Offline {
        plan: LocalPlan {
            both: options.local.clone(),
            options,
        },
        shared: Shared {
            local,
            path_manager,
            ..Shared::new(published)
        },
        members: MemberLoop::default(),
    };
    let mut signals = Signals::catch()?;
    let interval = args.interval();
    match driver::run(&mut run, &mut NoFeed, &mut binder, interval, &mut signals).await? {
        Stopped::Signal => info!(
            "{}",
            driver::stopping(&binder, &run.plan.options, &run.shared)
        ),
        // `srap-agent detach` took the steering away: return at once, no
        // stop line, the source rules left to detach, which removes them
        // (follow stops as on a signal instead).
        Stopped::Detached => {}
    }
    Ok(())
}

/// The destinations: `--receiver`, else every address of every `--peer`.
async fn destinations(args: &SenderSettings) -> anyhow::Result<Vec<IpAddr>> {
    if !args.receivers.is_empty() {
        return Ok(args.receivers.clone());
    }
    let resolver = resolve::system();
    let mut all = Vec::new();
    for peer in &args.source.peer {
        let addrs = resolver(peer.clone())
            .await
            .with_context(|| format!("resolving --peer {peer} (or give --receiver IP)"))?;
        all.extend(addrs);
    }
    anyhow::ensure!(
        !all.is_empty(),
        "--peer resolves to no address: give --receiver IP"
    );
    Ok(all)
}

/// Without a receiver agent no one grants the receiver's CPUs (a grant an
/// earlier `--peer` run pinned is cleared); with this host's NIC planned,
/// its CPUs are offered as `--local-cpus` and its NUMA node say: the
/// node's first, the others only once those hold flows.
fn apply_grant(binder: &mut RunningBinder, local: Option<&LocalNic>) -> anyhow::Result<()> {
    let receivers = |row: u32| row != LOCAL_ROW;
    grant::apply_to(&mut binder.ebpf, &binder.plan, receivers, None)
        .context("clearing the receiver grant")?;
    if let Some(nic) = local {
        apply_local_grant(binder, nic)?;
    }
    Ok(())
}

struct Offline {
    plan: LocalPlan,
    /// The status server, the audit and this host's closed loop.
    shared: Shared,
    /// The bond members' counters between snapshots, for their rates.
    /// Offline lists no flows, so it never judges the hash (nor pauses).
    members: MemberLoop,
}

/// What this host's closed loop changes in the plan, without I/O (the
/// binder's maps are [`Offline`]'s): a learned key, local steering paused
/// or resumed.
struct LocalPlan {
    options: SenderOptions,
    /// This host's NIC with `--steer both` (out of `options` while local
    /// steering is paused).
    both: Option<Arc<RssModel>>,
}

/// How local steering is paused or resumed ([`LocalPlan::pause`]).
#[derive(Debug, PartialEq, Eq)]
enum Toggle {
    /// `--steer both`: plan again with the options as they now are.
    Replan,
    /// `--steer local`: every destination but these rows (this host's row
    /// out: connects miss and keep the kernel's port).
    Dests(BTreeSet<u32>),
}

impl LocalPlan {
    /// Takes this host's NIC's new `model` (a learned key): the targets'
    /// model with `--steer local`, this host's end of the joint plan with
    /// `both` (in force unless local steering is paused).
    fn learned(&mut self, model: Arc<RssModel>) {
        if self.both.is_some() {
            if self.options.local.is_some() {
                self.options.local = Some(model.clone());
            }
            self.both = Some(model);
        } else {
            for target in &mut self.options.targets {
                target.model = model.clone();
            }
        }
    }

    /// Pauses (or resumes) steering for this host's NIC. With `--steer
    /// local` that is every destination out of the binder: connects miss
    /// and keep the kernel's port. With `--steer both` the plan is made
    /// again without (or with) this host's NIC: connects keep the
    /// receiver's placement.
    fn pause(&mut self, pause: bool) -> Toggle {
        match &self.both {
            Some(model) => {
                self.options.local = (!pause).then(|| model.clone());
                Toggle::Replan
            }
            None if pause => Toggle::Dests([LOCAL_ROW].into_iter().collect()),
            None => Toggle::Dests(BTreeSet::new()),
        }
    }

    /// [`Self::pause`] failed: the plan is as it was.
    fn failed(&mut self, pause: bool) {
        if let Some(model) = &self.both {
            self.options.local = pause.then(|| model.clone());
        }
    }

    /// After a re-plan (which refilled every destination): whether a pause
    /// in force must be put back (only `--steer local` pauses in the
    /// destinations).
    fn repause(&self, paused: bool) -> bool {
        self.both.is_none() && paused
    }
}

impl driver::Mode for Offline {
    type Event = Infallible;

    fn options(&self) -> &SenderOptions {
        &self.plan.options
    }

    fn shared(&mut self) -> &mut Shared {
        &mut self.shared
    }

    /// This host's NICs, its landings, then the status. The NICs before
    /// the landings (follow asks after them): a NIC's change is re-planned as such (its line, and a count in
    /// `local_nic_replans`) and the landings judged against the plan for
    /// the NICs as they are now. Its bonds only at the interval's full
    /// check: follow asks them every second for its bond members' closed
    /// loop, which offline never runs (it lists no flows).
    fn each_second(&mut self, binder: &mut RunningBinder) {
        driver::follow_host(self, binder, HostCheck::Nics);
        driver::sample_local(self, binder);
        self.publish(binder);
    }

    fn replanned(&mut self, binder: &mut RunningBinder) {
        self.reapply(binder);
    }

    fn local_key(&mut self, binder: &mut RunningBinder, model: Arc<RssModel>) {
        self.plan_with(binder, model);
    }

    fn local_verdict(&mut self, binder: &mut RunningBinder, pause: bool) {
        if self.set_local_paused(binder, pause)
            && let Some(local) = &mut self.shared.local
        {
            local.set_paused(pause);
        }
    }

    async fn on(&mut self, _: &mut RunningBinder, event: Infallible) {
        match event {}
    }
}

impl Offline {
    /// Refreshes what `srap status --sender` shows, where it is served.
    fn publish(&mut self, binder: &RunningBinder) {
        let Some(published) = &self.shared.published else {
            return;
        };
        let mut snapshot = self
            .shared
            .snapshot(Some(binder), &self.plan.options.targets);
        add_bonds(&mut snapshot, binder, &self.members);
        let none = crate::sock_diag::Connections::default();
        let paused = &self.plan.options.bonds.paused;
        let _undecided = self.members.sample(&snapshot, &none, paused);
        published.update(snapshot);
    }

    /// Plans with this host's NIC's new `model` (a learned key).
    fn plan_with(&mut self, binder: &mut RunningBinder, model: Arc<RssModel>) {
        self.plan.learned(model);
        match replan(binder, &self.plan.options) {
            Ok(()) => println!("{}", summary::describe(binder)),
            Err(err) => warn!("cannot re-plan with this host's learned key: {err}"),
        }
        self.reapply(binder);
    }

    /// After a re-plan: the grant again, and the pause if one is in force.
    fn reapply(&mut self, binder: &mut RunningBinder) {
        let nic = self.shared.local.as_ref().map(|l| &l.nic);
        if let Err(err) = apply_grant(binder, nic) {
            warn!("{err:#}");
        }
        if self
            .plan
            .repause(self.shared.local.as_ref().is_some_and(|l| l.paused))
        {
            self.set_local_paused(binder, true);
        }
    }

    /// Pauses (or resumes) steering for this host's NIC ([`LocalPlan::pause`]);
    /// true when the binder now says so.
    fn set_local_paused(&mut self, binder: &mut RunningBinder, pause: bool) -> bool {
        let done = match self.plan.pause(pause) {
            Toggle::Replan => replan(binder, &self.plan.options)
                .map_err(|err| warn!("cannot re-plan for this host's NIC: {err}")),
            Toggle::Dests(out) => maps::fill_dests_except(&mut binder.ebpf, &binder.plan, &out)
                .map_err(|err| warn!("cannot update the binder's destinations: {err}")),
        };
        if done.is_err() {
            self.plan.failed(pause);
        }
        done.is_ok()
    }
}

#[cfg(test)]
mod tests;

/// Names the flag that fixes an error the library can only describe.
fn with_flag_hint(err: SenderError) -> anyhow::Error {
    let needs_port = matches!(
        &err,
        SenderError::PortTables {
            source: srap_common::port_tables::PortTableError::NeedsPort { .. },
            ..
        }
    );
    if needs_port {
        anyhow::Error::new(err).context("give --port for each destination port the workload uses")
    } else {
        err.into()
    }
}
