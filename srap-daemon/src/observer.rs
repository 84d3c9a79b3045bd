//! Loads and attaches the receive observer (`srap_obs_sock`,
//! `srap_obs_tc` or `srap_obs_xdp`) and reads back where each TCP flow
//! landed.
//!
//! Attachment picks the first hook that works in [`AUTO_ORDER`]: the socket
//! hook (`sock_ops` on a cgroup) runs twice per accepted connection and never
//! per packet, so it costs the receive CPUs nothing; it sees flows that end
//! on this host, with their queue and CPU from the handshake and their bytes
//! from `tcp_info` (sock_diag). tc ingress parses every packet (after GRO)
//! and also sees flows that only pass through; XDP only when asked.
//!
//! The links belong to the returned [`Observer`]: dropping it detaches. A
//! caller working in another network namespace must drop it in that same
//! namespace (netlink-based detaches use the caller's namespace).

use std::{
    collections::HashMap,
    fmt,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use aya::{
    Ebpf,
    programs::{
        CgroupAttachMode, Program, ProgramError, SchedClassifier, SockOps, TcAttachType, Xdp,
        XdpMode,
    },
};
use srap_common::observer::{
    FLOWS_MAP, FLOWS_MAX_ENTRIES, FlowKey, FlowStats, NIC_HASH_NONE, OBSERVE_SOCK_PROGRAM,
    OBSERVE_TC_PROGRAM, OBSERVE_XDP_PROGRAM, RX_QUEUE_UNKNOWN, SOCK_FLOWS_MAP, SockFlow,
};
use srap_common::protocol::Protocol;
use srap_host::report::Chain;

use crate::sock_diag::{SockDiagError, TcpCounters, TcpDiag};
use crate::tc::TcMode;
use tracing::{debug, info, warn};

pub use self::{
    error::ObserverError,
    hook::{AUTO_ORDER, Hook, HookChoice},
};

use self::{
    hook::AttachFailure,
    seam::{FlowTable, HookAttacher},
};

mod error;
mod hook;
mod seam;
#[cfg(test)]
mod seam_tests;

/// One flow as the observer recorded it.
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
    /// The socket hook on a veth: the kernel stored the skb's
    /// `queue_mapping − 1` (the peer's tx queue − 1) and nothing for queue 0:
    /// −1 (read as queue 0) for a listener's first connection, and the
    /// listener's earlier value after that. Exact for queues ≥ 1 only.
    SocketPeerTxQueue,
}

impl QueueReading {
    /// How `hook` on a device driven by `driver` records the queue.
    pub fn of(hook: Hook, driver: Option<&str>) -> Self {
        match (hook, driver) {
            (Hook::XdpDriver | Hook::XdpGeneric, _) => Self::Exact,
            // The socket's rx_queue_mapping is already queue_mapping − 1.
            (Hook::SockOps, Some("veth")) => Self::SocketPeerTxQueue,
            (Hook::SockOps, _) => Self::Exact,
            (_, Some("veth")) => Self::PeerTxQueue,
            _ => Self::RecordedPlusOne,
        }
    }

    /// The receive queue a recorded value stands for ([`RX_QUEUE_UNKNOWN`]
    /// when it stands for none).
    pub fn queue(self, recorded: u32) -> u32 {
        match self {
            Self::Exact | Self::PeerTxQueue => recorded,
            Self::RecordedPlusOne if recorded == RX_QUEUE_UNKNOWN => RX_QUEUE_UNKNOWN,
            Self::RecordedPlusOne => recorded.checked_sub(1).unwrap_or(RX_QUEUE_UNKNOWN),
            Self::SocketPeerTxQueue => recorded.wrapping_add(1),
        }
    }
}

/// A loaded and attached receive observer; dropping it detaches.
pub struct Observer {
    ebpf: Ebpf,
    hook: Hook,
    iface: String,
    queues: QueueReading,
    /// The socket hook's view of the namespace it was attached in.
    sockets: Option<SocketView>,
    /// What the observer runs without, and what that costs.
    limits: Vec<ObserverLimit>,
    /// Records idle (tc, XDP) or closed (socket hook) for longer than this
    /// are deleted at the next read ([`Observer::forget_after`]).
    forget_after: Option<Duration>,
    /// Records in the map at the last read, stale ones included.
    held: usize,
    /// Whether the map is near full: said once each way.
    fill: MapFill,
}

