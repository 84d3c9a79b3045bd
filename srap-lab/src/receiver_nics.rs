//! What a receiver's second NIC buys (`srap-lab --experiment
//! receiver-nics`): the two-NIC receiver guest
//! ([`srap_harness::guest::receiver_nics_lab`]) takes one transfer of 16
//! streams to its FIRST NIC's address, each NIC's link capped like a real
//! link ([`NicCaps`]), with the kernel's ports (every stream enters the NIC
//! asked for: one link's worth) and with the sender agent's
//! `--receiver-nics spread` (the streams split over both NICs). Goal:
//! SRAP's aggregate at least 1.9× the kernel's, every trial.
//!
//! Nothing of the verdict is SRAP's own word: the aggregate is the guest's
//! server's (`iperf3 -s`'s `sum_received`), the split the addresses that
//! server accepted the streams on, checked against each NIC's own
//! `rx_bytes` and per-queue counters. The two settings take turns, the
//! kernel first in odd trials and SRAP first in even ones, so a machine
//! that gets busier hits both alike.

use std::{fmt::Write as _, path::Path, time::Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use srap_harness::{
    guest::{
        GuestImage, GuestNet,
        qemu::WIRE_RATE,
        receiver_nics_lab::{ReceiverRound, RoundSpec, TwoNicReceiver},
    },
    interrupt::interrupted,
};

use crate::{
    capacity::{self, Rate},
    throughput::Spread,
};

/// Parallel streams of each transfer: two per receive queue of one NIC, one
/// per (NIC, CPU) pair of both (the guest's NICs have a queue per CPU of
/// their node): 16.
pub const STREAMS: usize = 16;
/// SRAP's aggregate over the kernel's that every trial must reach.
pub const GOAL_RATIO: f64 = 1.9;
/// The first iperf3 port; each transfer takes the next.
const FIRST_PORT: u16 = 5601;

/// What the experiment runs.
#[derive(Debug, Clone)]
pub struct ReceiverNicsPlan {
    /// Each receiver NIC's link rate, of TCP payload.
    pub nic_rate: Rate,
    pub trials: usize,
    pub seconds: u64,
}

/// One transfer of a trial.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// The server's own rate, Mbit/s.
    pub aggregate_mbps: f64,
    /// Streams accepted through NIC 0 and NIC 1.
    pub split: [usize; 2],
    /// Distinct (NIC, CPU) pairs the streams sat on.
    pub pairs: usize,
    /// Streams whose `getpeername()` was not the address asked for.
    pub peers_moved: usize,
    /// What the NICs' own counters contradict (empty: nothing).
    pub counters_disagree: Vec<String>,
}

impl Transfer {
    fn of(round: &ReceiverRound, asked: std::net::IpAddr) -> Self {
        Self {
            aggregate_mbps: round.received_bps / 1e6,
            split: [round.through(0), round.through(1)],
            pairs: round.pairs().len(),
            peers_moved: round.peers_not(asked).len(),
            counters_disagree: round.judge_counters(),
        }
    }
}

/// One trial: both transfers and SRAP's over the kernel's.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub trial: usize,
    pub kernel: Transfer,
    pub srap: Transfer,
    pub ratio: f64,
}

impl Trial {
    /// What the guest's own view contradicts in this trial: a NIC's
    /// counters against its streams, or a SRAP stream whose
    /// `getpeername()` was not the address asked for. A trial with any is
    /// no evidence for the ratio.
    pub fn contradicted(&self) -> Vec<String> {
        let mut problems: Vec<String> = [("kernel", &self.kernel), ("SRAP", &self.srap)]
            .into_iter()
            .flat_map(|(who, t)| {
                t.counters_disagree
                    .iter()
                    .map(move |w| format!("{who}: {w}"))
            })
            .collect();
        if self.srap.peers_moved > 0 {
            problems.push(format!(
                "SRAP: {} streams' getpeername() was not the address asked for",
                self.srap.peers_moved
            ));
        }
        problems
    }
}

/// The experiment's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ReceiverNicsReport {
    pub guest_kernel: String,
    pub nic_rate_mbps: f64,
    pub streams: usize,
    pub seconds: u64,
    pub trials: Vec<Trial>,
    pub kernel_mbps: Option<Spread>,
    pub srap_mbps: Option<Spread>,
    pub ratio: Option<Spread>,
    /// Every trial at or above [`GOAL_RATIO`], and each judged right by
    /// the guest ([`Trial::contradicted`] empty).
    pub goal_met: bool,
    pub wall_seconds: f64,
}

