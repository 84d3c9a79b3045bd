//! The pure part of the receiver's status: observer records, sampled once
//! per interval, plus what the previous samples left ([`Tracker`]) → a
//! [`Status`]. No I/O and no clock of its own (the caller passes the time),
//! so every rule here is unit-tested.
//!
//! Rules:
//! * a flow is *active* while its last packet is at most `idle_after` old
//!   (the observer stamps packets with `bpf_ktime_get_ns`, CLOCK_MONOTONIC);
//!   idle flows leave every view (the receiver's observer deletes their
//!   records after twice that; a flow that speaks again is met anew);
//! * a flow's rate is its byte delta over the sample interval; its rate CoV
//!   is σ/μ of its last `history` rates;
//! * queue and CPU counters add each flow's deltas to where its last packet
//!   landed, so they only grow; a flow first met active counts whole, one
//!   first met idle is history from before the agent and counts nothing;
//! * a collision is a queue or CPU with more than one active flow.

pub mod agreement;
pub mod learning;
pub mod plan_index;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    net::SocketAddr,
    time::Duration,
};

use srap_common::rss::{FlowTuple, RssModel};

use srap_status::{
    Accuracy, Collisions, CpuRow, FlowRow, NicHashCounts, QueueRow, ReceiveCpu, Status,
};

pub use self::plan_index::PlanIndex;
use crate::observer::FlowRecord;

/// How the tracker judges flows.
#[derive(Debug, Clone, Copy)]
pub struct TrackerConfig {
    /// No packet for longer than this: the flow is no longer active.
    pub idle_after: Duration,
    /// Rates kept per flow for its CoV.
    pub history: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            idle_after: Duration::from_secs(5),
            history: 10,
        }
    }
}

/// What one sample sees.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// CLOCK_MONOTONIC now, in ns (the observer's clock).
    pub now_ns: u64,
    pub records: &'a [FlowRecord],
    /// The served description, to predict and to map queues to CPUs.
    pub model: Option<&'a RssModel>,
    pub plans: &'a PlanIndex,
    /// Which CPU is a flow's receive CPU (the plan is judged against it).
    pub receive_cpu: ReceiveCpu,
    /// Where connected sender agents connect from: their connections to
    /// this agent are agent links ([`FlowRow::agent_link`]).
    pub agent_links: &'a BTreeSet<SocketAddr>,
}

/// State carried from one sample to the next.
#[derive(Debug, Default)]
pub struct Tracker {
    config: TrackerConfig,
    last_ns: Option<u64>,
    flows: HashMap<(SocketAddr, SocketAddr), FlowTrack>,
    queues: BTreeMap<u32, Counter>,
    cpus: BTreeMap<u32, Counter>,
    rss_cpus: BTreeMap<u32, Counter>,
}

