//! The lab's two hosts: sender and receiver namespaces joined by a
//! multi-queue veth, the RSS-NIC emulator on the sender's end (so the
//! receiver's RX queue follows Toeplitz exactly as a NIC's would), per-queue
//! RPS CPUs, and the receive observer on the receiver's end. With a sender
//! NIC ([`lab_sender_nic`], `--direction pull|both`) the same
//! again the other way: the emulator on the receiver's end hashes what the
//! receiver sends with the sender's description, per-queue RPS on the
//! sender, and an observer on the sender's end sees where it lands.

use std::net::IpAddr;

use anyhow::Context as _;
use srap_common::rss::{RssDescription, RssModel};
use srap_daemon::observer::{FlowRecord, Hook, HookChoice, Observer};
use srap_harness::emulator::lab_nic;
use srap_harness::{
    emulator::Emulator,
    netns::NetNs,
    veth::{TwoHosts, VethConfig},
};

use crate::{
    capacity::{QueueCapacity, Rate},
    direction::Direction,
};

/// `10.199.250.0/24`: the lab's subnet, inside its own namespaces only.
const LAB_SUBNET: u8 = 250;

/// The lab's sender NIC with `queues` queues, for `--direction pull|both`:
/// the receiver's table shape over a key of its own (two hosts' NICs
/// rarely share one), each queue its own CPU.
pub fn lab_sender_nic(queues: u32) -> anyhow::Result<RssModel> {
    lab_sender_nic_on(queues, SenderCpus::PerQueue)
}

/// [`lab_sender_nic`] with its queues' CPUs as `cpus` says.
pub fn lab_sender_nic_on(queues: u32, cpus: SenderCpus) -> anyhow::Result<RssModel> {
    const SENDER_KEY: &str = "3c:3c:a1:59:07:ee:12:40:88:7d:d0:2b:61:f3:9a:c4:25:5e:b0:13:\
                              77:c8:0d:e9:42:6a:1f:95:38:b7:cc:04:5d:e1:8a:26:f0:33:9b:70";
    let receiver = lab_nic(queues)?.to_description();
    let queue_cpu = match cpus {
        SenderCpus::PerQueue => receiver.queue_cpu.clone(),
        SenderCpus::Rps => {
            let cores = rps_cores();
            Some((0..queues).map(|q| rps_cpu(q, cores)).collect())
        }
    };
    Ok(RssModel::from_description(&RssDescription {
        key: SENDER_KEY.into(),
        queue_cpu,
        ..receiver
    })?)
}

/// Which CPU the sender's description says each of its queues is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SenderCpus {
    /// Each queue its own CPU, as on the receiver: the lab has more
    /// queues than this machine has cores, and spreading flows over queues
    /// is what is judged.
    #[default]
    PerQueue,
    /// Each queue on the real CPU per-queue RPS processes it on
    /// ([`rps_cpu`]): for `--local-placement reader`, whose rows must name
    /// the CPUs the readers are pinned to.
    Rps,
}

/// The CPU that processes what arrives on the lab veth's queue `queue`
/// with `set_rps`'s maps (`rx-i` on CPU `i mod cores`). Not `rx-queue`'s
/// own: veth leaves the peer's transmit queue `q` in the packet's
/// `queue_mapping`, which RPS (`get_rps_cpu`) reads as the recorded receive
/// queue `q − 1`, and as none recorded for 0. So queue `q ≥ 1` is processed
/// where `rx-(q−1)` says, queue 0 where `rx-0` does, as `SO_INCOMING_CPU`
/// shows on 6.18 (a flow on queue 10 is processed on CPU 1 of 2).
pub fn rps_cpu(queue: u32, cores: u32) -> u32 {
    queue.saturating_sub(1) % cores.max(1)
}

/// How many CPUs per-queue RPS spreads the lab's queues over: those this
/// process may run on (at most 64, one mask word).
pub fn rps_cores() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores).unwrap_or(64).clamp(1, 64)
}

/// Who watches where flows land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// This process attaches the observer (the experiment).
    Here,
    /// The receiver agent does (it holds the interface's XDP hook).
    Agent,
}

/// Which observer the lab attaches itself with [`Watch::Here`]
/// (`--observer`): a hook family, or none, to measure what it costs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LabObserver {
    /// The receiver's default: tc ingress on the lab's veth (the socket
    /// hook cannot tell queue 0 there).
    #[default]
    Auto,
    /// tc ingress (tcx, then a clsact filter): runs on every packet.
    Tc,
    /// XDP (driver, then generic): runs on every packet, before GRO.
    Xdp,
    /// `sock_ops` on the cgroup2 root: once per connection, never per
    /// packet (on a veth it reads queue 0 as the listener's last queue).
    Sock,
    /// No observer: the flows' queues are unknown.
    Off,
}

