//! Types SRAP shares between its eBPF programs and user space, and — with the
//! `user` feature — the one model of a receiver NIC's RSS: Toeplitz hashing,
//! hashed fields and input transforms, indirection, the source-port solver and
//! the flow planner.
//!
//! The crate root is `no_std` so the eBPF programs can use the `#[repr(C)]` map
//! types in [`binder`], [`observer`] and [`emulator`] exactly as user space
//! sees them.
//!
//! It must NOT hold what only one side uses (the receiver's CPU-grant
//! allocator is `srap_daemon::receiver::grants`), kernel access or
//! sockets (`srap-host`, `srap-status` and `srap-daemon` do those; reading
//! a description file is the most I/O here), nor anything the `no_std`
//! root cannot build.
#![cfg_attr(not(feature = "user"), no_std)]

pub mod binder;
pub mod emulator;
pub mod family;
pub mod local_nics;
pub mod observer;
pub mod occupancy;
pub mod protocol;
pub mod reader;
pub mod receiver_nics;
pub mod repair;
pub mod sizes;
pub mod xorshift;

#[cfg(feature = "user")]
pub mod bond;
#[cfg(feature = "user")]
pub mod ends;
#[cfg(feature = "user")]
pub mod odds;
#[cfg(feature = "user")]
pub mod planner;
#[cfg(feature = "user")]
pub mod port_range;
#[cfg(feature = "user")]
pub mod port_tables;
#[cfg(feature = "user")]
pub mod rss;
#[cfg(feature = "user")]
pub mod solver;
#[cfg(feature = "user")]
pub mod wire;
