//! `cargo xtask bench`: run criterion, then summarise this run's results and
//! check them against the goals in [`GOALS`]; then the lab's throughput with
//! the observer off and on ([`crate::labbench`], report-only).

use std::{collections::BTreeMap, fs, path::Path, time::SystemTime};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::{
    exec::{Step, cargo, run_step, target_dir},
    lab, labbench,
};

/// What a summary row checks.
enum Goal {
    /// `slower / faster` must be at least this.
    RatioAtLeast(f64),
    /// `first / second` must be at most this (an overhead budget).
    RatioAtMost(f64),
    /// Only print `slower / faster`.
    Ratio,
    /// The benchmark's mean must be below this many nanoseconds.
    MeanBelowNs(f64),
    /// Only print the benchmark's mean.
    MeanNs,
    /// `first − second` must be below this many nanoseconds (an added cost).
    AddedBelowNs(f64),
    /// Only print `first − second`.
    AddedNs,
    /// `(first − base) / (second − base)` must be at most this: one added
    /// cost against another, over the same run's baseline `base`.
    AddedRatioAtMost(&'static str, f64),
    /// Only print `(first − base) / (second − base)`.
    AddedRatio(&'static str),
}

/// (label, benchmark id, second id — the faster one for ratios, goal).
const GOALS: &[(&str, &str, &str, Goal)] = &[
    (
        "toeplitz ipv4: naive / table",
        "toeplitz/ipv4/naive",
        "toeplitz/ipv4/table",
        Goal::RatioAtLeast(20.0),
    ),
    (
        "toeplitz ipv6: naive / table",
        "toeplitz/ipv6/naive",
        "toeplitz/ipv6/table",
        Goal::RatioAtLeast(20.0),
    ),
    (
        "port table, 65536 ports, linear",
        "port_table/65536/linear",
        "",
        Goal::MeanBelowNs(200_000.0),
    ),
    (
        "port table, 65536 ports: scan / linear",
        "port_table/65536/scan",
        "port_table/65536/linear",
        Goal::Ratio,
    ),
    // A bond's members stacked above the receiver's entries: what a member
    // going down or up re-plans, far below the agent's 1 s interval.
    (
        "layout over 4 bond members",
        "member_layout/any_port/bond4",
        "",
        Goal::MeanBelowNs(1e6),
    ),
    (
        "layout over 4 bond members / receiver alone",
        "member_layout/any_port/bond4",
        "member_layout/any_port/plain",
        Goal::Ratio,
    ),
    (
        "named port's table over 3 bond members",
        "member_layout/named_port/bond3",
        "",
        Goal::MeanBelowNs(50e6),
    ),
    // The connect benchmark's settings take turns, round by round; these
    // are its paired figures (`connect_paired/*`, see benches/connect.rs).
    (
        "connect+accept: binder (4 slots) / baseline",
        "connect_paired/binder_4_slots",
        "connect_paired/baseline",
        Goal::RatioAtMost(1.10),
    ),
    (
        "connect+accept: binder (512 slots) / baseline",
        "connect_paired/binder_512_slots",
        "connect_paired/baseline",
        Goal::RatioAtMost(1.10),
    ),
    (
        "binder's added cost per connect, 4 slots",
        "connect_paired/binder_4_slots",
        "connect_paired/baseline",
        Goal::AddedBelowNs(1_000.0),
    ),
    (
        "binder's added cost per connect, 512 slots",
        "connect_paired/binder_512_slots",
        "connect_paired/baseline",
        Goal::AddedBelowNs(1_000.0),
    ),
    (
        "grants: a 4th sender joins, all maps follow",
        "grants/fourth_sender_join",
        "",
        Goal::MeanBelowNs(1e9),
    ),
    (
        "connect+accept: 512 slots / 4 slots",
        "connect_paired/binder_512_slots",
        "connect_paired/binder_4_slots",
        Goal::Ratio,
    ),
    // The same with every other core spinning: what a loaded host sees
    // (report-only).
    (
        "other core busy: binder (4 slots) / baseline",
        "connect_paired_busy/binder_4_slots",
        "connect_paired_busy/baseline",
        Goal::Ratio,
    ),
    (
        "other core busy: added per connect, 4 slots",
        "connect_paired_busy/binder_4_slots",
        "connect_paired_busy/baseline",
        Goal::AddedNs,
    ),
    // Each --steer mode toward a 32-CPU receiver from a 16-CPU host, same
    // run: both NICs planned may add at most 1.2× what the receiver's alone
    // adds.
    (
        "--steer remote: added per connect",
        "connect_paired_steer/binder_remote",
        "connect_paired_steer/baseline",
        Goal::AddedNs,
    ),
    (
        "--steer local: added per connect",
        "connect_paired_steer/binder_local",
        "connect_paired_steer/baseline",
        Goal::AddedNs,
    ),
    (
        "--steer both: added per connect",
        "connect_paired_steer/binder_both",
        "connect_paired_steer/baseline",
        Goal::AddedNs,
    ),
    (
        "--steer both / remote, added cost",
        "connect_paired_steer/binder_both",
        "connect_paired_steer/binder_remote",
        Goal::AddedRatioAtMost("connect_paired_steer/baseline", 1.2),
    ),
    // `--local-placement reader` looks up the connecting CPU's row before
    // the same claim: within 1.1× of `spread`'s added cost, same run.
    (
        "--steer local, reader: added per connect",
        "connect_paired_steer/binder_local_reader",
        "connect_paired_steer/baseline",
        Goal::AddedNs,
    ),
    (
        "reader / spread placement, added cost",
        "connect_paired_steer/binder_local_reader",
        "connect_paired_steer/binder_local",
        Goal::AddedRatioAtMost("connect_paired_steer/baseline", 1.1),
    ),
    // This host's NICs (`--local-nics`): `balance` binds the address of the
    // NIC whose turn it is, over two links, against `route` on the same
    // links. The hook's own run time per call (the kernel's accounting,
    // over the group's connects) is held to the 1 µs goal.
    (
        "--local-nics balance: added per connect",
        "connect_paired_nics/binder_balance",
        "connect_paired_nics/baseline",
        Goal::AddedNs,
    ),
    (
        "--local-nics balance / route, added cost",
        "connect_paired_nics/binder_balance",
        "connect_paired_nics/binder_route",
        Goal::AddedRatio("connect_paired_nics/baseline"),
    ),
    // The hook's whole run time, report-only: half of it is the kernel's
    // bind, which takes what the machine gives it (the same object's time
    // a call rises and falls with a plain connect's, docs/benchmarks.md);
    // the goal holds what SRAP adds beyond that bind, below.
    (
        "connect4 hook per call, --local-nics balance",
        "connect_hook/local-nics_balance",
        "",
        Goal::MeanNs,
    ),
    (
        "bare connect4 hook (the kernel's bind alone)",
        "connect_hook/bare_bind",
        "",
        Goal::MeanNs,
    ),
    (
        "connect4 hook per call, balance / route",
        "connect_hook/local-nics_balance",
        "connect_hook/local-nics_route",
        Goal::Ratio,
    ),
    // Beyond the kernel's bind: the bare hook binds a port as the binder's
    // does and nothing else (the bind `connect()` makes itself without a
    // hook), so these hold what SRAP's own steps cost a connect.
    (
        "connect4 hook beyond the kernel's bind, route",
        "connect_hook/local-nics_route",
        "connect_hook/bare_bind",
        Goal::AddedBelowNs(1000.0),
    ),
    (
        "connect4 hook beyond the kernel's bind, balance",
        "connect_hook/local-nics_balance",
        "connect_hook/bare_bind",
        Goal::AddedBelowNs(1000.0),
    ),
    // The same two with every core streaming through memory, as on a host
    // moving data (report-only): `both`'s extra map rows are cache misses
    // there.
    (
        "streaming: --steer both / remote, added cost",
        "connect_paired_steer_streaming/binder_both",
        "connect_paired_steer_streaming/binder_remote",
        Goal::AddedRatio("connect_paired_steer_streaming/baseline"),
    ),
    // Each feature alone, in turns with the default binder (every feature
    // off: neither verified nor run), the kernel's autobind and the bare
    // hook that only binds. The default is held to the same budget as the
    // slot counts above; the features are reported.
    (
        "connect+accept: default binder / baseline",
        "connect_paired_features/binder_default",
        "connect_paired_features/baseline",
        Goal::RatioAtMost(1.10),
    ),
    (
        "connect+accept: --receiver-nics spread / baseline",
        "connect_paired_features/binder_spread",
        "connect_paired_features/baseline",
        Goal::Ratio,
    ),
    (
        "connect+accept: --mptcp subflows / baseline",
        "connect_paired_features/binder_mptcp",
        "connect_paired_features/baseline",
        Goal::Ratio,
    ),
    (
        "connect+accept: --local-nics numa / baseline",
        "connect_paired_features/binder_numa",
        "connect_paired_features/baseline",
        Goal::Ratio,
    ),
    (
        "connect+accept: --steer both / baseline",
        "connect_paired_features/binder_both",
        "connect_paired_features/baseline",
        Goal::Ratio,
    ),
    (
        "connect+accept: bare bind hook / baseline",
        "connect_paired_features/bare_bind",
        "connect_paired_features/baseline",
        Goal::Ratio,
    ),
    // The hooks' own run time per connect (connect4, release and, where
    // the settings load it, the TCP close's), by the kernel's accounting.
    (
        "hooks per connect, default",
        "connect_hook_feature/default",
        "",
        Goal::MeanNs,
    ),
    (
        "default hooks beyond the kernel's bind",
        "connect_hook_feature/default",
        "connect_hook_feature/bare_bind",
        Goal::AddedBelowNs(1000.0),
    ),
    (
        "--receiver-nics spread: hooks beyond default",
        "connect_hook_feature/receiver-nics_spread",
        "connect_hook_feature/default",
        Goal::AddedNs,
    ),
    (
        "--mptcp subflows: hooks beyond default",
        "connect_hook_feature/mptcp_subflows",
        "connect_hook_feature/default",
        Goal::AddedNs,
    ),
    (
        "--local-nics numa: hooks beyond default",
        "connect_hook_feature/local-nics_numa",
        "connect_hook_feature/default",
        Goal::AddedNs,
    ),
    (
        "--steer both: hooks beyond default",
        "connect_hook_feature/steer_both",
        "connect_hook_feature/default",
        Goal::AddedNs,
    ),
    // A host whose ports are all in TIME_WAIT (connections opened faster
    // than TIME_WAIT lets them go): the kernel's autobind searches the range
    // for a tuple it may take over, the binder binds the one it computed.
    // The default must beat the kernel's connect, every feature match it.
    (
        "TIME_WAIT churn: default binder / kernel",
        "connect_paired_churn/binder_default",
        "connect_paired_churn/baseline",
        Goal::RatioAtMost(0.8),
    ),
    (
        "TIME_WAIT churn: --receiver-nics spread / kernel",
        "connect_paired_churn/binder_spread",
        "connect_paired_churn/baseline",
        Goal::RatioAtMost(1.0),
    ),
    (
        "TIME_WAIT churn: --mptcp subflows / kernel",
        "connect_paired_churn/binder_mptcp",
        "connect_paired_churn/baseline",
        Goal::RatioAtMost(1.0),
    ),
    (
        "TIME_WAIT churn: --local-nics numa / kernel",
        "connect_paired_churn/binder_numa",
        "connect_paired_churn/baseline",
        Goal::RatioAtMost(1.0),
    ),
    (
        "TIME_WAIT churn: --steer both / kernel",
        "connect_paired_churn/binder_both",
        "connect_paired_churn/baseline",
        Goal::RatioAtMost(1.0),
    ),
    // The receive observer against a bare program of the same hook. The
    // socket hook (the default off veth) runs per connection, never per
    // packet (the bench prints its run count over a 64 MiB transfer); tc and
    // XDP run per packet and are reported, not held to the 10 ns budget.
    (
        "observer per connection: sock_ops / bare",
        "observer_connection/sock_observer",
        "observer_connection/sock_bare",
        Goal::Ratio,
    ),
    (
        "observer per packet, 1500 B: tc / bare",
        "observer_packet/tc_observer_1500",
        "observer_packet/tc_bare_1500",
        Goal::Ratio,
    ),
    (
        "observer per packet, 9000 B: tc / bare",
        "observer_packet/tc_observer_9000",
        "observer_packet/tc_bare_9000",
        Goal::Ratio,
    ),
    (
        "observer per packet, 1500 B: xdp / bare",
        "observer_packet/xdp_observer_1500",
        "observer_packet/xdp_bare_1500",
        Goal::Ratio,
    ),
];

pub fn run(args: &[String]) -> Result<()> {
    let started = SystemTime::now();
    // The grants benchmark runs the real agents, found beside the bench
    // binary (target/release), and the lab step runs `srap-lab`: build them
    // with the same profile first.
    run_step(Step::new(
        "build the agents and the lab (release)",
        cargo(&lab::BUILD),
    ))?;
    // `cargo xtask bench lab_observer` runs the lab step alone; any other
    // filter leaves it out.
    let lab = args.is_empty() || args.iter().any(|a| a == labbench::FILTER);
    if args.len() == 1 && lab {
        return labbench::run();
    }
    // `--bench *`: only the [[bench]] targets (criterion); the lib's libtest
    // harness would reject criterion's options.
    let mut command_args = vec!["bench", "-p", "srap-tests", "--bench", "*", "--"];
    command_args.extend(args.iter().map(String::as_str));
    run_step(Step::new("cargo bench", cargo(&command_args)))?;

    let criterion_dir = target_dir().join("criterion");
    let mut means = collect_means(&criterion_dir, started)
        .with_context(|| format!("reading {}", criterion_dir.display()))?;
    means.extend(read_paired(&criterion_dir.join("paired.json"), started)?);
    if means.is_empty() {
        bail!(
            "no criterion results from this run under {}",
            criterion_dir.display()
        );
    }
    println!("\n{:<44} {:>14}", "benchmark", "mean");
    for (id, mean) in &means {
        println!("{id:<44} {:>14}", format_ns(*mean));
    }
    let mut missed = print_goals(&means);
    missed += print_pinned(&read_paired(&criterion_dir.join("pinned.json"), started)?);
    missed += print_start(&read_paired(&criterion_dir.join("start.json"), started)?);
    if lab {
        labbench::run()?;
    }
    if missed > 0 {
        bail!("{missed} benchmark goal(s) missed");
    }
    Ok(())
}

/// Prints one row per goal; returns how many were missed. Rows whose
/// benchmarks did not run (filtered out) say so and count as neither.
fn print_goals(means: &BTreeMap<String, f64>) -> usize {
    println!("\n{:<44} {:>14} {:>12}  result", "goal", "value", "target");
    let mut missed = 0;
    for (label, first, second, goal) in GOALS {
        let Some(&a) = means.get(*first) else {
            println!("{label:<44} {:>14} {:>12}  not run", "-", "-");
            continue;
        };
        let (value, target, met) = match goal {
            Goal::MeanBelowNs(limit) => (
                format_ns(a),
                format!("< {}", format_ns(*limit)),
                Some(a < *limit),
            ),
            Goal::MeanNs => (format_ns(a), "-".to_owned(), None),
            Goal::AddedBelowNs(_) | Goal::AddedNs => {
                let Some(&b) = means.get(*second) else {
                    println!("{label:<44} {:>14} {:>12}  not run", "-", "-");
                    continue;
                };
                let added = a - b;
                let shown = if added < 0.0 {
                    format!("-{}", format_ns(-added))
                } else {
                    format_ns(added)
                };
                match goal {
                    Goal::AddedBelowNs(limit) => (
                        shown,
                        format!("< {}", format_ns(*limit)),
                        Some(added < *limit),
                    ),
                    _ => (shown, "-".to_owned(), None),
                }
            }
            Goal::AddedRatioAtMost(base, _) | Goal::AddedRatio(base) => {
                let (Some(&b), Some(&base)) = (means.get(*second), means.get(*base)) else {
                    println!("{label:<44} {:>14} {:>12}  not run", "-", "-");
                    continue;
                };
                // Noise can make an added cost non-positive: then there is
                // no ratio to speak of.
                if b - base <= 0.0 {
                    println!(
                        "{label:<44} {:>14} {:>12}  no added cost to compare",
                        "-", "-"
                    );
                    continue;
                }
                let ratio = (a - base) / (b - base);
                match goal {
                    Goal::AddedRatioAtMost(_, max) => (
                        format!("{ratio:.2}x"),
                        format!("<= {max:.2}x"),
                        Some(ratio <= *max),
                    ),
                    _ => (format!("{ratio:.2}x"), "-".to_owned(), None),
                }
            }
            Goal::RatioAtLeast(_) | Goal::RatioAtMost(_) | Goal::Ratio => {
                let Some(&b) = means.get(*second) else {
                    println!("{label:<44} {:>14} {:>12}  not run", "-", "-");
                    continue;
                };
                let ratio = a / b;
                match goal {
                    Goal::RatioAtLeast(min) => (
                        format!("{ratio:.1}x"),
                        format!(">= {min:.0}x"),
                        Some(ratio >= *min),
                    ),
                    Goal::RatioAtMost(max) => (
                        format!("{ratio:.2}x"),
                        format!("<= {max:.2}x"),
                        Some(ratio <= *max),
                    ),
                    _ => (format!("{ratio:.1}x"), "-".to_owned(), None),
                }
            }
        };
        let result = match met {
            Some(true) => "met",
            Some(false) => {
                missed += 1;
                "MISSED"
            }
            None => "",
        };
        println!("{label:<44} {value:>14} {target:>12}  {result}");
    }
    missed
}

/// The goal's bound on the default settings' start to steering (the
/// agent's start of the binder to its hooks attached).
const START_DEFAULT_MAX_MS: f64 = 1000.0;

/// Each binder's start to steering, in milliseconds (`start/LABEL`,
/// written by the connect bench); returns 1 when the default's is over its
/// bound.
fn print_start(figures: &BTreeMap<String, f64>) -> usize {
    let starts: Vec<(&str, f64)> = figures
        .iter()
        .filter_map(|(id, ms)| id.strip_prefix("start/").map(|label| (label, *ms)))
        .collect();
    if starts.is_empty() {
        return 0;
    }
    println!(
        "\n{:<44} {:>14} {:>12}  result",
        "start to steering", "ms", "target"
    );
    let mut missed = 0;
    for (label, ms) in starts {
        let (target, result) = if label == "default" {
            let met = ms <= START_DEFAULT_MAX_MS;
            missed += usize::from(!met);
            (
                format!("<= {START_DEFAULT_MAX_MS:.0}"),
                if met { "met" } else { "MISSED" },
            )
        } else {
            ("-".to_owned(), "")
        };
        println!("{label:<44} {ms:>14.0} {target:>12}  {result}");
    }
    missed
}

/// Receiver counts the connect bench reports pinned maps for.
const PINNED_RECEIVERS: [u32; 3] = [1, 100, 4096];
/// The goal's bound on what one 32-CPU receiver pins (maps sized for the
/// most the binder could hold would pin 53.7 MiB).
const PINNED_ONE_RECEIVER_MAX: f64 = 8.0 * 1024.0 * 1024.0;

/// The binder's pinned maps for 1, 100 and 4 096 receivers, from the
/// formula and as the kernel counts them (`pinned/N/{formula,kernel}`,
/// written by the connect bench); returns 1 when one receiver's kernel
/// figure is over its bound or the formula is off the kernel's figure.
fn print_pinned(figures: &BTreeMap<String, f64>) -> usize {
    if figures.is_empty() {
        return 0;
    }
    println!(
        "\n{:<44} {:>14} {:>14}",
        "pinned maps (default settings)", "formula", "kernel"
    );
    let mib = |bytes: f64| format!("{:.2} MiB", bytes / (1024.0 * 1024.0));
    let mut missed = 0;
    for receivers in PINNED_RECEIVERS {
        let get = |what: &str| figures.get(&format!("pinned/{receivers}/{what}")).copied();
        let (Some(formula), Some(kernel)) = (get("formula"), get("kernel")) else {
            continue;
        };
        let agrees = formula == kernel;
        println!(
            "{:<44} {:>14} {:>14}{}",
            format!("{receivers} receiver(s)"),
            mib(formula),
            mib(kernel),
            if agrees { "" } else { "  formula OFF" }
        );
        missed += usize::from(!agrees);
        if receivers == 1 {
            let met = kernel <= PINNED_ONE_RECEIVER_MAX;
            println!(
                "{:<44} {:>14} {:>12}  {}",
                "pinned by one receiver's binder (kernel)",
                mib(kernel),
                "<= 8 MiB",
                if met { "met" } else { "MISSED" }
            );
            missed += usize::from(!met);
        }
    }
    missed
}

/// Mean (ns) per benchmark id, from every `new/estimates.json` written since
/// `since` (older files are results of earlier runs).
fn collect_means(dir: &Path, since: SystemTime) -> Result<BTreeMap<String, f64>> {
    let mut means = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let in_new = path.parent().and_then(Path::file_name) == Some("new".as_ref());
            if !in_new || path.file_name() != Some("estimates.json".as_ref()) {
                continue;
            }
            let fresh = fs::metadata(&path)
                .and_then(|meta| meta.modified())
                .is_ok_and(|modified| modified >= since);
            if !fresh {
                continue;
            }
            let (id, mean) = read_result(&path)?;
            means.insert(id, mean);
        }
    }
    Ok(means)
}

