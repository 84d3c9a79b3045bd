//! The Helm chart (`deploy/helm/srap`) and its Grafana dashboard, offline:
//! `helm lint` and `helm template` of the default values and of the example
//! site (`deploy/helm/site-example.yaml`), every rendered object validated
//! against Kubernetes' own schemas (`kubernetes-validate --strict`), each
//! DaemonSet's command line with its rendered settings file accepted by
//! the real `srap-agent … --check`, and every series the dashboard queries
//! one the agents export. The Ansible collection (`deploy/ansible`):
//! `ansible-lint --profile production` and `ansible-playbook
//! --syntax-check` of its playbooks on the example inventory. No cluster and no privilege: these run in every
//! `cargo test`; a missing tool fails them in CI and skips them elsewhere.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;
use srap_tests::{
    built_binary, grafana,
    harness::TempDir,
    tools::{ansible_collection, install_ansible_collection, tool_or_skip},
};

/// The chart and the values files its documentation shows.
fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/srap")
}

fn values_files() -> [(&'static str, Option<PathBuf>); 2] {
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/site-example.yaml");
    [("default values", None), ("the example site", Some(site))]
}

/// Runs `command`, panicking with its output unless it succeeds; its stdout.
fn output_of(what: &str, command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {command:?} failed ({}):\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn helm(helm: &Path, verb: &str, values: Option<&Path>) -> Command {
    let mut command = Command::new(helm);
    command.arg(verb);
    if verb == "template" {
        command.arg("srap");
    }
    command.arg(chart());
    if let Some(file) = values {
        command.arg("-f").arg(file);
    }
    command
}

/// The rendered objects as JSON, by the YAML parser kubernetes-validate's
/// own environment has (PyYAML).
fn objects(validate: &Path, yaml: &str) -> Vec<Value> {
    let python = validate.with_file_name("python3");
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), yaml.as_bytes())
        .expect("write the rendered YAML");
    let out = child.wait_with_output().expect("PyYAML");
    assert!(
        out.status.success(),
        "PyYAML could not read the rendered chart"
    );
    serde_json::from_slice(&out.stdout).expect("JSON from PyYAML")
}

#[test]
fn the_chart_lints_renders_and_validates_for_each_documented_values_file() {
    let Some(helm_bin) = tool_or_skip("helm", "the Helm chart's lint and render") else {
        return;
    };
    let validate = tool_or_skip("kubernetes-validate", "the rendered objects' validation");
    let dir = TempDir::new("fleets").expect("a temporary directory");
    for (name, values) in values_files() {
        output_of(name, &mut helm(&helm_bin, "lint", values.as_deref()));
        let yaml = output_of(name, &mut helm(&helm_bin, "template", values.as_deref()));
        let Some(validate) = &validate else { continue };
        let file = dir.path().join("rendered.yaml");
        std::fs::write(&file, &yaml).expect("write the rendered chart");
        let report = output_of(name, Command::new(validate).arg("--strict").arg(&file));
        for object in objects(validate, &yaml) {
            let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
            let id = format!(
                "{kind}/{}",
                object["metadata"]["name"].as_str().unwrap_or("")
            );
            // A CRD's schema is not Kubernetes' own: only its shape is ours.
            let checked =
                kind == "servicemonitor" || report.contains(&format!("passed for resource {id} "));
            assert!(checked, "{name}: {id} not validated:\n{report}");
        }
    }
}

/// What a pod's container would see, on this host: the settings file of
/// the ConfigMap, a key in place of the Secret's, the paths rewritten.
struct PodFiles {
    dir: TempDir,
}

impl PodFiles {
    fn new(objects: &[Value]) -> Self {
        let dir = TempDir::new("fleets-pod").expect("a temporary directory");
        let (config, keys) = (dir.path().join("config"), dir.path().join("keys"));
        for sub in [&config, &keys] {
            std::fs::create_dir_all(sub).expect("pod directories");
        }
        let key = keys.join("psk");
        std::fs::write(&key, [7u8; 32]).expect("a key");
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o400);
        std::fs::set_permissions(&key, mode).expect("mode 0400, as the Secret's");
        let files = Self { dir };
        for map in objects.iter().filter(|o| o["kind"] == "ConfigMap") {
            if let Some(toml) = map["data"]["sender.toml"].as_str() {
                std::fs::write(config.join("sender.toml"), files.rewrite(toml)).expect("toml");
            }
        }
        files
    }

    /// The container's paths as this host's, and its node address.
    fn rewrite(&self, text: &str) -> String {
        let root = self.dir.path().display().to_string();
        text.replace("/etc/srap/config/", &format!("{root}/config/"))
            .replace("/etc/srap/keys/", &format!("{root}/keys/"))
            .replace("/run/srap/", &format!("{root}/"))
            .replace("$(SRAP_NODE_IP)", "192.0.2.1")
    }
}

