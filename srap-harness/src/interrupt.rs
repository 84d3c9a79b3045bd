//! Ctrl-C, SIGTERM and SIGHUP as a flag every wait of the harness checks,
//! so an interrupted run unwinds through its drop guards and leaves
//! nothing behind. The lab registers for the signals ([`on_signals`]); a
//! test never does, and its waits run to their own deadlines.

use std::sync::{
    Arc, LazyLock,
    atomic::{AtomicBool, Ordering},
};

use anyhow::Context as _;

/// Set by SIGINT, SIGTERM and SIGHUP once [`on_signals`] registered for
/// them.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Sets the flag [`interrupted`] reads on SIGINT, SIGTERM and SIGHUP (the
/// terminal or SSH session closed) instead of ending the process.
pub fn on_signals() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&INTERRUPTED))
            .with_context(|| format!("handling signal {signal}"))?;
    }
    Ok(())
}

/// True once Ctrl-C, SIGTERM or SIGHUP arrived after [`on_signals`]: every
/// wait checks it, so the drop guards tear everything down.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}
