//! Probe connections: when a receiver's landings contradict its description
//! (its driver hides or misreports its key), this sender opens a few tens of
//! short connections to the receiver agent's own port. The receiver's
//! observer sees where each lands, and its learner solves for the key from
//! them (`srap_daemon::receiver::learning`). The connections carry no data
//! and close at once; the agent is not in the steered cgroup, so the binder
//! never binds them.
//!
//! Each probe binds a random source port over the whole port space: the
//! kernel's own choice would not do, since it hands out consecutive ports of
//! one parity above 32768 (Linux steps by 2), whose landings leave the low
//! and the high bit of the source port unknown.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use srap_common::xorshift::XorShift32;
use tokio::net::{TcpSocket, lookup_host};
use tracing::{debug, info, warn};

/// Connections per round: ~20 independent source ports determine the
/// source port's 16 bits; the rest make a wrong landing stand out.
pub const PROBES: usize = 32;
/// Ports tried per probe before giving up on it (a port may be in use).
const TRIES: usize = 8;
/// Lowest source port a probe binds (below: privileged).
const LOWEST_PORT: u16 = 1024;
/// How long one connection may take to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Between two probes, so the receiver's accept loop keeps up.
const SPACING: Duration = Duration::from_millis(20);

/// Opens [`PROBES`] connections to `peer` (`HOST:PORT`) in the background.
pub fn spawn(peer: String) {
    tokio::spawn(async move {
        let target = match lookup_host(&peer).await.map(|mut a| a.next()) {
            Ok(Some(target)) => target,
            Ok(None) | Err(_) => {
                warn!("receiver {peer}: cannot resolve it to probe it");
                return;
            }
        };
        let mut ports = RandomPorts::seeded();
        let mut landed = 0;
        for _ in 0..PROBES {
            if probe(target, &mut ports).await {
                landed += 1;
            }
            tokio::time::sleep(SPACING).await;
        }
        info!(
            "receiver {peer}: {landed} of {PROBES} probe connections made from random source \
             ports, for its learner to see where they land"
        );
    });
}

/// One connection from a random free source port; true when accepted.
async fn probe(target: SocketAddr, ports: &mut RandomPorts) -> bool {
    for _ in 0..TRIES {
        let port = ports.next();
        let (socket, any) = match target.ip() {
            IpAddr::V4(_) => (TcpSocket::new_v4(), IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            IpAddr::V6(_) => (TcpSocket::new_v6(), IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        };
        let Ok(socket) = socket else {
            return false;
        };
        if socket.bind(SocketAddr::new(any, port)).is_err() {
            continue;
        }
        return match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(target)).await {
            Ok(Ok(stream)) => {
                drop(stream);
                true
            }
            Ok(Err(err)) => {
                debug!("probe connection to {target} from port {port}: {err}");
                false
            }
            Err(_) => {
                debug!("probe connection to {target} from port {port}: timed out");
                false
            }
        };
    }
    false
}

/// Ports of [`LOWEST_PORT`]..=65535 from srap-common's xorshift, seeded
/// from the OS.
struct RandomPorts(XorShift32);

impl RandomPorts {
    fn seeded() -> Self {
        let mut seed = [0u8; 4];
        let _ = getrandom::fill(&mut seed);
        Self(XorShift32::new(u32::from_ne_bytes(seed) | 1))
    }

    fn next(&mut self) -> u16 {
        self.0
            .port(LOWEST_PORT, u32::from(u16::MAX - LOWEST_PORT) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_ports_cover_both_parities_and_both_halves() {
        let mut ports = RandomPorts(XorShift32::new(0x1234_5678));
        let drawn: Vec<u16> = (0..PROBES).map(|_| ports.next()).collect();
        assert!(drawn.iter().all(|&p| p >= LOWEST_PORT));
        assert!(drawn.iter().any(|p| p % 2 == 0) && drawn.iter().any(|p| p % 2 == 1));
        assert!(drawn.iter().any(|&p| p < 32_768) && drawn.iter().any(|&p| p >= 32_768));
    }
}
