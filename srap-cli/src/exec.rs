//! `srap exec`: run a workload inside the steered cgroup.
//!
//! The simplest transparent way in: move this process into the cgroup
//! (`cgroup.procs`), then `exec()` the command. The workload replaces `srap`
//! in the same process, so its exit status and signals reach the caller
//! unchanged, and everything it forks stays in the cgroup.
//!
//! Before it goes in, it waits (bounded) until the kernel shows SRAP's
//! connect hooks attached to that cgroup: a workload started with the agent
//! (a script, a unit started beside it) is steered from its first connect,
//! or is refused with the reason, never run unsteered without a word.

use std::{
    ffi::OsString,
    fs,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use srap_common::binder::{CONNECT4_PROGRAM, CONNECT6_PROGRAM};
use srap_host::cgroup;

mod mptcp;

/// How often the cgroup's hooks are read while waiting.
const POLL: Duration = Duration::from_millis(20);

#[derive(clap::Args)]
pub struct Args {
    /// The steered cgroup (default `<cgroup2>/srap`; relative paths are below
    /// the cgroup2 mount): the same `--cgroup` given to `srap-agent sender`.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// Seconds to wait for a starting `srap-agent sender` to attach its
    /// connect hooks to the cgroup before refusing to run the command.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    wait: f64,
    /// Run the command in the cgroup without checking that a binder
    /// serves it (its connects may then keep the kernel's ports).
    #[arg(long, conflicts_with = "wait")]
    no_wait: bool,
    /// Run the command's TCP sockets as MPTCP, without changing it: its
    /// `socket()` calls ask for MPTCP through mptcpize's library
    /// (LD_PRELOAD). Refused, saying why, where that cannot work: MPTCP
    /// off in this namespace, the library missing, a static or set-user-ID
    /// program. The agent steers the subflows under `--mptcp subflows`.
    #[arg(long)]
    mptcp: bool,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (program, mut command) = command(args)?;
    // The agent's rules, so `--cgroup` means the same to both.
    let mount = cgroup::cgroup2_mount()?;
    let cgroup = cgroup::resolve(&mount, args.cgroup.as_deref())?;
    if !args.no_wait {
        let wait = Duration::try_from_secs_f64(args.wait)
            .context("--wait takes a number of seconds, 0 or more")?;
        await_binder(&cgroup, wait)?;
    }
    let procs = cgroup.join("cgroup.procs");
    if !procs.exists() {
        bail!(
            "cgroup {} does not exist: start `srap-agent sender` first (it creates it), \
             or pass the --cgroup it uses",
            cgroup.display()
        );
    }
    // "0" means the writing process itself.
    fs::write(&procs, "0").with_context(|| {
        format!(
            "joining cgroup {} (writing {})",
            cgroup.display(),
            procs.display()
        )
    })?;
    let error = command.exec();
    Err(error).with_context(|| format!("running {}", program.to_string_lossy()))
}

/// The command to run in place of `srap` (its name, for errors), with
/// `--mptcp`'s preload set: checked before anything joins the cgroup.
fn command(args: &Args) -> anyhow::Result<(&OsString, Command)> {
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given: srap exec -- CMD ARGS…")?;
    let mut command = Command::new(program);
    command.args(rest);
    if args.mptcp {
        let wrap = mptcp::Mptcpize::for_program(program)?;
        eprintln!(
            "srap exec: MPTCP through mptcpize's library {} (LD_PRELOAD)",
            wrap.library.display()
        );
        command.env(
            "LD_PRELOAD",
            wrap.ld_preload(std::env::var_os("LD_PRELOAD").as_deref()),
        );
    }
    Ok((program, command))
}

/// What the kernel shows at `cgroup`'s connect hooks.
#[derive(Debug)]
enum Hooks {
    /// The cgroup is not there (yet).
    NoCgroup,
    /// SRAP's programs are attached at connect4 and connect6.
    Served,
    /// This one of them is not.
    Missing(&'static str),
}

/// Reads `cgroup`'s connect hooks once.
fn hooks(cgroup: &Path) -> anyhow::Result<Hooks> {
    if !cgroup.join("cgroup.procs").exists() {
        return Ok(Hooks::NoCgroup);
    }
    let [four, six] = cgroup::connect_hooks(cgroup).with_context(|| {
        format!(
            "reading the programs attached to cgroup {} (BPF_PROG_QUERY: needs root or \
             CAP_NET_ADMIN; --no-wait skips the check)",
            cgroup.display()
        )
    })?;
    // The kernel keeps 15 bytes of a program's name; SRAP's fit.
    let has = |names: &[String], name: &str| names.iter().any(|n| n == name);
    Ok(if !has(&four, CONNECT4_PROGRAM) {
        Hooks::Missing(CONNECT4_PROGRAM)
    } else if !has(&six, CONNECT6_PROGRAM) {
        Hooks::Missing(CONNECT6_PROGRAM)
    } else {
        Hooks::Served
    })
}

/// Returns once SRAP's connect hooks serve `cgroup`; says once on stderr
/// what it waits for, and refuses after `wait` naming what was missing.
fn await_binder(cgroup: &Path, wait: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut said = false;
    loop {
        let why = match hooks(cgroup)? {
            Hooks::Served => {
                if said {
                    eprintln!(
                        "srap exec: steering active after {} ms",
                        started.elapsed().as_millis()
                    );
                }
                return Ok(());
            }
            Hooks::NoCgroup => "it does not exist".to_owned(),
            Hooks::Missing(name) => format!("no {name} program is attached to it"),
        };
        if started.elapsed() >= wait {
            bail!(
                "no SRAP binder serves cgroup {} after {:.1} s: {why}. Start `srap-agent \
                 sender` (or check its log), pass the --cgroup it steers, wait longer with \
                 --wait SECONDS, or run unsteered with --no-wait",
                cgroup.display(),
                wait.as_secs_f64()
            );
        }
        if !said {
            eprintln!(
                "srap exec: waiting up to {:.1} s for srap-agent sender to steer cgroup {}",
                wait.as_secs_f64(),
                cgroup.display()
            );
            said = true;
        }
        thread::sleep(POLL);
    }
}
