//! The running kernel's version, for what changed between releases (which
//! input transform mlx5 reports, whether a device names its parent). It
//! reads the release and nothing else: what a version means stays with the
//! module that asks.

use std::fs;

/// Where the running kernel's release string is.
const OSRELEASE: &str = "/proc/sys/kernel/osrelease";

/// `major.minor` of the running kernel; `None` when its release cannot be
/// read or parsed.
pub fn running_version() -> Option<(u32, u32)> {
    let release = fs::read_to_string(OSRELEASE).ok()?;
    version(release.trim())
}

/// `major.minor` of a kernel release string such as `6.18.44-fc-v669`.
pub fn version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(version("6.1.0-31-cloud-amd64"), Some((6, 1)));
        assert_eq!(version("6.15-rc1"), Some((6, 15)));
        assert_eq!(version("garbage"), None);
    }
}
