//! The package's own test (a step of `cargo xtask test`): install the .deb
//! with dpkg, run what it installed, verify its units, then remove and purge
//! it and check that nothing of it is left.
//!
//! It changes the host's package database, so it refuses to run over an
//! `srap` installed by someone else, and a drop guard purges the package
//! when a check fails half-way.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

use super::{
    contents::{BINARIES, CONFFILES, PACKAGE, UNIT_DIR, UNITS},
    units,
};
use crate::exec::output_of;

/// The key postinst makes and postrm purges.
const PSK: &str = "/etc/srap/psk";

/// Purges the package on drop unless it was already removed.
struct Installed {
    purged: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.purged {
            eprintln!("package check: purging {PACKAGE} after a failed check");
            let _ = Command::new("dpkg").args(["--purge", PACKAGE]).status();
        }
    }
}

/// Installs `deb`, checks it, removes it, purges it.
pub fn run(deb: &Path) -> Result<()> {
    ensure_root()?;
    if let Some(status) = dpkg_status()? {
        bail!(
            "{PACKAGE} is already on this machine ({status}): the check would replace and \
             then purge it; remove it first with `dpkg --purge {PACKAGE}`"
        );
    }
    let mut installed = Installed { purged: false };
    dpkg(&["--install"], deb)?;
    let files = installed_files()?;
    check_binaries(&files)?;
    check_man_pages(&files)?;
    check_completions()?;
    check_key()?;
    check_open_listen_refused()?;
    check_units()?;
    for (unit, score) in units::check_exposure()? {
        println!(
            "package check: {unit}: exposure {score:.1} (at most {:.1})",
            units::MAX_EXPOSURE
        );
    }
    units::check_running()?;
    println!("package check: both units ran under systemd with their capabilities only");
    // As an administrator would: the prerm must drop these links again.
    let links = enable_units()?;

    dpkg(&["--remove"], Path::new(PACKAGE))?;
    let dangling: Vec<_> = links
        .iter()
        .filter(|l| l.symlink_metadata().is_ok())
        .collect();
    ensure!(
        dangling.is_empty(),
        "enable links left after dpkg --remove: {dangling:?}"
    );
    ensure!(
        Path::new(PSK).exists(),
        "{PSK} went with dpkg --remove: it is kept until a purge, as the settings are"
    );
    let status = dpkg_status()?.unwrap_or_default();
    ensure!(
        status == "deinstall ok config-files",
        "after dpkg --remove: status {status:?}, want the conffiles kept"
    );
    let conffiles: Vec<PathBuf> = CONFFILES.iter().map(|c| Path::new("/").join(c)).collect();
    let left: Vec<_> = files.iter().filter(|f| f.exists()).collect();
    ensure!(
        left.iter().all(|f| conffiles.contains(f)),
        "files left after dpkg --remove: {left:?}"
    );

    dpkg(&["--purge"], Path::new(PACKAGE))?;
    installed.purged = true;
    ensure!(
        dpkg_status()?.is_none(),
        "{PACKAGE} still known to dpkg after --purge"
    );
    let left: Vec<_> = files.iter().filter(|f| f.exists()).collect();
    ensure!(left.is_empty(), "files left after dpkg --purge: {left:?}");
    ensure!(
        !Path::new("/etc/srap").exists(),
        "/etc/srap is left after dpkg --purge"
    );
    println!(
        "package check: installed, ran and removed {} ({} files)",
        deb.display(),
        files.len()
    );
    Ok(())
}

pub(super) fn ensure_root() -> Result<()> {
    let uid = output_of(Command::new("id").arg("-u"))?;
    if uid.trim() == "0" {
        return Ok(());
    }
    bail!("the package check installs with dpkg: run `cargo xtask test` as root")
}

/// dpkg's status of the package, or None when dpkg does not know it.
fn dpkg_status() -> Result<Option<String>> {
    let output = Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}", PACKAGE])
        .output()
        .context("could not run dpkg-query")?;
    let status = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    // A purged package is "unknown ok not-installed" or not listed at all.
    Ok((output.status.success() && !status.ends_with("not-installed")).then_some(status))
}

fn dpkg(args: &[&str], target: &Path) -> Result<()> {
    let mut command = Command::new("dpkg");
    command
        .args(args)
        .arg(target)
        .env("DEBIAN_FRONTEND", "noninteractive");
    output_of(&mut command).map(drop)
}

/// The regular files the package installed (`dpkg -L` lists directories too).
fn installed_files() -> Result<Vec<PathBuf>> {
    let listing = output_of(Command::new("dpkg").args(["--listfiles", PACKAGE]))?;
    let files: Vec<PathBuf> = listing
        .lines()
        .map(PathBuf::from)
        .filter(|path| path.is_file())
        .collect();
    for want in [
        "/usr/bin/srap",
        "/usr/bin/srap-agent",
        "/etc/srap/receiver.conf",
        "/etc/srap/sender.toml",
    ] {
        ensure!(
            files.iter().any(|f| f == Path::new(want)),
            "dpkg -L {PACKAGE} lacks {want}"
        );
    }
    Ok(files)
}

