//! `srap-agent receiver` and `srap-agent sender` as processes in a
//! namespace, as a user runs them on two hosts. Each agent has a directory
//! of its own under the temp directory (its log, its description file, its
//! control socket), so nothing of the host's is touched and agents of
//! concurrent tests never meet.
//!
//! An agent's stdout and stderr go to one log file; waits poll it (and fail
//! at once, naming the log, if the agent exited). When an error names the
//! log, the directory is kept for the reader; when a test panics, the log's
//! tail is printed as the agent drops. Dropping an agent kills it by PID,
//! and a sender's binder is detached in its namespace, its pins, state file
//! and cgroup removed.

use std::{
    ffi::OsString,
    fs,
    io::{Read as _, Seek as _, SeekFrom},
    net::SocketAddr,
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Output, Stdio},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, anyhow};
use srap_common::{binder::SlotGrant, rss::RssDescription};
use srap_daemon::sender::{BinderStats, PinLayout};
use srap_status::{SenderStatus, Status, control};

use crate::{
    exec::{in_netns, in_netns_bounded},
    interrupt::interrupted,
    names::unique_name,
    netns::NetNs,
    programs::ChildGuard,
    support::{poll_until, remove_cgroup},
};

/// Bound on an agent's start and on every wait for its log.
const WAIT: Duration = Duration::from_secs(20);
/// How long a stopped agent may take to exit on SIGTERM (it takes well
/// under a second; a loaded machine may be slow).
const GRACE: Duration = Duration::from_secs(10);
/// Lines of a log shown with an error or a failed test.
const TAIL: usize = 30;
/// The sender's source ports unless [`SenderOpts::port_range`] says.
const DEFAULT_PORT_RANGE: &str = "32768-60999";

/// The source ports the lab's binder and sender agents use: below the
/// namespace's ephemeral range, so kernel-chosen ports never collide with
/// them.
pub const LAB_PORT_RANGE: &str = "10000-32767";

/// The receiver agent's peer port (`--listen`) in the lab's and the
/// guests' set-ups.
pub const PEER_PORT: u16 = 7447;

/// An agent's output (stdout and stderr, as written) in its log file, from
/// the start of the agent's current run.
#[derive(Debug)]
pub struct AgentLog {
    path: PathBuf,
    /// Where the current run's output begins (an agent started again
    /// appends).
    from: u64,
}

impl AgentLog {
    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current run's output so far.
    pub fn text(&self) -> String {
        let Ok(mut file) = fs::File::open(&self.path) else {
            return String::new();
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.from)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return String::new();
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The first line of the current run that `pred` accepts.
    pub fn find(&self, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.text().lines().find(|l| pred(l)).map(str::to_owned)
    }

    /// The current run's last lines, to show with an error.
    pub fn tail(&self) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(TAIL)..].join("\n")
    }

    /// Opens the file for a new run's output (appending), and marks where
    /// that run begins.
    fn next_run(&mut self) -> anyhow::Result<fs::File> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        self.from = file.metadata().map_or(0, |m| m.len());
        Ok(file)
    }
}

/// One agent process in a namespace, with its directory and log.
struct Process {
    /// `receiver` or `sender`: names the log and the errors.
    role: &'static str,
    /// Behind a lock so that waits (which look whether it exited) need no
    /// `&mut`.
    child: Mutex<Option<ChildGuard>>,
    log: AgentLog,
    dir: PathBuf,
    /// Set when an error named the log: the directory outlives us.
    keep: AtomicBool,
    ns: NetNs,
}

