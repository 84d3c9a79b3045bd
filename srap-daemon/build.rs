//! Builds the `srap-ebpf` programs for the BPF target (nightly, `-Z build-std`,
//! bpf-linker: see `cargo xtask setup`) and leaves the object at
//! `$OUT_DIR/srap`, which `srap_daemon::ebpf_object` embeds.
use anyhow::{Context as _, anyhow};

const EBPF_PACKAGE: &str = "srap-ebpf";

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let package = metadata
        .packages
        .iter()
        .find(|package| package.name.as_str() == EBPF_PACKAGE)
        .ok_or_else(|| anyhow!("package {EBPF_PACKAGE} is not in the workspace"))?;
    let root_dir = package
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", package.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: EBPF_PACKAGE,
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
