//! SRAP as the userspace MPTCP path manager of its namespace
//! (`--mptcp follow-reader`): which node reads each connection now, so
//! that its data can come in through that node's NIC.
//!
//! * [`reads`]: the reader tracepoint attached, its connections followed
//!   and their reads per node read back;
//! * [`reader_node`]: which node reads a connection now, with enough
//!   hysteresis that a moment's move flips nothing;
//! * [`connections`]: the namespace's connections and what each asks of
//!   the kernel (subflows, announcements, backup flags), pure;
//! * [`manager`]: all of it running on a thread of its own, the
//!   namespace's path manager switched and restored;
//! * [`status`]: what it has done and follows, for the agent's status.
//!
//! It must NOT speak netlink itself (`srap_host::mptcp_pm` does) nor
//! decide a connection's ports (the plan's tables do).

pub mod connections;
pub mod manager;
pub mod reader_node;
pub mod reads;
pub mod status;

pub use manager::{FollowReader, FollowSettings, PathManagerError};
pub use reads::{ReaderError, Reads};