impl Process {
    fn new(role: &'static str, ns: &NetNs) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(lab_name());
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            role,
            child: Mutex::new(None),
            log: AgentLog {
                path: dir.join(format!("{role}.log")),
                from: 0,
            },
            dir,
            keep: AtomicBool::new(false),
            ns: ns.clone(),
        })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Starts `args` of the agent binary `agent` in the namespace, bounded
    /// to `caps` if given, its output into the log.
    fn spawn(
        &mut self,
        agent: &Path,
        args: &[OsString],
        caps: Option<&[String]>,
    ) -> anyhow::Result<()> {
        self.kill();
        let log = self.log.next_run()?;
        let mut command = in_netns_bounded(&self.ns, agent, caps);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        *self.child() = Some(ChildGuard::spawn(&mut command)?);
        Ok(())
    }

    fn child(&self) -> MutexGuard<'_, Option<ChildGuard>> {
        self.child
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn exited(&self) -> bool {
        self.child().as_mut().is_none_or(ChildGuard::exited)
    }

    fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(ChildGuard::id)
    }

    /// Waits (up to `within`) until `ready` holds; fails early if the agent
    /// exited, naming its log.
    fn wait_until(
        &self,
        what: &str,
        within: Duration,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let waited = poll_until(within, Duration::from_millis(20), || {
            if ready(self) {
                return ControlFlow::Break(Ok(()));
            }
            if self.exited() {
                // What it did before it exited counts.
                if ready(self) {
                    return ControlFlow::Break(Ok(()));
                }
                let exited = format!("the {} agent exited before {what}", self.role);
                return ControlFlow::Break(Err(self.failure(&exited)));
            }
            if interrupted() {
                return ControlFlow::Break(Err(anyhow!("interrupted")));
            }
            ControlFlow::Continue(())
        });
        waited.unwrap_or_else(|()| Err(self.failure(&format!("no {what} within {within:?}"))))
    }

    /// The first line of the log's current run that `pred` accepts,
    /// waiting for it up to `within`.
    fn wait_for_log(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let mut found = None;
        self.wait_until(what, within, |p| {
            found = p.log.find(&pred);
            found.is_some()
        })?;
        found.context("the line was found")
    }

    /// An error naming `what` went wrong, the log (kept) and its tail.
    fn failure(&self, what: &str) -> anyhow::Error {
        self.keep.store(true, Ordering::Relaxed);
        anyhow::anyhow!(
            "{what}; the {} agent's log (kept): {}\n{}",
            self.role,
            self.log.path.display(),
            self.log.tail()
        )
    }

    /// SIGTERM, so the agent removes what it made, then SIGKILL if it
    /// lingers; its exit status if it exited on its own.
    fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child().take()?;
        child.terminate(GRACE)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child().take() {
            child.kill();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- the {} agent's log ({}), last lines ---\n{}\n---",
                self.role,
                self.log.path.display(),
                self.log.tail()
            );
        }
        if !self.keep.load(Ordering::Relaxed) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// How to start an agent: its binary, the settings of its role
/// ([`ReceiverRole`], [`SenderRole`]) and any further flags, as given
/// ([`AgentOpts::arg`]: a `--psk-file`, say), so a new flag needs no change
/// here.
#[derive(Clone, Debug)]
pub struct AgentOpts<Role> {
    agent: PathBuf,
    role: Role,
    args: Vec<OsString>,
    /// Bounded to these capabilities ([`AgentOpts::capabilities`]).
    caps: Option<Vec<String>>,
}

/// How to start a receiver agent.
pub type ReceiverOpts = AgentOpts<ReceiverRole>;
/// How to start a sender agent.
pub type SenderOpts = AgentOpts<SenderRole>;

impl<Role> AgentOpts<Role> {
    /// One more flag or value, as given.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Runs the agent with only the capabilities `caps` (`bpf`,
    /// `net_admin`, …), as its systemd unit's `CapabilityBoundingSet` does
    /// ([`super::exec::in_netns_bounded`]).
    pub fn capabilities(mut self, caps: Vec<String>) -> Self {
        self.caps = Some(caps);
        self
    }

