//! The closed loop's judge: do the flows the observer sees land on the queue
//! the served description computes for them? `ethtool -x` is a claim; this
//! is the check of it, made continuously. The verdict goes into the status,
//! the metrics and to every sender, which stops steering toward a receiver
//! whose landings contradict its description.
//!
//! Each flow is judged once, on its first sample with a known queue, and
//! only the most recent [`WINDOW`] flows count, so an old mistake fades and
//! a device that starts lying is caught within a few flows. A new
//! description version starts the judgement over.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;

pub use srap_common::wire::{LandingReport, LandingVerdict};

use super::FlowRow;

/// Drivers of virtual devices that do no RSS: the queue a packet shows
/// there was chosen by whoever sent it into the device.
pub const NO_RSS_DRIVERS: &[&str] = &["veth", "bridge", "macvlan", "ipvlan", "vxlan", "tun"];

/// Flows the verdict is made over.
pub const WINDOW: usize = 32;
/// Fewer judged flows than this give no verdict.
pub const MIN_FLOWS: usize = 4;
/// At most this share on the predicted queue: contradicted. (A random
/// placement on Q queues matches 1/Q of the time.)
pub const CONTRADICTED_BELOW: f64 = 0.5;
/// At least this share: agreed. In between, the verdict stays as it was.
pub const AGREED_FROM: f64 = 0.9;

/// The judge's rule: the flow's queue seen is the one its description
/// computes.
pub fn on_the_predicted_queue(flow: &FlowRow) -> Option<bool> {
    Some(flow.queue? == flow.predicted_queue?)
}

/// What a sample changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// The verdict became this.
    To(LandingVerdict),
}

/// Judges recent flows against the description of one version.
#[derive(Debug, Default)]
pub struct AgreementJudge {
    version: u64,
    judged: HashSet<(SocketAddr, SocketAddr)>,
    recent: VecDeque<((SocketAddr, SocketAddr), bool)>,
    verdict: LandingVerdict,
}

impl AgreementJudge {
    /// Takes the flows of one sample for description `version`.
    pub fn observe(&mut self, version: u64, flows: &[FlowRow]) -> Change {
        self.observe_by(version, flows, on_the_predicted_queue)
    }

    /// [`AgreementJudge::observe`] by another rule: `landed_as_planned`
    /// says whether a flow landed where the plan put it (`None`: not known
    /// yet, judged at a later sample).
    pub fn observe_by(
        &mut self,
        version: u64,
        flows: &[FlowRow],
        landed_as_planned: impl Fn(&FlowRow) -> Option<bool>,
    ) -> Change {
        if version != self.version {
            *self = Self {
                version,
                ..Self::default()
            };
        }
        for flow in flows {
            let Some(agrees) = landed_as_planned(flow) else {
                continue;
            };
            let key = (flow.src, flow.dst);
            if !self.judged.insert(key) {
                continue;
            }
            self.recent.push_back((key, agrees));
            if self.recent.len() > WINDOW
                && let Some((old, _)) = self.recent.pop_front()
            {
                self.judged.remove(&old);
            }
        }
        let next = self.next_verdict();
        if next == self.verdict {
            return Change::None;
        }
        self.verdict = next;
        Change::To(next)
    }

    fn next_verdict(&self) -> LandingVerdict {
        let report = self.report();
        if (report.judged as usize) < MIN_FLOWS {
            return self.verdict;
        }
        let share = f64::from(report.matched) / f64::from(report.judged);
        if share < CONTRADICTED_BELOW {
            LandingVerdict::Contradicted
        } else if share >= AGREED_FROM {
            LandingVerdict::Agreed
        } else {
            self.verdict
        }
    }

    /// The verdict and the counts behind it.
    pub fn report(&self) -> LandingReport {
        let matched = self.recent.iter().filter(|(_, ok)| *ok).count();
        LandingReport {
            version: self.version,
            verdict: self.verdict,
            matched: u32::try_from(matched).unwrap_or(u32::MAX),
            judged: u32::try_from(self.recent.len()).unwrap_or(u32::MAX),
        }
    }
}

