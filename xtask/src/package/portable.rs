//! The packaged binaries: built for musl and linked statically, so they
//! need nothing of the host's C library and start on every supported host
//! (RHEL 8's glibc 2.28, RHEL 9's 2.34, Debian and Ubuntu alike). Built
//! here against the host's glibc, `srap` needs `GLIBC_2.34` and the agent
//! `GLIBC_2.35`.
//!
//! Measured against the other way (linking against glibc 2.28 with
//! `cargo zigbuild`), musl needs only a rustup target, where zig needs a
//! PyPI package and a cargo tool, and it costs nothing measurable where it
//! matters (docs/deploying.md, "Which binaries"): the agents' work per
//! connection and per packet is in the kernel's eBPF programs, not in the
//! C library.

use std::path::PathBuf;

use anyhow::Result;

use super::Profile;
use crate::exec::{Step, cargo, run_step, target_dir};

/// The Rust target the packages' binaries are built for.
pub fn target() -> String {
    format!("{}-unknown-linux-musl", std::env::consts::ARCH)
}

/// Builds `srap` and `srap-agent` for [`target`]; returns their directory.
pub fn build(profile: Profile) -> Result<PathBuf> {
    let target = target();
    let mut args = vec![
        "build",
        "--bins",
        "-p",
        "srap-cli",
        "-p",
        "srap-agent",
        "--target",
        &target,
    ];
    if profile == Profile::Release {
        args.push("--release");
    }
    run_step(Step::new(
        &format!("build ({}, {target})", profile.dir()),
        cargo(&args),
    ))?;
    Ok(target_dir().join(&target).join(profile.dir()))
}
