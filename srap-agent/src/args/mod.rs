//! Every command's flags, one module per command: clap lives in this
//! binary only (as ripgrep keeps its flags in its binary), and each
//! command's module in `cmd/` hands the library plain settings.

pub mod detach;
pub mod receiver;
pub mod sender;
pub mod verify;

use std::collections::BTreeSet;

/// A cpulist flag (`--cpus`, `--local-cpus`): `0-7,16-23`, never empty.
fn parse_cpus(text: &str) -> Result<BTreeSet<u32>, srap_host::cpulist::CpuListError> {
    srap_host::cpulist::parse_some(text)
}
