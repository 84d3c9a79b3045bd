//! The lab guests' files, fetched by `cargo xtask setup` and unpacked under
//! `target/guest-files/` (never installed on the host):
//!
//! * `qemu/`: QEMU ≥ 8 (`qemu-system-x86` and its common, data and module
//!   packages from the system's Debian release or its backports: 10.0.2 on
//!   bookworm). It emulates the igb NIC (Intel 82576, RSS in the model) and
//!   boots 6.12 cleanly; it gets its own module directory, because left
//!   alone it loads the system QEMU's modules and refuses them ("Only
//!   modules from the same build can be loaded").
//! * `kernel-6.1/`, `kernel-6.12/`: Debian's *generic* kernels (the cloud
//!   ones ship no `igb.ko`): `boot/vmlinuz-*` and the few modules the guest
//!   loads. 6.1 has no ethtool netlink `RSS_GET` (SRAP's ioctl path), 6.12
//!   has it (the netlink path).
//!
//! apt runs with a private state and source list under `guest-files/apt/`
//! naming the mirror the system's own sources use, so the system's apt
//! configuration is left as it is. Each directory is complete once its
//! `.fetched` file (the packages it came from) exists: setup is idempotent.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::exec::{Step, run_step, stdout_of};

/// Under cargo's target directory.
pub const DIR: &str = "guest-files";
/// Written last into a complete directory: the packages it holds.
const STAMP: &str = ".fetched";

/// QEMU's packages; the module packages make its module set complete.
const QEMU_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "qemu-system-common",
    "qemu-system-data",
    "qemu-system-modules-opengl",
    "qemu-system-modules-spice",
];

/// What the guest kernels keep of their package: the kernel, the module
/// lists, and the module trees the guests load from (NIC drivers and
/// bonding, virtio, tc's ingress qdisc and BPF classifier, sock_diag for
/// TCP, and `tls`, which `bonding.ko` depends on).
const KERNEL_PARTS: &[&str] = &[
    "./boot/vmlinuz-*",
    "./lib/modules/*/modules.builtin",
    "./lib/modules/*/kernel/drivers/net/*",
    "./lib/modules/*/kernel/drivers/virtio/*",
    "./lib/modules/*/kernel/drivers/dca/*",
    "./lib/modules/*/kernel/drivers/i2c/algos/*",
    "./lib/modules/*/kernel/net/core/*",
    "./lib/modules/*/kernel/net/ipv4/*",
    "./lib/modules/*/kernel/net/sched/*",
    "./lib/modules/*/kernel/net/tls/*",
];

/// Beside [`STAMP`] in a kernel's directory: the [`KERNEL_PARTS`] it was
/// unpacked with. A kernel unpacked with other parts is fetched again, so a
/// module tree added to [`KERNEL_PARTS`] (as bonding's `tls` is) reaches
/// machines that fetched the kernel without it.
const PARTS_STAMP: &str = ".parts";

fn kernel_parts_stamp() -> String {
    KERNEL_PARTS.join("\n") + "\n"
}

/// One directory of guest files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Qemu,
    /// A generic kernel of this `major.minor` series.
    Kernel(&'static str),
}

pub const PARTS: [Part; 3] = [Part::Qemu, Part::Kernel("6.1"), Part::Kernel("6.12")];

impl Part {
    fn dir_name(self) -> String {
        match self {
            Self::Qemu => "qemu".into(),
            Self::Kernel(series) => format!("kernel-{series}"),
        }
    }

    fn describe(self) -> String {
        match self {
            Self::Qemu => "QEMU ≥ 8 (igb, 6.12 guests)".into(),
            Self::Kernel(series) => format!("Debian's generic {series} kernel"),
        }
    }
}

pub fn root() -> PathBuf {
    crate::exec::target_dir().join(DIR)
}

/// The parts not fetched yet.
pub fn missing() -> Vec<Part> {
    let root = root();
    PARTS
        .into_iter()
        .filter(|part| {
            let dir = root.join(part.dir_name());
            let unpacked_with = |stamp| fs::read_to_string(dir.join(stamp)).ok();
            !dir.join(STAMP).is_file()
                || matches!(part, Part::Kernel(_))
                    && unpacked_with(PARTS_STAMP).as_deref() != Some(kernel_parts_stamp().as_str())
        })
        .collect()
}

/// Fetches and unpacks `parts`, saying what it downloads.
pub fn fetch(parts: &[Part]) -> Result<()> {
    let root = root();
    let apt = PrivateApt::new(&root.join("apt"))?;
    apt.update()?;
    for &part in parts {
        let packages = apt.resolve(part)?;
        println!(
            "setup: fetching {} into {}: {}",
            part.describe(),
            root.join(part.dir_name()).display(),
            packages.join(" ")
        );
        let debs = apt.download(&packages)?;
        unpack(part, &debs, &root.join(part.dir_name()))?;
        fs::write(
            root.join(part.dir_name()).join(STAMP),
            packages.join("\n") + "\n",
        )?;
        if let Part::Kernel(_) = part {
            fs::write(
                root.join(part.dir_name()).join(PARTS_STAMP),
                kernel_parts_stamp(),
            )?;
        }
    }
    // The downloads are unpacked; the lists are kept for the next fetch.
    let _ = fs::remove_dir_all(apt.root.join("archives"));
    Ok(())
}