    /// More flags and values, as given.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// A receiver agent's own settings: `srap-agent receiver --iface IFACE
/// --listen ADDR --control SOCKET`, its description and observer.
#[derive(Clone, Debug)]
pub struct ReceiverRole {
    iface: String,
    listen: SocketAddr,
    rss: Option<RssDescription>,
    verify: bool,
}

impl AgentOpts<ReceiverRole> {
    /// The agent binary `agent` on `iface`, serving senders on `listen`;
    /// its observer on, the NIC discovered.
    pub fn new(agent: impl Into<PathBuf>, iface: impl Into<String>, listen: SocketAddr) -> Self {
        Self {
            agent: agent.into(),
            role: ReceiverRole {
                iface: iface.into(),
                listen,
                rss: None,
                verify: true,
            },
            args: Vec::new(),
            caps: None,
        }
    }

    /// Serves `description` (from a file of the agent's own, see
    /// [`ReceiverAgent::set_rss`]) instead of discovering the NIC.
    pub fn rss(mut self, description: RssDescription) -> Self {
        self.role.rss = Some(description);
        self
    }

    /// `--no-verify`: no receive observer (the test runs its own, or none).
    pub fn no_verify(mut self) -> Self {
        self.role.verify = false;
        self
    }
}

/// A running `srap-agent receiver`; killed by PID on drop (see
/// [`ReceiverAgent::stop`] for a graceful end).
pub struct ReceiverAgent {
    process: Process,
    listen: SocketAddr,
    /// Its binary, arguments and capabilities, to start it again
    /// ([`Self::restart`]).
    agent: PathBuf,
    args: Vec<OsString>,
    caps: Option<Vec<String>>,
}

impl ReceiverAgent {
    /// Starts the agent in `ns` and waits until it serves (its control
    /// socket is up, which comes after its listener).
    pub fn start(ns: &NetNs, opts: ReceiverOpts) -> anyhow::Result<Self> {
        let role = &opts.role;
        let mut agent = Self {
            process: Process::new("receiver", ns)?,
            listen: role.listen,
            agent: opts.agent.clone(),
            args: Vec::new(),
            caps: opts.caps.clone(),
        };
        let mut args: Vec<OsString> = ["receiver", "--iface"].map(OsString::from).into();
        args.push((&role.iface).into());
        args.extend(["--listen".into(), role.listen.to_string().into()]);
        args.extend(["--control".into(), agent.control().into()]);
        if let Some(description) = &role.rss {
            agent.set_rss(description)?;
            args.extend(["--rss".into(), agent.rss_file().into()]);
        }
        if !role.verify {
            args.push("--no-verify".into());
        }
        args.extend(opts.args);
        agent.args = args;
        agent
            .process
            .spawn(&agent.agent, &agent.args, agent.caps.as_deref())?;
        let control = agent.control();
        agent
            .process
            .wait_until("its control socket", WAIT, |_| control.exists())?;
        Ok(agent)
    }

    /// SIGKILL, as a crash: its control socket file stays behind with
    /// nobody answering on it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again as it was started (same directory, socket and log),
    /// and waits until its control socket answers.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.process
            .spawn(&self.agent, &self.args, self.caps.as_deref())?;
        let control = self.control();
        self.process
            .wait_until("its control socket to answer", WAIT, |_| {
                control::request_status(&control).is_ok()
            })
    }

    /// Where it serves senders: a sender's `--peer`.
    pub fn peer(&self) -> String {
        self.listen.to_string()
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Its control socket (`srap status --control`).
    pub fn control(&self) -> PathBuf {
        self.process.file("receiver.sock")
    }

    /// The description file it serves with [`ReceiverOpts::rss`] (and
    /// watches: another description written here is a new version).
    pub fn rss_file(&self) -> PathBuf {
        self.process.file("rss.json")
    }

    /// Serves `description` from now on: written whole, then renamed over
    /// the file, as the agent may read it at any moment.
    pub fn set_rss(&self, description: &RssDescription) -> anyhow::Result<()> {
        let (file, tmp) = (self.rss_file(), self.process.file("rss.json.tmp"));
        fs::write(&tmp, description.to_json_pretty())
            .with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &file).with_context(|| format!("renaming to {}", file.display()))
    }

