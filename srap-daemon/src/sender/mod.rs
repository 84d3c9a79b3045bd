//! The sender side of SRAP: the transparent port binder.
//!
//! [`start`] computes port tables for each receiver from its RSS model,
//! writes them into the binder's maps, and attaches the `connect()` hooks to
//! a cgroup through pinned links; the pins keep steering running whether or
//! not the agent does. [`detach`] undoes all of it. No port is reserved: the
//! hook chooses by 4-tuple among every port of the range, as the kernel
//! does, so the host's other applications keep their ephemeral ports (see
//! `docs/binder.md` for the measurement). Workloads join the cgroup with `srap exec`. With
//! `--peer`, [`follow`] fetches the description from the receiver agent and
//! [`replan`] refills the maps whenever it changes.

mod attach;
pub mod audit;
#[path = "local/bond.rs"]
pub mod bond;
pub mod config;
pub mod ends;
pub mod follow;
pub mod grant;
pub mod landings;
pub mod layout;
pub mod local_end;
mod maps;
pub mod offline;
pub mod plan;
pub mod rate;
#[path = "local/reader.rs"]
pub mod reader;
mod replan;
pub mod settings;
pub mod state;
pub mod summary;
pub mod watch;

use std::{
    collections::BTreeSet,
    io,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use aya::Ebpf;
use srap_common::{
    binder::{BinderSizes, FIRST_RECEIVER_ROW, LOCAL_ROW, SizeSetting},
    port_tables::PortTableError,
    rss::{End, RssModel},
    solver::PortRange,
};
use srap_host::{
    cgroup, local,
    reserved::{self, Reservation},
    route,
};
use tracing::{info, warn};

use self::ends::LocalPlacement;

pub use attach::{Attachment, check_bpffs, settings_text};
pub use layout::{DEFAULT_PIN_DIR, PinLayout};
pub use maps::{
    BinderStats, pinned_memory, read_config, read_grant, read_occupancy, read_receiver, read_stats,
    read_turn,
};
pub use plan::Plan;
pub use rate::PacingRate;
pub use replan::{replan, replan_if_sources_changed};
pub use state::SenderState;

/// Why the binder could not be set up or taken down.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    #[error("{0}")]
    Input(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    Host(#[from] srap_host::HostError),
    #[error("steering toward {receiver}{}: {source}", dport.map(|p| format!(" port {p}")).unwrap_or_default())]
    PortTables {
        receiver: IpAddr,
        dport: Option<u16>,
        source: PortTableError,
    },
    #[error("state file {path} is unreadable ({problem}): remove it, then run `srap-agent detach`")]
    State { path: PathBuf, problem: String },
    #[error(
        "{dir} is not on a bpf file system: mount one (`mount -t bpf bpf /sys/fs/bpf`) or pick --pin-dir under it"
    )]
    NotBpffs { dir: PathBuf },
    #[error("pins under {dir} do not match this agent ({detail}): run `srap-agent detach --pin-dir {}` first", dir.display())]
    StalePins { dir: PathBuf, detail: String },
    #[error(
        "the binder pinned under {dir} is attached with maps sized by {pinned}, and this agent's \
         settings size them by {wanted} ({maps}): its occupancy maps hold the slots of the flows \
         open now, so they are not re-created under a running binder. Start the agent with the \
         pinned settings ({pinned}, in the --config file or as flags), or run `srap-agent detach \
         --pin-dir {}` first (flows open then keep their ports, but their CPUs are no longer \
         counted)",
        dir.display()
    )]
    PinnedSizes {
        dir: PathBuf,
        pinned: String,
        wanted: String,
        maps: String,
    },
    #[error(
        "{what}: these receivers need {needed}, the binder is sized for {sized} (--{key} {value}): \
         raise --{key} (`{key}` in the --config file){hint}",
        key = setting.key(),
        value = sizes.get(*setting)
    )]
    Capacity {
        what: &'static str,
        needed: u64,
        sized: u64,
        setting: SizeSetting,
        sizes: BinderSizes,
        hint: &'static str,
    },
    #[error(
        "the binder pinned under {pin_dir} is attached to {attached}, not {requested}: \
         run `srap-agent detach --pin-dir {}` first, or use another --pin-dir",
        pin_dir.display()
    )]
    AttachedElsewhere {
        pin_dir: PathBuf,
        attached: PathBuf,
        requested: PathBuf,
    },
    #[error(
        "the agent reserved ports in another network namespace (inode {theirs}, this is {ours}): \
         run detach where the agent ran (e.g. `ip netns exec NS srap-agent detach`)"
    )]
    OtherNetns { theirs: u64, ours: u64 },
    #[error("loading the SRAP eBPF object: {0}")]
    Load(#[source] aya::EbpfError),
    #[error("the SRAP eBPF object has no {0} (agent and eBPF build out of step?)")]
    Missing(&'static str),
    #[error("program {program}: {source}")]
    Program {
        program: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("link of {program}: {source}")]
    Link {
        program: &'static str,
        source: aya::programs::links::LinkError,
    },
    #[error("pinning {path}: {source}")]
    Pin {
        path: PathBuf,
        source: aya::pin::PinError,
    },
    #[error("map {map}: {source}")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
}

/// One receiver address to steer toward, with the RSS model of its host.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its row in the binder's per-receiver maps.
    pub index: u32,
    pub addr: IpAddr,
    pub model: Arc<RssModel>,
}

