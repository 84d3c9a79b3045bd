//! What the package holds, once for both formats: the files, their modes
//! and owners, which are settings, which directories are the package's
//! own, and the two places where Debian and the RHEL family differ (zsh's
//! completion directory, the names of the packages it depends on).
//!
//! `stage` lays the tree out by these rules; the .deb and the .rpm are
//! written from that tree, and the RPM check compares the two packages'
//! listings against [`entries`] of it.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use super::files::walk;

/// The package's name.
pub const PACKAGE: &str = "srap";
/// (binary, man section): `srap` is a user command, the agent a daemon.
pub const BINARIES: &[(&str, &str)] = &[("srap", "1"), ("srap-agent", "8")];
/// Settings: an administrator's edits survive upgrades (dpkg conffiles,
/// rpm `%config(noreplace)`); `dpkg -r` keeps them, a purge or an erase
/// deletes them (rpm keeps an edited one as `.rpmsave`).
pub const CONFFILES: &[&str] = &[
    "etc/srap/receiver.conf",
    "etc/srap/sender.conf",
    "etc/srap/sender.toml",
];
pub const UNITS: &[&str] = &["srap-receiver.service", "srap-sender.service"];
/// Where systemd looks for units shipped by packages (both families).
pub const UNIT_DIR: &str = "usr/lib/systemd/system";
/// The copyright file, a `%doc` of the .rpm.
pub const COPYRIGHT: &str = "usr/share/doc/srap/copyright";
/// Directories the package owns: removed with it. The others it installs
/// into (`usr/bin`, the completion directories, …) belong to the system.
pub const OWN_DIRS: &[&str] = &["etc/srap", "usr/share/doc/srap"];
/// Every file and directory belongs to root.
pub const OWNER: &str = "root";

/// The completion directories: (shell, Debian's, the RHEL family's, prefix
/// and suffix of the file name around the binary's name). zsh reads
/// Debian's `vendor-completions` and Fedora's `site-functions`, not both.
pub const COMPLETIONS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "bash",
        "usr/share/bash-completion/completions",
        "usr/share/bash-completion/completions",
        "",
        "",
    ),
    (
        "zsh",
        "usr/share/zsh/vendor-completions",
        "usr/share/zsh/site-functions",
        "_",
        "",
    ),
    (
        "fish",
        "usr/share/fish/vendor_completions.d",
        "usr/share/fish/vendor_completions.d",
        "",
        ".fish",
    ),
];

/// The C library's package, on Debian and on the RHEL family: the
/// binaries' one dependency of their own (`elf::glibc_required`).
pub const GLIBC: (&str, &str) = ("libc6", "glibc");
/// What the package needs besides the binaries' libraries, by its name on
/// Debian and on the RHEL family: nothing. The agents speak netlink and
/// sysfs themselves; the lab, which ran `ip` and iperf3, is not packaged
/// (`srap-lab` stays in the repository).
pub const REQUIRES: &[(&str, &str)] = &[];
/// What it is better with: `srap rss show`'s report can be checked against
/// ethtool's own.
pub const RECOMMENDS: &[(&str, &str)] = &[("ethtool", "ethtool")];

/// The staged binaries' paths.
pub fn binaries_in(stage: &Path) -> Vec<PathBuf> {
    BINARIES
        .iter()
        .map(|(bin, _)| stage.join("usr/bin").join(bin))
        .collect()
}

/// A package format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Deb,
    Rpm,
}

impl Format {
    /// The completion directory of `shell` in this format.
    pub fn completion_dir(self, shell: &str) -> Option<&'static str> {
        COMPLETIONS
            .iter()
            .find(|(name, ..)| *name == shell)
            .map(|(_, deb, rpm, ..)| if self == Self::Deb { deb } else { rpm })
            .copied()
    }

    /// `path` of a .deb (no leading `/`) where this format puts that file.
    pub fn path_from_deb(self, path: &str) -> String {
        COMPLETIONS
            .iter()
            .find_map(|(shell, deb, ..)| {
                let rest = path.strip_prefix(deb)?.strip_prefix('/')?;
                Some(format!("{}/{rest}", self.completion_dir(shell)?))
            })
            .unwrap_or_else(|| path.to_owned())
    }
}