/// Something the observer runs without, and what that costs: said in the
/// log, `srap status`, its JSON and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverLimit {
    /// A short name of what is missing (`sock_diag`), for labels.
    pub missing: &'static str,
    /// What exactly is missing, why, and what it costs.
    pub detail: String,
}

/// What the socket hook needs besides its map: the attaching namespace's
/// connections (sock_diag for TCP, when the kernel has it) and which local
/// addresses belong to the interface (the cgroup's sockets may live in
/// other namespaces or on loopback).
#[derive(Debug)]
struct SocketView {
    diag: Option<TcpDiag>,
    local: Vec<IpAddr>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("hook", &self.hook)
            .field("iface", &self.iface)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// Loads the observer and attaches it to `iface` (in the calling thread's
    /// network namespace) on the first hook of `choice` that works; the
    /// socket hook goes on the cgroup2 root.
    pub fn attach(iface: &str, choice: HookChoice) -> Result<Self, ObserverError> {
        Self::attach_in(iface, choice, None)
    }

    /// [`Observer::attach`], with the socket hook on `cgroup` (a cgroup2
    /// directory; `None`: the cgroup2 root, every local TCP server). It sees
    /// connections accepted by processes in that cgroup's subtree.
    pub fn attach_in(
        iface: &str,
        choice: HookChoice,
        cgroup: Option<&Path>,
    ) -> Result<Self, ObserverError> {
        let mut ebpf = Ebpf::load(crate::ebpf_object())?;
        let mut limits = Vec::new();
        let driver = driver(iface);
        let mut hooks = KernelHooks {
            ebpf: &mut ebpf,
            iface,
            cgroup,
            choice,
            limits: &mut limits,
        };
        let (hook, sockets) = first_attached(&mut hooks, iface, choice, driver.as_deref())?;
        info!(iface, %hook, "receive observer attached");
        for limit in &limits {
            warn!(iface, %hook, "the receive observer runs without {}: {}", limit.missing, limit.detail);
        }
        Ok(Self {
            ebpf,
            hook,
            iface: iface.to_owned(),
            queues: QueueReading::of(hook, driver.as_deref()),
            sockets,
            limits,
            forget_after: None,
            held: 0,
            fill: MapFill::default(),
        })
    }

    /// The hook the observer runs on.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// The interface the observer is attached to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// What it runs without, and what that costs (empty: nothing).
    pub fn limits(&self) -> &[ObserverLimit] {
        &self.limits
    }

    /// Forget what no view shows any more: from the next read on, records
    /// of flows idle (tc, XDP) or closed (socket hook) for longer than
    /// `after` are deleted from the map. Every read walks the whole map, two
    /// system calls a record, and a map filled by a host's many short
    /// connections (65 536 records) would make each sample cost some
    /// 130 000 calls for flows long gone. A tc or XDP record comes back
    /// with the flow's next packet; a socket record is only forgotten once
    /// its connection closed, since its queue and CPU are known from the
    /// handshake alone.
    pub fn forget_after(&mut self, after: Duration) {
        self.forget_after = Some(after);
    }

    /// Records in the observer's map at the last read (stale ones
    /// included), of [`srap_common::observer::FLOWS_MAX_ENTRIES`]: a full
    /// map evicts flows.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Every flow recorded so far, sorted by (src, dst).
    pub fn flows(&self) -> Result<Vec<FlowRecord>, ObserverError> {
        self.read(monotonic_ns(), |_| false)
            .map(|read| read.records)
    }

