//! The RPM's own test (with the .deb's, a step of `cargo xtask test`):
//!
//! * `rpmlint --strict` passes it, but for the exceptions named and
//!   explained in `deploy/rpmlint.toml`;
//! * its files, modes, owners and `%config(noreplace)` flags are the
//!   staged tree's ([`contents::entries`]), and so are the .deb's (its
//!   conffiles for the flags, zsh's directory mapped);
//! * `rpm --root` installs it into a scratch root that holds nothing but a
//!   static busybox for the scriptlets, the binaries' shared libraries and
//!   the system's directories, where the binaries run and `rpm -V` finds
//!   every file as packaged; the key `%post` made is root's, mode 600; a
//!   reinstall (rpm's upgrade path)
//!   keeps an edited setting and the key; the erase stops nothing (no
//!   systemd there), leaves the edited setting as `.rpmsave`, as rpm does,
//!   and nothing else: the scratch root is as it was before the install;
//! * the installed binaries need no glibc newer than RHEL 8's
//!   ([`elf::check_glibc`]).
//!
//! Nothing here is skipped: a missing tool fails the check.

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

use super::{
    contents::{self, Entry, Format, PACKAGE},
    elf,
    rpm::BuiltRpm,
};
use crate::exec::{output_of, workspace_root};

/// The key `%post` makes, inside the scratch root.
const PSK: &str = "etc/srap/psk";
/// The setting the check edits to see it kept, then saved on erase.
const EDITED: &str = "etc/srap/receiver.conf";
/// Where the scratch root's rpm database lives (RHEL's own path).
const DBPATH: &str = "/var/lib/rpm";
/// What the scriptlets run, from the scratch root's busybox.
const APPLETS: &[&str] = &["sh", "head", "base64", "mv", "rm", "rmdir", "cat"];

/// Checks the .rpm `built`, then compares it with the .deb `deb`.
pub fn run(built: &BuiltRpm, deb: &Path) -> Result<()> {
    super::check::ensure_root()?;
    lint(&built.path)?;
    let want = contents::entries(&built.stage)?;
    compare("the .rpm", &rpm_listing(&built.path)?, &want)?;
    compare("the .deb", &deb_listing(deb)?, &want)?;
    println!(
        "package check: the .rpm and the .deb hold the same {} files and directories, \
         modes, owners and settings",
        want.len()
    );
    let root = ScratchRoot::make(&want, &built.stage)?;
    let before = root.tree()?;
    root.rpm(&["--install", "--nodeps"], &built.path)?;
    check_installed(&root)?;
    check_reinstall_keeps_settings(&root, &built.path)?;
    root.rpm(&["--erase", "--nodeps"], Path::new(PACKAGE))?;
    check_nothing_left(&root, &before)?;
    println!(
        "package check: installed, upgraded and erased {} in a scratch root with rpm \
         --root (scriptlets run, nothing left)",
        built.path.display()
    );
    Ok(())
}

/// `rpmlint --strict`: every message fails, but for the exceptions
/// `deploy/rpmlint.toml` names and explains.
fn lint(rpm: &Path) -> Result<()> {
    let mut command = Command::new("rpmlint");
    command
        .arg("--strict")
        .arg("--config")
        .arg(workspace_root().join("deploy/rpmlint.toml"))
        .arg(rpm);
    let output = command.output().context("could not run rpmlint")?;
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && report.contains(" 0 errors, 0 warnings"),
        "rpmlint ({}):\n{report}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // ` 1 packages and 0 specfiles checked; 0 errors, 0 warnings, … taken 0.6 s`
    let summary = report
        .lines()
        .find_map(|line| line.split_once("checked; "))
        .map_or("", |(_, counts)| counts);
    let counts = summary.split("; has taken").next().unwrap_or_default();
    println!("package check: rpmlint --strict: {counts}");
    Ok(())
}

/// The .rpm's files as rpm lists them.
fn rpm_listing(rpm: &Path) -> Result<Vec<String>> {
    // `|` between the fields: the flags are often empty.
    let format = "[%{FILEMODES:perms}|%{FILEUSERNAME}|%{FILEGROUPNAME}|%{FILEFLAGS:fflags}|\
                  %{FILENAMES}\\n]";
    let listing = output_of(Command::new("rpm").args(["-qp", "--qf", format]).arg(rpm))?;
    listing.lines().map(rpm_line).collect()
}

/// `-rw-r--r--|root|root|cn|/etc/srap/sender.toml` → an [`Entry::line`];
/// `%config` without `noreplace` does not read as a setting.
fn rpm_line(line: &str) -> Result<String> {
    let fields: Vec<&str> = line.split('|').collect();
    let [perms, user, group, flags, path] = fields.as_slice() else {
        bail!("rpm -qp printed {line:?}");
    };
    let flag = match (flags.contains('c'), flags.contains('n')) {
        (true, true) => "config",
        (true, false) => "config-replaced",
        _ => "-",
    };
    Ok(format!("{perms} {user} {group} {flag} {path}"))
}

