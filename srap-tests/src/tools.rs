//! The deployment checks' tools (`helm`, `kubernetes-validate`,
//! `ansible-lint`, `ansible-playbook`), which
//! `cargo xtask setup` installs under the target directory's `tools/`
//! rather than system-wide. A check whose tool is missing fails in CI
//! (`CI=true`: it was asked to run) and outside CI says it is skipped.

use std::path::{Path, PathBuf};

/// `target/tools`, beside the `target/<profile>` this test binary runs
/// from (`target/<profile>/deps/<test>`).
pub fn tools_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("tools")
}

/// `name` from `tools/bin` or `tools/venv/bin`, else from PATH; `None`
/// (after saying the check `what` is skipped) when it is nowhere outside
/// CI. In CI a missing tool panics.
pub fn tool_or_skip(name: &str, what: &str) -> Option<PathBuf> {
    let tools = tools_dir();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = [tools.join("bin"), tools.join("venv/bin")]
        .into_iter()
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        let why = format!("`{name}` is not installed (`cargo xtask setup` installs it)");
        let in_ci = std::env::var("CI").is_ok_and(|ci| ci == "true");
        assert!(!in_ci, "{what}: {why}");
        eprintln!("{what}: skipped: {why}");
    }
    found
}

/// The Ansible collection `srap.srap` (`deploy/ansible`).
pub fn ansible_collection() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/ansible")
}

/// Makes `dir` a collections path (`ANSIBLE_COLLECTIONS_PATH`) where the
/// collection is installed as its playbooks name it, `srap.srap`:
/// `ansible_collections/srap/srap`, a link to the tree itself, as
/// `ansible-galaxy collection install` would lay it out.
pub fn install_ansible_collection(dir: &Path) -> std::io::Result<()> {
    let namespace = dir.join("ansible_collections/srap");
    std::fs::create_dir_all(&namespace)?;
    std::os::unix::fs::symlink(ansible_collection(), namespace.join("srap"))
}
