//! Checks the crate graph keeps its promises: `srap` (srap-cli) must build
//! on stable alone, so nothing it depends on (normal or build) may be the
//! daemon, whose build script compiles the eBPF programs with nightly and
//! bpf-linker, or the eBPF crate itself.

use std::{
    collections::{BTreeSet, HashMap},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// Packages that need the eBPF toolchain to build.
const NEEDS_EBPF_TOOLCHAIN: [&str; 2] = ["srap-daemon", "srap-ebpf"];

/// Fails when `srap-cli` reaches a package of [`NEEDS_EBPF_TOOLCHAIN`].
pub fn check() -> Result<()> {
    println!("\n==> layering (srap builds without the eBPF toolchain)");
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
    let metadata: Value = serde_json::from_slice(&output.stdout).context("cargo metadata JSON")?;
    let reached = reachable(&metadata, "srap-cli")?;
    let bad: Vec<&str> = NEEDS_EBPF_TOOLCHAIN
        .into_iter()
        .filter(|name| reached.contains(*name))
        .collect();
    if !bad.is_empty() {
        bail!("srap-cli depends on {bad:?}: `srap` would need nightly and bpf-linker to build");
    }
    println!(
        "srap-cli reaches {} packages, none of {NEEDS_EBPF_TOOLCHAIN:?}",
        reached.len()
    );
    Ok(())
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
    fn this_workspace_keeps_srap_off_the_ebpf_toolchain() {
        check().expect("srap-cli must not depend on the daemon or the eBPF crate");
    }
}
