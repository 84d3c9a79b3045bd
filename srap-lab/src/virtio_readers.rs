//! `srap-lab --nic virtio --direction pull --local-placement reader`:
//! does each download's data arrive on the CPU of the thread that reads it?
//! Side by side on a real RSS device — the QEMU guest's virtio-net, each
//! queue's interrupt pinned to its own vCPU — one reading thread pinned per
//! vCPU (`srap-readers`), each downloading over its own connection from the
//! lab's data source in the host's test namespace, under
//! * kernel ports: the NIC's hash puts a flow on its reader's CPU about
//!   once in N;
//! * kernel ports with RFS: the kernel moves each flow's protocol
//!   processing to its reader's CPU, at the price of an inter-processor
//!   interrupt per batch of packets it steers;
//! * SRAP `reader`: the guest's sender agent binds each connection to a
//!   port whose reverse tuple the NIC itself hashes onto the queue whose
//!   interrupt CPU is the connecting thread's, so nothing needs steering.
//!
//! Each flow is judged by the reading thread itself after its transfer
//! (`SO_INCOMING_CPU`, `SO_INCOMING_NAPI_ID` beside its own CPU) and by the
//! queue the device's key and table give the port the host accepted; each
//! run by the guest's packets steered between CPUs (`received_rps`, the
//! 10th column of `/proc/net/softnet_stat`) and its function-call
//! interrupts (`CAL` in `/proc/interrupts`), per GB read.

use std::{fmt::Write as _, net::SocketAddr, process::Stdio, time::Duration};

use anyhow::{Context as _, bail};
use serde::Serialize;

pub use srap_harness::guest::truth::parse_received_rps;
use srap_harness::{
    guest::{
        GUEST_IFACE, Guest, GuestImage, GuestKernel, GuestNet, GuestNic, GuestShape, image, truth,
    },
    interrupt::interrupted,
    programs::iperf3_server_with,
    readers::{self, FlowReport},
    subnet::Subnet,
};

use crate::{
    args::LabArgs,
    virtio::{self, prepare_image},
    virtio_pull::{GUEST_CGROUP, PullLab, landings_agree},
};

/// `net.core.rps_sock_flow_entries` for the RFS runs: the value the
/// kernel's Documentation/networking/scaling.rst suggests for a moderately
/// loaded server; each receive queue's `rps_flow_cnt` gets this over the
/// number of queues, as it says for a multi-queue device.
pub const RPS_SOCK_FLOW_ENTRIES: u32 = 32_768;
/// The host's port of the data source, one per mode so no run meets the
/// last one's TIME_WAIT.
const SOURCE_PORT: u16 = 5301;
/// What the data source sends, in bits a second, shared evenly by the
/// flows: under the tap's rate toward the guest (400 Mbit/s, which keeps
/// the emulated guest's rings from filling), so no queue builds at the
/// wire and the last thread to connect reads as much as the first.
const SOURCE_RATE: u64 = 320_000_000;
/// The port of the iperf3 server that warms the queues.
const WARM_PORT: u16 = 5300;

/// Which ports and which kernel steering a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Kernel-chosen source ports, no RPS/RFS.
    KernelPorts,
    /// Kernel-chosen source ports with RFS ([`Rfs`]).
    Rfs,
    /// The guest's sender agent with `--local-placement reader`, the
    /// download under `srap exec`; no RPS/RFS.
    SrapReader,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::KernelPorts, Mode::Rfs, Mode::SrapReader];

    pub fn label(self) -> &'static str {
        match self {
            Self::KernelPorts => "kernel ports",
            Self::Rfs => "RFS",
            Self::SrapReader => "SRAP reader",
        }
    }
}

/// One flow: what its reading thread said, and the queue the device's key
/// and table give the port the host accepted from it, with that queue's
/// interrupt CPU.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReaderFlow {
    #[serde(flatten)]
    pub report: FlowReport,
    /// `None` when the host accepted no connection from this port.
    pub queue: Option<u32>,
    pub queue_cpu: Option<u32>,
}

impl ReaderFlow {
    /// The kernel processed its last packet on the reader's CPU.
    pub fn incoming_on_reader(&self) -> bool {
        i64::from(self.report.incoming_cpu) == i64::from(self.report.cpu)
    }

    /// The NIC itself put it on the reader's CPU: its queue's interrupt CPU.
    pub fn queue_on_reader(&self) -> bool {
        self.queue_cpu == Some(self.report.cpu)
    }
}

