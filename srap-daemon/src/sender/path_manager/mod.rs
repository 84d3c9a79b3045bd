//! SRAP as the userspace MPTCP path manager of its namespace
//! (`--mptcp follow-reader`): which node reads each connection now, so
//! that its data can come in through that node's NIC.
//!
//! * [`reads`]: the reader tracepoint attached, its connections followed
//!   and their reads per node read back.
//!
//! It must NOT speak netlink itself (`srap_host::mptcp_pm` does) nor
//! decide a connection's ports (the plan's tables do).

pub mod reads;

pub use reads::{ReaderError, Reads};
