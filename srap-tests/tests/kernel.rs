//! The integration tests that need no guest: real programs attached to
//! real cgroups and interfaces, real TCP between network namespaces the
//! tests create, the agents run as processes (`cargo build --bins` first,
//! as `cargo xtask test` does). One binary, a module per suite, so the
//! suites share one compile and one link; their tests run side by side as
//! any two tests of one suite do. Privileged tests are `#[ignore]`d: run
//! them as root with `--include-ignored`.

mod binder;
mod dashboard;
mod directions;
mod discovery;
mod emulator;
mod fleets;
mod grants;
mod key_rotation;
mod least_privilege;
mod local_nic_descriptions;
mod local_nics;
mod moving_readers;
mod multipeer;
mod nic_choice;
mod nic_grants;
mod observer;
mod path_manager;
mod peer;
mod receiver;
mod receiver_nics;
mod receiver_spread;
mod source_routes;
mod status;
mod throughput;