/// The installed binaries run: versions, help, a completion script.
fn check_binaries(files: &[PathBuf]) -> Result<()> {
    let version = output_of(Command::new("/usr/bin/srap").arg("--version"))?;
    ensure!(version.starts_with("srap "), "srap --version: {version:?}");
    let help = output_of(Command::new("/usr/bin/srap-agent").arg("--help"))?;
    ensure!(
        help.contains("receiver") && help.contains("sender"),
        "srap-agent --help lacks its subcommands: {help}"
    );
    let script = output_of(Command::new("/usr/bin/srap").args(["completions", "bash"]))?;
    ensure!(
        script.contains("complete -F"),
        "srap completions bash printed no `complete -F`"
    );
    for (bin, _) in BINARIES {
        let path = Path::new("/usr/bin").join(bin);
        ensure!(
            files.contains(&path),
            "{} not in the package",
            path.display()
        );
    }
    let lab: Vec<&PathBuf> = files.iter().filter(|f| is_the_labs(f)).collect();
    ensure!(
        lab.is_empty(),
        "the package ships the lab (its own binary, never the root daemon's): {lab:?}"
    );
    Ok(())
}

/// `srap-lab` or a page of it (`srap-lab.1`, the old `srap-agent-lab.8`):
/// QEMU control, plots and the test harness stay out of the package.
fn is_the_labs(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("srap-lab") || name.contains("-lab."))
}

/// Each page renders with `man -l`, and each binary and subcommand has one.
fn check_man_pages(files: &[PathBuf]) -> Result<()> {
    let pages: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.starts_with("/usr/share/man"))
        .collect();
    for want in [
        "/usr/share/man/man1/srap.1.gz",
        "/usr/share/man/man1/srap-completions.1.gz",
        "/usr/share/man/man8/srap-agent.8.gz",
        "/usr/share/man/man8/srap-agent-receiver.8.gz",
        "/usr/share/man/man8/srap-agent-sender.8.gz",
    ] {
        ensure!(
            pages.iter().any(|p| p.as_path() == Path::new(want)),
            "no man page {want}"
        );
    }
    for page in &pages {
        let mut man = Command::new("man");
        man.arg("-l")
            .arg(page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80");
        let text = output_of(&mut man)?;
        ensure!(
            text.contains("NAME") && text.contains("SYNOPSIS"),
            "man -l {} rendered no NAME/SYNOPSIS:\n{text}",
            page.display()
        );
    }
    Ok(())
}

/// bash loads the installed completion script and registers it.
fn check_completions() -> Result<()> {
    for (bin, _) in BINARIES {
        let script =
            format!("source /usr/share/bash-completion/completions/{bin} && complete -p {bin}");
        let registered = output_of(Command::new("bash").args(["--norc", "-c", &script]))?;
        ensure!(
            registered.contains(bin),
            "bash did not register {bin}'s completion: {registered:?}"
        );
    }
    Ok(())
}

/// The key postinst made: root's alone, random, long enough.
fn check_key() -> Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let path = Path::new(PSK);
    let meta = std::fs::metadata(path).with_context(|| format!("postinst made no {PSK}"))?;
    ensure!(
        meta.permissions().mode() & 0o777 == 0o600 && meta.uid() == 0,
        "{PSK} has mode {:o}, owner {}: want 600, root",
        meta.permissions().mode() & 0o777,
        meta.uid()
    );
    let key = std::fs::read_to_string(path)?;
    ensure!(
        key.trim().len() >= 40,
        "{PSK} holds {} characters: want 32 random bytes in base64",
        key.trim().len()
    );
    Ok(())
}

/// The installed agent refuses to serve beyond loopback with neither a
/// key nor an allow-list, before it binds anything, naming the ways out.
fn check_open_listen_refused() -> Result<()> {
    let output = Command::new("/usr/bin/srap-agent")
        .args(["receiver", "--iface", "lo", "--listen", "0.0.0.0:7447"])
        .output()
        .context("running /usr/bin/srap-agent receiver")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.code() == Some(2)
            && ["--psk-file", "--allow", "--open"]
                .iter()
                .all(|flag| stderr.contains(flag)),
        "srap-agent receiver --listen 0.0.0.0:7447 without a key: {} {stderr}",
        output.status
    );
    Ok(())
}

/// `systemctl enable` on the units (offline when systemd is not running);
/// returns the links it made.
fn enable_units() -> Result<Vec<PathBuf>> {
    output_of(Command::new("systemctl").arg("enable").args(UNITS))?;
    let links: Vec<PathBuf> = UNITS
        .iter()
        .map(|unit| Path::new("/etc/systemd/system/multi-user.target.wants").join(unit))
        .collect();
    for link in &links {
        ensure!(
            link.symlink_metadata().is_ok(),
            "systemctl enable made no {}",
            link.display()
        );
    }
    Ok(links)
}

/// `systemd-analyze verify` on the installed units: syntax, ExecStart's
/// binary, EnvironmentFile, dependencies.
fn check_units() -> Result<()> {
    let mut verify = Command::new("systemd-analyze");
    verify.arg("verify");
    for unit in UNITS {
        verify.arg(Path::new("/").join(UNIT_DIR).join(unit));
    }
    let output = verify.output().context("could not run systemd-analyze")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    // verify also reports on units the checked ones pull in; every line
    // about ours is a failure.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("srap")).collect();
    ensure!(
        output.status.success() && ours.is_empty(),
        "systemd-analyze verify ({}):\n{stderr}",
        output.status
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_labs_binary_and_pages_are_told_from_the_agents() {
        for lab in [
            "/usr/bin/srap-lab",
            "/usr/share/man/man8/srap-agent-lab.8.gz",
            "/usr/share/man/man1/srap-lab.1.gz",
        ] {
            assert!(is_the_labs(Path::new(lab)), "{lab}");
        }
        for ours in [
            "/usr/bin/srap-agent",
            "/usr/share/man/man8/srap-agent-receiver.8.gz",
            "/etc/srap/receiver.conf",
        ] {
            assert!(!is_the_labs(Path::new(ours)), "{ours}");
        }
    }
}
