//! The guest's boot files: a Debian cloud kernel fetched with
//! `apt-get download` (never installed on the host) and a busybox initramfs
//! holding `srap-agent`, `srap`, `ethtool` and `iperf3` with the libraries
//! `ldd` names. Both are cached under one directory (`target/…/srap-guest`
//! for a cargo build): the kernel once, the initramfs again only when a
//! binary changed.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::netns::run;

/// The metapackage naming the current Debian cloud kernel.
const KERNEL_META: &str = "linux-image-cloud-amd64";

/// Modules the guest loads, from its kernel's package: the virtio PCI
/// transport and virtio-net (modules in Debian's cloud config) and what the
/// verifier's tc hook needs (clsact, cls_bpf). `init` retries until each
/// loads, so the order here does not have to follow their dependencies.
const MODULES: &[&str] = &[
    "failover",
    "net_failover",
    "virtio",
    "virtio_ring",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_net",
    "sch_ingress",
    "cls_bpf",
];

/// Host programs copied into the guest, with their libraries.
const HOST_PROGRAMS: &[&str] = &["busybox", "ethtool", "iperf3"];

/// The guest's `/init`: mounts, modules, address, then the command loop.
const INIT: &str = include_str!("init.sh");

/// A kernel and an initramfs to boot.
#[derive(Debug, Clone)]
pub struct GuestImage {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
}

impl GuestImage {
    /// Where the image of `srap_daemon` is cached: `srap-guest` beside a
    /// cargo-built binary (so under `target/`), else the system cache.
    pub fn default_cache(srap_agent: &Path) -> PathBuf {
        match srap_agent.parent() {
            Some(dir) if dir.ancestors().any(|a| a.ends_with("target")) => dir.join("srap-guest"),
            _ => PathBuf::from("/var/cache/srap/guest"),
        }
    }

    /// The image in `cache`, fetching the kernel and (re)building the
    /// initramfs when missing or older than `srap_daemon` or `srap`.
    pub fn prepare(cache: &Path, srap_agent: &Path, srap: &Path) -> anyhow::Result<Self> {
        fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
        let kernel_root = fetch_kernel(cache)?;
        let kernel = find_one(&kernel_root.join("boot"), "vmlinuz-")?;
        let initramfs = cache.join("initramfs.cpio");
        if is_stale(&initramfs, &[srap_agent, srap])? {
            tracing::info!(path = %initramfs.display(), "building the guest initramfs");
            build_initramfs(cache, &kernel_root, srap_agent, srap, &initramfs)?;
        }
        Ok(Self { kernel, initramfs })
    }
}

/// The kernel package, unpacked under `cache/kernel` (its `boot/` and
/// `lib/modules/`).
fn fetch_kernel(cache: &Path) -> anyhow::Result<PathBuf> {
    let root = cache.join("kernel");
    if root.join("boot").is_dir() {
        return Ok(root);
    }
    let package = kernel_package()?;
    tracing::info!(package, "fetching the guest kernel with apt-get download");
    let download = cache.join("download");
    fs::create_dir_all(&download)?;
    run(Command::new("apt-get")
        .args(["download", &package])
        .current_dir(&download))
    .with_context(|| {
        format!("apt-get download {package}: run `apt-get update` (or `cargo xtask setup`) first")
    })?;
    let deb = find_one(&download, "linux-image-")?;
    let unpacking = cache.join("kernel.partial");
    let _ = fs::remove_dir_all(&unpacking);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacking))?;
    fs::rename(&unpacking, &root)?;
    let _ = fs::remove_dir_all(&download);
    Ok(root)
}

/// The versioned package `linux-image-cloud-amd64` depends on; apt's lists
/// are refreshed once when they do not name it (a fresh machine may have
/// none).
fn kernel_package() -> anyhow::Result<String> {
    match named_kernel_package() {
        Ok(package) => Ok(package),
        Err(err) => {
            tracing::info!("apt does not know the guest kernel ({err:#}): running apt-get update");
            run(Command::new("apt-get").args(["update", "-q"]))?;
            named_kernel_package()
        }
    }
}

