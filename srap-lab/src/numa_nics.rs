//! `srap-lab --experiment numa-nics`: how many bytes reach a reading
//! thread through the NIC of the other NUMA node, with the kernel's choice
//! of NIC and with SRAP's (`--local-nics numa`), side by side in one QEMU
//! guest that is a dual-socket host with a NIC per socket
//! ([`NumaLab`], the guest and rounds the CI test `numa_nics.rs` judges
//! with).
//!
//! Each trial is a round of one thread pinned per vCPU downloading (then
//! uploading) with the kernel's choice, then one under `srap exec`. The
//! kernel routes every flow by NIC 0, so node 1's readers receive through
//! the far socket's NIC; SRAP binds each flow to its reader's node's NIC
//! and a port whose queue is its reader's CPU. Per round: the bytes
//! through the far node's NIC (each NIC's own `rx_bytes` or `tx_bytes`,
//! shared among its flows by what the server moved on each:
//! [`Round::far_nic_bytes`]), the readers whose flow used their node's NIC
//! (by the address the server accepted it from), those whose data was
//! processed on their own CPU (`SO_INCOMING_CPU`), and the packets RPS
//! moved between CPUs.

use std::{fmt::Write as _, time::Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;
use srap_harness::{
    guest::{
        GuestImage,
        numa::NODES,
        numa_lab::{self, Choice, NumaLab, Round},
    },
    interrupt::interrupted,
    readers::Transfer,
};

use crate::throughput::Spread;

/// The namespace's first port; each round takes the next, so none meets
/// the last one's TIME_WAIT.
const FIRST_PORT: u16 = 5410;

/// What to run.
#[derive(Debug, Clone)]
pub struct NumaPlan {
    pub trials: usize,
    /// Seconds each thread moves data.
    pub seconds: u64,
    /// Which ways each trial runs (downloads first).
    pub transfers: Vec<Transfer>,
}

/// One round as the report keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct NumaRound {
    /// 1-based, shared by the kernel's round and SRAP's.
    pub trial: usize,
    pub choice: Choice,
    pub transfer: Transfer,
    pub readers: usize,
    /// Readers whose flow went through their own node's NIC.
    pub own_node_nic: usize,
    /// Readers whose data (uploads: ACKs) was processed on their own CPU.
    pub own_cpu: usize,
    /// Bytes through the far node's NIC ([`Round::far_nic_bytes`]).
    pub far_nic_bytes: u64,
    /// Every NIC's counter of the direction, in node order.
    pub nic_bytes: Vec<u64>,
    /// Payload the server moved, all flows.
    pub payload_bytes: u64,
    /// Packets RPS moved to another CPU (`received_rps`).
    pub rps_packets: u64,
    /// What fails the round's judges (those of the CI test); empty when
    /// it is what its choice must be.
    pub judged: Vec<String>,
}

impl NumaRound {
    fn of(trial: usize, round: &Round) -> Self {
        Self {
            trial,
            choice: round.choice,
            transfer: round.transfer,
            readers: round.flows.len(),
            own_node_nic: round.through_own_node(),
            own_cpu: round.on_reader_cpu(),
            far_nic_bytes: round.far_nic_bytes(),
            nic_bytes: (0..round.counters.nics.len())
                .map(|nic| round.nic_bytes(nic))
                .collect(),
            payload_bytes: round.flows.iter().map(|f| f.served).sum(),
            rps_packets: round.counters.received_rps,
            judged: numa_lab::judge(round),
        }
    }

    /// The share of the NICs' bytes that went through the far node's NIC.
    pub fn far_share(&self) -> f64 {
        let all: u64 = self.nic_bytes.iter().sum();
        if all == 0 {
            0.0
        } else {
            self.far_nic_bytes as f64 / all as f64
        }
    }
}

/// One choice in one direction over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct NumaSummary {
    pub choice: Choice,
    pub transfer: Transfer,
    pub trials: usize,
    /// MB through the far node's NIC per trial.
    pub far_nic_mb: Spread,
    /// Share of the NICs' bytes through the far node's NIC, all trials.
    pub far_share: f64,
    /// Readers on their node's NIC and on their own CPU, of all readers.
    pub own_node_nic: usize,
    pub own_cpu: usize,
    pub readers: usize,
    pub rps_packets: u64,
    /// Rounds whose judges found nothing.
    pub judged_right: usize,
}

