//! Helpers for SRAP's integration tests: network namespaces, veth pairs and
//! the privilege check, all real kernel objects behind drop guards.
//!
//! Every object gets a name unique to this process and test (pid + counter), so
//! tests run in parallel, and is removed on drop, so a failing test (a panic
//! unwinds through the guards) leaves nothing behind. Traffic stays inside
//! namespaces the test made: addresses are `10.199.<subnet>.0/24` and
//! `fd00:5a:0:<subnet>::/64`, configured only on the test's own veth ends.

pub mod cgroup;
pub mod netns;
pub mod privilege;
pub mod veth;

pub use netns::{NetNs, NsGuard};
pub use privilege::require_privileged;
pub use veth::{TwoHosts, VethConfig, VethEnd};

use std::sync::atomic::{AtomicU32, Ordering};

/// A name no other live test object has: `s<pid>x<n><suffix>`.
///
/// Short enough for an interface name (15 bytes) for any pid and up to a few
/// thousand objects per process with a one-letter suffix.
pub fn unique_name(suffix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("s{}x{n}{suffix}", std::process::id())
}