/// One mode's run.
#[derive(Debug, Clone, Serialize)]
pub struct ModeRun {
    pub mode: Mode,
    pub flows: Vec<ReaderFlow>,
    /// Packets RPS/RFS steered to another CPU during the run, all CPUs.
    pub received_rps: u64,
    /// Function-call interrupts during the run, all CPUs.
    pub cal: u64,
    /// Bytes the readers read.
    pub bytes: u64,
}

impl ModeRun {
    pub fn on_reader_by_incoming_cpu(&self) -> usize {
        self.flows.iter().filter(|f| f.incoming_on_reader()).count()
    }

    pub fn on_reader_by_queue(&self) -> usize {
        self.flows.iter().filter(|f| f.queue_on_reader()).count()
    }

    /// `count` per GB read (0 when nothing was read).
    pub fn per_gb(&self, count: u64) -> f64 {
        if self.bytes == 0 {
            return 0.0;
        }
        count as f64 / (self.bytes as f64 / 1e9)
    }

    /// Whether every flow's NAPI id names the queue its accepted port
    /// hashes to: the NAPI ids of virtio_net's receive queues are
    /// consecutive, so `napi_id - queue` is one number for all of them.
    /// An independent check of the hash's queue (RFS leaves the NAPI id
    /// alone).
    pub fn napi_ids_agree(&self) -> bool {
        let offsets: std::collections::BTreeSet<i64> = self
            .flows
            .iter()
            .map(|f| i64::from(f.report.napi_id) - f.queue.map_or(-1, i64::from))
            .collect();
        offsets.len() == 1 && self.flows.iter().all(|f| f.report.napi_id != 0)
    }
}

/// Everything one guest measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReadersReport {
    pub queues: u32,
    pub seconds: u64,
    /// Each queue's interrupt CPU (its effective affinity) after warming.
    pub irq_cpus: Vec<Option<u32>>,
    pub runs: Vec<ModeRun>,
    /// The mode that failed and why; the runs before it are kept.
    pub failed: Option<String>,
}

impl ReadersReport {
    pub fn run(&self, mode: Mode) -> Option<&ModeRun> {
        self.runs.iter().find(|r| r.mode == mode)
    }

    /// The three-way table.
    pub fn render(&self) -> String {
        let n = self.queues;
        let order: Vec<String> = readers::default_order(&(0..n).collect::<Vec<_>>())
            .iter()
            .map(u32::to_string)
            .collect();
        let mut out = format!(
            "{n} queues, queue i's IRQ on vCPU i; {n} reading threads, one pinned per vCPU, \
             connecting one at a time (CPUs {order}), {s} s each\n",
            order = order.join(","),
            s = self.seconds
        );
        let head = format!(
            "  {:<13} {:>26} {:>19} {:>19}",
            "", "flows on the reader's CPU", "steered (RPS/RFS)", "function calls"
        );
        let _ = writeln!(out, "{}", head.trim_end());
        let _ = writeln!(
            out,
            "  {:<13} {:>15} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6}",
            "", "SO_INCOMING_CPU", "NIC queue", "packets", "per GB", "CAL", "per GB", "GB"
        );
        for run in &self.runs {
            let flows = run.flows.len();
            let _ = writeln!(
                out,
                "  {:<13} {:>15} {:>10} {:>9} {:>9.0} {:>9} {:>9.0} {:>6.3}",
                run.mode.label(),
                format!("{}/{flows}", run.on_reader_by_incoming_cpu()),
                format!("{}/{flows}", run.on_reader_by_queue()),
                run.received_rps,
                run.per_gb(run.received_rps),
                run.cal,
                run.per_gb(run.cal),
                run.bytes as f64 / 1e9,
            );
        }
        out
    }

