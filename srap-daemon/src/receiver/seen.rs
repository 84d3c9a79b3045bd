//! Each sender's own flows as this receiver's observer saw them
//! ([`Message::SeenFlows`](srap_common::wire::Message::SeenFlows), protocol
//! 7): the monitor publishes every active flow of a sample once, and each
//! session sends its peer the ones whose source address is the address the
//! peer's connection comes from — never another sender's.

use std::{net::IpAddr, sync::Arc};

use srap_common::wire::{MAX_SEEN_FLOWS, SeenFlow, SeenFlows};
use srap_status::Status;

/// Every active workload flow of one sample (agent links left out), in
/// (destination, source) order.
pub type SeenBoard = Arc<Vec<SeenFlow>>;

/// The flows of `status` as senders are told them: the tuple as it
/// arrived, the queue and the receive CPU on the basis this receiver
/// counts by (the observer's CPU, or the description's CPU of the queue).
pub fn board(status: &Status) -> SeenBoard {
    let mut flows: Vec<SeenFlow> = status
        .flows
        .iter()
        .filter(|f| !f.agent_link)
        .map(|f| SeenFlow {
            src: canonical(f.src),
            dst: canonical(f.dst),
            queue: f.queue,
            cpu: f.receive_cpu(status.receive_cpu),
        })
        .collect();
    flows.sort_by_key(|f| (f.dst, f.src));
    Arc::new(flows)
}

/// A dual-stack socket's `::ffff:a.b.c.d` as the IPv4 address it is, as
/// the sender names its own flows.
fn canonical(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The part of `board` that is the sender at `peer`'s: flows from its
/// address only, at most [`MAX_SEEN_FLOWS`] (the first in board order).
pub fn of_peer(board: &[SeenFlow], peer: IpAddr) -> SeenFlows {
    let peer = peer.to_canonical();
    SeenFlows {
        flows: board
            .iter()
            .filter(|f| f.src.ip() == peer)
            .take(MAX_SEEN_FLOWS)
            .copied()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn flow(src: &str, port: u16) -> SeenFlow {
        SeenFlow {
            src: SocketAddr::new(src.parse().expect("address"), port),
            dst: "10.0.0.2:5201".parse().expect("address"),
            queue: Some(1),
            cpu: Some(u32::from(port % 4)),
        }
    }

    #[test]
    fn a_sender_is_told_only_its_own_flows() {
        let board = vec![
            flow("10.0.0.1", 40000),
            flow("10.0.0.3", 40001),
            flow("10.0.0.1", 40002),
        ];
        let mine = of_peer(&board, "10.0.0.1".parse().expect("address"));
        assert_eq!(mine.flows, vec![board[0], board[2]]);
        // A dual-stack listener sees the peer as ::ffff:10.0.0.3.
        let theirs = of_peer(&board, "::ffff:10.0.0.3".parse().expect("address"));
        assert_eq!(theirs.flows, vec![board[1]]);
        assert!(
            of_peer(&board, "10.0.0.9".parse().expect("address"))
                .flows
                .is_empty()
        );
    }

    #[test]
    fn at_most_the_cap_is_sent() {
        let board: Vec<_> = (0..MAX_SEEN_FLOWS as u16 + 10)
            .map(|i| flow("10.0.0.1", 30000 + i))
            .collect();
        let mine = of_peer(&board, "10.0.0.1".parse().expect("address"));
        assert_eq!(mine.flows.len(), MAX_SEEN_FLOWS);
        assert_eq!(mine.flows[..], board[..MAX_SEEN_FLOWS]);
    }
}
