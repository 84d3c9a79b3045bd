//! The packaged binaries: linked against glibc 2.28 (RHEL 8's, the oldest
//! supported host's) with `cargo zigbuild`, so they start on RHEL 8 and 9,
//! Debian 10 on and Ubuntu 20.04 on. Built against this host's glibc,
//! `srap` needs `GLIBC_2.34` and the agent `GLIBC_2.35`, and start on
//! neither RHEL.
//!
//! Not the other way, a static musl build (docs/deploying.md, "Which
//! binaries"): it is no smaller, and musl's `memcpy` makes the RSS model's
//! landing of a flow, the planner's inner loop, several times slower. zig
//! (from PyPI) and cargo-zigbuild are what `cargo xtask setup` installs
//! for it.

use std::path::PathBuf;

use anyhow::Result;

use super::elf::OLDEST_GLIBC;
use crate::exec::{Step, cargo, run_step, target_dir};

/// Which build of the binaries to package.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Optimised: what `cargo xtask package` ships.
    Release,
    /// Unoptimised: what `cargo xtask test` checks (a release build would
    /// add minutes to CI; the staging is the same).
    Dev,
}

impl Profile {
    pub fn dir(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Dev => "debug",
        }
    }
}

/// The Rust target the packages' binaries are built for.
pub fn target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// Builds `srap` and `srap-agent` for [`target`] against glibc
/// [`OLDEST_GLIBC`]; returns their directory.
pub fn build(profile: Profile) -> Result<PathBuf> {
    let target = target();
    let (major, minor) = OLDEST_GLIBC;
    let zig_target = format!("{target}.{major}.{minor}");
    let mut args = vec![
        "zigbuild",
        "--bins",
        "-p",
        "srap-cli",
        "-p",
        "srap-agent",
        "--target",
        &zig_target,
    ];
    if profile == Profile::Release {
        args.push("--release");
    }
    let mut command = cargo(&args);
    // The dev build only feeds the package check (`cargo xtask test`): no
    // debug information saves CI most of its compile and link time.
    command.env("CARGO_PROFILE_DEV_DEBUG", "0");
    run_step(Step::new(
        &format!("build ({}, {zig_target})", profile.dir()),
        command,
    ))?;
    Ok(target_dir().join(&target).join(profile.dir()))
}
