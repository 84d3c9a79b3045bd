//! The guest's boot files: a Debian generic kernel and QEMU, unpacked under
//! `target/guest-files` by `cargo xtask setup` (see [`super::files`]), and a
//! busybox initramfs holding `srap-agent`, `srap`, `ethtool` and `iperf3`
//! (and `srap-readers`, the reading threads' client, when it was built
//! beside `srap-agent`), iproute2's `ip` (as `ip2`) and `ss`, and
//! `mptcpize`'s library ([`MPTCP_WRAP`]), with the libraries `ldd` names,
//! built here per kernel and cached (again only when a binary changed).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::files::{GuestFiles, GuestKernel, KernelFiles, Qemu};
use crate::command::run;

/// Modules the guest loads at boot, from its kernel's package: virtio-net
/// with its PCI transport, igb with what it needs (dca, i2c-algo-bit), and
/// what the observer's tc hook needs (clsact, cls_bpf). A module the kernel
/// has built in is skipped. `init` retries until each loads, so the order
/// here does not have to follow their dependencies.
const MODULES: &[&str] = &[
    "failover",
    "net_failover",
    "virtio",
    "virtio_ring",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_net",
    "dca",
    "i2c-algo-bit",
    "igb",
    "sch_ingress",
    "cls_bpf",
];

/// Modules left for `modprobe` (with a `modules.dep`), loaded only when
/// asked: sock_diag for TCP, which the socket observer loads itself when
/// its kernel has it as a module (`srap.nodiag` on the guest's command line
/// removes those two: a kernel without sock_diag for TCP); and bonding with
/// what it needs (`tls`), which only the bonded guest loads
/// ([`super::bond`]): loaded at boot it would make a `bond0` in every guest.
const ON_DEMAND: &[(&str, &str, &[&str])] = &[
    ("inet_diag", "kernel/net/ipv4", &[]),
    ("tcp_diag", "kernel/net/ipv4", &["inet_diag"]),
    ("tls", "kernel/net/tls", &[]),
    ("bonding", "kernel/drivers/net/bonding", &["tls"]),
];

/// Host programs copied into the guest, with their libraries.
const HOST_PROGRAMS: &[&str] = &["busybox", "ethtool", "iperf3"];

/// Host programs copied under a name of the guest's (host name, guest
/// name), with their libraries: iproute2's `ip` as `ip2`, since busybox's
/// `ip` applet has no `mptcp` (the MPTCP guest's endpoints and limits,
/// [`super::mptcp_lab`]), and iproute2's `ss` (busybox has none), which
/// lists each MPTCP subflow with its connection's token.
const RENAMED_PROGRAMS: &[(&str, &str)] = &[("ip", "ip2"), ("ss", "ss")];

/// Where the guest holds `mptcpize`'s library: run under
/// `LD_PRELOAD={MPTCP_WRAP}` a program's TCP sockets are MPTCP sockets (as
/// `mptcpize run` does on the host).
pub const MPTCP_WRAP: &str = "/lib/libmptcpwrap.so";

/// That library on the host (Debian's `libmptcpwrap0`, which `mptcpize`
/// depends on).
const MPTCP_WRAP_HOST: &str = "/usr/lib/x86_64-linux-gnu/mptcpize/libmptcpwrap.so.0.0.1";

/// The guest's `/init`: mounts, modules, address, then the command loop.
const INIT: &str = include_str!("init.sh");

/// What QEMU boots: a kernel, an initramfs, and the QEMU to boot them with.
#[derive(Debug, Clone)]
pub struct GuestImage {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub qemu: Qemu,
    /// Which kernel, and the package it came from.
    pub series: GuestKernel,
    pub package: String,
}

