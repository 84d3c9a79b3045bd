//! A booted Debian machine under a real systemd (`systemd-nspawn -b`) in a
//! network namespace of the test's, for the tests of what only a service
//! manager shows: unit ordering, `Type=notify` readiness, the units'
//! hardening directives. A [`Machine`] is a drop guard: it powers the
//! machine off and removes its root, its cgroups and the pins registered
//! with it ([`Machine::own_pins`]).
//!
//! * **Root**: `mmdebstrap --variant=minbase` of [`SUITE`] with systemd,
//!   dbus and iproute2, built once into a cache ([`debian_rootfs`]) —
//!   into a scratch directory renamed when complete, so a killed build
//!   leaves no half root for the next run to boot. Each machine boots an
//!   overlay of it (its own upper directory): machines never share state
//!   and the cache is never written.
//! * **Boot**: `--register=no --keep-unit` (this host's PID 1 may not be
//!   systemd: there is no machined to register with), in a cgroup of its
//!   own in every hierarchy (else nspawn makes `payload/` and
//!   `supervisor/` in whatever cgroup the test runs in, shared by every
//!   machine there), the capabilities an eBPF agent needs and the `bpf()`
//!   call nspawn's seccomp filter otherwise refuses, the host's bpffs
//!   bound at `/sys/fs/bpf` (nspawn mounts none), and the binaries given
//!   bound read-only at `/usr/bin`.
//! * **Inside**: commands run with `nsenter` into the machine's PID 1's
//!   namespaces ([`Machine::command`]); the machine's files are written
//!   from here through its root ([`Machine::write`]).

use std::{
    fs,
    io::{self, Read},
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    command::run,
    names::unique_name,
    netns::NetNs,
    programs::ChildGuard,
    support::{TempDir, poll_until, remove_cgroup},
};

