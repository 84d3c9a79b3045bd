//! CPU lists with a flow count on each: a receiver's grant of CPUs and a
//! sender's demand on them, bounded and checked before a peer takes them.
//! Plain data and its checks: which CPUs to grant is the receiver's choice,
//! not this file's.

use bincode::{Decode, Encode};
use thiserror::Error;

/// Most CPUs one [`CpuGrant`] or [`DemandReport`] names: the binder's slots
/// per receiver ([`crate::binder::MAX_SLOTS`]). A longer list is refused.
pub const MAX_GRANT_CPUS: usize = crate::binder::MAX_SLOTS as usize;

/// [`Message::Demand`]: what a sender has open toward this receiver, so the
/// receiver can grant CPUs that follow demand. Sent after every grant the
/// sender applied and whenever its open flows change (at most every 100 ms).
///
/// [`Message::Demand`]: super::Message::Demand
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct DemandReport {
    /// [`CpuGrant::epoch`] of the grant the sender's binder uses now (0:
    /// none yet), so the receiver knows when a new grant is in force.
    pub applied: u64,
    /// Open steered flows per receiver CPU (CPUs with none left out), at
    /// most [`MAX_GRANT_CPUS`] entries.
    pub flows: Vec<CpuCount>,
}

/// [`Message::Grant`]: the receiver's CPUs this sender's new flows may use.
/// Between senders the granted sets are disjoint while their flows fit the
/// receiver's offered CPUs; when they do not, every sender is granted every
/// offered CPU with the flows other senders hold there as `base`, and its
/// binder fills the least-loaded first, which keeps max − min flows per CPU
/// within one. A sender uses only granted CPUs and keeps its last grant while
/// the receiver is away.
///
/// [`Message::Grant`]: super::Message::Grant
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct CpuGrant {
    /// Grows with every grant of one receiver run.
    pub epoch: u64,
    /// The granted CPUs, each with the flows other senders hold on it (the
    /// `count` of a [`CpuCount`]); at most [`MAX_GRANT_CPUS`] entries.
    pub cpus: Vec<CpuCount>,
}

/// A receiver CPU and a count of flows on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Encode, Decode)]
pub struct CpuCount {
    pub cpu: u32,
    pub count: u32,
}

/// A CPU list of a grant or demand that a peer may not take as it is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("{what} names {count} CPUs; at most {MAX_GRANT_CPUS} are allowed")]
    TooMany { what: &'static str, count: usize },
    #[error("{what} names CPU {cpu} twice")]
    Repeated { what: &'static str, cpu: u32 },
}

/// Checks a CPU list against [`MAX_GRANT_CPUS`] and for repeated CPUs;
/// the error says which.
fn check_cpus(what: &'static str, cpus: &[CpuCount]) -> Result<(), CpuListError> {
    if cpus.len() > MAX_GRANT_CPUS {
        return Err(CpuListError::TooMany {
            what,
            count: cpus.len(),
        });
    }
    let mut seen: Vec<u32> = cpus.iter().map(|c| c.cpu).collect();
    seen.sort_unstable();
    if let Some(pair) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(CpuListError::Repeated { what, cpu: pair[0] });
    }
    Ok(())
}

impl DemandReport {
    /// Whether a receiver may take this report as it is.
    pub fn check(&self) -> Result<(), CpuListError> {
        check_cpus("a Demand report", &self.flows)
    }
}

impl CpuGrant {
    /// A grant of `cpus` that no other sender holds flows on (every base
    /// 0).
    pub fn uncontended(epoch: u64, cpus: impl IntoIterator<Item = u32>) -> Self {
        Self {
            epoch,
            cpus: cpus
                .into_iter()
                .map(|cpu| CpuCount { cpu, count: 0 })
                .collect(),
        }
    }

    /// Whether a sender may apply this grant as it is.
    pub fn check(&self) -> Result<(), CpuListError> {
        check_cpus("a Grant", &self.cpus)
    }
}
