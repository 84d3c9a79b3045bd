//! Rounds of one reading thread per vCPU in the two-node guest ([`NumaLab`]
//! over [`NumaGuest`]): each downloading or uploading with the namespace's
//! data source, with the kernel's choice of NIC or under `srap exec` with
//! the guest's sender agent choosing it by the connecting CPU's node
//! (`--local-nics numa`). What the CI test
//! (`srap-tests/tests/numa_nics.rs`) judges and what the lab's
//! `--experiment numa-nics` measures are the same [`Round`]s, so both read
//! one record of a flow and one set of judges ([`judge_kernel`],
//! [`judge_srap`], [`judge_counters`]).
//!
//! Nothing in a round is SRAP's own word: the NIC a flow used is the one
//! whose address the server accepted it from, the NICs' own `rx_bytes` and
//! `tx_bytes` carry its bytes, its CPU is the socket's `SO_INCOMING_CPU`,
//! and the queue is what the NIC's key and table give the accepted tuple.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};
use srap_common::rss::{FlowTuple, RssModel};
use srap_status::SenderStatus;

use super::{
    image::GuestImage,
    numa::{Counters, NumaGuest},
    qemu::GuestNet,
    truth,
};
use crate::{
    agent::LAB_PORT_RANGE,
    readers::{self, DataSource, FlowReport, Transfer},
};

/// What the data source sends, in bits a second, shared by the flows:
/// under each tap's pace toward the guest, so no queue builds at the wire.
const SOURCE_RATE: u64 = 240_000_000;
/// The steered cgroup in the guest, and the guest sender agent's files.
const GUEST_CGROUP: &str = "srap";
const SENDER_CONTROL: &str = "/tmp/sender.sock";
const SENDER_LOG: &str = "/tmp/sender.log";
/// A NIC's counter may exceed its flows' payload (headers, ACKs, ARP) but
/// must hold at least this share of it.
const PAYLOAD_SHARE: f64 = 0.9;
/// A NIC that carried no flow may count this much (ARP, stray frames).
pub const IDLE_BYTES: u64 = 64 * 1024;

/// Whose choice of NIC (and port) a round runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Choice {
    /// No SRAP: the route's NIC, a kernel port.
    Kernel,
    /// Under `srap exec`, the guest's sender agent with `--local-nics numa
    /// --local-placement reader`.
    Srap,
}

impl Choice {
    pub fn label(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Srap => "SRAP",
        }
    }
}

/// One flow: its thread's report, the NIC whose address the server
/// accepted it from, the NIC of its thread's node, and the queue the NIC's
/// key and table give its tuple with that queue's pinned CPU.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub report: FlowReport,
    /// Index into the guest's NICs; `None`: the server saw no such port.
    pub nic: Option<usize>,
    pub node_nic: usize,
    pub queue: Option<u32>,
    pub queue_cpu: Option<u32>,
    /// Payload bytes the server moved on it.
    pub served: u64,
}

impl Flow {
    /// Through a NIC, and not its reader's node's.
    pub fn through_far_nic(&self) -> bool {
        self.nic.is_some_and(|nic| nic != self.node_nic)
    }
}

/// One round of one thread per vCPU.
#[derive(Debug, Clone)]
pub struct Round {
    pub choice: Choice,
    pub transfer: Transfer,
    pub flows: Vec<Flow>,
    /// What the guest counted over the round.
    pub counters: Counters,
}

impl Round {
    pub fn title(&self) -> String {
        let who = match self.choice {
            Choice::Kernel => "kernel (no SRAP: the route's NIC)",
            Choice::Srap => "SRAP --local-nics numa --local-placement reader",
        };
        let way = match self.transfer {
            Transfer::Download => "downloads",
            Transfer::Upload => "uploads",
        };
        format!("{way}, {who}")
    }

    /// The NIC's counter of this round's direction.
    pub fn nic_bytes(&self, nic: usize) -> u64 {
        self.counters
            .nics
            .get(nic)
            .map_or(0, |c| match self.transfer {
                Transfer::Download => c.rx_bytes,
                Transfer::Upload => c.tx_bytes,
            })
    }

    /// Payload the server moved on flows through `nic`.
    pub fn payload_through(&self, nic: usize) -> u64 {
        self.flows
            .iter()
            .filter(|f| f.nic == Some(nic))
            .map(|f| f.served)
            .sum()
    }