    /// [`Observer::flows`], less the records [`Observer::forget_after`]
    /// calls stale, which are deleted from the map: what an agent sampling
    /// forever calls.
    pub fn sample(&mut self) -> Result<Vec<FlowRecord>, ObserverError> {
        let now_ns = monotonic_ns();
        let Some(after) = self.forget_after else {
            return self.flows();
        };
        let cutoff = now_ns.saturating_sub(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX));
        let read = self.read(now_ns, |last_ns| last_ns < cutoff)?;
        self.held = read.held;
        self.fill.note(read.held, &self.iface);
        self.forget(&read.stale);
        Ok(read.records)
    }

    /// The records, sorted, and the keys of those `stale` calls stale by
    /// the time of their flow's last packet (tc, XDP) or close (socket
    /// hook; 0 while open: never stale), left out of the records.
    fn read(&self, now_ns: u64, stale: impl Fn(u64) -> bool) -> Result<MapRead, ObserverError> {
        read_table(
            &self.ebpf,
            self.sockets.as_ref(),
            self.queues,
            (now_ns, &stale),
        )
    }

    /// Deletes `keys` from the map the hook records in (after the walk:
    /// deleting during it would restart it).
    fn forget(&mut self, keys: &[FlowKey]) {
        let result = if self.sockets.is_some() {
            self.ebpf.remove::<SockFlow>(SOCK_FLOWS_MAP, keys)
        } else {
            self.ebpf.remove::<FlowStats>(FLOWS_MAP, keys)
        };
        if let Err(err) = result {
            debug!(%err, "forgetting stale flow records");
        }
    }
}

/// [`Observer::read`] of `table`: the socket hook's map when it runs with
/// `sockets`, else the packet hooks', their queues read as `queues`; a
/// record is stale by `stale` at `now_ns`.
fn read_table(
    table: &impl FlowTable,
    sockets: Option<&SocketView>,
    queues: QueueReading,
    (now_ns, stale): (u64, &dyn Fn(u64) -> bool),
) -> Result<MapRead, ObserverError> {
    let mut forget = Vec::new();
    let held;
    let mut records = if let Some(sockets) = sockets {
        let mut flows = table.walk::<SockFlow>(SOCK_FLOWS_MAP)?;
        held = flows.len();
        flows.retain(|key, flow| {
            let keep = flow.closed_ns == 0 || !stale(flow.closed_ns);
            if !keep {
                forget.push(*key);
            }
            keep
        });
        socket_flows(sockets, flows, now_ns, queues)?
    } else {
        let mut flows = table.walk::<FlowStats>(FLOWS_MAP)?;
        held = flows.len();
        flows.retain(|key, stats| {
            let keep = !stale(stats.last_seen_ns);
            if !keep {
                forget.push(*key);
            }
            keep
        });
        packet_flows(flows, queues)
    };
    records.sort_by_key(|record| (record.src, record.dst));
    Ok(MapRead {
        records,
        stale: forget,
        held,
    })
}

/// The packet hooks' records as flows.
fn packet_flows(flows: HashMap<FlowKey, FlowStats>, queues: QueueReading) -> Vec<FlowRecord> {
    flows
        .into_iter()
        .filter_map(|(key, mut stats)| {
            stats.rx_queue = queues.queue(stats.rx_queue);
            Some(FlowRecord {
                src: key.src()?,
                dst: key.dst()?,
                key,
                stats,
            })
        })
        .collect()
}

/// One walk of the observer's map.
struct MapRead {
    /// The flows, sorted by (src, dst), less the stale ones.
    records: Vec<FlowRecord>,
    /// Keys of the stale records.
    stale: Vec<FlowKey>,
    /// Records in the map, stale ones included.
    held: usize,
}

