//! `srap`: SRAP's command-line tool.
//!
//! Each subcommand lives in a module of its own; this file only parses the
//! command line and reports errors.

mod exec;
mod hash;
mod odds;
mod predict;
mod rss;
mod rss_file;
mod status;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "srap",
    version,
    about = "Sender-side Receiver-Aware Port selection"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Toeplitz RSS hash of one 4-tuple, as the receiver's NIC computes it.
    Hash(hash::Args),
    /// Source ports that put N flows on distinct receiver CPUs.
    Predict(predict::Args),
    /// How often random source ports collide on the receiver's CPUs.
    Odds(odds::Args),
    /// Run a command in the steered cgroup: its connections get SRAP's ports.
    Exec(exec::Args),
    /// The RSS of a local NIC, discovered from the kernel.
    Rss(rss::Args),
    /// Where flows land on this receiver: a dashboard of queues, CPUs,
    /// collisions and prediction accuracy, from `srap-agent receiver`.
    Status(status::Args),
    /// Print a shell completion script (bash, zsh, fish, …) to stdout.
    Completions(srap_docs::CompletionsArgs),
    /// Write the man pages into a directory (for packaging).
    #[command(hide = true)]
    Manpages(srap_docs::ManpagesArgs),
}

fn main() -> ExitCode {
    die_quietly_on_a_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Hash(args) => hash::run(&args),
        Command::Predict(args) => predict::run(&args),
        Command::Odds(args) => odds::run(&args),
        Command::Exec(args) => exec::run(&args),
        Command::Rss(args) => rss::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Completions(args) => {
            srap_docs::completions(Cli::command(), &args).map_err(anyhow::Error::from)
        }
        Command::Manpages(args) => {
            srap_docs::manpages(Cli::command(), &args).map_err(anyhow::Error::from)
        }
    };
    srap_host::report::exit_code("srap", result)
}

/// `srap … | head` ends when `head` has read enough, as other Unix tools
/// do, instead of panicking on the write that fails: the Rust runtime
/// ignores SIGPIPE, so `println!` meets `EPIPE`, which it turns into a
/// panic. The default action ends the process quietly at that write.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: setting a signal's disposition to its default, before any
    // thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    // Every `srap` command line README.md and docs/ show parses as
    // they show it: a renamed flag or subcommand fails here, naming the page.
    doc_commands::parse_test!(doc_commands::Program::Srap, super::Cli);
}
