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
            collision_free: busiest <= 1,
            busiest,
            per_queue,
            flows,
        }
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
            if self.collision_free {
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
