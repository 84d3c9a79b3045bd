//! How much of its budget the kernel's verifier spends on each program of
//! an eBPF object, per configuration of the binder: loads every program of
//! `OBJECT` (default: the object the agent embeds) into the running kernel
//! once per configuration (the binder's load-time settings, as the agent
//! sets them), prints the instructions the kernel's verifier walked
//! (`verified_insns`, of its 1 000 000 limit) and how long the load took,
//! and unloads them. Root. For comparing a change of the hooks against the
//! build before it:
//! `cargo run -p srap-tests --example kernel_verifier_walk -- [--all-programs] [OBJECT]`
//! (without `--all-programs`, only the binder's connect and bind hooks).

use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{EbpfLoader, programs::Program};
use srap_common::{
    binder::{BinderSizes, LOAD_CONFIG_GLOBAL, LoadConfig, mptcp, placement},
    local_nics::policy,
    receiver_nics,
};

/// The binder's hooks, whose walk depends on the configuration.
const HOOKS: [&str; 4] = ["srap_connect4", "srap_connect6", "srap_bind4", "srap_bind6"];

fn main() -> Result<()> {
    let mut all_programs = false;
    let mut path = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--all-programs" => all_programs = true,
            _ => path = Some(arg),
        }
    }
    let bytes;
    let object: &[u8] = match path {
        Some(path) => {
            bytes = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
            &bytes
        }
        None => srap_daemon::ebpf_object(),
    };
    for (label, config) in configurations() {
        println!("{label}:");
        let mut ebpf = EbpfLoader::new()
            .override_global(LOAD_CONFIG_GLOBAL, &config, false)
            .load(object)
            .context("loading the object's maps")?;
        let names: Vec<String> = ebpf.programs().map(|(name, _)| name.to_owned()).collect();
        for name in names {
            if !all_programs && !HOOKS.contains(&name.as_str()) {
                continue;
            }
            let program = ebpf.program_mut(&name).context("a listed program")?;
            let started = Instant::now();
            match load(program) {
                Ok(walked) => println!(
                    "  {name:24} {walked:>9} instructions walked in {:>6.1} ms",
                    started.elapsed().as_secs_f64() * 1e3
                ),
                Err(err) => println!("  {name:24} refused: {}", first_line(&format!("{err:#}"))),
            }
        }
    }
    Ok(())
}

/// The default configuration, each feature alone, and all at once.
fn configurations() -> Vec<(&'static str, LoadConfig)> {
    let sizes = BinderSizes::DEFAULT;
    let base = LoadConfig {
        binder: srap_common::binder::BinderConfig {
            tw_stamp_offset: 1,
            socket_mask: sizes.socket_rows() - 1,
            row_slots: sizes.cpus,
            sizes,
            ..Default::default()
        },
        ..Default::default()
    };
    let with = |f: &dyn Fn(&mut LoadConfig)| {
        let mut config = base;
        f(&mut config);
        config
    };
    vec![
        ("default (one NIC, TCP, push)", base),
        (
            "--local-nics numa",
            with(&|c| c.binder.local_nics = policy::NUMA),
        ),
        (
            "--receiver-nics spread",
            with(&|c| c.binder.receiver_nics = receiver_nics::mode::SPREAD),
        ),
        ("--mptcp subflows", with(&|c| c.mptcp = mptcp::SUBFLOWS)),
        ("--steer both", with(&|c| c.steer_local = 1)),
        (
            "--steer both --local-placement reader",
            with(&|c| {
                c.steer_local = 1;
                c.binder.local_placement = placement::READER;
            }),
        ),
        (
            "all of them, --pacing-rate",
            with(&|c| {
                c.binder.local_nics = policy::NUMA;
                c.binder.receiver_nics = receiver_nics::mode::SPREAD;
                c.mptcp = mptcp::SUBFLOWS;
                c.steer_local = 1;
                c.binder.local_placement = placement::READER;
                c.binder.pacing_rate = 1 << 30;
            }),
        ),
    ]
}

/// Loads one program; the instructions the kernel's verifier walked.
fn load(program: &mut Program) -> Result<u32> {
    macro_rules! each {
        ($($kind:ident),*) => {
            match program {
                $(Program::$kind(p) => {
                    p.load()?;
                    let walked = p.info()?.verified_instruction_count().unwrap_or(0);
                    Ok(walked)
                })*
                _ => anyhow::bail!("a program type this tool does not load"),
            }
        };
    }
    each!(CgroupSockAddr, CgroupSock, SchedClassifier, Xdp, SockOps)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
