//! What the receiver agent reports of where flows land, as `srap status`
//! reads it (and what the sender agent reports of itself, `sender`): the [`Status`] snapshot (`snapshot`), the control socket that
//! serves it (`control`, with the client `srap status` uses) and its
//! Prometheus text (`metrics`). The daemon computes it (`srap_daemon::tracker`).

pub mod control;
pub mod metrics;
pub mod sender;
pub mod snapshot;

pub use control::{
    ControlError, ControlSocket, DEFAULT_CONTROL_PATH, request_sender_status, request_status,
};
pub use sender::{DEFAULT_SENDER_CONTROL_PATH, SenderStatus};
pub use snapshot::{
    Access, Accuracy, Collisions, CpuRow, FlowRow, Landings, LearningRow, NicHashCounts, PeerRow,
    QueueRow, Ratio, ReceiveCpu, Status, VerifierLimit, VerifierState,
};
