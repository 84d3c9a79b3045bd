//! `cargo xtask`: SRAP's developer tasks.
//!
//! Depends on nothing that needs bpf-linker or nightly, so it builds on a fresh
//! machine and can install what the rest of the workspace needs.

mod bench;
mod disk;
mod exec;
mod guest_files;
mod lab;
mod labbench;
mod layering;
mod package;
mod setup;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, Result};
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
    /// packages, bpf-linker; fetch the lab guests' QEMU 10 and generic 6.1
    /// and 6.12 kernels into target/guest-files (unpacked, not installed).
    /// Idempotent.
    Setup,
    /// Build the host binaries in release mode (the eBPF object comes along).
    Build,
    /// fmt check, clippy (host and eBPF), then the whole test suite.
    Test,
    /// Run the criterion benchmarks and summarise them against their goals,
    /// then the lab's throughput with the observer off, on tc and on the
    /// socket hook (report-only; `lab_observer` alone runs just that).
    Bench {
        /// Passed to the benchmark binaries (criterion filters, --quick, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// SRAP's main job on one machine (`srap-lab`): two namespaces, an
    /// emulated 32-queue RSS NIC, a workload with kernel and SRAP ports.
    /// Arguments go to `srap-lab` (e.g. `-- --experiment --trials 20`).
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the Debian package (srap_VERSION_ARCH.deb) and, with --rpm,
    /// the RPM beside it: both binaries (linked against glibc 2.28), the
    /// systemd units,
    /// example settings in /etc/srap/, man pages and completions.
    Package {
        /// Which build of the binaries to package.
        #[arg(long, value_enum, default_value_t = package::Profile::Release)]
        profile: package::Profile,
        /// Directory for the packages (default: the target directory's
        /// package/).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Also the RPM for the RHEL family (srap-VERSION-1.ARCH.rpm), from
        /// the same binaries and files.
        #[arg(long)]
        rpm: bool,
        /// Then install the .deb with dpkg, run and verify what it
        /// installed, and purge it again; with --rpm, also lint the .rpm,
        /// compare it with the .deb, install and erase it in a scratch root
        /// with rpm --root and check its binaries' glibc needs (root; what
        /// `cargo xtask test` does).
        #[arg(long)]
        check: bool,
    },
    /// Build and run the agent on this host, as root: `cargo xtask run --
    /// receiver ARGS…` or `cargo xtask run -- sender ARGS…`.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
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
        Task::Lab { args } => lab::run(&args),
        Task::Run { args } => agent(&args),
        Task::Package {
            profile,
            out,
            rpm,
            check,
        } => package(profile, out.as_deref(), rpm, check),
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
    disk::ensure_room_for_test_run(&exec::target_dir())?;
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
        Step::new("docs (libraries: links resolve)", library_docs()),
        // The kernel tests run `srap` and `srap-agent` as processes (and the
        // lab's, `srap-lab`); `cargo test` builds a binary only for its own
        // package's tests.
        Step::new("build (binaries)", cargo(&["build", "--bins"])),
    ];
    let count = steps.len() + 3 + FUZZ_TARGETS.len();
    let [fmt, clippy, clippy_ebpf, docs, build] = steps;
    for step in [fmt, clippy, clippy_ebpf, docs, build] {
        run_step(step)?;
    }
    layering::check()?;
    package_step()?;
    let kernel_tests = runs_kernel_tests();
    let counts = exec::run_test_step(Step::new("test", test_command(kernel_tests)))?;
    for (target, input) in FUZZ_TARGETS {
        run_step(fuzz_step(target, input))?;
    }
    println!("\nxtask test: all {count} steps passed");
    let exec::TestCounts {
        passed,
        failed,
        ignored,
    } = counts;
    // One plain closing line for whoever reads the log last.
    println!("tests: {passed} passed, {failed} failed, {ignored} ignored");
    if !kernel_tests && ignored > 0 {
        println!(
            "{ignored} tests were ignored because they need root (kernel, QEMU and client-runtime \
             tests): run `cargo xtask test` as root, or `cargo test -- --include-ignored` as root"
        );
    }
    Ok(())
}

