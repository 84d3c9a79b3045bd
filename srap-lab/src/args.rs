//! The lab's command line: [`LabArgs`] (what `srap-lab` and `cargo xtask
//! lab -- ARGS` take) and the choices its flags name, each with what it
//! means for a run ([`Nic::guest`], the client command of
//! [`workload_words`]); `--direction` is [`Direction`], which the lab's
//! network and experiments take too.

use srap_daemon::sender::ends::LocalPlacement;
use srap_harness::guest::{GuestKernel, GuestNic};

use crate::{
    bond_throughput::BondModeArg,
    capacity::{QueueRate, Rate},
    direction::Direction,
    topology::LabObserver,
};

// The lab's flags (`srap-lab --help`): no doc comment here, which clap
// would take for the command's own description.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// The receiver's NIC: `veth` (SRAP's RSS emulator on a veth, in a
    /// namespace), `virtio` (a QEMU guest whose virtio-net RSS QEMU
    /// computes, with the receiver agent inside) or `igb` (a QEMU guest with
    /// an emulated Intel 82576 and Linux's igb driver).
    #[arg(long, value_enum, default_value_t = Nic::Veth)]
    pub nic: Nic,
    /// Receive queues (default: 32 for veth, 4 for virtio and igb, 8 on
    /// each link with --experiment mptcp). Each counts as one CPU.
    #[arg(long)]
    pub queues: Option<u32>,
    /// The guest's vCPUs with --nic virtio (default: one per queue; igb
    /// makes one queue per vCPU).
    #[arg(long)]
    pub smp: Option<u32>,
    /// The guest's kernel with --nic virtio|igb: Debian's generic 6.1
    /// (ethtool ioctl discovery) or 6.12 (ethtool netlink).
    #[arg(long, value_enum, default_value_t = GuestKernel::V6_1)]
    pub guest_kernel: GuestKernel,
    /// Where `cargo xtask setup` put the guests' QEMU and kernels (default:
    /// `guest-files` in the target directory the binary was built in).
    #[arg(long, value_name = "DIR")]
    pub guest_files: Option<std::path::PathBuf>,
    /// Where the guest's initramfs is cached (default: `srap-guest` beside
    /// the binary under `target/`, else /var/cache/srap/guest).
    #[arg(long)]
    pub guest_cache: Option<std::path::PathBuf>,
    /// Parallel flows (default: 16 for veth, one per queue for virtio;
    /// with --experiment mptcp, MPTCP connections: 4).
    #[arg(long)]
    pub flows: Option<usize>,
    /// Seconds the default workload (or each throughput trial) runs.
    #[arg(long, default_value_t = 5)]
    pub duration: u64,
    /// The client command, run in the sender namespace; `{server}`,
    /// `{port}`, `{flows}` and `{duration}` are filled in. Its server must be
    /// iperf3-compatible (`iperf3 -s` runs on the receiver). The default
    /// takes `-R` with `--direction pull` and `--bidir` with `both`.
    #[arg(long, default_value = DEFAULT_WORKLOAD)]
    pub workload: String,
    /// Which way the data flows, and so whose NIC SRAP plans for: `push`
    /// (the sender uploads; the receiver's NIC, `--steer remote`), `pull`
    /// (the sender downloads over connections it opens, `iperf3 -R`; its
    /// own NIC, `--steer local`, emulated on the receiver's veth), `both`
    /// (`iperf3 --bidir`; one port for both NICs, `--steer both`).
    #[arg(long, value_enum, default_value_t = Direction::Push)]
    pub direction: Direction,
    /// `reader`: whether each flow's data arrives on the CPU of the thread
    /// that opened it, kernel ports beside the sender agent's
    /// `--local-placement reader`. With --nic virtio --direction pull, one
    /// thread pinned per vCPU, RFS beside them too; on the veth lab with
    /// --direction pull (downloads) or both (uploads, judged by where their
    /// ACKs land), --flows threads pinned round-robin to this machine's
    /// CPUs. `spread` (the default) is the plain lab.
    #[arg(long, value_enum)]
    pub local_placement: Option<LocalPlacement>,
    /// Run an experiment instead: --trials trials with SRAP and as many with
    /// kernel-chosen ports. `--experiment` alone (or `placement`): short
    /// connections judged by the observer. `--experiment throughput`: long
    /// iperf3 flows on receive queues of --queue-rate each, measured at the
    /// receiver. `--experiment numa-nics`: a QEMU guest with a NIC per NUMA
    /// node, one reader pinned per vCPU downloading and uploading for
    /// --duration s, the bytes through the far node's NIC with the kernel's
    /// choice and with SRAP's. `--experiment receiver-nics`: a QEMU
    /// receiver with two NICs capped at --nic-rate each, 16 streams to its
    /// first address for --duration s, the aggregate the receiver measured
    /// with the kernel's ports and with SRAP's `--receiver-nics spread`.
    /// `--experiment mptcp`: the veth lab with a second link, both links'
    /// receive queues at --queue-rate and each link at --nic-rate, --flows
    /// MPTCP connections (a subflow per link) sending equal data, the
    /// aggregate the receiver read with the kernel's subflow ports and
    /// with the sender agent's. `--experiment follow-reader` (with
    /// `--guest-kernel 6.12`): the two-node guest serves 2 MPTCP
    /// connections of 16 KiB requests and 64 B responses, its serving
    /// threads moving between the nodes every --duration s (5 periods), the
    /// requests/s and P99 with the kernel's path manager and with SRAP
    /// following the reader.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "placement")]
    pub experiment: Option<Experiment>,
    /// Trials per kind in --experiment (default: 20 for placement, 10 for
    /// throughput, 3 for numa-nics, 10 for receiver-nics, 8 for mptcp).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub trials: Option<u64>,
    /// With --experiment receiver-nics: each receiver NIC's link rate, of
    /// TCP payload (e.g. 100mbit). Choose one the emulated guest
    /// comfortably exceeds on both NICs at once, so the caps, not the
    /// emulator, limit: the TCG guest receives about 380 Mbit/s in all.
    /// Default: 100mbit. With --experiment mptcp: each of the two links'
    /// rate (default: --flows × --queue-rate, what one full queue per
    /// connection needs).
    #[arg(long, value_name = "RATE")]
    pub nic_rate: Option<Rate>,
    /// Give each receive queue of the veth lab's NIC this capacity (e.g.
    /// 200mbit, of TCP payload), shared by the flows that land on it as
    /// flows on one core share that core: an `mq` root with one `tbf` per
    /// queue on the sender's veth. `none`: no capacity, the veth's own
    /// CPU-bound ceiling. Default: none, or 100mbit with --experiment
    /// throughput, 50mbit with --experiment mptcp (on both links' NICs).
    #[arg(long, value_name = "RATE|none")]
    pub queue_rate: Option<QueueRate>,
    /// With --experiment: the receive observer the experiment attaches on
    /// the receiver's veth (`auto` is tc there), or `off` (throughput only:
    /// its queues are then unknown), to measure what each hook costs.
    /// (`--observer`, its earlier name, is kept as an alias.)
    #[arg(long, value_enum, alias = "observer")]
    pub observer: Option<LabObserver>,
    /// With --experiment throughput: write PNG and SVG plots into this
    /// directory (per-flow rates over time, aggregate per trial); with
    /// --bond, its aggregate per trial (`bond-aggregate-N-MODE`); with
    /// --experiment numa-nics, the bytes through the far node's NIC per
    /// trial (`numa-far-nic`); with --experiment receiver-nics, the
    /// aggregate per trial (`receiver-nics-aggregate`); with --experiment
    /// mptcp, the aggregate per trial (`mptcp-aggregate`).
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Run the bond capacity experiment instead: a QEMU guest whose bond of
    /// this many virtio NICs (2 to 4), each capped at --member-rate, uploads
    /// 16 equal flows at once, --trials times with kernel ports and with
    /// SRAP's, measured by the receiver. Each flow is sized so that an
    /// even split takes --duration seconds at the cap.
    #[arg(long, value_name = "MEMBERS", value_parser = clap::value_parser!(u32).range(2..=4))]
    pub bond: Option<u32>,
    /// With --bond: `xor` (balance-xor) or `lacp` (802.3ad), both hashing
    /// layer3+4. Default: xor.
    #[arg(long, value_enum)]
    pub bond_mode: Option<BondModeArg>,
    /// With --bond: each member's link rate, of TCP payload (e.g. 10mbit).
    /// Choose one the emulated guest comfortably exceeds on all members at
    /// once, so the cap, not the emulator, limits: the TCG guest sends
    /// about 35 Mbit/s in all. Default: 20 Mbit/s over the members (10mbit
    /// each for 2, 5mbit for 4).
    #[arg(long, value_name = "RATE")]
    pub member_rate: Option<Rate>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// After the workload, keep the lab up (agents and all) until Ctrl-C,
    /// for `srap status --control PATH` in another terminal.
    #[arg(long)]
    pub hold: bool,
}