impl Target {
    /// `receivers` (rows 1, 2, ...), all on one receiver host's `model`;
    /// with a model of this host's own NIC (`--steer local`), all on its
    /// one row, [`LOCAL_ROW`].
    pub fn all(model: &RssModel, receivers: &[IpAddr]) -> Vec<Target> {
        let model = Arc::new(model.clone());
        receivers
            .iter()
            .enumerate()
            .map(|(index, addr)| Target {
                index: match model.end() {
                    End::Remote => FIRST_RECEIVER_ROW + index as u32,
                    End::Local => LOCAL_ROW,
                },
                addr: *addr,
                model: model.clone(),
            })
            .collect()
    }
}

/// What `srap-agent sender` steers, and where.
#[derive(Debug, Clone)]
pub struct SenderOptions {
    /// Each receiver address with its own model (several receiver hosts
    /// may have different NICs).
    pub targets: Vec<Target>,
    /// Destination ports to steer; empty: every port.
    pub ports: Vec<u16>,
    /// The cgroup (default `<cgroup2>/srap`); relative paths are below the mount.
    pub cgroup: Option<PathBuf>,
    pub pin_dir: PathBuf,
    pub pacing_rate: Option<PacingRate>,
    /// Source ports to use (default: the kernel's `ip_local_port_range`).
    pub port_range: Option<PortRange>,
    /// This host's own NIC (a model facing the local end) when each flow
    /// is placed on both NICs (`--steer both`); `None`: the targets' NICs
    /// only.
    pub local: Option<Arc<RssModel>>,
    /// Where each flow's local end goes (`--local-placement`).
    pub local_placement: LocalPlacement,
    /// Whether a bond on the route has its members balanced
    /// (`--bond-members`), and the bonds its counters paused.
    pub bonds: bond::BondSettings,
    /// What the binder's maps are sized for (`--max-*`).
    pub sizes: BinderSizes,
}

impl SenderOptions {
    /// The receiver addresses steered toward, as whatever collection the
    /// caller keeps them in.
    pub fn target_addrs<C: FromIterator<IpAddr>>(&self) -> C {
        self.targets.iter().map(|t| t.addr).collect()
    }
}

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
}

/// The plan of `options`: for the targets' NICs, and this host's too when
/// both ends are planned. A plan the maps' sizes cannot hold is an error
/// naming the setting to raise, never a plan cut short.
pub fn plan_for(options: &SenderOptions, range: PortRange) -> Result<Plan, SenderError> {
    let receivers = receiver_inputs(&options.targets, &options.bonds)?;
    let plan = match &options.local {
        Some(local) => Plan::build_both(&receivers, &options.ports, range, local),
        None => Plan::build_each(&receivers, &options.ports, range),
    }?;
    plan.check_fits(&options.sizes)?;
    Ok(plan)
}

/// Each target with its model and where flows to it may come from.
pub fn receiver_inputs(
    targets: &[Target],
    bonds: &bond::BondSettings,
) -> Result<Vec<plan::ReceiverInput>, SenderError> {
    let addrs: Vec<IpAddr> = targets.iter().map(|t| t.addr).collect();
    Ok(receiver_sources(&addrs, bonds)?
        .into_iter()
        .zip(targets)
        .map(|(sources, target)| plan::ReceiverInput {
            index: target.index,
            model: target.model.clone(),
            sources,
        })
        .collect())
}

