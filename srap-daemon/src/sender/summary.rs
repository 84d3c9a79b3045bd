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
        "steering active ({how}): cgroup {}, pins {}",
        binder.cgroup.display(),
        binder.layout.dir().display()
    );
    out
}
