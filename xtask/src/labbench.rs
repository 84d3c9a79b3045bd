//! `cargo xtask bench`'s lab step: the lab's throughput with the receive
//! observer off, on tc ingress and on the socket hook, in the same run
//! (docs/benchmarks.md has a run). Short throughput experiments without a
//! queue rate, so the trials run at the veth's own CPU-bound ceiling, where
//! a per-packet cost shows; each setting's median aggregate is printed as a
//! ratio to the observer-off baseline. The settings take turns for
//! [`ROUNDS`] rounds, so a machine that gets busier or quieter meanwhile
//! hits each alike. Report-only: on a shared machine one trial's aggregate
//! swings between trials by more than the observer costs.

use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::exec::{as_root, describe, target_dir};

/// The criterion-style filter that selects (only) this step:
/// `cargo xtask bench lab_observer`.
pub const FILTER: &str = "lab_observer";

/// `--observer` settings, baseline first.
const SETTINGS: [&str; 3] = ["off", "tc", "sock"];
/// Rounds of all settings, interleaved (each run is about 12 s).
const ROUNDS: usize = 2;

/// The experiment each setting runs: 4 flows on 8 queues, 2 trials per
/// port mode of 3 s (the first second of each is warm-up), no queue rate.
const LAB_ARGS: &[&str] = &[
    "--experiment",
    "throughput",
    "--flows",
    "4",
    "--queues",
    "8",
    "--trials",
    "2",
    "--duration",
    "3",
    "--queue-rate",
    "none",
    "--json",
];

/// One setting's result.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    setting: &'static str,
    /// The hook the report names (`off` for none).
    hook: String,
    /// Every trial's aggregate, SRAP and kernel ports alike (without a
    /// queue rate, placement does not bound a trial).
    aggregates: Vec<f64>,
}

impl Measured {
    /// The median aggregate (of the two middle ones, their mean).
    fn median(&self) -> f64 {
        let mut sorted = self.aggregates.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[mid],
            _ => (sorted[mid - 1] + sorted[mid]) / 2.0,
        }
    }
}

/// Runs the release `srap-lab` [`ROUNDS`] times per setting, the
/// settings taking turns (about 75 s in all), and prints the table.
pub fn run() -> Result<()> {
    let lab = target_dir().join("release").join("srap-lab");
    println!("\n==> lab throughput, observer off / tc / sock ({FILTER})");
    let mut results: Vec<Measured> = Vec::new();
    for round in 1..=ROUNDS {
        for (index, setting) in SETTINGS.into_iter().enumerate() {
            let mut command = as_root(&lab);
            command
                .args(LAB_ARGS)
                .args(["--observer", setting])
                .stderr(Stdio::inherit());
            let json = json_of(&mut command)?;
            let measured = parse(setting, &json)
                .with_context(|| format!("reading the report of {}", describe(&command)))?;
            println!(
                "round {round}, observer {setting}: {:?} Gbit/s on {}",
                measured.aggregates, measured.hook
            );
            match results.get_mut(index) {
                Some(earlier) => earlier.aggregates.extend(measured.aggregates),
                None => results.push(measured),
            }
        }
    }
    print!("{}", render(&results));
    Ok(())
}

/// Runs `command` and returns its stdout, failing with its status.
fn json_of(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("could not start {}", describe(command)))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): its error is printed above",
            describe(command),
            output.status
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The observer's hook and every trial's aggregate from `--json`'s report.
fn parse(setting: &'static str, json: &str) -> Result<Measured> {
    let report: Value = serde_json::from_str(json.trim()).context("parsing the lab's JSON")?;
    let hook = report
        .get("observer")
        .and_then(Value::as_str)
        .context("no `observer` in the report")?
        .to_owned();
    let mut aggregates = Vec::new();
    for mode in ["srap", "kernel"] {
        let values = report
            .pointer(&format!("/{mode}/aggregate_gbps"))
            .and_then(Value::as_array)
            .with_context(|| format!("no {mode}.aggregate_gbps in the report"))?;
        for value in values {
            aggregates.push(value.as_f64().context("an aggregate that is no number")?);
        }
    }
    if aggregates.is_empty() {
        bail!("the report has no trials");
    }
    Ok(Measured {
        setting,
        hook,
        aggregates,
    })
}

/// The report-only rows: each setting's median (and range) as a ratio to
/// the first (the observer-off baseline).
fn render(results: &[Measured]) -> String {
    let Some(baseline) = results.first().map(Measured::median) else {
        return String::new();
    };
    let mut text = format!(
        "\n{:<30} {:<20} {:>8} {:>15} {:>7}\n",
        "lab throughput (4 flows)", "hook", "median", "range", "/ off"
    );
    for measured in results {
        let (min, max) = measured
            .aggregates
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &g| (lo.min(g), hi.max(g)));
        text += &format!(
            "{:<30} {:<20} {:>8.3} {:>15} {:>6.2}x\n",
            format!("observer {}", measured.setting),
            measured.hook,
            measured.median(),
            format!("{min:.3}-{max:.3}"),
            measured.median() / baseline
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"flows":4,"queues":8,"queue_rate_gbps":null,"ideal_gbps":null,
        "duration_s":3,"observer":"tc ingress (tcx)",
        "srap":{"trials":2,"aggregate_gbps":[9.0,11.0]},
        "kernel":{"trials":2,"aggregate_gbps":[10.0,30.0]}}"#;

    #[test]
    fn every_trial_of_both_modes_counts_and_the_ratio_is_to_the_first() {
        let tc = parse("tc", REPORT).expect("parsed");
        assert_eq!(tc.hook, "tc ingress (tcx)");
        assert_eq!(tc.aggregates, [9.0, 11.0, 10.0, 30.0]);
        // The median, not the mean (15.0): one lucky trial moves it little.
        assert_eq!(tc.median(), 10.5);
        let off = Measured {
            setting: "off",
            hook: "off".to_owned(),
            aggregates: vec![12.5, 12.5],
        };
        let table = render(&[off, tc]);
        assert!(table.contains("observer off"), "{table}");
        assert!(table.contains("1.00x"), "{table}");
        // 10.5 / 12.5
        assert!(table.contains("0.84x"), "{table}");
        assert!(table.contains("9.000-30.000"), "{table}");
    }

    #[test]
    fn a_report_without_trials_or_hook_is_an_error() {
        assert!(parse("off", "{").is_err());
        assert!(parse("off", r#"{"srap":{"aggregate_gbps":[]}}"#).is_err());
        let empty =
            r#"{"observer":"off","srap":{"aggregate_gbps":[]},"kernel":{"aggregate_gbps":[]}}"#;
        let err = parse("off", empty).expect_err("no trials");
        assert!(err.to_string().contains("no trials"), "{err}");
    }
}
