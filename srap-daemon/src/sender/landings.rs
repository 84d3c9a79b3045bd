//! Where the steered cgroup's connections land on this host's own NIC: the
//! socket hook (`srap_obs_local`, `sock_ops` on the steered cgroup)
//! records each connection the cgroup opens when its SYN-ACK is processed
//! — the receive queue the kernel copied into the socket and the CPU that
//! ran the softirq, which is where every later reverse packet of the flow
//! lands. It runs twice per connection and never per packet.
//!
//! The links belong to the returned [`LocalLandings`]: dropping it detaches.

use std::{collections::HashMap, net::SocketAddr, path::Path};

use aya::{
    Ebpf,
    maps::HashMap as BpfHashMap,
    programs::{CgroupAttachMode, SockOps},
};
use srap_common::observer::{
    CPU_UNKNOWN, FlowKey, LOCAL_FLOWS_MAP, OBSERVE_LOCAL_PROGRAM, SockFlow,
};
use srap_host::report::Chain;

use crate::observer::{Hook, ObserverError, QueueReading, driver};

/// One connection the steered cgroup opened, as this host's NIC received
/// its handshake's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// This host's address and the port it bound.
    pub src: SocketAddr,
    /// The server's address and port.
    pub dst: SocketAddr,
    /// The receive queue of the SYN-ACK (`None`: the device recorded none).
    pub queue: Option<u32>,
    /// The CPU that processed it.
    pub cpu: u32,
    /// The CPU of the thread that called `connect()` (`None`: opened
    /// before the hook was attached).
    pub connect_cpu: Option<u32>,
    /// `bpf_ktime_get_ns()` when it was established.
    pub established_ns: u64,
    /// Closed since.
    pub closed: bool,
}

/// The socket hook on the steered cgroup, attached.
pub struct LocalLandings {
    ebpf: Ebpf,
    queues: QueueReading,
}

impl std::fmt::Debug for LocalLandings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLandings")
            .field("queues", &self.queues)
            .finish_non_exhaustive()
    }
}

impl LocalLandings {
    /// Attaches the hook to `cgroup` (a cgroup2 directory). `iface`, this
    /// host's NIC when discovered, says how its recorded queues read (a
    /// veth records the peer's transmit queue); without one they are taken
    /// as they are.
    pub fn attach(cgroup: &Path, iface: Option<&str>) -> Result<Self, ObserverError> {
        let mut ebpf = Ebpf::load(crate::ebpf_object())?;
        let refused = |detail: String| ObserverError::Attach {
            iface: iface.unwrap_or("this host's NIC").to_owned(),
            attempts: format!("{}: {detail}", Hook::SockOps),
        };
        let file = std::fs::File::open(cgroup)
            .map_err(|err| refused(format!("opening cgroup {}: {err}", cgroup.display())))?;
        let program: &mut SockOps = ebpf
            .program_mut(OBSERVE_LOCAL_PROGRAM)
            .ok_or(ObserverError::Missing("the local sock_ops program"))?
            .try_into()
            .map_err(|source| ObserverError::Program {
                program: OBSERVE_LOCAL_PROGRAM,
                source,
            })?;
        program.load().map_err(|source| ObserverError::Program {
            program: OBSERVE_LOCAL_PROGRAM,
            source,
        })?;
        // A link: coexists with the binder's and any other program there.
        program
            .attach(file, CgroupAttachMode::Single)
            .map_err(|err| refused(Chain(&err).to_string()))?;
        let driver = iface.and_then(driver);
        Ok(Self {
            ebpf,
            queues: QueueReading::of(Hook::SockOps, driver.as_deref()),
        })
    }

    /// The CPU a record names is the one this host's NIC interrupted: not
    /// on a veth, where the sending side's CPU processes the packet.
    pub fn cpus_are_the_nics(&self) -> bool {
        self.queues != QueueReading::SocketPeerTxQueue
    }

    /// Every connection recorded so far (open and closed), oldest first.
    pub fn read(&self) -> Result<Vec<Opened>, ObserverError> {
        let map = self
            .ebpf
            .map(LOCAL_FLOWS_MAP)
            .ok_or(ObserverError::Missing("the local flow map"))?;
        let map = BpfHashMap::<_, FlowKey, SockFlow>::try_from(map)?;
        // An LRU map can evict while it is walked, which restarts the walk.
        let mut flows = HashMap::new();
        for entry in map.iter() {
            let (key, flow) = entry?;
            flows.insert(key, flow);
        }
        // A record with no handshake yet is a connect not answered (yet).
        let mut opened: Vec<Opened> = flows
            .into_iter()
            .filter(|(_, flow)| flow.established_ns != 0)
            .filter_map(|(key, flow)| opened(&key, &flow, self.queues))
            .collect();
        opened.sort_by_key(|o| (o.established_ns, o.src));
        Ok(opened)
    }
}

/// One record as an [`Opened`] (`None` for an unknown family).
fn opened(key: &FlowKey, flow: &SockFlow, queues: QueueReading) -> Option<Opened> {
    let queue = queues.queue(flow.rx_queue);
    Some(Opened {
        src: canonical(key.src()?),
        dst: canonical(key.dst()?),
        queue: (queue != srap_common::observer::RX_QUEUE_UNKNOWN).then_some(queue),
        cpu: flow.cpu,
        connect_cpu: (flow.connect_cpu != CPU_UNKNOWN).then_some(flow.connect_cpu),
        established_ns: flow.established_ns,
        closed: flow.closed_ns != 0,
    })
}

/// A dual-stack socket's `::ffff:a.b.c.d` as the IPv4 address it is.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use srap_common::protocol::Protocol;

    #[test]
    fn records_read_with_this_hosts_address_as_the_source() {
        let src: SocketAddr = "[::ffff:10.0.0.1]:40000".parse().unwrap();
        let dst: SocketAddr = "[::ffff:10.0.0.2]:5201".parse().unwrap();
        let key = FlowKey::from_addrs(Protocol::Tcp, src, dst).unwrap();
        let flow = SockFlow {
            rx_queue: 2,
            cpu: 1,
            established_ns: 5,
            ..SockFlow::default()
        };
        let veth = QueueReading::of(Hook::SockOps, Some("veth"));
        let o = opened(&key, &flow, veth).unwrap();
        assert_eq!(o.src, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(o.dst, "10.0.0.2:5201".parse().unwrap());
        assert_eq!((o.queue, o.cpu, o.closed), (Some(3), 1, false));
        let none = SockFlow {
            rx_queue: u32::MAX,
            closed_ns: 9,
            ..flow
        };
        let real = QueueReading::of(Hook::SockOps, Some("virtio_net"));
        let o = opened(&key, &none, real).unwrap();
        assert_eq!((o.queue, o.closed), (None, true));
    }
}
