//! Checks the crate graph keeps its promises:
//!
//! * `srap` (srap-cli) must build on stable alone, so nothing it depends on
//!   (normal or build) may be the daemon, whose build script compiles the
//!   eBPF programs with nightly and bpf-linker, or the eBPF crate itself.
//! * `srap-agent`, the daemon the packages run as root with `CAP_BPF` and
//!   `CAP_NET_ADMIN`, must not carry the lab: no `srap-lab` (the
//!   experiments), no `srap-harness` (QEMU control, agents in namespaces,
//!   the test harness) and none of the plotting crates the lab draws its
//!   figures with. The lab is its own binary, `srap-lab`.
//! * `srap-docs`, the completions and man pages both binaries generate,
//!   stands beneath every SRAP crate: it depends on none of them (clap and
//!   its generators only), so either binary takes it without the other's
//!   floors.

use std::{
    collections::{BTreeSet, HashMap},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// Packages that need the eBPF toolchain to build.
const NEEDS_EBPF_TOOLCHAIN: [&str; 2] = ["srap-daemon", "srap-ebpf"];

/// Packages only the lab and the tests need: the lab itself, the harness
/// it and the tests stand on (QEMU control lives there), and the lab's
/// plots with what renders them (`plotters*`, fonts, PNG encoding). A
/// trailing `*` matches every package whose name starts so.
const LAB_ONLY: [&str; 7] = [
    "srap-lab",
    "srap-harness",
    "plotters*",
    "ab_glyph*",
    "*ttf_parser",
    "ttf-parser",
    "image",
];

/// What the lab adds above the harness: the experiments and their plots.
/// `srap-harness` and the tests' helpers (`srap-tests` without its
/// dev-dependencies) stand beneath it, so a test binary that does not test
/// the lab links none of it.
const LAB_PARTS: [&str; 2] = ["srap-lab", "plotters*"];

/// Crates beneath every SRAP crate, which may reach none of [`SRAP_CRATES`]
/// but themselves.
const BENEATH_ALL: [&str; 1] = ["srap-docs"];

/// The workspace's SRAP crates, by name.
const SRAP_CRATES: [&str; 1] = ["srap*"];

/// Fails when `srap-cli` reaches a package of [`NEEDS_EBPF_TOOLCHAIN`],
/// `srap-agent` one of [`LAB_ONLY`], the harness or the tests' helpers
/// one of [`LAB_PARTS`], or a crate of [`BENEATH_ALL`] another SRAP crate.
pub fn check() -> Result<()> {
    println!("\n==> layering (srap builds without the eBPF toolchain)");
    let metadata = metadata()?;
    let reached = reachable(&metadata, "srap-cli")?;
    let bad = matching(&reached, &NEEDS_EBPF_TOOLCHAIN);
    if !bad.is_empty() {
        bail!("srap-cli depends on {bad:?}: `srap` would need nightly and bpf-linker to build");
    }
    println!(
        "srap-cli reaches {} packages, none of {NEEDS_EBPF_TOOLCHAIN:?}",
        reached.len()
    );
    let reached = reachable(&metadata, "srap-agent")?;
    let bad = matching(&reached, &LAB_ONLY);
    if !bad.is_empty() {
        bail!(
            "srap-agent depends on {bad:?}: the root daemon would ship the lab's or the \
             harness's code (they belong in the srap-lab binary and the tests)"
        );
    }
    println!(
        "srap-agent reaches {} packages, none of {LAB_ONLY:?}",
        reached.len()
    );
    for below_the_lab in ["srap-harness", "srap-tests"] {
        let reached = reachable(&metadata, below_the_lab)?;
        let bad = matching(&reached, &LAB_PARTS);
        if !bad.is_empty() {
            bail!(
                "{below_the_lab} depends on {bad:?}: the harness and the tests' helpers stand \
                 beneath the lab (only the tests of the lab itself may use it, as a \
                 dev-dependency)"
            );
        }
        println!("{below_the_lab} reaches none of {LAB_PARTS:?}");
    }
    for beneath in BENEATH_ALL {
        let reached = reachable(&metadata, beneath)?;
        let bad: Vec<&str> = matching(&reached, &SRAP_CRATES)
            .into_iter()
            .filter(|name| *name != beneath)
            .collect();
        if !bad.is_empty() {
            bail!(
                "{beneath} depends on {bad:?}: it stands beneath every SRAP crate (clap and \
                 its generators only), so that both binaries can take it"
            );
        }
        println!("{beneath} reaches no other SRAP crate");
    }
    Ok(())
}

/// The workspace's `cargo metadata`.
fn metadata() -> Result<Value> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(crate::exec::workspace_root())
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("cargo metadata JSON")
}

