//! What a balanced bond buys, measured by the receiver (`srap-lab --bond
//! 2|4`): a bonded QEMU guest ([`BondLab`]) uploads 16 equal flows at once,
//! with the kernel's ports and with SRAP's, while each bond member is capped
//! like a real link ([`MemberCaps`]). A bond puts each flow on one member
//! for its whole life, so with equal flows the member carrying the most
//! finishes last: the trial's aggregate is about members × cap × (fair
//! share / fullest member's share). The kernel's random ports pile flows on
//! one member (5/11 and 3/1/9/3 in docs/bonds.md); the sender agent gives
//! each receiver CPU slot a member, so SRAP's split 8/8 or 4/4/4/4.
//!
//! Nothing of the verdict is SRAP's own word. The aggregate is the sink's:
//! every byte it read, over the time from the first byte to the last (the
//! round's gate holds all data until every flow is open, so the time
//! before the first byte is the harness's, not the bond's); the split is
//! each member's own `tx_bytes` in the guest ([`BondRound::by_counters`]),
//! checked against the bond's hash of the tuples the sink accepted.

use std::{fmt::Write as _, path::Path, process::Command, time::Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use srap_harness::{
    command,
    guest::{
        GuestImage, GuestNet,
        bond::BondMode,
        bond_lab::{BondLab, BondRound, Ports, ROUND_FLOW_BYTES, ROUND_FLOWS},
    },
    interrupt::interrupted,
    names::unique_name,
    readers::SinkFlow,
};

use crate::{
    capacity::{self, Rate},
    throughput::Spread,
};

/// The bond's mode on the command line (`--bond-mode`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BondModeArg {
    /// `balance-xor`, `layer3+4`.
    Xor,
    /// `802.3ad` (LACP, a minimal partner on the host's taps), `layer3+4`.
    Lacp,
}

impl BondModeArg {
    pub fn mode(self) -> BondMode {
        match self {
            Self::Xor => BondMode::BalanceXor,
            Self::Lacp => BondMode::Lacp,
        }
    }
}

/// The NICs' enslavement order for `members`: out of name order, as the
/// bond tests enslave them, so a model that took name order would show.
pub fn enslavement_order(members: u32) -> anyhow::Result<Vec<u32>> {
    Ok(match members {
        2 => vec![1, 0],
        3 => vec![2, 0, 1],
        4 => vec![2, 0, 3, 1],
        n => bail!("--bond takes 2 to 4 members, not {n}"),
    })
}

/// Each member's link rate: what the guest sends on a member's tap is
/// redirected at the tap's ingress (`u32 match u32 0 0`, IPv4 only, so the
/// LACP frames keep their way) to an `ifb` of its own whose root is a
/// `tbf`. Shaping on the host keeps the guest image as it is (no `tc` in
/// it), and a member's drops and queueing are still the sender's own TCP's
/// to feel. Removed on drop, before the namespace goes.
#[derive(Debug)]
pub struct MemberCaps {
    netns: String,
    /// (tap, its ifb), in the guest's PCI order (`eth0` first).
    links: Vec<(String, String)>,
}

impl MemberCaps {
    /// Caps every member tap of `net` at `rate` of TCP payload (the `tbf`
    /// pays for the headers too: [`capacity::wire_rate`]).
    pub fn install(net: &GuestNet, rate: Rate) -> anyhow::Result<Self> {
        let netns = net.ns.name().to_owned();
        let mut caps = Self {
            netns: netns.clone(),
            links: Vec::new(),
        };
        for tap in &net.member_taps {
            let ifb = unique_name("i");
            command::run(
                Command::new("ip").args(["-n", &netns, "link", "add", &ifb, "type", "ifb"]),
            )
            .with_context(|| format!("adding {ifb} for {tap} (needs CONFIG_IFB)"))?;
            // From here on the guard removes it, whatever fails below.
            caps.links.push((tap.clone(), ifb.clone()));
            command::run(Command::new("ip").args(["-n", &netns, "link", "set", &ifb, "up"]))?;
            let mtu = capacity::link_mtu(&netns, tap)?;
            let wire = capacity::wire_rate(rate, mtu);
            let burst = tbf_burst(wire);
            capacity::add_tbf(&netns, &ifb, &["root"], wire, burst)
                .with_context(|| format!("the tbf on {ifb}"))?;
            capacity::tc(
                &netns,
                ["qdisc", "add", "dev", tap, "handle", "ffff:", "ingress"],
            )
            .with_context(|| format!("the ingress qdisc on {tap}"))?;
            capacity::tc(
                &netns,
                [
                    "filter", "add", "dev", tap, "parent", "ffff:", "protocol", "ip", "u32",
                    "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
                    &ifb,
                ],
            )
            .with_context(|| format!("redirecting {tap}'s ingress to {ifb}"))?;
        }
        tracing::info!(%rate, members = caps.links.len(), "member links capped");
        Ok(caps)
    }

