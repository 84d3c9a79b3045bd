//! The sender agent's status snapshot for `srap status --sender`, made
//! from the follow loop's state and the binder's pinned maps, and served
//! on the agent's control socket.

use std::{path::Path, sync::Arc};

use srap_common::{binder::COUNTER_NAMES, rss::FlowTuple, wire::MAX_SEEN_FLOWS};
use srap_status::{
    ControlSocket, SenderStatus,
    control::serve,
    sender::{AddressRow, GrantRow, LocalRow, ReceiverRow, SenderFlowRow},
};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{Follower, machine::Peer};
use crate::{
    sender::{
        RunningBinder, Target, landings::LocalLandings, local_end::LocalEnd, read_occupancy,
        read_stats,
    },
    upstream::{PeerHandle, PeerStatus, SeenReport},
};

/// The control socket and the latest snapshot it serves.
pub struct Published {
    _socket: ControlSocket,
    tx: watch::Sender<Arc<SenderStatus>>,
    task: tokio::task::JoinHandle<()>,
    /// `--metrics`: the same snapshot as Prometheus text.
    metrics: Option<tokio::task::JoinHandle<()>>,
}

impl Published {
    /// Makes the socket at `path` and serves an empty snapshot until the
    /// first [`Published::update`].
    pub fn bind(path: &Path) -> anyhow::Result<Self> {
        let (socket, listener) = ControlSocket::bind(path)?;
        let (tx, rx) = watch::channel(Arc::new(SenderStatus::default()));
        let task = tokio::spawn(serve(listener, rx));
        info!("status on {} (`srap status --sender`)", path.display());
        Ok(Self {
            _socket: socket,
            tx,
            task,
            metrics: None,
        })
    }

    /// Also serves the snapshot on http://`addr`/metrics (`--metrics`).
    pub fn serve_metrics(&mut self, addr: std::net::SocketAddr) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let listener = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .with_context(|| format!("serving metrics on {addr} (--metrics)"))?;
        self.metrics = Some(tokio::spawn(srap_status::metrics::serve(
            listener,
            self.tx.subscribe(),
        )));
        info!("metrics on http://{addr}/metrics");
        Ok(())
    }

    pub fn update(&self, status: SenderStatus) {
        self.tx.send_replace(Arc::new(status));
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(metrics) = &self.metrics {
            metrics.abort();
        }
    }
}

impl Follower {
    /// The snapshot of every receiver and the binder.
    pub(super) fn status(&self, binder: Option<&RunningBinder>) -> SenderStatus {
        let mut status = binder.map(binder_status).unwrap_or_default();
        status.occupancy = self.audit.row();
        status.receivers = self
            .machine
            .peers
            .iter()
            .map(|r| receiver_row(r, binder))
            .collect();
        if let Some(local) = &self.local {
            add_local(&mut status, local, &self.machine.options.targets);
        } else if let Some(opened) = &self.opened {
            add_opened(&mut status, opened, &self.machine.options.targets);
        }
        for flow in &mut status.flows {
            seen_at_receiver(flow, &self.machine.peers, &self.handles);
        }
        if let Some(binder) = binder {
            crate::sender::bond::add_bonds(&mut status, binder, &self.member_loop);
        }
        status
    }
}

/// The steered cgroup's open connections toward the receivers with
/// `--steer remote` (no local NIC planned): each with the receiver CPU
/// its target's model plans for it.
fn add_opened(status: &mut SenderStatus, opened: &LocalLandings, targets: &[Target]) {
    let open = match opened.read() {
        Ok(open) => open,
        Err(err) => {
            warn!("reading the steered cgroup's connections: {err}");
            return;
        }
    };
    status.flows = open
        .iter()
        .filter(|o| !o.closed)
        .filter_map(|o| {
            let target = targets.iter().find(|t| t.addr == o.dst.ip())?;
            let tuple = FlowTuple::from_sockets(o.src, o.dst).ok()?;
            Some(SenderFlowRow {
                src: Some(o.src),
                dst: Some(o.dst),
                receiver_cpu_planned: Some(target.model.landing(&tuple).cpu),
                ..SenderFlowRow::default()
            })
        })
        .collect();
}

/// Fills in where the receiver's verifier saw `flow` (protocol 7), matched
/// by its whole tuple as this host sees it: a receiver that sees another
/// source (a NAT rewrote it) reports a flow that matches none of ours.
fn seen_at_receiver(flow: &mut SenderFlowRow, receivers: &[Peer], handles: &[PeerHandle]) {
    let (Some(src), Some(dst)) = (flow.src, flow.dst) else {
        return;
    };
    let receiver = receivers
        .iter()
        .position(|r| r.rows.iter().any(|(_, addr)| *addr == dst.ip()))
        .and_then(|n| handles.get(n));
    let seen = match receiver {
        Some(handle) => match &*handle.seen().borrow() {
            SeenReport::Flows(report) => report
                .flows
                .iter()
                .find(|f| f.src == src && f.dst == dst)
                .copied()
                .ok_or_else(|| {
                    format!(
                        "not among the {} active flows the receiver reports (idle there, not \
                         seen by its verifier yet, its tuple rewritten on the way, or past the \
                         first {MAX_SEEN_FLOWS})",
                        report.flows.len()
                    )
                }),
            SeenReport::Unsupported(version) => Err(format!(
                "the receiver speaks protocol {version}, which reports no flows (7 does)"
            )),
            SeenReport::Waiting => Err("the receiver has not reported flows yet".to_owned()),
            SeenReport::NotConnected => Err("the receiver agent is not connected".to_owned()),
        },
        None => Err(format!("no receiver agent for {}", dst.ip())),
    };
    match seen {
        Ok(seen) => {
            flow.receiver_cpu_seen = seen.cpu;
            flow.receiver_queue_seen = seen.queue;
            flow.receiver_cpu_off_plan = matches!(
                (flow.receiver_cpu_planned, seen.cpu),
                (Some(planned), Some(cpu)) if planned != cpu
            );
            if seen.cpu.is_none() {
                flow.receiver_seen_unknown = Some("the receiver cannot tell its CPU".to_owned());
            }
        }
        Err(why) => flow.receiver_seen_unknown = Some(why),
    }
}