/// One file or directory of the package, as both formats install it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Absolute, as installed.
    pub path: String,
    pub dir: bool,
    /// Permission bits.
    pub mode: u32,
    pub config: bool,
}

impl Entry {
    /// The form both listings are compared in: `-rw-r--r-- root root config /etc/…`.
    pub fn line(&self) -> String {
        let kind = if self.dir { 'd' } else { '-' };
        let flag = if self.config { "config" } else { "-" };
        format!(
            "{kind}{} {OWNER} {OWNER} {flag} {}",
            permissions(self.mode),
            self.path
        )
    }
}

/// The mode of a file at `path` (no leading `/`): executables in
/// `usr/bin`, everything else readable by all. The key the scripts make is
/// no file of the package.
pub fn mode_of(path: &str) -> u32 {
    if path.starts_with("usr/bin/") {
        0o755
    } else {
        0o644
    }
}

/// The staged tree's files, with their modes set by [`mode_of`], and the
/// package's own directories.
pub fn entries(stage: &Path) -> Result<Vec<Entry>> {
    let mut files = Vec::new();
    for top in ["etc", "usr"] {
        walk(&stage.join(top), &mut files)?;
    }
    let mut entries: Vec<Entry> = OWN_DIRS
        .iter()
        .map(|dir| Entry {
            path: format!("/{dir}"),
            dir: true,
            mode: 0o755,
            config: false,
        })
        .collect();
    for file in files {
        let relative = file
            .strip_prefix(stage)
            .with_context(|| format!("{} is outside {}", file.display(), stage.display()))?
            .to_string_lossy()
            .into_owned();
        entries.push(Entry {
            mode: mode_of(&relative),
            config: CONFFILES.contains(&relative.as_str()),
            path: format!("/{relative}"),
            dir: false,
        });
    }
    entries.sort();
    Ok(entries)
}

/// Sets every staged file's mode to [`mode_of`] it, whatever the umask
/// made: both formats take the modes from the tree.
pub fn set_modes(stage: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in entries(stage)?.iter().filter(|e| !e.dir) {
        let path = stage.join(entry.path.trim_start_matches('/'));
        fs::set_permissions(&path, fs::Permissions::from_mode(entry.mode))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
    }
    Ok(())
}

/// `0o644` → `rw-r--r--`.
pub fn permissions(mode: u32) -> String {
    (0..9)
        .map(|bit| {
            let on = mode & (0o400 >> bit) != 0;
            match (on, bit % 3) {
                (false, _) => '-',
                (true, 0) => 'r',
                (true, 1) => 'w',
                (true, _) => 'x',
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_zsh_moves_between_the_formats() {
        let zsh = "usr/share/zsh/vendor-completions/_srap";
        assert_eq!(
            Format::Rpm.path_from_deb(zsh),
            "usr/share/zsh/site-functions/_srap"
        );
        assert_eq!(Format::Deb.path_from_deb(zsh), zsh);
        for same in [
            "usr/share/bash-completion/completions/srap",
            "usr/share/fish/vendor_completions.d/srap.fish",
            "usr/bin/srap",
        ] {
            assert_eq!(Format::Rpm.path_from_deb(same), same);
        }
    }

    #[test]
    fn modes_read_as_ls_shows_them() {
        assert_eq!(permissions(0o755), "rwxr-xr-x");
        assert_eq!(permissions(0o644), "rw-r--r--");
        assert_eq!(permissions(0o600), "rw-------");
        let entry = Entry {
            path: "/etc/srap/sender.toml".into(),
            dir: false,
            mode: mode_of("etc/srap/sender.toml"),
            config: true,
        };
        assert_eq!(
            entry.line(),
            "-rw-r--r-- root root config /etc/srap/sender.toml"
        );
    }
}
