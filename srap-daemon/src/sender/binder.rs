//! A running binder: [`start`] plans for the options and this host
//! ([`plan_for`]), fills the maps, attaches the `connect()` hooks to the
//! cgroup through pinned links (or adopts what a previous agent pinned
//! under the same directory), and records in the state file what
//! [`super::detach()`] must undo. The pins keep steering running whether or
//! not the agent does.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use aya::Ebpf;
use srap_common::{
    binder::{BinderSizes, NICS_DOWN_MAP},
    port_range::PortRange,
};
use srap_host::{
    cgroup,
    reserved::{self, Reservation},
};
use srap_status::sender::StartRow;
use tracing::{debug, info, warn};

use super::{
    attach::{self, Attachment},
    choices::MptcpMode,
    ends::{LocalNicsPolicy, LocalPlacement},
    error::SenderError,
    layout::{PinLayout, programs_for},
    local::{LocalHost, link_watch::LinkWatch, nic_choice},
    maps,
    options::SenderOptions,
    plan::{Plan, PlanInputs},
    spread::{self, ReceiverNicsMode, failing::SynFallback},
    state::{self, SenderState},
};

/// A running binder, as set up by [`start`].
pub struct RunningBinder {
    /// The loaded object; its programs are attached through the pins, so
    /// dropping it does not stop steering.
    pub ebpf: Ebpf,
    pub layout: PinLayout,
    pub cgroup: PathBuf,
    pub plan: Plan,
    pub attachment: Attachment,
    /// The source ports the binder chooses from.
    pub port_range: PortRange,
    /// What its maps are sized for.
    pub sizes: BinderSizes,
    /// Where each flow's local end goes (`--local-placement`): the hook's
    /// config holds it, and the reader rows are written with this host's
    /// grant.
    pub local_placement: LocalPlacement,
    /// `--local-nics`, as the status shows it.
    pub local_nics: LocalNicsPolicy,
    /// Re-plans made because this host's NICs changed (a link down or up,
    /// an address added or removed, a NIC added or gone) since start.
    pub local_nic_replans: u64,
    /// The receiver addresses a moved connect's SYN got no answer from,
    /// as the agent follows them (`--receiver-nics spread`).
    pub syn_fallback: SynFallback,
    /// From [`start`]'s call to its programs attached (the plan, the
    /// verifier's walks and the attach), and what each program cost.
    pub start: StartRow,
}

impl RunningBinder {
    /// Follows the links of the NICs its hook chooses among under
    /// `policy` ([`LinkWatch`]: the kernel's notices fence a NIC down off
    /// in its map at once; a poll behind them).
    pub fn watch_links(&self, policy: LocalNicsPolicy) -> LinkWatch {
        let names = nic_choice::chosen(&self.plan.host.nics)
            .into_iter()
            .map(|n| n.name.clone())
            .collect();
        LinkWatch::new(policy, names, &self.layout.map(NICS_DOWN_MAP))
    }
}

/// The plan of `options` for this host as it is now ([`LocalHost::discover`]
/// toward the targets, the source rules it lacks installed if asked): for the targets' NICs, and this host's too when
/// both ends are planned. A plan the maps' sizes cannot hold is an error
/// naming the setting to raise, never a plan cut short.
pub fn plan_for(options: &SenderOptions, range: PortRange) -> Result<Plan, SenderError> {
    let receivers = options.target_addrs::<Vec<_>>();
    let mut host = LocalHost::discover(&receivers, &options.bonds, &options.nics)?;
    host.install_source_rules(&options.nics, &receivers);
    plan_on(options, range, host)
}

/// The plan of `options` for `host`, a snapshot already read.
pub fn plan_on(
    options: &SenderOptions,
    range: PortRange,
    host: LocalHost,
) -> Result<Plan, SenderError> {
    let mut plan = Plan::new(PlanInputs {
        receivers: &options.targets,
        host,
        local_nic: options.local.as_ref(),
        primary_nic: options.nics.given.first().map(|g| g.name.as_str()),
        ports: &options.ports,
        range,
    })?;
    if options.receiver_nics == ReceiverNicsMode::Spread {
        plan.spread = spread::rows(&plan.dests, &options.spread);
    }
    plan.check_fits(&options.sizes)?;
    Ok(plan)
}

