//! The kernel's MPTCP path manager, driven from user space: the generic
//! netlink family `mptcp_pm` (`include/uapi/linux/mptcp_pm.h`), through
//! which the *userspace* path manager of a network namespace opens each
//! further subflow of a connection (from a local address **and port** it
//! names), marks subflows backup (`MP_PRIO`), announces addresses, and
//! hears every connection's and subflow's life as events.
//!
//! * [`message`]: the family's numbers and its requests, as pure byte
//!   layouts;
//! * [`events`]: its notices parsed into [`PmEvent`]s;
//! * [`client`]: the sockets that send the requests ([`PathManager`]) and
//!   hear the events ([`PmEvents`]);
//! * [`kind`]: which path manager a namespace runs (`net.mptcp.pm_type`,
//!   `net.mptcp.path_manager`), read and switched.
//!
//! It holds no policy: which subflow to open or to mark is the daemon's.

pub mod client;
pub mod events;
pub mod kind;
pub mod message;

pub use client::{PathManager, PmEvents};
pub use events::{PmEvent, PmEventKind};
pub use kind::PathManagerKind;
pub use message::{FLAG_SIGNAL, FLAG_SUBFLOW, PmEndpoint, PmEndpointEntry, PmLimits};
