//! The bpf file system the agents pin to. A fresh host may have none mounted
//! at `/sys/fs/bpf` (minimal images, some containers): like other BPF
//! daemons, the agent then mounts it there itself and says so, instead of
//! failing on its first pin.

use std::{ffi::CString, io, path::Path};

use tracing::info;

/// Where Linux distributions mount bpffs.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `path` itself (not an ancestor) lies on a bpf file system.
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: statfs writes only into the zeroed struct we own; the path is
    // a valid NUL-terminated string that outlives the call.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
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
    let source = c"bpf";
    let target = CString::new(BPFFS_ROOT).map_err(io::Error::other)?;
    let options = c"mode=0700";
    // SAFETY: every pointer is a valid NUL-terminated string that outlives
    // the call; mount(2) reads them only.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            source.as_ptr(),
            0,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    info!(
        "no bpf file system was mounted at {BPFFS_ROOT}: mounted one there \
         (`mount -t bpf bpf {BPFFS_ROOT}`) to pin SRAP's programs and maps"
    );
    Ok(true)
}
