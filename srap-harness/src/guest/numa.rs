//! A guest with two NUMA nodes and a virtio-net NIC with RSS on each
//! ([`NumaGuest`]), as a dual-socket host with a NIC per socket: the
//! layout of the design notes' "Several NICs" (q35, a socket, a memory
//! backend and a PCIe expander per node, the NIC behind the expander's
//! root port), each NIC on its own tap and subnet of one test namespace
//! ([`GuestNet::per_node`]).
//!
//! The layout says nothing of who serves or who runs an agent: a test
//! downloading into the guest and one sending to it both start from here.
//! What it does prepare is what every such test needs to judge by the
//! guest's own counters:
//! * each NIC found by its MAC (names follow PCI order, not the node),
//!   with the node the guest reads for it, walked up from `device/` (on
//!   virtio-net the node sits on the PCI function above the virtio
//!   device);
//! * each receive queue's interrupt pinned to a CPU of the NIC's node, no
//!   RPS, transmit queues following the receive queues (`xps_rxqs`: without
//!   it streaming into QEMU's RSS stalls), every queue warmed once so its
//!   effective affinity is the pinned CPU;
//! * a route from the guest to the namespace's [`GuestNet::routed_ip`]
//!   through each NIC, NIC 0's preferred: the kernel's own choice for a
//!   flow that does not pick its source is NIC 0.
//!
//! QEMU is killed by PID when the [`Guest`] drops, before the namespace
//! (and its taps) go with the [`GuestNet`].

use std::{fmt::Write as _, net::Ipv4Addr, process::Stdio};

use anyhow::{Context as _, bail};

use super::{
    image::GuestImage,
    qemu::{Guest, GuestNet, GuestShape},
    truth,
};
use crate::{interrupt::interrupted, programs::iperf3_server_with, readers::parse_cpus};

/// NUMA nodes, each with a NIC.
pub const NODES: u32 = 2;
/// How many vCPUs each node has and how many receive queues each NIC:
/// the guest's size, chosen by what a test must tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumaShape {
    /// vCPUs per node (`-smp`, a socket per node).
    pub cpus_per_node: u32,
    /// Receive queues per NIC (QEMU's `vectors`, two per queue pair and
    /// two more).
    pub queues: u32,
}

impl NumaShape {
    /// 2 vCPUs per node and 4 queues per NIC, two on each of its node's
    /// CPUs: enough for a reader on every CPU of both nodes, the reader
    /// rule's test, at the smallest guest that has it.
    pub const READERS: Self = Self {
        cpus_per_node: 2,
        queues: 4,
    };

    /// 8 vCPUs per node and 8 queues per NIC, a queue on each of its
    /// node's CPUs: 16 streams into a two-NIC receiver can each sit on a
    /// (NIC, CPU) pair of their own, as the receiver-NIC tests' and lab's
    /// 16 flows do.
    pub const RECEIVER: Self = Self {
        cpus_per_node: 8,
        queues: 8,
    };
}

/// The metric of NIC `i`'s route to [`GuestNet::routed_ip`]: `i + 1`
/// hundreds, so NIC 0's is the route.
const ROUTE_METRIC: u32 = 100;
/// The port of the iperf3 server that warms the queues.
const WARM_PORT: u16 = 5310;
/// Warming rounds before a queue whose interrupt never moved fails.
const WARM_ROUNDS: usize = 6;

/// One NIC as the guest shows it.
#[derive(Debug, Clone)]
pub struct NodeNic {
    /// The node QEMU put its expander on.
    pub node: u32,
    /// Its name in the guest, found by its MAC.
    pub name: String,
    /// The virtio device behind it (`virtio1`), which names its IRQs.
    pub virtio: String,
    /// `numa_node` as the guest reads it on the first ancestor of
    /// `device/` that has one: -1 unknown, `None` when none has it.
    pub numa_node: Option<i32>,
    /// Its address in the guest, and the namespace's on its tap.
    pub guest_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    /// Receive queue `q`'s IRQ.
    pub irqs: Vec<u32>,
    /// Receive queue `q`'s pinned CPU, one of its node's.
    pub queue_cpus: Vec<u32>,
}

/// What the guest counted, per NIC and in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Per NIC, in node order.
    pub nics: Vec<NicCounters>,
    /// Packets RPS/RFS handed to another CPU, all CPUs
    /// ([`truth::parse_received_rps`]).
    pub received_rps: u64,
}