#[derive(Debug, Default)]
struct FlowTrack {
    packets: u64,
    bytes: u64,
    rates: VecDeque<f64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counter {
    packets: u64,
    bytes: u64,
}

impl Counter {
    fn add(&mut self, packets: u64, bytes: u64) {
        self.packets = self.packets.saturating_add(packets);
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// Active flows and rate on one queue or CPU in this sample.
#[derive(Debug, Default, Clone, Copy)]
struct Load {
    flows: usize,
    gbps: f64,
}

/// Active flows and their rates per queue, CPU and RSS CPU in one sample.
#[derive(Debug, Default)]
struct ActiveLoads {
    queues: BTreeMap<u32, Load>,
    cpus: BTreeMap<u32, Load>,
    rss_cpus: BTreeMap<u32, Load>,
}

impl ActiveLoads {
    /// One active flow at (queue, CPU, RSS CPU), each where known.
    fn add(&mut self, at: [Option<u32>; 3], gbps: f64) {
        for (loads, at) in [&mut self.queues, &mut self.cpus, &mut self.rss_cpus]
            .into_iter()
            .zip(at)
        {
            if let Some(at) = at {
                let load = loads.entry(at).or_default();
                load.flows += 1;
                load.gbps += gbps;
            }
        }
    }
}

impl FlowTrack {
    /// The packets and bytes that are new since the last sample. A flow
    /// first met active counts whole, one first met idle is history from
    /// before the agent; counters that went down mean the LRU map dropped
    /// and re-created the entry, so all of it is new.
    fn advance(&mut self, packets: u64, bytes: u64, first: bool, active: bool) -> (u64, u64) {
        let new = if first {
            if active { (packets, bytes) } else { (0, 0) }
        } else if bytes < self.bytes || packets < self.packets {
            (packets, bytes)
        } else {
            (packets - self.packets, bytes - self.bytes)
        };
        self.packets = packets;
        self.bytes = bytes;
        new
    }

    /// Records the rate of `bytes` over `interval_ns` (bits per ns is
    /// Gbit/s), keeping the last `history` rates.
    fn push_rate(&mut self, bytes: u64, interval_ns: u64, history: usize) -> f64 {
        let rate = bytes as f64 * 8.0 / interval_ns as f64;
        if self.rates.len() == history {
            self.rates.pop_front();
        }
        self.rates.push_back(rate);
        rate
    }
}

/// The status row of one active flow.
fn flow_row(
    record: &FlowRecord,
    obs: &Observation<'_>,
    (queue, rss_cpu): (Option<u32>, Option<u32>),
    gbps: f64,
    rates: &VecDeque<f64>,
) -> FlowRow {
    let stats = &record.stats;
    let predicted = obs.model.and_then(|model| {
        FlowTuple::from_sockets(record.src, record.dst)
            .ok()
            .map(|tuple| model.landing(&tuple))
    });
    FlowRow {
        src: record.src,
        dst: record.dst,
        queue,
        cpu: stats.cpu,
        rss_cpu,
        predicted_queue: predicted.map(|p| p.queue),
        predicted_cpu: predicted.map(|p| p.cpu),
        planned_cpu: obs.plans.planned_cpu(record.src, record.dst),
        gbps,
        rate_cov: coefficient_of_variation(rates),
        packets: stats.packets,
        bytes: stats.bytes,
        moves: stats.moves,
        agent_link: false,
        nic_hash: stats.nic_hash(),
        nic_hash_agrees: stats
            .nic_hash()
            .zip(predicted)
            .map(|(nic, model)| nic == model.hash),
    }
}

impl Tracker {
    pub fn new(config: TrackerConfig) -> Self {
        Self {
            config: TrackerConfig {
                history: config.history.max(2),
                ..config
            },
            ..Self::default()
        }
    }

    /// Takes one sample. Fills the flow, queue, CPU, collision and accuracy
    /// parts of the status; the caller adds the rest (iface, peers, …).
    pub fn sample(&mut self, obs: &Observation<'_>) -> Status {
        let interval_ns = self
            .last_ns
            .map(|last| obs.now_ns.saturating_sub(last))
            .filter(|&dt| dt > 0);
        self.last_ns = Some(obs.now_ns);
        let idle_ns = u64::try_from(self.config.idle_after.as_nanos()).unwrap_or(u64::MAX);

        let mut flows = Vec::new();
        let mut loads = ActiveLoads::default();
        let mut seen = BTreeSet::new();
        for record in obs.records {
            seen.insert((record.src, record.dst));
            let active = obs.now_ns.saturating_sub(record.stats.last_seen_ns) <= idle_ns;
            let queue = record.stats.rx_queue();
            let rss_cpu = queue.and_then(|q| queue_cpu(obs.model, q));
            let Some(gbps) = self.follow(record, active, interval_ns, (queue, rss_cpu)) else {
                continue;
            };
            let agent_link = obs.agent_links.contains(&record.src);
            if !agent_link {
                loads.add([queue, Some(record.stats.cpu), rss_cpu], gbps);
            }
            let rates = &self.flows[&(record.src, record.dst)].rates;
            let mut row = flow_row(record, obs, (queue, rss_cpu), gbps, rates);
            row.agent_link = agent_link;
            flows.push(row);
        }
        self.flows.retain(|key, _| seen.contains(key));
        flows.sort_by_key(|f| (f.queue, f.src, f.dst));
        let mut status = self.status(obs.model, flows, &loads, obs.receive_cpu);
        status.receive_cpu = obs.receive_cpu;
        status
    }

    /// Adds a record's news since the last sample to the lifetime counters
    /// and its flow's rate history; the flow's rate now, or `None` when it
    /// is idle (and so leaves every view).
    fn follow(
        &mut self,
        record: &FlowRecord,
        active: bool,
        interval_ns: Option<u64>,
        (queue, rss_cpu): (Option<u32>, Option<u32>),
    ) -> Option<f64> {
        let stats = &record.stats;
        let track = self.flows.entry((record.src, record.dst));
        let first = matches!(track, std::collections::hash_map::Entry::Vacant(_));
        let track = track.or_default();
        let (packets, bytes) = track.advance(stats.packets, stats.bytes, first, active);
        if let Some(q) = queue {
            self.queues.entry(q).or_default().add(packets, bytes);
        }
        self.cpus.entry(stats.cpu).or_default().add(packets, bytes);
        if let Some(c) = rss_cpu {
            self.rss_cpus.entry(c).or_default().add(packets, bytes);
        }
        if !active {
            track.rates.clear();
            return None;
        }
        Some(match interval_ns {
            Some(dt) if !first => track.push_rate(bytes, dt, self.config.history),
            _ => 0.0,
        })
    }

    /// The status from this sample's active flows and the lifetime counters.
    fn status(
        &self,
        model: Option<&RssModel>,
        flows: Vec<FlowRow>,
        loads: &ActiveLoads,
        receive_cpu: ReceiveCpu,
    ) -> Status {
        let queues = self.queue_rows(model, &loads.queues);
        let cpus = cpu_rows(&self.cpus, &loads.cpus, None);
        let rss_cpus = cpu_rows(
            &self.rss_cpus,
            &loads.rss_cpus,
            model.map(RssModel::reachable_cpus),
        );
        let collisions = Collisions {
            queues: queues.iter().filter(|r| r.collision).count(),
            cpus: cpus.iter().filter(|r| r.collision).count(),
            rss_cpus: rss_cpus.iter().filter(|r| r.collision).count(),
        };
        Status {
            idle_after_ms: u64::try_from(self.config.idle_after.as_millis()).unwrap_or(u64::MAX),
            active_flows: flows.len(),
            gbps: flows.iter().map(|f| f.gbps).sum(),
            accuracy: accuracy(&flows, receive_cpu),
            nic_hash: nic_hash_counts(&flows),
            queues,
            cpus,
            rss_cpus,
            flows,
            collisions,
            ..Status::default()
        }
    }

    /// Every queue of the description, and any other that carried traffic.
    fn queue_rows(&self, model: Option<&RssModel>, load: &BTreeMap<u32, Load>) -> Vec<QueueRow> {
        let described = model.map_or(0, |m| m.queue_cpu().len() as u32);
        let queues: BTreeSet<u32> = (0..described)
            .chain(self.queues.keys().copied())
            .chain(load.keys().copied())
            .collect();
        queues
            .into_iter()
            .map(|queue| {
                let counter = self.queues.get(&queue).copied().unwrap_or_default();
                let load = load.get(&queue).copied().unwrap_or_default();
                QueueRow {
                    queue,
                    cpu: queue_cpu(model, queue),
                    flows: load.flows,
                    gbps: load.gbps,
                    packets: counter.packets,
                    bytes: counter.bytes,
                    collision: load.flows > 1,
                }
            })
            .collect()
    }
}

fn cpu_rows(
    counters: &BTreeMap<u32, Counter>,
    load: &BTreeMap<u32, Load>,
    also: Option<BTreeSet<u32>>,
) -> Vec<CpuRow> {
    let cpus: BTreeSet<u32> = also
        .unwrap_or_default()
        .into_iter()
        .chain(counters.keys().copied())
        .chain(load.keys().copied())
        .collect();
    cpus.into_iter()
        .map(|cpu| {
            let counter = counters.get(&cpu).copied().unwrap_or_default();
            let load = load.get(&cpu).copied().unwrap_or_default();
            CpuRow {
                cpu,
                flows: load.flows,
                gbps: load.gbps,
                packets: counter.packets,
                bytes: counter.bytes,
                collision: load.flows > 1,
            }
        })
        .collect()
}

fn queue_cpu(model: Option<&RssModel>, queue: u32) -> Option<u32> {
    model?.queue_cpu().get(queue as usize).copied()
}

/// Queues against the model; receive CPUs (on `basis`) against the plan.
fn accuracy(flows: &[FlowRow], basis: ReceiveCpu) -> Accuracy {
    let mut accuracy = Accuracy::default();
    for flow in flows {
        if let (Some(seen), Some(predicted)) = (flow.queue, flow.predicted_queue) {
            accuracy.queue.total += 1;
            accuracy.queue.matched += usize::from(seen == predicted);
        }
        if let Some(planned) = flow.planned_cpu {
            accuracy.plan.total += 1;
            accuracy.plan.matched += usize::from(flow.receive_cpu(basis) == Some(planned));
        }
    }
    accuracy
}

/// The active flows by what their NIC hash says of the model. A hash with
/// no model to judge it by counts as none: nothing was compared.
fn nic_hash_counts(flows: &[FlowRow]) -> NicHashCounts {
    let mut counts = NicHashCounts::default();
    for flow in flows {
        match flow.nic_hash_agrees {
            Some(true) => counts.agree += 1,
            Some(false) => counts.differ += 1,
            None => counts.none += 1,
        }
    }
    counts
}

/// σ/μ (population σ) of `rates`; None with fewer than two or a zero mean.
pub fn coefficient_of_variation(rates: &VecDeque<f64>) -> Option<f64> {
    if rates.len() < 2 {
        return None;
    }
    let n = rates.len() as f64;
    let mean = rates.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return None;
    }
    let variance = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
    Some(variance.sqrt() / mean)
}

/// Helpers to build this module's inputs; shared with the receiver's tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use srap_common::observer::{FlowKey, FlowStats, NIC_HASH_NONE};
    use srap_common::protocol::Protocol;

