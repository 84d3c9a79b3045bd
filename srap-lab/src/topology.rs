//! The lab's two hosts: sender and receiver namespaces joined by a
//! multi-queue veth, the RSS-NIC emulator on the sender's end (so the
//! receiver's RX queue follows Toeplitz exactly as a NIC's would), per-queue
//! RPS CPUs, and the receive verifier on the receiver's end.

use std::net::IpAddr;

use anyhow::Context as _;
use srap_common::rss::{RssDescription, RssModel, embedded_default};

use super::{
    TwoHosts, VethConfig,
    capacity::{QueueCapacity, Rate},
};
use srap_daemon::verifier::{FlowRecord, HookChoice, Verifier};

use crate::emulator::Emulator;

/// `10.199.250.0/24`: the lab's subnet, inside its own namespaces only.
const LAB_SUBNET: u8 = 250;

/// The lab's receiver NIC with `queues` queues: the embedded 32-queue
/// description when it fits, else the same key over a round-robin table
/// (`ethtool -X DEV equal N`). Each queue counts as its own CPU: the lab has
/// more queues than this machine has cores.
pub fn lab_nic(queues: u32) -> anyhow::Result<RssModel> {
    anyhow::ensure!((1..=256).contains(&queues), "--queues must be 1 to 256");
    let default = embedded_default();
    let desc = if default.queue_cpu.as_ref().map(Vec::len) == Some(queues as usize) {
        default
    } else {
        let len = (queues as usize).next_power_of_two().max(128) as u32;
        RssDescription {
            indir: (0..len).map(|i| i % queues).collect(),
            queue_cpu: Some((0..queues).collect()),
            ..default
        }
    };
    Ok(RssModel::from_description(&desc)?)
}

/// Who watches where flows land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// This process attaches the verifier (the experiment).
    Here,
    /// The receiver agent does (it holds the interface's XDP hook).
    Agent,
}

/// How to build a [`LabNet`] beyond its queue count and watcher.
#[derive(Clone, Copy, Debug)]
pub struct LabNetConfig {
    pub queues: u32,
    pub watch: Watch,
    /// Third octet of the lab's `10.199.<subnet>.0/24` (tests running beside
    /// a lab pick their own).
    pub subnet: u8,
    /// Each receive queue's capacity (`--queue-rate`), or none.
    pub queue_rate: Option<Rate>,
}

impl LabNetConfig {
    /// The lab's own subnet, no capacity.
    pub fn new(queues: u32, watch: Watch) -> Self {
        Self {
            queues,
            watch,
            subnet: LAB_SUBNET,
            queue_rate: None,
        }
    }
}

/// Field order is drop order: the programs and qdiscs come off before the
/// namespaces go.
pub struct LabNet {
    verifier: Option<Verifier>,
    _capacity: Option<QueueCapacity>,
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
        let capacity = queue_rate
            .map(|rate| {
                QueueCapacity::install(hosts.sender.name(), &hosts.sender_end.ifname, queues, rate)
            })
            .transpose()
            .context("giving each receive queue its capacity")?;
        set_rps(&hosts, queues)?;
        let verifier = match watch {
            Watch::Here => Some(
                hosts
                    .receiver
                    .run(|| Verifier::attach(&hosts.receiver_end.ifname, HookChoice::Auto))?
                    .context("attaching the receive verifier")?,
            ),
            Watch::Agent => None,
        };
        tracing::info!(queues, "lab network up");
        Ok(Self {
            verifier,
            _capacity: capacity,
            _emulator: emulator,
            model,
            hosts,
        })
    }

    pub fn receiver_ip(&self) -> IpAddr {
        self.hosts.receiver_end.ip(false)
    }

    /// Flows this process's verifier saw toward `port` on the receiver.
    pub fn flows_to(&self, port: u16) -> anyhow::Result<Vec<FlowRecord>> {
        let verifier = self
            .verifier
            .as_ref()
            .context("the receiver agent holds the verifier: ask it (srap status)")?;
        let flows = verifier.flows()?;
        Ok(flows.into_iter().filter(|f| f.dst.port() == port).collect())
    }
}

/// Queue `q`'s packets are processed on CPU `q mod cores` (RPS), as IRQ
/// affinity would place them on a real receiver.
fn set_rps(hosts: &TwoHosts, queues: u32) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let script: String = (0..queues)
        .map(|q| {
            format!(
                "echo {:x} > /sys/class/net/{}/queues/rx-{q}/rps_cpus\n",
                1u64 << (q % cores.min(64)),
                hosts.receiver_end.ifname
            )
        })
        .collect();
    hosts
        .receiver
        .exec("sh", ["-c", &script])
        .context("setting per-queue RPS CPUs")?;
    Ok(())
}