#[test]
fn each_rendered_command_line_and_settings_file_pass_the_agents_check() {
    let Some(helm_bin) = tool_or_skip("helm", "the rendered command lines' check") else {
        return;
    };
    let Some(validate) = tool_or_skip("kubernetes-validate", "reading the rendered chart") else {
        return;
    };
    let agent = built_binary("srap-agent");
    for (name, values) in values_files() {
        let yaml = output_of(name, &mut helm(&helm_bin, "template", values.as_deref()));
        let objects = objects(&validate, &yaml);
        let files = PodFiles::new(&objects);
        let daemonsets: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "DaemonSet")
            .collect();
        assert_eq!(daemonsets.len(), 2, "{name}: a DaemonSet per role");
        for set in daemonsets {
            let container = &set["spec"]["template"]["spec"]["containers"][0];
            let words: Vec<String> = container["command"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(container["args"].as_array().into_iter().flatten())
                .filter_map(|w| w.as_str().map(|w| files.rewrite(w)))
                .collect();
            assert_eq!(words[0], "/usr/bin/srap-agent", "{name}: {words:?}");
            let out = output_of(name, Command::new(&agent).args(&words[1..]).arg("--check"));
            assert!(out.contains("a start would accept these settings"), "{out}");
        }
    }
}

/// Every metric a panel or variable queries is one an agent exports (the
/// exposition writes a `# TYPE` line for each of these tables' entries in
/// every scrape); the kernel tests hold the label values to real scrapes.
#[test]
fn every_series_the_dashboard_queries_is_exported() {
    let exported: Vec<&str> = srap_status::metrics::METRICS
        .iter()
        .chain(srap_status::metrics::SENDER_METRICS)
        .map(|(name, _, _)| *name)
        .collect();
    let series = grafana::dashboard_series();
    assert!(series.len() >= 10, "the dashboard queries {series:?}");
    for s in &series {
        assert!(
            exported.contains(&s.metric.as_str()),
            "{s:?} is not exported"
        );
    }
}

/// A scratch collections path with the collection installed in it.
fn collections_path() -> TempDir {
    let dir = TempDir::new("fleets-ansible").expect("a temporary directory");
    install_ansible_collection(dir.path()).expect("the collections path");
    dir
}

/// `tool ARGS` run on the collection (installed in a scratch collections
/// path, nothing of the user's configuration or cache involved): its
/// stdout, or `None` when the tool is skipped.
fn ansible(tool: &str, what: &str, args: &[&str]) -> Option<String> {
    let tool = tool_or_skip(tool, what)?;
    let collections = collections_path();
    let mut command = Command::new(tool);
    command
        .current_dir(ansible_collection())
        .env("ANSIBLE_COLLECTIONS_PATH", collections.path())
        .env("ANSIBLE_LOCAL_TEMP", collections.path().join("tmp"))
        .env("ANSIBLE_HOME", collections.path().join("home"))
        .env("ANSIBLE_NOCOLOR", "1")
        .args(args);
    Some(output_of(what, &mut command))
}

#[test]
fn the_ansible_collection_passes_ansible_lint_at_the_production_profile() {
    let lint = ansible(
        "ansible-lint",
        "the Ansible collection's lint",
        &["--profile", "production", "--offline", "--nocolor", "."],
    );
    if let Some(out) = lint {
        println!("{out}");
    }
}

#[test]
fn the_playbooks_pass_the_syntax_check_on_the_example_inventory() {
    let Some(out) = ansible(
        "ansible-playbook",
        "the playbooks' syntax check",
        &[
            "--syntax-check",
            "-i",
            "inventory/example.yml",
            "playbooks/site.yml",
            "playbooks/remove.yml",
        ],
    ) else {
        return;
    };
    for playbook in ["site", "remove"] {
        assert!(
            out.contains(&format!("playbook: playbooks/{playbook}.yml")),
            "{out}"
        );
    }
}
