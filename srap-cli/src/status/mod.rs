//! `srap status`: what the receiver agent sees of where flows land, read
//! from its control socket — a full-screen dashboard (`dashboard`, drawn by
//! `view`), or one snapshot as text (`table`) or JSON for scripts.

mod dashboard;
mod format;
mod table;
mod view;

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use srap_host::status::{DEFAULT_CONTROL_PATH, request_status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The receiver agent's control socket (`srap-agent receiver --control`).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTROL_PATH)]
    control: PathBuf,
    /// Print one snapshot and exit (a table; JSON with --json).
    #[arg(long)]
    once: bool,
    /// With --once: the snapshot as one line of JSON, as the agent sent it.
    #[arg(long, requires = "once")]
    json: bool,
    /// Dashboard refresh interval, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    interval: u64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.once {
        let (status, line) = request_status(&args.control)?;
        if args.json {
            println!("{line}");
        } else {
            print!("{}", table::render(&status));
        }
        return Ok(());
    }
    // Fail before taking over the terminal when there is no agent.
    let (status, _) = request_status(&args.control)?;
    dashboard::run(&args.control, status, Duration::from_millis(args.interval))
        .context("running the dashboard")
}
