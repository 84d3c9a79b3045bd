//! The one answer to "are we root" ([`is_root`]), and the checks built on
//! it that gate the lab and the tests needing root, bpffs, network
//! namespaces or an outside program (a client runtime, `iperf3`, `tmux`,
//! QEMU).
//!
//! Such tests are `#[ignore = "<what they need>"]`: a plain `cargo test`
//! (as any user) reports them `ignored`; `cargo xtask test` as root (and
//! always in CI) runs them with `--include-ignored`. These checks are the
//! second line of defence and never let a test pass without running: a test
//! that runs has been asked to (or lost its `#[ignore]`), so a missing
//! precondition fails it with a message naming what is missing, whether or
//! not `CI=true`. Only the benchmarks and examples, whose output is not
//! captured, skip with a visible line ([`privileged_or_skip`]).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use srap_host::bpffs::{self, BPFFS_ROOT};

use crate::netns::NetNs;

/// How a test that needs more than a plain `cargo test` offers is run: said
/// in every failure, so whoever reads it knows the way.
const HOW_TO_RUN: &str = "kernel tests run as root: `cargo xtask test`, or \
                          `cargo test -- --include-ignored`; a plain `cargo test` leaves them ignored";

/// Whether this process runs as root (effective user 0): what making
/// namespaces, cgroups, subnet locks and loading eBPF need. The lab, the
/// tests and the checks below all ask here.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Checks that this process can run privileged tests (root, `ip` from
/// iproute2, network namespaces, bpffs at `/sys/fs/bpf`) and panics naming
/// what is missing when it cannot: a test that ran and returned early would
/// report `ok` for something it never checked. A kernel test states it
/// first, as a plain statement: it returns only when the test can run.
pub fn require_privileged(what: &str) {
    if let Some(missing) = missing() {
        panic!("{what} cannot run: {missing} ({HOW_TO_RUN})");
    }
}

/// For benchmarks and examples: true when privileged; otherwise a loud SKIP
/// line naming `what` and false (their output reaches the terminal). With
/// `CI=true` a missing privilege panics: CI must never skip silently.
pub fn privileged_or_skip(what: &str) -> bool {
    let Some(missing) = missing() else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("CI=true and {what} cannot run: {missing}");
    }
    eprintln!("\n*** SKIP {what}: {missing} ***\n");
    false
}

/// The path of `program` on `PATH` (or in one of `also`), or a panic that
/// names it and how to install it: the test needs it and was asked to run.
pub fn require_program(program: &str, also: &[&Path], install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(also.iter().map(|dir| dir.to_path_buf()))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{program}` is not installed and this test needs it ({install}; {HOW_TO_RUN})")
        })
}

/// What is missing (computed once per process), or `None`.
fn missing() -> Option<&'static str> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    MISSING.get_or_init(missing_privileges).as_deref()
}

/// What is missing, or `None` when everything is there.
fn missing_privileges() -> Option<String> {
    if !is_root() {
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
