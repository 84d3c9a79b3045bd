//! Names of the objects the harness makes (namespaces, veths, cgroups, pin
//! and scratch directories), unique to this process so that concurrent
//! tests and labs never meet, and read back by [`crate::orphans`] to find
//! the objects of processes that are gone.

use std::sync::atomic::{AtomicU32, Ordering};

/// A name no other live object of this process has: `s<pid>x<n><suffix>`.
///
/// Short enough for an interface name (15 bytes) for any pid and up to a few
/// thousand objects per process with a one-letter suffix.
pub fn unique_name(suffix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("s{}x{n}{suffix}", std::process::id())
}