    pub fn log(&self) -> &AgentLog {
        &self.process.log
    }

    /// The first line of its log (this run) that `pred` accepts, waiting
    /// for it up to 20 s.
    pub fn wait_for_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> anyhow::Result<String> {
        self.process.wait_for_log(what, WAIT, pred)
    }

    /// Its status over the control socket.
    pub fn status(&self) -> anyhow::Result<Status> {
        Ok(control::request_status(&self.control())?.0)
    }

    /// Its status once it has sampled at least once after `since` (it
    /// samples every second).
    pub fn status_after(&self, since: SystemTime) -> anyhow::Result<Status> {
        let since_ms = since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let fresh = poll_until(
            Duration::from_secs(5),
            Duration::from_millis(100),
            || match self.status() {
                Ok(status) if u128::from(status.unix_ms) > since_ms => {
                    ControlFlow::Break(Ok(status))
                }
                Err(err) => ControlFlow::Break(Err(err)),
                Ok(_) if interrupted() => ControlFlow::Break(Err(anyhow!("interrupted"))),
                Ok(_) => ControlFlow::Continue(()),
            },
        );
        fresh.unwrap_or_else(|()| {
            Err(anyhow!(
                "the receiver agent published no status after {since:?}"
            ))
        })
    }

    /// SIGTERM (it removes its control socket), SIGKILL if it lingers; its
    /// exit status if it exited on its own.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop()
    }
}

/// A sender agent's own settings: `srap-agent sender --cgroup CGROUP
/// --pin-dir DIR --control SOCKET --port-range RANGE --interval 1` and its
/// receivers (`--peer`, or `--rss` offline).
#[derive(Clone, Debug)]
pub struct SenderRole {
    peers: Vec<String>,
    rss: Option<RssDescription>,
    port_range: String,
}

impl AgentOpts<SenderRole> {
    /// The agent binary `agent`, ports 32768-60999, ticking every second.
    pub fn new(agent: impl Into<PathBuf>) -> Self {
        Self {
            agent: agent.into(),
            role: SenderRole {
                peers: Vec::new(),
                rss: None,
                port_range: DEFAULT_PORT_RANGE.to_owned(),
            },
            args: Vec::new(),
            caps: None,
        }
    }

    /// Follows the receiver agent at `peer` (repeat for more).
    pub fn peer(mut self, peer: impl Into<String>) -> Self {
        self.role.peers.push(peer.into());
        self
    }

    /// Plans offline from `description` (`--rss`, from a file of the
    /// agent's own); give `--receiver IP` with [`AgentOpts::args`].
    pub fn rss(mut self, description: RssDescription) -> Self {
        self.role.rss = Some(description);
        self
    }

    /// `--port-range START-END`.
    pub fn port_range(mut self, range: impl Into<String>) -> Self {
        self.role.port_range = range.into();
        self
    }

    /// `--report-port P`: the port it reports its plan and demand for.
    pub fn report_port(self, port: u16) -> Self {
        self.args(["--report-port".to_owned(), port.to_string()])
    }
}

/// A sender agent in a namespace, on a cgroup and pin directory of its own.
/// On drop it is killed, its binder detached (in its namespace) and its
/// pins, state file and cgroup removed.
pub struct SenderAgent {
    process: Process,
    opts: SenderOpts,
    pin_dir: PathBuf,
    cgroup: PathBuf,
}

