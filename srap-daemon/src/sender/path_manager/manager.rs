//! The path manager running: the namespace switched to the userspace
//! path manager, its events heard and answered on a thread of its own,
//! every followed connection's reads sampled each [`TICK`], and the
//! namespace's previous path manager put back when it stops.
//!
//! What it changes in the namespace: `net.mptcp.pm_type` (restored at a
//! clean stop and by `srap-agent detach`, from the state file). Killed,
//! it leaves every connection with the subflows and flags it has; the
//! namespace's new connections then get no further subflow until an agent
//! runs again, which adopts the open ones from the kernel's listing.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::Ebpf;
use srap_host::{
    HostError,
    mptcp_pm::{PathManager, PathManagerKind, PmEvents},
    netlink::NetlinkError,
};
use tracing::{debug, info, warn};

use srap_common::reader::ReadCounts;
use srap_status::sender::PathManagerRow;

use super::{
    connections::{Action, Connections, FollowedNic, KernelSettings, Owner, Subflow},
    reads::{ReaderError, Reads},
    status::{self, MoveTimes},
};
use crate::{
    sender::{error::SenderError, state},
    sock_diag::{TcpDiag, mptcp::Subflows},
};

/// How often the reads are sampled and new connections' cgroups read.
pub const TICK: Duration = Duration::from_millis(100);
/// How long a connection's cgroup may stay unknown before it is taken as
/// another cgroup's (its first subflow gone from the listing already).
const RESOLVE_WITHIN: Duration = Duration::from_secs(1);
/// Ticks between two repair rounds (a subflow made again through a NIC
/// that came back).
const TICKS_PER_REPAIR: u64 = 10;
/// How long a subflow refused as too early is asked for again.
const RETRY_WITHIN: Duration = Duration::from_secs(10);