    use super::*;

    pub const SEC: u64 = 1_000_000_000;

    pub fn record(
        src: &str,
        dst: &str,
        queue: u32,
        cpu: u32,
        bytes: u64,
        last_seen_ns: u64,
    ) -> FlowRecord {
        let (src, dst): (SocketAddr, SocketAddr) =
            (src.parse().expect("src"), dst.parse().expect("dst"));
        FlowRecord {
            src,
            dst,
            key: FlowKey::from_addrs(Protocol::Tcp, src, dst).expect("same family"),
            stats: FlowStats {
                rx_queue: queue,
                cpu,
                packets: bytes / 1000,
                bytes,
                first_seen_ns: 1,
                last_seen_ns,
                moves: 0,
                nic_hash: NIC_HASH_NONE,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use srap_common::{
        observer::NIC_HASH_NONE,
        rss::{RssDescription, embedded_default},
        wire::{CpuPorts, PlanReport, PlannedTable},
    };

    use super::{fixtures::*, *};
    use srap_status::Ratio;

    /// 4 queues; queues 2 and 3 share CPU 2.
    fn model() -> RssModel {
        RssModel::from_description(&RssDescription {
            indir: vec![0, 1, 2, 3],
            queue_cpu: Some(vec![0, 1, 2, 2]),
            ..embedded_default()
        })
        .expect("valid")
    }

    fn observe<'a>(
        now_ns: u64,
        records: &'a [FlowRecord],
        model: &'a RssModel,
        plans: &'a PlanIndex,
    ) -> Observation<'a> {
        Observation {
            now_ns,
            records,
            model: Some(model),
            plans,
            receive_cpu: ReceiveCpu::Emulated,
            agent_links: &NO_LINKS,
        }
    }

    const DST: &str = "10.0.0.2:5201";
    static NO_LINKS: BTreeSet<SocketAddr> = BTreeSet::new();

    /// The status row of the flow from `src`.
    fn row_of<'a>(status: &'a Status, src: &str) -> &'a FlowRow {
        status
            .flows
            .iter()
            .find(|f| f.src.to_string() == src)
            .expect("row")
    }

