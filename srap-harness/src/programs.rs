//! The programs the harness runs as processes, each behind a guard that
//! kills and reaps it ([`ChildGuard`]): SRAP's own binaries as built
//! beside this one ([`srap_binary`], [`agent_binary`]), and an iperf3
//! workload between two hosts — the server in the receiver namespace, the
//! client in the sender namespace, inside the steered cgroup through
//! `srap exec` or outside it.

use std::{
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};

use crate::{
    exec::{in_netns, srap_exec},
    interrupt::interrupted,
    netns::NetNs,
    support::poll_until,
};

/// A child process, killed (SIGKILL, by its PID) and reaped on drop, so a
/// failing run or test leaves no process behind. The lab and the
/// integration tests share it.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
}

impl ChildGuard {
    pub fn new(child: Child) -> Self {
        Self { child: Some(child) }
    }

    pub fn spawn(command: &mut Command) -> anyhow::Result<Self> {
        let child = command
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        Ok(Self::new(child))
    }

    /// The child's PID (0 once killed).
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The child, for its pipes; `None` once killed.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// True once the child has exited (or was killed).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| !matches!(child.try_wait(), Ok(None)))
    }

    /// Waits up to `timeout` (or until Ctrl-C) for the child to exit.
    pub fn wait(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let child = self.child.as_mut().context("the process was killed")?;
        let id = child.id();
        let exited = poll_until(timeout, Duration::from_millis(20), || {
            match child.try_wait() {
                Ok(Some(status)) => ControlFlow::Break(Ok(status)),
                Err(err) => ControlFlow::Break(Err(err.into())),
                Ok(None) if interrupted() => ControlFlow::Break(Err(anyhow!("interrupted"))),
                Ok(None) => ControlFlow::Continue(()),
            }
        });
        exited.unwrap_or_else(|()| Err(anyhow!("process {id} still running after {timeout:?}")))
    }

    /// SIGTERM by PID, so the process can clean up after itself, then
    /// SIGKILL if it has not exited within `grace`; its exit status when it
    /// exited on its own (`None`: killed, or already gone).
    pub fn terminate(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.id()).ok()?)?;
        if !self.exited() {
            // Our own child, not yet reaped: the PID is still ours.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let status = self.wait(grace).ok();
        self.kill();
        status
    }

    /// SIGKILL and reap now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `srap` binary beside this one (cargo builds both into one directory).
pub fn srap_binary() -> anyhow::Result<PathBuf> {
    built_beside("srap")
}

/// The `srap-agent` binary beside this one: the lab is its own binary
/// (`srap-lab`) and runs the agent it drives as a separate process.
pub fn agent_binary() -> anyhow::Result<PathBuf> {
    built_beside("srap-agent")
}

/// `name` in this executable's directory, where `cargo build --bins` puts
/// every binary of the workspace.
fn built_beside(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found: build it (`cargo build --release --bins`; `cargo xtask lab` does)",
            path.display()
        );
    }
    Ok(path)
}

/// `srap` as a user types it in a new shell to reach this build: `srap`
/// where that name on PATH is this very binary, else its full path (a
/// workspace build is not on anyone's PATH); with `sudo` in front when the
/// lab runs under sudo, since the agents' control sockets are root's.
pub fn srap_command() -> String {
    let Ok(built) = srap_binary() else {
        return "srap".into();
    };
    let same = |candidate: &std::path::Path| {
        std::fs::canonicalize(candidate).ok() == std::fs::canonicalize(&built).ok()
    };
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("srap"))
            .find(|p| p.is_file())
            .is_some_and(|p| same(&p))
    });
    let srap = if on_path {
        "srap".to_owned()
    } else {
        built.display().to_string()
    };
    if std::env::var_os("SUDO_USER").is_some() {
        format!("sudo {srap}")
    } else {
        srap
    }
}

/// Starts `iperf3 -s -1` on `port` in `ns` and waits until it listens.
pub fn iperf3_server(ns: &NetNs, port: u16) -> anyhow::Result<ChildGuard> {
    iperf3_server_with(ns, port, &[], Stdio::null())
}

/// [`iperf3_server`] with more arguments (`-J`, say) and its output to
/// `stdout`.
pub fn iperf3_server_with(
    ns: &NetNs,
    port: u16,
    extra: &[&str],
    stdout: Stdio,
) -> anyhow::Result<ChildGuard> {
    let mut server = ChildGuard::spawn(
        in_netns(ns, "iperf3")
            .args(["-s", "-1", "-p", &port.to_string()])
            .args(extra)
            .stdout(stdout),
    )?;
    let needle = format!(":{port} ");
    let not_listening = || anyhow!("iperf3 -s did not start listening on port {port}");
    let listening = poll_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || match ns.exec("ss", ["-Hltn"]) {
            Ok(out) if String::from_utf8_lossy(&out.stdout).contains(&needle) => {
                ControlFlow::Break(Ok(()))
            }
            Err(err) => ControlFlow::Break(Err(err)),
            Ok(_) if server.exited() => ControlFlow::Break(Err(not_listening())),
            Ok(_) => ControlFlow::Continue(()),
        },
    );
    listening.unwrap_or_else(|()| Err(not_listening()))?;
    Ok(server)
}

/// The client command: `workload` with `{server}` and `{port}` filled in,
/// run in `ns`, through `srap exec --cgroup` (the `srap` binary given) when
/// `steered_cgroup` is given.
pub fn client_via(
    srap: &Path,
    ns: &NetNs,
    workload: &[String],
    server: &str,
    port: u16,
    steered_cgroup: Option<&Path>,
) -> anyhow::Result<Command> {
    let args: Vec<String> = workload
        .iter()
        .map(|a| {
            a.replace("{server}", server)
                .replace("{port}", &port.to_string())
        })
        .collect();
    let Some((program, rest)) = args.split_first() else {
        bail!("--workload is empty");
    };
    let mut command = srap_exec(ns, srap, steered_cgroup, program);
    command.args(rest);
    Ok(command)
}
