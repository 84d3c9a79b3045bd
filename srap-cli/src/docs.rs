//! Shell completions and man pages, generated from a binary's own clap
//! command so they never drift from its flags.
//!
//! One copy serves both binaries: `srap-agent`'s main.rs includes this file
//! with `#[path]`, since each binary owns its `Cli` and neither library is a
//! place for command-line documentation. `cargo xtask package` runs the
//! built binaries (`… manpages DIR`, `… completions SHELL`) to fill the
//! Debian package, so xtask needs neither the agent nor nightly.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use clap_complete::Shell;

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
pub fn completions(mut command: clap::Command, args: &CompletionsArgs) -> anyhow::Result<()> {
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("writing the completion script to stdout")
}

/// Writes one man page for the command and one per visible subcommand
/// (`srap-hash.1`, …), then prints the files' paths.
pub fn manpages(command: clap::Command, args: &ManpagesArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating the man page directory {}", args.dir.display()))?;
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
) -> anyhow::Result<()> {
    let man = clap_mangen::Man::new(command.clone()).section(section);
    let path = man
        .generate_to(dir)
        .with_context(|| format!("writing {} in {}", man.get_filename(), dir.display()))?;
    written.push(path);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub, section, dir, written)?;
    }
    Ok(())
}
