//! Commands started in a namespace: plain, or through `srap exec` into a
//! steered cgroup, as a user starts a workload; or this process itself in
//! a steered cgroup while it makes sockets ([`InCgroup`]).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;
use srap_host::cgroup;

use crate::netns::NetNs;

/// `program` in `ns`'s network namespace only (`nsenter --net`, which
/// keeps `/sys`, so the cgroup2 and bpf mounts stay visible and `srap exec`
/// works). `nsenter` execs the program: its PID is the program's.
pub fn in_netns(ns: &NetNs, program: impl Into<OsString>) -> Command {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net={}", ns.path()))
        .arg("--")
        .arg(program.into());
    command
}

/// `program` in `ns` with only the capabilities `caps` (named as setpriv
/// spells them: `bpf`, `net_admin`), as a systemd unit's
/// `CapabilityBoundingSet` bounds a service running as root: `setpriv
/// --bounding-set`, which execs the program (its PID stays the program's).
/// Every capability when `caps` is `None`.
pub fn in_netns_bounded(
    ns: &NetNs,
    program: impl Into<OsString>,
    caps: Option<&[String]>,
) -> Command {
    let Some(caps) = caps else {
        return in_netns(ns, program);
    };
    let plus: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    let mut command = in_netns(ns, "setpriv");
    command
        .arg(format!("--bounding-set=-all,{}", plus.join(",")))
        .args(["--inh-caps=-all", "--"])
        .arg(program.into());
    command
}

/// `program` in `ns`, through `srap exec --cgroup CGROUP --` (the `srap`
/// binary given) when `steered` names a cgroup, else plain.
pub fn srap_exec(
    ns: &NetNs,
    srap: &Path,
    steered: Option<&Path>,
    program: impl Into<OsString>,
) -> Command {
    match steered {
        Some(cgroup) => srap_exec_with(ns, srap, cgroup, &[], program),
        None => in_netns(ns, program),
    }
}

/// `srap exec --cgroup CGROUP FLAGS… -- PROGRAM` inside `ns` (add the
/// program's arguments to the command returned).
pub fn srap_exec_with(
    ns: &NetNs,
    srap: &Path,
    cgroup: &Path,
    flags: &[&str],
    program: impl Into<OsString>,
) -> Command {
    let mut command = in_netns(ns, srap);
    command
        .arg("exec")
        .arg("--cgroup")
        .arg(cgroup)
        .args(flags)
        .arg("--")
        .arg(program.into());
    command
}

/// While alive, this process is in `cgroup`, so sockets it creates are
/// steered; on drop it returns to the cgroup it came from.
pub struct InCgroup {
    original: PathBuf,
}

impl InCgroup {
    pub fn enter(cgroup: &Path) -> anyhow::Result<Self> {
        let mount = cgroup::cgroup2_mount()?;
        let own =
            std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
        let relative = own
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .context("no cgroup2 line in /proc/self/cgroup")?;
        let original = mount.join(relative.trim_start_matches('/'));
        move_self(cgroup)?;
        Ok(Self { original })
    }
}

impl Drop for InCgroup {
    fn drop(&mut self) {
        if let Err(err) = move_self(&self.original) {
            eprintln!(
                "harness cleanup: returning to {}: {err:#}",
                self.original.display()
            );
        }
    }
}

fn move_self(cgroup: &Path) -> anyhow::Result<()> {
    // "0" moves the writing process (all its threads) in cgroup v2.
    std::fs::write(cgroup.join("cgroup.procs"), "0")
        .with_context(|| format!("moving into cgroup {}", cgroup.display()))
}
