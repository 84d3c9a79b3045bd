//! A receiver with a real RSS device: a QEMU guest whose multi-queue NIC
//! hashes with Toeplitz and an indirection table computed by QEMU — a
//! virtio-net device seen through Linux's own `virtio_net` driver, or an
//! emulated Intel 82576 seen through Linux's own `igb` driver. These are the
//! NICs in the lab whose RSS SRAP did not write, so what they show — their
//! `ethtool -S` per-queue counters, the ports the guest's server accepted —
//! is ground truth.
//!
//! The guest's tap lives in a namespace made here; QEMU runs in it and is
//! killed by PID on drop, before the namespace (and the tap) go.
//!
//! [`qemu`] is the guest itself; [`image`] and [`files`] what it boots
//! from; [`shell`] its serial console; [`truth`] what its own tools say;
//! [`bond`] and [`bond_lab`] a guest whose NICs are bonded; [`numa`] a
//! guest with two NUMA nodes and a NIC on each, and [`numa_lab`] rounds of
//! reading threads in it, with the kernel's choice of NIC and SRAP's;
//! [`receiver_nics_lab`] that guest as a receiver with two NICs, and
//! [`mptcp_lab`] it serving MPTCP, a subflow of each connection through
//! each NIC; [`follow_lab`] MPTCP connections whose readers move between
//! the nodes, and the path manager that follows them.

pub mod bond;
pub mod bond_lab;
pub mod files;
pub mod follow_lab;
pub mod image;
pub mod mptcp_lab;
pub mod numa;
pub mod numa_lab;
pub mod qemu;
pub mod receiver_nics_lab;
pub mod shell;
pub mod truth;

pub use files::{GuestFiles, GuestKernel};
pub use image::GuestImage;
pub use qemu::{
    COMMAND_TIMEOUT, GUEST_IFACE, Guest, GuestNet, GuestNic, GuestShape, NodeLink, Sampled,
    StatusSamples,
};
pub use shell::GuestShell;
