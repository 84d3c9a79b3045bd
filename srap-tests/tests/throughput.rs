//! The throughput experiment, short (2 trials per mode, 4 flows of 3 s on 8
//! receive queues of 100 Mbit/s): each receive queue really is a capacity
//! its flows share, SRAP's trials reach the ideal, the JSON has the shape
//! docs/lab.md documents, and the plots are written. And one short trial
//! without an observer (`--observer off`): rates measured, queues unknown.
//! And the MPTCP experiment over two links, one short trial per kind.

use srap_lab::{
    binder::LabBinder,
    capacity::Rate,
    mptcp_throughput::{MptcpLab, MptcpPlan},
    plot,
    throughput::{self, ThroughputPlan, ThroughputReport},
    topology::{LabNet, LabNetConfig, LabObserver, Watch},
};
use srap_tests::{built_binary, harness::TempDir, require_privileged};

const FLOWS: usize = 4;
const QUEUES: u32 = 8;
const TRIALS: usize = 2;

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn srap_reaches_the_ideal_throughput_and_the_plots_are_written() {
    require_privileged("srap_reaches_the_ideal_throughput_and_the_plots_are_written");
    let rate: Rate = "100mbit".parse().expect("rate");
    let report = run_experiment(rate);
    let ideal = FLOWS as f64 * rate.gbps();
    let reported = report.ideal_gbps.expect("an ideal with a queue rate");
    assert!((reported - ideal).abs() < 1e-9, "{report:?}");

    // SRAP puts every flow on a queue of its own, so every trial reaches
    // the ideal.
    assert_eq!(
        report.srap.queues_used,
        vec![Some(FLOWS); TRIALS],
        "{report:?}"
    );
    assert_eq!(report.srap.within_5pct_of_ideal, Some(1.0), "{report:?}");
    for (name, mode) in [("srap", &report.srap), ("kernel", &report.kernel)] {
        for (trial, used) in mode.runs.iter().zip(&mode.queues_used) {
            // Flows that share a queue share its rate: a trial carries what
            // the queues its flows landed on can carry, no more, no less.
            let used = used.expect("queues seen by the observer");
            let capacity = used as f64 * rate.gbps();
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

/// One trial per mode of 2 flows for 2 s, with no observer on the lab: the
/// receiver's rates are there, every queue is unknown (`null`, not 0), and
/// asking the lab for flows is an error that names `--observer off`. On
/// queues of 100 Mbit/s, so it leaves the CPUs to the test beside it.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn without_a_observer_the_rates_are_measured_and_the_queues_unknown() {
    require_privileged("without_a_observer_the_rates_are_measured_and_the_queues_unknown");
    let rate: Rate = "100mbit".parse().expect("rate");
    let net = LabNet::with_config(LabNetConfig {
        subnet: None,
        queue_rate: Some(rate),
        observer: LabObserver::Off,
        ..LabNetConfig::new(QUEUES, Watch::Here)
    })
    .expect("lab network without an observer");
    assert_eq!(net.observer_hook(), None);
    let err = net.flows_to(5201).expect_err("no observer to ask");
    assert!(format!("{err:#}").contains("--observer off"), "{err:#}");
    let steering = LabBinder::start(&net.hosts.sender, &net.model, net.receiver_ip())
        .expect("binder in the sender namespace");
    let flows = 2;
    let plan = ThroughputPlan {
        flows,
        queues: QUEUES,
        trials: 1,
        duration: 2,
        queue_rate: Some(rate),
        srap: built_binary("srap"),
    };
    let report =
        throughput::run(&net, steering.cgroup(), &plan, &mut |_, _, _| {}).expect("experiment");
    assert_eq!(report.observer, "off");
    for (name, mode) in [("srap", &report.srap), ("kernel", &report.kernel)] {
        assert_eq!(mode.queues_used, vec![None], "{name}: {report:?}");
        let trial = &mode.runs[0];
        assert_eq!(trial.flows.len(), flows, "{name}: {trial:?}");
        assert!(trial.flows.iter().all(|f| f.queue.is_none()), "{trial:?}");
        // At least one queue's rate (both flows on one queue), at most one
        // per flow.
        let (low, high) = (0.95 * rate.gbps(), 1.05 * flows as f64 * rate.gbps());
        assert!(
            (low..=high).contains(&trial.aggregate_gbps),
            "{name}: {:.3} Gbit/s, expected {low:.3} to {high:.3}",
            trial.aggregate_gbps
        );
    }
    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(json["observer"], "off", "{json}");
    assert_eq!(
        json["srap"]["queues_used"],
        serde_json::json!([null]),
        "{json}"
    );
    assert!(
        report.render().contains("observer: off"),
        "{}",
        report.render()
    );
}

fn run_experiment(rate: Rate) -> ThroughputReport {
    let net = LabNet::with_config(LabNetConfig {
        subnet: None,
        queue_rate: Some(rate),
        ..LabNetConfig::new(QUEUES, Watch::Here)
    })
    .expect("lab network with per-queue capacity");
    let steering = LabBinder::start(&net.hosts.sender, &net.model, net.receiver_ip())
        .expect("binder in the sender namespace");
    let plan = ThroughputPlan {
        flows: FLOWS,
        queues: QUEUES,
        trials: TRIALS,
        duration: 3,
        queue_rate: Some(rate),
        srap: built_binary("srap"),
    };
    throughput::run(&net, steering.cgroup(), &plan, &mut |_, _, _| {}).expect("experiment")
}

/// The keys docs/lab.md documents, with one entry per trial and per flow.
fn check_json(report: &ThroughputReport) {
    let json = serde_json::to_value(report).expect("JSON");
    assert_eq!(json["flows"], FLOWS);
    assert_eq!(json["queues"], QUEUES);
    // `--observer auto` on a veth: tc (tcx or clsact, by kernel).
    let hook = json["observer"].as_str().unwrap_or_default();
    assert!(hook.starts_with("tc ingress"), "{json}");
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
    let dir = TempDir::new("plots").expect("temp dir");
    let written = plot::write_all(report, dir.path());
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
    drop(dir);
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

/// The MPTCP experiment, short (one trial per kind of 4 connections × 2
/// links for 2 s, 8 queues a link of 50 Mbit/s): every connection has a
/// subflow on each link by the receiver's own list, the queues really are
/// capacities (no trial carries more than the queues its subflows landed
/// on), SRAP's 8 subflows are on 8 distinct receiver CPUs and near the
/// ideal, and the JSON and the figure are as docs/lab.md shows them.
#[test]
#[ignore = "kernel: needs root, netns, bpffs and MPTCP; run as root by `cargo xtask test`"]
fn mptcp_srap_puts_every_subflow_on_a_queue_of_its_own_and_the_plot_is_written() {
    require_privileged("mptcp_srap_puts_every_subflow_on_a_queue_of_its_own");
    let (connections, rate) = (4, Rate::from_mbit(50));
    let plan = MptcpPlan {
        connections,
        queues: QUEUES,
        queue_rate: rate,
        link_rate: MptcpPlan::default_link_rate(connections, rate),
        trials: 1,
        duration: 2,
    };
    let lab = MptcpLab::start(&plan, &built_binary("srap-agent"), true)
        .expect("the two-link MPTCP lab with both agents");
    let report = lab.run(&plan, &mut |_| {}).expect("experiment");
    let trial = &report.trials[0];
    let queue_mbps = rate.bits_per_second() / 1e6;
    for (name, run) in [("srap", &trial.srap), ("kernel", &trial.kernel)] {
        for link in [1, 2] {
            let on_link = run.subflows.iter().filter(|s| s.link == link).count();
            assert_eq!(on_link, connections, "{name}: link {link}: {run:?}");
        }
        let capacity = run.queues_used as f64 * queue_mbps;
        assert!(
            run.aggregate_mbps <= 1.05 * capacity,
            "{name}: {:.1} Mbit/s on {} queues of {rate}: {run:?}",
            run.aggregate_mbps,
            run.queues_used
        );
    }
    // Queue q is CPU q on either link: SRAP's subflows fill the 8 CPUs.
    let cpus: std::collections::BTreeSet<u32> =
        trial.srap.subflows.iter().map(|s| s.queue).collect();
    assert_eq!(cpus.len(), 2 * connections, "{:?}", trial.srap);
    assert!(
        trial.srap.aggregate_mbps >= 0.85 * report.ideal_mbps,
        "SRAP {:.1} Mbit/s of the ideal {:.0}",
        trial.srap.aggregate_mbps,
        report.ideal_mbps
    );
    let json = serde_json::to_value(&report).expect("JSON");
    for key in ["started", "ideal_mbps", "bytes_per_connection", "ratio"] {
        assert!(!json[key].is_null(), "{key}: {json}");
    }
    assert!(
        json["trials"][0]["srap"]["subflows"][0]["link"].is_u64(),
        "{json}"
    );
    let dir = TempDir::new("plots").expect("temp dir");
    let written = plot::write_mptcp(&report, dir.path()).expect("the figure");
    let names: Vec<String> = written
        .iter()
        .filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(names, ["mptcp-aggregate.png", "mptcp-aggregate.svg"]);
    let svg = std::fs::read_to_string(&written[1]).expect("the SVG");
    assert!(svg.contains("MPTCP connections"), "{svg}");
}