    /// A source port of 10.0.0.1 that the model sends to `queue`.
    fn port_on(model: &RssModel, queue: u32, skip: usize) -> String {
        let dst: SocketAddr = DST.parse().expect("dst");
        (1024u16..)
            .map(|p| SocketAddr::new("10.0.0.1".parse().expect("ip"), p))
            .filter(|src| {
                model
                    .landing(&FlowTuple::from_sockets(*src, dst).expect("tuple"))
                    .queue
                    == queue
            })
            .nth(skip)
            .expect("a port")
            .to_string()
    }

    #[test]
    fn collisions_count_queues_and_cpus_with_more_than_one_flow() {
        let model = model();
        let plans = PlanIndex::default();
        let (a, b, c, d) = (
            port_on(&model, 0, 0),
            port_on(&model, 0, 1),
            port_on(&model, 2, 0),
            port_on(&model, 3, 0),
        );
        let records = [
            record(&a, DST, 0, 0, 1000, 10 * SEC),
            record(&b, DST, 0, 1, 1000, 10 * SEC),
            record(&c, DST, 2, 1, 1000, 10 * SEC),
            record(&d, DST, 3, 1, 1000, 10 * SEC),
        ];
        let status = Tracker::default().sample(&observe(10 * SEC, &records, &model, &plans));
        assert_eq!(status.active_flows, 4);
        // Queue 0 has two flows; queues 2 and 3 one each but share CPU 2;
        // the observer ran three flows on CPU 1.
        assert_eq!(
            status.collisions,
            Collisions {
                queues: 1,
                cpus: 1,
                rss_cpus: 2
            }
        );
        let flows_on = |q: u32| status.queues[q as usize].flows;
        assert_eq!(
            (flows_on(0), flows_on(1), flows_on(2), flows_on(3)),
            (2, 0, 1, 1)
        );
        assert!(status.queues[0].collision && !status.queues[2].collision);
        assert_eq!(status.queues.len(), 4, "every described queue has a row");
        assert_eq!(
            status.rss_cpus.iter().map(|r| r.cpu).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            status.cpus.iter().map(|r| r.flows).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(
            status.accuracy.queue,
            Ratio {
                matched: 4,
                total: 4
            }
        );
    }

    /// The NIC's hash is judged against the model's full 32-bit Toeplitz
    /// hash of the tuple, not its queue: a hash on the right queue but with
    /// one bit off differs.
    #[test]
    fn nic_hashes_are_counted_against_the_models_toeplitz_hash() {
        let model = model();
        let plans = PlanIndex::default();
        let tuple = |s: &str| {
            FlowTuple::from_sockets(s.parse().expect("src"), DST.parse().expect("dst"))
                .expect("tuple")
        };
        let (right, wrong, none) = (
            port_on(&model, 0, 0),
            port_on(&model, 1, 0),
            port_on(&model, 2, 0),
        );
        let with_hash = |src: &str, queue: u32, hash: u32| {
            let mut r = record(src, DST, queue, 0, 1000, SEC);
            r.stats.nic_hash = hash;
            r
        };
        let true_hash = model.hash(&tuple(&right));
        // Bit 31 is above the 2 bits that pick one of 4 entries: same queue.
        let off_by_a_high_bit = model.hash(&tuple(&wrong)) ^ 0x8000_0000;
        let records = [
            with_hash(&right, 0, true_hash),
            with_hash(&wrong, 1, off_by_a_high_bit),
            with_hash(&none, 2, NIC_HASH_NONE),
        ];
        let status = Tracker::default().sample(&observe(SEC, &records, &model, &plans));
        assert_eq!(
            status.nic_hash,
            NicHashCounts {
                read: false,
                agree: 1,
                differ: 1,
                none: 1
            }
        );
        let row = |s: &str| row_of(&status, s);
        assert_eq!(row(&right).nic_hash, Some(true_hash));
        assert_eq!(row(&right).nic_hash_agrees, Some(true));
        assert_eq!(row(&wrong).nic_hash_agrees, Some(false));
        assert_eq!(
            row(&wrong).predicted_queue,
            Some(1),
            "the queue alone agrees"
        );
        assert_eq!(
            (row(&none).nic_hash, row(&none).nic_hash_agrees),
            (None, None)
        );
    }

    #[test]
    fn accuracy_compares_with_the_model_and_with_the_plan() {
        let model = model();
        let good = port_on(&model, 1, 0);
        let moved = port_on(&model, 2, 0);
        let unplanned = port_on(&model, 3, 0);
        let sport = |s: &str| s.parse::<SocketAddr>().expect("addr").port();
        let plans = PlanIndex::new([&PlanReport {
            version: 1,
            tables: vec![PlannedTable {
                receiver: "10.0.0.2".parse().expect("ip"),
                source: "10.0.0.1".parse().expect("ip"),
                dst_port: 5201,
                cpus: vec![
                    CpuPorts {
                        cpu: 1,
                        ports: vec![sport(&good)],
                    },
                    CpuPorts {
                        cpu: 2,
                        ports: vec![sport(&moved)],
                    },
                ],
            }],
        }]);
        // `moved` was predicted and planned for queue 2 / CPU 2 but arrived
        // on queue 0 (CPU 0).
        let records = [
            record(&good, DST, 1, 0, 1000, SEC),
            record(&moved, DST, 0, 0, 1000, SEC),
            record(&unplanned, DST, 3, 0, 1000, SEC),
        ];
        let status = Tracker::default().sample(&observe(SEC, &records, &model, &plans));
        assert_eq!(
            status.accuracy.queue,
            Ratio {
                matched: 2,
                total: 3
            }
        );
        assert_eq!(
            status.accuracy.plan,
            Ratio {
                matched: 1,
                total: 2
            }
        );
        let row = |s: &str| row_of(&status, s);
        assert_eq!(row(&good).planned_cpu, Some(1));
        assert_eq!(row(&moved).predicted_queue, Some(2));
        assert_eq!(row(&moved).rss_cpu, Some(0));
        assert_eq!(row(&unplanned).planned_cpu, None);
        assert_eq!(
            row(&unplanned).predicted_cpu,
            Some(2),
            "queue 3 is on CPU 2"
        );
        assert!((status.accuracy.queue.value().expect("some") - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(Ratio::default().value(), None);

        // On a device with RSS of its own the plan is judged by the CPU
        // the observer ran on: `good` ran on CPU 1 as planned, `moved` on
        // CPU 0 (its description CPU would have said 2).
        let records = [
            record(&good, DST, 1, 1, 1000, SEC),
            record(&moved, DST, 2, 0, 1000, SEC),
        ];
        let status = Tracker::default().sample(&Observation {
            receive_cpu: ReceiveCpu::Observed,
            ..observe(SEC, &records, &model, &plans)
        });
        assert_eq!(status.receive_cpu, ReceiveCpu::Observed);
        assert_eq!(
            status.accuracy.plan,
            Ratio {
                matched: 1,
                total: 2
            }
        );
        assert_eq!(row_cpu(&status, &moved), (Some(0), Some(2)));
    }

    /// A flow's (observed, emulated) receive CPU.
    fn row_cpu(status: &Status, src: &str) -> (Option<u32>, Option<u32>) {
        let flow = status
            .flows
            .iter()
            .find(|f| f.src.to_string() == src)
            .expect("row");
        (
            flow.receive_cpu(ReceiveCpu::Observed),
            flow.receive_cpu(ReceiveCpu::Emulated),
        )
    }

    #[test]
    fn rates_come_from_byte_deltas_and_cov_from_their_history() {
        let model = model();
        let plans = PlanIndex::default();
        let mut tracker = Tracker::new(TrackerConfig {
            idle_after: Duration::from_secs(5),
            history: 3,
        });
        let src = port_on(&model, 1, 0);
        // 125 MB per second is 1 Gbit/s; then 2, then 1, then 1, then 1.
        let mut bytes = 0;
        let mut covs = Vec::new();
        let mut rates = Vec::new();
        for (second, mb) in [
            (1u64, 0u64),
            (2, 125),
            (3, 250),
            (4, 125),
            (5, 125),
            (6, 125),
        ] {
            bytes += mb * 1_000_000;
            let records = [record(&src, DST, 1, 1, bytes, second * SEC)];
            let status = tracker.sample(&observe(second * SEC, &records, &model, &plans));
            rates.push(status.flows[0].gbps);
            covs.push(status.flows[0].rate_cov);
        }
        let expected = [0.0, 1.0, 2.0, 1.0, 1.0, 1.0];
        for (got, want) in rates.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{rates:?}");
        }
        assert_eq!(covs[0], None, "no rate yet");
        assert_eq!(covs[1], None, "one rate");
        // Rates [1, 2]: mean 1.5, σ 0.5.
        assert!((covs[2].expect("cov") - 1.0 / 3.0).abs() < 1e-9);
        // Rates [2, 1, 1]: mean 4/3, σ √2/3.
        let cov = 2f64.sqrt() / 3.0 / (4.0 / 3.0);
        assert!((covs[3].expect("cov") - cov).abs() < 1e-9);
        // Only the last three count: [1, 1, 1].
        assert!(covs[5].expect("cov").abs() < 1e-9);
        // The queue's counter holds every byte (the first sample counted whole).
        let records = [record(&src, DST, 1, 1, bytes, 6 * SEC)];
        let status = tracker.sample(&observe(7 * SEC, &records, &model, &plans));
        assert_eq!(status.queues[1].bytes, bytes);
        assert_eq!(status.queues[1].packets, bytes / 1000);
    }

    #[test]
    fn a_sender_agents_own_connection_is_listed_but_never_collides() {
        let model = model();
        let plans = PlanIndex::default();
        let workload = port_on(&model, 1, 0);
        let agent = port_on(&model, 1, 1);
        let links: BTreeSet<SocketAddr> = [agent.parse().expect("addr")].into();
        let records = [
            record(&workload, DST, 1, 1, 1000, SEC),
            record(&agent, DST, 1, 1, 1000, SEC),
        ];
        let status = Tracker::default().sample(&Observation {
            agent_links: &links,
            ..observe(SEC, &records, &model, &plans)
        });
        assert_eq!(status.active_flows, 2, "both listed");
        assert_eq!(status.collisions, Collisions::default());
        assert_eq!(status.queues[1].flows, 1);
        assert_eq!(status.queues[1].bytes, 2000, "its bytes still count");
        let link = status.flows.iter().filter(|f| f.agent_link).count();
        assert_eq!(link, 1);
    }

    #[test]
    fn idle_flows_age_out_and_counters_do_not_go_down() {
        let model = model();
        let plans = PlanIndex::default();
        let mut tracker = Tracker::default();
        let (a, b) = (port_on(&model, 0, 0), port_on(&model, 0, 1));
        // `old` was idle before the agent started: never counted.
        let old = record(&port_on(&model, 2, 0), DST, 2, 0, 9_000_000, SEC);
        let records = [
            record(&a, DST, 0, 0, 1000, 20 * SEC),
            record(&b, DST, 0, 0, 2000, 20 * SEC),
            old,
        ];
        let status = tracker.sample(&observe(20 * SEC, &records, &model, &plans));
        assert_eq!(status.active_flows, 2);
        assert_eq!(status.collisions.queues, 1);
        assert_eq!(status.queues[0].bytes, 3000);
        assert_eq!(status.queues[2].bytes, 0, "idle before we started");

        // `b` stops; 5 s later it is still active, after that it is not.
        let records = [
            record(&a, DST, 0, 0, 5000, 25 * SEC),
            record(&b, DST, 0, 0, 2000, 20 * SEC),
            old,
        ];
        let status = tracker.sample(&observe(25 * SEC, &records, &model, &plans));
        assert_eq!(status.active_flows, 2, "idle for exactly idle_after");
        let records = [
            record(&a, DST, 0, 0, 6000, 26 * SEC),
            record(&b, DST, 0, 0, 2000, 20 * SEC),
            old,
        ];
        let status = tracker.sample(&observe(26 * SEC, &records, &model, &plans));
        assert_eq!(status.active_flows, 1);
        assert_eq!(status.collisions, Collisions::default());
        assert_eq!(status.queues[0].flows, 1);
        assert_eq!(status.queues[0].bytes, 8000, "counters keep aged-out flows");

        // The observer's map forgets `a` (LRU) and re-creates it: new bytes count.
        let records = [record(&a, DST, 0, 0, 500, 27 * SEC)];
        let status = tracker.sample(&observe(27 * SEC, &records, &model, &plans));
        assert_eq!(status.queues[0].bytes, 8500);
        assert_eq!(tracker.flows.len(), 1, "forgotten flows are dropped");
    }

    #[test]
    fn without_a_model_nothing_is_predicted() {
        let plans = PlanIndex::default();
        let records = [record("10.0.0.1:40000", DST, 5, 1, 100, SEC)];
        let status = Tracker::default().sample(&Observation {
            now_ns: SEC,
            records: &records,
            model: None,
            plans: &plans,
            receive_cpu: ReceiveCpu::Observed,
            agent_links: &NO_LINKS,
        });
        assert_eq!(status.flows[0].predicted_queue, None);
        assert_eq!(status.flows[0].rss_cpu, None);
        assert_eq!(status.queues.len(), 1);
        assert!(status.rss_cpus.is_empty());
        assert_eq!(status.accuracy.queue.total, 0);
    }
}
