//! Both agents in the lab, as a user runs them on two real hosts: the
//! receiver agent in the receiver namespace (serving the lab NIC's
//! description from a file, with its verifier and control socket) and the
//! sender agent in the sender namespace, following it with `--peer`.
//! Killed by PID and detached when the guard drops.

use std::{
    cell::Cell,
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    NetNs, interrupted,
    topology::LabNet,
    unique_name,
    workload::{ChildGuard, in_netns},
};
use srap_host::{cgroup, status::Status};

/// The receiver agent's port, on the receiver's lab address only.
const PEER_PORT: u16 = 7447;
/// Source ports the lab's sender may use (below the namespace's ephemeral
/// range, so kernel-chosen ports never collide with them).
const PORT_RANGE: &str = "10000-32767";

pub struct LabAgents<'a> {
    /// The `srap-agent` binary.
    exe: PathBuf,
    dir: PathBuf,
    receiver: Option<ChildGuard>,
    sender: Option<SenderAgent<'a>>,
    /// Set when an error named `dir`: the logs it points at must outlive us.
    keep_dir: Cell<bool>,
}

impl<'a> LabAgents<'a> {
    /// Starts both agents (`exe` is the `srap-agent` binary); the sender
    /// reports its plan for `report_port`.
    pub fn start(net: &'a LabNet, exe: &Path, report_port: u16) -> anyhow::Result<Self> {
        let name = format!("srap-lab-{}", unique_name(""));
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let exe = exe.to_path_buf();
        let mut agents = Self {
            exe: exe.clone(),
            dir,
            receiver: None,
            sender: None,
            keep_dir: Cell::new(false),
        };
        let rss = agents.rss_file();
        fs::write(&rss, net.model.to_description().to_json_pretty())
            .with_context(|| format!("writing {}", rss.display()))?;
        let listen = format!("{}:{PEER_PORT}", net.receiver_ip());

        let mut receiver = in_netns(&net.hosts.receiver, exe.clone());
        receiver
            .args([
                "receiver",
                "--iface",
                &net.hosts.receiver_end.ifname,
                "--listen",
                &listen,
            ])
            .arg("--rss")
            .arg(&rss)
            .arg("--control")
            .arg(agents.control());
        agents.receiver = Some(spawn_logged(
            &mut receiver,
            &agents.dir.join("receiver.log"),
        )?);
        agents.wait_for("the receiver agent's control socket", |a| {
            a.control().exists()
        })?;

        let sender = SenderAgent::start(
            &net.hosts.sender,
            &agents.exe,
            &listen,
            report_port,
            &name,
            &agents.dir.join("sender.log"),
        );
        agents.sender = Some(sender.map_err(|err| agents.keep_logs(err))?);
        Ok(agents)
    }

    /// The steered cgroup: `srap exec --cgroup` this.
    pub fn cgroup(&self) -> &Path {
        self.sender().cgroup()
    }

    pub fn pin_dir(&self) -> &Path {
        self.sender().pin_dir()
    }

