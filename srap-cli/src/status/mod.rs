//! `srap status`: what the agents see, read from their control sockets —
//! live full-screen views on a terminal (`live`, drawing `receiver_view` or
//! `sender_view`), or one snapshot as text (`table`, `sender`) or JSON for
//! scripts.

mod columns;
mod format;
mod list;
mod live;
mod meters;
mod receiver_view;
mod sender;
mod sender_view;
mod table;

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use srap_status::{DEFAULT_CONTROL_PATH, DEFAULT_SENDER_CONTROL_PATH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The agent's control socket (`--control` of `srap-agent receiver`,
    /// or of `srap-agent sender` with --sender). Default:
    /// /run/srap/receiver.sock, with --sender /run/srap/sender.sock.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Watch the sender agent (`srap-agent sender --peer`) instead: every
    /// receiver it follows, its description version, its grant, and the
    /// binder's counters with their rates. Live on a terminal; one snapshot
    /// with --once or --json, or when the output is not a terminal.
    #[arg(long)]
    sender: bool,
    /// Print one snapshot and exit (a table; JSON with --json). Also what
    /// happens when the output is not a terminal.
    #[arg(long)]
    once: bool,
    /// With --once or --sender: the snapshot as one line of JSON, as the
    /// agent sent it.
    #[arg(long)]
    json: bool,
    /// Refresh interval of the live views, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    interval: u64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.sender {
        let path = args
            .control
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SENDER_CONTROL_PATH));
        return show(
            args,
            sender_view::SenderPage::default(),
            &path,
            sender::render,
        );
    }
    if args.json && !args.once {
        anyhow::bail!("--json prints one snapshot: add --once (or --sender)");
    }
    let path = args
        .control
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_PATH));
    show(
        args,
        receiver_view::ReceiverPage::default(),
        &path,
        table::render,
    )
}

/// One agent's answer as JSON, as text (`--once`, or output that is not a
/// terminal), or live in `page`. The first answer is asked for before the
/// terminal is taken over, so a missing agent is a plain error.
fn show<P: live::Page>(
    args: &Args,
    mut page: P,
    path: &Path,
    text: fn(&P::Snapshot) -> String,
) -> anyhow::Result<()> {
    let (first, line) = P::fetch_line(path)?;
    if args.json {
        println!("{line}");
    } else if args.once || !std::io::stdout().is_terminal() {
        print!("{}", text(&first));
    } else {
        let interval = Duration::from_millis(args.interval);
        live::run(&mut page, path, first, interval).context("running the live view")?;
    }
    Ok(())
}
