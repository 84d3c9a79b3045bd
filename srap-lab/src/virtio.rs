//! `srap-lab --nic virtio`: the lab with a real RSS device. The
//! receiver is a QEMU guest (see [`srap_harness::guest`]) running the receiver
//! agent with real discovery; the sender agent runs in a namespace made
//! here and follows it with `--peer`; the workload runs with kernel ports,
//! then under `srap exec`. Each run is judged twice: by the receiver agent's
//! observer (SRAP's view) and by the guest itself — its per-queue
//! `ethtool -S` counters and the ports its server accepted, hashed with the
//! key the device really uses and the table `ethtool -x` shows.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::bail;
use serde::Serialize;
use srap_common::rss::KeySource;

use srap_harness::{
    LAB_PORT_RANGE, PEER_PORT, SenderAgent, SenderOpts,
    guest::{GUEST_IFACE, Guest, GuestFiles, GuestImage, GuestNet, GuestNic, GuestShape, truth},
    programs::{ChildGuard, agent_binary, client_via, srap_binary},
    subnet::Subnet,
};

use crate::{
    args::{LabArgs, workload_words},
    report::{MIN_DATA_BYTES, RunReport},
};
use srap_common::wire::LandingVerdict;
use srap_status::Status;

/// The lab's own subnet (inside its namespace): 10.199.77.0/24.
pub(crate) const SUBNET: u8 = 77;
const KERNEL_PORT: u16 = 5201;
const SRAP_PORT: u16 = 5202;
/// The receiver agent's control socket, inside the guest.
pub const GUEST_CONTROL: &str = "/tmp/receiver.sock";

/// One workload run as the guest saw it, beside SRAP's view.
#[derive(Debug, Clone, Serialize)]
pub struct GuestRun {
    /// The receiver agent's observer.
    pub srap: RunReport,
    /// What the guest counted per receive queue during the run
    /// ([`truth::rx_queue_packets`]: `ethtool -S` packets, or interrupts).
    pub rx_queue_packets: Vec<u64>,
    /// Queues that carried at least an eighth of a flow's fair share.
    pub busy_queues: BTreeSet<u32>,
    /// The data streams' source ports, as the guest's server accepted them,
    /// each with the queue the device's real key and `ethtool -x`'s table
    /// give it ([`truth::device_model`]).
    pub accepted: Vec<(u16, u32)>,
    /// The receiver agent's status behind `srap`, taken while the flows
    /// were still active (their NIC hashes, say).
    pub status: Status,
}

impl GuestRun {
    /// Distinct queues of the accepted flows, by the device's own config.
    pub fn distinct_queues(&self) -> usize {
        truth::distinct_queues(&self.accepted)
    }

    pub fn render(&self, title: &str, seconds: f64) -> String {
        let mut out = self.srap.render(title, seconds);
        let _ = writeln!(out, "  the guest's own view:");
        let counts = truth::queue_counts(&self.rx_queue_packets);
        let _ = writeln!(out, "    per-queue rx counts  {counts}");
        let _ = writeln!(
            out,
            "    {} flows accepted, on {} distinct queues by the device's key and table; {} queues busy by the guest's counters",
            self.accepted.len(),
            self.distinct_queues(),
            self.busy_queues.len()
        );
        out
    }
}

/// The guest on `net` with the receiver agent inside, and the sender agent
/// following it from `net`'s namespace.
pub struct VirtioLab<'n> {
    // Field order is drop order: the sender (detached) first, then the
    // guest (QEMU killed); the caller drops `net` (namespace, tap) last.
    sender: SenderAgent,
    /// The `srap` binary beside `srap-agent`, for `srap exec`.
    srap: PathBuf,
    pub guest: Guest,
    pub net: &'n GuestNet,
}

impl<'n> VirtioLab<'n> {
    /// Boots the guest, turns its RSS on, starts the receiver agent in it and
    /// the sender agent beside the tap.
    pub fn start(net: &'n GuestNet, image: &GuestImage, shape: GuestShape) -> anyhow::Result<Self> {
        let exe = agent_binary()?;
        Self::start_with(net, image, shape, &exe)
    }

    /// [`VirtioLab::start`] with the host's `srap-agent` binary given.
    pub fn start_with(
        net: &'n GuestNet,
        image: &GuestImage,
        shape: GuestShape,
        exe: &Path,
    ) -> anyhow::Result<Self> {
        let mut guest = Guest::boot(net, image, shape)?;
        guest.enable_rss()?;
        let peer = format!("{}:{PEER_PORT}", net.guest_ip);
        start_receiver(&mut guest, &peer, net.host_ip)?;
        let sender = SenderAgent::start(
            &net.ns,
            SenderOpts::new(exe)
                .peer(peer)
                .port_range(LAB_PORT_RANGE)
                .report_port(SRAP_PORT),
        )?;
        Ok(Self {
            sender,
            srap: exe.with_file_name("srap"),
            guest,
            net,
        })
    }

