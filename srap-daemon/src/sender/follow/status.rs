//! The sender agent's status snapshot for `srap status --sender`, made
//! from the follow loop's state and the binder's pinned maps, and served
//! on the agent's control socket.

use std::{path::Path, sync::Arc};

use srap_common::binder::outcome;
use srap_host::status::{
    ControlSocket, SenderStatus,
    control::serve,
    sender::{AddressRow, GrantRow, ReceiverRow},
};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{Follower, receivers::Receiver};
use crate::{
    sender::{RunningBinder, read_occupancy, read_stats},
    upstream::PeerStatus,
};

/// The control socket and the latest snapshot it serves.
pub struct Published {
    _socket: ControlSocket,
    tx: watch::Sender<Arc<SenderStatus>>,
    task: tokio::task::JoinHandle<()>,
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
        })
    }

    pub fn update(&self, status: SenderStatus) {
        self.tx.send_replace(Arc::new(status));
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Follower {
    /// The snapshot of every receiver and the binder.
    pub(super) fn status(&self, steering: Option<&RunningBinder>) -> SenderStatus {
        let mut status = SenderStatus {
            receivers: self
                .receivers
                .iter()
                .map(|r| receiver_row(r, steering))
                .collect(),
            ..SenderStatus::default()
        };
        if let Some(steering) = steering {
            status.cgroup = steering.cgroup.display().to_string();
            status.pin_dir = steering.layout.dir().display().to_string();
            match read_stats(&steering.layout) {
                Ok(stats) => {
                    status.binder = outcome::NAMES
                        .iter()
                        .zip(stats.counts)
                        .map(|(name, count)| ((*name).to_owned(), count))
                        .collect();
                }
                Err(err) => warn!("reading the binder's counters: {err}"),
            }
        }
        status
    }
}

fn receiver_row(receiver: &Receiver, steering: Option<&RunningBinder>) -> ReceiverRow {
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
            .map(|(row, addr)| address_row(*row, *addr, steering.filter(|_| planned)))
            .collect(),
        grant: receiver.granted.as_ref().map(|g| GrantRow {
            epoch: g.epoch,
            cpus: g.cpus.iter().map(|c| c.cpu).collect(),
        }),
        paused: receiver.paused,
        key: receiver.current.as_ref().map(|c| c.key),
    }
}

fn address_row(row: u32, addr: std::net::IpAddr, steering: Option<&RunningBinder>) -> AddressRow {
    let mut out = AddressRow {
        addr: Some(addr),
        row,
        ..AddressRow::default()
    };
    let Some(steering) = steering else {
        return out;
    };
    out.slots = steering
        .plan
        .receivers
        .iter()
        .find(|r| r.index == row)
        .map_or(0, |r| r.slots);
    match read_occupancy(&steering.layout, row) {
        Ok(flows) => out.open_flows = flows.iter().map(|f| u64::from(*f)).sum(),
        Err(err) => warn!("reading the binder's open flows: {err}"),
    }
    out
}