    /// Bytes through the far node's NIC: each NIC's own counter, shared
    /// among its flows by the payload the server moved on each, for the
    /// flows whose reader is on the other node.
    pub fn far_nic_bytes(&self) -> u64 {
        (0..self.counters.nics.len())
            .map(|nic| {
                let payload = self.payload_through(nic);
                let far: u64 = self
                    .flows
                    .iter()
                    .filter(|f| f.nic == Some(nic) && f.through_far_nic())
                    .map(|f| f.served)
                    .sum();
                if payload == 0 {
                    0
                } else {
                    (self.nic_bytes(nic) as f64 * far as f64 / payload as f64) as u64
                }
            })
            .sum()
    }

    /// Every NIC's counter of this round's direction, summed.
    pub fn all_nic_bytes(&self) -> u64 {
        (0..self.counters.nics.len())
            .map(|nic| self.nic_bytes(nic))
            .sum()
    }

    pub fn through_own_node(&self) -> usize {
        self.flows
            .iter()
            .filter(|f| f.nic == Some(f.node_nic))
            .count()
    }

    pub fn on_reader_cpu(&self) -> usize {
        self.flows
            .iter()
            .filter(|f| i64::from(f.report.incoming_cpu) == i64::from(f.report.cpu))
            .count()
    }

