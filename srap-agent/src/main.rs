//! `srap-agent`: the SRAP daemon: the receive observer and the sender-side
//! port binder. The commands here, their flags in `args/` (clap stays in
//! this binary), one module per command in `cmd/`.
use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};

use crate::args::{
    detach::DetachArgs, receiver::ReceiverArgs, sender::SenderArgs, verify::VerifyArgs,
};

mod args;
mod cmd;

#[derive(Parser, Debug)]
#[command(name = "srap-agent", version, about = "SRAP agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach the receive observer to an interface and print, every second,
    /// which receive queue and CPU each TCP flow lands on.
    Verify(VerifyArgs),
    /// Steer the connections of workloads in a cgroup (`srap exec`) so each
    /// lands on its own receiver CPU: fills the binder's maps, attaches and
    /// pins it, then reports its counters until stopped (steering goes on
    /// after the agent exits). Ports are chosen by 4-tuple among the whole
    /// port range and shared across destinations; none is reserved.
    // Boxed: its flags outgrew the other commands' many times over.
    Sender(Box<SenderArgs>),
    /// Remove everything `srap-agent sender` attached, pinned or reserved.
    Detach(DetachArgs),
    /// Serve this host's RSS description to sender agents (`sender --peer`)
    /// and push every change to them.
    Receiver(ReceiverArgs),
    /// Print a shell completion script to stdout (for packaging).
    #[command(hide = true)]
    Completions(srap_docs::CompletionsArgs),
    /// Write the man pages into a directory (for packaging).
    #[command(hide = true)]
    Manpages(srap_docs::ManpagesArgs),
}

fn main() -> ExitCode {
    srap_host::report::init_logs();
    let cli = Cli::parse();
    // Printed here, not returned from main: an expected failure is one line
    // whatever RUST_BACKTRACE says (panics keep their backtrace).
    srap_host::report::exit_code("srap-agent", run(cli))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Verify(args) => runtime.block_on(cmd::verify::run(
            &args.iface,
            args.hook.into(),
            args.verify_cgroup.as_deref(),
            args.duration.map(Duration::from_secs),
        )),
        Command::Sender(args) if args.check => cmd::sender::check(&(*args).into()),
        Command::Sender(args) => cmd::sender::run(&(*args).into(), &runtime),
        Command::Detach(args) => cmd::detach::run(&args),
        Command::Receiver(args) if args.check => cmd::receiver::check(&args),
        Command::Receiver(args) => runtime.block_on(cmd::receiver::run(&args)),
        Command::Completions(args) => Ok(srap_docs::completions(Cli::command(), &args)?),
        Command::Manpages(args) => Ok(srap_docs::manpages(Cli::command(), &args)?),
    }
}

#[cfg(test)]
mod tests {
    // Every `srap-agent` command line README.md and docs/ show (and every
    // `cargo xtask run -- ARGS`, which runs `srap-agent ARGS`) parses as
    // they show it: a renamed flag or subcommand fails here, naming the page.
    doc_commands::parse_test!(doc_commands::Program::Agent, super::Cli);
}
