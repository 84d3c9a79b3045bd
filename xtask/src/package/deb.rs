//! The .deb: `DEBIAN/` written beside the staged tree, then `dpkg-deb
//! --root-owner-group --build` (every file root's, as [`contents::OWNER`]
//! says).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, ensure};

use super::{
    contents::{self, CONFFILES},
    elf,
    files::{read, walk, write},
    scripts,
    stage::version_of,
};
use crate::exec::{Step, command_line, run_step, stdout_of, workspace_root};

/// Writes `DEBIAN/` into `stage` and builds the .deb into `out`.
pub fn build(stage: &Path, out: &Path) -> Result<PathBuf> {
    let version = version_of(&stage.join("usr/bin/srap"))?;
    let arch = command_line(Command::new("dpkg").arg("--print-architecture"))?;
    write_control_files(stage, &version, &arch)?;
    let deb = out.join(format!("{}_{version}_{arch}.deb", contents::PACKAGE));
    let mut command = Command::new("dpkg-deb");
    command
        .args(["--root-owner-group", "--build"])
        .arg(stage)
        .arg(&deb);
    run_step(Step::new("dpkg-deb --build", command))?;
    Ok(deb)
}

/// DEBIAN/: control (version, architecture, size and dependencies filled
/// in), conffiles, md5sums and the maintainer scripts.
fn write_control_files(stage: &Path, version: &str, arch: &str) -> Result<()> {
    let dir = stage.join("DEBIAN");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let md5sums = md5sums(stage)?;
    // What the binaries' symbols need, not dpkg-shlibdeps' answer: Debian
    // 12's libc6 symbols file lists only placeholders for libpthread.so.0
    // and libdl.so.2 (stubs since glibc 2.34), so dpkg-shlibdeps asks for
    // libc6 (>= 2.34) and would turn away hosts the binaries start on.
    let glibc = elf::glibc_required(&contents::binaries_in(stage))?;
    let mut depends: Vec<String> = glibc
        .map(|version| format!("{} (>= {version})", contents::GLIBC.0))
        .into_iter()
        .collect();
    depends.extend(contents::REQUIRES.iter().map(|(deb, _)| (*deb).to_owned()));
    let recommends: Vec<&str> = contents::RECOMMENDS.iter().map(|(deb, _)| *deb).collect();
    let size_kib = installed_size_kib(stage)?;
    let control = read(&workspace_root().join("deploy/debian/control"))?
        .replace("@VERSION@", version)
        .replace("@ARCH@", arch)
        .replace("@INSTALLED_SIZE@", &size_kib.to_string())
        .replace("@DEPENDS@", &depends.join(", "))
        .replace("@RECOMMENDS@", &recommends.join(", "));
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
    for name in scripts::DEB_SCRIPTS {
        let path = dir.join(name);
        write(&path, &scripts::deb_script(name)?)?;
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
    }
    Ok(())
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
