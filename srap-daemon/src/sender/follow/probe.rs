//! Probe connections: when a receiver's landings contradict its description
//! (its driver hides or misreports its key), this sender opens a few tens of
//! short connections to the receiver agent's own port, from source ports
//! the kernel chooses (random over the ephemeral range). The receiver's
//! verifier sees where each lands, and its learner solves for the key from
//! them (`srap_daemon::receiver::learning`). The connections carry no data
//! and close at once; the agent is not in the steered cgroup, so its probes
//! are never bound by the binder.

use std::time::Duration;

use tokio::net::TcpStream;
use tracing::{debug, info};

/// Connections per round: ~20 independent source ports determine the
/// source port's 16 bits; the rest make a wrong landing stand out.
pub const PROBES: usize = 32;
/// How long one connection may take to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Between two probes, so the receiver's accept loop keeps up.
const SPACING: Duration = Duration::from_millis(20);

/// Opens [`PROBES`] connections to `peer` (`HOST:PORT`) in the background.
pub fn spawn(peer: String) {
    tokio::spawn(async move {
        let mut landed = 0;
        for _ in 0..PROBES {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&peer)).await {
                Ok(Ok(stream)) => {
                    landed += 1;
                    drop(stream);
                }
                Ok(Err(err)) => debug!("probe connection to {peer}: {err}"),
                Err(_) => debug!("probe connection to {peer}: timed out"),
            }
            tokio::time::sleep(SPACING).await;
        }
        info!(
            "receiver {peer}: {landed} of {PROBES} probe connections made, for its learner to \
             see where they land"
        );
    });
}
