//! Running commands: as named steps from the workspace root, or for their
//! output, failing with what the command said on its stderr.

use std::{path::PathBuf, process::Command, time::Instant};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// A named command; its name is what a failure reports.
pub struct Step {
    name: String,
    command: Command,
}

impl Step {
    pub fn new(name: &str, command: Command) -> Self {
        Self {
            name: name.to_owned(),
            command,
        }
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), PathBuf::from)
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR` and config).
pub fn target_dir() -> PathBuf {
    let mut command = Command::new("cargo");
    command
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(workspace_root());
    stdout_of(&mut command)
        .and_then(|json| serde_json::from_str::<Value>(&json).ok())
        .and_then(|meta| meta.get("target_directory")?.as_str().map(PathBuf::from))
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// `cargo ARGS` (the rustup proxy on PATH, so `+nightly` works) in the
/// workspace root.
pub fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args).current_dir(workspace_root());
    // `cargo run` exports the toolchain it runs under; let `+nightly` and
    // rust-toolchain files decide instead.
    command.env_remove("RUSTUP_TOOLCHAIN");
    command
}

/// Prints a header, runs the step with inherited stdio, and fails naming the
/// step if it fails.
pub fn run_step(step: Step) -> Result<()> {
    let Step { name, mut command } = step;
    println!("\n==> {name}: {}", describe(&command));
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("step '{name}': could not start {}", describe(&command)))?;
    if !status.success() {
        bail!("step '{name}' failed ({status})");
    }
    println!("<== {name}: ok in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// True when xtask runs as root (`id -u` is 0).
pub fn is_root() -> bool {
    stdout_of(Command::new("id").arg("-u")).is_some_and(|uid| uid.trim() == "0")
}

/// `program` run as root: directly when we are root, else through sudo.
pub fn as_root(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg(program);
        sudo
    }
}

/// What the `test result:` lines of a `cargo test` add up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestCounts {
    pub passed: u64,
    pub failed: u64,
    /// Tests `#[ignore]`d and not asked for: the kernel tests when not run
    /// with `--include-ignored`.
    pub ignored: u64,
}

impl TestCounts {
    /// Adds one `test result:` summary (`ok. 12 passed; 0 failed; 3 ignored; …`).
    fn add(&mut self, summary: &str) {
        self.passed += count_of(summary, " passed");
        self.failed += count_of(summary, " failed");
        self.ignored += count_of(summary, " ignored");
    }
}

/// Like [`run_step`] for `cargo test`: passes its output through and adds up
/// the `test result:` lines.
pub fn run_test_step(step: Step) -> Result<TestCounts> {
    use std::io::{BufRead as _, BufReader};

    let Step { name, mut command } = step;
    println!("\n==> {name}: {}", describe(&command));
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("step '{name}': could not start {}", describe(&command)))?;
    let mut counts = TestCounts::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.context("reading the test output")?;
            println!("{line}");
            if let Some(summary) = line.trim().strip_prefix("test result: ") {
                counts.add(summary);
            }
        }
    }
    let status = child.wait().context("waiting for the tests")?;
    if !status.success() {
        let TestCounts {
            passed,
            failed,
            ignored,
        } = counts;
        bail!(
            "step '{name}' failed ({status}): {passed} passed, {failed} failed, {ignored} ignored"
        );
    }
    println!("<== {name}: ok in {:.1}s", started.elapsed().as_secs_f64());
    Ok(counts)
}

/// The number before `label` in a libtest summary (`ok. 12 passed; 0 failed; …`).
fn count_of(summary: &str, label: &str) -> u64 {
    summary
        .split([';', '.'])
        .find_map(|part| part.trim().strip_suffix(label.trim_start()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `command` quietly; true when it ran and exited 0.
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `command` and returns its stdout, or None if it could not run or failed.
pub fn stdout_of(command: &mut Command) -> Option<String> {
    let output = command.stderr(std::process::Stdio::null()).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `program args` as one line for headers and errors.
pub fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `command`, failing with its stderr when it fails; output unused.
pub fn run_quiet(command: &mut Command) -> Result<()> {
    output_of(command).map(drop)
}

/// The trimmed stdout of `command`, or an error with its stderr.
pub fn command_line(command: &mut Command) -> Result<String> {
    output_of(command).map(|out| out.trim().to_owned())
}

/// The stdout of `command`, or an error naming it with its stderr.
pub fn output_of(command: &mut Command) -> Result<String> {
    let shown = describe(command);
    let output = command
        .output()
        .with_context(|| format!("could not run `{shown}`"))?;
    if !output.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{TestCounts, count_of};

    #[test]
    fn libtest_summaries_are_counted() {
        let summary =
            "ok. 12 passed; 3 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.41s";
        assert_eq!(count_of(summary, " passed"), 12);
        assert_eq!(count_of(summary, " failed"), 3);
        assert_eq!(count_of("FAILED. 0 passed; 1 failed;", " failed"), 1);
        assert_eq!(count_of("garbage", " passed"), 0);
    }

    #[test]
    fn ignored_tests_are_counted_across_summaries() {
        let mut counts = TestCounts::default();
        counts.add(
            "ok. 1 passed; 0 failed; 8 ignored; 0 measured; 0 filtered out; finished in 1.01s",
        );
        counts.add(
            "ok. 30 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.2s",
        );
        assert_eq!(
            counts,
            TestCounts {
                passed: 31,
                failed: 0,
                ignored: 8
            }
        );
    }
}
