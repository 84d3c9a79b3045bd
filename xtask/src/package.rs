//! `cargo xtask package`: the `srap` Debian package, built with `dpkg-deb`
//! from a tree staged here (no cargo-deb to install and compile in CI).
//!
//! The man pages and completions come from the built binaries themselves
//! (`srap manpages DIR`, `srap completions SHELL`, and the same hidden
//! commands of `srap-agent`), so xtask needs neither the agent's crates nor
//! nightly. The units, the example settings and the maintainer scripts are
//! files under `deploy/`.

pub mod check;
pub mod units;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

use crate::exec::{Step, cargo, run_step, stdout_of, target_dir, workspace_root};

/// The package's name.
pub const PACKAGE: &str = "srap";
/// (binary, man section): `srap` is a user command, the agent a daemon.
const BINARIES: &[(&str, &str)] = &[("srap", "1"), ("srap-agent", "8")];
/// Settings shipped as conffiles: an administrator's edits survive
/// upgrades and removal (only a purge deletes them).
const CONFFILES: &[&str] = &[
    "etc/srap/receiver.conf",
    "etc/srap/sender.conf",
    "etc/srap/sender.toml",
];
const UNITS: &[&str] = &["srap-receiver.service", "srap-sender.service"];
/// Where systemd looks for units shipped by packages.
pub const UNIT_DIR: &str = "usr/lib/systemd/system";
/// Debian's completion directories: (shell, directory, prefix and suffix
/// of the file name around the binary's name).
const COMPLETIONS: &[(&str, &str, &str, &str)] = &[
    ("bash", "usr/share/bash-completion/completions", "", ""),
    ("zsh", "usr/share/zsh/vendor-completions", "_", ""),
    ("fish", "usr/share/fish/vendor_completions.d", "", ".fish"),
];

/// Which binaries to package.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Optimised: what `cargo xtask package` ships.
    Release,
    /// The debug binaries `cargo xtask test` already built (its package
    /// check runs on them rather than adding a release build to CI).
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

/// Builds the binaries, stages the tree and writes the .deb into `out`
/// (default: the target directory's `package/`). Returns the .deb's path.
pub fn build(profile: Profile, out: Option<&Path>) -> Result<PathBuf> {
    // `--bins` as `cargo xtask test` builds them: the same features, so the
    // dev build there is reused here.
    let mut args = vec!["build", "--bins"];
    if profile == Profile::Release {
        args.push("--release");
    }
    run_step(Step::new(
        &format!("build ({})", profile.dir()),
        cargo(&args),
    ))?;
    let target = target_dir();
    let out = out.map_or_else(|| target.join("package"), Path::to_path_buf);
    let stage = target.join("package-root").join(profile.dir());
    let deb = stage_and_build(&target.join(profile.dir()), &stage, &out)?;
    println!("package: {}", deb.display());
    Ok(deb)
}

