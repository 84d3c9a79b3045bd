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
    BINARIES, CONFFILES, command_line, contents, elf, read, scripts, version_of, walk, write,
};
use crate::exec::{Step, run_step, stdout_of, workspace_root};

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
    let mut depends = shared_libraries(stage)?;
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

/// The shared libraries' packages as `dpkg-shlibdeps` finds them, with the
/// lowest versions the binaries' symbols need; none for static binaries
/// (what `portable` builds).
fn shared_libraries(stage: &Path) -> Result<Vec<String>> {
    let bins: Vec<PathBuf> = BINARIES
        .iter()
        .map(|(bin, _)| stage.join("usr/bin").join(bin))
        .collect();
    let mut dynamic = false;
    for bin in &bins {
        dynamic |= !elf::is_static(bin)?;
    }
    if !dynamic {
        return Ok(Vec::new());
    }
    // dpkg-shlibdeps reads debian/control from its working directory; a
    // minimal one in a scratch directory is enough.
    let scratch = stage.with_extension("shlibdeps");
    fs::create_dir_all(scratch.join("debian"))
        .with_context(|| format!("creating {}", scratch.display()))?;
    write(
        &scratch.join("debian/control"),
        &format!(
            "Source: {0}\n\nPackage: {0}\nArchitecture: any\n",
            contents::PACKAGE
        ),
    )?;
    let mut command = Command::new("dpkg-shlibdeps");
    command.arg("-O").current_dir(&scratch);
    for bin in &bins {
        command.arg(format!("-e{}", bin.display()));
    }
    let substvars = command_line(&mut command);
    let _ = fs::remove_dir_all(&scratch);
    let line = substvars?;
    let depends = line
        .strip_prefix("shlibs:Depends=")
        .context("dpkg-shlibdeps printed no shlibs:Depends line")?;
    Ok(depends.split(", ").map(str::to_owned).collect())
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
