//! Drift made on purpose in a running binder's occupancy, for the tests of
//! the agent's audit: the lab object's `srap_occupancy_inject`, loaded with
//! the binder's pinned maps and run once through `BPF_PROG_TEST_RUN`, claims
//! one flow of a slot with the binder's own steps and records it for a
//! cookie that is no socket, as a socket that closed without freeing its
//! record leaves them (with cookie 0, the count alone: a count mismatch).
//! The agent's audit must find and repair either.

use srap_common::{
    binder::{BinderConfig, BinderSizes, LoadConfig},
    repair::{INJECT_PROGRAM, RepairRequest, op, result},
};
use srap_daemon::sender::{self, audit, layout::PinLayout};

/// Why a drift could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("loading the lab's object beside the binder: {0}")]
    Load(#[from] sender::SenderError),
    #[error("running {INJECT_PROGRAM}: {0}")]
    Run(#[from] audit::AuditError),
    #[error("{INJECT_PROGRAM} answered {0}: the slot is missing or its word changed")]
    Refused(u32),
}

/// Records slot (`receiver`, `slot`) for `cookie`, which must be no socket,
/// and counts one flow more in it (cookie 0: the count alone), in the
/// binder pinned at `layout`.
pub fn inject_stale_record(
    layout: &PinLayout,
    receiver: u32,
    slot: u32,
    cookie: u64,
) -> Result<(), DriftError> {
    // The maps at the sizes the running binder pinned them with, indexed
    // as its hooks index them.
    let sizes = sender::pinned_sizes(layout).unwrap_or(BinderSizes::DEFAULT);
    let config = LoadConfig {
        binder: BinderConfig {
            socket_mask: sizes.socket_rows() - 1,
            row_slots: sizes.cpus,
            sizes,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut ebpf = sender::load(
        layout,
        crate::lab_object::lab_ebpf_object(),
        &sizes,
        &config,
    )?;
    let request = RepairRequest {
        op: op::INJECT,
        receiver,
        slot,
        cookie,
        ..RepairRequest::default()
    };
    match audit::run(&mut ebpf, INJECT_PROGRAM, request)?.result {
        result::DONE => Ok(()),
        other => Err(DriftError::Refused(other)),
    }
}