impl NumaSummary {
    fn of(rounds: &[&NumaRound]) -> Option<Self> {
        let first = rounds.first()?;
        let far: Vec<f64> = rounds
            .iter()
            .map(|r| r.far_nic_bytes as f64 / 1e6)
            .collect();
        let all: u64 = rounds.iter().flat_map(|r| &r.nic_bytes).sum();
        let far_bytes: u64 = rounds.iter().map(|r| r.far_nic_bytes).sum();
        Some(Self {
            choice: first.choice,
            transfer: first.transfer,
            trials: rounds.len(),
            far_nic_mb: Spread::of(&far)?,
            far_share: if all == 0 {
                0.0
            } else {
                far_bytes as f64 / all as f64
            },
            own_node_nic: rounds.iter().map(|r| r.own_node_nic).sum(),
            own_cpu: rounds.iter().map(|r| r.own_cpu).sum(),
            readers: rounds.iter().map(|r| r.readers).sum(),
            rps_packets: rounds.iter().map(|r| r.rps_packets).sum(),
            judged_right: rounds.iter().filter(|r| r.judged.is_empty()).count(),
        })
    }
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct NumaNicsReport {
    pub guest_kernel: String,
    pub nodes: u32,
    pub cpus_per_node: u32,
    pub queues_per_nic: u32,
    /// The guest's NICs as it shows them, one line each.
    pub layout: Vec<String>,
    pub seconds: u64,
    /// Every round, in the order run (per trial and direction: the
    /// kernel's, then SRAP's).
    pub rounds: Vec<NumaRound>,
    /// Per direction, the kernel's then SRAP's.
    pub summary: Vec<NumaSummary>,
    /// The guest binder's counters over SRAP's rounds: flows whose NIC it
    /// chose, and flows it placed as the route would (a NIC it could not
    /// use).
    pub nic_chosen: u64,
    pub nic_fallback: u64,
    /// Wall time of the whole run, boot to last round.
    pub wall_seconds: f64,
}

impl NumaNicsReport {
    /// The rounds of one choice in one direction.
    pub fn of(&self, choice: Choice, transfer: Transfer) -> Vec<&NumaRound> {
        self.rounds
            .iter()
            .filter(|r| r.choice == choice && r.transfer == transfer)
            .collect()
    }

    pub fn title(&self) -> String {
        format!(
            "{} NUMA nodes of {} vCPUs, a {}-queue virtio-net NIC on each ({} guest); one reader \
             pinned per vCPU, {} s each; the route prefers NIC 0",
            self.nodes, self.cpus_per_node, self.queues_per_nic, self.guest_kernel, self.seconds
        )
    }

