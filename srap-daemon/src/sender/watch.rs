//! The sender agent's periodic look at its binder: the counters in the log,
//! and a warning, once, when they show something to change — a slot that
//! ran dry, or a port range the binder comes round faster than TIME_WAIT
//! lets ports go (so it holds all of them, and other applications of the
//! host get none from that part of the kernel's range).

use std::collections::{BTreeMap, BTreeSet};

use srap_common::{binder::event, port_range::PortRange};
use srap_host::reserved;

use super::{
    binder::RunningBinder,
    maps::{read_receiver, read_stats},
    plan::ReceiverPlan,
};

/// The agent's periodic look at the binder: logs its counters, and warns
/// once per receiver when one of its slots runs dry (a connect found no free
/// port there and took the kernel's), and once when the binder starts
/// reusing its own TIME_WAIT tuples inside the kernel's ephemeral range;
/// each warning says what to change.
#[derive(Debug, Default)]
pub struct CounterWatch {
    /// Dry connects per receiver row when last looked at (or warned about).
    dry_seen: BTreeMap<u32, u32>,
    warned: BTreeSet<u32>,
    /// `time_wait_reused` when the agent started; `None` once warned.
    reused_at_start: Option<u64>,
}

impl CounterWatch {
    /// Starts from what the binder holds now (an adopted binder may have
    /// counted dry slots under an earlier agent, which warned then).
    pub fn new(binder: &RunningBinder) -> Self {
        let reused = read_stats(&binder.layout).map_or(0, |s| s.get(event::TIME_WAIT_REUSED));
        let mut watch = Self {
            reused_at_start: Some(reused),
            ..Self::default()
        };
        for receiver in &binder.plan.receivers {
            if let Ok(row) = read_receiver(&binder.layout, receiver.index) {
                watch.dry_seen.insert(receiver.index, row.dry);
            }
        }
        watch
    }

    /// Logs the counters and warns about dry slots; returns false once the
    /// binder's links are gone (`srap-agent detach` ran), when the agent
    /// should stop.
    pub fn tick(&mut self, binder: &RunningBinder) -> bool {
        let layout = &binder.layout;
        if !layout.links_pinned() {
            tracing::info!("the binder's links were unpinned (srap-agent detach): exiting");
            return false;
        }
        match read_stats(layout) {
            Ok(stats) => {
                tracing::info!("binder: {stats}");
                if let Some(warning) =
                    self.full_range_warning(binder, stats.get(event::TIME_WAIT_REUSED))
                {
                    tracing::warn!("{warning}");
                }
            }
            Err(err) => tracing::warn!("reading the binder's counters: {err}"),
        }
        for receiver in &binder.plan.receivers {
            if let Some(warning) = self.dry_warning(binder, receiver) {
                tracing::warn!("{warning}");
            }
        }
        true
    }

    /// The warning for `receiver`, the first time its dry count grows.
    fn dry_warning(&mut self, binder: &RunningBinder, receiver: &ReceiverPlan) -> Option<String> {
        let row = read_receiver(&binder.layout, receiver.index).ok()?;
        let seen = self.dry_seen.insert(receiver.index, row.dry).unwrap_or(0);
        if row.dry <= seen || !self.warned.insert(receiver.index) {
            return None;
        }
        let cpu = receiver
            .tables
            .first()
            .and_then(|t| binder.plan.tables.get(*t))
            .and_then(|t| t.slots().get(row.dry_slot as usize))
            .map_or_else(
                || format!("slot {}", row.dry_slot),
                |s| format!("CPU {}", s.cpu),
            );
        let range = binder.port_range;
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

    /// The warning, the first time the binder reuses a TIME_WAIT tuple of
    /// its own (it came round a slot's ports within 60 s) while its range
    /// overlaps the kernel's `ip_local_port_range`: every port of the
    /// overlap is then bound to a steered socket, live or in TIME_WAIT, and
    /// the kernel never hands such a port to another socket's `connect()`.
    fn full_range_warning(&mut self, binder: &RunningBinder, reused: u64) -> Option<String> {
        let at_start = self.reused_at_start?;
        if reused <= at_start {
            return None;
        }
        self.reused_at_start = None;
        let kernel = reserved::local_port_range().ok()?;
        let shared = overlap(binder.port_range, kernel);
        if shared == 0 {
            return None;
        }
        let others = match kernel.len() - shared {
            0 => "none of it is left to them".to_owned(),
            left => format!("once its {left} other ports are in use"),
        };
        Some(format!(
            "the binder reuses its own tuples in TIME_WAIT ({} so far): it comes round the \
             ports of {} faster than TIME_WAIT (60 s) lets them go, so it keeps all of them \
             bound, and {shared} of them are in the kernel's ip_local_port_range {kernel}, \
             which the kernel then hands to no other application: their connect() fails with \
             EADDRNOTAVAIL, {others}. Give SRAP a --port-range outside ip_local_port_range \
             (e.g. 10000-32767 beside 32768-60999), or narrow ip_local_port_range for the \
             others. Said once.",
            reused - at_start,
            binder.port_range,
        ))
    }
}

/// Ports two ranges share.
fn overlap(a: PortRange, b: PortRange) -> usize {
    let (start, end) = (a.start().max(b.start()), a.end().min(b.end()));
    if start > end {
        0
    } else {
        usize::from(end - start) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_by_their_common_ports() {
        let range = |s: &str| s.parse::<PortRange>().expect("range");
        assert_eq!(overlap(range("32768-60999"), range("32768-60999")), 28232);
        assert_eq!(overlap(range("10000-32767"), range("32768-60999")), 0);
        assert_eq!(overlap(range("30000-40000"), range("32768-60999")), 7233);
        assert_eq!(overlap(range("60999-65535"), range("32768-60999")), 1);
    }
}
