//! `cargo xtask`: SRAP's developer tasks.
//!
//! Depends on nothing that needs bpf-linker or nightly, so it builds on a fresh
//! machine and can install what the rest of the workspace needs.

mod bench;
mod exec;
mod setup;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::exec::{Step, cargo, run_step};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", about = "SRAP developer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Install what is missing: nightly + rust-src, clippy/rustfmt, apt
    /// packages, bpf-linker. Idempotent.
    Setup,
    /// Build the host binaries in release mode (the eBPF object comes along).
    Build,
    /// fmt check, clippy (host and eBPF), then the whole test suite.
    Test,
    /// Run the criterion benchmarks and summarise them against their goals.
    Bench {
        /// Passed to the benchmark binaries (criterion filters, --quick, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// SRAP's main job on one machine (`srap-agent lab`): two namespaces, an
    /// emulated 32-queue RSS NIC, a workload with kernel and SRAP ports.
    /// Arguments go to `srap-agent lab` (e.g. `-- --experiment --trials 20`).
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Task::Setup => setup::run(),
        Task::Build => build(),
        Task::Test => test(),
        Task::Bench { args } => bench::run(&args),
        Task::Lab { args } => lab(&args),
    };
    // Printed here rather than returned from main: a failed step is a plain
    // message, not a backtrace (RUST_BACKTRACE is often set in CI).
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nxtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn build() -> Result<()> {
    setup::ensure()?;
    run_step(Step::new("build (release)", cargo(&["build", "--release"])))
}

/// Stops at the first failing step; the error names it.
fn test() -> Result<()> {
    setup::ensure()?;
    let steps = [
        Step::new("fmt", cargo(&["fmt", "--all", "--", "--check"])),
        Step::new(
            "clippy (host)",
            cargo(&["clippy", "--all-targets", "--", "-D", "warnings"]),
        ),
        Step::new(
            "clippy (eBPF)",
            cargo(&[
                "+nightly",
                "clippy",
                "-p",
                "srap-ebpf",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ]),
        ),
        Step::new("test", cargo(&["test"])),
    ];
    let count = steps.len();
    for step in steps {
        run_step(step)?;
    }
    println!("\nxtask test: all {count} steps passed");
    Ok(())
}

fn lab(args: &[String]) -> Result<()> {
    setup::ensure()?;
    run_step(Step::new(
        "build (release)",
        cargo(&["build", "--release", "-p", "srap-agent", "-p", "srap-cli"]),
    ))?;
    let agent = exec::workspace_root().join("target/release/srap-agent");
    // The lab makes namespaces and loads eBPF: root, through sudo if need be.
    let is_root = exec::stdout_of(std::process::Command::new("id").arg("-u"))
        .is_some_and(|uid| uid.trim() == "0");
    let mut command = if is_root {
        std::process::Command::new(&agent)
    } else {
        let mut sudo = std::process::Command::new("sudo");
        sudo.arg(&agent);
        sudo
    };
    command.arg("lab").args(args);
    run_step(Step::new("srap-agent lab", command))
}