/// The binder's part of a snapshot: where it steers, its reservation and
/// its counters.
pub fn binder_status(binder: &RunningBinder) -> SenderStatus {
    let mut status = SenderStatus {
        cgroup: binder.cgroup.display().to_string(),
        pin_dir: binder.layout.dir().display().to_string(),
        ..SenderStatus::default()
    };
    match read_stats(&binder.layout) {
        Ok(stats) => {
            status.binder = COUNTER_NAMES
                .iter()
                .zip(stats.counts)
                .map(|(name, count)| ((*name).to_owned(), count))
                .collect();
            status.bind_errnos = stats
                .bind_errnos
                .iter()
                .map(|&(errno, count)| (errno_text(errno), count))
                .collect();
        }
        Err(err) => warn!("reading the binder's counters: {err}"),
    }
    status
}

/// What the kernel says an errno means, and its number.
fn errno_text(errno: u32) -> String {
    i32::try_from(errno).map_or_else(
        |_| format!("errno {errno}"),
        |n| std::io::Error::from_raw_os_error(n).to_string(),
    )
}

/// This host's end in a snapshot: its NIC and verdict, and each open
/// connection with the CPU planned and seen at both ends (the receiver's
/// planned by the model of the target it goes to, when that one is the
/// receiver's).
pub fn add_local(status: &mut SenderStatus, local: &LocalEnd, targets: &[Target]) {
    let report = local.report();
    status.local = Some(LocalRow {
        steer: local.steer.to_string(),
        nic: local.nic.name(),
        cpus: local.nic.cpus().into_iter().collect(),
        watching: local.watching(),
        verdict: report.verdict,
        matched: report.matched,
        judged: report.judged,
        paused: local.paused,
        key: Some(local.nic.key),
        version: local.version(),
        placement: local.placement.to_string(),
    });
    status.flows = local
        .open()
        .map(|(row, connecting_cpu)| {
            let remote = targets
                .iter()
                .find(|t| t.addr == row.dst.ip() && t.model.end() == srap_common::rss::End::Remote);
            let receiver_cpu_planned = remote.and_then(|t| {
                let tuple = FlowTuple::from_sockets(row.src, row.dst).ok()?;
                Some(t.model.landing(&tuple).cpu)
            });
            SenderFlowRow {
                src: Some(row.src),
                dst: Some(row.dst),
                receiver_cpu_planned,
                receiver_cpu_seen: None,
                receiver_queue_seen: None,
                receiver_cpu_off_plan: false,
                receiver_seen_unknown: None,
                local_queue_planned: row.predicted_queue,
                local_cpu_planned: row.predicted_cpu,
                local_queue_seen: row.queue,
                local_cpu_seen: row.rss_cpu,
                local_softirq_cpu: Some(row.cpu),
                connecting_cpu,
            }
        })
        .collect();
}

fn receiver_row(receiver: &Peer, binder: Option<&RunningBinder>) -> ReceiverRow {
    let link = match &receiver.status {
        _ if receiver.away => "away",
        PeerStatus::Connected => "connected",
        PeerStatus::Connecting | PeerStatus::Away(_) => "connecting",
    };
    let planned = receiver.model.is_some();
    ReceiverRow {
        peer: receiver.addr.clone(),
        link: link.to_owned(),
        reason: receiver.last_reason.clone().filter(|_| receiver.away),
        version: receiver.current.as_ref().map(|c| c.version),
        addresses: receiver
            .rows
            .iter()
            .map(|(row, addr)| address_row(*row, *addr, binder.filter(|_| planned)))
            .collect(),
        grant: receiver.granted.as_ref().map(|g| GrantRow {
            epoch: g.epoch,
            cpus: g.cpus.iter().map(|c| c.cpu).collect(),
        }),
        paused: receiver.paused,
        key: receiver.current.as_ref().map(|c| c.key),
    }
}

fn address_row(row: u32, addr: std::net::IpAddr, binder: Option<&RunningBinder>) -> AddressRow {
    let mut out = AddressRow {
        addr: Some(addr),
        row,
        ..AddressRow::default()
    };
    let Some(binder) = binder else {
        return out;
    };
    out.slots = binder
        .plan
        .receivers
        .iter()
        .find(|r| r.index == row)
        .map_or(0, |r| r.slots);
    match read_occupancy(&binder.layout, row) {
        Ok(flows) => out.open_flows = flows.iter().map(|f| u64::from(*f)).sum(),
        Err(err) => warn!("reading the binder's open flows: {err}"),
    }
    out
}
