//! The lines `srap-agent sender` prints about what it steers: stdout, so
//! scripts and tests can wait for them.

use std::fmt::Write as _;

use srap_common::port_tables::Scope;

use super::{attach::Attachment, binder::RunningBinder};

/// One line per port table, the port range, and where the binder is.
pub fn describe(binder: &RunningBinder) -> String {
    let mut out = String::new();
    for receiver in &binder.plan.receivers {
        for table in receiver
            .tables
            .iter()
            .filter_map(|&t| binder.plan.tables.get(t))
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
                table.layout.port_count()
            );
        }
        if let Some(bond) = &receiver.bond {
            let _ = writeln!(out, "receiver {}: {}", receiver.receiver, bond.describe());
        }
    }
    // Which NIC's description places each source address on this host's
    // queues, said when it is not one for all.
    let several = binder
        .plan
        .local_models
        .as_ref()
        .is_some_and(|m| m.several());
    if several || binder.plan.local_fallbacks() > 0 {
        for chosen in &binder.plan.local_sources {
            let with = chosen.described_by.as_deref().unwrap_or("--local-rss");
            let _ = write!(
                out,
                "this host's end from {} ({}): placed with {with}'s description",
                chosen.source,
                chosen.nic.as_deref().unwrap_or("no NIC")
            );
            if let Some(why) = &chosen.fallback {
                let _ = write!(out, " (fallback: {why})");
            }
            out.push('\n');
        }
    }
    let _ = writeln!(
        out,
        "source ports {}, chosen by 4-tuple and shared across destinations (none reserved)",
        binder.port_range
    );
    let how = match binder.attachment {
        Attachment::Attached => "attached",
        Attachment::Adopted => "adopted",
    };
    let _ = write!(
        out,
        "steering active ({how}) after {} ms: cgroup {}, pins {}",
        binder.start.to_steering_ms,
        binder.cgroup.display(),
        binder.layout.dir().display()
    );
    out
}

/// What systemd's `STATUS=` says of a running binder: one line.
pub fn status_line(binder: &RunningBinder) -> String {
    format!(
        "steering cgroup {} toward {} receiver address(es); steering active {} ms after start",
        binder.cgroup.display(),
        binder.plan.rows().count(),
        binder.start.to_steering_ms
    )
}
