//! The sender agent's status for `srap status --sender` (and
//! `--metrics`): the server of the latest snapshot ([`StatusServer`]), and
//! the parts of a snapshot both modes make the same way — the binder's
//! counters ([`binder_status`]) and this host's end ([`add_local`]). The
//! follow mode adds its receivers' rows (`super::follow`).

use std::{path::Path, sync::Arc};

use srap_common::{binder::COUNTER_NAMES, rss::FlowTuple};
use srap_status::{
    ControlSocket, SenderStatus,
    control::serve,
    sender::{LocalNicRow, LocalRoutingRow, LocalRow, SenderFlowRow, SpreadFailingRow},
};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{
    binder::RunningBinder,
    local::{
        nics::{HostNic, LocalNics},
        routing::RoutingReport,
        source_models::SourceModel,
    },
    local_end::LocalEnd,
    maps::read_stats,
    target::Target,
};

/// The sender agent's control socket, serving the latest status snapshot
/// (and, with `--metrics`, the same snapshot as Prometheus text).
pub struct StatusServer {
    _socket: ControlSocket,
    tx: watch::Sender<Arc<SenderStatus>>,
    task: tokio::task::JoinHandle<()>,
    /// `--metrics`: the same snapshot as Prometheus text.
    metrics: Option<tokio::task::JoinHandle<()>>,
}

impl StatusServer {
    /// Makes the socket at `path` and serves an empty snapshot until the
    /// first [`StatusServer::update`].
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

    /// Serves `status` from now on, each of this host's NICs with the open
    /// flows whose source address it holds counted (both modes' flows
    /// are filled by then).
    pub fn update(&self, mut status: SenderStatus) {
        status.count_local_nic_flows();
        self.tx.send_replace(Arc::new(status));
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(metrics) = &self.metrics {
            metrics.abort();
        }
    }
}

/// The routing check as the status shows it.
fn local_routing_row(report: &RoutingReport) -> LocalRoutingRow {
    LocalRoutingRow {
        checked: report.checked,
        source_rules: report.mode.to_string(),
        findings: report.findings.iter().map(ToString::to_string).collect(),
        installed: report.installed.clone(),
        not_installed: report.not_installed.clone(),
    }
}

/// The receiver addresses marked failing, as the agent last read them
/// ([`super::spread::failing`]).
fn spread_failing_rows(binder: &RunningBinder) -> Vec<SpreadFailingRow> {
    let now = std::time::Instant::now();
    binder
        .syn_fallback
        .marked()
        .map(|f| SpreadFailingRow {
            asked: f.asked,
            used: f.used,
            port: f.port,
            syns: f.syns,
            readmit_in_ms: f.readmit_in(now).as_millis() as u64,
        })
        .collect()
}

/// The binder's part of a snapshot: where it steers, its reservation and
/// its counters.
pub fn binder_status(binder: &RunningBinder) -> SenderStatus {
    let mut status = SenderStatus {
        cgroup: binder.cgroup.display().to_string(),
        pin_dir: binder.layout.dir().display().to_string(),
        local_nics: local_nic_rows(&binder.plan.host.nics, &binder.plan.local_sources),
        local_nics_policy: binder.local_nics.to_string(),
        local_nic_replans: binder.local_nic_replans,
        local_routing: local_routing_row(&binder.plan.host.routing),
        spread_failing: spread_failing_rows(binder),
        start: binder.start.clone(),
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

/// This host's NICs as the plan was last made for them (their flows are
/// counted when the snapshot is served), each with the description its
/// addresses were placed with (`sources`).
fn local_nic_rows(nics: &LocalNics, sources: &[SourceModel]) -> Vec<LocalNicRow> {
    nics.nics
        .iter()
        .map(|nic| {
            let chosen = sources
                .iter()
                .find(|c| c.nic.as_deref() == Some(nic.name.as_str()));
            LocalNicRow {
                placed_with: chosen.map(|c| {
                    c.described_by
                        .clone()
                        .unwrap_or_else(|| "--local-rss".into())
                }),
                fallback: chosen
                    .and_then(|c| c.fallback.as_ref())
                    .map(ToString::to_string),
                ..local_nic_row(nic)
            }
        })
        .collect()
}

/// One NIC's own row.
fn local_nic_row(nic: &HostNic) -> LocalNicRow {
    LocalNicRow {
        name: nic.name.clone(),
        node: nic.node,
        addresses: nic.addresses.iter().copied().collect(),
        up: nic.up,
        members: nic.members.clone(),
        given: nic.given,
        queue_cpu: nic.queue_cpu().map(<[u32]>::to_vec),
        flows: 0,
        placed_with: None,
        fallback: None,
    }
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
        steer: local.placed_ends.to_string(),
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
                asked: None,
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