impl SenderAgent {
    /// Prepares an agent in `ns` without starting it (see
    /// [`SenderAgent::launch`], [`SenderAgent::once`],
    /// [`SenderAgent::command`]).
    pub fn new(ns: &NetNs, opts: SenderOpts) -> anyhow::Result<Self> {
        let name = lab_name();
        let agent = Self {
            process: Process::new("sender", ns)?,
            pin_dir: Path::new(srap_host::bpffs::BPFFS_ROOT).join(&name),
            cgroup: srap_host::cgroup::cgroup2_mount()?.join(&name),
            opts,
        };
        if let Some(description) = &agent.opts.role.rss {
            let file = agent.process.file("rss.json");
            fs::write(&file, description.to_json_pretty())
                .with_context(|| format!("writing {}", file.display()))?;
        }
        Ok(agent)
    }

    /// Starts an agent in `ns` and waits until it steers.
    pub fn start(ns: &NetNs, opts: SenderOpts) -> anyhow::Result<Self> {
        let mut agent = Self::new(ns, opts)?;
        agent.launch()?;
        Ok(agent)
    }

    /// Starts the agent (again, if it ran: a new run of its log) and waits
    /// until it steers; returns its `steering active …` line.
    pub fn launch(&mut self) -> anyhow::Result<String> {
        self.spawn()?;
        self.process.wait_for_log("`steering active`", WAIT, |l| {
            l.starts_with("steering active")
        })
    }

