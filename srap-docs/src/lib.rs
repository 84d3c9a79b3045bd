//! Shell completions and man pages, generated from a binary's own clap
//! command so they never drift from its flags.
//!
//! One crate serves both binaries, `srap` and `srap-agent`: each owns its
//! `Cli`, takes [`CompletionsArgs`] and [`ManpagesArgs`] into it as
//! subcommands and hands its `clap::Command` to [`completions`] and
//! [`manpages`]. `cargo xtask package` runs the built binaries
//! (`… manpages DIR`, `… completions SHELL`) to fill the Debian package, so
//! xtask needs neither the agent nor nightly. clap and its generators only:
//! no SRAP crate lies beneath it.

use std::{
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use clap_complete::Shell;
use thiserror::Error;

/// Why a completion script or a man page was not written. Each reads as
/// what was being done; the I/O error is its source.
#[derive(Debug, Error)]
pub enum DocsError {
    #[error("writing the completion script to stdout")]
    Stdout(#[source] io::Error),
    #[error("creating the man page directory {}", .dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {file} in {}", .dir.display())]
    Page {
        file: String,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `completions SHELL`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// `manpages DIR` (hidden: the packaging step's).
#[derive(clap::Args, Debug)]
pub struct ManpagesArgs {
    /// Directory to write NAME.SECTION files into (created if missing).
    dir: PathBuf,
    /// Manual section: 1 for user commands, 8 for daemons.
    #[arg(long, default_value = "1")]
    section: String,
}

/// Writes the completion script for `args.shell` to stdout.
pub fn completions(mut command: clap::Command, args: &CompletionsArgs) -> Result<(), DocsError> {
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    io::stdout().write_all(&out).map_err(DocsError::Stdout)
}

/// Writes one man page for the command and one per visible subcommand
/// (`srap-hash.1`, …), then prints the files' paths.
pub fn manpages(command: clap::Command, args: &ManpagesArgs) -> Result<(), DocsError> {
    std::fs::create_dir_all(&args.dir).map_err(|source| DocsError::CreateDir {
        dir: args.dir.clone(),
        source,
    })?;
    let mut command = command.disable_help_subcommand(true);
    // Names subcommands `srap hash`, so their pages are `srap-hash`.
    command.build();
    let mut written = Vec::new();
    write_pages(&command, &args.section, &args.dir, &mut written)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}

fn write_pages(
    command: &clap::Command,
    section: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), DocsError> {
    let man = clap_mangen::Man::new(command.clone()).section(section);
    let path = man.generate_to(dir).map_err(|source| DocsError::Page {
        file: man.get_filename(),
        dir: dir.to_owned(),
        source,
    })?;
    written.push(path);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub, section, dir, written)?;
    }
    Ok(())
}