/// The warning that names what makes a device's landings contradict its
/// description, for the log.
pub fn likely_causes(iface: &str, driver: Option<&str>) -> String {
    if let Some(driver) = driver.filter(|d| NO_RSS_DRIVERS.contains(d)) {
        return format!(
            "{iface} is a {driver} device, which does no RSS of its own (a container's or \
             pod's interface, behind a veth or bridge): the queue recorded there is the queue \
             the sending side transmitted on (for a veth, its peer's tx queue), not where a \
             NIC's RSS put the flow, so no RSS description can predict it. Verify where RSS \
             happens: run the receiver agent on the host with --iface set to the physical NIC \
             the packets arrive on (its description is what senders must plan with)"
        );
    }
    format!(
        "likely causes: RSS is off on {iface} (after `ethtool -L`, or XDP attached on \
         virtio_net: run `ethtool -X {iface} equal N`), the device hashes with another key or \
         table than it reports, or NAT or a tunnel rewrites the tuple between sender and \
         receiver"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(port: u16, queue: u32, predicted: u32) -> FlowRow {
        FlowRow {
            src: SocketAddr::from(([10, 0, 0, 1], port)),
            dst: SocketAddr::from(([10, 0, 0, 2], 5201)),
            queue: Some(queue),
            cpu: 0,
            rss_cpu: None,
            predicted_queue: Some(predicted),
            predicted_cpu: None,
            planned_cpu: None,
            gbps: 0.0,
            rate_cov: None,
            packets: 1,
            bytes: 60,
            moves: 0,
            agent_link: false,
            nic_hash: None,
            nic_hash_agrees: None,
        }
    }

    #[test]
    fn behind_a_veth_the_warning_names_the_tx_queue_and_where_to_verify() {
        let text = likely_causes("eth0", Some("veth"));
        assert!(text.contains("does no RSS of its own"), "{text}");
        assert!(text.contains("peer's tx queue"), "{text}");
        assert!(text.contains("--iface set to the physical NIC"), "{text}");
        let nic = likely_causes("eth0", Some("igb"));
        assert!(nic.contains("RSS is off on eth0"), "{nic}");
    }

    #[test]
    fn a_few_flows_give_no_verdict() {
        let mut judge = AgreementJudge::default();
        let flows: Vec<_> = (0..3).map(|p| flow(p, 1, 2)).collect();
        assert_eq!(judge.observe(1, &flows), Change::None);
        assert_eq!(judge.report().verdict, LandingVerdict::Unknown);
    }

    #[test]
    fn wrong_landings_contradict_and_right_ones_restore() {
        let mut judge = AgreementJudge::default();
        let right: Vec<_> = (0..8).map(|p| flow(p, 3, 3)).collect();
        assert_eq!(judge.observe(1, &right), Change::To(LandingVerdict::Agreed));
        // The same flows seen again are not judged again.
        assert_eq!(judge.observe(1, &right), Change::None);
        assert_eq!(judge.report().judged, 8);
        // The device starts lying: new flows land elsewhere.
        let wrong: Vec<_> = (100..120).map(|p| flow(p, 1, 2)).collect();
        assert_eq!(
            judge.observe(1, &wrong),
            Change::To(LandingVerdict::Contradicted)
        );
        let report = judge.report();
        assert_eq!((report.matched, report.judged), (8, 28));
        // A new description starts over, and agrees once flows match it.
        assert_eq!(judge.observe(2, &[]), Change::None);
        assert_eq!(judge.report().verdict, LandingVerdict::Unknown);
        let fixed: Vec<_> = (200..204).map(|p| flow(p, 5, 5)).collect();
        assert_eq!(judge.observe(2, &fixed), Change::To(LandingVerdict::Agreed));
    }

    #[test]
    fn the_window_forgets_old_flows() {
        let mut judge = AgreementJudge::default();
        let wrong: Vec<_> = (0..WINDOW as u16).map(|p| flow(p, 1, 2)).collect();
        judge.observe(1, &wrong);
        assert_eq!(judge.report().verdict, LandingVerdict::Contradicted);
        let right: Vec<_> = (1000..1000 + WINDOW as u16)
            .map(|p| flow(p, 2, 2))
            .collect();
        assert_eq!(judge.observe(1, &right), Change::To(LandingVerdict::Agreed));
        assert_eq!(judge.report().judged as usize, WINDOW);
    }

    #[test]
    fn flows_without_a_queue_or_prediction_are_not_judged() {
        let mut judge = AgreementJudge::default();
        let mut flows: Vec<_> = (0..8).map(|p| flow(p, 1, 1)).collect();
        for f in &mut flows {
            f.queue = None;
        }
        judge.observe(1, &flows);
        assert_eq!(judge.report().judged, 0);
    }
}
