//! What the receiver agent reports of where flows land: the [`Status`]
//! snapshot (`snapshot`), computed from the receive verifier's records by
//! the pure [`Tracker`] (`tracker`, with the senders' plans in a
//! [`PlanIndex`]), served on the control socket (`control`, read by
//! `srap status`) and as Prometheus text (`metrics`).

pub mod agreement;
pub mod control;
pub mod metrics;
pub mod plan_index;
pub mod snapshot;
pub mod tracker;

pub use control::{ControlError, ControlSocket, DEFAULT_CONTROL_PATH, request_status};
pub use plan_index::PlanIndex;
pub use snapshot::{
    Accuracy, Collisions, CpuRow, FlowRow, Landings, PeerRow, QueueRow, Ratio, Status,
    VerifierState,
};
pub use tracker::{Observation, Tracker, TrackerConfig};
