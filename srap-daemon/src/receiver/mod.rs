//! `srap-agent receiver`: serves this host's RSS description to sender
//! agents over TCP (protocol: [`srap_common::wire`]) and pushes every new
//! version to them.
//!
//! Hostile peers cost bounded time and memory: the allow-list is checked on
//! accept before anything is read; at most [`ServerConfig::max_peers`]
//! sessions run at once (others get an error and are closed); every read and
//! write has a deadline ([`Timeouts`]); an unauthenticated peer's frames are
//! limited to [`MAX_HANDSHAKE_FRAME`](srap_common::wire::MAX_HANDSHAKE_FRAME)
//! bytes. A peer that breaks the protocol is told why and disconnected; the
//! server goes on.

pub mod access;
pub mod allow;
mod config;
pub mod downstream;
pub mod grants;
pub mod monitor;
pub mod nics;
mod pace;
mod rewrite;
mod seen;
mod server;
mod session;
mod shared;
pub mod source;

pub use self::{
    allow::AllowList,
    config::{DEFAULT_MAX_PEERS, ServerConfig, Timeouts},
    downstream::Peers,
    grants::{GrantRow, Grants, Offer},
    server::Server,
    shared::Plans,
    source::{LearnedKey, ServedDescription, Source, SourceError},
};
