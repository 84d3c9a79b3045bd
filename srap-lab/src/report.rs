//! What a lab run observed, judged only by the receive observer: flows per
//! receive queue, collisions, and whether each flow landed where the model
//! predicted.

use std::{collections::BTreeMap, fmt::Write as _, net::SocketAddr};

use serde::Serialize;
use srap_common::rss::{FlowTuple, RssModel};

use srap_daemon::observer::FlowRecord;

/// Flows that carried less than this are left out of a workload's verdict
/// (iperf3's control connection, say).
pub const MIN_DATA_BYTES: u64 = 1 << 20;

/// One flow as observed, beside its prediction.
#[derive(Debug, Clone, Serialize)]
pub struct ObservedFlow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Receive queue the observer saw (None: the hook could not tell).
    pub queue: Option<u32>,
    /// Queue the RSS model predicts for this 4-tuple.
    pub predicted_queue: u32,
    pub packets: u64,
    pub bytes: u64,
}

/// A run whose verdict would rest on fewer flows than it opened: a view
/// read too late (the flows had closed), a guest command that timed out, a
/// hook that could not tell a queue. "0 flows on 0 queues: collision-free"
/// is no verdict; this says so, and the run fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what}: {judged} of the {opened} flows opened were judged; a run judged on fewer flows \
     than it opened has no verdict"
)]
pub struct Unjudged {
    /// Whose view, of which run.
    pub what: String,
    /// Flows the run opened (the workload's, or those its server accepted).
    pub opened: usize,
    /// Flows the view judged.
    pub judged: usize,
}

/// Every one of `opened` flows judged, and at least one opened: else
/// [`Unjudged`], naming `what`.
pub fn require_judged(what: &str, opened: usize, judged: usize) -> Result<(), Unjudged> {
    if opened == 0 || judged < opened {
        return Err(Unjudged {
            what: what.to_owned(),
            opened,
            judged,
        });
    }
    Ok(())
}

/// The verdict on one set of concurrent flows.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub flows: Vec<ObservedFlow>,
    /// Flows per observed queue.
    pub per_queue: BTreeMap<u32, usize>,
    pub busiest: usize,
    pub collision_free: bool,
    /// Flows whose observed queue is the predicted one.
    pub predicted_right: usize,
}

impl RunReport {
    /// Judges `records`, counting only flows that carried at least
    /// `min_bytes` (to leave out, e.g., iperf3's control connection).
    pub fn judge(model: &RssModel, records: &[FlowRecord], min_bytes: u64) -> Self {
        Self::judged(model, records, min_bytes, false)
    }

    /// Judges `records` the sender's own NIC saw (source: the receiver, as
    /// packets coming back are addressed), against `model`, that NIC's
    /// description; each flow is shown from the sender's side (its source
    /// is the sender's address and the port it connected from).
    pub fn judge_back(model: &RssModel, records: &[FlowRecord], min_bytes: u64) -> Self {
        Self::judged(model, records, min_bytes, true)
    }

    /// [`RunReport::judge`], or with `back` [`RunReport::judge_back`].
    fn judged(model: &RssModel, records: &[FlowRecord], min_bytes: u64, back: bool) -> Self {
        let flows = records
            .iter()
            .filter(|r| r.stats.bytes >= min_bytes)
            .map(|r| {
                let (src, dst) = if back { (r.dst, r.src) } else { (r.src, r.dst) };
                ObservedFlow {
                    src,
                    dst,
                    queue: r.stats.rx_queue(),
                    predicted_queue: FlowTuple::from_sockets(r.src, r.dst)
                        .map_or(u32::MAX, |t| model.landing(&t).queue),
                    packets: r.stats.packets,
                    bytes: r.stats.bytes,
                }
            })
            .collect();
        Self::from_flows(flows)
    }

    /// Judges the flows toward `port` in the receiver agent's status.
    pub fn from_status(status: &srap_status::Status, port: u16, min_bytes: u64) -> Self {
        let flows = status
            .flows
            .iter()
            .filter(|f| f.dst.port() == port && f.bytes >= min_bytes)
            .map(|f| ObservedFlow {
                src: f.src,
                dst: f.dst,
                queue: f.queue,
                predicted_queue: f.predicted_queue.unwrap_or(u32::MAX),
                packets: f.packets,
                bytes: f.bytes,
            })
            .collect();
        Self::from_flows(flows)
    }