fn named_kernel_package() -> anyhow::Result<String> {
    let out = run(Command::new("apt-cache").args(["depends", KERNEL_META]))
        .with_context(|| format!("asking apt which kernel {KERNEL_META} names"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Depends: "))
        .find(|dep| dep.starts_with("linux-image-"))
        .map(str::to_owned)
        .with_context(|| {
            format!("{KERNEL_META} names no linux-image package: run `apt-get update`")
        })
}

/// The one entry of `dir` whose name starts with `prefix`.
fn find_one(dir: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
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

fn is_stale(product: &Path, inputs: &[&Path]) -> anyhow::Result<bool> {
    let Ok(built) = fs::metadata(product).and_then(|m| m.modified()) else {
        return Ok(true);
    };
    for input in inputs {
        let modified = fs::metadata(input)
            .and_then(|m| m.modified())
            .with_context(|| format!("{} (build it: `cargo xtask build`)", input.display()))?;
        if modified > built {
            return Ok(true);
        }
    }
    Ok(false)
}

fn build_initramfs(
    cache: &Path,
    kernel_root: &Path,
    srap_agent: &Path,
    srap: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let tree = cache.join("initramfs");
    let _ = fs::remove_dir_all(&tree);
    for dir in ["bin", "dev", "proc", "sys", "tmp", "run", "lib/modules"] {
        fs::create_dir_all(tree.join(dir))?;
    }
    for program in HOST_PROGRAMS {
        install_program(&tree, &which(program)?, program)?;
    }
    for (binary, name) in [(srap_agent, "srap-agent"), (srap, "srap")] {
        install_program(&tree, binary, name)?;
        // Debug info would make the initramfs ten times larger.
        run(Command::new("objcopy")
            .arg("--strip-debug")
            .arg(tree.join("bin").join(name)))?;
    }
    copy_modules(kernel_root, &tree.join("lib/modules"))?;
    let init = tree.join("init");
    fs::write(&init, INIT)?;
    set_executable(&init)?;
    write_cpio(&tree, out)
}

/// Copies `binary` to `bin/NAME` with every library `ldd` lists.
fn install_program(tree: &Path, binary: &Path, name: &str) -> anyhow::Result<()> {
    copy_file(binary, &tree.join("bin").join(name))?;
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd (libc-bin)")?;
    // A static binary (busybox-static) makes ldd fail: it needs nothing.
    if !out.status.success() {
        return Ok(());
    }
    for lib in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
    {
        let target = tree.join(lib.trim_start_matches('/'));
        if !target.exists() {
            copy_file(Path::new(lib), &target)?;
        }
    }
    Ok(())
}

fn copy_modules(kernel_root: &Path, into: &Path) -> anyhow::Result<()> {
    let modules = find_one(&kernel_root.join("lib/modules"), "")?;
    for name in MODULES {
        let file = format!("{name}.ko");
        let found = find_file(&modules, &file)?
            .with_context(|| format!("{file} is not in {}", modules.display()))?;
        copy_file(&found, &into.join(&file))?;
    }
    Ok(())
}

fn find_file(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name)? {
                return Ok(Some(found));
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

fn copy_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    // `fs::copy` follows symlinks, so a library link becomes its file.
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn set_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// `PATH` lookup, with the package to install when it is missing.
fn which(program: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .with_context(|| {
            format!("{program} is not installed: `cargo xtask setup` installs what the guest needs")
        })
}

/// An uncompressed newc archive (the kernel unpacks it without a
/// decompressor, and it builds in a fraction of a second).
fn write_cpio(tree: &Path, out: &Path) -> anyhow::Result<()> {
    let partial = out.with_extension("partial");
    let file = fs::File::create(&partial)?;
    let status = Command::new("sh")
        .args(["-c", "find . | LC_ALL=C sort | cpio --quiet -o -H newc"])
        .current_dir(tree)
        .stdout(file)
        .status()
        .context("running cpio (`cargo xtask setup` installs it)")?;
    if !status.success() {
        bail!("cpio failed ({status}) building {}", out.display());
    }
    fs::rename(&partial, out)?;
    Ok(())
}