/// Computes, fills, attaches and pins (or puts its programs behind the
/// links a previous agent pinned under the same directory).
///
/// In this order, so that no process can be in the cgroup while its
/// connects would go unsteered: plan, load with the settings as constants,
/// fill the maps, verify every program (the slow step), and only then
/// create the cgroup and attach (a few milliseconds). A process in the
/// cgroup before this agent's links exist is a previous agent's, served
/// by its programs until each is replaced.
pub fn start(options: &SenderOptions, object: &[u8]) -> Result<RunningBinder, SenderError> {
    let started = std::time::Instant::now();
    let layout = PinLayout::new(&options.pin_dir);
    let state_path = state::path_for(layout.dir());
    let previous = state::load(&state_path)?;
    let cgroup = steered_cgroup(options, &layout, previous.as_ref())?;
    let port_range = match options.port_range {
        Some(range) => range,
        None => reserved::local_port_range()?,
    };
    let plan = plan_for(options, port_range)?;
    for layout in plan.layouts.iter().filter(|l| l.cpus_left_out > 0) {
        warn!(
            "{} receiver CPUs are beyond the binder's slots and get no flows",
            layout.cpus_left_out
        );
    }

    let config = maps::load_config(options);
    let mut ebpf = attach::load(&layout, object, &options.sizes, &config)?;
    let subflows = options.mptcp != MptcpMode::Off;
    let fields = attach::trace::write_mptcp_layout(&mut ebpf);
    if let (true, Err(reason)) = (subflows, &fields) {
        warn!(
            "MPTCP's fields are unknown ({reason}): further IPv6 MPTCP subflows and those \
             toward addresses the peer announces keep the kernel's port (port_at_bind)"
        );
    }
    maps::fill(&mut ebpf, &plan, options)?;
    let programs = programs_for(&config);
    let loaded = attach::verify(&mut ebpf, &programs)?;
    let verified = started.elapsed();

    record_state(&state_path, previous.as_ref(), &cgroup)?;

    let attachment = attach::ensure_attached(&mut ebpf, &layout, &cgroup, &programs)?;
    let steering = started.elapsed();
    if subflows {
        note_tracing(attach::trace::ensure_traced(&mut ebpf, &layout, fields)?);
    } else {
        attach::trace::remove(&layout)?;
    }
    info!(
        cgroup = %cgroup.display(),
        pins = %layout.dir().display(),
        ?attachment,
        programs = programs.len(),
        "binder steering after {} ms ({} ms verifying its programs)",
        steering.as_millis(),
        verified.as_millis(),
    );
    Ok(RunningBinder {
        ebpf,
        layout,
        cgroup,
        plan,
        attachment,
        port_range,
        sizes: options.sizes,
        local_placement: options.local_placement,
        local_nics: options.nics.policy,
        local_nic_replans: 0,
        syn_fallback: SynFallback::default(),
        start: StartRow {
            to_steering_ms: steering.as_millis() as u64,
            programs: loaded,
        },
    })
}

/// Says whether the kernel path manager's calls are traced: without,
/// the bind hooks read each further MPTCP subflow's destination from its
/// MPTCP socket (counted `subflow_untraced`), and the log names why.
fn note_tracing(tracing: attach::trace::Tracing) {
    match tracing {
        attach::trace::Tracing::Off(reason) => warn!(
            "MPTCP subflows' destinations are not traced ({reason}): the bind hooks read \
             each further subflow's destination from its MPTCP socket, as the in-kernel \
             path manager chooses it (counted subflow_untraced)"
        ),
        tracing => debug!(?tracing, "MPTCP subflows' destinations traced"),
    }
}

/// The cgroup to steer; refuses one other than the cgroup the pinned
/// binder is already attached to.
fn steered_cgroup(
    options: &SenderOptions,
    layout: &PinLayout,
    previous: Option<&SenderState>,
) -> Result<PathBuf, SenderError> {
    let mount = cgroup::cgroup2_mount()?;
    let cgroup = cgroup::resolve(&mount, options.cgroup.as_deref())?;
    if layout.links_pinned()
        && let Some(prev) = previous.filter(|p| p.cgroup != cgroup)
    {
        return Err(SenderError::AttachedElsewhere {
            pin_dir: layout.dir().to_path_buf(),
            attached: prev.cgroup.clone(),
            requested: cgroup,
        });
    }
    Ok(cgroup)
}

/// Creates the cgroup if needed and records in the state file what
/// `detach` must undo, before the step that needs undoing. Ports an older
/// agent reserved (SRAP reserves none since it chooses by tuple) are
/// released here, after they were recorded, so a crash in between still
/// leaves `detach` a state that undoes everything.
fn record_state(
    state_path: &Path,
    previous: Option<&SenderState>,
    cgroup: &Path,
) -> Result<(), SenderError> {
    let netns = state::current_netns();
    let previously_added = match previous {
        Some(prev) if prev.netns == netns => {
            reserved::parse(&prev.reserved_added).map_err(|problem| SenderError::State {
                path: state_path.to_path_buf(),
                problem: problem.to_string(),
            })?
        }
        _ => BTreeSet::new(),
    };
    let created = cgroup::ensure(cgroup)?;
    let state = SenderState {
        cgroup: cgroup.to_path_buf(),
        cgroup_created: created || previous.is_some_and(|p| p.cgroup == cgroup && p.cgroup_created),
        reserved_added: reserved::format(&previously_added),
        netns,
        // A killed follow-reader agent's record, until an agent restores it.
        path_manager_before: previous.and_then(|p| p.path_manager_before),
    };
    state::save(state_path, &state)?;
    if !previously_added.is_empty() {
        let released = Reservation::read(previously_added)?.release()?;
        info!("released {released} ports an older agent reserved in ip_local_reserved_ports");
        state::save(
            state_path,
            &SenderState {
                reserved_added: String::new(),
                ..state
            },
        )?;
    }
    Ok(())
}

/// Creates the binder's maps sized by `sizes` and pins them under
/// `pin_dir` (or opens those pinned there already), attaching nothing: what
/// an agent would pin, for measuring it ([`super::pinned_memory`]). Undo with
/// [`remove_pins`].
pub fn create_maps(pin_dir: &Path, object: &[u8], sizes: &BinderSizes) -> Result<(), SenderError> {
    let config = srap_common::binder::LoadConfig::default();
    attach::load(&PinLayout::new(pin_dir), object, sizes, &config).map(drop)
}

/// Removes every pin the binder makes under `pin_dir` (links first), and
/// the directory when nothing else is in it; returns the pins removed.
pub fn remove_pins(pin_dir: &Path) -> Result<usize, SenderError> {
    attach::remove_pins(&PinLayout::new(pin_dir))
}
