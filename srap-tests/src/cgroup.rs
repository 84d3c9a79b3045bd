//! cgroup2 directories for tests, removed on drop.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::unique_name;

pub use srap_harness::{programs::ChildGuard, remove_cgroup};
pub use srap_host::cgroup::cgroup2_mount;

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
}

impl Drop for CgroupDir {
    fn drop(&mut self) {
        remove_cgroup(&self.path);
    }
}