    /// Each member tap and its ifb, in the guest's PCI order.
    pub fn links(&self) -> &[(String, String)] {
        &self.links
    }
}

impl Drop for MemberCaps {
    fn drop(&mut self) {
        for (tap, ifb) in &self.links {
            // The ingress qdisc may not have been added yet: its absence
            // is no failure.
            let _ = capacity::tc(&self.netns, ["qdisc", "del", "dev", tap, "ingress"]);
            if let Err(err) =
                command::run(Command::new("ip").args(["-n", &self.netns, "link", "del", ifb]))
            {
                eprintln!("lab cleanup: removing {ifb}: {err:#}");
            }
        }
    }
}

/// A `tbf` burst for `wire` bit/s: 4 ms of it, and at least 32 KiB so the
/// bucket holds many full frames (the guest sends no GSO packets: its
/// bond's offloads are off).
fn tbf_burst(wire: f64) -> f64 {
    (wire / 8.0 * 0.004).max(32.0 * 1024.0)
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BondPlan {
    pub members: u32,
    pub mode: BondModeArg,
    pub member_rate: Rate,
    /// Trials per kind of port choice.
    pub trials: usize,
    /// Seconds a balanced trial takes at the cap: sizes the flows.
    pub seconds: u64,
}

impl BondPlan {
    /// What every flow uploads: [`ROUND_FLOWS`] of them fill `members`
    /// capped links for `seconds` when evenly spread, and each is at least
    /// [`ROUND_FLOW_BYTES`] so the members' counters count whole flows.
    pub fn flow_bytes(&self) -> u64 {
        let total = f64::from(self.members) * self.member_rate.bits_per_second() / 8.0
            * self.seconds as f64;
        ((total / ROUND_FLOWS as f64) as u64).max(ROUND_FLOW_BYTES)
    }

    /// The bond's capacity: every member at its cap.
    pub fn ideal_mbps(&self) -> f64 {
        f64::from(self.members) * self.member_rate.bits_per_second() / 1e6
    }
}

/// The aggregate the receiver saw: every byte the sink read, over the time
/// from the first byte to the last (seconds); `None` when no time passed.
pub fn aggregate_mbps(received: &[SinkFlow]) -> Option<(f64, f64)> {
    let first = received.iter().filter_map(|f| f.first_byte).min()?;
    let last = received.iter().filter_map(|f| f.last_byte).max()?;
    let seconds = last.duration_since(first).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let bytes: u64 = received.iter().map(|f| f.bytes).sum();
    Some((bytes as f64 * 8.0 / seconds / 1e6, seconds))
}

/// The share of the ideal a split of equal flows allows: the fullest member
/// finishes last, at its cap, while the rest idle once done; so the fair
/// share over the fullest one's (1 when even). `None` without flows.
pub fn split_allows(split: &[usize]) -> Option<f64> {
    let flows: usize = split.iter().sum();
    let fullest = *split.iter().max()?;
    if flows == 0 || fullest == 0 {
        return None;
    }
    Some(flows as f64 / split.len() as f64 / fullest as f64)
}

/// `5/11`; an unclear count is `?`.
pub fn split_text(split: &[Option<usize>]) -> String {
    split
        .iter()
        .map(|n| n.map_or_else(|| "?".to_owned(), |n| n.to_string()))
        .collect::<Vec<_>>()
        .join("/")
}

/// One trial: a round of 16 equal flows, as the sink and the counters saw
/// it.
#[derive(Debug, Clone, Serialize)]
pub struct BondTrial {
    /// 1-based, shared by the kernel and SRAP trial run back to back.
    pub trial: usize,
    pub ports: Ports,
    /// Flows per member (enslavement order) by its own `tx_bytes`; `null`
    /// where its bytes were not a whole number of flows.
    pub by_counters: Vec<Option<usize>>,
    /// Flows per member by the bond's hash of the accepted tuples.
    pub by_model: Vec<usize>,
    /// The two agree, member by member.
    pub counters_agree: bool,
    /// Distinct receiver CPUs of the flows (the described NIC's model).
    pub distinct_cpus: usize,
    /// Bytes the sink read in all.
    pub bytes: u64,
    /// First byte to last, at the sink.
    pub seconds: f64,
    /// First accept to first byte: the round's gate, left out of the rate.
    pub gate_seconds: f64,
    pub aggregate_mbps: f64,
    pub fraction_of_ideal: f64,
    /// What the split by the model allows ([`split_allows`]).
    pub split_allows: Option<f64>,
    /// Per member (enslavement order), seconds from the trial's first
    /// byte to the last of its flows' (by the model's member); `null` for
    /// a member without flows. An even split ends with its slowest member.
    pub member_done_s: Vec<Option<f64>>,
}

impl BondTrial {
    fn of(trial: usize, ports: Ports, round: &BondRound, ideal_mbps: f64) -> Option<Self> {
        let (aggregate_mbps, seconds) = aggregate_mbps(&round.received)?;
        let first_accept = round.received.iter().map(|f| f.accepted).min()?;
        let first_byte = round.received.iter().filter_map(|f| f.first_byte).min()?;
        let by_model = round.by_model();
        let member_done_s = round
            .slaves
            .iter()
            .map(|member| {
                let last = round
                    .flows
                    .iter()
                    .zip(&round.received)
                    .filter(|(flow, _)| &flow.member == member)
                    .filter_map(|(_, got)| got.last_byte)
                    .max()?;
                Some(last.saturating_duration_since(first_byte).as_secs_f64())
            })
            .collect();
        Some(Self {
            member_done_s,
            trial,
            ports,
            by_counters: round.by_counters(),
            split_allows: split_allows(&by_model),
            by_model,
            counters_agree: round.counters_agree_with_model(),
            distinct_cpus: round.distinct_cpus(),
            bytes: round.received.iter().map(|f| f.bytes).sum(),
            seconds,
            gate_seconds: first_byte
                .saturating_duration_since(first_accept)
                .as_secs_f64(),
            aggregate_mbps,
            fraction_of_ideal: aggregate_mbps / ideal_mbps,
        })
    }
}

/// Min, median and max of one kind of trial.
#[derive(Debug, Clone, Serialize)]
pub struct BondSummary {
    pub trials: usize,
    pub aggregate_mbps: Spread,
    pub fraction_of_ideal: Spread,
    /// Trials whose split by the counters was even over the members.
    pub even_splits: usize,
}

impl BondSummary {
    fn of(trials: &[&BondTrial], members: usize) -> Option<Self> {
        let rates: Vec<f64> = trials.iter().map(|t| t.aggregate_mbps).collect();
        let fractions: Vec<f64> = trials.iter().map(|t| t.fraction_of_ideal).collect();
        let even = ROUND_FLOWS / members.max(1);
        Some(Self {
            trials: trials.len(),
            aggregate_mbps: Spread::of(&rates)?,
            fraction_of_ideal: Spread::of(&fractions)?,
            even_splits: trials
                .iter()
                .filter(|t| t.by_counters.iter().all(|n| *n == Some(even)))
                .count(),
        })
    }
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct BondThroughputReport {
    pub members: u32,
    /// `balance-xor` or `802.3ad`.
    pub mode: String,
    /// The members in enslavement order (the splits' order).
    pub slaves: Vec<String>,
    pub guest_kernel: String,
    pub member_rate_mbps: f64,
    pub ideal_mbps: f64,
    pub flows: usize,
    pub flow_bytes: u64,
    /// Every trial, in the order run (kernel, then SRAP, per pair).
    pub trials: Vec<BondTrial>,
    pub kernel: Option<BondSummary>,
    pub srap: Option<BondSummary>,
    /// Wall time of the whole run, boot to last trial.
    pub wall_seconds: f64,
}

impl BondThroughputReport {
    /// The trials of one kind.
    pub fn of(&self, ports: Ports) -> Vec<&BondTrial> {
        self.trials.iter().filter(|t| t.ports == ports).collect()
    }

    fn summarize(&mut self) {
        let members = self.members as usize;
        self.kernel = BondSummary::of(&self.of(Ports::Kernel), members);
        self.srap = BondSummary::of(&self.of(Ports::Steered), members);
    }

    /// The title line: what ran.
    pub fn title(&self) -> String {
        format!(
            "{} flows of {:.1} MB over {} members ({}, layer3+4; {} guest), each capped at \
             {:.0} Mbit/s: ideal {:.0} Mbit/s",
            self.flows,
            self.flow_bytes as f64 / 1e6,
            self.members,
            self.mode,
            self.guest_kernel,
            self.member_rate_mbps,
            self.ideal_mbps
        )
    }

    /// The per-trial table and the summary.
    pub fn render(&self) -> String {
        let mut out = format!("{}\n", self.title());
        let _ = writeln!(
            out,
            "  {:>5}  {:<6}  {:<16}  {:>6}  {:>8}  {:>8}  {:>8}  {:>4}  members done (s)",
            "trial", "ports", "split (counters)", "model", "Mbit/s", "of ideal", "allows", "CPUs"
        );
        for t in &self.trials {
            let model: Vec<Option<usize>> = t.by_model.iter().copied().map(Some).collect();
            let _ = writeln!(
                out,
                "  {:>5}  {:<6}  {:<16}  {:>6}  {:>8.1}  {:>7.1}%  {:>8}  {:>4}  {}",
                t.trial,
                t.ports.label(),
                split_text(&t.by_counters),
                if t.counters_agree {
                    "=".to_owned()
                } else {
                    split_text(&model)
                },
                t.aggregate_mbps,
                t.fraction_of_ideal * 100.0,
                t.split_allows
                    .map_or_else(|| "-".to_owned(), |a| format!("{:.1}%", a * 100.0)),
                t.distinct_cpus,
                t.member_done_s
                    .iter()
                    .map(|d| d.map_or_else(|| "-".to_owned(), |d| format!("{d:.1}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        out += &self.render_summary();
        out
    }

    /// The summary table: per kind of port, min, median and max.
    pub fn render_summary(&self) -> String {
        let mut out = format!(
            "  {:<13} {:>21} {:>21} {:>21} {:>11}\n",
            "Mbit/s", "min", "median", "max", "even split"
        );
        for (name, summary) in [("kernel ports", &self.kernel), ("SRAP ports", &self.srap)] {
            let Some(s) = summary else { continue };
            let cell = |rate: f64, fraction: f64| format!("{rate:.1} ({:.1}%)", fraction * 100.0);
            let _ = writeln!(
                out,
                "  {:<13} {:>21} {:>21} {:>21} {:>11}",
                name,
                cell(s.aggregate_mbps.min, s.fraction_of_ideal.min),
                cell(s.aggregate_mbps.median, s.fraction_of_ideal.median),
                cell(s.aggregate_mbps.max, s.fraction_of_ideal.max),
                format!("{} of {}", s.even_splits, s.trials)
            );
        }
        let _ = writeln!(
            out,
            "  {:<13} {:>21}   ({} members x {:.0} Mbit/s)",
            "ideal",
            format!("{:.1}", self.ideal_mbps),
            self.members,
            self.member_rate_mbps
        );
        out
    }
}

/// Boots the bonded guest (`agent` is the host's `srap-agent`), caps its
/// members, and runs `plan.trials` pairs of trials, kernel ports then
/// SRAP's; `progress` hears of each trial as it ends.
pub fn run(
    image: &GuestImage,
    agent: &Path,
    plan: &BondPlan,
    progress: &mut dyn FnMut(&BondTrial, &BondRound),
) -> anyhow::Result<BondThroughputReport> {
    let started = Instant::now();
    let order = enslavement_order(plan.members)?;
    let mode = plan.mode.mode();
    let mut lab = BondLab::start(image, agent, &order, mode, "")?;
    // Dropped before the lab, whose namespace holds the taps and ifbs.
    let caps = MemberCaps::install(&lab.net, plan.member_rate)?;
    let flow_bytes = plan.flow_bytes();
    let ideal_mbps = plan.ideal_mbps();
    let mut report = BondThroughputReport {
        members: plan.members,
        mode: mode.sysfs().to_owned(),
        slaves: lab.bond.enslaved.clone(),
        guest_kernel: image.series.to_string(),
        member_rate_mbps: plan.member_rate.bits_per_second() / 1e6,
        ideal_mbps,
        flows: ROUND_FLOWS,
        flow_bytes,
        trials: Vec::new(),
        kernel: None,
        srap: None,
        wall_seconds: 0.0,
    };
    for t in 1..=plan.trials {
        for ports in [Ports::Kernel, Ports::Steered] {
            if interrupted() {
                bail!("interrupted");
            }
            let title = format!("trial {t}, {} ports", ports.label());
            let round = lab
                .round_of(ports, &title, flow_bytes)
                .with_context(|| title.clone())?;
            if round.flows.len() != ROUND_FLOWS || round.open_at_once != ROUND_FLOWS {
                bail!(
                    "{title}: {} flows accepted, {} open at once, not {ROUND_FLOWS}\n{}",
                    round.flows.len(),
                    round.open_at_once,
                    round.render()
                );
            }
            let trial = BondTrial::of(t, ports, &round, ideal_mbps)
                .with_context(|| format!("{title}: the sink received no data"))?;
            progress(&trial, &round);
            report.trials.push(trial);
        }
    }
    drop(caps);
    report.summarize();
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn flow(port: u16, start: Instant, first_ms: u64, last_ms: u64, bytes: u64) -> SinkFlow {
        SinkFlow {
            port,
            peer_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            accepted: start,
            first_byte: Some(start + Duration::from_millis(first_ms)),
            last_byte: Some(start + Duration::from_millis(last_ms)),
            bytes,
        }
    }

    #[test]
    fn the_aggregate_is_all_bytes_over_first_byte_to_last() {
        let start = Instant::now();
        // 10 MB in all, from 0.5 s to 4.5 s: 20 Mbit/s; the half second
        // before the first byte (the gate) is not counted.
        let flows = [
            flow(1, start, 500, 2500, 4_000_000),
            flow(2, start, 600, 4500, 6_000_000),
        ];
        let (mbps, seconds) = aggregate_mbps(&flows).expect("an aggregate");
        assert!((seconds - 4.0).abs() < 1e-9, "{seconds}");
        assert!((mbps - 20.0).abs() < 1e-9, "{mbps}");
        // No byte, or no time: no aggregate.
        let idle = SinkFlow {
            first_byte: None,
            last_byte: None,
            bytes: 0,
            ..flows[0]
        };
        assert_eq!(aggregate_mbps(&[idle]), None);
        assert_eq!(aggregate_mbps(&[flow(1, start, 5, 5, 10)]), None);
    }

    #[test]
    fn a_split_allows_the_fair_share_over_the_fullest_members() {
        let allows = |s: &[usize]| split_allows(s).expect("a split");
        assert!((allows(&[8, 8]) - 1.0).abs() < 1e-9);
        assert!((allows(&[4, 4, 4, 4]) - 1.0).abs() < 1e-9);
        // 5/11: the fullest carries 11 of a fair 8.
        assert!((allows(&[5, 11]) - 8.0 / 11.0).abs() < 1e-9);
        // 3/1/9/3: 9 of a fair 4.
        assert!((allows(&[3, 1, 9, 3]) - 4.0 / 9.0).abs() < 1e-9);
        assert_eq!(split_allows(&[]), None);
        assert_eq!(split_allows(&[0, 0]), None);
    }

    #[test]
    fn flows_fill_the_capped_members_for_the_trials_seconds() {
        let plan = |members, rate: &str, seconds| BondPlan {
            members,
            mode: BondModeArg::Xor,
            member_rate: rate.parse().expect("a rate"),
            trials: 1,
            seconds,
        };
        // 2 × 40 Mbit/s for 4 s = 40 MB over 16 flows.
        let two = plan(2, "40mbit", 4);
        assert_eq!(two.flow_bytes(), 2_500_000);
        assert!((two.ideal_mbps() - 80.0).abs() < 1e-9);
        // Never below what the counters need to count whole flows.
        assert_eq!(plan(2, "1mbit", 1).flow_bytes(), ROUND_FLOW_BYTES);
        assert!((plan(4, "20mbit", 5).ideal_mbps() - 80.0).abs() < 1e-9);
    }

    #[test]
    fn splits_print_unclear_counts_as_a_question_mark() {
        assert_eq!(split_text(&[Some(5), Some(11)]), "5/11");
        assert_eq!(split_text(&[Some(3), None, Some(9)]), "3/?/9");
    }

    #[test]
    fn members_are_enslaved_out_of_name_order() {
        assert_eq!(enslavement_order(2).ok(), Some(vec![1, 0]));
        assert_eq!(enslavement_order(4).ok(), Some(vec![2, 0, 3, 1]));
        assert!(enslavement_order(1).is_err());
        assert!(enslavement_order(5).is_err());
    }

    #[test]
    fn the_burst_holds_full_frames_and_4_ms_at_high_rates() {
        assert!((tbf_burst(40e6) - 32.0 * 1024.0).abs() < 1e-9);
        assert!((tbf_burst(1e9) - 500_000.0).abs() < 1e-6);
    }
}