impl ReceiverNicsReport {
    fn summarize(&mut self) {
        let of = |f: fn(&Trial) -> f64| Spread::of(&self.trials.iter().map(f).collect::<Vec<_>>());
        self.kernel_mbps = of(|t| t.kernel.aggregate_mbps);
        self.srap_mbps = of(|t| t.srap.aggregate_mbps);
        self.ratio = of(|t| t.ratio);
        self.goal_met = !self.trials.is_empty()
            && self
                .trials
                .iter()
                .all(|t| t.ratio >= GOAL_RATIO && t.contradicted().is_empty());
    }

    /// The trials and their summary as a table.
    pub fn render(&self) -> String {
        let mut out = format!(
            "receiver with two NICs capped at {:.0} Mbit/s each, {} streams to NIC 0's address, \
             {} s per transfer (guest kernel {})\n",
            self.nic_rate_mbps, self.streams, self.seconds, self.guest_kernel
        );
        let _ = writeln!(
            out,
            "  {:>5} {:>14} {:>7} {:>14} {:>7} {:>6} {:>7}",
            "trial", "kernel Mbit/s", "split", "SRAP Mbit/s", "split", "pairs", "ratio"
        );
        for t in &self.trials {
            let split = |s: [usize; 2]| format!("{}/{}", s[0], s[1]);
            let _ = writeln!(
                out,
                "  {:>5} {:>14.1} {:>7} {:>14.1} {:>7} {:>6} {:>6.2}x",
                t.trial,
                t.kernel.aggregate_mbps,
                split(t.kernel.split),
                t.srap.aggregate_mbps,
                split(t.srap.split),
                t.srap.pairs,
                t.ratio
            );
            for problem in t.contradicted() {
                let _ = writeln!(out, "        (!) {problem}");
            }
        }
        for (name, spread) in [
            ("kernel Mbit/s", &self.kernel_mbps),
            ("SRAP Mbit/s", &self.srap_mbps),
            ("SRAP / kernel", &self.ratio),
        ] {
            if let Some(s) = spread {
                let _ = writeln!(
                    out,
                    "  {name:<14} min {:.2}, median {:.2}, max {:.2}",
                    s.min, s.median, s.max
                );
            }
        }
        let _ = writeln!(
            out,
            "  goal: SRAP >= {GOAL_RATIO}x the kernel in every trial: {}",
            if self.goal_met { "met" } else { "MISSED" }
        );
        out
    }
}

/// Each receiver NIC's link rate: the `tbf` at the root of its tap in the
/// namespace, the way into the guest, which paces every guest's wire
/// ([`WIRE_RATE`]), replaced by one at the cap. The pacing is put back on
/// drop, before the namespace goes.
#[derive(Debug)]
pub struct NicCaps {
    netns: String,
    taps: Vec<String>,
}

impl NicCaps {
    /// Caps every NIC's tap of `net` at `rate` of TCP payload (the `tbf`
    /// pays for the headers too: [`capacity::wire_rate`]).
    pub fn install(net: &GuestNet, rate: Rate) -> anyhow::Result<Self> {
        let mut caps = Self {
            netns: net.ns.name().to_owned(),
            taps: Vec::new(),
        };
        for link in &net.node_links {
            let mtu = capacity::link_mtu(&caps.netns, &link.tap)?;
            let wire = capacity::wire_rate(rate, mtu);
            // A burst above a 64 KiB GSO packet, and 4 ms of the rate.
            let burst = (wire / 8.0 * 0.004).max(128.0 * 1024.0);
            caps.taps.push(link.tap.clone());
            let (rate, burst) = (format!("{wire:.0}bit"), format!("{burst:.0}"));
            capacity::tc(
                &caps.netns,
                [
                    "qdisc", "replace", "dev", &link.tap, "root", "tbf", "rate", &rate, "burst",
                    &burst, "latency", "100ms",
                ],
            )
            .with_context(|| format!("the tbf on {}", link.tap))?;
        }
        tracing::info!(%rate, nics = caps.taps.len(), "receiver NIC links capped");
        Ok(caps)
    }
}

impl Drop for NicCaps {
    fn drop(&mut self) {
        for tap in &self.taps {
            let paced = capacity::tc(
                &self.netns,
                [
                    "qdisc", "replace", "dev", tap, "root", "tbf", "rate", WIRE_RATE, "burst",
                    "256kb", "latency", "100ms",
                ],
            );
            if let Err(err) = paced {
                eprintln!("lab cleanup: putting the wire's pacing back on {tap}: {err:#}");
            }
        }
    }
}