/// Each receiver with the route's source address toward it, the other
/// local addresses an application may bind, and the bond the route leaves
/// by (its members balanced unless `bonds` says not).
pub fn receiver_sources(
    receivers: &[IpAddr],
    bonds: &bond::BondSettings,
) -> Result<Vec<plan::ReceiverSources>, SenderError> {
    receivers
        .iter()
        .map(|r| {
            Ok(plan::ReceiverSources {
                receiver: *r,
                route: route::source_toward(*r)?,
                others: local::addresses_toward(*r)?,
                bond: bond::EgressBond::toward(*r, bonds),
            })
        })
        .collect()
}

/// True when a receiver's route source or the host's addresses toward it
/// are no longer what `steering` planned for (an address added or removed,
/// a route changed): then [`replan`] plans for the new ones.
pub fn sources_changed(
    binder: &RunningBinder,
    receivers: &[IpAddr],
    bonds: &bond::BondSettings,
) -> Result<bool, SenderError> {
    let now = receiver_sources(receivers, bonds)?;
    let plan = &binder.plan;
    if now.len() != plan.receivers.len() {
        return Ok(true);
    }
    Ok(now.iter().zip(&plan.receivers).any(|(wanted, planned)| {
        let had: BTreeSet<IpAddr> = planned
            .tables
            .iter()
            .filter_map(|&t| plan.tables.get(t))
            .map(|t| t.source)
            .collect();
        let want: BTreeSet<IpAddr> = wanted.sources().into_iter().collect();
        wanted.route != planned.source || had != want || wanted.bond != planned.bond
    }))
}

/// Computes, fills, attaches and pins (or adopts what a previous agent
/// pinned under the same directory).
pub fn start(options: &SenderOptions, object: &[u8]) -> Result<RunningBinder, SenderError> {
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

    let mut ebpf = attach::load(&layout, object, &options.sizes)?;
    maps::fill(&mut ebpf, &plan, options)?;

    record_state(&state_path, previous.as_ref(), &cgroup)?;

    let attachment = attach::ensure_attached(&mut ebpf, &layout, &cgroup)?;
    info!(
        cgroup = %cgroup.display(),
        pins = %layout.dir().display(),
        ?attachment,
        "binder steering"
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
    })
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
                problem,
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
/// an agent would pin, for measuring it ([`pinned_memory`]). Undo with
/// [`remove_pins`].
pub fn create_maps(pin_dir: &Path, object: &[u8], sizes: &BinderSizes) -> Result<(), SenderError> {
    attach::load(&PinLayout::new(pin_dir), object, sizes).map(drop)
}

/// Removes every pin the binder makes under `pin_dir` (links first), and
/// the directory when nothing else is in it; returns the pins removed.
pub fn remove_pins(pin_dir: &Path) -> Result<usize, SenderError> {
    attach::remove_pins(&PinLayout::new(pin_dir))
}

/// What [`detach`] removed.
#[derive(Debug, Clone, Default)]
pub struct DetachReport {
    pub pins_removed: usize,
    pub ports_unreserved: usize,
    pub cgroup_removed: Option<PathBuf>,
    /// Things left in place, and why.
    pub notes: Vec<String>,
}

/// Removes the links (detaching the programs), the program and map pins, the
/// reserved ports the agent added and the cgroup it created (when empty).
pub fn detach(pin_dir: &Path) -> Result<DetachReport, SenderError> {
    let layout = PinLayout::new(pin_dir);
    let state_path = state::path_for(layout.dir());
    let state = state::load(&state_path)?;
    let netns = state::current_netns();
    if let Some(state) = &state
        && state.netns != netns
        && !state.reserved_added.is_empty()
    {
        return Err(SenderError::OtherNetns {
            theirs: state.netns,
            ours: netns,
        });
    }
    let mut report = DetachReport {
        pins_removed: attach::remove_pins(&layout)?,
        ..DetachReport::default()
    };
    let Some(state) = state else {
        report.notes.push(format!(
            "no state file {}: only pins removed",
            state_path.display()
        ));
        return Ok(report);
    };
    let added = reserved::parse(&state.reserved_added).map_err(|problem| SenderError::State {
        path: state_path.clone(),
        problem,
    })?;
    if !added.is_empty() {
        report.ports_unreserved = Reservation::read(added)?.release()?;
    }
    if state.cgroup_created {
        match std::fs::remove_dir(&state.cgroup) {
            Ok(()) => report.cgroup_removed = Some(state.cgroup.clone()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => report.notes.push(format!(
                "cgroup {} left in place: {err} (processes still in it?)",
                state.cgroup.display()
            )),
        }
    }
    std::fs::remove_file(&state_path).map_err(|source| SenderError::Io {
        what: format!("removing {}", state_path.display()),
        source,
    })?;
    Ok(report)
}
