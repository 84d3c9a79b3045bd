//! `cargo xtask lab`: the release build the lab runs, and `srap-lab` run
//! as root on it. The bench builds the same binaries first, so the build
//! is named once, here; what the lab does is `srap-lab`'s own business,
//! not this file's.

use anyhow::Result;

use crate::{
    exec::{self, Step, cargo, run_step},
    setup,
};

/// The release build the lab runs: its own binary and the two it drives.
pub const BUILD: [&str; 9] = [
    "build",
    "--release",
    "--bins",
    "-p",
    "srap-lab",
    "-p",
    "srap-agent",
    "-p",
    "srap-cli",
];

/// Builds the release binaries (`srap-lab` runs the `srap-agent` and `srap`
/// built beside it), then runs `srap-lab ARGS…` as root (it makes
/// namespaces and loads eBPF).
pub fn run(args: &[String]) -> Result<()> {
    setup::ensure()?;
    run_step(Step::new("build (release)", cargo(&BUILD)))?;
    let mut command = exec::as_root(exec::workspace_root().join("target/release/srap-lab"));
    command.args(args);
    run_step(Step::new("srap-lab", command))
}
