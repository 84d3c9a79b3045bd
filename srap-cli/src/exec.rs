//! `srap exec`: run a workload inside the steered cgroup.
//!
//! The simplest transparent way in: move this process into the cgroup
//! (`cgroup.procs`), then `exec()` the command. The workload replaces `srap`
//! in the same process, so its exit status and signals reach the caller
//! unchanged, and everything it forks stays in the cgroup.

use std::{ffi::OsString, fs, os::unix::process::CommandExt as _, path::PathBuf, process::Command};

use anyhow::{Context as _, bail};
use srap_host::cgroup;

#[derive(clap::Args)]
pub struct Args {
    /// The steered cgroup (default `<cgroup2>/srap`; relative paths are below
    /// the cgroup2 mount): the same `--cgroup` given to `srap-agent sender`.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    // The agent's rules, so `--cgroup` means the same to both.
    let mount = cgroup::cgroup2_mount()?;
    let cgroup = cgroup::resolve(&mount, args.cgroup.as_deref())?;
    let procs = cgroup.join("cgroup.procs");
    if !procs.exists() {
        bail!(
            "cgroup {} does not exist: start `srap-agent sender` first (it creates it), \
             or pass the --cgroup it uses",
            cgroup.display()
        );
    }
    // "0" means the writing process itself.
    fs::write(&procs, "0").with_context(|| {
        format!(
            "joining cgroup {} (writing {})",
            cgroup.display(),
            procs.display()
        )
    })?;
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given: srap exec -- CMD ARGS…")?;
    let error = Command::new(program).args(rest).exec();
    Err(error).with_context(|| format!("running {}", program.to_string_lossy()))
}