impl GuestImage {
    /// Where the initramfs for `srap_agent` is cached: `srap-guest` beside a
    /// cargo-built binary (so under `target/`), else the system cache.
    pub fn default_cache(srap_agent: &Path) -> PathBuf {
        match srap_agent.parent() {
            Some(dir) if dir.ancestors().any(|a| a.ends_with("target")) => dir.join("srap-guest"),
            _ => PathBuf::from("/var/cache/srap/guest"),
        }
    }

    /// The image of `kernel` from `files`, (re)building its initramfs in
    /// `cache` when missing or older than `srap_agent` or `srap`.
    pub fn prepare(
        files: &GuestFiles,
        kernel: GuestKernel,
        cache: &Path,
        srap_agent: &Path,
        srap: &Path,
    ) -> anyhow::Result<Self> {
        fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
        let qemu = files.qemu()?;
        let kernel_files = files.kernel(kernel)?;
        let initramfs = cache.join(format!("initramfs-{}.cpio", kernel.series()));
        let mut ours = vec![(srap_agent, "srap-agent"), (srap, "srap")];
        // `cargo build --bins` puts it beside the agent; an image without it
        // serves every experiment but the reading threads' (which says so).
        let readers = srap_agent.with_file_name(READERS);
        if readers.is_file() {
            ours.push((&readers, READERS));
        }
        let inputs: Vec<&Path> = ours.iter().map(|&(path, _)| path).collect();
        let recipe_file = initramfs.with_extension("recipe");
        let same_recipe = fs::read_to_string(&recipe_file).is_ok_and(|text| text == recipe());
        if is_stale(&initramfs, &inputs)? || !lists(cache, &ours) || !same_recipe {
            tracing::info!(path = %initramfs.display(), "building the guest initramfs");
            build_initramfs(cache, &kernel_files, &ours, &initramfs)?;
            // A new file (not a write into the old one, which a hard-linked
            // copy of `target/` would share).
            let _ = fs::remove_file(&recipe_file);
            fs::write(&recipe_file, recipe())
                .with_context(|| format!("writing {}", recipe_file.display()))?;
        }
        Ok(Self {
            kernel: kernel_files.vmlinuz,
            initramfs,
            qemu,
            series: kernel,
            package: kernel_files.package,
        })
    }
}

