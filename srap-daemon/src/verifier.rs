//! Loads and attaches the receive verifier (`srap_verify` / `srap_verify_tc`)
//! and reads back where each TCP flow landed.
//!
//! Attachment picks the best hook the device accepts, in [`AUTO_ORDER`]:
//! native XDP sees frames as the driver receives them, with the driver's queue
//! index; tc ingress is the fallback that every device supports; generic
//! (skb) XDP comes last because it linearises every skb, which costs more than
//! tc on a busy receiver and tells nothing more.
//!
//! The links belong to the returned [`Verifier`]: dropping it detaches. A
//! caller working in another network namespace must drop it in that same
//! namespace (netlink-based detaches use the caller's namespace).

use std::{collections::HashMap, fmt, net::SocketAddr};

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapError},
    programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType, Xdp, XdpMode, tc},
};
use srap_common::maps::{
    FLOWS_MAP, FlowKey, FlowStats, RX_QUEUE_UNKNOWN, VERIFY_TC_PROGRAM, VERIFY_XDP_PROGRAM,
};
use tracing::{debug, info};

/// Where the verifier runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Native (driver) XDP.
    XdpDriver,
    /// Generic XDP, run by the kernel's network stack.
    XdpGeneric,
    /// tc ingress through a tcx link (Linux ≥ 6.6, no qdisc needed).
    TcxIngress,
    /// tc ingress through a filter on a `clsact` qdisc (netlink; older kernels).
    ClsactIngress,
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::XdpDriver => "xdp (driver)",
            Self::XdpGeneric => "xdp (generic)",
            Self::TcxIngress => "tc ingress (tcx)",
            Self::ClsactIngress => "tc ingress (clsact)",
        })
    }
}

/// Hooks tried by [`HookChoice::Auto`], best first: only hooks whose
/// attaching changes nothing on the device. XDP is never chosen for the
/// user: on virtio_net (6.1) attaching it re-sends the queue-pair count and
/// QEMU turns RSS off; mlx5 refuses it while HW-GRO/LRO is on and rebuilds
/// its receive rings; a non-frags program cannot attach at 9000-byte MTU.
pub const AUTO_ORDER: [Hook; 2] = [Hook::TcxIngress, Hook::ClsactIngress];

/// Which hooks to try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookChoice {
    /// [`AUTO_ORDER`]: the first that attaches.
    #[default]
    Auto,
    /// XDP only, as an explicit choice: driver mode, then generic.
    Xdp,
    /// tc ingress only: tcx, then a `clsact` filter.
    Tc,
    /// Exactly this hook.
    Only(Hook),
}

impl HookChoice {
    fn order(&self) -> &[Hook] {
        match self {
            Self::Auto => &AUTO_ORDER,
            Self::Xdp => &[Hook::XdpDriver, Hook::XdpGeneric],
            Self::Tc => &[Hook::TcxIngress, Hook::ClsactIngress],
            Self::Only(hook) => std::slice::from_ref(hook),
        }
    }
}

/// Why the verifier could not be loaded, attached or read.
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    /// The embedded object did not load (no privileges, no BTF, verifier reject…).
    #[error("loading the SRAP eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    /// The object lacks a program or map this code expects (build mismatch).
    #[error("the SRAP eBPF object has no {0}")]
    Missing(&'static str),
    /// A program could not be loaded into the kernel.
    #[error("loading program {program}: {source}")]
    Program {
        /// Program name.
        program: &'static str,
        /// What the kernel or aya said.
        source: ProgramError,
    },
    /// No hook of the chosen family attached.
    #[error("could not attach the receive verifier to {iface}: {attempts}")]
    Attach {
        /// Interface name.
        iface: String,
        /// Every attempt with its error, in order.
        attempts: String,
    },
    /// Reading the flow map failed.
    #[error("reading {FLOWS_MAP}: {0}")]
    Map(#[from] MapError),
}

/// One flow as the verifier recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Sender's address and port.
    pub src: SocketAddr,
    /// Receiver's address and port.
    pub dst: SocketAddr,
    /// Raw map key.
    pub key: FlowKey,
    /// Raw map value.
    pub stats: FlowStats,
}