/// One NIC's own counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicCounters {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// `rx_queue_N_packets` of `ethtool -S`.
    pub rx_queue_packets: Vec<u64>,
}

impl Counters {
    /// What rose from `before` to `self`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            nics: self
                .nics
                .iter()
                .zip(&before.nics)
                .map(|(now, then)| NicCounters {
                    rx_bytes: now.rx_bytes.saturating_sub(then.rx_bytes),
                    tx_bytes: now.tx_bytes.saturating_sub(then.tx_bytes),
                    rx_queue_packets: truth::delta(&then.rx_queue_packets, &now.rx_queue_packets),
                })
                .collect(),
            received_rps: self.received_rps.saturating_sub(before.received_rps),
        }
    }
}

/// The booted guest with its NICs prepared ([`NumaGuest::boot`]).
pub struct NumaGuest {
    pub guest: Guest,
    /// In node order (NIC `i` on node `i`).
    pub nics: Vec<NodeNic>,
    /// Each node's CPUs as the guest lists them (`node/nodeN/cpulist`).
    pub node_cpus: Vec<Vec<u32>>,
    /// The size it was booted with.
    pub shape: NumaShape,
}

impl NumaGuest {
    /// Boots `image` on `net` (a [`GuestNet::per_node`] of [`NODES`]
    /// links) with [`NODES`] nodes of `shape`'s vCPUs and a NIC of its
    /// queues each, then prepares the NICs (see the module's page) and
    /// warms every queue.
    pub fn boot(net: &GuestNet, image: &GuestImage, shape: NumaShape) -> anyhow::Result<Self> {
        let qemu_shape = GuestShape::numa(NODES, shape.cpus_per_node, shape.queues)?;
        let mut guest = Guest::boot(net, image, qemu_shape)?;
        let node_cpus = (0..NODES)
            .map(|node| {
                let list =
                    guest.read(&format!("cat /sys/devices/system/node/node{node}/cpulist"))?;
                parse_cpus(list.trim()).with_context(|| format!("node {node}'s cpulist"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let macs =
            guest.read("for d in /sys/class/net/*; do echo ${d##*/} $(cat $d/address); done")?;
        let mut nics = Vec::new();
        for link in &net.node_links {
            let name = name_of_mac(&macs, &link.mac).with_context(|| {
                format!(
                    "no NIC in the guest has node {}'s MAC {}: {macs}",
                    link.node, link.mac
                )
            })?;
            let cpus = node_cpus
                .get(link.node as usize)
                .filter(|cpus| !cpus.is_empty())
                .with_context(|| format!("node {} has no CPUs in the guest", link.node))?;
            nics.push(NodeNic {
                node: link.node,
                virtio: virtio_of(&mut guest, &name)?,
                numa_node: numa_node_of(&mut guest, &name)?,
                guest_ip: link.guest_ip,
                host_ip: link.host_ip,
                irqs: Vec::new(),
                queue_cpus: (0..shape.queues as usize)
                    .map(|q| cpus[q % cpus.len()])
                    .collect(),
                name,
            });
        }
        let mut numa = Self {
            guest,
            nics,
            node_cpus,
            shape,
        };
        numa.configure(net)?;
        numa.warm(net)?;
        Ok(numa)
    }

    /// The guest of reading threads ([`NumaShape::READERS`]) booted on a
    /// namespace made for it with a tap per node, each NIC checked to
    /// read its node and `srap-readers` to be there: where
    /// [`super::numa_lab`] and [`super::follow_lab`] start.
    pub fn boot_readers(image: &GuestImage) -> anyhow::Result<(GuestNet, Self)> {
        let net = GuestNet::per_node(NODES).context("a namespace with a tap per node")?;
        let numa =
            Self::boot(&net, image, NumaShape::READERS).context("the two-node guest boots")?;
        numa.check_nodes()
            .map_err(|why| anyhow::anyhow!("{why:#}\n{}", numa.render()))?;
        let mut numa = numa;
        numa.guest.read("test -x /bin/srap-readers").context(
            "the guest has no srap-readers: build it beside srap-agent (`cargo build --bins`)",
        )?;
        Ok((net, numa))
    }

    /// Fails, saying what the guest read, unless NIC `i` reads node `i`:
    /// a layout whose NICs read no node (-1, an expander missing) would
    /// judge nothing of NUMA placement.
    pub fn check_nodes(&self) -> anyhow::Result<()> {
        for nic in &self.nics {
            if nic.numa_node != Some(nic.node as i32) {
                bail!(
                    "the guest reads numa_node {:?} for {} (NIC {}, MAC-matched, on node {}'s PCIe \
                     expander), walked up from /sys/class/net/{}/device: QEMU's _PXM did not reach \
                     the guest",
                    nic.numa_node,
                    nic.name,
                    nic.node,
                    nic.node,
                    nic.name
                );
            }
        }
        Ok(())
    }

    /// The NIC on `cpu`'s node.
    pub fn nic_of_cpu(&self, cpu: u32) -> Option<&NodeNic> {
        let node = self.node_cpus.iter().position(|cpus| cpus.contains(&cpu))?;
        self.nics.get(node)
    }

    /// The NIC whose guest address is `ip`.
    pub fn nic_of_ip(&self, ip: std::net::IpAddr) -> Option<&NodeNic> {
        self.nics
            .iter()
            .find(|nic| std::net::IpAddr::V4(nic.guest_ip) == ip)
    }

    /// Every CPU of the guest, in order.
    pub fn cpus(&self) -> Vec<u32> {
        let mut cpus: Vec<u32> = self.node_cpus.iter().flatten().copied().collect();
        cpus.sort_unstable();
        cpus
    }

    /// The NICs' names, in node order.
    pub fn names(&self) -> Vec<&str> {
        self.nics.iter().map(|nic| nic.name.as_str()).collect()
    }

    /// Each NIC's `rx_bytes`, `tx_bytes` and per-queue packets, and the
    /// guest's `received_rps`, now.
    pub fn counters(&mut self) -> anyhow::Result<Counters> {
        let mut nics = Vec::new();
        for nic in &self.nics {
            let name = &nic.name;
            let bytes = self.guest.read(&format!(
                "cat /sys/class/net/{name}/statistics/rx_bytes /sys/class/net/{name}/statistics/tx_bytes"
            ))?;
            let mut numbers = bytes.split_whitespace().map(str::parse::<u64>);
            let (Some(Ok(rx_bytes)), Some(Ok(tx_bytes))) = (numbers.next(), numbers.next()) else {
                bail!("{name}'s rx_bytes and tx_bytes: {bytes:?}");
            };
            let stats = self.guest.read(&format!("ethtool -S {name}"))?;
            // 6.12's virtio-net counts its queues in netdev netlink only:
            // there, the queue's interrupts stand for its packets.
            let rx_queue_packets = match truth::parse_rx_queue_packets(&stats) {
                Ok(packets) => packets,
                Err(_) => truth::parse_input_interrupts_of(
                    &self.guest.read("cat /proc/interrupts")?,
                    Some(&nic.virtio),
                )
                .with_context(|| format!("{name}'s ethtool -S and {}'s interrupts", nic.virtio))?,
            };
            nics.push(NicCounters {
                rx_bytes,
                tx_bytes,
                rx_queue_packets,
            });
        }
        let softnet = self.guest.read("cat /proc/net/softnet_stat")?;
        Ok(Counters {
            nics,
            received_rps: truth::parse_received_rps(&softnet)?,
        })
    }

    /// The layout as one line per NIC, for reports.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for nic in &self.nics {
            let _ = writeln!(
                out,
                "NIC {} {} ({}): numa_node {}, {} (namespace {}), queue → CPU {:?}",
                nic.node,
                nic.name,
                nic.virtio,
                nic.numa_node.map_or("none".into(), |n| n.to_string()),
                nic.guest_ip,
                nic.host_ip,
                nic.queue_cpus
            );
        }
        out
    }

    /// Addresses, RSS on, routes to the routed address, then per queue:
    /// its IRQ pinned to its CPU, no RPS, `xps_rxqs` to itself.
    fn configure(&mut self, net: &GuestNet) -> anyhow::Result<()> {
        let interrupts = self.guest.read("cat /proc/interrupts")?;
        let queues = self.shape.queues;
        let mut script = String::new();
        for (i, nic) in (0u32..).zip(&mut self.nics) {
            let name = &nic.name;
            nic.irqs = input_irqs(&interrupts, &nic.virtio);
            if nic.irqs.len() != queues as usize {
                bail!(
                    "{name} ({}) has {} input IRQs in /proc/interrupts, not {queues}",
                    nic.virtio,
                    nic.irqs.len()
                );
            }
            let _ = write!(
                script,
                "ip link set {name} up && ip addr add {}/24 dev {name} && \
                 ethtool -X {name} equal {queues} && ",
                nic.guest_ip
            );
            if let Some(routed) = net.routed_ip {
                let _ = write!(
                    script,
                    "ip route add {routed}/32 via {} dev {name} metric {} && ",
                    nic.host_ip,
                    ROUTE_METRIC * (i + 1)
                );
            }
            for (q, (irq, cpu)) in nic.irqs.iter().zip(&nic.queue_cpus).enumerate() {
                let _ = write!(
                    script,
                    "echo {cpu} > /proc/irq/{irq}/smp_affinity_list && \
                     echo 0 > /sys/class/net/{name}/queues/rx-{q}/rps_cpus && \
                     echo {mask:x} > /sys/class/net/{name}/queues/tx-{q}/xps_rxqs && ",
                    mask = 1u64 << q
                );
            }
        }
        script.push_str("sysctl -w net.core.rps_sock_flow_entries=0 > /dev/null");
        self.guest.run(&script).map(drop)
    }

    /// Downloads many flows through each NIC until every queue's
    /// effective affinity is its pinned CPU: before a queue's first
    /// interrupt it names the boot-time CPU. Each round pins a queue still
    /// off its CPU again first: a move the kernel dropped (it applies one
    /// at the queue's next interrupt) is asked for anew, not waited on.
    fn warm(&mut self, net: &GuestNet) -> anyhow::Result<()> {
        for _ in 0..WARM_ROUNDS {
            let cold = self.cold_queues()?;
            if cold.is_empty() {
                return Ok(());
            }
            if interrupted() {
                bail!("interrupted");
            }
            self.pin_again(&cold)?;
            let mut warmed = Vec::new();
            for &(i, _) in &cold {
                if warmed.contains(&i) {
                    continue;
                }
                warmed.push(i);
                let Some(nic) = self.nics.get(i).cloned() else {
                    continue;
                };
                let _server = iperf3_server_with(&net.ns, WARM_PORT, &[], Stdio::null())?;
                self.guest.run(&format!(
                    "iperf3 -c {} -p {WARM_PORT} -R -P {} -t 1 > /dev/null",
                    nic.host_ip,
                    4 * self.shape.queues
                ))?;
            }
        }
        let cold = self.cold_queues()?;
        if cold.is_empty() {
            return Ok(());
        }
        let seen = self.interrupts_of(&cold)?;
        bail!(
            "after {WARM_ROUNDS} warming rounds these (NIC, queue)s' interrupts still run off their \
             pinned CPU: {cold:?}\n{seen}{}",
            self.render()
        )
    }

    /// Every (NIC index, queue) whose effective affinity is not its
    /// pinned CPU.
    fn cold_queues(&mut self) -> anyhow::Result<Vec<(usize, u32)>> {
        let mut cold = Vec::new();
        for (i, nic) in self.nics.clone().iter().enumerate() {
            for (q, (irq, cpu)) in (0u32..).zip(nic.irqs.iter().zip(&nic.queue_cpus)) {
                let text = self
                    .guest
                    .read(&format!("cat /proc/irq/{irq}/effective_affinity_list"))?;
                if text.trim().parse::<u32>().ok() != Some(*cpu) {
                    cold.push((i, q));
                }
            }
        }
        Ok(cold)
    }

    /// Pins each of `queues`' IRQ to its CPU again.
    fn pin_again(&mut self, queues: &[(usize, u32)]) -> anyhow::Result<()> {
        let script = self
            .irqs_of(queues)
            .map(|(_, irq, cpu)| format!("echo {cpu} > /proc/irq/{irq}/smp_affinity_list"))
            .collect::<Vec<_>>()
            .join(" && ");
        if script.is_empty() {
            return Ok(());
        }
        self.guest.run(&script).map(drop)
    }

    /// For a failure's message: each of `queues`' IRQ, its pinned CPU, its
    /// effective affinity and its `/proc/interrupts` line (which CPUs took
    /// its interrupts).
    fn interrupts_of(&mut self, queues: &[(usize, u32)]) -> anyhow::Result<String> {
        let interrupts = self.guest.read("cat /proc/interrupts")?;
        let mut out = String::new();
        for ((i, q), irq, cpu) in self.irqs_of(queues).collect::<Vec<_>>() {
            let effective = self
                .guest
                .read(&format!("cat /proc/irq/{irq}/effective_affinity_list"))?;
            let line = interrupts
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{irq}:")))
                .unwrap_or("(not in /proc/interrupts)");
            let _ = writeln!(
                out,
                "  NIC {i} queue {q}: IRQ {irq} pinned to CPU {cpu}, effective {}: {}",
                effective.trim(),
                line.trim()
            );
        }
        Ok(out)
    }

    /// (NIC index and queue, IRQ, pinned CPU) of each of `queues`.
    fn irqs_of<'a>(
        &'a self,
        queues: &'a [(usize, u32)],
    ) -> impl Iterator<Item = ((usize, u32), u32, u32)> + 'a {
        queues.iter().filter_map(|&(i, q)| {
            let nic = self.nics.get(i)?;
            let irq = *nic.irqs.get(q as usize)?;
            let cpu = *nic.queue_cpus.get(q as usize)?;
            Some(((i, q), irq, cpu))
        })
    }
}