    /// The round's NICs and one line per flow.
    pub fn render(&self, numa: &NumaGuest) -> String {
        let counter = match self.transfer {
            Transfer::Download => "rx_bytes",
            Transfer::Upload => "tx_bytes",
        };
        let mut out = format!("{}\n", self.title());
        for (i, nic) in numa.nics.iter().enumerate() {
            let _ = writeln!(
                out,
                "  NIC {i} {} (node {}): {counter} {:.1} MB, its flows' payload {:.1} MB",
                nic.name,
                nic.node,
                self.nic_bytes(i) as f64 / 1e6,
                self.payload_through(i) as f64 / 1e6
            );
        }
        let n = self.flows.len();
        let _ = writeln!(
            out,
            "  through the reader's node's NIC {}/{n}; SO_INCOMING_CPU = reader's CPU {}/{n}; \
             RPS-steered packets {}",
            self.through_own_node(),
            self.on_reader_cpu(),
            self.counters.received_rps
        );
        let _ = writeln!(
            out,
            "  {:>3} {:>3} {:>5} {:>9} {:>9} {:>5} {:>7} {:>8} {:>10}",
            "pos", "cpu", "port", "NIC used", "node NIC", "queue", "IRQ cpu", "incoming", "bytes"
        );
        for f in &self.flows {
            let opt = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
            let name = |i: Option<usize>| {
                i.and_then(|i| numa.nics.get(i))
                    .map_or("-".into(), |nic| nic.name.clone())
            };
            let r = f.report;
            let _ = writeln!(
                out,
                "  {:>3} {:>3} {:>5} {:>9} {:>9} {:>5} {:>7} {:>8} {:>10}",
                r.position,
                r.cpu,
                r.port,
                name(f.nic),
                name(Some(f.node_nic)),
                opt(f.queue),
                opt(f.queue_cpu),
                r.incoming_cpu,
                f.served
            );
        }
        let _ = writeln!(
            out,
            "  per-queue rx packets: {}",
            self.counters
                .nics
                .iter()
                .map(|c| truth::queue_counts(&c.rx_queue_packets))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        out
    }
}

/// The guest with its NICs prepared, the namespace, and each NIC's RSS
/// model as the device really hashes (6.1 reports its key right). The
/// guest goes first on drop (QEMU killed by PID), then the namespace with
/// its taps.
pub struct NumaLab {
    pub numa: NumaGuest,
    models: Vec<RssModel>,
    pub net: GuestNet,
}

impl NumaLab {
    /// Boots `image` on a namespace with a tap per node, checks each NIC
    /// reads its node and that the guest has `srap-readers`, and reads each
    /// NIC's key and table.
    pub fn start(image: &GuestImage) -> anyhow::Result<Self> {
        let (net, mut numa) = NumaGuest::boot_readers(image)?;
        let names: Vec<String> = numa.nics.iter().map(|n| n.name.clone()).collect();
        let models = names
            .iter()
            .map(|name| {
                truth::device_model_of(&mut numa.guest, name)
                    .with_context(|| format!("{name}'s key and table"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { numa, models, net })
    }

    /// The namespace's address every round connects to, through either NIC.
    pub fn server(&self) -> anyhow::Result<IpAddr> {
        self.net
            .routed_ip
            .map(IpAddr::V4)
            .context("the namespace has no routed address")
    }

    /// One thread per vCPU moving data for `seconds` with the server at
    /// `port`, under `srap exec` for [`Choice::Srap`], judged by the
    /// server's accepted tuples, the NICs' counters and the threads'
    /// reports.
    pub fn round(
        &mut self,
        choice: Choice,
        transfer: Transfer,
        port: u16,
        seconds: u64,
    ) -> anyhow::Result<Round> {
        let cpus = self.numa.cpus();
        let server = SocketAddr::new(self.server()?, port);
        let rate = SOURCE_RATE / 8 / cpus.len() as u64;
        let source = DataSource::start_for(
            &self.net.ns,
            server,
            cpus.len(),
            seconds,
            Some(rate),
            transfer,
        )?;
        let exec = match choice {
            Choice::Kernel => String::new(),
            Choice::Srap => format!("srap exec --cgroup {GUEST_CGROUP} -- "),
        };
        let (send, read_for) = match transfer {
            Transfer::Download => ("", seconds + 10),
            Transfer::Upload => (" --send", seconds),
        };
        let last = cpus.last().copied().unwrap_or(0);
        let before = self.numa.counters()?;
        let out = self.numa.guest.run(&format!(
            "{exec}srap-readers --connect {server} --cpus 0-{last} --seconds {read_for}{send} 2>&1"
        ))?;
        let after = self.numa.counters()?;
        let reports = readers::parse_reports(&out)
            .map_err(|err| anyhow!("{err:#}: the readers said {out}"))?;
        let served = source.finish_flows(Duration::from_secs(40))?;
        if reports.len() != cpus.len() {
            bail!(
                "{} reports from {} readers: {out}",
                reports.len(),
                cpus.len()
            );
        }
        let flows = reports
            .into_iter()
            .map(|report| {
                let accepted: Vec<_> = served.iter().filter(|s| s.port == report.port).collect();
                let [sink] = accepted[..] else {
                    bail!(
                        "the server accepted {} flows from port {}: {served:?}",
                        accepted.len(),
                        report.port
                    );
                };
                self.flow(server, report, sink.peer_ip, sink.bytes)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Round {
            choice,
            transfer,
            flows,
            counters: after.since(&before),
        })
    }

    /// The record of one flow the server accepted from `peer` (the
    /// guest's address it used) and moved `served` bytes on.
    fn flow(
        &self,
        server: SocketAddr,
        report: FlowReport,
        peer: IpAddr,
        served: u64,
    ) -> anyhow::Result<Flow> {
        let nic = self.numa.nic_of_ip(peer).map(|n| n.node as usize);
        let node_nic = self
            .numa
            .nic_of_cpu(report.cpu)
            .map(|n| n.node as usize)
            .ok_or_else(|| anyhow!("CPU {} is on no node's list", report.cpu))?;
        let queue = match nic {
            Some(i) => {
                let tuple = FlowTuple::new(server.ip(), server.port(), peer, report.port)?;
                Some(self.models[i].landing(&tuple).queue)
            }
            None => None,
        };
        let queue_cpu = nic
            .zip(queue)
            .and_then(|(i, q)| self.numa.nics[i].queue_cpus.get(q as usize).copied());
        Ok(Flow {
            report,
            nic,
            node_nic,
            queue,
            queue_cpu,
            served,
        })
    }

    /// Starts the guest's sender agent choosing each steered flow's NIC by
    /// its connecting CPU's node, and its port by the reader rule on that
    /// NIC, with the source rules it needs installed; waits until it
    /// steers.
    pub fn start_numa_sender(&mut self) -> anyhow::Result<()> {
        let ifaces: String = self
            .numa
            .names()
            .iter()
            .map(|name| format!("--local-iface {name} "))
            .collect();
        let receiver = self.server()?;
        self.numa.guest.run(&format!(
            "srap-agent sender --steer local {ifaces}--local-nics numa --source-rules install \
             --local-placement reader --receiver {receiver} --cgroup {GUEST_CGROUP} \
             --control {SENDER_CONTROL} --port-range {LAB_PORT_RANGE} --interval 1 \
             > {SENDER_LOG} 2>&1 &"
        ))?;
        let within = Duration::from_secs(90);
        if !self
            .numa
            .guest
            .poll_until(&format!("grep -q '^steering active' {SENDER_LOG}"), within)?
        {
            bail!(
                "the guest's sender agent was not steering within {within:?}; its log:\n{}",
                self.sender_log()
            );
        }
        Ok(())
    }

    /// The guest's binder counters `nic_chosen` and `nic_fallback`, from
    /// its agent's status.
    pub fn nic_choices(&mut self) -> anyhow::Result<(u64, u64)> {
        let status: SenderStatus = self
            .numa
            .guest
            .srap_status(&format!("--sender --control {SENDER_CONTROL}"))
            .context("the guest's sender status")?;
        let counter = |name: &str| {
            status
                .binder
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v)
        };
        Ok((counter("nic_chosen"), counter("nic_fallback")))
    }

    /// [`Self::nic_choices`] once their sum reaches `total` (the status is
    /// published once a second), or as they are after 5 s.
    pub fn wait_nic_choices(&mut self, total: u64) -> anyhow::Result<(u64, u64)> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.nic_choices()?;
            if now.0 + now.1 >= total || Instant::now() > deadline {
                return Ok(now);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The guest sender agent's log, or why it could not be read.
    pub fn sender_log(&mut self) -> String {
        self.numa.guest.read_or_why(SENDER_LOG)
    }
}

/// Whatever chose them: on each NIC, the queues its own counters show busy
/// are those the NIC's key and table give the tuples the server accepted
/// through it — the model every per-flow queue here rests on agrees with
/// the device.
pub fn judge_counters(round: &Round) -> Vec<String> {
    let mut wrong = Vec::new();
    for (i, counters) in round.counters.nics.iter().enumerate() {
        let flows: Vec<&Flow> = round.flows.iter().filter(|f| f.nic == Some(i)).collect();
        if flows.is_empty() {
            continue;
        }
        let modelled: BTreeSet<u32> = flows.iter().filter_map(|f| f.queue).collect();
        let busy = truth::busy_queues(&counters.rx_queue_packets, flows.len());
        if busy != modelled {
            wrong.push(format!(
                "NIC {i}'s busy queues {busy:?} by its counters, {modelled:?} by its hash of the \
                 accepted tuples"
            ));
        }
    }
    wrong
}

/// The kernel's choice, as the design notes measured it: every flow by
/// the route's NIC (NIC 0), the other NIC idle, so the readers of the
/// other node — half of them — receive through the far socket's NIC.
pub fn judge_kernel(round: &Round) -> Vec<String> {
    let mut wrong = Vec::new();
    if let Some(f) = round.flows.iter().find(|f| f.nic != Some(0)) {
        wrong.push(format!(
            "port {} left by NIC {:?}, not the route's NIC 0",
            f.report.port, f.nic
        ));
    }
    if round.nic_bytes(1) > IDLE_BYTES {
        wrong.push(format!(
            "NIC 1 counted {} bytes with no flow routed through it",
            round.nic_bytes(1)
        ));
    }
    let far = round.flows.len() - round.through_own_node();
    if far * 2 != round.flows.len() {
        wrong.push(format!(
            "{far} of {} readers on the far NIC, not half",
            round.flows.len()
        ));
    }
    wrong
}

/// SRAP's: every flow through its reader's node's NIC, by the address
/// the server accepted it from and by the NICs' own counters; its data
/// (or ACKs) processed on its reader's CPU by the socket's own record and
/// by the queue the NIC's hash gives its tuple; nothing moved by RPS;
/// every port SRAP's.
pub fn judge_srap(round: &Round) -> Vec<String> {
    let mut wrong = Vec::new();
    for f in &round.flows {
        let port = f.report.port;
        if f.nic != Some(f.node_nic) {
            wrong.push(format!(
                "port {port} (reader on CPU {}) used NIC {:?}, not its node's NIC {}",
                f.report.cpu, f.nic, f.node_nic
            ));
        }
        if i64::from(f.report.incoming_cpu) != i64::from(f.report.cpu) {
            wrong.push(format!(
                "port {port}: SO_INCOMING_CPU {} on a reader pinned to CPU {}",
                f.report.incoming_cpu, f.report.cpu
            ));
        }
        if f.queue_cpu != Some(f.report.cpu) {
            wrong.push(format!(
                "port {port}: the NIC's hash puts it on queue {:?} (IRQ CPU {:?}), not on CPU {}",
                f.queue, f.queue_cpu, f.report.cpu
            ));
        }
        if port >= 32_768 {
            wrong.push(format!("port {port} is the kernel's, not SRAP's"));
        }
    }
    for nic in 0..round.counters.nics.len() {
        let payload = round.payload_through(nic);
        let counted = round.nic_bytes(nic);
        if payload == 0 || (counted as f64) < PAYLOAD_SHARE * payload as f64 {
            wrong.push(format!(
                "NIC {nic} counted {counted} bytes for its flows' {payload} bytes of payload"
            ));
        }
    }
    if round.counters.received_rps != 0 {
        wrong.push(format!(
            "{} packets steered between CPUs by RPS",
            round.counters.received_rps
        ));
    }
    wrong
}

/// What fails `round`'s judges: its choice's own and the counters' check.
pub fn judge(round: &Round) -> Vec<String> {
    let own = match round.choice {
        Choice::Kernel => judge_kernel(round),
        Choice::Srap => judge_srap(round),
    };
    own.into_iter().chain(judge_counters(round)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::numa::NicCounters;

    fn flow(cpu: u32, nic: usize, incoming_cpu: i32, port: u16) -> Flow {
        Flow {
            report: FlowReport {
                cpu,
                ran_on: cpu,
                position: 0,
                port,
                incoming_cpu,
                napi_id: 0,
                bytes: 1_000_000,
            },
            nic: Some(nic),
            node_nic: (cpu / 2) as usize,
            queue: Some(cpu % 2),
            queue_cpu: Some(if nic == 0 { cpu % 2 } else { 2 + cpu % 2 }),
            served: 1_000_000,
        }
    }

    fn counters(rx: [u64; 2]) -> Counters {
        Counters {
            nics: rx
                .iter()
                .map(|&rx_bytes| NicCounters {
                    rx_bytes,
                    tx_bytes: 0,
                    rx_queue_packets: vec![500, 500, 0, 0],
                })
                .collect(),
            received_rps: 0,
        }
    }

    /// Every flow by NIC 0, as the route chooses, on the CPU of its queue.
    fn kernel_round() -> Round {
        Round {
            choice: Choice::Kernel,
            transfer: Transfer::Download,
            flows: (0..4)
                .map(|cpu| flow(cpu, 0, (cpu % 2) as i32, 40_000))
                .collect(),
            counters: counters([4_100_000, 300]),
        }
    }

    /// Every flow by its node's NIC, on its reader's CPU.
    fn placed_round() -> Round {
        Round {
            choice: Choice::Srap,
            transfer: Transfer::Download,
            flows: (0..4)
                .map(|cpu| flow(cpu, (cpu / 2) as usize, cpu as i32, 10_000 + cpu as u16))
                .collect(),
            counters: counters([2_100_000, 2_100_000]),
        }
    }

    /// The judges fail what they must: the kernel's own choice (every flow
    /// by NIC 0) is not SRAP's verdict, and a round where each flow used
    /// its node's NIC and CPU with no RPS passes SRAP's and fails the
    /// kernel's.
    #[test]
    fn the_judges_tell_the_kernels_choice_from_the_nodes_nic() {
        let kernel = kernel_round();
        assert!(
            judge_kernel(&kernel).is_empty(),
            "{:?}",
            judge_kernel(&kernel)
        );
        let srap_wrong = judge_srap(&kernel);
        assert!(
            srap_wrong.iter().any(|w| w.contains("not its node's NIC"))
                && srap_wrong.iter().any(|w| w.contains("SO_INCOMING_CPU"))
                && srap_wrong
                    .iter()
                    .any(|w| w.contains("the kernel's, not SRAP's")),
            "{srap_wrong:?}"
        );
        let placed = placed_round();
        assert!(judge_srap(&placed).is_empty(), "{:?}", judge_srap(&placed));
        assert!(!judge_kernel(&placed).is_empty());
        let mut one_nic_counted = placed;
        one_nic_counted.counters = counters([4_200_000, 0]);
        one_nic_counted.counters.received_rps = 7;
        let wrong = judge_srap(&one_nic_counted);
        assert!(
            wrong.iter().any(|w| w.starts_with("NIC 1 counted 0 bytes"))
                && wrong.iter().any(|w| w.contains("RPS")),
            "{wrong:?}"
        );
    }

    /// The far NIC's bytes are its counter's share for the flows of the
    /// other node's readers: half of NIC 0's for the kernel's round (CPUs 2
    /// and 3 are node 1's), none when every flow used its node's NIC.
    #[test]
    fn far_bytes_are_the_nics_counter_shared_by_payload() {
        let kernel = kernel_round();
        assert_eq!(kernel.far_nic_bytes(), 2_050_000);
        assert_eq!(kernel.all_nic_bytes(), 4_100_300);
        assert_eq!(kernel.through_own_node(), 2);
        assert_eq!(kernel.on_reader_cpu(), 2);
        let placed = placed_round();
        assert_eq!(placed.far_nic_bytes(), 0);
        assert_eq!(placed.through_own_node(), 4);
        assert_eq!(placed.on_reader_cpu(), 4);
        // An upload is judged by tx_bytes, which this round never counted.
        let upload = Round {
            transfer: Transfer::Upload,
            ..kernel_round()
        };
        assert_eq!(upload.far_nic_bytes(), 0);
    }
}