    /// Every flow of every run, for a report or a failure.
    pub fn render_flows(&self) -> String {
        let irq: Vec<String> = self
            .irq_cpus
            .iter()
            .map(|c| c.map_or("?".into(), |c| c.to_string()))
            .collect();
        let mut out = format!("queue → IRQ CPU: {}\n", irq.join(","));
        for run in &self.runs {
            let _ = writeln!(
                out,
                "{}: napi ids name the hash's queue: {}",
                run.mode.label(),
                if run.napi_ids_agree() { "yes" } else { "no" }
            );
            let _ = writeln!(
                out,
                "  {:>3} {:>3} {:>6} {:>5} {:>8} {:>7} {:>5} {:>7} {:>10}",
                "pos", "cpu", "ran on", "port", "incoming", "napi", "queue", "IRQ cpu", "bytes"
            );
            for f in &run.flows {
                let opt = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
                let r = f.report;
                let _ = writeln!(
                    out,
                    "  {:>3} {:>3} {:>6} {:>5} {:>8} {:>7} {:>5} {:>7} {:>10}",
                    r.position,
                    r.cpu,
                    r.ran_on,
                    r.port,
                    r.incoming_cpu,
                    r.napi_id,
                    opt(f.queue),
                    opt(f.queue_cpu),
                    r.bytes
                );
            }
        }
        out
    }
}

/// RFS as the kernel's Documentation/networking/scaling.rst configures it:
/// `net.core.rps_sock_flow_entries` = 32768 and each `rx-N/rps_flow_cnt`
/// = 32768 / N. `rps_cpus` is **not** set (it stays 0 on every queue,
/// written so here): RFS needs only the two flow tables to steer a flow to
/// the CPU its reader last ran on, and without an RPS map a flow RFS has
/// not yet seen stays where the NIC put it, so what moves is RFS's doing
/// alone.
pub struct Rfs;

impl Rfs {
    fn set(guest: &mut Guest, queues: u32) -> anyhow::Result<()> {
        let per_queue = RPS_SOCK_FLOW_ENTRIES / queues.max(1);
        guest.run(&format!(
            "sysctl -w net.core.rps_sock_flow_entries={RPS_SOCK_FLOW_ENTRIES} && \
             for q in /sys/class/net/{GUEST_IFACE}/queues/rx-*; do \
             echo {per_queue} > $q/rps_flow_cnt || exit 1; done"
        ))?;
        Ok(())
    }

    fn clear(guest: &mut Guest) -> anyhow::Result<()> {
        guest.run(&format!(
            "sysctl -w net.core.rps_sock_flow_entries=0 && \
             for q in /sys/class/net/{GUEST_IFACE}/queues/rx-*; do \
             echo 0 > $q/rps_flow_cnt || exit 1; done"
        ))?;
        Ok(())
    }
}

/// IRQ numbers of `virtioK-input.N` per queue N in `/proc/interrupts`.
pub fn parse_input_irqs(text: &str) -> Vec<Option<u32>> {
    let mut irqs: Vec<Option<u32>> = Vec::new();
    for line in text.lines() {
        let Some(queue) = line
            .split_whitespace()
            .last()
            .and_then(|name| name.split_once("-input."))
            .filter(|(dev, _)| dev.starts_with("virtio"))
            .and_then(|(_, n)| n.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(irq) = line
            .split(':')
            .next()
            .and_then(|n| n.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if queue >= irqs.len() {
            irqs.resize(queue + 1, None);
        }
        irqs[queue] = Some(irq);
    }
    irqs
}

/// The `CAL` row of `/proc/interrupts` summed over CPUs.
pub fn parse_cal(text: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("CAL:"))
        .context("/proc/interrupts has no CAL row")?;
    Ok(line
        .split_whitespace()
        .skip(1)
        .map_while(|t| t.parse::<u64>().ok())
        .sum())
}

/// `received_rps` and `CAL` now, in one read of the guest.
fn counters(guest: &mut Guest) -> anyhow::Result<(u64, u64)> {
    let text = guest.read("cat /proc/net/softnet_stat; echo ==; cat /proc/interrupts")?;
    let (softnet, interrupts) = text
        .split_once("==\n")
        .context("the guest's softnet_stat and interrupts")?;
    Ok((parse_received_rps(softnet)?, parse_cal(interrupts)?))
}

/// The guest and its lab, queues prepared.
pub struct ReadersLab<'n> {
    pub lab: PullLab<'n>,
    pub irq_cpus: Vec<Option<u32>>,
}