/// The interface whose MAC is `mac` in `name MAC` lines.
fn name_of_mac(lines: &str, mac: &str) -> Option<String> {
    lines.lines().find_map(|line| {
        let (name, address) = line.trim().split_once(' ')?;
        address
            .trim()
            .eq_ignore_ascii_case(mac)
            .then(|| name.to_owned())
    })
}

/// The virtio device under `iface` (`virtio1`): the last part of its
/// `device` link.
fn virtio_of(guest: &mut Guest, iface: &str) -> anyhow::Result<String> {
    let path = guest.read(&format!("readlink -f /sys/class/net/{iface}/device"))?;
    let name = path.trim().rsplit('/').next().unwrap_or_default();
    if !name.starts_with("virtio") {
        bail!("{iface}'s device is {path:?}, not a virtio device");
    }
    Ok(name.to_owned())
}

/// `numa_node` of the first ancestor of `iface`'s `device` that has one
/// (on virtio-net the PCI function above the virtio device).
fn numa_node_of(guest: &mut Guest, iface: &str) -> anyhow::Result<Option<i32>> {
    let text = guest.read(&format!(
        "d=$(readlink -f /sys/class/net/{iface}/device); \
         while [ -n \"$d\" ] && [ ! -e \"$d/numa_node\" ]; do d=${{d%/*}}; done; \
         if [ -n \"$d\" ]; then cat \"$d/numa_node\"; else echo none; fi"
    ))?;
    Ok(text.trim().parse().ok())
}