    fn sender(&self) -> &SenderAgent<'a> {
        self.sender
            .as_ref()
            .expect("LabAgents::start returns only with the sender running")
    }

    /// `err`, with the logs named and kept for the reader.
    fn keep_logs(&self, err: anyhow::Error) -> anyhow::Error {
        self.keep_dir.set(true);
        anyhow::anyhow!(
            "{err:#}; logs (kept): {}{}",
            self.dir.display(),
            self.log_tails()
        )
    }

    /// The description file the receiver agent serves (and watches: writing
    /// another description here makes it a new version).
    pub fn rss_file(&self) -> PathBuf {
        self.dir.join("rss.json")
    }

    /// The sender agent's output so far.
    pub fn sender_log(&self) -> String {
        fs::read_to_string(self.dir.join("sender.log")).unwrap_or_default()
    }

    /// The receiver agent's control socket (`srap status --control`).
    pub fn control(&self) -> PathBuf {
        self.dir.join("receiver.sock")
    }

    /// The receiver agent's current status, once it has sampled at least
    /// once after `since` (it samples every second).
    pub fn status_after(&self, since: std::time::SystemTime) -> anyhow::Result<Status> {
        let since_ms = since
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (status, _) = srap_host::status::control::request_status(&self.control())?;
            if status.unix_ms > since_ms {
                return Ok(status);
            }
            if Instant::now() > deadline || interrupted() {
                bail!("the receiver agent published no status after the workload");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&self, what: &str, ready: impl Fn(&Self) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready(self) {
            if interrupted() {
                bail!("interrupted");
            }
            if Instant::now() > deadline {
                // The error names the log directory: keep it for the reader.
                self.keep_dir.set(true);
                bail!(
                    "{what} did not come up within 20 s; logs (kept): {}{}",
                    self.dir.display(),
                    self.log_tails()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The last lines of each agent's log, to show with an error.
    fn log_tails(&self) -> String {
        let mut text = String::new();
        for name in ["receiver.log", "sender.log"] {
            let Ok(log) = fs::read_to_string(self.dir.join(name)) else {
                continue;
            };
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(5)..];
            if !tail.is_empty() {
                text += &format!("\n  {name}:\n    {}", tail.join("\n    "));
            }
        }
        text
    }
}

impl Drop for LabAgents<'_> {
    fn drop(&mut self) {
        // The sender (and what it pinned) first, then the receiver.
        drop(self.sender.take());
        drop(self.receiver.take());
        if !self.keep_dir.get() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The sender agent in a namespace, following a receiver agent with
/// `--peer`; killed by PID and detached on drop.
pub struct SenderAgent<'a> {
    ns: &'a NetNs,
    exe: PathBuf,
    pin_dir: PathBuf,
    cgroup: PathBuf,
    child: Option<ChildGuard>,
}

impl<'a> SenderAgent<'a> {
    /// Starts `exe sender --peer PEER` in `ns`, logging to `log`, and waits
    /// until its binder is attached. `name` names its cgroup and pin
    /// directory.
    pub fn start(
        ns: &'a NetNs,
        exe: &Path,
        peer: &str,
        report_port: u16,
        name: &str,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut agent = Self {
            ns,
            exe: exe.to_path_buf(),
            pin_dir: Path::new(srap_host::bpffs::BPFFS_ROOT).join(name),
            cgroup: cgroup::cgroup2_mount()?.join(name),
            child: None,
        };
        let mut command = in_netns(ns, exe);
        command
            .args(["sender", "--peer", peer, "--port-range", PORT_RANGE])
            .args(["--interval", "1"])
            .args(["--report-port", &report_port.to_string()])
            .arg("--cgroup")
            .arg(&agent.cgroup)
            .arg("--pin-dir")
            .arg(&agent.pin_dir)
            // Its own control socket, beside its log: never the host's.
            .arg("--control")
            .arg(log.with_file_name("sender.sock"));
        agent.child = Some(spawn_logged(&mut command, log)?);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(agent.pin_dir.join("srap_connect4_link").exists() && agent.cgroup.exists()) {
            if interrupted() {
                bail!("interrupted");
            }
            if Instant::now() > deadline {
                bail!("the sender agent's binder did not come up within 20 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(agent)
    }

    /// The steered cgroup: `srap exec --cgroup` this.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }
}

impl Drop for SenderAgent<'_> {
    fn drop(&mut self) {
        drop(self.child.take());
        if !self.pin_dir.exists() {
            return;
        }
        let out = in_netns(self.ns, self.exe.clone())
            .arg("detach")
            .arg("--pin-dir")
            .arg(&self.pin_dir)
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "lab cleanup: detach: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => eprintln!("lab cleanup: detach: {err}"),
        }
    }
}

/// Starts `command` with stdout and stderr into `log`.
pub fn spawn_logged(command: &mut std::process::Command, log: &Path) -> anyhow::Result<ChildGuard> {
    let file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    ChildGuard::spawn(command)
}
