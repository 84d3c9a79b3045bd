//! What the agents report of themselves, in a home of its own that `srap`
//! (srap-cli) and the daemon share: the receiver's [`Status`] snapshot
//! ([`snapshot`]: where flows land), the sender's [`SenderStatus`]
//! ([`sender`]), the control socket that serves either ([`control`], with
//! the client `srap status` uses), their Prometheus text on `/metrics`
//! ([`metrics`]), and the bounded accept loop both servers run
//! ([`bounded`]). The daemon computes what goes in (`srap_daemon::tracker`).
//!
//! It must NOT hold kernel access beyond its own sockets (discovery, eBPF,
//! cgroups and the like are `srap-host`'s or the daemon's) nor daemon
//! logic: `srap` builds on stable alone through it, so it must never depend
//! on `srap-daemon` or `srap-ebpf` (`cargo xtask test` checks the graph).

pub mod bounded;
pub mod control;
pub mod metrics;
pub mod sender;
pub mod snapshot;

pub use control::{
    ControlError, ControlSocket, DEFAULT_CONTROL_PATH, request_sender_status, request_status,
};
pub use sender::{DEFAULT_SENDER_CONTROL_PATH, SenderStatus};
pub use snapshot::{
    Access, Accuracy, Collisions, CpuRow, FlowRow, Landings, LearningRow, ListenerRow, NicGrantRow,
    NicHashCounts, NicRow, ObserverLimit, ObserverState, PeerRow, QueueRow, Ratio, ReceiveCpu,
    Status,
};