    /// The steered cgroup on the host side.
    pub fn cgroup(&self) -> &Path {
        self.sender.cgroup()
    }

    pub fn pin_dir(&self) -> &Path {
        self.sender.pin_dir()
    }

    /// The sender agent's output so far.
    pub fn sender_log(&self) -> String {
        self.sender.log().text()
    }

    /// The receiver agent's output so far (inside the guest).
    pub fn receiver_log(&mut self) -> String {
        self.guest.read_or_why("/tmp/receiver.log")
    }

    /// The receiver agent's status, as `srap status --once --json` prints it
    /// in the guest.
    pub fn status(&mut self) -> anyhow::Result<Status> {
        self.guest
            .srap_status(&format!("--control {GUEST_CONTROL}"))
    }

    /// Runs `workload` (words, with `{server}`, `{port}`, `{flows}`,
    /// `{duration}`) against `iperf3 -s` in the guest, steered when
    /// `steered`; judged by SRAP's observer and by the guest.
    pub fn run_workload(
        &mut self,
        workload: &[String],
        steered: bool,
        duration: u64,
    ) -> anyhow::Result<GuestRun> {
        let port = if steered { SRAP_PORT } else { KERNEL_PORT };
        start_iperf3_server(&mut self.guest, port)?;
        let before = truth::rx_queue_packets(&mut self.guest)?;
        let cgroup = steered.then(|| self.sender.cgroup().to_path_buf());
        let server = self.net.guest_ip.to_string();
        let mut command = client_via(
            &self.srap,
            &self.net.ns,
            workload,
            &server,
            port,
            cgroup.as_deref(),
        )?;
        let mut child = ChildGuard::spawn(command.stdout(Stdio::null()))?;
        let status = child.wait(Duration::from_secs(duration + 60))?;
        if !status.success() {
            bail!("the workload exited with {status}");
        }
        let after = truth::rx_queue_packets(&mut self.guest)?;
        let accepted = iperf3_result(&mut self.guest, port)?;
        let model = truth::device_model(&mut self.guest)?;
        let accepted = truth::guest_queues(&model, self.net, &accepted, |sport| (sport, port))?;
        let (srap, status) = self.srap_view(port)?;
        let rx_queue_packets = truth::delta(&before, &after);
        Ok(GuestRun {
            busy_queues: truth::busy_queues(&rx_queue_packets, accepted.len()),
            srap,
            rx_queue_packets,
            accepted,
            status,
        })
    }

    /// Runs rounds of 8 short steered flows (at most `rounds`) until the
    /// receiver agent's verdict on its description is `want`; the last
    /// status. Flows while steering is paused get kernel ports: with the
    /// sender's probe connections, they are what the receiver learns a
    /// hidden or misreported key from.
    pub fn drive_until(&mut self, want: LandingVerdict, rounds: u32) -> anyhow::Result<Status> {
        let small: Vec<String> = "iperf3 -c {server} -p {port} -P 8 -n 256K"
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let mut status = self.status()?;
        for _ in 0..rounds {
            if status.landings.verdict == want {
                break;
            }
            self.run_workload(&small, true, 2)?;
            status = self.status()?;
        }
        Ok(status)
    }

    /// The receiver agent's verdict on the flows toward `port`, sampled
    /// after the run (it samples every second).
    fn srap_view(&mut self, port: u16) -> anyhow::Result<(RunReport, Status)> {
        std::thread::sleep(Duration::from_millis(1500));
        let status = self.status()?;
        Ok((
            RunReport::from_status(&status, port, MIN_DATA_BYTES),
            status,
        ))
    }
}

/// `srap-agent receiver` in the guest, with real discovery (no `--rss`),
/// serving the sender at `sender` only (`--allow`: no key has to cross
/// the guest's console).
fn start_receiver(guest: &mut Guest, listen: &str, sender: Ipv4Addr) -> anyhow::Result<()> {
    guest.run(&format!(
        "srap-agent receiver --iface {GUEST_IFACE} --listen {listen} --allow {sender}/32 \
         --control {GUEST_CONTROL} > /tmp/receiver.log 2>&1 &"
    ))?;
    wait_in_guest(
        guest,
        &format!("test -S {GUEST_CONTROL}"),
        "the receiver agent's control socket",
    )
    .map_err(|err| {
        let log = guest.read("cat /tmp/receiver.log").unwrap_or_default();
        err.context(format!("the receiver agent's log in the guest:\n{log}"))
    })
}

