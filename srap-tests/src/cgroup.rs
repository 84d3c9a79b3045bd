//! cgroup2 directories for tests, removed on drop, and commands started
//! inside a test's network namespace without `ip netns exec` (which remounts
//! `/sys` and so hides the cgroup2 and bpf file systems from the command).

use std::{
    ffi::OsStr,
    fs::File,
    io,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{NetNs, unique_name};

pub use srap_host::cgroup::cgroup2_mount;
pub use srap_lab::workload::ChildGuard;

/// A cgroup path unique to this test (not created: the code under test may
/// create it); removed on drop if it exists and is empty.
#[derive(Debug)]
pub struct CgroupDir {
    path: PathBuf,
}

impl CgroupDir {
    /// `<cgroup2>/srap-test-<unique>`.
    pub fn unique() -> anyhow::Result<Self> {
        Ok(Self {
            path: cgroup2_mount()?.join(format!("srap-test-{}", unique_name("c"))),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the directory (for tests that need it to exist up front).
    pub fn create(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.path)
            .with_context(|| format!("creating cgroup {}", self.path.display()))
    }

    /// Moves process `pid` into the cgroup.
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", self.path.display()))
    }
}

impl Drop for CgroupDir {
    fn drop(&mut self) {
        // A process that just exited may linger in cgroup.procs for a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(err) if err.kind() == io::ErrorKind::NotFound => return,
                Err(err) if Instant::now() >= deadline => {
                    eprintln!("cleanup: removing cgroup {}: {err}", self.path.display());
                    return;
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// `PROGRAM` set up to run inside `ns` (setns before exec; mounts unchanged).
pub fn command_in(ns: &NetNs, program: impl AsRef<OsStr>) -> anyhow::Result<Command> {
    let path = format!("/run/netns/{}", ns.name());
    let target = File::open(&path).with_context(|| format!("opening {path}"))?;
    let mut command = Command::new(program);
    // SAFETY: only async-signal-safe calls (setns) between fork and exec; the
    // file is moved into the closure and stays open until then.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(command)
}