/// The names of `reached` that one of `patterns` matches (`name`, `prefix*`
/// or `*suffix`).
fn matching<'a>(reached: &'a BTreeSet<String>, patterns: &[&str]) -> Vec<&'a str> {
    let matches =
        |name: &str, pattern: &str| match (pattern.strip_suffix('*'), pattern.strip_prefix('*')) {
            (Some(prefix), _) => name.starts_with(prefix),
            (_, Some(suffix)) => name.ends_with(suffix),
            _ => name == pattern,
        };
    reached
        .iter()
        .map(String::as_str)
        .filter(|name| patterns.iter().any(|p| matches(name, p)))
        .collect()
}

/// Names of the packages `root` reaches through normal and build
/// dependencies (dev-dependencies do not reach the shipped binary).
fn reachable(metadata: &Value, root: &str) -> Result<BTreeSet<String>> {
    let names: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .context("metadata has no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("metadata has no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let start = names
        .iter()
        .find(|(_, name)| **name == root)
        .map(|(id, _)| *id)
        .with_context(|| format!("{root} is not in the workspace"))?;
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes
            .get(id)
            .and_then(|n| n["deps"].as_array())
            .into_iter()
            .flatten()
        {
            if shipped(dep) {
                todo.extend(dep["pkg"].as_str());
            }
        }
    }
    Ok(seen
        .iter()
        .filter_map(|id| names.get(id))
        .map(|n| n.to_string())
        .collect())
}

/// Whether a resolved dependency is a normal or build one.
fn shipped(dep: &Value) -> bool {
    dep["dep_kinds"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].as_str() != Some("dev")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// cli → host (normal), cli → daemon (dev only), host → common (build).
    fn metadata() -> Value {
        let dep =
            |pkg: &str, kind: Option<&str>| json!({"pkg": pkg, "dep_kinds": [{"kind": kind}]});
        json!({
            "packages": [
                {"id": "c", "name": "srap-cli"}, {"id": "h", "name": "srap-host"},
                {"id": "d", "name": "srap-daemon"}, {"id": "m", "name": "srap-common"},
            ],
            "resolve": {"nodes": [
                {"id": "c", "deps": [dep("h", None), dep("d", Some("dev"))]},
                {"id": "h", "deps": [dep("m", Some("build"))]},
                {"id": "d", "deps": [dep("m", None)]},
                {"id": "m", "deps": []},
            ]},
        })
    }

    #[test]
    fn dev_dependencies_do_not_reach_the_binary() {
        let reached = reachable(&metadata(), "srap-cli").expect("graph");
        assert_eq!(
            reached.into_iter().collect::<Vec<_>>(),
            ["srap-cli", "srap-common", "srap-host"]
        );
    }

    #[test]
    fn lab_only_packages_match_by_name_prefix_or_suffix() {
        let reached: BTreeSet<String> = [
            "srap-lab",
            "srap-harness",
            "plotters-svg",
            "owned_ttf_parser",
            "image",
            "imagesize",
            "srap-daemon",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            matching(&reached, &LAB_ONLY),
            [
                "image",
                "owned_ttf_parser",
                "plotters-svg",
                "srap-harness",
                "srap-lab"
            ]
        );
        assert!(matching(&reached, &NEEDS_EBPF_TOOLCHAIN) == ["srap-daemon"]);
    }

    #[test]
    fn this_workspace_keeps_srap_off_the_ebpf_toolchain_and_the_agent_off_the_lab() {
        check().expect(
            "srap-cli must not depend on the daemon or the eBPF crate, nor srap-agent on the lab \
             or the harness, nor the harness on the lab, nor srap-docs on any SRAP crate",
        );
    }
}