/// The Debian release the machines run (the one this host's CI runs).
pub const SUITE: &str = "bookworm";
/// What the root holds beyond `minbase`: systemd as PID 1, the bus
/// `systemctl` talks over, and `ip` for looking at the machine's links.
const PACKAGES: &str = "systemd,systemd-sysv,dbus,iproute2";
/// Bound on `mmdebstrap` (about 40 s to a minute from Debian's mirror).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound on the boot, until `systemctl is-system-running` settles.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on a clean power-off before the machine is killed.
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on one command inside the machine (`systemctl`, the agent's
/// `detach`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The capabilities the machine keeps beyond nspawn's default set: what
/// SRAP's agents need to load, verify and attach their programs
/// (`CAP_BPF`, `CAP_PERFMON`, `CAP_NET_ADMIN`), to query a cgroup's
/// programs and mount namespaces for the units' sandboxing
/// (`CAP_SYS_ADMIN`), and to create a cgroup under the mode-0555 cgroup2
/// root (`CAP_DAC_OVERRIDE`). Given explicitly: nspawn's defaults differ
/// between versions.
pub const AGENT_CAPABILITIES: &str =
    "CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN,CAP_SYS_ADMIN,CAP_DAC_OVERRIDE";

/// Where the roots are cached for the binaries in `binary_dir`
/// (`target/<profile>`): `<target>/nspawn-rootfs`, beside the build so
/// `cargo clean` takes it; outside a target directory
/// `/var/cache/srap/nspawn-rootfs`.
pub fn rootfs_cache(binary_dir: &Path) -> PathBuf {
    binary_dir
        .ancestors()
        .find(|dir| dir.ends_with("target"))
        .map_or_else(
            || PathBuf::from("/var/cache/srap/nspawn-rootfs"),
            |target| target.join("nspawn-rootfs"),
        )
}

/// The cached root of [`SUITE`] under `cache`, built first when missing.
/// Never booted itself: machines boot overlays of it ([`Machine::boot`]).
pub fn debian_rootfs(cache: &Path) -> anyhow::Result<PathBuf> {
    cached_rootfs(cache, SUITE, &[])
}

/// What a host Ansible manages needs beyond [`debian_rootfs`]'s root:
/// Python for Ansible's modules, apt's bindings for its `apt` module, and
/// an SSH server to be reached by.
pub const ANSIBLE_PACKAGES: &[&str] = &["python3", "python3-apt", "openssh-server"];

/// The cached root of [`SUITE`] with [`ANSIBLE_PACKAGES`] under `cache`
/// (`<SUITE>-ansible`), built first when missing: a second root, so the
/// machines of the other tests stay as small as they are.
pub fn ansible_rootfs(cache: &Path) -> anyhow::Result<PathBuf> {
    cached_rootfs(cache, &format!("{SUITE}-ansible"), ANSIBLE_PACKAGES)
}

/// The root `name` under `cache` with `extra` packages beyond
/// [`PACKAGES`], built into a scratch directory and renamed into place
/// (a killed or failed build leaves no half root that looks finished).
fn cached_rootfs(cache: &Path, name: &str, extra: &[&str]) -> anyhow::Result<PathBuf> {
    let root = cache.join(name);
    if root.is_dir() {
        return Ok(root);
    }
    fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    sweep_partial_builds(cache);
    let partial = PartialBuild(cache.join(format!("{name}.partial-{}", unique_name(""))));
    let started = Instant::now();
    mmdebstrap(&partial.0, extra)?;
    match fs::rename(&partial.0, &root) {
        Ok(()) => {}
        // Another process finished first: its root is as good as ours
        // (ours goes with the guard).
        Err(_) if root.is_dir() => return Ok(root),
        Err(err) => return Err(err).with_context(|| format!("renaming to {}", root.display())),
    }
    eprintln!(
        "nspawn: built the {name} root {} in {:.0} s",
        root.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(root)
}

/// A root being built, removed unless renamed into place (a failed or
/// panicking build leaves nothing).
struct PartialBuild(PathBuf);

impl Drop for PartialBuild {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// Removes the partial builds of processes that are gone (killed while
/// building: no guard ran).
fn sweep_partial_builds(cache: &Path) {
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name
            .split_once(".partial-s")
            .and_then(|(_, rest)| rest.split_once('x'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// `mmdebstrap` of the machines' root, with the `extra` packages, into
/// `dir`, bounded; its output goes with the error when it fails.
fn mmdebstrap(dir: &Path, extra: &[&str]) -> anyhow::Result<()> {
    eprintln!("nspawn: building the {SUITE} root with mmdebstrap (about a minute, once)");
    let packages = std::iter::once(PACKAGES)
        .chain(extra.iter().copied())
        .collect::<Vec<_>>()
        .join(",");
    let mut child = ChildGuard::spawn(
        Command::new("mmdebstrap")
            .args(["--variant=minbase", "--quiet"])
            .arg(format!("--include={packages}"))
            .arg(SUITE)
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    )?;
    let status = child.wait(BUILD_TIMEOUT).context("mmdebstrap")?;
    if !status.success() {
        bail!("mmdebstrap {SUITE} {} failed ({status})", dir.display());
    }
    Ok(())
}

/// What a machine boots with.
#[derive(Clone, Debug)]
pub struct MachineSpec {
    /// The cached root ([`debian_rootfs`]), the overlay's lower layer.
    pub rootfs: PathBuf,
    /// The network namespace it boots in (its links made by the test).
    pub netns: NetNs,
    /// Bound read-only at `/usr/bin/<file name>`.
    pub binaries: Vec<PathBuf>,
    /// Copied into `/etc/systemd/system` before boot.
    pub units: Vec<PathBuf>,
}

/// A booted machine: powered off and removed, with everything registered
/// with it, on drop.
///
/// Field order is drop order after [`Drop::drop`] powered it off: the
/// nspawn process (reaped), the overlay (unmounted), its scratch directory,
/// its cgroups, the pins.
pub struct Machine {
    name: String,
    nspawn: ChildGuard,
    /// The machine's PID 1 (systemd), as this host numbers it.
    leader: u32,
    overlay: Overlay,
    scratch: TempDir,
    _cgroups: CgroupTrees,
    pins: Pins,
    _netns: NetNs,
}

impl Machine {
    /// Boots `spec` and waits (bounded) until its systemd says the system
    /// is `running` or `degraded`.
    pub fn boot(spec: &MachineSpec) -> anyhow::Result<Self> {
        let name = unique_name("m");
        let scratch = TempDir::new("nspawn")?;
        let overlay = Overlay::mount(&spec.rootfs, &scratch)?;
        install_units(overlay.root(), &spec.units)?;
        let cgroups = CgroupTrees::create(&format!("srap-nspawn-{name}"))?;
        let console = scratch.join("console.log");
        let nspawn = ChildGuard::spawn(&mut nspawn_command(
            spec,
            &name,
            overlay.root(),
            &cgroups,
            &console,
        )?)?;
        let mut machine = Self {
            name,
            nspawn,
            leader: 0,
            overlay,
            scratch,
            _cgroups: cgroups,
            pins: Pins::default(),
            _netns: spec.netns.clone(),
        };
        machine.leader = machine.await_leader()?;
        machine.await_running()?;
        Ok(machine)
    }

    /// The machine's name (and host name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The machine's PID 1 (systemd), as this host numbers it.
    pub fn leader(&self) -> u32 {
        self.leader
    }

    /// Writes `contents` to `inside` (an absolute path in the machine),
    /// creating its directories: through the machine's root, which is a
    /// directory of this host's.
    pub fn write(&self, inside: &str, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
        let path = self.overlay.root().join(inside.trim_start_matches('/'));
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {inside} in the machine"))?;
        }
        fs::write(&path, contents).with_context(|| format!("writing {inside} in the machine"))
    }

    /// `program` inside the machine: in its PID 1's mount, UTS, IPC,
    /// network and PID namespaces, with a plain environment (not this
    /// process's).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["-t", &self.leader.to_string(), "-m", "-u", "-i", "-n", "-p"])
            .args(["--", program])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        command
    }

    /// Runs `program ARGS` inside the machine, bounded by
    /// [`COMMAND_TIMEOUT`]: its output, or an error with its stderr.
    pub fn run<I, S>(&self, program: &str, args: I) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = self.command(program);
        command.args(args);
        bounded(&mut command, COMMAND_TIMEOUT)
    }

    /// `systemctl ARGS` inside the machine: its stdout, trimmed.
    pub fn systemctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run("systemctl", args)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The value of `property` of `unit` (`systemctl show -p … --value`).
    pub fn show(&self, unit: &str, property: &str) -> anyhow::Result<String> {
        self.systemctl(&["show", unit, "-p", property, "--value"])
    }

    /// The last journal lines of `units`, for a failure's message (what
    /// could not be read says so instead).
    pub fn journal(&self, units: &[&str]) -> String {
        let mut args = vec!["--no-pager", "-o", "short-monotonic", "-n", "60"];
        for unit in units {
            args.extend(["-u", unit]);
        }
        match self.run("journalctl", &args) {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(err) => format!("(no journal: {err:#})"),
        }
    }

    /// Removes `dir` (a bpffs directory of this host's: the machine has
    /// the host's bpffs) when the machine drops, after it is off: the pins
    /// an agent inside left keep its programs loaded.
    pub fn own_pins(&mut self, dir: impl Into<PathBuf>) {
        self.pins.0.push(dir.into());
    }

    /// The machine's PID 1: the child of `systemd-nspawn` once it runs
    /// systemd (nspawn's own forks come and go before it).
    fn await_leader(&mut self) -> anyhow::Result<u32> {
        let nspawn = self.nspawn.id();
        let found = poll_until(BOOT_TIMEOUT, Duration::from_millis(20), || {
            if self.nspawn.exited() {
                return ControlFlow::Break(None);
            }
            match systemd_child(nspawn) {
                Some(pid) => ControlFlow::Break(Some(pid)),
                None => ControlFlow::Continue(()),
            }
        });
        match found {
            Ok(Some(pid)) => Ok(pid),
            Ok(None) => bail!("systemd-nspawn exited while booting{}", self.console()),
            Err(()) => bail!(
                "no systemd under systemd-nspawn within {BOOT_TIMEOUT:?}{}",
                self.console()
            ),
        }
    }

    /// Waits until `systemctl is-system-running` says `running` or
    /// `degraded` (booted; a unit of Debian's own may have failed in a
    /// container, said then).
    fn await_running(&mut self) -> anyhow::Result<()> {
        let mut last = String::new();
        let settled = poll_until(BOOT_TIMEOUT, Duration::from_millis(100), || {
            // Exits non-zero until it is `running`: its stdout is the answer.
            let mut command = self.command("systemctl");
            command.arg("is-system-running");
            last = match bounded_output(&mut command, COMMAND_TIMEOUT) {
                Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
                Err(err) => format!("{err:#}"),
            };
            match last.as_str() {
                "running" | "degraded" => ControlFlow::Break(()),
                _ if self.nspawn.exited() => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        });
        if settled.is_err() || self.nspawn.exited() {
            bail!(
                "machine {} did not boot within {BOOT_TIMEOUT:?}: is-system-running says {last:?}{}",
                self.name,
                self.console()
            );
        }
        if last == "degraded" {
            let failed = self
                .systemctl(&["--failed", "--no-legend"])
                .unwrap_or_default();
            eprintln!("nspawn: machine {} is degraded: {failed}", self.name);
        }
        Ok(())
    }

    /// The console's last lines, for an error's message.
    fn console(&self) -> String {
        let text = fs::read_to_string(self.scratch.join("console.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("; its console:\n{tail}")
    }

    /// Powers the machine off (`systemctl poweroff` inside), then, past
    /// [`POWEROFF_TIMEOUT`], kills it: its PID 1 first (a PID namespace
    /// goes with its init; nspawn killed alone would leave it running),
    /// then nspawn.
    fn power_off(&mut self) {
        if self.nspawn.exited() {
            return;
        }
        if self.leader == 0 {
            // Failed before its systemd ran: nothing inside to ask.
            self.nspawn.terminate(POWEROFF_TIMEOUT);
            return;
        }
        if let Err(err) = self.run("systemctl", ["poweroff", "--no-block"]) {
            eprintln!("cleanup: systemctl poweroff in {}: {err:#}", self.name);
        }
        if self.nspawn.wait(POWEROFF_TIMEOUT).is_ok() {
            return;
        }
        eprintln!(
            "cleanup: machine {} still up {POWEROFF_TIMEOUT:?} after poweroff: killing it",
            self.name
        );
        if let Some(pid) = i32::try_from(self.leader)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            // Still our nspawn's child (it has not exited): the PID is the
            // machine's.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        self.nspawn.terminate(Duration::from_secs(5));
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.power_off();
    }
}

/// The `systemd-nspawn` command booting `spec` on `root`, started inside
/// `cgroups` (a shell moves itself there, then execs nspawn: its PID and
/// cgroups are nspawn's from its first instruction), its console to
/// `console`.
fn nspawn_command(
    spec: &MachineSpec,
    name: &str,
    root: &Path,
    cgroups: &CgroupTrees,
    console: &Path,
) -> anyhow::Result<Command> {
    let log =
        fs::File::create(console).with_context(|| format!("creating {}", console.display()))?;
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            r#"while [ "$1" != -- ]; do echo 0 > "$1" || exit 1; shift; done; shift; exec "$@""#,
            "sh",
        ])
        .args(cgroups.procs_files())
        .args([
            "--",
            "systemd-nspawn",
            "--quiet",
            "--boot",
            "--register=no",
            "--keep-unit",
        ])
        .arg(format!("--directory={}", root.display()))
        .arg(format!("--machine={name}"))
        .arg(format!("--network-namespace-path={}", spec.netns.path()))
        .arg(format!("--capability={AGENT_CAPABILITIES}"))
        // nspawn's own seccomp filter refuses bpf() (EPERM, whatever the
        // capabilities: an agent fails at its first map); the units'
        // `SystemCallFilter=` applies on top, inside.
        .arg("--system-call-filter=bpf")
        .arg("--bind=/sys/fs/bpf")
        .arg("--console=read-only")
        .args(
            spec.binaries
                .iter()
                .map(|binary| bind_ro_in_usr_bin(binary))
                .collect::<anyhow::Result<Vec<_>>>()?,
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    Ok(command)
}

/// `--bind-ro=HOST:/usr/bin/NAME` for `binary`.
fn bind_ro_in_usr_bin(binary: &Path) -> anyhow::Result<String> {
    let name = binary
        .file_name()
        .with_context(|| format!("{} names no file", binary.display()))?;
    if !binary.is_file() {
        bail!("{} is not built", binary.display());
    }
    Ok(format!(
        "--bind-ro={}:/usr/bin/{}",
        binary.display(),
        name.to_string_lossy()
    ))
}

/// Copies `units` into the machine's `/etc/systemd/system`.
fn install_units(root: &Path, units: &[PathBuf]) -> anyhow::Result<()> {
    let dir = root.join("etc/systemd/system");
    for unit in units {
        let name = unit
            .file_name()
            .with_context(|| format!("{} names no file", unit.display()))?;
        fs::copy(unit, dir.join(name))
            .with_context(|| format!("copying {} into the machine", unit.display()))?;
    }
    Ok(())
}

/// The PID of `parent`'s child that runs systemd, if any yet.
fn systemd_child(parent: u32) -> Option<u32> {
    let children = fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .find(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "systemd")
        })
}

/// Runs `command` for at most `timeout`: its output when it succeeds,
/// else an error with its stderr.
fn bounded(command: &mut Command, timeout: Duration) -> anyhow::Result<Output> {
    let out = bounded_output(command, timeout)?;
    if !out.status.success() {
        bail!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(out)
}

/// Runs `command` for at most `timeout` (killed after it), whatever its
/// exit status: its output, read on threads so a full pipe never stalls
/// it.
fn bounded_output(command: &mut Command, timeout: Duration) -> anyhow::Result<Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {command:?}"))?;
    let readers = [read_all(child.stdout.take()), read_all(child.stderr.take())];
    let status = ChildGuard::new(child)
        .wait(timeout)
        .with_context(|| format!("{command:?}"))?;
    let [stdout, stderr] = readers.map(|reader| reader.join().unwrap_or_default());
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Everything `pipe` gives until its end, read on a thread of its own.
fn read_all(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// The machine's root: an overlay of the cached root with an upper
/// directory of its own, unmounted on drop.
struct Overlay {
    root: PathBuf,
}

impl Overlay {
    /// Mounts `lower` + `scratch/upper` at `scratch/root`.
    fn mount(lower: &Path, scratch: &TempDir) -> anyhow::Result<Self> {
        let [upper, work, root] = ["upper", "work", "root"].map(|dir| scratch.join(dir));
        for dir in [&upper, &work, &root] {
            fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let paths = [lower, &upper, &work].map(|p| p.display().to_string());
        // The option string separates with ',' and ':'.
        if paths.iter().any(|p| p.contains([',', ':'])) {
            bail!("an overlay cannot take a path with ',' or ':': {paths:?}");
        }
        let [lower, upper, work] = paths;
        run(Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!("lowerdir={lower},upperdir={upper},workdir={work}"))
            .arg(&root))?;
        Ok(Self { root })
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        // Lazily when busy: the scratch directory is removed next, and a
        // still-mounted root would be removed through the overlay (into
        // its upper directory; the cache is its read-only lower layer).
        let unmounted = run(Command::new("umount").arg(&self.root))
            .or_else(|_| run(Command::new("umount").arg("-l").arg(&self.root)));
        if let Err(err) = unmounted {
            eprintln!("cleanup: unmounting {}: {err:#}", self.root.display());
        }
    }
}

/// The machine's cgroup in every hierarchy nspawn tracks it in (cgroup2,
/// and on a hybrid host the v1 `name=systemd` one), removed with whatever
/// the machine left under it (nspawn's `payload/` and `supervisor/`, the
/// units' cgroups, an agent's steered cgroup).
struct CgroupTrees {
    dirs: Vec<PathBuf>,
}

impl CgroupTrees {
    fn create(name: &str) -> anyhow::Result<Self> {
        let mut trees = Self { dirs: Vec::new() };
        let unified = srap_host::cgroup::cgroup2_mount()?;
        let legacy = Path::new("/sys/fs/cgroup/systemd");
        let hybrid = legacy != unified && legacy.join("cgroup.procs").exists();
        for hierarchy in std::iter::once(unified.as_path()).chain(hybrid.then_some(legacy)) {
            let dir = hierarchy.join(name);
            fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
            trees.dirs.push(dir);
        }
        Ok(trees)
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|dir| dir.join("cgroup.procs"))
            .collect()
    }
}

impl Drop for CgroupTrees {
    fn drop(&mut self) {
        for dir in &self.dirs {
            remove_cgroup_tree(dir);
        }
    }
}

/// Removes `dir` and the cgroups below it, deepest first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    remove_cgroup(dir);
}

/// bpffs directories removed on drop.
#[derive(Default)]
struct Pins(Vec<PathBuf>);

impl Drop for Pins {
    fn drop(&mut self) {
        for dir in &self.0 {
            match fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => eprintln!("cleanup: removing pins {}: {err}", dir.display()),
            }
        }
    }
}