/// Boots the two-NIC receiver (`agent` and `srap` are the host's
/// binaries), caps its links, and runs `plan.trials` trials of a kernel
/// and a SRAP transfer; `progress` hears of each trial as it ends.
pub fn run(
    image: &GuestImage,
    agent: &Path,
    srap: &Path,
    plan: &ReceiverNicsPlan,
    progress: &mut dyn FnMut(&Trial),
) -> anyhow::Result<ReceiverNicsReport> {
    let started = Instant::now();
    let mut lab = TwoNicReceiver::start(image, agent, srap, &["--receiver-nics", "spread"])?;
    // Dropped before the lab, whose namespace holds the taps.
    let caps = NicCaps::install(&lab.net, plan.nic_rate)?;
    let asked = lab.asked();
    let mut report = ReceiverNicsReport {
        guest_kernel: image.series.to_string(),
        nic_rate_mbps: plan.nic_rate.bits_per_second() / 1e6,
        streams: STREAMS,
        seconds: plan.seconds,
        trials: Vec::new(),
        kernel_mbps: None,
        srap_mbps: None,
        ratio: None,
        goal_met: false,
        wall_seconds: 0.0,
    };
    let mut port = FIRST_PORT;
    for t in 1..=plan.trials {
        let mut transfer = |steered: bool| -> anyhow::Result<Transfer> {
            if interrupted() {
                bail!("interrupted");
            }
            let title = format!("trial {t}, {}", if steered { "SRAP" } else { "kernel" });
            port += 1;
            let spec = RoundSpec {
                title: &title,
                steered,
                port,
                bind_first: false,
                streams: STREAMS,
                seconds: plan.seconds,
            };
            let round = lab.round(&spec).with_context(|| title.clone())?;
            if round.streams.len() != STREAMS {
                bail!(
                    "{title}: the server accepted {} streams, not {STREAMS}",
                    round.streams.len()
                );
            }
            Ok(Transfer::of(&round, asked))
        };
        let (kernel, srap) = if t % 2 == 1 {
            let k = transfer(false)?;
            (k, transfer(true)?)
        } else {
            let s = transfer(true)?;
            (transfer(false)?, s)
        };
        let trial = Trial {
            trial: t,
            ratio: srap.aggregate_mbps / kernel.aggregate_mbps.max(f64::MIN_POSITIVE),
            kernel,
            srap,
        };
        progress(&trial);
        report.trials.push(trial);
    }
    drop(caps);
    report.summarize();
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(mbps: f64, split: [usize; 2]) -> Transfer {
        Transfer {
            aggregate_mbps: mbps,
            split,
            pairs: STREAMS,
            peers_moved: 0,
            counters_disagree: Vec::new(),
        }
    }

    fn trial(t: usize, kernel: f64, srap: f64) -> Trial {
        Trial {
            trial: t,
            kernel: transfer(kernel, [STREAMS, 0]),
            srap: transfer(srap, [STREAMS / 2, STREAMS / 2]),
            ratio: srap / kernel,
        }
    }

    fn report(trials: Vec<Trial>) -> ReceiverNicsReport {
        let mut report = ReceiverNicsReport {
            guest_kernel: "6.1".into(),
            nic_rate_mbps: 100.0,
            streams: STREAMS,
            seconds: 4,
            trials,
            kernel_mbps: None,
            srap_mbps: None,
            ratio: None,
            goal_met: false,
            wall_seconds: 0.0,
        };
        report.summarize();
        report
    }

    /// The goal holds only when every trial reaches it: one trial short
    /// misses it, whatever the median; no trial judges nothing.
    #[test]
    fn the_goal_is_every_trial_at_its_ratio() {
        let met = report(vec![trial(1, 95.0, 190.0), trial(2, 94.0, 185.0)]);
        assert!(met.goal_met, "{}", met.render());
        let short = report(vec![
            trial(1, 95.0, 190.0),
            trial(2, 95.0, 170.0),
            trial(3, 90.0, 190.0),
        ]);
        assert!(!short.goal_met);
        assert!((short.ratio.as_ref().expect("ratios").median - 2.0).abs() < 1e-9);
        assert!(short.render().contains("MISSED"));
        assert!(!report(Vec::new()).goal_met, "no trial, no verdict");
        let mut miscounted = trial(1, 95.0, 190.0);
        miscounted.srap.counters_disagree = vec!["NIC 1 counted 0 bytes".into()];
        let contradicted = report(vec![miscounted]);
        assert!(!contradicted.goal_met, "a ratio the counters contradict");
        assert!(
            contradicted
                .render()
                .contains("(!) SRAP: NIC 1 counted 0 bytes")
        );
        let mut moved = trial(1, 95.0, 190.0);
        moved.srap.peers_moved = 2;
        assert!(
            !report(vec![moved]).goal_met,
            "getpeername() must be as asked"
        );
    }
}