/// The socket hook's flows: its map joined with the namespace's live
/// connections. A connection still open takes its counters from
/// `tcp_info`; a closed one from what the program stored at close. Only
/// connections to an address of the interface are this observer's.
fn socket_flows(
    sockets: &SocketView,
    flows: HashMap<FlowKey, SockFlow>,
    now_ns: u64,
    queues: QueueReading,
) -> Result<Vec<FlowRecord>, ObserverError> {
    let live = match &sockets.diag {
        Some(diag) => Some(diag.tcp_connections().map_err(ObserverError::Diag)?),
        None => None,
    };
    let mut records: Vec<_> = flows
        .into_iter()
        .filter_map(|(key, flow)| {
            let (src, dst) = (unmapped(key.src()?), unmapped(key.dst()?));
            if !sockets.local.contains(&dst.ip()) {
                return None;
            }
            let stats = match &live {
                Some(live) => {
                    let open = live.get(&(src, dst)).or_else(|| {
                        // A dual-stack socket reports v4-mapped addresses.
                        live.get(&(v4_mapped(src), v4_mapped(dst)))
                    });
                    socket_stats(&flow, open, now_ns, queues)?
                }
                None => handshake_stats(&flow, now_ns, queues),
            };
            // Re-keyed by the unmapped addresses, keeping the protocol the
            // program recorded.
            let protocol = Protocol::from_raw(u32::from(key.protocol)).unwrap_or(Protocol::Tcp);
            let key = FlowKey::from_addrs(protocol, src, dst).unwrap_or(key);
            Some(FlowRecord {
                src,
                dst,
                key,
                stats,
            })
        })
        .collect();
    records.sort_by_key(|record| (record.src, record.dst));
    Ok(records)
}

/// One connection's record in the tc program's terms. `None` for a record
/// that is neither open in this namespace nor closed (another namespace's).
fn socket_stats(
    flow: &SockFlow,
    open: Option<&TcpCounters>,
    now_ns: u64,
    queues: QueueReading,
) -> Option<FlowStats> {
    let (packets, bytes, last_seen_ns) = match (open, flow.closed_ns) {
        (Some(counters), _) => {
            let ago = u64::from(counters.last_data_recv_ms).saturating_mul(1_000_000);
            (
                counters.segs_in,
                counters.bytes_received,
                now_ns.saturating_sub(ago).max(flow.established_ns),
            )
        }
        (None, 0) => return None,
        (None, closed) => (flow.segs_in, flow.bytes, closed),
    };
    Some(FlowStats {
        rx_queue: queues.queue(flow.rx_queue),
        cpu: flow.cpu,
        packets,
        bytes,
        first_seen_ns: flow.established_ns,
        last_seen_ns,
        moves: 0,
        nic_hash: NIC_HASH_NONE,
    })
}

/// One connection's record without sock_diag: its queue and CPU from the
/// handshake; its bytes and segments once it closed (0 while open, as if no
/// data had come yet). An open record seen now counts as active now.
fn handshake_stats(flow: &SockFlow, now_ns: u64, queues: QueueReading) -> FlowStats {
    let last_seen_ns = if flow.closed_ns == 0 {
        now_ns
    } else {
        flow.closed_ns
    };
    FlowStats {
        rx_queue: queues.queue(flow.rx_queue),
        cpu: flow.cpu,
        packets: flow.segs_in,
        bytes: flow.bytes,
        first_seen_ns: flow.established_ns,
        last_seen_ns,
        moves: 0,
        nic_hash: NIC_HASH_NONE,
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d`: a dual-stack listener's IPv4 clients are
/// IPv4 flows, as the packet hooks record them.
fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(addr, |v4| SocketAddr::new(v4.into(), addr.port())),
        IpAddr::V4(_) => addr,
    }
}

fn v4_mapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(v4) => SocketAddr::new(v4.to_ipv6_mapped().into(), addr.port()),
        IpAddr::V6(_) => addr,
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`, which the
/// programs stamp their records with (`Instant` hides its value).
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The addresses of `iface` in the calling thread's namespace (none when it
/// has none or does not exist).
fn iface_addresses(iface: &str) -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.name == iface)
        .map(|a| a.ip())
        .collect()
}

/// The driver of `iface` (`ETHTOOL_GDRVINFO`), if it says.
pub fn driver(iface: &str) -> Option<String> {
    let socket = srap_host::discovery::ioctl::EthtoolSocket::open(iface).ok()?;
    socket.drvinfo().ok().map(|info| info.driver)
}

