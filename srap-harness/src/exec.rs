//! Commands started in a namespace: plain, or through `srap exec` into a
//! steered cgroup, as a user starts a workload.

use std::{ffi::OsString, path::Path, process::Command};

use crate::NetNs;

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
        Some(cgroup) => {
            let mut command = in_netns(ns, srap);
            command
                .arg("exec")
                .arg("--cgroup")
                .arg(cgroup)
                .arg("--")
                .arg(program.into());
            command
        }
        None => in_netns(ns, program),
    }
}
