//! The bpf file system the agents pin to. A fresh host may have none mounted
//! at `/sys/fs/bpf` (minimal images, some containers): like other BPF
//! daemons, the agent then mounts it there itself and says so, instead of
//! failing on its first pin.

use std::{io, path::Path};

use rustix::mount::MountFlags;

use tracing::info;

/// Where Linux distributions mount bpffs.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `path` itself (not an ancestor) lies on a bpf file system.
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let stat = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    Ok(stat.f_type as i64 == BPF_FS_MAGIC)
}

/// Mounts bpffs at [`BPFFS_ROOT`] when `dir` lies under it and nothing is
/// mounted there yet. Returns whether it mounted. A `dir` elsewhere is left
/// to the caller's own check: the agent never mounts where it was not
/// asked to pin.
pub fn mount_if_missing(dir: &Path) -> io::Result<bool> {
    let root = Path::new(BPFFS_ROOT);
    if !dir.starts_with(root) || !root.is_dir() || is_bpffs(root)? {
        return Ok(false);
    }
    rustix::mount::mount("bpf", root, "bpf", MountFlags::empty(), c"mode=0700")?;
    info!(
        "no bpf file system was mounted at {BPFFS_ROOT}: mounted one there \
         (`mount -t bpf bpf {BPFFS_ROOT}`) to pin SRAP's programs and maps"
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpffs_is_told_from_other_file_systems() {
        assert!(!is_bpffs(Path::new("/")).expect("statfs /"));
        assert!(is_bpffs(Path::new("/srap/no/such/dir")).is_err());
        // Mounted here (as /proc/mounts says): statfs says so too.
        let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let mounted = mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(BPFFS_ROOT) && l.starts_with("bpf "));
        if mounted {
            assert!(is_bpffs(Path::new(BPFFS_ROOT)).expect("statfs bpffs"));
        }
        // A directory outside /sys/fs/bpf is never mounted on.
        assert!(!mount_if_missing(Path::new("/tmp/srap-elsewhere")).expect("left alone"));
    }
}
