//! Which path manager a network namespace's MPTCP connections get: the
//! kernel's own (endpoints and limits, `ip mptcp endpoint`) or the
//! userspace one, where a daemon opens every further subflow. The choice
//! is a sysctl of the namespace, read as each connection is created, so a
//! switch leaves open connections with the manager they began under.
//!
//! Linux 6.15 added `net.mptcp.path_manager` (a name) beside the older
//! `net.mptcp.pm_type` (a number, still written through); both are read
//! here, the name first. Files under `/proc/sys/net` are the namespace of
//! the thread that opens them.

use std::{fs, io};

use crate::error::HostError;

const PATH_MANAGER: &str = "/proc/sys/net/mptcp/path_manager";
const PM_TYPE: &str = "/proc/sys/net/mptcp/pm_type";

/// A namespace's path manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathManagerKind {
    /// The in-kernel one (`pm_type` 0, `kernel`).
    Kernel,
    /// The userspace one (`pm_type` 1, `userspace`).
    Userspace,
}

impl PathManagerKind {
    /// The calling thread's namespace's path manager.
    pub fn current() -> Result<Self, HostError> {
        match fs::read_to_string(PATH_MANAGER) {
            Ok(name) => Self::from_name(name.trim(), PATH_MANAGER),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let number = read(PM_TYPE)?;
                Self::from_number(number.trim())
            }
            Err(source) => Err(io_error(PATH_MANAGER, source)),
        }
    }

    /// Makes `self` the path manager of the calling thread's namespace's
    /// connections created from now on.
    pub fn install(self) -> Result<(), HostError> {
        let number = match self {
            Self::Kernel => "0",
            Self::Userspace => "1",
        };
        fs::write(PM_TYPE, number).map_err(|source| io_error(PM_TYPE, source))
    }

    fn from_name(name: &str, path: &str) -> Result<Self, HostError> {
        match name {
            "kernel" => Ok(Self::Kernel),
            "userspace" => Ok(Self::Userspace),
            other => Err(HostError::Sysctl {
                path: path.into(),
                problem: format!(
                    "names path manager `{other}`, neither `kernel` nor `userspace`: \
                     set it back (`sysctl -w net.mptcp.path_manager=kernel`) before \
                     SRAP takes the namespace's MPTCP connections"
                ),
            }),
        }
    }

    fn from_number(number: &str) -> Result<Self, HostError> {
        match number {
            "0" => Ok(Self::Kernel),
            "1" => Ok(Self::Userspace),
            other => Err(HostError::Sysctl {
                path: PM_TYPE.into(),
                problem: format!("path manager type `{other}` is neither 0 nor 1"),
            }),
        }
    }
}

fn read(path: &str) -> Result<String, HostError> {
    fs::read_to_string(path).map_err(|source| io_error(path, source))
}

fn io_error(path: &str, source: io::Error) -> HostError {
    let what = if source.kind() == io::ErrorKind::NotFound {
        format!("{path} (no MPTCP in this kernel: CONFIG_MPTCP)")
    } else {
        path.to_owned()
    };
    HostError::Io { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_are_read_and_others_refused_by_name() {
        assert_eq!(
            PathManagerKind::from_name("userspace", PATH_MANAGER).ok(),
            Some(PathManagerKind::Userspace)
        );
        assert_eq!(
            PathManagerKind::from_number("0").ok(),
            Some(PathManagerKind::Kernel)
        );
        let refused =
            PathManagerKind::from_name("bpf_first", PATH_MANAGER).expect_err("an unknown manager");
        assert!(refused.to_string().contains("bpf_first"), "{refused}");
        assert!(PathManagerKind::from_number("2").is_err());
    }
}
