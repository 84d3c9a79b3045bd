//! The lines `srap-agent sender` prints about what it steers: stdout, so
//! scripts and tests can wait for them.

use std::fmt::Write as _;

use srap_common::steering::Scope;

use super::{Attachment, RunningBinder};

/// One line per steering table, the reservation, and where the binder is.
pub fn describe(steering: &RunningBinder) -> String {
    let mut out = String::new();
    for receiver in &steering.plan.receivers {
        for table in receiver
            .tables
            .iter()
            .filter_map(|&t| steering.plan.tables.get(t))
        {
            let scope = match table.scope() {
                Scope::AnyPort => "any port".to_owned(),
                Scope::Port(p) => format!("port {p}"),
            };
            let _ = writeln!(
                out,
                "receiver {} from {}: {scope}, {} CPU slots, {} source ports",
                receiver.receiver,
                table.source,
                table.slots().len(),
                table.ports().len()
            );
        }
    }
    let _ = writeln!(
        out,
        "reserved {} source ports from {} in ip_local_reserved_ports",
        steering.ports.len(),
        steering.port_range
    );
    let how = match steering.attachment {
        Attachment::Attached => "attached",
        Attachment::Adopted => "adopted",
    };
    let _ = write!(
        out,
        "steering active ({how}): cgroup {}, pins {}",
        steering.cgroup.display(),
        steering.layout.dir().display()
    );
    out
}

/// One periodic look at the binder: logs its counters and returns false once
/// its links are gone (`srap-agent detach` ran), when the agent should stop.
pub fn log_counters(layout: &super::PinLayout) -> bool {
    if !layout.links_pinned() {
        tracing::info!("the binder's links were unpinned (srap-agent detach): exiting");
        return false;
    }
    match super::read_stats(layout) {
        Ok(stats) => tracing::info!("binder: {stats}"),
        Err(err) => tracing::warn!("reading the binder's counters: {err}"),
    }
    true
}
