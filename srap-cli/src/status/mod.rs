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

use std::{io::IsTerminal as _, path::PathBuf, time::Duration};

use anyhow::Context as _;
use srap_host::status::{
    DEFAULT_CONTROL_PATH, DEFAULT_SENDER_CONTROL_PATH, request_sender_status, request_status,
};

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
    // A pipe or a file gets one snapshot, as with --once.
    let once = args.once || args.json || !std::io::stdout().is_terminal();
    let interval = Duration::from_millis(args.interval);
    if args.sender {
        let path = args
            .control
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SENDER_CONTROL_PATH));
        // Fail before taking over the terminal when there is no agent.
        let (status, line) = request_sender_status(&path)?;
        if args.json {
            println!("{line}");
        } else if once {
            print!("{}", sender::render(&status));
        } else {
            live::run(
                &mut sender_view::SenderPage::default(),
                &path,
                status,
                interval,
            )
            .context("running the live view")?;
        }
        return Ok(());
    }
    if args.json && !args.once {
        anyhow::bail!("--json prints one snapshot: add --once (or --sender)");
    }
    let control = args
        .control
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_PATH));
    let (status, line) = request_status(&control)?;
    if args.json {
        println!("{line}");
    } else if once {
        print!("{}", table::render(&status));
    } else {
        live::run(
            &mut receiver_view::ReceiverPage::default(),
            &control,
            status,
            interval,
        )
        .context("running the dashboard")?;
    }
    Ok(())
}
