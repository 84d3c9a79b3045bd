//! `cargo xtask setup`: check each prerequisite, install only what is missing,
//! and say what is being installed.
//!
//! The eBPF side needs nightly + rust-src (`-Z build-std=core`), nightly clippy,
//! and bpf-linker built against the LLVM that nightly uses (22). bpf-linker's
//! build finds LLVM through `llvm-config` on PATH, which on Debian may be an
//! older LLVM (or absent), so it is pointed at LLVM 22 with `LLVM_PREFIX`.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::exec::{Step, as_root, run_step, stdout_of, succeeds};

/// Debian packages the build and the tests use.
const APT_PACKAGES: &[&str] = &[
    // bpf-linker links libLLVM 22 (nightly's LLVM).
    "llvm-22-dev",
    // Linkers/C runtime for host crates and bpf-linker.
    "gcc",
    "libc6-dev",
    // `ip netns`, veth, `tc`: the integration tests.
    "iproute2",
    "ethtool",
    "iperf3",
    "bpftool",
    // `mount -t bpf` when bpffs is not mounted.
    "mount",
    // `lab --nic virtio` and its tests: the QEMU guest, its busybox
    // initramfs (cpio), objcopy to strip the binaries copied into it.
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "binutils",
    // 6.12's modules are xz-compressed; the guest's busybox insmod wants
    // them plain.
    "xz-utils",
    // `mptcpize`'s LD_PRELOAD library (libmptcpwrap0): MPTCP iperf3 in the
    // two-NIC receiver guest and from its namespace (`tests/mptcp_nics.rs`).
    "mptcpize",
    // `nft`: the lab test with a NAT between sender and receiver.
    "nftables",
    // The TTF the throughput experiment's plots (`--plot`) draw text with.
    "fonts-dejavu-core",
    // A real terminal for the dashboard's test (`tests/dashboard.rs`).
    "tmux",
    // The deployment test under a real systemd (`tests/units.rs`): a
    // booted Debian machine (`systemd-nspawn`) on a root `mmdebstrap` makes
    // from Debian's packages.
    "systemd-container",
    "mmdebstrap",
    // The fleet test (`tests/fleet.rs`): Ansible reaches its booted
    // machines over SSH, with a key `ssh-keygen` makes.
    "openssh-client",
    // The virtualenv kubernetes-validate is installed into (Debian's
    // python3 has no `venv` without it).
    "python3-venv",
];
/// The binder's client matrix (`tests/binder/clients.rs`) runs these real
/// clients: (command, Debian package installed only when the command is
/// missing — the machines may have their own Python, JDK and Go).
const CLIENT_TOOLS: &[(&str, &str)] = &[
    ("python3", "python3"),
    ("java", "default-jdk-headless"),
    ("go", "golang-go"),
    ("curl", "curl"),
];
/// `cargo xtask package` and its test (`xtask/src/package.rs`): the same
/// (command, package) pairs, installed only when the command is missing.
const PACKAGE_TOOLS: &[(&str, &str)] = &[
    // The packages' glibc dependency and check: the binaries' version
    // needs (`readelf`, `objdump -T`; binutils is in APT_PACKAGES too).
    ("objdump", "binutils"),
    // The installed units are checked with `systemd-analyze verify`.
    ("systemd-analyze", "systemd"),
    // The installed man pages are rendered with `man -l`.
    ("man", "man-db"),
    // `promtool check metrics` lints the receiver's /metrics.
    ("promtool", "prometheus"),
    // The installed units run under systemd in a container.
    ("systemd-nspawn", "systemd-container"),
    // The agents' capabilities are decoded from /proc (and the privilege
    // test names them).
    ("capsh", "libcap2-bin"),
    // The .rpm is installed and erased with `rpm --root`, and linted.
    ("rpm", "rpm"),
    ("rpmlint", "rpmlint"),
    // The scratch root's scriptlets run in the static busybox (also the
    // lab guests' initramfs, in APT_PACKAGES).
    ("busybox", "busybox-static"),
];
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The packages' binaries are linked with these (`crate::package::portable`).
const ZIG_VERSION: &str = "0.17.1";
const CARGO_ZIGBUILD_VERSION: &str = "0.24.1";
/// The Helm chart's lint and render (`srap-tests/tests/fleets.rs`): Helm 4,
/// the release the Go module proxy serves as current (v3.21.4 renders the
/// chart alike). Compiled by `go install` into the target directory's
/// `tools/bin`: about 290 s on the 2-core CI machine, once.
const HELM_MODULE: &str = "helm.sh/helm/v4/cmd/helm@v4.3.2";
/// The rendered objects' validation against Kubernetes' schemas, which
/// the package ships (no cluster, no download at run time): from PyPI,
/// into a virtualenv of its own under `tools/venv`.
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";
/// The Ansible collection's lint and syntax check
/// (`srap-tests/tests/fleets.rs`), from PyPI into the same virtualenv:
/// ansible-core 2.19.14, the newest release for Python 3.11 (Debian 12's
/// and this machine's `python3`; 2.20 and later need 3.12), and the
/// ansible-lint that runs on it.
const ANSIBLE_PACKAGES: &[&str] = &["ansible-core==2.19.14", "ansible-lint==26.10.1"];