/// Why the path manager did not start.
#[derive(Debug, thiserror::Error)]
pub enum PathManagerError {
    #[error(
        "mptcpd (pid {0}) is this host's MPTCP path manager: stop it (`systemctl stop mptcpd`) \
         or run SRAP with `--mptcp subflows`"
    )]
    Mptcpd(u32),
    #[error("the namespace's path manager setting: {0}")]
    Kind(#[source] HostError),
    #[error("the MPTCP path manager's netlink family: {0}")]
    Netlink(#[source] NetlinkError),
    #[error(transparent)]
    Reader(#[from] ReaderError),
    #[error(transparent)]
    State(SenderError),
}

/// What it needs to know of this host.
#[derive(Debug, Clone)]
pub struct FollowSettings {
    /// The NICs a steered connection gets a subflow through.
    pub nics: Vec<FollowedNic>,
    /// The steered cgroup.
    pub cgroup: PathBuf,
    /// The binder's state file, where the previous path manager is kept
    /// for `srap-agent detach`.
    pub state_path: PathBuf,
}

/// The running path manager; stops (and restores the namespace's
/// previous one) when dropped.
pub struct FollowReader {
    status: Arc<std::sync::Mutex<PathManagerRow>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The namespace's path manager before this one.
    pub before: PathManagerKind,
    state_path: PathBuf,
}

impl FollowReader {
    /// Takes over the namespace's MPTCP connections from now on; the
    /// open ones are adopted.
    pub fn start(ebpf: &mut Ebpf, settings: FollowSettings) -> Result<Self, PathManagerError> {
        if let Some(pid) = mptcpd_pid() {
            return Err(PathManagerError::Mptcpd(pid));
        }
        let before = PathManagerKind::current().map_err(PathManagerError::Kind)?;
        let reads = Reads::attach(ebpf)?;
        let pm = PathManager::open().map_err(PathManagerError::Netlink)?;
        let events = PmEvents::open(TICK).map_err(PathManagerError::Netlink)?;
        let diag = TcpDiag::open().map_err(PathManagerError::Netlink)?;
        let before = remember(&settings.state_path, before)?;
        PathManagerKind::Userspace
            .install()
            .map_err(PathManagerError::Kind)?;
        let state_path = settings.state_path.clone();
        let status = Arc::new(std::sync::Mutex::new(PathManagerRow::default()));
        let mut manager = Manager {
            status: Arc::clone(&status),
            before,
            pm,
            events,
            reads,
            diag,
            table: Connections::new(settings.nics.clone()),
            settings,
            first_seen: BTreeMap::new(),
            retry: Vec::new(),
            move_times: MoveTimes::default(),
            ticks: 0,
        };
        manager.adopt_open();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("srap-path-manager".into())
            .spawn(move || manager.run(&stopping))
            .map_err(|e| {
                PathManagerError::Kind(HostError::Io {
                    what: "starting the path manager's thread".into(),
                    source: e,
                })
            })?;
        info!(
            ?before,
            "SRAP is the namespace's MPTCP path manager (following each reader)"
        );
        Ok(Self {
            status,
            stop,
            thread: Some(thread),
            before,
            state_path,
        })
    }
}

impl FollowReader {
    /// What it has done so far, and each connection it follows, as of
    /// its last tick.
    pub fn status(&self) -> PathManagerRow {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FollowReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        match self.before.install() {
            Ok(()) => info!(before = ?self.before, "the namespace's MPTCP path manager restored"),
            Err(err) => warn!("restoring the namespace's MPTCP path manager: {err}"),
        }
        if let Err(err) = forget(&self.state_path) {
            warn!("{err}");
        }
    }
}

/// Keeps the namespace's path manager before this one in the state file,
/// and gives the one to restore: a killed agent's record wins over what
/// it left installed (userspace).
fn remember(path: &Path, now: PathManagerKind) -> Result<PathManagerKind, PathManagerError> {
    let mut state = state::load(path)
        .map_err(PathManagerError::State)?
        .unwrap_or_default();
    let before = *state.path_manager_before.get_or_insert(now);
    state::save(path, &state).map_err(PathManagerError::State)?;
    Ok(before)
}

/// Clears the record once the previous path manager is back.
fn forget(path: &Path) -> Result<(), SenderError> {
    let Some(mut state) = state::load(path)? else {
        return Ok(());
    };
    state.path_manager_before = None;
    state::save(path, &state)
}

/// The loop's state.
struct Manager {
    status: Arc<std::sync::Mutex<PathManagerRow>>,
    /// The namespace's path manager before this one, for the status.
    before: PathManagerKind,
    pm: PathManager,
    events: PmEvents,
    reads: Reads,
    diag: TcpDiag,
    settings: FollowSettings,
    table: Connections,
    /// When each connection still unresolved was first looked for in the
    /// kernel's listing.
    first_seen: BTreeMap<u32, Instant>,
    /// Subflows the kernel refused as too early (`ENOTCONN`: the
    /// connection is not fully established until data has been
    /// acknowledged at its level), asked again each tick until
    /// [`RETRY_WITHIN`] after the first ask.
    retry: Vec<(Action, Instant)>,
    move_times: MoveTimes,
    ticks: u64,
}

impl Manager {
    fn run(mut self, stop: &AtomicBool) {
        let mut last_tick = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            match self.events.next() {
                Ok(events) => {
                    for event in events {
                        let actions = self.table.on_event(&event);
                        self.carry_out(actions);
                    }
                }
                Err(NetlinkError::TimedOut(_)) => {}
                Err(err) => {
                    // A socket that fails at once would spin this loop.
                    debug!("the path manager's events: {err}");
                    std::thread::sleep(TICK);
                }
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.tick();
            }
        }
    }

    /// Reads new connections' cgroups, then every followed one's reads.
    fn tick(&mut self) {
        self.resolve_new();
        self.retry_early();
        self.ticks += 1;
        if self.ticks.is_multiple_of(TICKS_PER_REPAIR) {
            self.repair();
        }
        let followed: Vec<u32> = self
            .table
            .by_token
            .values()
            .filter(|c| matches!(c.owner, Owner::Steered | Owner::Adopted))
            .map(|c| c.token)
            .collect();
        let now = Instant::now();
        for token in followed {
            if let Some(counts) = self.reads.counts(token) {
                self.sample(token, &counts, now);
            }
        }
        self.publish();
    }

    /// Takes one sample of a followed connection's reads: its flags
    /// follow a move, and the move is timed.
    fn sample(&mut self, token: u32, counts: &ReadCounts, now: Instant) {
        let before = self.table.by_token.get(&token).map(|c| c.reader.node());
        let actions = self.table.on_reads(token, counts);
        let Some(conn) = self.table.by_token.get(&token) else {
            return;
        };
        let moved = before.is_some_and(|b| b.is_some() && b != conn.reader.node());
        self.move_times
            .sampled(token, now, TICK, conn.reader.pending(), moved);
        if before != Some(conn.reader.node()) {
            info!(
                "MPTCP connection {token:08x}: read on node {:?} (move {}){}",
                conn.reader.node(),
                conn.reader.moves,
                conn.unplaced
                    .as_deref()
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default()
            );
        }
        self.carry_out(actions);
    }

    fn publish(&mut self) {
        self.move_times.prune(&self.table);
        let row = status::row(
            &self.table,
            self.before,
            &self.settings.nics,
            &self.move_times,
        );
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = row;
    }

    fn resolve_new(&mut self) {
        let pending = self.table.unresolved();
        self.first_seen
            .retain(|token, _| pending.iter().any(|(t, _, _)| t == token));
        if pending.is_empty() {
            return;
        }
        let subflows = self.diag.mptcp_subflows().unwrap_or_else(|err| {
            warn!("the kernel's subflow listing: {err}: new connections count as unsteered");
            Subflows::default()
        });
        let steered = cgroup_ids(&self.settings.cgroup);
        let kernel = self.kernel_settings();
        for (token, local, remote) in pending {
            let seen = self.first_seen.entry(token).or_insert_with(Instant::now);
            let owner = match subflows.get(&(local, remote)).and_then(|s| s.cgroup) {
                Some(id) if steered.contains(&id) => Owner::Steered,
                Some(_) => Owner::Other,
                None if seen.elapsed() >= RESOLVE_WITHIN => Owner::Other,
                None => continue,
            };
            self.first_seen.remove(&token);
            let actions = self.table.resolve(token, owner, &kernel);
            self.carry_out(actions);
        }
    }

    /// A subflow again through each followed NIC that is up and that a
    /// connection has none through (it closed while the NIC was down).
    fn repair(&mut self) {
        let holders = match srap_host::local::holders() {
            Ok(holders) => holders,
            Err(err) => {
                debug!("this host's NICs, for the path manager's repair: {err}");
                return;
            }
        };
        let up: Vec<FollowedNic> = self
            .settings
            .nics
            .iter()
            .filter(|nic| holders.iter().any(|h| h.name == nic.name && h.up))
            .cloned()
            .collect();
        let actions = self.table.repair(&up);
        self.carry_out(actions);
    }

    /// Asks again for the subflows refused as too early whose connection
    /// is still open.
    fn retry_early(&mut self) {
        let due = std::mem::take(&mut self.retry);
        for (action, first) in due {
            let Action::CreateSubflow {
                token,
                local,
                remote,
            } = &action
            else {
                continue;
            };
            if !self.table.by_token.contains_key(token) {
                continue;
            }
            match self.pm.create_subflow(*token, local, *remote) {
                Ok(()) => {}
                Err(err) if err.errno() == Some(libc::ENOTCONN) => {
                    if first.elapsed() < RETRY_WITHIN {
                        self.retry.push((action, first));
                    } else {
                        self.refused(&action, &err);
                    }
                }
                Err(err) => self.refused(&action, &err),
            }
        }
    }

    /// The namespace's endpoints and limits now (none when unreadable).
    fn kernel_settings(&mut self) -> KernelSettings {
        KernelSettings {
            endpoints: self.pm.endpoints().unwrap_or_default(),
            limits: self.pm.limits().unwrap_or_default(),
        }
    }

    /// Takes the connections already open from the kernel's listing.
    fn adopt_open(&mut self) {
        let Ok(subflows) = self.diag.mptcp_subflows() else {
            return;
        };
        for (token, subflows) in by_token(&subflows) {
            let actions = self.table.adopt(token, subflows);
            self.carry_out(actions);
        }
    }

    fn carry_out(&mut self, actions: Vec<Action>) {
        for action in actions {
            let done = match &action {
                Action::CreateSubflow {
                    token,
                    local,
                    remote,
                } => self.pm.create_subflow(*token, local, *remote),
                Action::Announce { token, local } => self.pm.announce(*token, local),
                Action::SetBackup {
                    token,
                    local,
                    remote,
                    backup,
                } => self.pm.set_backup(*token, *local, *remote, *backup),
                Action::Follow(token) => {
                    if let Err(err) = self.reads.follow(*token) {
                        warn!("following MPTCP connection {token:08x}: {err}");
                    }
                    Ok(())
                }
                Action::Forget(token) => {
                    self.reads.forget(*token);
                    Ok(())
                }
            };
            match done {
                Ok(()) => {}
                Err(err)
                    if err.errno() == Some(libc::ENOTCONN)
                        && matches!(action, Action::CreateSubflow { .. }) =>
                {
                    debug!("{action:?}: not fully established yet, asked again next tick");
                    self.retry.push((action, Instant::now()));
                }
                Err(err) => self.refused(&action, &err),
            }
        }
    }

    fn refused(&mut self, action: &Action, err: &NetlinkError) {
        warn!("the kernel refused {action:?}: {err}");
        let token = match action {
            Action::CreateSubflow { token, .. } | Action::Announce { token, .. } => *token,
            _ => return,
        };
        if let Some(conn) = self.table.by_token.get_mut(&token) {
            conn.refused += 1;
        }
    }
}

/// The open subflows by connection token, each with its local address
/// id, the connection's first subflow (id 0) first.
fn by_token(subflows: &Subflows) -> BTreeMap<u32, Vec<(u8, Subflow)>> {
    let mut out: BTreeMap<u32, Vec<(u8, Subflow)>> = BTreeMap::new();
    for ((local, remote), seen) in subflows {
        out.entry(seen.token).or_default().push((
            seen.local_id,
            Subflow {
                local: *local,
                remote: *remote,
                backup: false,
            },
        ));
    }
    out.into_iter()
        .map(|(token, mut list)| {
            list.sort_by_key(|(id, s)| (*id, s.local));
            (token, list)
        })
        .collect()
}

/// The cgroup2 ids (directory inodes) of `cgroup` and every cgroup below
/// it: a socket's cgroup id is one of these when it is steered.
fn cgroup_ids(cgroup: &Path) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
    let mut dirs = vec![cgroup.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(meta) = fs::metadata(&dir) else {
            continue;
        };
        ids.insert(meta.ino());
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    ids
}

/// The pid of a running mptcpd, if one runs.
fn mptcpd_pid() -> Option<u32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = fs::read_to_string(entry.path().join("comm")).ok()?;
        (comm.trim() == "mptcpd").then_some(pid)
    })
}