/// What the receive queue a hook records means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueReading {
    /// XDP's `rx_queue_index`: the queue itself.
    Exact,
    /// tc on a real driver: `skb_record_rx_queue` stored queue + 1, and 0
    /// means the driver recorded nothing.
    RecordedPlusOne,
    /// tc on a veth: the skb still carries the tx queue the peer sent it on,
    /// which veth delivers on the receive queue of the same number.
    PeerTxQueue,
}

impl QueueReading {
    /// How `hook` on a device driven by `driver` records the queue.
    pub fn of(hook: Hook, driver: Option<&str>) -> Self {
        match (hook, driver) {
            (Hook::XdpDriver | Hook::XdpGeneric, _) => Self::Exact,
            (_, Some("veth")) => Self::PeerTxQueue,
            _ => Self::RecordedPlusOne,
        }
    }

    /// The receive queue a recorded value stands for.
    pub fn queue(self, recorded: u32) -> u32 {
        match self {
            Self::Exact | Self::PeerTxQueue => recorded,
            Self::RecordedPlusOne => recorded.checked_sub(1).unwrap_or(RX_QUEUE_UNKNOWN),
        }
    }
}

/// A loaded and attached receive verifier; dropping it detaches.
pub struct Verifier {
    ebpf: Ebpf,
    hook: Hook,
    iface: String,
    queues: QueueReading,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("hook", &self.hook)
            .field("iface", &self.iface)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// Loads the verifier and attaches it to `iface` (in the calling thread's
    /// network namespace) on the first hook of `choice` that works.
    pub fn attach(iface: &str, choice: HookChoice) -> Result<Self, VerifierError> {
        let mut ebpf = Ebpf::load(crate::ebpf_object())?;
        let mut attempts = Vec::new();
        for &hook in choice.order() {
            let outcome = match hook {
                Hook::XdpDriver => attach_xdp(&mut ebpf, iface, XdpMode::Driver),
                Hook::XdpGeneric => attach_xdp(&mut ebpf, iface, XdpMode::Skb),
                Hook::TcxIngress => attach_tc(&mut ebpf, iface, false),
                Hook::ClsactIngress => attach_tc(&mut ebpf, iface, true),
            };
            match outcome {
                Ok(()) => {
                    info!(iface, %hook, "receive verifier attached");
                    return Ok(Self {
                        ebpf,
                        hook,
                        iface: iface.to_owned(),
                        queues: QueueReading::of(hook, driver(iface).as_deref()),
                    });
                }
                Err(AttachFailure::Fatal(err)) => return Err(err),
                Err(AttachFailure::Refused(err)) => {
                    info!(iface, %hook, %err, "hook refused, trying the next one");
                    attempts.push(format!("{hook}: {err}"));
                }
            }
        }
        Err(VerifierError::Attach {
            iface: iface.to_owned(),
            attempts: attempts.join("; "),
        })
    }

    /// The hook the verifier runs on.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// The interface the verifier is attached to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Every flow recorded so far, sorted by (src, dst).
    pub fn flows(&self) -> Result<Vec<FlowRecord>, VerifierError> {
        let map = self
            .ebpf
            .map(FLOWS_MAP)
            .ok_or(VerifierError::Missing("flow map"))?;
        let map = BpfHashMap::<_, FlowKey, FlowStats>::try_from(map)?;
        // An LRU map can evict while we walk it, which restarts the walk:
        // collect into a map so a flow seen twice is reported once.
        let mut flows = HashMap::new();
        for entry in map.iter() {
            let (key, stats) = entry?;
            flows.insert(key, stats);
        }
        let mut records: Vec<_> = flows
            .into_iter()
            .filter_map(|(key, mut stats)| {
                if stats.rx_queue != RX_QUEUE_UNKNOWN {
                    stats.rx_queue = self.queues.queue(stats.rx_queue);
                }
                Some(FlowRecord {
                    src: key.src()?,
                    dst: key.dst()?,
                    key,
                    stats,
                })
            })
            .collect();
        records.sort_by_key(|record| (record.src, record.dst));
        Ok(records)
    }
}

