//! Finding the cgroup2 hierarchy and the cgroup the binder steers.
//!
//! The mount point is read from `/proc/mounts` rather than assumed: hybrid
//! systems mount cgroup2 at `/sys/fs/cgroup/unified`, unified ones at
//! `/sys/fs/cgroup`.

use std::{
    fs,
    path::{Component, Path, PathBuf},
};

use crate::error::HostError;

/// The cgroup `srap exec` and the agent use when none is named.
pub const DEFAULT_CGROUP: &str = "srap";

/// Where cgroup2 is mounted, from `/proc/mounts`.
pub fn cgroup2_mount() -> Result<PathBuf, HostError> {
    let mounts = fs::read_to_string("/proc/mounts").map_err(|source| HostError::Io {
        what: "reading /proc/mounts".into(),
        source,
    })?;
    find_cgroup2(&mounts).ok_or(HostError::NoCgroup2)
}

/// The first `cgroup2` mount point in a `/proc/mounts` text.
pub fn find_cgroup2(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, mount, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount(mount)))
    })
}

/// `/proc/mounts` writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(pos) = rest.find('\\') {
        out.push_str(&rest[..pos]);
        let octal = rest.get(pos + 1..pos + 4);
        match octal.and_then(|o| u8::from_str_radix(o, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[pos + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[pos + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The cgroup directory for `--cgroup`: the default under the mount, a
/// relative path under the mount, or an absolute path inside it.
pub fn resolve(mount: &Path, requested: Option<&Path>) -> Result<PathBuf, HostError> {
    let path = match requested {
        None => mount.join(DEFAULT_CGROUP),
        Some(path) if path.is_absolute() => path.to_path_buf(),
        Some(path) => mount.join(path),
    };
    let inside = path
        .strip_prefix(mount)
        .ok()
        .filter(|rest| rest.components().all(|c| matches!(c, Component::Normal(_))));
    match inside {
        Some(rest) if rest.as_os_str().is_empty() => {
            Err(HostError::CgroupIsRoot { path: path.clone() })
        }
        Some(_) => Ok(path),
        None => Err(HostError::CgroupOutside {
            path,
            mount: mount.to_path_buf(),
        }),
    }
}

/// Creates the cgroup if it is missing; true if this call created it.
pub fn ensure(path: &Path) -> Result<bool, HostError> {
    if path.join("cgroup.procs").exists() {
        return Ok(false);
    }
    fs::create_dir_all(path).map_err(|source| HostError::Io {
        what: format!("creating cgroup {}", path.display()),
        source,
    })?;
    Ok(true)
}

/// The names of the programs attached to `cgroup` itself (not inherited
/// from an ancestor) at its `connect4` and `connect6` hooks, read from the
/// kernel (`BPF_PROG_QUERY`): whether a binder serves it is the kernel's
/// word, not an agent's report.
pub fn connect_hooks(cgroup: &Path) -> std::io::Result<[Vec<String>; 2]> {
    use std::os::fd::AsFd as _;
    let dir = std::fs::File::open(cgroup)?;
    let names = |attach_type| -> std::io::Result<Vec<String>> {
        crate::bpf_sys::prog_query(dir.as_fd(), attach_type)?
            .into_iter()
            .map(crate::bpf_sys::prog_name)
            .collect()
    };
    Ok([
        names(crate::bpf_sys::CGROUP_INET4_CONNECT)?,
        names(crate::bpf_sys::CGROUP_INET6_CONNECT)?,
    ])
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const HYBRID: &str = "sysfs /sys sysfs rw 0 0\n\
        tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
        cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n\
        cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";

    #[test]
    fn finds_the_hybrid_mount() {
        assert_eq!(
            find_cgroup2(HYBRID).as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(find_cgroup2("proc /proc proc rw 0 0\n"), None);
        assert_eq!(
            find_cgroup2("none /a\\040b cgroup2 rw 0 0").as_deref(),
            Some(Path::new("/a b"))
        );
    }

    #[test]
    fn resolves_inside_the_mount_only() {
        let mount = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(
            resolve(mount, None).unwrap(),
            Path::new("/sys/fs/cgroup/unified/srap")
        );
        assert_eq!(
            resolve(mount, Some(Path::new("a/b"))).unwrap(),
            Path::new("/sys/fs/cgroup/unified/a/b")
        );
        assert!(resolve(mount, Some(Path::new("/tmp/x"))).is_err());
        assert!(resolve(mount, Some(Path::new("../x"))).is_err());
        assert!(resolve(mount, Some(mount)).is_err());
    }
}
