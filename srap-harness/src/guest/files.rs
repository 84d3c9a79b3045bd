//! Where the guest's QEMU and kernels are: `target/guest-files/`, fetched
//! and unpacked there by `cargo xtask setup` (never installed on the host):
//! QEMU 10 (igb's RSS, clean 6.12 boots) with its own module directory, and
//! Debian's generic 6.1 and 6.12 kernels (the cloud ones ship no `igb.ko`).

use std::{
    fmt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The directory `cargo xtask setup` fills, under cargo's target directory.
const DIR: &str = "guest-files";
/// Written last into each complete part (see `xtask/src/guest_files.rs`).
const STAMP: &str = ".fetched";

/// The guest kernel: Debian's generic 6.1 (ethtool ioctl discovery) or 6.12
/// (ethtool netlink `RSS_GET`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GuestKernel {
    #[default]
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
}

impl GuestKernel {
    pub fn series(self) -> &'static str {
        match self {
            Self::V6_1 => "6.1",
            Self::V6_12 => "6.12",
        }
    }
}

impl fmt::Display for GuestKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.series())
    }
}

/// The unpacked QEMU: its binary, data and module directories.
#[derive(Debug, Clone)]
pub struct Qemu {
    pub binary: PathBuf,
    /// `QEMU_MODULE_DIR`: this build's modules, not the system QEMU's.
    pub module_dir: PathBuf,
    /// Its own ROMs (`linuxboot_dma.bin`, `kvmvapic.bin`, …).
    pub data_dir: PathBuf,
}

impl Qemu {
    /// Makes `command` (running [`Qemu::binary`]) use this QEMU's own
    /// modules and ROMs; SeaBIOS (a separate package, which the system's
    /// qemu-system-x86 brings) comes from `/usr/share/seabios`.
    pub fn configure(&self, command: &mut Command) {
        command
            .env("QEMU_MODULE_DIR", &self.module_dir)
            .arg("-L")
            .arg(&self.data_dir)
            .args(["-L", "/usr/share/seabios"]);
    }
}

/// An unpacked kernel package.
#[derive(Debug, Clone)]
pub struct KernelFiles {
    pub vmlinuz: PathBuf,
    /// `lib/modules/RELEASE`.
    pub modules: PathBuf,
    /// `uname -r` in the guest.
    pub release: String,
    /// The package it came from, as the stamp names it.
    pub package: String,
}

/// `target/guest-files`.
#[derive(Debug, Clone)]
pub struct GuestFiles {
    root: PathBuf,
}

impl GuestFiles {
    /// The guest files for a binary built under `target/`, or `root`.
    pub fn locate(root: Option<&Path>, srap_agent: &Path) -> anyhow::Result<Self> {
        let root = match root {
            Some(root) => root.to_owned(),
            None => srap_agent
                .ancestors()
                .find(|a| a.ends_with("target"))
                .map(|target| target.join(DIR))
                .with_context(|| {
                    format!(
                        "{} is not under a cargo target directory: give the guest files \
                         with --guest-files DIR (`cargo xtask setup` fetches them)",
                        srap_agent.display()
                    )
                })?,
        };
        Ok(Self { root })
    }

    fn part(&self, name: &str) -> anyhow::Result<(PathBuf, String)> {
        let dir = self.root.join(name);
        let stamp = std::fs::read_to_string(dir.join(STAMP)).with_context(|| {
            format!(
                "{} is missing or incomplete: run `cargo xtask setup` (it fetches QEMU 10 and \
                 the generic 6.1 and 6.12 kernels there)",
                dir.display()
            )
        })?;
        Ok((dir, stamp))
    }

    pub fn qemu(&self) -> anyhow::Result<Qemu> {
        let (dir, _) = self.part("qemu")?;
        let usr = dir.join("usr");
        Ok(Qemu {
            binary: usr.join("bin/qemu-system-x86_64"),
            module_dir: usr.join("lib/x86_64-linux-gnu/qemu"),
            data_dir: usr.join("share/qemu"),
        })
    }

    pub fn kernel(&self, kernel: GuestKernel) -> anyhow::Result<KernelFiles> {
        let (dir, stamp) = self.part(&format!("kernel-{}", kernel.series()))?;
        let vmlinuz = find_one(&dir.join("boot"), "vmlinuz-")?;
        let release = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .context("vmlinuz without a release")?
            .to_owned();
        if !release.starts_with(&format!("{}.", kernel.series())) {
            bail!(
                "{} holds kernel {release}, not {kernel}: run `cargo xtask setup`",
                dir.display()
            );
        }
        Ok(KernelFiles {
            modules: dir.join("lib/modules").join(&release),
            vmlinuz,
            release,
            package: stamp.trim().to_owned(),
        })
    }
}

/// The one entry of `dir` whose name starts with `prefix`.
fn find_one(dir: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        {
            return Ok(path);
        }
    }
    bail!("no {prefix}* in {}", dir.display())
}