/// Attaches on the first hook of `choice`, in its order, that `hooks`
/// attaches on a device driven by `driver`: a hook refused moves on to the
/// next (its reason kept for the error), a fatal failure stops. The socket
/// hook is not tried by default on a veth. Returns the hook and what
/// attaching it gave.
fn first_attached<H: HookAttacher>(
    hooks: &mut H,
    iface: &str,
    choice: HookChoice,
    driver: Option<&str>,
) -> Result<(Hook, H::Attached), ObserverError> {
    let mut attempts = Vec::new();
    for &hook in choice.order() {
        if choice == HookChoice::Auto && hook == Hook::SockOps && driver == Some("veth") {
            // veth records no receive queue for its queue 0 (the skb's
            // queue_mapping is 0), and then a new socket keeps the
            // listener's queue from an earlier connection: the socket
            // hook cannot tell queue 0 there. tc can.
            attempts.push(format!(
                "{hook}: not by default on a veth (queue 0 unknowable)"
            ));
            continue;
        }
        match hooks.attach(hook) {
            Ok(attached) => return Ok((hook, attached)),
            Err(AttachFailure::Fatal(err)) => return Err(err),
            Err(AttachFailure::Refused(err)) => {
                info!(iface, %hook, %err, "hook refused, trying the next one");
                attempts.push(format!("{hook}: {err}"));
            }
        }
    }
    Err(ObserverError::Attach {
        iface: iface.to_owned(),
        attempts: attempts.join("; "),
    })
}

/// The observer's three programs (XDP, tc, `sock_ops`), found and loaded
/// the same way: [`loaded`] is their one home.
trait ObserverProgram {
    /// Loads the program unless a hook tried before already did (the
    /// automatic choice may try tc, say, after the socket hook failed).
    fn load_once(&mut self) -> Result<(), ProgramError>;
}

macro_rules! observer_program {
    ($($program:ty),+) => {$(
        impl ObserverProgram for $program {
            fn load_once(&mut self) -> Result<(), ProgramError> {
                if self.fd().is_err() {
                    self.load()?;
                }
                Ok(())
            }
        }
    )+};
}

observer_program!(Xdp, SchedClassifier, SockOps);

/// The program `name` of the object (`what`, for the error if the object
/// lacks it) as a `P`, loaded. A program of another type, or one the
/// kernel's verifier rejects, is fatal: no other hook would do better.
fn loaded<'e, P>(
    ebpf: &'e mut Ebpf,
    name: &'static str,
    what: &'static str,
) -> Result<&'e mut P, AttachFailure>
where
    P: ObserverProgram + 'e,
    &'e mut P: TryFrom<&'e mut Program, Error = ProgramError>,
{
    let fatal = |source| {
        AttachFailure::Fatal(ObserverError::Program {
            program: name,
            source,
        })
    };
    let program: &mut P = ebpf
        .program_mut(name)
        .ok_or(AttachFailure::Fatal(ObserverError::Missing(what)))?
        .try_into()
        .map_err(fatal)?;
    program.load_once().map_err(fatal)?;
    Ok(program)
}

/// The observer's object, attached in the calling thread's namespace: on
/// `iface` for the packet hooks, on `cgroup` (default the cgroup2 root)
/// for the socket hook, which notes what it runs without in `limits`.
struct KernelHooks<'a> {
    ebpf: &'a mut Ebpf,
    iface: &'a str,
    cgroup: Option<&'a Path>,
    choice: HookChoice,
    limits: &'a mut Vec<ObserverLimit>,
}

impl HookAttacher for KernelHooks<'_> {
    type Attached = Option<SocketView>;

    fn attach(&mut self, hook: Hook) -> Result<Option<SocketView>, AttachFailure> {
        let (ebpf, iface) = (&mut *self.ebpf, self.iface);
        match hook {
            Hook::XdpDriver => attach_xdp(ebpf, iface, XdpMode::Driver).map(|()| None),
            Hook::XdpGeneric => attach_xdp(ebpf, iface, XdpMode::Skb).map(|()| None),
            Hook::TcxIngress => attach_tc(ebpf, iface, TcMode::Tcx).map(|()| None),
            Hook::ClsactIngress => attach_tc(ebpf, iface, TcMode::Clsact).map(|()| None),
            Hook::SockOps => {
                attach_sock(ebpf, iface, self.cgroup, self.choice, self.limits).map(Some)
            }
        }
    }
}