/// The client command unless `--workload` says.
pub const DEFAULT_WORKLOAD: &str = "iperf3 -c {server} -p {port} -P {flows} -t {duration}";

/// Which of the paper's experiments `--experiment` runs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experiment {
    /// Short connections, judged by where the observer saw them land.
    Placement,
    /// Long flows on rate-limited receive queues, judged by throughput.
    Throughput,
    /// A QEMU guest with two NUMA nodes and a NIC on each: the bytes
    /// reaching pinned readers through the far node's NIC, the kernel's
    /// choice of NIC beside SRAP's `--local-nics numa`.
    NumaNics,
    /// A QEMU receiver with two NICs, each link capped at --nic-rate: one
    /// transfer of 16 streams to its first address, the kernel's ports
    /// beside SRAP's `--receiver-nics spread`, the aggregate measured by
    /// the receiver.
    ReceiverNics,
    /// The veth lab with a second link, both NICs' queues and links
    /// capped: MPTCP connections with a subflow per link, the kernel's
    /// subflow ports beside SRAP's, the aggregate measured by the receiver.
    Mptcp,
    /// The two-node 6.12 guest as a request/response server whose threads
    /// move between the nodes: throughput and P99 with the kernel's path
    /// manager and with SRAP following the reader, as ratios of one run.
    FollowReader,
}