fn start_iperf3_server(guest: &mut Guest, port: u16) -> anyhow::Result<()> {
    guest.run(&format!(
        "rm -f /tmp/iperf3-{port}.json; iperf3 -s -1 -J -p {port} > /tmp/iperf3-{port}.json 2>&1 &"
    ))?;
    wait_in_guest(
        guest,
        &format!("netstat -tln | grep -q ':{port} '"),
        "iperf3 -s in the guest",
    )
}

/// The accepted data streams' source ports, once `iperf3 -s -1` has
/// written its result and exited.
fn iperf3_result(guest: &mut Guest, port: u16) -> anyhow::Result<Vec<u16>> {
    let file = format!("/tmp/iperf3-{port}.json");
    wait_in_guest(
        guest,
        &format!("! netstat -tln | grep -q ':{port} ' && grep -q '\"end\"' {file}"),
        "the guest's iperf3 result",
    )?;
    truth::iperf3_accepted_ports(&guest.read(&format!("cat {file}"))?)
}

/// Polls `check` in the guest until it succeeds (up to 60 s: a debug
/// build's receiver agent loads its eBPF programs slowly under software
/// emulation on a busy machine).
fn wait_in_guest(guest: &mut Guest, check: &str, what: &str) -> anyhow::Result<()> {
    if !guest.poll_until(check, Duration::from_secs(60))? {
        bail!("{what} did not come up within 60 s");
    }
    Ok(())
}

/// `srap-lab --nic virtio|igb`.
/// The guest's image as `args` say (`--guest-files`, `--guest-kernel`,
/// `--guest-cache`), holding the `srap-agent` and `srap` built beside this binary.
pub(crate) fn prepare_image(args: &LabArgs) -> anyhow::Result<GuestImage> {
    let exe = agent_binary()?;
    let cache = match &args.guest_cache {
        Some(dir) => dir.clone(),
        None => GuestImage::default_cache(&exe),
    };
    let files = GuestFiles::locate(args.guest_files.as_deref(), &exe)?;
    GuestImage::prepare(&files, args.guest_kernel, &cache, &exe, &srap_binary()?)
}

pub fn run(args: &LabArgs, nic: GuestNic, queues: u32, flows: usize) -> anyhow::Result<()> {
    let shape = GuestShape::with_nic(nic, queues, args.smp)?;
    let image = prepare_image(args)?;
    let net = GuestNet::on(Subnet::take(SUBNET)?)?;
    let mut lab = VirtioLab::start(&net, &image, shape)?;
    if !args.json {
        let device = nic.device();
        println!(
            "lab up: QEMU guest ({}) with a {queues}-queue {device} (RSS computed by QEMU), \
             {} vCPUs; receiver agent in the guest on {}:{PEER_PORT}, sender agent following it\n",
            image.package, shape.cpus, net.guest_ip
        );
    }
    // Until the landings agree with the served description (a key the
    // driver hides or misreports is learned from them first), steering
    // waits: let it settle.
    let settled = lab.drive_until(LandingVerdict::Agreed, 8)?;
    if !args.json {
        println!(
            "receiver: description version {}, key {}{} ({}); landings {:?} ({} of {} on \
             the predicted queue){}\n",
            settled.rss_version,
            settled.learning.key_source,
            if settled.learning.source == KeySource::Learned {
                format!(", model {}", settled.learning.revision)
            } else {
                String::new()
            },
            settled.learning.confidence,
            settled.landings.verdict,
            settled.landings.matched,
            settled.landings.judged,
            if settled.learning.note.is_empty() {
                String::new()
            } else {
                format!("; learner: {}", settled.learning.note)
            }
        );
    }
    let words = workload_words(args, flows);
    let mut runs = Vec::new();
    for (title, steered) in [
        ("kernel-chosen source ports", false),
        ("SRAP-chosen source ports", true),
    ] {
        let run = lab
            .run_workload(&words, steered, args.duration)
            .map_err(|err| {
                // The error names the guest's logs: they must outlive it.
                let kept = lab.guest.keep_dir().display().to_string();
                err.context(format!(
                    "workload with {title} (the guest's console and QEMU's log are kept in {kept})"
                ))
            })?;
        if !args.json {
            println!("{}", run.render(title, args.duration as f64));
        }
        runs.push(run);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "nic": nic.driver(),
                "guest_kernel": image.package,
                "kernel": runs[0],
                "srap": runs[1]
            })
        );
    }
    Ok(())
}