impl<'n> ReadersLab<'n> {
    /// Boots the guest (one vCPU per queue, RSS on) and prepares its
    /// queues: queue i's interrupt pinned to vCPU i, no RPS, transmit
    /// queues following the receive queues (`xps_rxqs`), every queue warmed
    /// until its interrupt runs where it is pinned.
    pub fn start(net: &'n GuestNet, image: &GuestImage, queues: u32) -> anyhow::Result<Self> {
        let shape = GuestShape::new(queues, None)?;
        let mut lab = PullLab::boot(net, image, shape)?;
        let guest = &mut lab.guest;
        guest
            .read(&format!("test -x /bin/{}", image::READERS))
            .context(
                "the guest has no srap-readers: build it beside srap-agent (`cargo build --bins`)",
            )?;
        let irqs = parse_input_irqs(&guest.read("cat /proc/interrupts")?);
        let mut script = String::new();
        for queue in 0..queues {
            let irq = irqs
                .get(queue as usize)
                .copied()
                .flatten()
                .with_context(|| format!("no virtio input IRQ for queue {queue}"))?;
            // Queue i's interrupt on vCPU i; transmit queue i used for a
            // socket whose packets came in on receive queue i. Without it,
            // streaming into QEMU's RSS guest can stall: QEMU may queue a
            // packet on another tap queue, and flows time out; it does not
            // change where data lands.
            let _ = write!(
                script,
                "echo {queue} > /proc/irq/{irq}/smp_affinity_list && \
                 echo {mask:x} > /sys/class/net/{GUEST_IFACE}/queues/tx-{queue}/xps_rxqs && \
                 echo 0 > /sys/class/net/{GUEST_IFACE}/queues/rx-{queue}/rps_cpus && ",
                mask = 1u64 << queue
            );
        }
        script.push_str("true");
        guest.run(&script)?;
        Rfs::clear(guest)?;
        let mut lab = Self {
            lab,
            irq_cpus: Vec::new(),
        };
        lab.warm(&irqs[..queues as usize])?;
        Ok(lab)
    }

    /// Downloads with many kernel-port flows until every queue's effective
    /// affinity is the CPU it is pinned to: before a queue's first
    /// interrupt it still names the boot-time CPU.
    fn warm(&mut self, irqs: &[Option<u32>]) -> anyhow::Result<()> {
        let queues = irqs.len();
        let effective = |guest: &mut Guest| -> anyhow::Result<Vec<Option<u32>>> {
            let mut cpus = Vec::new();
            for irq in irqs.iter().flatten() {
                let text = guest.read(&format!("cat /proc/irq/{irq}/effective_affinity_list"))?;
                cpus.push(text.trim().parse::<u32>().ok());
            }
            Ok(cpus)
        };
        let pinned: Vec<Option<u32>> = (0..queues as u32).map(Some).collect();
        for _ in 0..6 {
            let cpus = effective(&mut self.lab.guest)?;
            if cpus == pinned {
                self.irq_cpus = cpus;
                return Ok(());
            }
            if interrupted() {
                bail!("interrupted");
            }
            let _server = iperf3_server_with(&self.lab.net.ns, WARM_PORT, &[], Stdio::null())?;
            self.lab.guest.run(&format!(
                "iperf3 -c {host} -p {WARM_PORT} -R -P {flows} -t 1 > /dev/null",
                host = self.lab.net.host_ip,
                flows = 4 * queues
            ))?;
        }
        self.irq_cpus = effective(&mut self.lab.guest)?;
        bail!(
            "the queues' interrupts never ran where they are pinned (effective affinity {:?})",
            self.irq_cpus
        )
    }

    /// One run of `mode`: `srap-readers` with one pinned thread per vCPU,
    /// connecting one at a time in the default (deranged) order, each
    /// reading `seconds` from the host's data source.
    pub fn run(&mut self, mode: Mode, seconds: u64) -> anyhow::Result<ModeRun> {
        let queues = self.lab.guest.shape.queues;
        let port = SOURCE_PORT + Mode::ALL.iter().position(|m| *m == mode).unwrap_or(0) as u16;
        let net = self.lab.net;
        let source = readers::DataSource::start(
            &net.ns,
            SocketAddr::new(net.host_ip.into(), port),
            queues as usize,
            seconds,
            Some(SOURCE_RATE / 8 / u64::from(queues)),
        )?;
        if mode == Mode::Rfs {
            Rfs::set(&mut self.lab.guest, queues)?;
        }
        let measured = self.measure(mode, source.addr(), seconds);
        if mode == Mode::Rfs {
            Rfs::clear(&mut self.lab.guest)?;
        }
        let (reports, received_rps, cal) = measured?;
        let ports = source.finish(Duration::from_secs(30))?;
        let model = truth::device_model(&mut self.lab.guest)?;
        let accepted = truth::guest_queues(&model, net, &ports, |guest| (port, guest))?;
        let flows = reports
            .into_iter()
            .map(|report| {
                let queue = accepted
                    .iter()
                    .find(|&&(p, _)| p == report.port)
                    .map(|&(_, q)| q);
                ReaderFlow {
                    report,
                    queue,
                    queue_cpu: queue.and_then(|q| self.irq_cpus.get(q as usize).copied().flatten()),
                }
            })
            .collect::<Vec<_>>();
        Ok(ModeRun {
            mode,
            bytes: flows.iter().map(|f| f.report.bytes).sum(),
            flows,
            received_rps,
            cal,
        })
    }

