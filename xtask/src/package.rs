//! `cargo xtask package`: the `srap` Debian package and, with `--rpm`, the
//! RPM beside it, both from one tree staged here: no cargo-deb, rpmbuild
//! or spec file. The .deb is built with `dpkg-deb`, the .rpm with the
//! `rpm` crate; what they hold and what their scripts do is defined once
//! (`contents`, `scripts`), and the RPM check compares the two.
//!
//! The binaries are linked against glibc 2.28 (`portable` says why), so
//! one build runs on Debian and on RHEL 8 and 9 alike. The
//! man pages and completions come from the built binaries themselves
//! (`srap manpages DIR`, `srap completions SHELL`, and the same hidden
//! commands of `srap-agent`), so xtask needs neither the agent's crates nor
//! nightly. The units and the example settings are files under `deploy/`.

pub mod check;
pub mod contents;
mod deb;
pub mod elf;
pub mod portable;
mod rpm;
pub mod rpm_check;
pub mod scripts;
pub mod units;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

use crate::exec::{stdout_of, target_dir, workspace_root};
use contents::{BINARIES, CONFFILES, COPYRIGHT, Format, UNIT_DIR, UNITS};

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
    fn dir(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Dev => "debug",
        }
    }
}

/// The packages one `build` wrote.
pub struct Built {
    pub deb: PathBuf,
    pub rpm: Option<BuiltRpm>,
}

/// The .rpm and the tree it was written from, which the RPM check compares
/// both packages to.
pub struct BuiltRpm {
    pub path: PathBuf,
    pub stage: PathBuf,
}

/// Builds the binaries, stages the tree and writes the .deb and, with
/// `rpm`, the .rpm into `out` (default: the target directory's `package/`).
pub fn build(profile: Profile, rpm: bool, out: Option<&Path>) -> Result<Built> {
    let bins = portable::build(profile)?;
    let target = target_dir();
    let out = out.map_or_else(|| target.join("package"), Path::to_path_buf);
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let stages = target.join("package-root").join(profile.dir());
    let deb_stage = stages.join("deb");
    stage(&bins, &deb_stage, Format::Deb)?;
    let deb = deb::build(&deb_stage, &out)?;
    println!("package: {}", deb.display());
    let rpm = if rpm {
        let rpm_stage = stages.join("rpm");
        stage(&bins, &rpm_stage, Format::Rpm)?;
        let path = rpm::build(&rpm_stage, &out)?;
        println!("package: {}", path.display());
        Some(BuiltRpm {
            path,
            stage: rpm_stage,
        })
    } else {
        None
    };
    Ok(Built { deb, rpm })
}

/// Lays out in `stage` every file the package installs, where `format`
/// puts it, with [`contents::mode_of`] its mode.
fn stage(bins: &Path, stage: &Path, format: Format) -> Result<()> {
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
fn version_of(srap: &Path) -> Result<String> {
    let line = command_line(Command::new(srap).arg("--version"))?;
    line.split_whitespace()
        .nth(1)
        .map(str::to_owned)
        .with_context(|| format!("`{} --version` printed {line:?}", srap.display()))
}

/// Every regular file below `dir`, in a stable order.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    entries.sort_by_key(fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
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

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs `command`, failing with its stderr when it fails; output unused.
fn run_quiet(command: &mut Command) -> Result<()> {
    output_of(command).map(drop)
}

/// The trimmed stdout of `command`, or an error with its stderr.
fn command_line(command: &mut Command) -> Result<String> {
    output_of(command).map(|out| out.trim().to_owned())
}

fn output_of(command: &mut Command) -> Result<String> {
    let shown = crate::exec::describe(command);
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
