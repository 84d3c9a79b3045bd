//! `srap status`: what the receiver agent sees of where flows land, read
//! from its control socket — a full-screen dashboard (`dashboard`, drawn by
//! `view`), or one snapshot as text (`table`) or JSON for scripts. With
//! `--sender`, the sender agent's receivers and binder (`sender`).

mod dashboard;
mod format;
mod sender;
mod table;
mod view;

use std::{path::PathBuf, time::Duration};

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
    /// Ask the sender agent (`srap-agent sender --peer`): every receiver it
    /// follows, its description version, its grant, and the binder's
    /// counters; one snapshot, as with --once.
    #[arg(long)]
    sender: bool,
    /// Print one snapshot and exit (a table; JSON with --json).
    #[arg(long)]
    once: bool,
    /// With --once or --sender: the snapshot as one line of JSON, as the
    /// agent sent it.
    #[arg(long)]
    json: bool,
    /// Dashboard refresh interval, in milliseconds.
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
        let (status, line) = request_sender_status(&path)?;
        if args.json {
            println!("{line}");
        } else {
            print!("{}", sender::render(&status));
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
    if args.once {
        let (status, line) = request_status(&control)?;
        if args.json {
            println!("{line}");
        } else {
            print!("{}", table::render(&status));
        }
        return Ok(());
    }
    // Fail before taking over the terminal when there is no agent.
    let (status, _) = request_status(&control)?;
    dashboard::run(&control, status, Duration::from_millis(args.interval))
        .context("running the dashboard")
}
