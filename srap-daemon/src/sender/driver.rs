//! The sender agent's driver loop, for both of its modes: offline
//! (`super::offline`: nothing comes from receivers) and follow
//! (`super::follow`: its receivers' sessions). What both wait on and do
//! the same way is here: the signals that stop the agent ([`Signals`]) and
//! a stop's last steps ([`stopping`]).

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{binder::RunningBinder, local::source_rules, options::SenderOptions};

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
