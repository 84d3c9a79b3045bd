//! Types SRAP shares between its eBPF programs and user space, and — with the
//! `user` feature — the one model of a receiver NIC's RSS: Toeplitz hashing,
//! hashed fields and input transforms, indirection, the source-port solver and
//! the flow planner.
//!
//! The crate root is `no_std` so the eBPF programs can use the `#[repr(C)]` map
//! types in [`binder`], [`verifier`] and [`emulator`] exactly as user space
//! sees them.
#![cfg_attr(not(feature = "user"), no_std)]

pub mod binder;
pub mod emulator;
pub mod family;
pub mod occupancy;
pub mod repair;
pub mod sizes;
pub mod verifier;
pub mod xorshift;

#[cfg(feature = "user")]
pub mod ends;
#[cfg(feature = "user")]
pub mod grants;
#[cfg(feature = "user")]
pub mod odds;
#[cfg(feature = "user")]
pub mod planner;
#[cfg(feature = "user")]
pub mod rss;
#[cfg(feature = "user")]
pub mod solver;
#[cfg(feature = "user")]
pub mod steering;
#[cfg(feature = "user")]
pub mod wire;
