//! Free space for a build, checked before the first compiler runs.
//!
//! A cold `cargo xtask test` writes about 16 GiB under `target/` (debug
//! builds of every crate and test, the eBPF object, the fuzz targets, the
//! guest files, the packages' binaries linked against glibc 2.28: 1.4 GiB). Without the room, rustc dies halfway with "IO failure on
//! output stream" and the log names a random crate; this says what is short
//! and where, before anything is built.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::exec::stdout_of;

/// What a cold test run writes under the target directory.
const TEST_RUN_BYTES: u64 = 16 << 30;

/// Fails, naming the filesystem and the shortfall, when the target directory
/// has neither the room for a cold run nor a warm tree that needs less.
pub fn ensure_room_for_test_run(target: &Path) -> Result<()> {
    let probe = existing_ancestor(target);
    let free = free_bytes(probe)?;
    let built = used_bytes(target);
    let needed = TEST_RUN_BYTES.saturating_sub(built);
    if free >= needed {
        return Ok(());
    }
    bail!(
        "not enough disk space for the build: {} free on the filesystem of {}, the test run needs \
         about {} more ({} already built there); free some space (e.g. `cargo clean` in other \
         checkouts) and run again",
        gib(free),
        probe.display(),
        gib(needed),
        gib(built),
    )
}

/// The target directory may not exist yet on a fresh clone.
fn existing_ancestor(path: &Path) -> &Path {
    path.ancestors()
        .find(|ancestor| ancestor.exists())
        .unwrap_or(Path::new("/"))
}

/// Available bytes for an unprivileged writer, as `df` reports them.
fn free_bytes(path: &Path) -> Result<u64> {
    let output = stdout_of(Command::new("df").args(["-P", "-k"]).arg(path))
        .with_context(|| format!("`df -P -k {}` failed", path.display()))?;
    let kib = output
        .lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|field| field.parse::<u64>().ok())
        .with_context(|| format!("unexpected `df -P -k` output: {output:?}"))?;
    Ok(kib * 1024)
}

/// Bytes already under `path` (0 when it does not exist or `du` fails: the
/// check then asks for the cold amount, which is the safe side).
fn used_bytes(path: &Path) -> u64 {
    stdout_of(Command::new("du").args(["-s", "-k"]).arg(path))
        .and_then(|output| output.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_target_directory_is_probed_through_its_parent() {
        let missing = Path::new("/tmp/srap-xtask-no-such-dir/target");
        assert_eq!(existing_ancestor(missing), Path::new("/tmp"));
    }

    #[test]
    fn df_reports_some_free_space_for_the_root() {
        assert!(free_bytes(Path::new("/")).expect("df on /") > 0);
    }
}