    fn from_flows(flows: Vec<ObservedFlow>) -> Self {
        let mut per_queue = BTreeMap::new();
        for flow in &flows {
            if let Some(queue) = flow.queue {
                *per_queue.entry(queue).or_insert(0) += 1;
            }
        }
        let busiest = per_queue.values().copied().max().unwrap_or(0);
        Self {
            predicted_right: flows
                .iter()
                .filter(|f| f.queue == Some(f.predicted_queue))
                .count(),
            // No flow on any queue is no evidence of collision-freedom.
            collision_free: !per_queue.is_empty() && busiest <= 1,
            busiest,
            per_queue,
            flows,
        }
    }

    /// Flows judged: those whose queue the view knows.
    pub fn judged_flows(&self) -> usize {
        self.flows.iter().filter(|f| f.queue.is_some()).count()
    }

    /// This verdict rests on every one of the `opened` flows (and on at
    /// least one): else [`Unjudged`], naming `what`.
    pub fn require_all(&self, what: &str, opened: usize) -> Result<(), Unjudged> {
        require_judged(what, opened, self.judged_flows())
    }

    /// A terminal table: one row per flow, then the verdict.
    pub fn render(&self, title: &str, seconds: f64) -> String {
        let mut out = format!("{title}\n");
        let _ = writeln!(
            out,
            "  {:<21} {:>5} {:>9} {:>10} {:>8}",
            "source", "queue", "predicted", "packets", "Gbit/s"
        );
        let mut flows = self.flows.clone();
        flows.sort_by_key(|f| (f.queue, f.src));
        for flow in &flows {
            let shared = flow
                .queue
                .and_then(|q| self.per_queue.get(&q))
                .is_some_and(|n| *n > 1);
            let _ = writeln!(
                out,
                "  {:<21} {:>5} {:>9} {:>10} {:>8.2}{}",
                flow.src.to_string(),
                flow.queue.map_or("?".into(), |q| q.to_string()),
                flow.predicted_queue,
                flow.packets,
                flow.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
                if shared { "  << shares its queue" } else { "" }
            );
        }
        let _ = writeln!(
            out,
            "  {} flows on {} queues, busiest queue {} flows: {}; {} of {} on the predicted queue",
            self.flows.len(),
            self.per_queue.len(),
            self.busiest,
            if self.per_queue.is_empty() {
                "NO VERDICT (no flow judged)"
            } else if self.collision_free {
                "collision-free"
            } else {
                "COLLISIONS"
            },
            self.predicted_right,
            self.flows.len()
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(port: u16, queue: Option<u32>, predicted_queue: u32) -> ObservedFlow {
        ObservedFlow {
            src: SocketAddr::from(([10, 0, 0, 1], port)),
            dst: SocketAddr::from(([10, 0, 0, 2], 5202)),
            queue,
            predicted_queue,
            packets: 10,
            bytes: 1 << 20,
        }
    }

    #[test]
    fn an_empty_run_has_no_verdict() {
        let run = RunReport::from_flows(Vec::new());
        assert!(!run.collision_free, "no flow is no evidence");
        assert!(run.render("t", 1.0).contains("NO VERDICT"));
        let err = run.require_all("SRAP's ports", 4).unwrap_err();
        assert_eq!((err.opened, err.judged), (4, 0));
        assert!(err.to_string().contains("0 of the 4 flows opened"), "{err}");
        // Nothing opened is no verdict either.
        assert!(run.require_all("SRAP's ports", 0).is_err());
    }

    #[test]
    fn a_short_run_has_no_verdict() {
        let run = RunReport::from_flows(vec![flow(1, Some(0), 0), flow(2, Some(1), 1)]);
        assert!(run.collision_free, "what it saw alone looks clean");
        let err = run.require_all("kernel ports", 4).unwrap_err();
        assert_eq!((err.opened, err.judged), (4, 2));
    }

    #[test]
    fn a_flow_without_a_queue_is_not_judged() {
        let run = RunReport::from_flows(vec![flow(1, Some(0), 0), flow(2, None, 1)]);
        assert_eq!(run.judged_flows(), 1);
        assert!(run.require_all("x", 2).is_err());
    }

    #[test]
    fn a_whole_run_is_judged() {
        let run = RunReport::from_flows(vec![flow(1, Some(0), 0), flow(2, Some(1), 1)]);
        assert_eq!(run.require_all("x", 2), Ok(()));
        assert_eq!(require_judged("x", 2, 3), Ok(()));
    }
}