    /// Starts the agent without waiting for anything.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let args = self.args(&[]);
        self.process
            .spawn(&self.opts.agent, &args, self.opts.caps.as_deref())
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// `srap-agent sender --once`: sets up and exits; returns its stdout.
    pub fn once(&self) -> anyhow::Result<String> {
        let out = self.command(&["--once"]).output()?;
        if !out.status.success() {
            return Err(anyhow::anyhow!(
                "srap-agent sender --once failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The agent binary's arguments (`sender …`) with `extra` at the end.
    pub fn args(&self, extra: &[&str]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["sender".into()];
        for peer in &self.opts.role.peers {
            args.extend(["--peer".into(), peer.into()]);
        }
        if self.opts.role.rss.is_some() {
            args.extend(["--rss".into(), self.process.file("rss.json").into()]);
        }
        args.extend(["--cgroup".into(), self.cgroup.clone().into()]);
        args.extend(["--pin-dir".into(), self.pin_dir.clone().into()]);
        // Its own control socket: never the host's.
        args.extend(["--control".into(), self.control().into()]);
        args.extend(["--port-range".into(), (&self.opts.role.port_range).into()]);
        args.extend(["--interval", "1"].map(OsString::from));
        args.extend(self.opts.args.iter().cloned());
        args.extend(extra.iter().map(OsString::from));
        args
    }

    /// The agent binary.
    pub fn program(&self) -> &Path {
        &self.opts.agent
    }

    /// The agent's command in its namespace with `extra` flags, for a run
    /// the caller drives (its output, its exit).
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut command = in_netns_bounded(
            &self.process.ns,
            &self.opts.agent,
            self.opts.caps.as_deref(),
        );
        command.args(self.args(extra));
        command
    }

    /// SIGKILL: no chance to clean anything up (its pins keep steering).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM, a clean stop (SIGKILL if it lingers); its exit status if
    /// it exited on its own.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop()
    }

    /// True once the agent exited (or was never started, or killed).
    pub fn exited(&self) -> bool {
        self.process.exited()
    }

    /// `srap-agent detach --pin-dir` in its namespace.
    pub fn detach(&self) -> anyhow::Result<Output> {
        let mut command = in_netns(&self.process.ns, &self.opts.agent);
        command.args(["detach", "--pin-dir"]).arg(&self.pin_dir);
        command
            .output()
            .with_context(|| format!("running {command:?}"))
    }

    /// Kills the agent, detaches its binder and removes its pins, state
    /// file and control socket: it can start again as a new sender.
    pub fn reset(&mut self) {
        self.kill();
        if self.pin_dir.exists() {
            match self.detach() {
                Ok(out) if out.status.success() => {}
                Ok(out) => eprintln!(
                    "cleanup: srap-agent detach: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(err) => eprintln!("cleanup: srap-agent detach: {err:#}"),
            }
        }
        // Whatever detach could not remove: the pins go, so no link stays.
        if let Ok(entries) = fs::read_dir(&self.pin_dir) {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path());
            }
            let _ = fs::remove_dir(&self.pin_dir);
        }
        let _ = fs::remove_file(srap_daemon::sender::state::path_for(&self.pin_dir));
        let _ = fs::remove_file(self.control());
    }

    /// The steered cgroup: `srap exec --cgroup` this.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    pub fn layout(&self) -> PinLayout {
        PinLayout::new(&self.pin_dir)
    }

    /// Its control socket (`srap status --sender --control`).
    pub fn control(&self) -> PathBuf {
        self.process.file("sender.sock")
    }

    /// The binder's counters, from its pinned stats map.
    pub fn stats(&self) -> anyhow::Result<BinderStats> {
        Ok(srap_daemon::sender::read_stats(&self.layout())?)
    }

    /// The next turn of `slot`'s port rotation toward receiver `index`,
    /// from the binder's map (fresh rotations start at random turns).
    pub fn turn(&self, index: u32, slot: u32) -> anyhow::Result<u32> {
        Ok(srap_daemon::sender::read_turn(&self.layout(), index, slot)?)
    }

    /// The grant pinned for receiver `index`, from the binder's map.
    pub fn grant(&self, index: u32) -> anyhow::Result<SlotGrant> {
        Ok(srap_daemon::sender::read_grant(&self.layout(), index)?)
    }

    /// Its status over its control socket.
    pub fn status(&self) -> anyhow::Result<SenderStatus> {
        Ok(control::request_sender_status(&self.control())?.0)
    }

    pub fn log(&self) -> &AgentLog {
        &self.process.log
    }

    /// The first line of its log (this run) that `pred` accepts, waiting
    /// for it up to 20 s.
    pub fn wait_for_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> anyhow::Result<String> {
        self.wait_for_log_within(what, WAIT, pred)
    }

    /// [`SenderAgent::wait_for_log`] with a bound of the caller's.
    pub fn wait_for_log_within(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        self.process.wait_for_log(what, within, pred)
    }
}

impl Drop for SenderAgent {
    fn drop(&mut self) {
        self.reset();
        remove_cgroup(&self.cgroup);
    }
}

/// A name of this process's own for an agent's directory, cgroup or pins:
/// `srap-lab-s<pid>x<n>`.
fn lab_name() -> String {
    format!("srap-lab-{}", unique_name(""))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn a_log_shows_the_current_run_only_and_its_tail() {
        let dir = std::env::temp_dir().join(lab_name());
        fs::create_dir_all(&dir).expect("temp dir");
        let mut log = AgentLog {
            path: dir.join("sender.log"),
            from: 0,
        };
        assert_eq!(log.text(), "", "no file yet");
        let mut first = log.next_run().expect("first run");
        writeln!(first, "steering active (attached): first").expect("write");
        assert_eq!(
            log.find(|l| l.starts_with("steering active")).as_deref(),
            Some("steering active (attached): first")
        );
        // A second run appends; the first run's lines are no longer its.
        let mut second = log.next_run().expect("second run");
        assert_eq!(log.find(|l| l.starts_with("steering active")), None);
        for n in 0..TAIL + 5 {
            writeln!(second, "line {n}").expect("write");
        }
        writeln!(second, "steering active (adopted): second").expect("write");
        assert_eq!(
            log.find(|l| l.starts_with("steering active")).as_deref(),
            Some("steering active (adopted): second")
        );
        let tail = log.tail();
        assert_eq!(tail.lines().count(), TAIL, "{tail}");
        assert!(
            tail.ends_with("steering active (adopted): second"),
            "{tail}"
        );
        assert!(!tail.contains("line 5\n"), "{tail}");
        let _ = fs::remove_dir_all(&dir);
    }
}
