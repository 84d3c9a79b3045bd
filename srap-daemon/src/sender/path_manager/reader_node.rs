//! Which NUMA node reads a connection now, from the reader tracepoint's
//! counts sampled at a steady pace: the node that took most of a sample's
//! bytes, believed only once it has done so for [`SAMPLES_TO_MOVE`]
//! samples in a row. A thread the scheduler moves for a moment, or two
//! threads that share a connection, then flip nothing; a reader that moved
//! is followed a couple of samples later.
//!
//! Pure: it reads counts and says the node, nothing else.

use srap_common::reader::{READER_NODES, ReadCounts};

/// Samples in a row a new node must lead before it is the reader's.
pub const SAMPLES_TO_MOVE: u32 = 2;
/// A sample with fewer bytes read says nothing (an idle connection keeps
/// the node it had).
pub const MIN_SAMPLE_BYTES: u64 = 64 * 1024;
/// The share of a sample's bytes that makes a node lead it.
const LEAD_PERCENT: u64 = 67;

/// One connection's reading node, as the samples tell it.
#[derive(Debug, Clone, Default)]
pub struct ReaderNode {
    node: Option<u32>,
    last: [u64; READER_NODES],
    candidate: Option<(u32, u32)>,
    /// Moves followed since the connection was first read.
    pub moves: u64,
}

impl ReaderNode {
    /// The node that reads the connection, once one has.
    pub fn node(&self) -> Option<u32> {
        self.node
    }

    /// A new node leads the samples but is not believed yet.
    pub fn pending(&self) -> bool {
        self.candidate.is_some()
    }

    /// Takes the counts read now; the node when it changed with them.
    pub fn sample(&mut self, counts: &ReadCounts) -> Option<u32> {
        let delta: Vec<u64> = counts
            .bytes
            .iter()
            .zip(self.last)
            .map(|(now, before)| now.saturating_sub(before))
            .collect();
        self.last = counts.bytes;
        let leader = leader(&delta)?;
        if self.node.is_none() {
            self.node = Some(leader);
            return self.node;
        }
        if self.node == Some(leader) {
            self.candidate = None;
            return None;
        }
        let seen = match self.candidate {
            Some((node, seen)) if node == leader => seen + 1,
            _ => 1,
        };
        if seen < SAMPLES_TO_MOVE {
            self.candidate = Some((leader, seen));
            return None;
        }
        self.candidate = None;
        self.node = Some(leader);
        self.moves += 1;
        self.node
    }
}

/// The node with at least [`LEAD_PERCENT`] of a sample's bytes, if the
/// sample moved [`MIN_SAMPLE_BYTES`].
fn leader(delta: &[u64]) -> Option<u32> {
    let total: u64 = delta.iter().sum();
    if total < MIN_SAMPLE_BYTES {
        return None;
    }
    let (node, most) = delta.iter().enumerate().max_by_key(|(_, bytes)| **bytes)?;
    (most.saturating_mul(100) >= total.saturating_mul(LEAD_PERCENT)).then_some(node as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts after adding `bytes` on each node to `counts`.
    fn read(counts: &mut ReadCounts, bytes: &[(usize, u64)]) -> ReadCounts {
        for (node, n) in bytes {
            counts.bytes[*node] += n;
        }
        *counts
    }

    #[test]
    fn the_first_node_to_read_is_the_readers_at_once() {
        let (mut reader, mut counts) = (ReaderNode::default(), ReadCounts::default());
        assert_eq!(reader.sample(&read(&mut counts, &[])), None, "nothing read");
        assert_eq!(reader.sample(&read(&mut counts, &[(1, 1 << 20)])), Some(1));
        assert_eq!(reader.moves, 0);
    }

    #[test]
    fn a_move_is_followed_after_two_samples_and_a_blip_is_not() {
        let (mut reader, mut counts) = (ReaderNode::default(), ReadCounts::default());
        reader.sample(&read(&mut counts, &[(0, 1 << 20)]));
        assert_eq!(
            reader.sample(&read(&mut counts, &[(1, 1 << 20)])),
            None,
            "one sample"
        );
        assert_eq!(
            reader.sample(&read(&mut counts, &[(0, 1 << 20)])),
            None,
            "back"
        );
        assert_eq!(reader.node(), Some(0));
        assert_eq!(reader.sample(&read(&mut counts, &[(1, 1 << 20)])), None);
        assert_eq!(reader.sample(&read(&mut counts, &[(1, 1 << 20)])), Some(1));
        assert_eq!(reader.moves, 1);
    }

    #[test]
    fn an_idle_or_shared_connection_keeps_its_node() {
        let (mut reader, mut counts) = (ReaderNode::default(), ReadCounts::default());
        reader.sample(&read(&mut counts, &[(0, 1 << 20)]));
        for _ in 0..5 {
            reader.sample(&read(&mut counts, &[(1, 1000)]));
            reader.sample(&read(&mut counts, &[(0, 1 << 20), (1, 1 << 20)]));
        }
        assert_eq!(reader.node(), Some(0));
        assert_eq!(reader.moves, 0);
    }
}
