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