impl LabObserver {
    /// The hooks to try, or `None` for no observer.
    pub fn hooks(self) -> Option<HookChoice> {
        match self {
            Self::Auto => Some(HookChoice::Auto),
            Self::Tc => Some(HookChoice::Tc),
            Self::Xdp => Some(HookChoice::Xdp),
            Self::Sock => Some(HookChoice::Sock),
            Self::Off => None,
        }
    }
}

/// How to build a [`LabNet`] beyond its queue count and watcher.
#[derive(Clone, Debug)]
pub struct LabNetConfig {
    pub queues: u32,
    pub watch: Watch,
    /// Third octet of the lab's `10.199.<subnet>.0/24`, or `None` for a
    /// leased one (tests running beside a lab).
    pub subnet: Option<u8>,
    /// Each receive queue's capacity (`--queue-rate`), or none.
    pub queue_rate: Option<Rate>,
    /// The observer attached with [`Watch::Here`].
    pub observer: LabObserver,
    /// Which way the data flows: with pull and both the sender's own NIC
    /// ([`lab_sender_nic`]) is emulated on the receiver's end.
    pub direction: Direction,
    /// The CPUs the sender NIC's description gives its queues.
    pub sender_cpus: SenderCpus,
}

impl LabNetConfig {
    /// The lab's own subnet, no capacity.
    pub fn new(queues: u32, watch: Watch) -> Self {
        Self {
            queues,
            watch,
            subnet: Some(LAB_SUBNET),
            queue_rate: None,
            observer: LabObserver::Auto,
            direction: Direction::Push,
            sender_cpus: SenderCpus::PerQueue,
        }
    }
}

/// The sender's end of a lab with a sender NIC: its emulator on the
/// receiver's veth, and the observer on the sender's veth (tc ingress:
/// each flow's queue as the veth carries it).
struct SenderEnd {
    observer: Observer,
    _emulator: Emulator,
    model: RssModel,
}

/// Field order is drop order: the programs and qdiscs come off before the
/// namespaces go.
pub struct LabNet {
    observer: Option<Observer>,
    sender_end: Option<SenderEnd>,
    direction: Direction,
    _capacity: Vec<QueueCapacity>,
    _emulator: Emulator,
    pub model: RssModel,
    pub hosts: TwoHosts,
}

impl LabNet {
    /// The lab's network on its own subnet, without queue capacity.
    pub fn new(queues: u32, watch: Watch) -> anyhow::Result<Self> {
        Self::with_config(LabNetConfig::new(queues, watch))
    }

    pub fn with_config(config: LabNetConfig) -> anyhow::Result<Self> {
        let LabNetConfig {
            queues,
            watch,
            subnet,
            queue_rate,
            observer,
            direction,
            sender_cpus,
        } = config;
        let model = lab_nic(queues)?;
        let hosts = TwoHosts::new(VethConfig {
            tx_queues: queues,
            rx_queues: queues,
            subnet,
        })
        .context("creating the lab's namespaces and veth")?;
        let emulator = hosts
            .sender
            .run(|| Emulator::attach(&hosts.sender_end.ifname, &model, queues))?
            .context("attaching the RSS-NIC emulator")?;
        // Each receive queue the data reaches gets the capacity, on the
        // other end's egress (where its emulator chose the queue).
        let mut capacity = Vec::new();
        if let Some(rate) = queue_rate {
            let ends = [
                (
                    direction.reaches_receiver(),
                    &hosts.sender,
                    &hosts.sender_end,
                ),
                (
                    direction.reaches_sender(),
                    &hosts.receiver,
                    &hosts.receiver_end,
                ),
            ];
            for (_, ns, end) in ends.into_iter().filter(|(data, _, _)| *data) {
                capacity.push(
                    QueueCapacity::install(ns.name(), &end.ifname, queues, rate)
                        .context("giving each receive queue its capacity")?,
                );
            }
        }
        set_rps(&hosts.receiver, &hosts.receiver_end.ifname, queues)?;
        let sender_end = match direction.reaches_sender() {
            true => Some(SenderEnd::attach(
                &hosts,
                lab_sender_nic_on(queues, sender_cpus)?,
                queues,
            )?),
            false => None,
        };
        let observer = match (watch, observer.hooks()) {
            (Watch::Here, Some(hooks)) => Some(
                hosts
                    .receiver
                    .run(|| Observer::attach(&hosts.receiver_end.ifname, hooks))?
                    .context("attaching the receive observer")?,
            ),
            (Watch::Here, None) | (Watch::Agent, _) => None,
        };
        tracing::info!(queues, "lab network up");
        Ok(Self {
            observer,
            sender_end,
            direction,
            _capacity: capacity,
            _emulator: emulator,
            model,
            hosts,
        })
    }

