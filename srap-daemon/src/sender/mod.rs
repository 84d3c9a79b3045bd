//! The sender side of SRAP: the transparent port binder.
//!
//! [`start`] computes port tables for each receiver from its RSS model,
//! writes them into the binder's maps, loads the hooks with the settings
//! as constants (a feature that is off is neither verified nor run), and
//! attaches them to a cgroup through pinned links; the pins keep steering running whether or
//! not the agent does. [`detach()`] undoes all of it. No port is reserved: the
//! hook chooses by 4-tuple among every port of the range, as the kernel
//! does, so the host's other applications keep their ephemeral ports (see
//! `docs/binder.md` for the measurement). Workloads join the cgroup with `srap exec`.
//! Two modes run it, each a part of one driver loop (`driver`): [`offline`]
//! plans once (`--rss`, or `--steer local`); with `--peer`, [`follow`]
//! fetches the description from the receiver agent and [`replan()`]
//! refills the maps whenever it changes.
//!
//! # Layering
//!
//! Floors, bottom to top. A module imports (`super::…`,
//! `crate::sender::…`) only modules of its own floor or below, and no two
//! import each other; this file is the index and is imported by none.
//! A unit test (`layering.rs`) reads the sources and holds them to it: a
//! new module is given its floor there and here.
//!
//! 1. **Words** — imports nothing of the sender but each other:
//!    [`choices`] (each enum-valued setting, defined once), [`error`] (one error for
//!    the sender), [`layout`] (the pin paths), [`rate`], [`ends`] (which
//!    ends' NICs a flow is placed on, and this host's settings),
//!    [`target`] (a receiver address with its host's model), [`landings`] (the socket hook reading where this
//!    host's connections land), [`spread`] (`--receiver-nics`: the rows
//!    of a receiver's addresses a connect may be sent to).
//! 2. **This host and the binder's records**: [`local`] (this host's
//!    addresses, routes and bonds toward the receivers, its NICs as one
//!    list and the source routing they need, its own NIC, the reader
//!    rows), [`state`] (what `detach` must undo), `attach` (loading,
//!    pinning, attaching).
//! 3. **The plan and the settings**: [`plan`] (pure computation over the
//!    receivers' models and a [`local::LocalHost`] snapshot), [`config`]
//!    (the TOML file, its enum-valued keys parsed into the settings' own
//!    enums), [`settings`] (the flags over the `--config` file), [`options`] (what a binder is
//!    started with, made from the settings).
//! 4. **The maps**: `maps` (the plan written, the counters read), [`grant`]
//!    (the receivers' CPU grants in the maps).
//! 5. **The running binder**: [`binder`] (start, pins), [`detach`](mod@detach).
//! 6. **Loops over a running binder**: [`summary`], [`replan`](mod@replan), [`watch`]
//!    (the counters), [`audit`] (occupancy against the kernel's sockets),
//!    [`bond_members`] (the bond members' counters), [`mptcp`] (the MPTCP
//!    connections among the flows, by the kernel's tokens), [`local_end`]
//!    (this host's NIC's closed loop and its grant), [`path_manager`]
//!    (SRAP as the namespace's MPTCP path manager: who reads each
//!    connection).
//! 7. **The modes' core**: [`status`] (the served snapshot and the parts
//!    both modes make), [`resolve`] (names to addresses), `driver` (the
//!    loop both modes run: its timers, signals and shared steps).
//! 8. **The modes**: [`offline`] and [`follow`], which import nothing of
//!    each other.

mod attach;
pub mod audit;
pub mod binder;
pub mod bond_members;
pub mod choices;
pub mod config;
pub mod detach;
mod driver;
pub mod ends;
pub mod error;
pub mod follow;
pub mod grant;
pub mod landings;
#[cfg(test)]
mod layering;
pub mod layout;
pub mod local;
pub mod local_end;
mod maps;
pub mod mptcp;
pub mod offline;
pub mod options;
pub mod path_manager;
pub mod plan;
pub mod rate;
pub mod replan;
pub mod resolve;
pub mod settings;
pub mod spread;
pub mod state;
pub mod status;
pub mod summary;
pub mod target;
pub mod watch;

pub use attach::{Attachment, check_bpffs, load, pinned_sizes, settings_text};
pub use binder::{RunningBinder, create_maps, plan_for, remove_pins, start};
pub use detach::{DetachReport, detach};
pub use error::SenderError;
pub use layout::{DEFAULT_PIN_DIR, PinLayout};
pub use maps::{
    BinderStats, pinned_memory, read_config, read_grant, read_occupancy, read_receiver, read_stats,
    read_turn,
};
pub use options::SenderOptions;
pub use plan::Plan;
pub use rate::PacingRate;
pub use replan::{replan, replan_if_sources_changed};
pub use state::SenderState;
pub use target::Target;
