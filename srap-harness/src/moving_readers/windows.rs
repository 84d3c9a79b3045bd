//! The judge's view of a [`MovingReport`]: for each placement of its
//! thread (a [`Move`]), how many bytes came in through each local address
//! while the thread sat on that node, from `settle` after the move on.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use super::{Move, MovingReport, Sample};

/// One placement's window: the samples from the first at or after
/// `move.at_ms + settle` to the last before the next move (or the report's
/// end).
///
/// Every move has its window, also one its samples cannot measure: with
/// no sample in it, `samples` is 0, `from_ms` and `to_ms` are both where
/// it would have begun and `by_local` is empty; with one sample `by_local`
/// holds its subflows' local addresses at 0. A judge then sees the window
/// that had nothing to judge, rather than missing it among the others.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The node the thread was placed on.
    pub node: u32,
    /// The first and last sample's `at_ms`.
    pub from_ms: u64,
    pub to_ms: u64,
    /// How many samples the window holds.
    pub samples: usize,
    /// Bytes received between its first and last sample, summed per
    /// subflow local address: per subflow (by local and remote address)
    /// the last value seen minus the first sample's (0 for a subflow the
    /// first sample does not list; a subflow gone before the last sample
    /// keeps its last value seen).
    pub by_local: BTreeMap<IpAddr, u64>,
    /// Samples taken while the thread ran on a CPU outside the window's
    /// node: the placement did not hold then.
    pub ran_on_other_node: usize,
}

impl MovingReport {
    /// One [`Window`] per move, in order. `nodes` are the CPUs of each
    /// node, as the [`MoveSpec`](super::MoveSpec) gave them.
    pub fn windows(&self, settle: Duration, nodes: &[Vec<u32>]) -> Vec<Window> {
        let settle = u64::try_from(settle.as_millis()).unwrap_or(u64::MAX);
        self.moves
            .iter()
            .enumerate()
            .map(|(k, placed)| {
                let from = placed.at_ms.saturating_add(settle);
                let to = self.moves.get(k + 1).map_or(u64::MAX, |next| next.at_ms);
                let samples: Vec<&Sample> = self
                    .samples
                    .iter()
                    .filter(|s| s.at_ms >= from && s.at_ms < to)
                    .collect();
                window(placed, from, &samples, nodes)
            })
            .collect()
    }
}

/// The window of `placed` over its `samples` (in time order); `from` is
/// where it begins when it has none.
fn window(placed: &Move, from: u64, samples: &[&Sample], nodes: &[Vec<u32>]) -> Window {
    let node_cpus = usize::try_from(placed.node)
        .ok()
        .and_then(|n| nodes.get(n))
        .map_or(&[][..], Vec::as_slice);
    Window {
        node: placed.node,
        from_ms: samples.first().map_or(from, |s| s.at_ms),
        to_ms: samples.last().map_or(from, |s| s.at_ms),
        samples: samples.len(),
        by_local: bytes_by_local(samples),
        ran_on_other_node: samples
            .iter()
            .filter(|s| !node_cpus.contains(&s.ran_on))
            .count(),
    }
}