fn attach_xdp(ebpf: &mut Ebpf, iface: &str, mode: XdpMode) -> Result<(), AttachFailure> {
    loaded::<Xdp>(ebpf, OBSERVE_XDP_PROGRAM, "XDP program")?
        .attach(iface, mode)
        .map(drop)
        .map_err(|err| AttachFailure::Refused(Chain(&err).to_string()))
}

/// The socket hook on `cgroup` (default: the cgroup2 root), with the
/// namespace's sock_diag socket and `iface`'s addresses, both taken now, in
/// the calling thread's namespace. Without sock_diag for TCP (a kernel
/// without `inet_diag`/`tcp_diag` that `modprobe tcp_diag` cannot fix), the
/// automatic choice moves on to tc ingress, which counts bytes itself, and
/// says what that costs; `--hook sock` keeps the socket hook and reports
/// each flow's queue and CPU from its handshake. Either way is in `limits`.
fn attach_sock(
    ebpf: &mut Ebpf,
    iface: &str,
    cgroup: Option<&Path>,
    choice: HookChoice,
    limits: &mut Vec<ObserverLimit>,
) -> Result<SocketView, AttachFailure> {
    let cgroup: PathBuf = match cgroup {
        Some(path) => path.to_owned(),
        None => srap_host::cgroup::cgroup2_mount()
            .map_err(|err| AttachFailure::Refused(err.to_string()))?,
    };
    let local = iface_addresses(iface);
    if local.is_empty() {
        return Err(AttachFailure::Refused(format!(
            "{iface} has no address here, so no connection ends on it"
        )));
    }
    let diag = socket_diag(TcpDiag::loaded(), choice, limits)?;
    let file = std::fs::File::open(&cgroup).map_err(|err| {
        AttachFailure::Refused(format!("opening cgroup {}: {err}", cgroup.display()))
    })?;
    let program = loaded::<SockOps>(ebpf, OBSERVE_SOCK_PROGRAM, "sock_ops program")?;
    // A BPF link (Linux ≥ 5.7) coexists with every other program and link
    // on the cgroup whatever the mode; link_create refuses the multi flag.
    program
        .attach(file, CgroupAttachMode::Single)
        .map_err(|err| AttachFailure::Refused(Chain(&err).to_string()))?;
    debug!(iface, cgroup = %cgroup.display(), "socket observer on the cgroup");
    Ok(SocketView { diag, local })
}

/// What the socket hook does with sock_diag for TCP `found` or missing
/// (why, as the error): under the automatic choice a missing one refuses
/// the hook, so tc ingress is tried next; chosen explicitly, the hook goes
/// on without it. Either way, what that costs goes into `limits`.
fn socket_diag<D>(
    found: Result<D, SockDiagError>,
    choice: HookChoice,
    limits: &mut Vec<ObserverLimit>,
) -> Result<Option<D>, AttachFailure> {
    match found {
        Ok(diag) => Ok(Some(diag)),
        Err(missing) if choice == HookChoice::Auto => {
            limits.push(ObserverLimit {
                missing: "sock_diag",
                detail: format!(
                    "{missing}; the socket hook would know each flow's queue and CPU but not \
                     its bytes until it closes, so the observer runs at tc ingress instead, \
                     which costs every received packet one program run (tens of ns)"
                ),
            });
            Err(AttachFailure::Refused(missing.to_string()))
        }
        Err(missing) => {
            limits.push(ObserverLimit {
                missing: "sock_diag",
                detail: format!(
                    "{missing}; each flow's queue and CPU come from its handshake, its bytes \
                     and rate only once it closes (`--hook auto` would use tc ingress, at a \
                     program run per received packet)"
                ),
            });
            Ok(None)
        }
    }
}

/// tc ingress through tcx, or through a `clsact` qdisc filter.
fn attach_tc(ebpf: &mut Ebpf, iface: &str, mode: TcMode) -> Result<(), AttachFailure> {
    let program = loaded::<SchedClassifier>(ebpf, OBSERVE_TC_PROGRAM, "tc program")?;
    crate::tc::attach(program, iface, TcAttachType::Ingress, mode)
        .map_err(|err| AttachFailure::Refused(Chain(&err).to_string()))
}

