//! What the agent changed outside bpffs, kept so `srap-agent detach` can undo
//! exactly that: the cgroup (if the agent made it), the reserved ports it
//! added and the MPTCP path manager it took over. bpffs holds only BPF objects, so this lives in a small JSON file
//! under `/run/srap` (tmpfs, like the pins: both are gone after a reboot).

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::error::SenderError;

/// Directory of the state files.
pub const STATE_DIR: &str = "/run/srap";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SenderState {
    /// The cgroup the programs are attached to.
    pub cgroup: PathBuf,
    /// True if the agent created it (detach then removes it when empty).
    pub cgroup_created: bool,
    /// Ports an agent added to `ip_local_reserved_ports` (sysctl form):
    /// this agent chooses ports by tuple and reserves none, and releases
    /// those a state file of an older agent names.
    pub reserved_added: String,
    /// Inode of the network namespace whose sysctl holds those ports.
    pub netns: u64,
    /// The namespace's MPTCP path manager before `--mptcp follow-reader`
    /// took it: put back at the agent's clean stop, or by detach after a
    /// kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_manager_before: Option<srap_host::mptcp_pm::PathManagerKind>,
}

/// The state file of one pin directory: `/run/srap/<pin dir, / as _>.json`,
/// so agents with different `--pin-dir` never share one.
pub fn path_for(pin_dir: &Path) -> PathBuf {
    let name: String = pin_dir
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

pub fn load(path: &Path) -> Result<Option<SenderState>, SenderError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SenderError::Io {
                what: format!("reading {}", path.display()),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|err| SenderError::State {
            path: path.to_path_buf(),
            problem: err.to_string(),
        })
}

/// Writes atomically (temp file + rename): a killed agent leaves the old or
/// the new state, never half of one.
pub fn save(path: &Path, state: &SenderState) -> Result<(), SenderError> {
    let io = |what: String| move |source| SenderError::Io { what, source };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, text).map_err(io(format!("writing {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io(format!("renaming {}", tmp.display())))
}

/// Inode of this thread's network namespace.
pub fn current_netns() -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_paths_are_distinct_per_pin_dir() {
        assert_eq!(
            path_for(Path::new("/sys/fs/bpf/srap")),
            Path::new("/run/srap/sys_fs_bpf_srap.json")
        );
        assert_ne!(
            path_for(Path::new("/sys/fs/bpf/srap-t1")),
            path_for(Path::new("/sys/fs/bpf/srap-t2"))
        );
    }
}
