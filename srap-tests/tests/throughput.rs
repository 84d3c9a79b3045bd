//! The throughput experiment, short (2 trials per mode, 4 flows of 3 s on 8
//! receive queues of 100 Mbit/s): each receive queue really is a capacity
//! its flows share, SRAP's trials reach the ideal, the JSON has the shape
//! the README documents, and the plots are written.

use srap_lab::{
    capacity::Rate,
    plot,
    steering::LabSteering,
    throughput::{self, ThroughputPlan, ThroughputReport},
    topology::{LabNet, LabNetConfig, Watch},
    unique_name,
};
use srap_tests::{built_binary, require_privileged};

/// `10.199.61.0/24`: this test's own subnet.
const SUBNET: u8 = 61;
const FLOWS: usize = 4;
const QUEUES: u32 = 8;
const TRIALS: usize = 2;

#[test]
fn srap_reaches_the_ideal_throughput_and_the_plots_are_written() {
    if !require_privileged("srap_reaches_the_ideal_throughput_and_the_plots_are_written") {
        return;
    }
    let rate: Rate = "100mbit".parse().expect("rate");
    let report = run_experiment(rate);
    let ideal = FLOWS as f64 * rate.gbps();
    assert!((report.ideal_gbps - ideal).abs() < 1e-9, "{report:?}");

    // SRAP puts every flow on a queue of its own, so every trial reaches
    // the ideal.
    assert_eq!(report.srap.queues_used, vec![FLOWS; TRIALS], "{report:?}");
    assert_eq!(report.srap.within_5pct_of_ideal, 1.0, "{report:?}");
    for (name, mode) in [("srap", &report.srap), ("kernel", &report.kernel)] {
        for (trial, used) in mode.runs.iter().zip(&mode.queues_used) {
            // Flows that share a queue share its rate: a trial carries what
            // the queues its flows landed on can carry, no more, no less.
            let capacity = *used as f64 * rate.gbps();
            let ratio = trial.aggregate_gbps / capacity;
            assert!(
                (0.95..=1.05).contains(&ratio),
                "{name}: {:.3} Gbit/s on {used} queues of {rate}: {trial:?}",
                trial.aggregate_gbps
            );
            for flow in &trial.flows {
                assert!(flow.queue.is_some(), "{name}: no queue seen for {flow:?}");
            }
        }
    }
    check_json(&report);
    check_plots(&report);
}

fn run_experiment(rate: Rate) -> ThroughputReport {
    let net = LabNet::with_config(LabNetConfig {
        subnet: SUBNET,
        queue_rate: Some(rate),
        ..LabNetConfig::new(QUEUES, Watch::Here)
    })
    .expect("lab network with per-queue capacity");
    let steering = LabSteering::start(&net.hosts.sender, &net.model, net.receiver_ip())
        .expect("binder in the sender namespace");
    let plan = ThroughputPlan {
        flows: FLOWS,
        queues: QUEUES,
        trials: TRIALS,
        duration: 3,
        queue_rate: rate,
        srap: built_binary("srap"),
    };
    throughput::run(&net, steering.cgroup(), &plan, &mut |_, _, _| {}).expect("experiment")
}

/// The keys the README documents, with one entry per trial and per flow.
fn check_json(report: &ThroughputReport) {
    let json = serde_json::to_value(report).expect("JSON");
    assert_eq!(json["flows"], FLOWS);
    assert_eq!(json["queues"], QUEUES);
    for key in ["queue_rate_gbps", "ideal_gbps"] {
        assert!(json[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {json}");
    }
    for mode in ["srap", "kernel"] {
        let m = &json[mode];
        assert_eq!(m["trials"], TRIALS, "{json}");
        let aggregates = m["aggregate_gbps"].as_array().expect("aggregate_gbps");
        assert_eq!(aggregates.len(), TRIALS, "{json}");
        let (min, median, max) = (
            m["min"].as_f64().expect("min"),
            m["median"].as_f64().expect("median"),
            m["max"].as_f64().expect("max"),
        );
        assert!(min <= median && median <= max, "{json}");
        let per_flow = m["per_flow_gbps"].as_array().expect("per_flow_gbps");
        assert_eq!(per_flow.len(), TRIALS, "{json}");
        for (flows, aggregate) in per_flow.iter().zip(aggregates) {
            let flows = flows.as_array().expect("one trial's flows");
            assert_eq!(flows.len(), FLOWS, "{json}");
            let sum: f64 = flows.iter().filter_map(|f| f.as_f64()).sum();
            let aggregate = aggregate.as_f64().expect("aggregate");
            // Each number is rounded to 0.1 Mbit/s.
            assert!((sum - aggregate).abs() < 1e-3, "{json}");
        }
    }
}

/// Six files, PNGs that are PNGs and SVGs with the charts' text in them.
fn check_plots(report: &ThroughputReport) {
    let dir = std::env::temp_dir().join(format!("srap-plots-{}", unique_name("")));
    let written = plot::write_all(report, &dir);
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let written = written.expect("plots");
    assert_eq!(written.len(), 6, "{written:?}");
    let mut names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "aggregate.png",
            "aggregate.svg",
            "flows-kernel.png",
            "flows-kernel.svg",
            "flows-srap.png",
            "flows-srap.svg"
        ]
    );
    for (name, bytes) in &files {
        if name.ends_with(".png") {
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is no PNG");
            assert!(bytes.len() > 10_000, "{name}: {} bytes", bytes.len());
        } else {
            let text = String::from_utf8_lossy(bytes);
            assert!(text.contains("<svg"), "{name} is no SVG");
            assert!(text.contains("Gbit/s"), "{name} has no title: {text}");
        }
    }
}
