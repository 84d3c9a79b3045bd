//! The lines `srap-agent sender` prints about what it steers: stdout, so
//! scripts and tests can wait for them.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
};

use srap_common::steering::Scope;

use super::{Attachment, RunningBinder, plan::ReceiverPlan};

/// One line per steering table, the port range, and where the binder is.
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
                table.layout.port_count()
            );
        }
    }
    let _ = writeln!(
        out,
        "source ports {}, chosen by 4-tuple and shared across destinations (none reserved)",
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

/// The agent's periodic look at the binder: logs its counters, and warns
/// once per receiver when one of its slots runs dry (a connect found no free
/// port there and took the kernel's), saying what to change.
#[derive(Debug, Default)]
pub struct CounterWatch {
    /// Dry connects per receiver row when last looked at (or warned about).
    dry_seen: BTreeMap<u32, u32>,
    warned: BTreeSet<u32>,
}

impl CounterWatch {
    /// Starts from what the binder holds now (an adopted binder may have
    /// counted dry slots under an earlier agent, which warned then).
    pub fn new(steering: &RunningBinder) -> Self {
        let mut watch = Self::default();
        for receiver in &steering.plan.receivers {
            if let Ok(row) = super::read_receiver(&steering.layout, receiver.index) {
                watch.dry_seen.insert(receiver.index, row.dry);
            }
        }
        watch
    }

    /// Logs the counters and warns about dry slots; returns false once the
    /// binder's links are gone (`srap-agent detach` ran), when the agent
    /// should stop.
    pub fn tick(&mut self, steering: &RunningBinder) -> bool {
        let layout = &steering.layout;
        if !layout.links_pinned() {
            tracing::info!("the binder's links were unpinned (srap-agent detach): exiting");
            return false;
        }
        match super::read_stats(layout) {
            Ok(stats) => tracing::info!("binder: {stats}"),
            Err(err) => tracing::warn!("reading the binder's counters: {err}"),
        }
        for receiver in &steering.plan.receivers {
            if let Some(warning) = self.dry_warning(steering, receiver) {
                tracing::warn!("{warning}");
            }
        }
        true
    }

    /// The warning for `receiver`, the first time its dry count grows.
    fn dry_warning(&mut self, steering: &RunningBinder, receiver: &ReceiverPlan) -> Option<String> {
        let row = super::read_receiver(&steering.layout, receiver.index).ok()?;
        let seen = self.dry_seen.insert(receiver.index, row.dry).unwrap_or(0);
        if row.dry <= seen || !self.warned.insert(receiver.index) {
            return None;
        }
        let cpu = receiver
            .tables
            .first()
            .and_then(|t| steering.plan.tables.get(*t))
            .and_then(|t| t.slots().get(row.dry_slot as usize))
            .map_or_else(
                || format!("slot {}", row.dry_slot),
                |s| format!("CPU {}", s.cpu),
            );
        let range = steering.port_range;
        Some(format!(
            "receiver {}: the ports of its {cpu} ran dry ({} connect(s) found every port they \
             tried toward it in use, or in TIME_WAIT without TCP timestamps, and took a kernel \
             port, unsteered). Each of its {} CPUs has about {} of the {} ports of {range}, and \
             a closed connection holds its tuple in TIME_WAIT for 60 s on the side that closes \
             first (reusable only with timestamps: net.ipv4.tcp_timestamps=1 on both hosts): \
             widen --port-range (default: the kernel's ip_local_port_range), open fewer \
             connections per second toward this receiver, or let the server close first. Said \
             once.",
            receiver.receiver,
            row.dry - seen,
            receiver.slots.max(1),
            range.len() / receiver.slots.max(1) as usize,
            range.len(),
        ))
    }
}
