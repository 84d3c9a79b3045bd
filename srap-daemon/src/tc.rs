//! Attaching a tc program, the one way the observer and the lab's emulator
//! do it: through a tcx link (Linux ≥ 6.6, no qdisc needed) or a filter on
//! a `clsact` qdisc (older kernels).

use aya::programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType, tc};
use tracing::{debug, info};

/// How a tc program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcMode {
    Tcx,
    Clsact,
}

/// Attaches a loaded `program` to `iface` in `direction` through `mode`. A
/// `clsact` qdisc added here stays on the device after detach: it is inert
/// without filters, and removing it could remove someone else's.
pub fn attach(
    program: &mut SchedClassifier,
    iface: &str,
    direction: TcAttachType,
    mode: TcMode,
) -> Result<(), ProgramError> {
    let options = match mode {
        TcMode::Tcx => tc::TcAttachOptions::TcxOrder(LinkOrder::default()),
        TcMode::Clsact => {
            match tc::qdisc_add_clsact(iface) {
                Ok(()) => debug!(iface, "added a clsact qdisc"),
                // Usually "already there" (ours from before, or someone
                // else's): use it; if it is worse, the attach says so.
                Err(err) => debug!(iface, %err, "clsact qdisc not added"),
            }
            tc::TcAttachOptions::Netlink(tc::NlOptions::default())
        }
    };
    program
        .attach_with_options(iface, direction, options)
        .map(drop)
}

/// tcx first, then a `clsact` filter; the mode that took.
pub fn attach_with_fallback(
    program: &mut SchedClassifier,
    iface: &str,
    direction: TcAttachType,
) -> Result<TcMode, ProgramError> {
    match attach(program, iface, direction, TcMode::Tcx) {
        Ok(()) => Ok(TcMode::Tcx),
        Err(tcx_error) => {
            info!(iface, %tcx_error, "tcx refused; using a clsact qdisc");
            attach(program, iface, direction, TcMode::Clsact).map(|()| TcMode::Clsact)
        }
    }
}