/// Whether `cargo test` runs the `#[ignore]`d kernel tests: as root, and
/// always in CI (`CI=true`), where a test whose precondition is missing
/// fails rather than being left out.
fn runs_kernel_tests() -> bool {
    exec::is_root() || std::env::var("CI").is_ok_and(|ci| ci == "true")
}

/// `cargo test`, with `-- --include-ignored` when the kernel tests run (the
/// tests that need root are `#[ignore = "<what they need>"]`, so a plain
/// `cargo test` reports them ignored instead of passing them unrun).
fn test_command(kernel_tests: bool) -> std::process::Command {
    if kernel_tests {
        cargo(&["test", "--", "--include-ignored"])
    } else {
        cargo(&["test"])
    }
}

/// `cargo doc` of the library crates with every rustdoc warning an error:
/// a doc comment's link that names nothing (a renamed function, a private
/// item from public docs) fails here, not in a reader's browser. The
/// binaries' doc comments are their `--help` text, written for a terminal.
fn library_docs() -> std::process::Command {
    let mut command = cargo(&[
        "doc",
        "--no-deps",
        "-p",
        "srap-common",
        "-p",
        "srap-host",
        "-p",
        "srap-status",
        "-p",
        "srap-daemon",
        "-p",
        "srap-harness",
        "-p",
        "srap-lab",
        "-p",
        "srap-tests",
        "-p",
        "srap-docs",
    ]);
    command.env("RUSTDOCFLAGS", "-D warnings");
    command
}

/// Every parser of input from outside (`fuzz/`): (target, what it reads).
/// Each gets the same short libFuzzer run on every change (the corpus is
/// not kept, so each run starts fresh).
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("wire_decode", "frames from peers"),
    ("rss_description", "RSS description JSON"),
    ("sender_config", "the sender's TOML settings"),
];
/// Seconds each fuzz target runs.
const FUZZ_SECONDS: u32 = 20;

fn fuzz_step(target: &str, input: &str) -> Step {
    let time = format!("-max_total_time={FUZZ_SECONDS}");
    Step::new(
        &format!("fuzz ({target}: {input}, {FUZZ_SECONDS} s)"),
        cargo(&[
            "+nightly",
            "fuzz",
            "run",
            target,
            "--",
            &time,
            "-rss_limit_mb=1024",
        ]),
    )
}

fn package(profile: package::Profile, out: Option<&Path>, rpm: bool, check: bool) -> Result<()> {
    setup::ensure()?;
    let built = package::build(profile, rpm, out)?;
    if check {
        check_packages(&built)?;
    }
    Ok(())
}

/// The .deb's check, then the .rpm's when there is one.
fn check_packages(built: &package::Built) -> Result<()> {
    package::check::run(&built.deb)?;
    if let Some(rpm) = &built.rpm {
        package::rpm_check::run(rpm, &built.deb)?;
    }
    Ok(())
}

/// Both packages of debug binaries linked against glibc 2.28 (a release
/// build would add
/// minutes to CI; the staging is the same): the .deb installed, run under
/// systemd, verified and purged, the .rpm linted, compared with it,
/// installed and erased in a scratch root.
fn package_step() -> Result<()> {
    const NAME: &str = "package (.deb and .rpm: build, install, run, remove)";
    println!("\n==> {NAME}");
    let started = std::time::Instant::now();
    let built = package::build(package::Profile::Dev, true, None)?;
    check_packages(&built).with_context(|| format!("step '{NAME}' failed"))?;
    println!("<== {NAME}: ok in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Builds the release binaries, then runs `srap-agent ARGS…` as root (the
/// agent loads eBPF, makes namespaces, writes sysctls).
fn agent(args: &[String]) -> Result<()> {
    setup::ensure()?;
    run_step(Step::new(
        "build (release)",
        cargo(&["build", "--release", "-p", "srap-agent", "-p", "srap-cli"]),
    ))?;
    let mut command = exec::as_root(exec::workspace_root().join("target/release/srap-agent"));
    command.args(args);
    run_step(Step::new("srap-agent", command))
}

#[cfg(test)]
mod tests {
    // Every `cargo xtask` command line README.md and docs/ show parses as
    // they show it: a renamed flag or subcommand fails here, naming the page.
    doc_commands::parse_test!(doc_commands::Program::Xtask, super::Cli);
}