/// The paired figures a benchmark wrote this run (`{id: mean ns}`; none
/// when the file is missing or older than `since`).
fn read_paired(path: &Path, since: SystemTime) -> Result<BTreeMap<String, f64>> {
    let fresh = fs::metadata(path)
        .and_then(|meta| meta.modified())
        .is_ok_and(|modified| modified >= since);
    if !fresh {
        return Ok(BTreeMap::new());
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let Some(map) = value.as_object() else {
        bail!("{} is not a JSON object", path.display());
    };
    Ok(map
        .iter()
        .filter_map(|(id, ns)| ns.as_f64().map(|ns| (id.clone(), ns)))
        .collect())
}

/// (`full_id` from the `benchmark.json` beside it, `mean.point_estimate`).
fn read_result(estimates: &Path) -> Result<(String, f64)> {
    let read = |path: &Path| -> Result<Value> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    };
    let benchmark = estimates.with_file_name("benchmark.json");
    let id = read(&benchmark)?
        .get("full_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("{} has no full_id", benchmark.display()))?;
    let mean = read(estimates)?
        .pointer("/mean/point_estimate")
        .and_then(Value::as_f64)
        .with_context(|| format!("{} has no mean.point_estimate", estimates.display()))?;
    Ok((id, mean))
}

fn format_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}