/// Per local address, the bytes its subflows received over `samples`.
fn bytes_by_local(samples: &[&Sample]) -> BTreeMap<IpAddr, u64> {
    let Some(first) = samples.first() else {
        return BTreeMap::new();
    };
    let base: BTreeMap<(SocketAddr, SocketAddr), u64> = first
        .subflows
        .iter()
        .map(|s| ((s.local, s.remote), s.bytes_received))
        .collect();
    let mut last = BTreeMap::new();
    for sample in samples {
        for subflow in &sample.subflows {
            last.insert((subflow.local, subflow.remote), subflow.bytes_received);
        }
    }
    let mut by_local = BTreeMap::new();
    for (key, seen) in last {
        let delta = seen.saturating_sub(base.get(&key).copied().unwrap_or(0));
        *by_local.entry(key.0.ip()).or_insert(0) += delta;
    }
    by_local
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moving_readers::SubflowBytes;

    const A: &str = "10.0.1.1";
    const B: &str = "10.0.2.1";

    fn subflow(local: &str, bytes_received: u64) -> SubflowBytes {
        SubflowBytes {
            local: format!("{local}:40000").parse().unwrap(),
            remote: "10.0.9.9:5201".parse().unwrap(),
            bytes_received,
        }
    }

    fn sample(at_ms: u64, ran_on: u32, subflows: Vec<SubflowBytes>) -> Sample {
        Sample {
            at_ms,
            ran_on,
            read: 0,
            subflows,
        }
    }

    fn placed(at_ms: u64, node: u32) -> Move {
        Move {
            at_ms,
            node,
            cpu: node,
            ran_on: node,
        }
    }

    fn report(moves: Vec<Move>, samples: Vec<Sample>) -> MovingReport {
        MovingReport {
            moves,
            samples,
            ..MovingReport::new(0)
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    const NODES: [&[u32]; 2] = [&[0], &[1]];

    fn nodes() -> Vec<Vec<u32>> {
        NODES.iter().map(|n| n.to_vec()).collect()
    }

    #[test]
    fn each_window_counts_from_its_settled_first_sample_to_its_last() {
        let report = report(
            vec![placed(0, 0), placed(1000, 1)],
            vec![
                sample(0, 0, vec![subflow(A, 0)]),
                sample(600, 0, vec![subflow(A, 100)]),
                sample(900, 0, vec![subflow(A, 400)]),
                // Right after the move, before it settled: not counted.
                sample(1000, 1, vec![subflow(A, 450)]),
                sample(1500, 1, vec![subflow(A, 500)]),
                sample(2000, 0, vec![subflow(A, 520)]),
            ],
        );
        let windows = report.windows(Duration::from_millis(500), &nodes());
        assert_eq!(windows.len(), 2);
        let (first, second) = (&windows[0], &windows[1]);
        assert_eq!((first.node, first.from_ms, first.to_ms), (0, 600, 900));
        assert_eq!(first.by_local, BTreeMap::from([(ip(A), 300)]));
        assert_eq!((first.samples, first.ran_on_other_node), (2, 0));
        assert_eq!((second.node, second.from_ms, second.to_ms), (1, 1500, 2000));
        assert_eq!(second.by_local, BTreeMap::from([(ip(A), 20)]));
        assert_eq!(
            second.ran_on_other_node, 1,
            "the sample at 2000 ran on node 0"
        );
    }

    #[test]
    fn a_subflow_made_mid_window_counts_from_zero_and_a_gone_one_keeps_its_last() {
        let report = report(
            vec![placed(0, 1)],
            vec![
                sample(0, 1, vec![subflow(A, 1000)]),
                sample(100, 1, vec![subflow(A, 1200), subflow(B, 50)]),
                sample(200, 1, vec![subflow(B, 800)]),
            ],
        );
        let window = &report.windows(Duration::ZERO, &nodes())[0];
        assert_eq!(
            window.by_local,
            BTreeMap::from([(ip(A), 200), (ip(B), 800)])
        );
    }

    #[test]
    fn subflows_of_one_local_address_sum_and_a_window_without_samples_is_empty() {
        let other_remote = SubflowBytes {
            remote: "10.0.9.8:5201".parse().unwrap(),
            ..subflow(A, 10)
        };
        let report = report(
            vec![placed(0, 0), placed(100, 1), placed(1000, 0)],
            vec![
                sample(0, 0, vec![subflow(A, 0), other_remote]),
                sample(
                    50,
                    0,
                    vec![
                        subflow(A, 5),
                        SubflowBytes {
                            bytes_received: 30,
                            ..other_remote
                        },
                    ],
                ),
                sample(1000, 0, vec![subflow(A, 9)]),
            ],
        );
        let windows = report.windows(Duration::ZERO, &nodes());
        assert_eq!(windows[0].by_local, BTreeMap::from([(ip(A), 25)]));
        // Node 1's window (100 to 1000 ms) has no sample: empty, not gone.
        let empty = &windows[1];
        assert_eq!(
            (empty.node, empty.samples, empty.from_ms, empty.to_ms),
            (1, 0, 100, 100)
        );
        assert!(empty.by_local.is_empty());
        // One sample measures nothing: its subflows at 0.
        assert_eq!(windows[2].by_local, BTreeMap::from([(ip(A), 0)]));
    }
}
