//! The eBPF programs of the lab and the benchmarks, built into an object of
//! their own (`srap-lab`) so the agents' object (`srap`, `src/main.rs`)
//! holds only what the agents load. `srap-harness` embeds it.
//!
//! * [`emulator`]: the lab's RSS-NIC emulator, tc egress (`srap_rss_nic`).
//! * [`bare`]: do-nothing programs of the hooks the observer and the binder
//!   use, the benchmarks' baselines.
//! * [`inject`]: the occupancy audit's test rig (`srap_occupancy_inject`),
//!   which makes a drift with the binder's own steps. It compiles the
//!   binder and its repairs in for those steps and their maps (the loader
//!   puts the running binder's pinned maps in their place); their programs
//!   are never loaded from this object.
#![no_std]
#![no_main]
// Atomic adds on map memory, in the binder's steps the inject uses.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod bare;
mod binder;
mod emulator;
mod inject;
mod kernel_memory;
mod object;
mod packet;
mod repair;
mod sockaddr;
