//! The integration tests that boot a machine: QEMU guests with a real RSS
//! device (virtio-net, igb) or a bond of them, and Debian machines under
//! systemd-nspawn. One binary, a module per suite, and one guest at a time
//! over all of them ([`ONE_GUEST`]): two cores cannot run two guests well,
//! nor a guest beside a booted machine.

/// Held by every test while its guest or machine runs.
static ONE_GUEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

mod bond;
mod bond_steering;
mod fleet;
mod follow_reader;
mod guest_nics;
mod mptcp_nics;
mod numa_nics;
mod spread_nics;
mod units;
mod virtio;
