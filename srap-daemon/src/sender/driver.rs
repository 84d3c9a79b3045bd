//! The sender agent's driver loop, for both of its modes: offline
//! (`super::offline`: nothing comes from receivers) and follow
//! (`super::follow`: its receivers' sessions). What both wait on and do
//! the same way is here: what both keep beside the binder ([`Shared`]:
//! the status server, the occupancy audit, this host's closed loop), the
//! signals that stop the agent ([`Signals`]) and a stop's last steps
//! ([`stopping`]).

use anyhow::Context as _;
use srap_status::SenderStatus;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{
    audit::OccupancyAudit,
    binder::RunningBinder,
    local::source_rules,
    local_end::LocalEnd,
    options::SenderOptions,
    status::{StatusServer, add_local, binder_status},
    target::Target,
};

/// What both modes keep beside the binder.
pub(super) struct Shared {
    /// The control socket (`srap status --sender`, and `--metrics`):
    /// `None` where there is none (follow's `--once`, offline without
    /// this host's NIC when the socket is another agent's).
    pub published: Option<StatusServer>,
    /// The occupancy audit, run at every `--interval`.
    pub audit: OccupancyAudit,
    /// This host's own NIC and its closed loop, where it is planned.
    pub local: Option<LocalEnd>,
}

impl Shared {
    /// Serving on `published`, with no audit run yet and no closed loop.
    pub fn new(published: Option<StatusServer>) -> Self {
        Self {
            published,
            audit: OccupancyAudit::default(),
            local: None,
        }
    }

    /// The part of a snapshot both modes make the same way: the binder's
    /// counters (none before it exists), the audit's occupancy, and this
    /// host's end toward `targets`.
    pub fn snapshot(&self, binder: Option<&RunningBinder>, targets: &[Target]) -> SenderStatus {
        let mut status = binder.map(binder_status).unwrap_or_default();
        status.occupancy = self.audit.row();
        if let Some(local) = &self.local {
            add_local(&mut status, local, targets);
        }
        status
    }
}

/// What stops the agent: Ctrl-C (SIGINT) or SIGTERM. SIGHUP is not
/// handled: its default ends the process.
pub(super) struct Signals {
    term: Signal,
}

impl Signals {
    /// Catches SIGTERM from now on (until then its default ends the
    /// process, with nothing said).
    pub fn catch() -> anyhow::Result<Self> {
        let term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        Ok(Self { term })
    }

    /// Waits for Ctrl-C or SIGTERM. A Ctrl-C is listened for only while
    /// this is awaited (`tokio::signal::ctrl_c` anew each time, as the
    /// loops always did); a SIGTERM is kept until the next wait.
    pub async fn stop(&mut self) {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// A stop's last steps: tells systemd, removes the source rules
/// `--source-rules install` put in, and returns the line the mode logs
/// (each under its own target, as the log has always named it).
pub(super) fn stopping(binder: &RunningBinder, options: &SenderOptions) -> String {
    crate::notify::stopping();
    source_rules::remove_on_stop(options.nics.source_rules);
    format!(
        "stopping; steering continues (`srap-agent detach --pin-dir {}` removes it)",
        binder.layout.dir().display()
    )
}