fn stage_and_build(bins: &Path, stage: &Path, out: &Path) -> Result<PathBuf> {
    if stage.exists() {
        fs::remove_dir_all(stage)
            .with_context(|| format!("removing the old staging tree {}", stage.display()))?;
    }
    stage_binaries(bins, stage)?;
    stage_man_pages(stage)?;
    stage_completions(stage)?;
    stage_deploy_files(stage)?;
    let version = version_of(&stage.join("usr/bin/srap"))?;
    let arch = command_line(Command::new("dpkg").arg("--print-architecture"))?;
    write_control_files(stage, &version, &arch)?;
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let deb = out.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    let mut command = Command::new("dpkg-deb");
    command
        .args(["--root-owner-group", "--build"])
        .arg(stage)
        .arg(&deb);
    run_step(Step::new("dpkg-deb --build", command))?;
    Ok(deb)
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
/// compressed as Debian wants (`gzip -9n`: no name or time stamp).
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

fn stage_completions(stage: &Path) -> Result<()> {
    for (shell, dir, prefix, suffix) in COMPLETIONS {
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
    files.push((
        deploy.join("debian/copyright"),
        format!("usr/share/doc/{PACKAGE}/copyright"),
    ));
    for (from, to) in files {
        copy_file(&from, &stage.join(to), 0o644)?;
    }
    Ok(())
}

/// DEBIAN/: control (version, architecture, size and Depends filled in),
/// conffiles, md5sums and the maintainer scripts.
fn write_control_files(stage: &Path, version: &str, arch: &str) -> Result<()> {
    let debian = workspace_root().join("deploy/debian");
    let dir = stage.join("DEBIAN");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let md5sums = md5sums(stage)?;
    let depends = depends(stage)?;
    let size_kib = installed_size_kib(stage)?;
    let template = read(&debian.join("control"))?;
    let control = template
        .replace("@VERSION@", version)
        .replace("@ARCH@", arch)
        .replace("@INSTALLED_SIZE@", &size_kib.to_string())
        .replace("@SHLIBS_DEPENDS@", &depends);
    let unfilled =
        control.split('@').skip(1).step_by(2).find(|word| {
            !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        });
    ensure!(
        unfilled.is_none(),
        "deploy/debian/control has a placeholder xtask does not fill: @{}@",
        unfilled.unwrap_or_default()
    );
    write(&dir.join("control"), &control)?;
    let conffiles: String = CONFFILES.iter().map(|c| format!("/{c}\n")).collect();
    write(&dir.join("conffiles"), &conffiles)?;
    write(&dir.join("md5sums"), &md5sums)?;
    for script in ["postinst", "prerm", "postrm"] {
        copy_file(&debian.join(script), &dir.join(script), 0o755)?;
    }
    Ok(())
}

/// The shared libraries' packages as `dpkg-shlibdeps` finds them, with the
/// lowest versions the binaries' symbols need (the template adds the rest).
fn depends(stage: &Path) -> Result<String> {
    // dpkg-shlibdeps reads debian/control from its working directory; a
    // minimal one in a scratch directory is enough.
    let scratch = stage.with_extension("shlibdeps");
    fs::create_dir_all(scratch.join("debian"))
        .with_context(|| format!("creating {}", scratch.display()))?;
    write(
        &scratch.join("debian/control"),
        &format!("Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n"),
    )?;
    let mut command = Command::new("dpkg-shlibdeps");
    command.arg("-O").current_dir(&scratch);
    for (bin, _) in BINARIES {
        command.arg(format!("-e{}", stage.join("usr/bin").join(bin).display()));
    }
    let substvars = command_line(&mut command);
    let _ = fs::remove_dir_all(&scratch);
    substvars?
        .strip_prefix("shlibs:Depends=")
        .map(str::to_owned)
        .context("dpkg-shlibdeps printed no shlibs:Depends line")
}

/// `md5sums` of the files under usr/ (dpkg keeps the conffiles' own).
fn md5sums(stage: &Path) -> Result<String> {
    let mut files = Vec::new();
    walk(&stage.join("usr"), &mut files)?;
    let relative: Vec<PathBuf> = files
        .iter()
        .filter_map(|file| file.strip_prefix(stage).ok().map(Path::to_path_buf))
        .collect();
    let mut command = Command::new("md5sum");
    command.arg("--").args(&relative).current_dir(stage);
    stdout_of(&mut command).context("md5sum of the staged files failed")
}

/// Installed-Size: KiB the files take, each rounded up, as dpkg-gencontrol
/// counts them.
fn installed_size_kib(stage: &Path) -> Result<u64> {
    let mut files = Vec::new();
    for top in ["usr", "etc"] {
        walk(&stage.join(top), &mut files)?;
    }
    let mut kib = 0;
    for file in &files {
        let len = fs::metadata(file)
            .with_context(|| format!("reading {}", file.display()))?
            .len();
        kib += len.div_ceil(1024);
    }
    Ok(kib)
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