/// The .deb's files (zsh's directory as the .rpm has it), with its
/// conffiles as settings, and of its directories the package's own.
fn deb_listing(deb: &Path) -> Result<Vec<String>> {
    let conffiles = output_of(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .arg("conffiles"),
    )?;
    let conffiles: BTreeSet<&str> = conffiles.lines().map(str::trim).collect();
    let listing = output_of(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    let mut lines = Vec::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(perms), Some(owner), Some(path)) = (fields.first(), fields.get(1), fields.last())
        else {
            bail!("dpkg-deb --contents printed {line:?}");
        };
        let path = path.trim_start_matches('.').trim_end_matches('/');
        let dir = perms.starts_with('d');
        if path.is_empty() || (dir && !contents::OWN_DIRS.contains(&&path[1..])) {
            continue;
        }
        let flag = if conffiles.contains(path) {
            "config"
        } else {
            "-"
        };
        let path = format!("/{}", Format::Rpm.path_from_deb(&path[1..]));
        lines.push(format!("{perms} {} {flag} {path}", owner.replace('/', " ")));
    }
    Ok(lines)
}

/// `have` lists exactly the entries of `want`.
fn compare(what: &str, have: &[String], want: &[Entry]) -> Result<()> {
    let have: BTreeSet<&str> = have.iter().map(String::as_str).collect();
    let want: Vec<String> = want.iter().map(Entry::line).collect();
    let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    let missing: Vec<_> = want.difference(&have).collect();
    ensure!(
        extra.is_empty() && missing.is_empty(),
        "{what} differs from the package's definition (xtask/src/package/contents.rs):\n\
         not in the definition: {extra:#?}\nnot in {what}: {missing:#?}"
    );
    Ok(())
}

/// The binaries run in the root with only their libraries, `rpm -V` finds every
/// file as packaged, the key is root's alone, and no binary needs a glibc
/// newer than the oldest supported host's.
fn check_installed(root: &ScratchRoot) -> Result<()> {
    let version = output_of(
        Command::new("chroot")
            .arg(&root.dir)
            .args(["/usr/bin/srap", "--version"]),
    )?;
    ensure!(version.starts_with("srap "), "srap --version: {version:?}");
    let help = output_of(
        Command::new("chroot")
            .arg(&root.dir)
            .args(["/usr/bin/srap-agent", "--help"]),
    )?;
    ensure!(help.contains("receiver"), "srap-agent --help: {help}");
    root.rpm(&["--verify", "--nodeps"], Path::new(PACKAGE))?;
    let key = root.dir.join(PSK);
    let meta = fs::metadata(&key).with_context(|| format!("%post made no /{PSK}"))?;
    ensure!(
        meta.permissions().mode() & 0o777 == 0o600 && meta.uid() == 0,
        "/{PSK} has mode {:o}, owner {}: want 600, root",
        meta.permissions().mode() & 0o777,
        meta.uid()
    );
    ensure!(
        fs::read_to_string(&key)?.trim().len() >= 40,
        "/{PSK} does not hold 32 random bytes in base64"
    );
    for (bin, _) in contents::BINARIES {
        let needs = elf::check_glibc(&root.dir.join("usr/bin").join(bin))?;
        println!("package check: /usr/bin/{bin} in the .rpm: {needs}");
    }
    Ok(())
}

/// `rpm --reinstall` runs the upgrade's scriptlets (counts 2, then 1): an
/// edited setting and the key stay as they were.
fn check_reinstall_keeps_settings(root: &ScratchRoot, rpm: &Path) -> Result<()> {
    let edited = root.dir.join(EDITED);
    let key = fs::read(root.dir.join(PSK))?;
    let mut text = fs::read_to_string(&edited)?;
    text.push_str("# edited by the package check\n");
    fs::write(&edited, &text)?;
    root.rpm(&["--reinstall", "--nodeps"], rpm)?;
    ensure!(
        fs::read_to_string(&edited)? == text,
        "rpm --reinstall replaced the edited /{EDITED}"
    );
    ensure!(
        fs::read(root.dir.join(PSK))? == key,
        "rpm --reinstall replaced /{PSK}"
    );
    Ok(())
}

/// After the erase, the root is as before the install but for the edited
/// setting rpm saved (`.rpmsave`), which is then removed.
fn check_nothing_left(root: &ScratchRoot, before: &BTreeSet<String>) -> Result<()> {
    let saved = root.dir.join(format!("{EDITED}.rpmsave"));
    ensure!(
        saved.is_file(),
        "rpm --erase kept no /{EDITED}.rpmsave of the edited setting"
    );
    fs::remove_file(&saved)?;
    if let Some(dir) = saved.parent() {
        fs::remove_dir(dir).with_context(|| format!("left in {}", dir.display()))?;
    }
    let after = root.tree()?;
    let left: Vec<_> = after.difference(before).collect();
    let gone: Vec<_> = before.difference(&after).collect();
    ensure!(
        left.is_empty() && gone.is_empty(),
        "after rpm --erase, left: {left:?}; removed though not the package's: {gone:?}"
    );
    Ok(())
}