    /// The readers' reports, and the steered packets and function calls
    /// counted over their run.
    fn measure(
        &mut self,
        mode: Mode,
        source: SocketAddr,
        seconds: u64,
    ) -> anyhow::Result<(Vec<FlowReport>, u64, u64)> {
        let queues = self.lab.guest.shape.queues;
        let exec = if mode == Mode::SrapReader {
            format!("srap exec --cgroup {GUEST_CGROUP} -- ")
        } else {
            String::new()
        };
        let guest = &mut self.lab.guest;
        let (rps_before, cal_before) = counters(guest)?;
        // In the foreground: a poll every 200 ms would add the shell's own
        // cross-CPU calls to the count. The readers stop reading 10 s past
        // the source's time at the latest.
        let out = guest
            .run(&format!(
                "{exec}srap-readers --connect {source} --cpus 0-{last} --seconds {read} 2>&1",
                last = queues - 1,
                read = seconds + 10
            ))
            .with_context(|| format!("the readers under {}", mode.label()))?;
        let (rps_after, cal_after) = counters(guest)?;
        let reports = readers::parse_reports(&out)?;
        if reports.len() != queues as usize {
            bail!("{} reports from {queues} readers: {out}", reports.len());
        }
        Ok((
            reports,
            rps_after.saturating_sub(rps_before),
            cal_after.saturating_sub(cal_before),
        ))
    }

    /// Starts the guest's sender agent with `--local-placement reader`.
    pub fn start_reader_placement(&mut self) -> anyhow::Result<()> {
        self.lab.start_sender("--local-placement reader")?;
        // A key the driver misreports (6.12) is learned from landings
        // first; 6.1 reports the key the device uses.
        if self.lab.guest.kernel != GuestKernel::V6_1 {
            let status = self.lab.drive_until_agreed(8, 16)?;
            if !status.local.as_ref().is_some_and(landings_agree) {
                bail!("the guest's sender agent never agreed with its NIC's landings");
            }
        }
        Ok(())
    }
}

/// Boots a guest with `queues` queues and measures the three modes in
/// order (kernel ports, RFS, SRAP reader), `seconds` each.
pub fn measure(
    net: &GuestNet,
    image: &GuestImage,
    queues: u32,
    seconds: u64,
) -> anyhow::Result<ReadersReport> {
    measure_modes(net, image, queues, seconds, &Mode::ALL)
}

/// [`measure`] with the `modes` given, in their order. A mode that fails
/// ends the measurement: the report then holds the runs before it and
/// says why in [`ReadersReport::failed`], so the table is never lost.
pub fn measure_modes(
    net: &GuestNet,
    image: &GuestImage,
    queues: u32,
    seconds: u64,
    modes: &[Mode],
) -> anyhow::Result<ReadersReport> {
    let mut lab = ReadersLab::start(net, image, queues)?;
    let mut report = ReadersReport {
        queues,
        seconds,
        irq_cpus: lab.irq_cpus.clone(),
        runs: Vec::new(),
        failed: None,
    };
    for &mode in modes {
        let run = if mode == Mode::SrapReader {
            lab.start_reader_placement()
                .and_then(|()| lab.run(mode, seconds))
        } else {
            lab.run(mode, seconds)
        };
        match run {
            Ok(run) => report.runs.push(run),
            Err(err) => {
                let kept = lab.lab.guest.keep_dir().display().to_string();
                let err = format!("{err:#}");
                // A sender that never came up already says what it logged.
                let log = if mode == Mode::SrapReader && !err.contains("sender log") {
                    format!("\nthe guest's sender log:\n{}", lab.lab.sender_log())
                } else {
                    String::new()
                };
                report.failed = Some(format!(
                    "{}: {err} (the guest's console and QEMU's log are kept in {kept}){log}",
                    mode.label()
                ));
                break;
            }
        }
        if interrupted() {
            bail!("interrupted");
        }
    }
    Ok(report)
}