/// apt with its own state, cache and source list.
struct PrivateApt {
    root: PathBuf,
    /// The system's release (`bookworm`).
    codename: String,
}

impl PrivateApt {
    fn new(root: &Path) -> Result<Self> {
        for dir in ["state/lists/partial", "cache/archives/partial", "archives"] {
            fs::create_dir_all(root.join(dir))?;
        }
        let os = fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
        let codename = os_codename(&os)
            .context("/etc/os-release names no VERSION_CODENAME: the guest files need Debian")?;
        let mirror = debian_mirror(&system_sources(), &codename).with_context(|| {
            format!("no apt source of this system serves Debian {codename} main")
        })?;
        let signed = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
        let options = if signed.is_file() {
            format!(" [signed-by={}]", signed.display())
        } else {
            String::new()
        };
        fs::write(
            root.join("sources.list"),
            format!(
                "deb{options} {mirror} {codename} main\n\
                 deb{options} {mirror} {codename}-backports main\n"
            ),
        )?;
        Ok(Self {
            root: root.to_owned(),
            codename,
        })
    }

    fn options(&self) -> Vec<String> {
        let at = |p: &str| self.root.join(p).display().to_string();
        vec![
            "-o".into(),
            format!("Dir::State={}", at("state")),
            "-o".into(),
            format!("Dir::Cache={}", at("cache")),
            "-o".into(),
            format!("Dir::Etc::SourceList={}", at("sources.list")),
            "-o".into(),
            "Dir::Etc::SourceParts=/dev/null".into(),
            // Downloads go to a root-owned directory under target/.
            "-o".into(),
            "APT::Sandbox::User=root".into(),
            "-q".into(),
        ]
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.args(self.options());
        command
    }

    fn update(&self) -> Result<()> {
        let mut command = self.command("apt-get");
        command.arg("update");
        run_step(Step::new("apt-get update (private lists)", command))
    }

    /// The versioned packages of `part`, as `name=version`.
    fn resolve(&self, part: Part) -> Result<Vec<String>> {
        match part {
            Part::Qemu => {
                let suite = self.suite_with_qemu()?;
                let version = self
                    .candidate("qemu-system-x86", &suite)?
                    .context("no qemu-system-x86")?;
                Ok(QEMU_PACKAGES
                    .iter()
                    .map(|package| format!("{package}={version}"))
                    .collect())
            }
            Part::Kernel(series) => {
                let prefix = format!("linux-image-{series}.");
                for suite in [
                    self.codename.clone(),
                    format!("{}-backports", self.codename),
                ] {
                    if let Some(image) = self.kernel_image(&suite)?
                        && image.starts_with(&prefix)
                    {
                        return Ok(vec![image]);
                    }
                }
                bail!(
                    "neither {0} nor {0}-backports has a generic {series} kernel \
                     (linux-image-amd64)",
                    self.codename
                )
            }
        }
    }

    /// The suite whose QEMU emulates igb (QEMU ≥ 8): backports first.
    fn suite_with_qemu(&self) -> Result<String> {
        for suite in [
            format!("{}-backports", self.codename),
            self.codename.clone(),
        ] {
            if let Some(version) = self.candidate("qemu-system-x86", &suite)?
                && qemu_major(&version).is_some_and(|major| major >= 8)
            {
                return Ok(suite);
            }
        }
        bail!(
            "neither {0} nor {0}-backports has QEMU 8 or newer (igb's RSS needs it)",
            self.codename
        )
    }

    /// The version of `package` that `suite` offers.
    fn candidate(&self, package: &str, suite: &str) -> Result<Option<String>> {
        let mut command = self.command("apt-cache");
        command.args(["-t", suite, "policy", package]);
        let out = stdout_of(&mut command).with_context(|| format!("apt-cache policy {package}"))?;
        Ok(out
            .lines()
            .find_map(|line| line.trim().strip_prefix("Candidate:"))
            .map(str::trim)
            .filter(|v| *v != "(none)")
            .map(str::to_owned))
    }

    /// The versioned image `linux-image-amd64` names in `suite`.
    fn kernel_image(&self, suite: &str) -> Result<Option<String>> {
        let Some(version) = self.candidate("linux-image-amd64", suite)? else {
            return Ok(None);
        };
        let mut command = self.command("apt-cache");
        command.args(["depends", &format!("linux-image-amd64={version}")]);
        let out = stdout_of(&mut command).context("apt-cache depends linux-image-amd64")?;
        Ok(out
            .lines()
            .filter_map(|line| line.trim().strip_prefix("Depends: "))
            .find(|dep| dep.starts_with("linux-image-"))
            .map(str::to_owned))
    }

