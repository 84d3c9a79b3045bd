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

use super::{
    connections::{Action, Connections, FollowedNic, KernelSettings, Owner, Subflow},
    reads::{ReaderError, Reads},
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

/// What the path manager has done, for the logs and the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowSummary {
    /// Connections of the namespace now, and those whose reader is
    /// followed.
    pub connections: usize,
    pub followed: usize,
    /// Reader moves followed, backup flags changed, subflows asked for
    /// and requests the kernel refused.
    pub moves: u64,
    pub flips: u64,
    pub subflows_made: u64,
    pub refused: u64,
    /// Followed connections with no subflow on their reader's node.
    pub unplaced: usize,
}

/// The running path manager; stops (and restores the namespace's
/// previous one) when dropped.
pub struct FollowReader {
    summary: Arc<std::sync::Mutex<FollowSummary>>,
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
        let summary = Arc::new(std::sync::Mutex::new(FollowSummary::default()));
        let mut manager = Manager {
            summary: Arc::clone(&summary),
            pm,
            events,
            reads,
            diag,
            settings,
            table: Connections::default(),
            first_seen: BTreeMap::new(),
            retry: Vec::new(),
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
            summary,
            stop,
            thread: Some(thread),
            before,
            state_path,
        })
    }
}

impl FollowReader {
    /// What it has done so far.
    pub fn summary(&self) -> FollowSummary {
        *self
            .summary
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    summary: Arc<std::sync::Mutex<FollowSummary>>,
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
        let followed: Vec<u32> = self
            .table
            .by_token
            .values()
            .filter(|c| matches!(c.owner, Owner::Steered | Owner::Adopted))
            .map(|c| c.token)
            .collect();
        for token in followed {
            let Some(counts) = self.reads.counts(token) else {
                continue;
            };
            let before = self.table.by_token.get(&token).map(|c| c.reader.node());
            let actions = self.table.on_reads(token, &counts, &self.settings.nics);
            if let Some(conn) = self.table.by_token.get(&token)
                && before != Some(conn.reader.node())
            {
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
        self.publish();
    }

    fn publish(&self) {
        let conns = self.table.by_token.values();
        let followed = |c: &&super::connections::Connection| {
            matches!(c.owner, Owner::Steered | Owner::Adopted)
        };
        let summary = FollowSummary {
            connections: self.table.by_token.len(),
            followed: conns.clone().filter(followed).count(),
            moves: conns.clone().map(|c| c.reader.moves).sum(),
            flips: self.table.flips,
            subflows_made: self.table.subflows_made,
            refused: conns.clone().map(|c| c.refused).sum(),
            unplaced: conns.filter(|c| c.unplaced.is_some()).count(),
        };
        *self
            .summary
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = summary;
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
            let actions = self
                .table
                .resolve(token, owner, &self.settings.nics, &kernel);
            self.carry_out(actions);
        }
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

/// The open subflows by connection token, each connection's first
/// subflow (local id 0) first.
fn by_token(subflows: &Subflows) -> BTreeMap<u32, Vec<Subflow>> {
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
            (token, list.into_iter().map(|(_, s)| s).collect())
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
