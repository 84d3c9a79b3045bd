//! What SRAP's tests, benches and labs left behind when their process was
//! killed outright (SIGKILL, a machine restart: no drop guard runs). Every
//! object they make carries its maker's PID ([`crate::names::unique_name`]:
//! `s<PID>x<N>`), so an object whose PID is gone is an orphan:
//!
//! * network namespaces `s<PID>x<N>n` under `/run/netns`;
//! * cgroups `srap-…-s<PID>x<N>…` under the cgroup2 mount, with the binder
//!   still attached to them;
//! * bpffs pin directories `srap-…-s<PID>x<N>…` under `/sys/fs/bpf`, whose
//!   pinned links keep programs and maps loaded.
//!
//! Swept once per process, before its first namespace. Nothing else is
//! touched: a name without a PID, or one whose process lives, is kept.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Once,
};

use crate::command::run;

/// Sweeps once per process.
pub fn sweep_once() {
    static SWEPT: Once = Once::new();
    SWEPT.call_once(sweep);
}

fn sweep() {
    for name in orphans_in(Path::new("/run/netns"), namespace_owner) {
        match run(Command::new("ip").args(["netns", "del", &name])) {
            Ok(_) => eprintln!("removed namespace {name}: the process that made it is gone"),
            Err(err) => eprintln!("cleanup: namespace {name} of a gone process: {err:#}"),
        }
    }
    if let Ok(mount) = srap_host::cgroup::cgroup2_mount() {
        for name in orphans_in(&mount, object_owner) {
            // An empty cgroup goes with its attached programs; one with
            // processes in it is not ours to empty.
            remove(&mount.join(name), "cgroup", |p| std::fs::remove_dir(p));
        }
    }
    let bpffs = PathBuf::from("/sys/fs/bpf");
    for name in orphans_in(&bpffs, object_owner) {
        remove(&bpffs.join(name), "pin directory", |p| {
            std::fs::remove_dir_all(p)
        });
    }
}

fn remove(path: &Path, what: &str, remove: impl Fn(&Path) -> std::io::Result<()>) {
    match remove(path) {
        Ok(()) => eprintln!(
            "removed {what} {}: the process that made it is gone",
            path.display()
        ),
        Err(err) => eprintln!(
            "cleanup: {what} {} of a gone process: {err}",
            path.display()
        ),
    }
}

/// Names in `dir` whose owner (by `owner`) is a process that is gone.
fn orphans_in(dir: &Path, owner: fn(&str) -> Option<u32>) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| owner(name).is_some_and(gone))
        .collect()
}

fn gone(pid: u32) -> bool {
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// The PID in a namespace name `NetNs::new` makes (`s<PID>x<N>n`).
fn namespace_owner(name: &str) -> Option<u32> {
    stamp_owner(name.strip_suffix('n')?)
}

/// The PID in a cgroup or pin directory name: `srap-<what>-s<PID>x<N>`,
/// with an optional one-letter suffix.
fn object_owner(name: &str) -> Option<u32> {
    let stamp = name.strip_prefix("srap-")?.rsplit('-').next()?;
    let stamp = stamp
        .strip_suffix(|c: char| c.is_ascii_lowercase())
        .unwrap_or(stamp);
    stamp_owner(stamp)
}

/// `s<PID>x<N>` → PID.
fn stamp_owner(stamp: &str) -> Option<u32> {
    let (pid, n) = stamp.strip_prefix('s')?.split_once('x')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n))
        .then(|| pid.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_namespace_names_of_this_form_name_an_owner() {
        assert_eq!(namespace_owner("s934x1n"), Some(934));
        let ours = crate::names::unique_name("n");
        assert_eq!(namespace_owner(&ours), Some(std::process::id()));
        for other in [
            "s934x1", "s934x1t", "sx1n", "s934xn", "s9a4x1n", "prod", "s934x1nn", "srapmp-s",
        ] {
            assert_eq!(namespace_owner(other), None, "{other}");
        }
    }

    #[test]
    fn owners_are_read_from_the_names_srap_makes_and_nothing_else() {
        assert_eq!(object_owner("srap-test-s20497x8c"), Some(20497));
        assert_eq!(object_owner("srap-bench-s934x7p"), Some(934));
        assert_eq!(object_owner("srap-lab-s24483x7"), Some(24483));
        assert_eq!(object_owner("srap"), None, "the product's own cgroup");
        assert_eq!(object_owner("srapmp"), None);
        assert_eq!(object_owner("srap-s12x"), None);
        assert_eq!(object_owner("other-s934x7p"), None);
        assert_eq!(object_owner("srap-test-sABCx1c"), None);
    }

    /// A cgroup of a process that is gone goes; one of a live process (this
    /// one) stays. On the real cgroup2 mount, as the sweep runs.
    #[test]
    #[ignore = "kernel: needs root to make cgroups; run as root by `cargo xtask test`"]
    fn the_sweep_removes_a_gone_process_cgroup_and_keeps_a_live_ones() {
        crate::privilege::require_privileged(
            "the_sweep_removes_a_gone_process_cgroup_and_keeps_a_live_ones",
        );
        let mount = srap_host::cgroup::cgroup2_mount().expect("a cgroup2 mount");
        let mut child = Command::new("true").spawn().expect("spawn true");
        let dead = child.id();
        child.wait().expect("reap true");
        let orphan = mount.join(format!("srap-test-s{dead}x1c"));
        let live = mount.join(format!("srap-test-{}", crate::names::unique_name("c")));
        for dir in [&orphan, &live] {
            std::fs::create_dir(dir).expect("make a cgroup");
        }
        sweep();
        let (orphan_left, live_left) = (orphan.exists(), live.exists());
        let _ = std::fs::remove_dir(&orphan);
        let _ = std::fs::remove_dir(&live);
        assert!(!orphan_left, "{} stayed", orphan.display());
        assert!(live_left, "{} was removed", live.display());
    }

    #[test]
    fn a_live_process_owns_its_objects() {
        assert!(!gone(std::process::id()));
        assert!(!gone(1));
    }
}
