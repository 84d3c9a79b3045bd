//! SRAP's eBPF programs, built into one object (`srap`) by
//! `srap-daemon/build.rs`; `srap-daemon` embeds it and `srap-agent` loads
//! it through that library.
//!
//! * [`binder`]: the port binder, `cgroup/connect4` and `connect6`
//!   (`srap_connect4`, `srap_connect6`), `bind4`/`bind6`,
//!   `cgroup/sock_release` and, for the sockets that hook never sees
//!   (MPTCP's subflows), `sock_ops` (`srap_tcp_close`).
//! * [`observer`]: the receive observer, XDP (`srap_obs_xdp`) and tc ingress
//!   (`srap_obs_tc`) variants of the same per-flow accounting.
//! * [`sock_observer`]: the receive observer without per-packet work,
//!   `sock_ops` on a cgroup (`srap_obs_sock`), and its sender side on the
//!   steered cgroup (`srap_obs_local`: where opened connections land on
//!   this host's own NIC).
//! * [`reader`]: which NUMA node reads each MPTCP connection the agent
//!   follows, a raw tracepoint on `sock:sock_recv_length` (`srap_reader`).
//! * [`repair`]: the sender agent's occupancy audit repairs, XDP run only
//!   through `BPF_PROG_TEST_RUN` (`srap_occupancy_repair`), with the
//!   binder's own functions.
//!
//! It holds only what the agents load: the lab's RSS-NIC emulator, the
//! benchmarks' bare programs and the tests' drift injector are the
//! `srap-lab` object's (`src/lab.rs`).
#![no_std]
#![no_main]
// Atomic adds on map memory: core's atomics have no RMW on the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod binder;
mod kernel_memory;
mod object;
mod observer;
mod packet;
mod reader;
mod repair;
mod sock_observer;
mod sockaddr;