/// The receiver NIC the lab runs against.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    Veth,
    Virtio,
    Igb,
}

impl Nic {
    /// The guest's NIC, for the NICs a QEMU guest has.
    pub fn guest(self) -> Option<GuestNic> {
        match self {
            Self::Veth => None,
            Self::Virtio => Some(GuestNic::Virtio),
            Self::Igb => Some(GuestNic::Igb),
        }
    }
}

/// `--workload` split into words with `{flows}` and `{duration}` filled in
/// (the default with `--direction`'s flag).
pub fn workload_words(args: &LabArgs, flows: usize) -> Vec<String> {
    let mut words: Vec<String> = args
        .workload
        .split_whitespace()
        .map(|w| {
            w.replace("{flows}", &flows.to_string())
                .replace("{duration}", &args.duration.to_string())
        })
        .collect();
    if args.workload == DEFAULT_WORKLOAD
        && let Some(flag) = args.direction.iperf3_flag()
    {
        words.push(flag.to_owned());
    }
    words
}

/// How many flows a run of the workload opens, for its verdict
/// ([`crate::report::require_judged`]): `--flows` when the workload takes it (the
/// default's `-P {flows}`); a workload of its own that does not say opens
/// at least one.
pub(crate) fn flows_opened(args: &LabArgs, flows: usize) -> usize {
    if args.workload.contains("{flows}") {
        flows
    } else {
        1
    }
}
