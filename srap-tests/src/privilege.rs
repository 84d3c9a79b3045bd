//! The check that gates tests needing root, bpffs and network namespaces.

use std::{path::Path, process::Command, sync::OnceLock};

use srap_host::bpffs::{self, BPFFS_ROOT};

use crate::NetNs;

/// True when this process can run privileged tests (root, `ip` from iproute2,
/// network namespaces, bpffs at `/sys/fs/bpf`).
///
/// When something is missing: panics if `CI=true` (CI must never skip
/// silently), otherwise prints a loud SKIP line naming `what` and returns
/// false so the test can return early.
pub fn require_privileged(what: &str) -> bool {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    let Some(missing) = MISSING.get_or_init(missing_privileges) else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("CI=true and {what} cannot run: {missing}");
    }
    eprintln!("\n*** SKIP {what}: {missing} ***\n");
    false
}

/// What is missing, or `None` when everything is there.
fn missing_privileges() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some("`ip` (iproute2) is not installed".into());
    }
    if !Path::new("/proc/self/ns/net").exists() {
        return Some("the kernel has no network namespaces".into());
    }
    if let Err(err) = ensure_bpffs() {
        return Some(format!("no bpffs at /sys/fs/bpf: {err}"));
    }
    // The real proof: make (and drop) a namespace.
    if let Err(err) = NetNs::new() {
        return Some(format!("cannot create a network namespace: {err:#}"));
    }
    None
}

/// Mounts bpffs at `/sys/fs/bpf` if nothing is mounted there (some minimal
/// systems boot without it; aya's pinning needs it), the way the agents do
/// (`srap_host::bpffs`), and checks that bpffs is there.
fn ensure_bpffs() -> Result<(), String> {
    let root = Path::new(BPFFS_ROOT);
    bpffs::mount_if_missing(root).map_err(|e| format!("mounting bpffs at {BPFFS_ROOT}: {e}"))?;
    match bpffs::is_bpffs(root) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{BPFFS_ROOT} is not a bpf file system")),
        Err(e) => Err(format!("{BPFFS_ROOT}: {e}")),
    }
}