    /// Downloads `packages` into `apt/archives`; the `.deb` files.
    fn download(&self, packages: &[String]) -> Result<Vec<PathBuf>> {
        let archives = self.root.join("archives");
        let _ = fs::remove_dir_all(&archives);
        fs::create_dir_all(&archives)?;
        let mut command = self.command("apt-get");
        command
            .arg("download")
            .args(packages)
            .current_dir(&archives);
        run_step(Step::new("apt-get download", command))?;
        let mut debs: Vec<PathBuf> = fs::read_dir(&archives)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "deb"))
            .collect();
        debs.sort();
        if debs.len() != packages.len() {
            bail!(
                "apt-get download gave {} files for {} packages in {}",
                debs.len(),
                packages.len(),
                archives.display()
            );
        }
        Ok(debs)
    }
}

/// Unpacks `debs` into `into` (replacing what was there): every file for
/// QEMU, the [`KERNEL_PARTS`] for a kernel.
fn unpack(part: Part, debs: &[PathBuf], into: &Path) -> Result<()> {
    let partial = into.with_file_name(format!(
        "{}.partial",
        into.file_name().unwrap_or_default().display()
    ));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial)?;
    for deb in debs {
        let name = deb.file_name().unwrap_or_default().display().to_string();
        match part {
            Part::Qemu => {
                let mut command = Command::new("dpkg-deb");
                command.arg("-x").arg(deb).arg(&partial);
                run_step(Step::new(&format!("unpack {name}"), command))?;
            }
            Part::Kernel(_) => {
                let tar = partial.join("package.tar");
                let file = fs::File::create(&tar)?;
                let status = Command::new("dpkg-deb")
                    .arg("--fsys-tarfile")
                    .arg(deb)
                    .stdout(file)
                    .status()
                    .context("running dpkg-deb")?;
                if !status.success() {
                    bail!("dpkg-deb --fsys-tarfile {name}: {status}");
                }
                let mut command = Command::new("tar");
                command
                    .arg("-x")
                    .arg("-f")
                    .arg(&tar)
                    .arg("-C")
                    .arg(&partial)
                    .arg("--wildcards")
                    .args(KERNEL_PARTS);
                run_step(Step::new(&format!("unpack the kernel of {name}"), command))?;
                fs::remove_file(&tar)?;
            }
        }
    }
    let _ = fs::remove_dir_all(into);
    fs::rename(&partial, into)
        .with_context(|| format!("moving {} to {}", partial.display(), into.display()))
}

/// `VERSION_CODENAME` of `/etc/os-release`.
fn os_codename(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

/// The text of every apt source file of the system.
fn system_sources() -> String {
    let mut text = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for file in files {
            text.push('\n');
            text.push_str(&fs::read_to_string(file).unwrap_or_default());
            text.push('\n');
        }
    }
    text
}

/// The first URI that serves `codename` with component `main`, from
/// one-line (`deb URI SUITE COMPONENTS`) or deb822 (`URIs:`/`Suites:`)
/// sources.
fn debian_mirror(sources: &str, codename: &str) -> Option<String> {
    for line in sources.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let words: Vec<&str> = rest
            .split_whitespace()
            .skip_while(|w| w.starts_with('['))
            .filter(|w| !w.ends_with(']') || w.contains("://"))
            .collect();
        if let [uri, suite, components @ ..] = words.as_slice()
            && *suite == codename
            && components.contains(&"main")
        {
            return Some((*uri).to_owned());
        }
    }
    for stanza in sources.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map(str::trim)
        };
        let (Some(uris), Some(suites), Some(components)) =
            (field("URIs:"), field("Suites:"), field("Components:"))
        else {
            continue;
        };
        if suites.split_whitespace().any(|s| s == codename)
            && components.split_whitespace().any(|c| c == "main")
        {
            return uris.split_whitespace().next().map(str::to_owned);
        }
    }
    None
}

/// `10` of `1:10.0.2+ds-2+deb13u1~bpo12+1`.
fn qemu_major(version: &str) -> Option<u32> {
    let upstream = version.split_once(':').map_or(version, |(_, v)| v);
    upstream.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_from_either_source_format() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        assert_eq!(
            debian_mirror(deb822, "bookworm").as_deref(),
            Some("http://mirror.example/debian")
        );
        let one_line = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main contrib\n";
        assert_eq!(
            debian_mirror(one_line, "bookworm").as_deref(),
            Some("http://m.example/debian")
        );
        assert_eq!(debian_mirror(one_line, "trixie"), None);
    }

    #[test]
    fn versions_and_codenames() {
        assert_eq!(qemu_major("1:10.0.2+ds-2+deb13u1~bpo12+1"), Some(10));
        assert_eq!(qemu_major("1:7.2+dfsg-7+deb12u18+b3"), Some(7));
        assert_eq!(
            os_codename("NAME=\"Debian\"\nVERSION_CODENAME=bookworm\n").as_deref(),
            Some("bookworm")
        );
    }
}