/// A directory to install into: busybox as `/bin`, the directories the
/// system owns, the binaries' shared libraries (this host's), an rpm
/// database. Removed on drop.
struct ScratchRoot {
    dir: PathBuf,
}

impl ScratchRoot {
    fn make(entries: &[Entry], stage: &Path) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("srap-rpm-check-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        let root = Self { dir };
        root.add_busybox()?;
        root.add_system_dirs(entries)?;
        // What the scriptlets read and write besides files: the key's
        // randomness, the bin for their messages.
        for (name, minor) in [("urandom", "9"), ("null", "3")] {
            let node = root.dir.join("dev").join(name);
            output_of(Command::new("mknod").arg(&node).args(["c", "1", minor]))?;
        }
        for bin in contents::binaries_in(stage) {
            root.copy_libraries(&bin)?;
        }
        root.rpm(&["--initdb"], Path::new(""))?;
        Ok(root)
    }

    /// `/bin/busybox` and the applets the scriptlets run (`APPLETS`).
    fn add_busybox(&self) -> Result<()> {
        let bin = self.dir.join("bin");
        fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
        fs::copy("/bin/busybox", bin.join("busybox"))
            .context("copying /bin/busybox (Debian's busybox-static) into the scratch root")?;
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", bin.join(applet))?;
        }
        Ok(())
    }

    /// The directories a RHEL system has before the package comes: every
    /// parent of the package's entries but its own, and what rpm uses.
    fn add_system_dirs(&self, entries: &[Entry]) -> Result<()> {
        for entry in entries {
            let mut dir = Path::new(&entry.path).parent();
            while let Some(parent) = dir.filter(|d| *d != Path::new("/")) {
                let relative = parent.strip_prefix("/")?;
                if !contents::OWN_DIRS
                    .iter()
                    .any(|own| Path::new(own) == relative)
                {
                    fs::create_dir_all(self.dir.join(relative))?;
                }
                dir = parent.parent();
            }
        }
        for system in ["var/tmp", "tmp", "etc", "dev"] {
            fs::create_dir_all(self.dir.join(system))?;
        }
        Ok(())
    }

    /// The libraries `ldd` finds for `bin` on this host, at the same paths.
    fn copy_libraries(&self, bin: &Path) -> Result<()> {
        let listing = output_of(Command::new("ldd").arg(bin))?;
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, `/lib64/ld-… (0x…)`
        let paths = listing
            .lines()
            .filter_map(|line| line.split_whitespace().find(|word| word.starts_with('/')));
        for path in paths {
            let to = self.dir.join(path.trim_start_matches('/'));
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::copy(path, &to).with_context(|| format!("copying {path} into the scratch root"))?;
        }
        Ok(())
    }

    /// `rpm --root DIR --dbpath DBPATH ARGS TARGET`.
    fn rpm(&self, args: &[&str], target: &Path) -> Result<()> {
        let mut command = Command::new("rpm");
        command
            .arg("--root")
            .arg(&self.dir)
            .args(["--dbpath", DBPATH])
            .args(args);
        if !target.as_os_str().is_empty() {
            command.arg(target);
        }
        output_of(&mut command).map(drop)
    }

    /// Every path in the root but the rpm database, with its mode.
    fn tree(&self) -> Result<BTreeSet<String>> {
        let mut files = Vec::new();
        walk_all(&self.dir, &mut files)?;
        let db = self.dir.join(DBPATH.trim_start_matches('/'));
        Ok(files
            .iter()
            .filter(|path| !path.starts_with(&db))
            .filter_map(|path| {
                let mode = path.symlink_metadata().ok()?.mode();
                let relative = path.strip_prefix(&self.dir).ok()?;
                Some(format!("{mode:o} /{}", relative.display()))
            })
            .collect())
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Every file, link and directory below `dir` (links not followed).
fn walk_all(dir: &Path, paths: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.symlink_metadata()?.is_dir() {
            walk_all(&path, paths)?;
        }
        paths.push(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpm_flags_read_as_settings_only_with_noreplace() {
        let line = "-rw-r--r--|root|root|cn|/etc/srap/sender.toml";
        assert_eq!(
            rpm_line(line).expect("a line"),
            "-rw-r--r-- root root config /etc/srap/sender.toml"
        );
        let replaced = rpm_line("-rw-r--r--|root|root|c|/etc/srap/x").expect("a line");
        assert!(replaced.contains("config-replaced"));
        let doc = rpm_line("-rw-r--r--|root|root|d|/usr/share/doc/srap/copyright");
        assert_eq!(
            doc.expect("a line"),
            "-rw-r--r-- root root - /usr/share/doc/srap/copyright"
        );
        assert!(rpm_line("garbage").is_err());
    }
}
