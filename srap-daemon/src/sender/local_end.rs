//! This host's own end of the steered flows (`--steer local|both`): its
//! NIC, where the connections the steered cgroup opens really land on it
//! ([`super::landings`]), and the closed loop over them — the sender's
//! counterpart of the receiver's: when recent flows do not land on the
//! queue this host's description computes for their reverse tuple, local
//! steering pauses (new connections are placed as if this host's NIC were
//! not planned: fail open), and it resumes once they agree again. Flows
//! are judged whatever port they got, so the loop keeps watching while
//! paused.
//!
//! It also learns, as the receiver agent does for its NIC
//! ([`crate::tracker::learning`], facing [`End::Local`]): the same
//! landings teach the key the device really hashes with when the driver
//! hides or misreports it (virtio_net on 6.12). A learned key that differs
//! from discovery's is a new model of this NIC — a new local description
//! version, which the judge starts over for and the binder is re-planned
//! with — and local steering resumes once the landings agree with it.
//! Paused steering leaves connections the kernel's ports, whose variety is
//! what the learner needs (as the receiver learns from probe connections).
//!
//! The kernel's ports alone seldom determine everything placing the
//! binder's ports needs (`N of M bits planning needs`, counted for its
//! `--port-range`): they come one after another (low bits vary first), all
//! of one parity, and a range in the other half of the port space (the
//! lab's 10000-32767) shares no port with them. Steering resumes once the
//! landings agree with the learned key all the same, and its first round
//! of steered connections is the probe that determines the rest: each
//! fresh slot's rotation starts at a random turn (`maps::scatter_turns`),
//! so those ports vary every direction of the range at once (in the
//! guests of `virtio.rs`, most bits are known on resuming and all of them
//! one sample later). Holding steering until the key were complete
//! would never end for such a range, and planning only the ports whose
//! landing the known part decides would plan none of it; a connection of
//! that round the guessed part misplaces is judged by the closed loop.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use anyhow::Context as _;
use srap_common::{
    binder::{LEVELS, LOCAL_ROW, READER_CPUS},
    rss::{End, FlowTuple, KeySource, RssModel},
    wire::{CpuCount, CpuGrant, LandingReport, LandingVerdict},
};
use srap_host::topology::Topology;
use srap_status::FlowRow;
use tracing::{info, warn};

use super::{
    binder::RunningBinder,
    ends::{LocalPlacement, PlacedEnds},
    grant,
    landings::{LocalLandings, Opened},
    local::{nic::LocalNic, nics::LocalNics, reader, source_models::LocalModels},
    plan::Plan,
};
use crate::{
    description::Source,
    tracker::{
        agreement::{AgreementJudge, likely_causes, on_the_predicted_queue},
        learning::{Landed, LearnedKey, Learning},
    },
};

/// This host's NIC, its landings and the verdict on them.
pub struct LocalEnd {
    pub nic: LocalNic,
    pub placed_ends: PlacedEnds,
    /// `--local-placement`: with `reader`, a flow is judged by the CPU
    /// that processed its answer too (see [`LocalEnd::sample`]).
    pub placement: LocalPlacement,
    landings: Option<LocalLandings>,
    judge: AgreementJudge,
    /// The version of this host's description the judge counts under: 1,
    /// then +1 for every model a learned key makes.
    version: u64,
    learning: Learning,
    learned: LearnedKey,
    /// Local steering is paused: the landings contradict the description.
    pub paused: bool,
    /// The connections of the last sample.
    seen: Vec<Opened>,
    /// The other NICs' models of the last plan that had them, and this
    /// host's NICs then: a flow bound to another NIC's address is judged
    /// by that NIC's description (`--local-nics`), kept while a pause
    /// plans none.
    others: Option<(Arc<LocalModels>, LocalNics)>,
}

impl LocalEnd {
    /// Watches the connections `binder`'s cgroup opens toward `toward`;
    /// learning this NIC's key counts what placing the ports `binder`
    /// chooses from needs ([`Learning::choosing`]). Without the socket hook
    /// (an old kernel, no cgroup2) steering goes on unverified, and says so.
    pub fn start(
        nic: LocalNic,
        placed_ends: PlacedEnds,
        binder: &RunningBinder,
        toward: &[IpAddr],
    ) -> Self {
        let cgroup = binder.cgroup.as_path();
        let iface = match &nic.source {
            Source::Iface(iface) => Some(iface.clone()),
            // Described by a file: the device the replies arrive on is the
            // one the route toward the destinations leaves from.
            Source::File(_) => toward
                .first()
                .and_then(|dst| srap_host::route::egress_iface(*dst)),
        };
        let landings = match LocalLandings::attach(cgroup, iface.as_deref()) {
            Ok(landings) => {
                info!(
                    cgroup = %cgroup.display(),
                    "watching where steered connections land on {} (description version 1, {})",
                    nic.name(),
                    nic.key
                );
                Some(landings)
            }
            Err(err) => {
                warn!("{err}; local steering runs without its closed loop");
                None
            }
        };
        let learned = LearnedKey::default();
        let learning = Learning::new(
            learned.clone(),
            End::Local,
            Learning::of_this_host(&nic.name()),
        )
        .choosing(binder.port_range);
        Self {
            nic,
            placed_ends,
            placement: binder.local_placement,
            landings,
            judge: AgreementJudge::default(),
            version: 1,
            learning,
            learned,
            paused: false,
            seen: Vec::new(),
            others: None,
        }
    }

