//! Builds the `srap-ebpf` programs for the BPF target (nightly, `-Z build-std`,
//! bpf-linker: see `cargo xtask setup`) and leaves each object in
//! `$OUT_DIR`: `srap`, which `srap_daemon::ebpf_object` embeds, and the
//! lab's `srap-lab`, whose directory the crates that depend on this one
//! read as `DEP_SRAP_EBPF_OBJECTS` (`srap-harness` embeds it).
//!
//! The nested `cargo build` runs here rather than through `aya_build`, which
//! forwards every line the nested cargo prints (`Compiling …`, `Finished …`)
//! as a `cargo:warning`: cargo replays a build script's warnings on every
//! build, so ~50 of them drowned real warnings even in a no-op build. Here
//! the nested build's log is kept and shown only when it fails; its
//! compiler diagnostics (real warnings in the eBPF crate) still surface.
use std::{
    env,
    io::{BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, anyhow, bail};
use cargo_metadata::{Artifact, Message};

const EBPF_PACKAGE: &str = "srap-ebpf";
/// The toolchain the eBPF crate needs (`-Z build-std`).
const TOOLCHAIN: &str = "nightly";

fn main() -> anyhow::Result<()> {
    let root_dir = ebpf_root()?;
    // Cargo scans a directory given here for any change. The build-dependency
    // on srap-ebpf covers what it depends on (srap-common).
    println!("cargo:rerun-if-changed={}", root_dir.display());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    let target = bpf_target()?;
    let arch = target_arch()?;
    let executables = build(&out_dir, &target, &arch)?;
    for (name, binary) in executables {
        let dst = out_dir.join(&name);
        std::fs::copy(&binary, &dst)
            .with_context(|| format!("copying {} to {}", binary.display(), dst.display()))?;
    }
    println!("cargo:objects={}", out_dir.display());
    Ok(())
}

/// The directory of the `srap-ebpf` package, from `cargo metadata`.
fn ebpf_root() -> anyhow::Result<PathBuf> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let package = metadata
        .packages
        .iter()
        .find(|package| package.name.as_str() == EBPF_PACKAGE)
        .ok_or_else(|| anyhow!("package {EBPF_PACKAGE} is not in the workspace"))?;
    package
        .manifest_path
        .parent()
        .map(|dir| dir.as_std_path().to_path_buf())
        .ok_or_else(|| anyhow!("{} has no parent directory", package.manifest_path))
}

/// `bpfel-unknown-none` or `bpfeb-unknown-none`, as the host's byte order.
fn bpf_target() -> anyhow::Result<String> {
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN")?;
    match endian.as_str() {
        "little" => Ok("bpfel-unknown-none".into()),
        "big" => Ok("bpfeb-unknown-none".into()),
        other => bail!("unsupported byte order {other}"),
    }
}

/// The host architecture, for aya-ebpf's `bpf_target_arch` cfg.
fn target_arch() -> anyhow::Result<String> {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH")?;
    Ok(if arch.starts_with("riscv64") {
        "riscv64".into()
    } else {
        arch
    })
}

/// `cargo` on the nightly toolchain: through `rustup run` where rustup is.
fn nightly_cargo() -> Command {
    let rustup_works = Command::new("rustup")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if rustup_works {
        let mut command = Command::new("rustup");
        command.args(["run", TOOLCHAIN, "cargo"]);
        command
    } else {
        Command::new("cargo")
    }
}

/// Runs the nested build quietly; returns its executables (name, path).
/// On failure, the error carries the whole log.
fn build(out_dir: &Path, target: &str, arch: &str) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let target_dir = out_dir.join("ebpf-target");
    let mut command = nightly_cargo();
    command
        .args(["build", "--package", EBPF_PACKAGE, "--bins", "--release"])
        .args(["--message-format=json", "--target", target])
        .args(["-Z", "build-std=core", "--target-dir"])
        .arg(&target_dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        // The outer build's compiler is the stable host one.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let mut stderr = child.stderr.take().context("the nested cargo's stderr")?;
    // Read stderr beside stdout so neither pipe fills up and blocks cargo.
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().context("the nested cargo's stdout")?;
    let mut executables = Vec::new();
    let mut diagnostics = String::new();
    let mut other = String::new();
    for message in Message::parse_stream(BufReader::new(stdout)) {
        match message.context("reading the nested cargo's messages")? {
            Message::CompilerArtifact(Artifact {
                executable: Some(executable),
                target,
                ..
            }) => executables.push((target.name, executable.into_std_path_buf())),
            Message::CompilerMessage(message) => {
                diagnostics += message.message.rendered.as_deref().unwrap_or_default();
            }
            Message::TextLine(line) => other += &format!("{line}\n"),
            _ => {}
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {command:?}"))?;
    let log = log.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "building the eBPF programs failed ({status}): {command:?}\n{diagnostics}{other}{log}"
        );
    }
    // A successful build's diagnostics are the eBPF crate's real warnings.
    for line in diagnostics.lines() {
        println!("cargo:warning={line}");
    }
    Ok(executables)
}