/// What an initramfs is made of besides the binaries: `/init` and the
/// module and program lists. A cached image built from another recipe (one
/// without bonding, say) is built again, though no binary changed.
fn recipe() -> String {
    format!(
        "{INIT}\n{MODULES:?}\n{ON_DEMAND:?}\n{HOST_PROGRAMS:?}\n{RENAMED_PROGRAMS:?}\n{MPTCP_WRAP}\n"
    )
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

/// The reading threads' client (`srap-lab`'s `srap-readers`), in the guest
/// as `/bin/srap-readers`.
pub const READERS: &str = "srap-readers";

/// Whether the cached tree holds exactly `ours` (a binary built since the
/// image, or removed, makes it stale).
fn lists(cache: &Path, ours: &[(&Path, &str)]) -> bool {
    let bin = cache.join("initramfs/bin");
    let has_readers = bin.join(READERS).is_file();
    has_readers == ours.iter().any(|&(_, name)| name == READERS)
}

fn build_initramfs(
    cache: &Path,
    kernel: &KernelFiles,
    ours: &[(&Path, &str)],
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
    for (program, name) in RENAMED_PROGRAMS {
        install_program(&tree, &which(program)?, name)?;
    }
    install_library(&tree, Path::new(MPTCP_WRAP_HOST), MPTCP_WRAP)?;
    for &(binary, name) in ours {
        install_program(&tree, binary, name)?;
        // Debug info would make the initramfs ten times larger.
        run(Command::new("objcopy")
            .arg("--strip-debug")
            .arg(tree.join("bin").join(name)))?;
    }
    copy_modules(kernel, &tree.join("lib/modules"))?;
    let init = tree.join("init");
    fs::write(&init, INIT)?;
    set_executable(&init)?;
    write_cpio(&tree, out)
}

/// Copies `binary` to `bin/NAME` with every library `ldd` lists.
fn install_program(tree: &Path, binary: &Path, name: &str) -> anyhow::Result<()> {
    copy_file(binary, &tree.join("bin").join(name))?;
    copy_libraries(tree, binary)
}

/// Copies every library `ldd` lists for `binary` to its path in the tree.
fn copy_libraries(tree: &Path, binary: &Path) -> anyhow::Result<()> {
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

/// Copies the shared library `library` to `at` in the guest, with every
/// library `ldd` lists for it.
fn install_library(tree: &Path, library: &Path, at: &str) -> anyhow::Result<()> {
    if !library.is_file() {
        bail!(
            "{} is missing: `cargo xtask setup` installs mptcpize",
            library.display()
        );
    }
    copy_file(library, &tree.join(at.trim_start_matches('/')))?;
    copy_libraries(tree, library)
}

fn copy_modules(kernel: &KernelFiles, into: &Path) -> anyhow::Result<()> {
    let builtin = fs::read_to_string(kernel.modules.join("modules.builtin")).unwrap_or_default();
    for name in MODULES {
        match find_module(&kernel.modules, name)? {
            Some(found) => install_module(&found, &into.join(format!("{name}.ko")))?,
            None if is_builtin(&builtin, name) => {}
            None => bail!("{name} is not in {}", kernel.modules.display()),
        }
    }
    let release = into.join(&kernel.release);
    let mut dep = String::new();
    for (name, dir, needs) in ON_DEMAND {
        let found = find_module(&kernel.modules, name)?
            .with_context(|| format!("{name} is not in {}", kernel.modules.display()))?;
        install_module(&found, &release.join(dir).join(format!("{name}.ko")))?;
        let path_of = |module: &str| {
            ON_DEMAND
                .iter()
                .find(|(n, _, _)| *n == module)
                .map_or_else(String::new, |(n, d, _)| format!("{d}/{n}.ko"))
        };
        let needs: Vec<String> = needs.iter().map(|need| path_of(need)).collect();
        dep += &format!("{}: {}\n", path_of(name), needs.join(" "));
    }
    fs::write(release.join("modules.dep"), dep)?;
    Ok(())
}

/// `NAME.ko` or `NAME.ko.xz` under `dir`; names with `-` and `_` match
/// either way, as modprobe does.
fn find_module(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    for candidate in [
        name.to_owned(),
        name.replace('-', "_"),
        name.replace('_', "-"),
    ] {
        for file in [format!("{candidate}.ko"), format!("{candidate}.ko.xz")] {
            if let Some(found) = find_file(dir, &file)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

fn is_builtin(builtin: &str, name: &str) -> bool {
    let normal = name.replace('-', "_");
    builtin.lines().any(|line| {
        line.rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".ko"))
            .is_some_and(|f| f.replace('-', "_") == normal)
    })
}

/// Copies a module, decompressing `.ko.xz` (busybox's insmod takes plain
/// modules only).
fn install_module(from: &Path, to: &Path) -> anyhow::Result<()> {
    if from.extension().is_none_or(|e| e != "xz") {
        return copy_file(from, to);
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut xz = Command::new("xz");
    xz.arg("-dc").arg(from);
    output_into(&mut xz, to, "xz (`cargo xtask setup` installs xz-utils)")
}

/// Runs `command` with its standard output written to `file`.
fn output_into(command: &mut Command, file: &Path, what: &str) -> anyhow::Result<()> {
    let out = fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
    let status = command
        .stdout(out)
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status}) writing {}", file.display());
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
    let mut cpio = Command::new("sh");
    cpio.args(["-c", "find . | LC_ALL=C sort | cpio --quiet -o -H newc"])
        .current_dir(tree);
    output_into(
        &mut cpio,
        &partial,
        "cpio (`cargo xtask setup` installs it)",
    )?;
    fs::rename(&partial, out)?;
    Ok(())
}
