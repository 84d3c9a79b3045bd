//! `srap-lab`: SRAP on one machine, as its own binary so that the root
//! daemon (`srap-agent`, which the packages install with `CAP_BPF` and
//! `CAP_NET_ADMIN`) carries no QEMU control, plotting or test harness.
//! Thin over the library: the flags are [`srap_lab::LabArgs`], the run is
//! [`srap_lab::run`]; logs and the error that ends it are printed as
//! `srap-agent` prints them. It runs the `srap-agent` and `srap` built
//! beside it (`cargo build --release --bins`; `cargo xtask lab` does).
use std::process::ExitCode;

use clap::Parser;

/// SRAP on one machine: two namespaces joined by a veth that emulates a
/// 32-queue RSS NIC, a workload with kernel ports and with SRAP's.
#[derive(Parser, Debug)]
#[command(name = "srap-lab", version)]
struct Cli {
    #[command(flatten)]
    lab: srap_lab::LabArgs,
}

fn main() -> ExitCode {
    srap_host::report::init_logs();
    let cli = Cli::parse();
    // Printed here, not returned from main: an expected failure is one line
    // whatever RUST_BACKTRACE says (panics keep their backtrace).
    srap_host::report::exit_code("srap-lab", srap_lab::run(&cli.lab))
}

#[cfg(test)]
mod tests {
    // Every `srap-lab` command line README.md and docs/ show (and every
    // `cargo xtask lab -- ARGS`, which runs `srap-lab ARGS`) parses as they
    // show it: a renamed flag fails here, naming the page.
    doc_commands::parse_test!(doc_commands::Program::Lab, super::Cli);
}