/// The flow map's fill, said when it nears full and when it has room
/// again. The map is LRU: past [`FLOWS_MAX_ENTRIES`] records the kernel
/// evicts the least recently used flow to record a new one, so a receiver
/// with more flows open (or closed within the forget window) than that
/// judges only some of them; `srap status` still counts what it sees.
#[derive(Debug, Default)]
struct MapFill {
    near_full: bool,
}

impl MapFill {
    /// Percent of [`FLOWS_MAX_ENTRIES`] from which the map is near full.
    const NEAR_FULL_PERCENT: usize = 90;
    /// Percent under which it has room again (apart from the above, so a
    /// map hovering at the mark is not said at every sample).
    const ROOM_PERCENT: usize = 75;

    /// Notes `held` records; true when that changed whether it is near full.
    fn note(&mut self, held: usize, iface: &str) -> bool {
        let max = FLOWS_MAX_ENTRIES as usize;
        let percent = held * 100 / max;
        let near_full = if self.near_full {
            percent >= Self::ROOM_PERCENT
        } else {
            percent >= Self::NEAR_FULL_PERCENT
        };
        if near_full == self.near_full {
            return false;
        }
        self.near_full = near_full;
        if near_full {
            warn!(
                iface,
                "the observer's flow map holds {held} of {max} records: past {max} the kernel \
                 evicts the least recently used flow, so some flows go unjudged (more flows \
                 open, or closed within the forget window, than the map holds)"
            );
        } else {
            info!(
                iface,
                "the observer's flow map has room again ({held} of {max} records)"
            );
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_nearing_full_is_said_once_each_way() {
        let max = FLOWS_MAX_ENTRIES as usize;
        let mut fill = MapFill::default();
        assert!(!fill.note(max / 2, "eth0"), "half full: nothing to say");
        assert!(fill.note(max * 95 / 100, "eth0"), "95 %: near full");
        assert!(!fill.note(max, "eth0"), "said once");
        assert!(!fill.note(max * 80 / 100, "eth0"), "80 %: still near full");
        assert!(fill.note(max * 70 / 100, "eth0"), "70 %: room again");
        assert!(
            !fill.note(max * 85 / 100, "eth0"),
            "85 %: not yet near full"
        );
    }

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
                .all(|hook| !matches!(hook, Hook::XdpDriver | Hook::XdpGeneric))
        );
        assert_eq!(
            HookChoice::Auto.order()[0],
            Hook::SockOps,
            "zero-cost first"
        );
    }

    #[test]
    fn socket_queue_reading_on_veth_and_real_drivers() {
        let veth = QueueReading::of(Hook::SockOps, Some("veth"));
        assert_eq!(veth.queue(u32::MAX), 0, "-1: the peer sent on tx queue 0");
        assert_eq!(veth.queue(2), 3);
        let real = QueueReading::of(Hook::SockOps, Some("mlx5_core"));
        assert_eq!(real.queue(5), 5);
        assert_eq!(real.queue(u32::MAX), RX_QUEUE_UNKNOWN);
    }

    #[test]
    fn socket_stats_prefer_live_counters_and_skip_foreign_records() {
        let flow = SockFlow {
            rx_queue: 1,
            cpu: 3,
            established_ns: 1_000,
            ..SockFlow::default()
        };
        let exact = QueueReading::Exact;
        assert_eq!(socket_stats(&flow, None, 5_000_000, exact), None);
        let live = TcpCounters {
            bytes_received: 9_000,
            bytes_acked: 0,
            segs_in: 7,
            last_data_recv_ms: 2,
        };
        let stats = socket_stats(&flow, Some(&live), 5_000_000, exact).expect("open");
        assert_eq!((stats.rx_queue, stats.cpu, stats.bytes), (1, 3, 9_000));
        assert_eq!(stats.last_seen_ns, 3_000_000);
        let closed = SockFlow {
            closed_ns: 4_000,
            bytes: 100,
            segs_in: 2,
            ..flow
        };
        let stats = socket_stats(&closed, None, 5_000_000, exact).expect("closed");
        assert_eq!(
            (stats.bytes, stats.packets, stats.last_seen_ns),
            (100, 2, 4_000)
        );
    }
}