/// `srap-lab --nic virtio --direction pull --local-placement reader`.
pub fn run(args: &LabArgs, nic: GuestNic, queues: u32) -> anyhow::Result<()> {
    if nic != GuestNic::Virtio {
        bail!("--local-placement reader runs with --nic virtio (its IRQs are pinned by name)");
    }
    if args.smp.is_some_and(|cpus| cpus != queues) {
        bail!("--local-placement reader runs one vCPU per queue: leave --smp out");
    }
    let image = prepare_image(args)?;
    let net = GuestNet::on(Subnet::take(virtio::SUBNET)?)?;
    if !args.json {
        println!(
            "QEMU guest ({}) with a {queues}-queue virtio-net NIC and {queues} vCPUs, \
             downloading from the host ({}): kernel ports, RFS, then SRAP reader \
             (srap-agent sender --steer local --local-iface {GUEST_IFACE} \
             --local-placement reader), {} s each\n",
            image.package, net.host_ip, args.duration
        );
    }
    let report = measure(&net, &image, queues, args.duration)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.render());
        println!("{}", report.render_flows());
    }
    match report.failed {
        Some(why) => bail!("{why}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guests_counters_parse_as_it_prints_them() {
        let interrupts = "           CPU0       CPU1\n 24:          0          0   PCI-MSIX-0000:00:03.0   0-edge      virtio0-config\n 25:        120          3   PCI-MSIX-0000:00:03.0   1-edge      virtio0-input.0\n 26:          1          0   PCI-MSIX-0000:00:03.0   2-edge      virtio0-output.0\n 27:          0         77   PCI-MSIX-0000:00:03.0   3-edge      virtio0-input.1\n CAL:       1234        766   Function call interrupts\n TLB:          5          6   TLB shootdowns\n";
        assert_eq!(parse_input_irqs(interrupts), [Some(25), Some(27)]);
        assert_eq!(parse_cal(interrupts).unwrap(), 2000);
        assert!(parse_cal("           CPU0\n").is_err());
        let softnet = "0000a1b2 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000010 00000000 00000000 00000000\n0000a1b2 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 0000000f 00000000 00000000 00000001\n";
        assert_eq!(parse_received_rps(softnet).unwrap(), 31);
        assert!(parse_received_rps("00 01 02\n").is_err());
        assert!(parse_received_rps("0 0 0 0 0 0 0 0 0 zz\n").is_err());
    }

    fn flow(cpu: u32, incoming_cpu: i32, napi_id: u32, queue: Option<u32>) -> ReaderFlow {
        ReaderFlow {
            report: FlowReport {
                cpu,
                ran_on: cpu,
                position: 0,
                port: 10_000 + cpu as u16,
                incoming_cpu,
                napi_id,
                bytes: 250_000_000,
            },
            queue,
            queue_cpu: queue,
        }
    }

    #[test]
    fn a_run_counts_flows_on_their_readers_and_costs_per_gb() {
        let run = ModeRun {
            mode: Mode::Rfs,
            flows: vec![
                flow(0, 0, 8194, Some(2)),
                flow(1, 1, 8193, Some(1)),
                flow(2, 2, 8192, Some(0)),
                flow(3, 3, 8195, Some(3)),
            ],
            received_rps: 2000,
            cal: 3000,
            bytes: 1_000_000_000,
        };
        assert_eq!(run.on_reader_by_incoming_cpu(), 4);
        assert_eq!(run.on_reader_by_queue(), 2);
        assert!((run.per_gb(run.cal) - 3000.0).abs() < 1e-9);
        assert!(run.napi_ids_agree());
        let mut off = run.clone();
        off.flows[0].report.napi_id = 8199;
        assert!(!off.napi_ids_agree());
        let report = ReadersReport {
            queues: 4,
            seconds: 4,
            irq_cpus: vec![Some(0), Some(1), Some(2), Some(3)],
            runs: vec![run],
            failed: None,
        };
        let table = report.render();
        assert!(table.contains("RFS"), "{table}");
        assert!(table.contains("4/4"), "{table}");
        assert!(table.contains("2/4"), "{table}");
        assert!(
            report
                .render_flows()
                .contains("napi ids name the hash's queue: yes")
        );
    }
}
