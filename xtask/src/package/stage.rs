//! The tree a package is written from: every file it installs, laid out
//! where one format puts it, and the version of the `srap` staged there.
//! It must not write a package (`deb` and `rpm` do) nor decide what one
//! holds (`contents` does).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, ensure};

use super::contents::{self, BINARIES, CONFFILES, COPYRIGHT, Format, UNIT_DIR, UNITS};
use crate::exec::{command_line, run_quiet, stdout_of, workspace_root};

/// Lays out in `stage` every file the package installs, where `format`
/// puts it, with [`contents::mode_of`] its mode.
pub fn stage(bins: &Path, stage: &Path, format: Format) -> Result<()> {
    if stage.exists() {
        fs::remove_dir_all(stage)
            .with_context(|| format!("removing the old staging tree {}", stage.display()))?;
    }
    stage_binaries(bins, stage)?;
    stage_man_pages(stage)?;
    stage_completions(stage, format)?;
    stage_deploy_files(stage)?;
    contents::set_modes(stage)
}

/// `usr/bin/NAME`, stripped: the debug information stays in the target dir.
fn stage_binaries(bins: &Path, stage: &Path) -> Result<()> {
    let dir = stage.join("usr/bin");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (bin, _) in BINARIES {
        let from = bins.join(bin);
        ensure!(
            from.is_file(),
            "{} is missing: the build step above should have made it",
            from.display()
        );
        let to = dir.join(bin);
        let mut strip = Command::new("strip");
        strip.args(["--strip-unneeded", "-o"]).arg(&to).arg(&from);
        run_quiet(&mut strip)?;
    }
    Ok(())
}

/// `usr/share/man/manN/*.N.gz` from each binary's `manpages` command,
/// compressed as both families want (`gzip -9n`: no name or time stamp).
fn stage_man_pages(stage: &Path) -> Result<()> {
    for (bin, section) in BINARIES {
        let dir = stage.join(format!("usr/share/man/man{section}"));
        let mut command = Command::new(stage.join("usr/bin").join(bin));
        command
            .arg("manpages")
            .arg(&dir)
            .args(["--section", section]);
        let written = command_line(&mut command)?;
        for page in written.lines() {
            run_quiet(Command::new("gzip").args(["-9n", "--force", page]))?;
        }
    }
    Ok(())
}

fn stage_completions(stage: &Path, format: Format) -> Result<()> {
    for (shell, _, _, prefix, suffix) in contents::COMPLETIONS {
        let dir = format
            .completion_dir(shell)
            .with_context(|| format!("no completion directory for {shell}"))?;
        let dir = stage.join(dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (bin, _) in BINARIES {
            let mut command = Command::new(stage.join("usr/bin").join(bin));
            command.args(["completions", shell]);
            let script = stdout_of(&mut command)
                .with_context(|| format!("`{bin} completions {shell}` failed"))?;
            let path = dir.join(format!("{prefix}{bin}{suffix}"));
            fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The units, the example settings and the copyright file from `deploy/`.
fn stage_deploy_files(stage: &Path) -> Result<()> {
    let deploy = workspace_root().join("deploy");
    let mut files: Vec<(PathBuf, String)> = UNITS
        .iter()
        .map(|unit| {
            (
                deploy.join("systemd").join(unit),
                format!("{UNIT_DIR}/{unit}"),
            )
        })
        .collect();
    files.extend(
        CONFFILES
            .iter()
            .map(|conf| (deploy.join(conf), (*conf).to_owned())),
    );
    files.push((deploy.join("debian/copyright"), COPYRIGHT.to_owned()));
    for (from, to) in files {
        copy_file(&from, &stage.join(to), 0o644)?;
    }
    Ok(())
}

/// `srap --version` prints `srap X.Y.Z`; running the staged binary also
/// proves it runs.
pub fn version_of(srap: &Path) -> Result<String> {
    let line = command_line(Command::new(srap).arg("--version"))?;
    line.split_whitespace()
        .nth(1)
        .map(str::to_owned)
        .with_context(|| format!("`{} --version` printed {line:?}", srap.display()))
}

fn copy_file(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", to.display()))
}