    /// The layout, the per-round table and the summary.
    pub fn render(&self) -> String {
        let mut out = format!("{}\n", self.title());
        for line in &self.layout {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(
            out,
            "  {:>5}  {:<8}  {:<6}  {:>12} {:>7}  {:>9}  {:>9}  {:>7}  {:>15}",
            "trial",
            "way",
            "NIC by",
            "far NIC, MB",
            "share",
            "own NIC",
            "own CPU",
            "RPS",
            "MB per NIC"
        );
        for r in &self.rounds {
            let _ = writeln!(
                out,
                "  {:>5}  {:<8}  {:<6}  {:>12.1} {:>6.1}%  {:>9}  {:>9}  {:>7}  {:>15}{}",
                r.trial,
                way(r.transfer),
                r.choice.label(),
                r.far_nic_bytes as f64 / 1e6,
                r.far_share() * 100.0,
                format!("{}/{}", r.own_node_nic, r.readers),
                format!("{}/{}", r.own_cpu, r.readers),
                r.rps_packets,
                r.nic_bytes
                    .iter()
                    .map(|b| format!("{:.1}", *b as f64 / 1e6))
                    .collect::<Vec<_>>()
                    .join(" + "),
                if r.judged.is_empty() { "" } else { "  (!)" }
            );
        }
        out += &self.render_summary();
        out
    }

    /// Per direction and choice: the far NIC's MB over the trials, and
    /// the readers' counts over all of them.
    pub fn render_summary(&self) -> String {
        let mut out = format!(
            "  {:<8}  {:<6}  {:>20}  {:>7}  {:>9}  {:>9}  {:>7}  {:>7}\n",
            "summary",
            "NIC by",
            "far NIC MB min/med/max",
            "share",
            "own NIC",
            "own CPU",
            "RPS",
            "judged"
        );
        for s in &self.summary {
            let _ = writeln!(
                out,
                "  {:<8}  {:<6}  {:>20}  {:>6.1}%  {:>9}  {:>9}  {:>7}  {:>7}",
                way(s.transfer),
                s.choice.label(),
                format!(
                    "{:.1}/{:.1}/{:.1}",
                    s.far_nic_mb.min, s.far_nic_mb.median, s.far_nic_mb.max
                ),
                s.far_share * 100.0,
                format!("{}/{}", s.own_node_nic, s.readers),
                format!("{}/{}", s.own_cpu, s.readers),
                s.rps_packets,
                format!("{}/{}", s.judged_right, s.trials)
            );
        }
        let _ = writeln!(
            out,
            "  SRAP's hook chose the NIC of {} flows, fell back to the route for {}",
            self.nic_chosen, self.nic_fallback
        );
        for r in self.rounds.iter().filter(|r| !r.judged.is_empty()) {
            let _ = writeln!(
                out,
                "  (!) trial {} {} {}: {}",
                r.trial,
                way(r.transfer),
                r.choice.label(),
                r.judged.join("; ")
            );
        }
        out
    }

    fn summarize(&mut self, transfers: &[Transfer]) {
        self.summary = transfers
            .iter()
            .flat_map(|&t| [Choice::Kernel, Choice::Srap].map(|c| (c, t)))
            .filter_map(|(c, t)| NumaSummary::of(&self.of(c, t)))
            .collect();
    }
}

/// `download` or `upload`, as the table prints it.
pub fn way(transfer: Transfer) -> &'static str {
    match transfer {
        Transfer::Download => "download",
        Transfer::Upload => "upload",
    }
}

/// Boots the two-node guest from `image`, starts its sender agent, and
/// runs `plan.trials` trials, each direction the kernel's round then
/// SRAP's; `progress` hears of each round as it ends, with its full table.
pub fn run(
    image: &GuestImage,
    plan: &NumaPlan,
    progress: &mut dyn FnMut(&NumaRound, &str),
) -> anyhow::Result<NumaNicsReport> {
    let started = Instant::now();
    let mut lab = NumaLab::start(image)?;
    // The agent steers only the cgroup `srap exec` puts SRAP's readers in:
    // the kernel's rounds, outside it, keep the route's choice.
    lab.start_numa_sender()?;
    let before = lab.nic_choices()?;
    let mut report = NumaNicsReport {
        guest_kernel: image.series.to_string(),
        nodes: NODES,
        cpus_per_node: lab.numa.shape.cpus_per_node,
        queues_per_nic: lab.numa.shape.queues,
        layout: lab.numa.render().lines().map(str::to_owned).collect(),
        seconds: plan.seconds,
        rounds: Vec::new(),
        summary: Vec::new(),
        nic_chosen: 0,
        nic_fallback: 0,
        wall_seconds: 0.0,
    };
    let mut port = FIRST_PORT;
    let mut srap_flows = 0;
    for trial in 1..=plan.trials {
        for &transfer in &plan.transfers {
            for choice in [Choice::Kernel, Choice::Srap] {
                if interrupted() {
                    bail!("interrupted");
                }
                let round = lab
                    .round(choice, transfer, port, plan.seconds)
                    .with_context(|| {
                        format!("trial {trial}, {} {}", choice.label(), way(transfer))
                    })?;
                port += 1;
                if choice == Choice::Srap {
                    srap_flows += round.flows.len() as u64;
                }
                let kept = NumaRound::of(trial, &round);
                progress(&kept, &round.render(&lab.numa));
                report.rounds.push(kept);
            }
        }
    }
    let after = lab.wait_nic_choices(before.0 + before.1 + srap_flows)?;
    report.nic_chosen = after.0 - before.0;
    report.nic_fallback = after.1 - before.1;
    report.summarize(&plan.transfers);
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(trial: usize, choice: Choice, far: u64, nic_bytes: Vec<u64>) -> NumaRound {
        NumaRound {
            trial,
            choice,
            transfer: Transfer::Download,
            readers: 4,
            own_node_nic: if far == 0 { 4 } else { 2 },
            own_cpu: if far == 0 { 4 } else { 1 },
            far_nic_bytes: far,
            nic_bytes,
            payload_bytes: 8_000_000,
            rps_packets: 0,
            judged: Vec::new(),
        }
    }

    #[test]
    fn the_summary_adds_the_trials_of_one_choice_and_direction() {
        let mut report = NumaNicsReport {
            guest_kernel: "6.1".into(),
            nodes: 2,
            cpus_per_node: 2,
            queues_per_nic: 4,
            layout: Vec::new(),
            seconds: 3,
            rounds: vec![
                round(1, Choice::Kernel, 4_000_000, vec![8_000_000, 0]),
                round(1, Choice::Srap, 0, vec![4_000_000, 4_000_000]),
                round(2, Choice::Kernel, 6_000_000, vec![12_000_000, 0]),
                round(2, Choice::Srap, 0, vec![4_000_000, 4_000_000]),
            ],
            summary: Vec::new(),
            nic_chosen: 8,
            nic_fallback: 0,
            wall_seconds: 1.0,
        };
        report.rounds[2].judged.push("one reader on NIC 1".into());
        report.summarize(&[Transfer::Download]);
        let [kernel, srap] = &report.summary[..] else {
            panic!("{:?}", report.summary);
        };
        assert_eq!(kernel.choice, Choice::Kernel);
        assert_eq!(
            kernel.far_nic_mb,
            Spread::of(&[4.0, 6.0]).expect("a spread")
        );
        assert!((kernel.far_share - 0.5).abs() < 1e-9);
        assert_eq!((kernel.own_node_nic, kernel.readers), (4, 8));
        assert_eq!(kernel.judged_right, 1);
        assert_eq!(srap.far_share, 0.0);
        assert_eq!((srap.own_cpu, srap.judged_right), (8, 2));
        assert!((report.rounds[0].far_share() - 0.5).abs() < 1e-9);
        let table = report.render();
        assert!(
            table.contains("(!) trial 2 download kernel: one reader on NIC 1"),
            "{table}"
        );
    }
}