/// One missing prerequisite and how to install it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Missing {
    NightlyToolchain,
    Component {
        toolchain: &'static str,
        name: &'static str,
    },
    AptPackages(Vec<&'static str>),
    /// zig, from PyPI: cargo-zigbuild links the packages' binaries
    /// against glibc 2.28 with it (`crate::package::portable`).
    Zig,
    CargoZigbuild,
    BpfLinker,
    CargoFuzz,
    /// `helm`, into `tools/bin` ([`HELM_MODULE`]).
    Helm,
    /// `kubernetes-validate`, into `tools/venv`.
    KubernetesValidate,
    /// `ansible-playbook` and `ansible-lint`, into `tools/venv`
    /// ([`ANSIBLE_PACKAGES`]).
    Ansible,
    /// The lab guests' QEMU and kernels (`crate::guest_files`).
    GuestFiles(Vec<crate::guest_files::Part>),
}

fn missing() -> Vec<Missing> {
    let mut missing = Vec::new();
    let toolchains =
        stdout_of(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !toolchains.lines().any(|line| line.starts_with("nightly")) {
        missing.push(Missing::NightlyToolchain);
    }
    for (toolchain, components) in [
        ("nightly", &["rust-src", "clippy"][..]),
        ("stable", &["clippy", "rustfmt"][..]),
    ] {
        let installed = stdout_of(Command::new("rustup").args([
            "component",
            "list",
            "--installed",
            "--toolchain",
            toolchain,
        ]))
        .unwrap_or_default();
        for name in components {
            if !installed.lines().any(|line| line.starts_with(name)) {
                missing.push(Missing::Component { toolchain, name });
            }
        }
    }
    if !succeeds(Command::new("python3").args(["-m", "ziglang", "version"])) {
        missing.push(Missing::Zig);
    }
    if !on_path("cargo-zigbuild") {
        missing.push(Missing::CargoZigbuild);
    }
    let client_packages = CLIENT_TOOLS
        .iter()
        .chain(PACKAGE_TOOLS)
        .filter(|(command, _)| !on_path(command))
        .map(|(_, package)| *package);
    let packages: Vec<_> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|package| !apt_installed(package))
        .chain(client_packages)
        .collect();
    if !packages.is_empty() {
        missing.push(Missing::AptPackages(packages));
    }
    if !succeeds(Command::new("bpf-linker").arg("--version")) {
        missing.push(Missing::BpfLinker);
    }
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        missing.push(Missing::CargoFuzz);
    }
    if !tools_dir().join("bin/helm").is_file() {
        missing.push(Missing::Helm);
    }
    if !tools_dir().join("venv/bin/kubernetes-validate").is_file() {
        missing.push(Missing::KubernetesValidate);
    }
    if !["ansible-playbook", "ansible-lint"]
        .iter()
        .all(|tool| tools_dir().join("venv/bin").join(tool).is_file())
    {
        missing.push(Missing::Ansible);
    }
    let guest = crate::guest_files::missing();
    if !guest.is_empty() {
        missing.push(Missing::GuestFiles(guest));
    }
    missing
}

/// True if `command` is on PATH (or, for Go, in its default install directory).
fn on_path(command: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([std::path::PathBuf::from("/usr/local/go/bin")])
        .any(|dir| dir.join(command).is_file())
}

fn apt_installed(package: &str) -> bool {
    stdout_of(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|status| status.trim() == "install ok installed")
}

/// Runs `setup` if anything is missing (for `build` and `test`).
pub fn ensure() -> Result<()> {
    if missing().is_empty() { Ok(()) } else { run() }
}

pub fn run() -> Result<()> {
    let mut missing = missing();
    if missing.is_empty() {
        println!("setup: everything is installed");
        return Ok(());
    }
    // Order matters: the toolchain before its components, LLVM before
    // bpf-linker.
    missing.sort_by_key(|item| match item {
        Missing::NightlyToolchain => 0,
        Missing::Component { .. } => 1,
        Missing::AptPackages(_) => 2,
        Missing::BpfLinker => 3,
        Missing::CargoFuzz
        | Missing::Zig
        | Missing::CargoZigbuild
        | Missing::Helm
        | Missing::KubernetesValidate => 4,
        // Into the virtualenv kubernetes-validate's install makes.
        Missing::Ansible => 5,
        Missing::GuestFiles(_) => 6,
    });
    for item in missing {
        install(&item)?;
    }
    let left = self::missing();
    if !left.is_empty() {
        bail!("setup: still missing after installing: {left:?}");
    }
    println!("setup: done");
    Ok(())
}