/// IRQ of each `DEV-input.N` vector in `/proc/interrupts`, by N.
fn input_irqs(interrupts: &str, virtio: &str) -> Vec<u32> {
    let prefix = format!("{virtio}-input.");
    let mut found: Vec<(u32, u32)> = interrupts
        .lines()
        .filter_map(|line| {
            let queue = line
                .split_whitespace()
                .last()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            let irq = line.split(':').next()?.trim().parse().ok()?;
            Some((queue, irq))
        })
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, irq)| irq).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nics_are_found_by_mac_and_irqs_by_their_virtio_device() {
        let macs = "eth0 52:54:00:5a:d0:01\neth1 52:54:00:5a:d0:00\nlo 00:00:00:00:00:00\n";
        assert_eq!(
            name_of_mac(macs, "52:54:00:5A:D0:00").as_deref(),
            Some("eth1")
        );
        assert_eq!(name_of_mac(macs, "52:54:00:5a:d0:02"), None);
        let interrupts = "           CPU0       CPU1\n 24:  0  0  PCI-MSIX-0000:21:00.0   1-edge  virtio0-input.1\n 25:  0  0  PCI-MSIX-0000:21:00.0   0-edge  virtio0-input.0\n 26:  0  0  PCI-MSIX-0000:41:00.0   1-edge  virtio1-input.0\n 27:  0  0  PCI-MSIX-0000:41:00.0   2-edge  virtio1-output.0\n";
        assert_eq!(input_irqs(interrupts, "virtio0"), [25, 24]);
        assert_eq!(input_irqs(interrupts, "virtio1"), [26]);
    }

    #[test]
    fn counters_rise_per_nic() {
        let before = Counters {
            nics: vec![NicCounters {
                rx_bytes: 10,
                tx_bytes: 5,
                rx_queue_packets: vec![1, 2],
            }],
            received_rps: 3,
        };
        let after = Counters {
            nics: vec![NicCounters {
                rx_bytes: 110,
                tx_bytes: 6,
                rx_queue_packets: vec![4, 2],
            }],
            received_rps: 3,
        };
        let rise = after.since(&before);
        assert_eq!(rise.nics[0].rx_bytes, 100);
        assert_eq!(rise.nics[0].tx_bytes, 1);
        assert_eq!(rise.nics[0].rx_queue_packets, [3, 0]);
        assert_eq!(rise.received_rps, 0);
    }
}