    pub fn receiver_ip(&self) -> IpAddr {
        self.hosts.receiver_end.ip(false)
    }

    /// The hook this process's observer runs on (`None`: the receiver
    /// agent's observer, or none at all).
    pub fn observer_hook(&self) -> Option<Hook> {
        self.observer.as_ref().map(Observer::hook)
    }

    /// Which way the lab's data flows.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The sender's own NIC (`None` without one).
    pub fn sender_model(&self) -> Option<&RssModel> {
        self.sender_end.as_ref().map(|end| &end.model)
    }

    /// The connections to the receiver's `port` as the sender's NIC saw
    /// their packets arrive (source: the receiver).
    pub fn flows_back_from(&self, port: u16) -> anyhow::Result<Vec<FlowRecord>> {
        let end = self
            .sender_end
            .as_ref()
            .context("this lab has no sender NIC (--direction pull or both)")?;
        let flows = end.observer.flows()?;
        Ok(flows.into_iter().filter(|f| f.src.port() == port).collect())
    }

    /// Flows this process's observer saw toward `port` on the receiver.
    pub fn flows_to(&self, port: u16) -> anyhow::Result<Vec<FlowRecord>> {
        let observer = self.observer.as_ref().context(
            "this lab attached no observer (the receiver agent holds it: ask it with srap \
             status; or --observer off)",
        )?;
        let flows = observer.flows()?;
        Ok(flows.into_iter().filter(|f| f.dst.port() == port).collect())
    }
}

impl SenderEnd {
    fn attach(hosts: &TwoHosts, model: RssModel, queues: u32) -> anyhow::Result<Self> {
        let emulator = hosts
            .receiver
            .run(|| Emulator::attach(&hosts.receiver_end.ifname, &model, queues))?
            .context("attaching the sender NIC's emulator to the receiver's veth")?;
        set_rps(&hosts.sender, &hosts.sender_end.ifname, queues)?;
        let observer = hosts
            .sender
            .run(|| Observer::attach(&hosts.sender_end.ifname, HookChoice::Tc))?
            .context("attaching the observer to the sender's veth")?;
        Ok(Self {
            observer,
            _emulator: emulator,
            model,
        })
    }
}

/// Each queue's packets are processed on one CPU (RPS, `rx-i` on CPU
/// `i mod cores`: [`rps_cpu`] says which queue that is), as IRQ affinity
/// would place them on a real NIC's host.
pub(crate) fn set_rps(ns: &NetNs, ifname: &str, queues: u32) -> anyhow::Result<()> {
    let cores = rps_cores();
    let script: String = (0..queues)
        .map(|q| {
            format!(
                "echo {:x} > /sys/class/net/{}/queues/rx-{q}/rps_cpus\n",
                1u64 << (q % cores),
                ifname
            )
        })
        .collect();
    ns.exec("sh", ["-c", &script])
        .context("setting per-queue RPS CPUs")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rps_processes_a_veth_queue_where_the_queue_before_it_is_mapped() {
        // rx-i on CPU i mod 2: queue 0 unrecorded (rx-0), queue q ≥ 1 as
        // rx-(q−1).
        let cpus: Vec<u32> = (0..6).map(|q| rps_cpu(q, 2)).collect();
        assert_eq!(cpus, [0, 0, 1, 0, 1, 0]);
        assert_eq!(rps_cpu(5, 1), 0);
        assert_eq!(rps_cpu(3, 0), 0, "no cores reads as one");
    }

    #[test]
    fn the_sender_nic_names_real_cpus_only_when_asked() {
        let per_queue = lab_sender_nic(32).unwrap();
        assert_eq!(per_queue.queue_cpu(), (0..32).collect::<Vec<_>>());
        let rps = lab_sender_nic_on(32, SenderCpus::Rps).unwrap();
        let cores = rps_cores();
        let expected: Vec<u32> = (0..32).map(|q| rps_cpu(q, cores)).collect();
        assert_eq!(rps.queue_cpu(), expected);
        // Same key and table: only the CPUs differ.
        let (a, b) = (per_queue.to_description(), rps.to_description());
        assert_eq!((a.key, a.indir), (b.key, b.indir));
    }
}