fn install(item: &Missing) -> Result<()> {
    match item {
        Missing::NightlyToolchain => {
            println!("setup: installing the nightly toolchain (with rust-src and clippy)");
            let mut command = Command::new("rustup");
            command.args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
                "--component",
                "rust-src,clippy",
            ]);
            run_step(Step::new("rustup: nightly", command))
        }
        Missing::Component { toolchain, name } => {
            println!("setup: installing rustup component {name} for {toolchain}");
            let mut command = Command::new("rustup");
            command.args(["component", "add", name, "--toolchain", toolchain]);
            run_step(Step::new(&format!("rustup: {name} ({toolchain})"), command))
        }
        Missing::Zig => {
            println!(
                "setup: installing zig {ZIG_VERSION} from PyPI (ziglang; links the packages' \
                 binaries against glibc 2.28)"
            );
            let mut command = Command::new("python3");
            command
                .args(["-m", "pip", "install", &format!("ziglang=={ZIG_VERSION}")])
                // A Debian python3 refuses pip installs (PEP 668) without
                // it; pips that predate the option ignore the variable.
                .env("PIP_BREAK_SYSTEM_PACKAGES", "1");
            run_step(Step::new("pip install ziglang", command))
        }
        Missing::CargoZigbuild => {
            println!(
                "setup: installing cargo-zigbuild {CARGO_ZIGBUILD_VERSION} (builds the packages' \
                 binaries with zig)"
            );
            let mut command = Command::new("cargo");
            command
                .args([
                    "install",
                    "cargo-zigbuild",
                    "--locked",
                    "--version",
                    CARGO_ZIGBUILD_VERSION,
                ])
                .env_remove("RUSTUP_TOOLCHAIN");
            run_step(Step::new("cargo install cargo-zigbuild", command))
        }
        Missing::AptPackages(packages) => {
            println!("setup: installing apt packages: {}", packages.join(" "));
            run_step(Step::new(
                "apt-get update",
                privileged(&["apt-get", "update"]),
            ))?;
            let mut args = vec!["apt-get", "install", "-y", "--no-install-recommends"];
            args.extend(packages.iter().copied());
            run_step(Step::new("apt-get install", privileged(&args)))
        }
        Missing::BpfLinker => {
            println!(
                "setup: installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 ({LLVM_PREFIX})"
            );
            let mut command = Command::new("cargo");
            command
                .args([
                    "install",
                    "bpf-linker",
                    "--version",
                    BPF_LINKER_VERSION,
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env_remove("RUSTUP_TOOLCHAIN");
            run_step(Step::new("cargo install bpf-linker", command))
                .context("bpf-linker needs llvm-22-dev; see the apt step above")
        }
        Missing::CargoFuzz => {
            println!(
                "setup: installing cargo-fuzz (the fuzz targets of the parsers of outside input)"
            );
            let mut command = Command::new("cargo");
            command
                .args(["install", "cargo-fuzz", "--locked"])
                .env_remove("RUSTUP_TOOLCHAIN");
            run_step(Step::new("cargo install cargo-fuzz", command))
        }
        Missing::Helm => install_helm(),
        Missing::KubernetesValidate => install_kubernetes_validate(),
        Missing::Ansible => install_ansible(),
        Missing::GuestFiles(parts) => {
            println!(
                "setup: fetching the lab guests' QEMU and kernels (unpacked under {}, \
                 not installed)",
                crate::guest_files::root().display()
            );
            crate::guest_files::fetch(parts)
        }
    }
}

/// The deployment checks' tools, beside the build (`target/tools`): the
/// tests look for them there, and nothing is installed system-wide.
fn tools_dir() -> std::path::PathBuf {
    crate::exec::target_dir().join("tools")
}

fn install_helm() -> Result<()> {
    let bin = tools_dir().join("bin");
    println!(
        "setup: building {HELM_MODULE} into {} (the Helm chart's checks)",
        bin.display()
    );
    let mut command = Command::new("go");
    command.args(["install", HELM_MODULE]).env("GOBIN", &bin);
    run_step(Step::new("go install helm", command)).context("helm needs Go (golang-go)")
}

fn install_kubernetes_validate() -> Result<()> {
    let venv = tools_dir().join("venv");
    println!(
        "setup: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} into {}",
        venv.display()
    );
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(&venv);
    run_step(Step::new("python3 -m venv", make))?;
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args([
        "install",
        &format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
    ]);
    run_step(Step::new("pip install kubernetes-validate", pip))
}

fn install_ansible() -> Result<()> {
    let venv = tools_dir().join("venv");
    println!(
        "setup: installing {} into {} (the Ansible collection's checks)",
        ANSIBLE_PACKAGES.join(" "),
        venv.display()
    );
    if !venv.join("bin/pip").is_file() {
        let mut make = Command::new("python3");
        make.args(["-m", "venv"]).arg(&venv);
        run_step(Step::new("python3 -m venv", make))?;
    }
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.arg("install").args(ANSIBLE_PACKAGES);
    run_step(Step::new("pip install ansible-core ansible-lint", pip))
}

/// `args` as root, non-interactive for apt.
fn privileged(args: &[&str]) -> Command {
    let (program, rest) = args
        .split_first()
        .map_or(("true", &[][..]), |(p, r)| (*p, r));
    let mut command = as_root(program);
    command.args(rest).env("DEBIAN_FRONTEND", "noninteractive");
    command
}