/// The driver of `iface` (`ETHTOOL_GDRVINFO`), if it says.
fn driver(iface: &str) -> Option<String> {
    let socket = srap_host::discovery::ioctl::EthtoolSocket::open(iface).ok()?;
    socket.drvinfo().ok().map(|info| info.driver)
}

/// An attempt that failed: either this hook is unavailable (try the next) or
/// something is wrong with the object itself (stop).
enum AttachFailure {
    Refused(String),
    Fatal(VerifierError),
}

fn load_xdp(ebpf: &mut Ebpf) -> Result<&mut Xdp, AttachFailure> {
    let program: &mut Xdp = ebpf
        .program_mut(VERIFY_XDP_PROGRAM)
        .ok_or(AttachFailure::Fatal(VerifierError::Missing("XDP program")))?
        .try_into()
        .map_err(|source| {
            AttachFailure::Fatal(VerifierError::Program {
                program: VERIFY_XDP_PROGRAM,
                source,
            })
        })?;
    if program.fd().is_err() {
        program.load().map_err(|source| {
            AttachFailure::Fatal(VerifierError::Program {
                program: VERIFY_XDP_PROGRAM,
                source,
            })
        })?;
    }
    Ok(program)
}

fn attach_xdp(ebpf: &mut Ebpf, iface: &str, mode: XdpMode) -> Result<(), AttachFailure> {
    load_xdp(ebpf)?
        .attach(iface, mode)
        .map(drop)
        .map_err(|err| AttachFailure::Refused(error_chain(&err)))
}

fn load_tc(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, AttachFailure> {
    let program: &mut SchedClassifier = ebpf
        .program_mut(VERIFY_TC_PROGRAM)
        .ok_or(AttachFailure::Fatal(VerifierError::Missing("tc program")))?
        .try_into()
        .map_err(|source| {
            AttachFailure::Fatal(VerifierError::Program {
                program: VERIFY_TC_PROGRAM,
                source,
            })
        })?;
    if program.fd().is_err() {
        program.load().map_err(|source| {
            AttachFailure::Fatal(VerifierError::Program {
                program: VERIFY_TC_PROGRAM,
                source,
            })
        })?;
    }
    Ok(program)
}

/// tc ingress through tcx, or through a `clsact` qdisc filter. A `clsact`
/// qdisc added here stays on the device after detach: it is inert without
/// filters, and removing it could remove someone else's.
fn attach_tc(ebpf: &mut Ebpf, iface: &str, clsact: bool) -> Result<(), AttachFailure> {
    let program = load_tc(ebpf)?;
    let options = if clsact {
        match tc::qdisc_add_clsact(iface) {
            Ok(()) => debug!(iface, "added a clsact qdisc"),
            // Usually "already there" (ours from before, or someone else's):
            // use it; if it is something worse, the attach below says so.
            Err(err) => debug!(iface, err = %error_chain(&err), "clsact qdisc not added"),
        }
        tc::TcAttachOptions::Netlink(tc::NlOptions::default())
    } else {
        tc::TcAttachOptions::TcxOrder(LinkOrder::default())
    };
    program
        .attach_with_options(iface, TcAttachType::Ingress, options)
        .map(drop)
        .map_err(|err| AttachFailure::Refused(error_chain(&err)))
}

/// `err` and its sources on one line: aya's errors keep the useful part
/// (the errno) in the source chain.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_readings_per_hook_and_driver() {
        let xdp = QueueReading::of(Hook::XdpDriver, Some("virtio_net"));
        assert_eq!(xdp.queue(3), 3);
        let tc_real = QueueReading::of(Hook::TcxIngress, Some("virtio_net"));
        assert_eq!(tc_real.queue(4), 3, "real drivers record queue + 1");
        assert_eq!(tc_real.queue(0), RX_QUEUE_UNKNOWN, "0: nothing recorded");
        let tc_veth = QueueReading::of(Hook::ClsactIngress, Some("veth"));
        assert_eq!(tc_veth.queue(0), 0, "veth carries the peer's tx queue");
        assert_eq!(tc_veth.queue(7), 7);
    }

    #[test]
    fn auto_never_picks_xdp() {
        assert!(
            HookChoice::Auto
                .order()
                .iter()
                .all(|hook| matches!(hook, Hook::TcxIngress | Hook::ClsactIngress))
        );
    }
}