    /// Reads the landings of the connections toward `steered` addresses,
    /// learns from them, and judges them against this host's description:
    /// a new model when the learned key changed it, and the new pause state
    /// when the verdict changes it.
    /// `plan` is the binder's now: which NIC's description each source
    /// address is judged by.
    pub fn sample(&mut self, steered: &BTreeSet<IpAddr>, plan: &Plan) -> Sampled {
        if let Some(models) = plan.local_models.as_ref().filter(|m| m.several()) {
            self.others = Some((models.clone(), plan.host.nics.clone()));
        }
        let Some(landings) = self.landings.as_ref() else {
            return Sampled::default();
        };
        let nic_cpus = landings.cpus_are_the_nics();
        self.seen = match landings.read() {
            Ok(seen) => seen,
            Err(err) => {
                warn!("reading where steered connections land: {err}");
                return Sampled::default();
            }
        };
        let toward: Vec<&Opened> = self
            .seen
            .iter()
            .filter(|o| steered.contains(&o.dst.ip()))
            .collect();
        // This NIC's key is learned from its own flows only.
        let landed: Vec<Landed> = toward
            .iter()
            .filter(|o| self.other_nic(o.src.ip()).is_none())
            .filter_map(|o| {
                Some(Landed {
                    src: o.src,
                    dst: o.dst,
                    queue: o.queue?,
                })
            })
            .collect();
        let rows: Vec<FlowRow> = toward.iter().filter_map(|o| self.row(o)).collect();
        let model = self.learn(&landed);
        // Under `reader` placement the CPU is what the plan promised: a
        // flow on the planned queue whose answer another CPU processed (its
        // queue's interrupt moved, RPS steered it) is misplaced too. Not on
        // a veth, whose "queue" CPU is whoever sent the packet.
        let by_cpu = self.placement == LocalPlacement::Reader && nic_cpus;
        self.judge.observe_by(self.version, &rows, |row| {
            let queue = on_the_predicted_queue(row)?;
            Some(queue && (!by_cpu || row.cpu == row.predicted_cpu?))
        });
        let pause = match self.judge.report().verdict {
            // A placeholder key (unknown to discovery) is never steered by.
            _ if self.nic.key.source == KeySource::Unknown => true,
            LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => true,
            LandingVerdict::Agreed => false,
            LandingVerdict::Unknown => self.paused,
        };
        let pause = (pause != self.paused).then(|| {
            self.say(pause);
            pause
        });
        Sampled { model, pause }
    }

    /// Feeds the learner this sample's `landed`; the new model of this
    /// host's NIC when what it serves changed the key.
    fn learn(&mut self, landed: &[Landed]) -> Option<Arc<RssModel>> {
        self.learning
            .observe(&self.nic.served(), Some(&self.nic.model), landed);
        match self.nic.relearn(&self.learned) {
            Ok(false) => None,
            Ok(true) => {
                self.version += 1;
                info!(
                    "{}: planning with {} (local description version {}{})",
                    self.nic.name(),
                    self.nic.key,
                    self.version,
                    if self.nic.key.confidence.complete() {
                        ""
                    } else {
                        "; not every bit planning needs is known yet: its landings will tell"
                    }
                );
                Some(self.nic.model.clone())
            }
            Err(err) => {
                warn!("{err}; planning on with the last model");
                None
            }
        }
    }

    /// The version of this host's description now.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// This host's CPU offer in its occupancy row (again after a re-plan).
    pub fn apply_grant(&self, binder: &mut RunningBinder) -> anyhow::Result<()> {
        apply_local_grant(binder, &self.nic)
    }

    /// Records the pause state the binder now has.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    fn say(&self, pause: bool) {
        let report = self.judge.report();
        if pause {
            warn!(
                "{} of the last {} connections landed on the queue {}'s description computes: \
                 pausing local steering (new connections get the kernel's ports{}); {}",
                report.matched,
                report.judged,
                self.nic.name(),
                if self.placed_ends == PlacedEnds::Both {
                    " placed for the receiver only"
                } else {
                    ""
                },
                likely_causes(&self.nic.name(), self.nic.driver().as_deref())
            );
        } else {
            info!(
                "{} of the last {} connections landed where {}'s description says: local \
                 steering resumes",
                report.matched,
                report.judged,
                self.nic.name()
            );
        }
    }

    /// The model of the NIC other than this one whose description places
    /// flows from `source`; `None`: this NIC's (or a fallback to it).
    fn other_nic(&self, source: IpAddr) -> Option<Arc<RssModel>> {
        let (models, nics) = self.others.as_ref()?;
        let (model, _) = models.of(source, nics);
        (!Arc::ptr_eq(&model, models.primary())).then_some(model)
    }

    /// One connection as the judge sees it: its queue and the queue the
    /// description of the NIC its source address is placed with computes
    /// for its reverse tuple.
    fn row(&self, opened: &Opened) -> Option<FlowRow> {
        let tuple = FlowTuple::from_sockets(opened.src, opened.dst).ok()?;
        let model = self
            .other_nic(opened.src.ip())
            .unwrap_or_else(|| self.nic.model.clone());
        let planned = model.landing(&tuple);
        Some(FlowRow {
            src: opened.src,
            dst: opened.dst,
            queue: opened.queue,
            cpu: opened.cpu,
            rss_cpu: opened
                .queue
                .and_then(|q| model.queue_cpu().get(q as usize).copied()),
            predicted_queue: Some(planned.queue),
            predicted_cpu: Some(planned.cpu),
            planned_cpu: None,
            gbps: 0.0,
            rate_cov: None,
            packets: 0,
            bytes: 0,
            moves: 0,
            agent_link: false,
            // The socket hook reads no NIC hash.
            nic_hash: None,
            nic_hash_agrees: None,
        })
    }

    /// The verdict and the counts behind it.
    pub fn report(&self) -> LandingReport {
        self.judge.report()
    }

    /// The steering is verified (the hook attached).
    pub fn watching(&self) -> bool {
        self.landings.is_some()
    }

    /// The open connections of the last sample, each with this host's
    /// planned and seen landing, and the CPU of the thread that opened it.
    pub fn open(&self) -> impl Iterator<Item = (FlowRow, Option<u32>)> + '_ {
        self.seen
            .iter()
            .filter(|o| !o.closed)
            .filter_map(|o| Some((self.row(o)?, o.connect_cpu)))
    }
}

/// What a sample of this host's landings changed.
#[derive(Debug, Default)]
pub struct Sampled {
    /// This host's NIC's new model (a learned key): plan with it.
    pub model: Option<Arc<RssModel>>,
    /// Local steering is to pause (true) or resume (false).
    pub pause: Option<bool>,
}

/// This host's CPU offer in its occupancy row, and under
/// `--local-placement reader` each CPU's nearest offered slots.
pub fn apply_local_grant(binder: &mut RunningBinder, nic: &LocalNic) -> anyhow::Result<()> {
    // Several NICs' models share this host's row: the CPUs only the
    // others' queues reach are offered too, last.
    let tiers = match &binder.plan.local_models {
        Some(models) if models.several() => nic.tiers_over(models.slot_cpus()),
        _ => nic.tiers.clone(),
    };
    let grant = local_grant(&tiers);
    grant::apply_to(
        &mut binder.ebpf,
        &binder.plan,
        |row| row == LOCAL_ROW,
        Some(&grant),
    )
    .context("writing this host's CPU offer")?;
    if binder.local_placement == LocalPlacement::Reader {
        apply_reader_rows(binder, &tiers.iter().flatten().copied().collect())?;
    }
    Ok(())
}

/// Writes each CPU's reader row ([`reader`]) for the slots of this
/// plan whose CPUs are in `offered_cpus`: slots are renumbered by a
/// re-plan, so again after every one.
pub fn apply_reader_rows(
    binder: &mut RunningBinder,
    offered_cpus: &BTreeSet<u32>,
) -> anyhow::Result<()> {
    let offered: BTreeMap<u32, u32> = grant::local_slots(&binder.plan)
        .into_iter()
        .filter(|(cpu, _)| offered_cpus.contains(cpu))
        .collect();
    let topology = Topology::of_this_host();
    let rows = reader::rows(&topology, &offered);
    let past =
        reader::write(&mut binder.ebpf, &binder.sizes, &rows).context("writing the reader rows")?;
    info!(
        "--local-placement reader: of {} CPUs, {}",
        topology.cpus.len(),
        reader::summary(&rows, topology.cpus.len())
    );
    if past > 0 {
        warn!(
            "{past} CPUs are past the {READER_CPUS} the reader rows hold: their connects are \
             spread"
        );
    }
    Ok(())
}

/// This host's CPU offer as a grant: the first tier at base 0, the others
/// at the top level, taken only once the first tier's CPUs fill up.
pub fn local_grant(tiers: &[Vec<u32>]) -> CpuGrant {
    let cpus = tiers
        .iter()
        .enumerate()
        .flat_map(|(tier, cpus)| {
            let base = if tier == 0 { 0 } else { LEVELS as u32 - 1 };
            cpus.iter().map(move |cpu| CpuCount {
                cpu: *cpu,
                count: base,
            })
        })
        .collect();
    CpuGrant { epoch: 0, cpus }
}

#[cfg(test)]
mod tests {
    use srap_common::binder::LEVELS;

    use super::local_grant;

    #[test]
    fn the_first_tier_is_offered_first_and_the_others_only_when_full() {
        let grant = local_grant(&[vec![0, 1], vec![8]]);
        let offered: Vec<(u32, u32)> = grant.cpus.iter().map(|c| (c.cpu, c.count)).collect();
        let top = LEVELS as u32 - 1;
        assert_eq!(offered, vec![(0, 0), (1, 0), (8, top)]);
        assert_eq!(grant.epoch, 0, "no receiver granted it");
    }
}
