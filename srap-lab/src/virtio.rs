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
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde::Serialize;
use srap_common::rss::KeySource;

use srap_harness::{
    LAB_PORT_RANGE, PEER_PORT, SenderAgent, SenderOpts,
    guest::{GUEST_IFACE, Guest, GuestFiles, GuestImage, GuestNet, GuestNic, GuestShape, truth},
    programs::{ChildGuard, agent_binary, client_via, srap_binary},
    subnet::Subnet,
};

use crate::{
    args::{LabArgs, flows_opened, workload_words},
    report::{MIN_DATA_BYTES, RunReport, Unjudged, require_judged},
};
use srap_common::wire::LandingVerdict;
use srap_status::Status;

/// The lab's own subnet (inside its namespace): 10.199.77.0/24.
pub(crate) const SUBNET: u8 = 77;
const KERNEL_PORT: u16 = 5201;
const SRAP_PORT: u16 = 5202;
/// Receiver samples [`VirtioLab::drive_until`] waits after a round for the
/// verdict it drives toward.
const SETTLE_SAMPLES: u32 = 3;
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
    /// The receiver agent's status behind `srap`, as the guest sampled it
    /// while the flows were active (their NIC hashes, say): the newest
    /// sample holding the most accepted flows, with every flow any sample
    /// held.
    pub status: Status,
    /// The guest's status samples behind `srap`: taken in all, and how
    /// many held a flow of the run (a view short of flows says which).
    pub samples_taken: u32,
    pub samples_holding: usize,
    /// Of those taken, how many failed, and the last failure's words.
    pub samples_failed: (u32, String),
    /// When the view was short: every sample's time and flows of the run.
    pub samples_timeline: Vec<String>,
}

impl GuestRun {
    /// Distinct queues of the accepted flows, by the device's own config.
    pub fn distinct_queues(&self) -> usize {
        truth::distinct_queues(&self.accepted)
    }

    /// This run's verdict rests on every flow the workload opened: the
    /// guest's server accepted at least `opened` streams, and the receiver
    /// agent's view judged each one it accepted. Else [`Unjudged`], for
    /// the run titled `what`.
    pub fn require_judged(&self, what: &str, opened: usize) -> Result<(), Unjudged> {
        require_judged(
            &format!("{what}: the guest's server"),
            opened,
            self.accepted.len(),
        )?;
        self.srap.require_all(
            &format!("{what}: the receiver agent's view"),
            self.accepted.len(),
        )
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
        if self.srap.flows.len() < self.accepted.len() {
            let _ = writeln!(
                out,
                "  SRAP's view is short of flows: {} status samples taken in the guest, {} of them \
                 holding a flow of the run, {} failed{}",
                self.samples_taken,
                self.samples_holding,
                self.samples_failed.0,
                if self.samples_failed.1.is_empty() {
                    String::new()
                } else {
                    format!(" (the last: {})", self.samples_failed.1.trim())
                }
            );
            for line in &self.samples_timeline {
                let _ = writeln!(out, "    {line}");
            }
        }
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
        // The receiver lists a flow only while it is active (a packet in
        // the last 5 s): its status is sampled in the guest beside the
        // flows, and judged once the workload is done.
        let samples = self
            .guest
            .sample_status(&format!("--control {GUEST_CONTROL}"))?;
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
        let ended_ms = self.guest_clock_ms()?;
        let after = truth::rx_queue_packets(&mut self.guest)?;
        let accepted = iperf3_result(&mut self.guest, port)?;
        let model = truth::device_model(&mut self.guest)?;
        let accepted = truth::guest_queues(&model, self.net, &accepted, |sport| (sport, port))?;
        // Enough when every accepted stream is judged (a row with the data
        // the verdict needs), not merely listed: a view that never gets
        // there keeps its timeline for the report.
        let closing = self.status_after(ended_ms)?;
        let sampled = samples.stop(&mut self.guest, &format!(":{port}\""), |samples| {
            let view = merged(&[closing.as_slice(), samples].concat(), Status::default());
            judged(port, &accepted, &view) == accepted.len()
        })?;
        let views = [closing.as_slice(), &sampled.samples].concat();
        let closing = closing.map(|c| (c.unix_ms, rows_toward(&c, port)));
        let (srap, status) = srap_view(&views, port, &accepted);
        let rx_queue_packets = truth::delta(&before, &after);
        Ok(GuestRun {
            busy_queues: truth::busy_queues(&rx_queue_packets, accepted.len()),
            srap,
            rx_queue_packets,
            accepted,
            status,
            samples_taken: sampled.taken,
            samples_holding: sampled.holding,
            samples_failed: sampled.failed,
            samples_timeline: with_closing(sampled.timeline, closing.as_ref()),
        })
    }

    /// The guest's wall clock in ms, rounded up to its next whole second
    /// (busybox `date` has no sub-second field).
    fn guest_clock_ms(&mut self) -> anyhow::Result<u64> {
        let text = self.guest.read("date +%s")?;
        let secs: u64 = text
            .trim()
            .parse()
            .with_context(|| format!("the guest's `date +%s` said {text:?}"))?;
        Ok((secs + 1) * 1_000)
    }

    /// The receiver agent's first snapshot taken after `after_ms` (the
    /// guest's clock), as one sample (none if it took no new one within
    /// [`SETTLE_SAMPLES`] intervals and 30 s). A loaded guest's agent
    /// snapshots seconds apart, and a short workload may send its data
    /// between two of them: the snapshot after the workload ended holds
    /// each flow with all its bytes (a closed flow stays listed with its
    /// final count for `idle_after`).
    fn status_after(&mut self, after_ms: u64) -> anyhow::Result<Option<Status>> {
        let start = Instant::now();
        let mut status = self.status()?;
        let interval = Duration::from_millis(status.interval_ms.clamp(100, 5_000));
        let patience = (interval * (SETTLE_SAMPLES + 1)).min(Duration::from_secs(30));
        while status.unix_ms < after_ms {
            if start.elapsed() > patience {
                tracing::warn!(
                    "the receiver agent took no snapshot after the workload within {patience:?}"
                );
                return Ok(None);
            }
            std::thread::sleep(interval / 2);
            status = self.status()?;
        }
        Ok(Some(status))
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
            self.round(&small)?;
            status = self.settle(want)?;
        }
        Ok(status)
    }

    /// The receiver's status once its verdict is `want`, or after
    /// [`SETTLE_SAMPLES`] of its samples: the judge sees a round's flows
    /// at its next sample, so a verdict read at once after the round lags
    /// it by up to one interval.
    fn settle(&mut self, want: LandingVerdict) -> anyhow::Result<Status> {
        let mut status = self.status()?;
        let interval = Duration::from_millis(status.interval_ms.clamp(100, 5_000));
        for _ in 0..SETTLE_SAMPLES {
            if status.landings.verdict == want {
                break;
            }
            std::thread::sleep(interval);
            status = self.status()?;
        }
        Ok(status)
    }

    /// One round of [`VirtioLab::drive_until`]: `workload` steered, to its
    /// end and the guest's server's, judged by the receiver agent alone
    /// (its verdict outlives the flows; nothing else is read).
    fn round(&mut self, workload: &[String]) -> anyhow::Result<()> {
        start_iperf3_server(&mut self.guest, SRAP_PORT)?;
        let server = self.net.guest_ip.to_string();
        let cgroup = self.sender.cgroup().to_path_buf();
        let mut command = client_via(
            &self.srap,
            &self.net.ns,
            workload,
            &server,
            SRAP_PORT,
            Some(&cgroup),
        )?;
        let mut child = ChildGuard::spawn(command.stdout(Stdio::null()))?;
        let status = child.wait(Duration::from_secs(60))?;
        if !status.success() {
            bail!("the workload exited with {status}");
        }
        iperf3_result(&mut self.guest, SRAP_PORT)?;
        Ok(())
    }
}

/// The receiver agent's verdict on the flows toward `port`, from its
/// status as the guest sampled it while they ran
/// ([`Guest::sample_status`], newest first): every flow as the newest
/// sample that held it showed it. The status beside it is the newest
/// sample holding the most accepted streams, its flows those merged rows.
fn srap_view(samples: &[Status], port: u16, accepted: &[(u16, u32)]) -> (RunReport, Status) {
    let newest_fullest = samples
        .iter()
        .rev()
        .max_by_key(|s| held(port, accepted, s))
        .cloned()
        .unwrap_or_default();
    let status = merged(samples, newest_fullest);
    (
        RunReport::from_status(&status, port, MIN_DATA_BYTES),
        status,
    )
}

/// How many of the `accepted` streams toward `port` `status` holds.
fn held(port: u16, accepted: &[(u16, u32)], status: &Status) -> usize {
    accepted
        .iter()
        .filter(|(sport, _)| {
            status
                .flows
                .iter()
                .any(|f| f.src.port() == *sport && f.dst.port() == port)
        })
        .count()
}

/// A short view's `timeline`, ended by the snapshot read after the
/// workload (its time and rows toward the port) or by its absence.
fn with_closing(mut timeline: Vec<String>, closing: Option<&(u64, String)>) -> Vec<String> {
    if timeline.is_empty() {
        return timeline;
    }
    timeline.push(match closing {
        Some((unix_ms, rows)) => format!("after the workload, at unix ms {unix_ms}: [{rows}]"),
        None => "after the workload: the agent took no new snapshot".to_owned(),
    });
    timeline
}

/// `status`'s rows toward `port`: source, bytes and packets of each.
fn rows_toward(status: &Status, port: u16) -> String {
    status
        .flows
        .iter()
        .filter(|f| f.dst.port() == port)
        .map(|f| format!("{} {} bytes {} packets", f.src, f.bytes, f.packets))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many of the `accepted` streams toward `port` `status` holds with
/// the data a verdict needs ([`MIN_DATA_BYTES`]).
fn judged(port: u16, accepted: &[(u16, u32)], status: &Status) -> usize {
    accepted
        .iter()
        .filter(|(sport, _)| {
            status.flows.iter().any(|f| {
                f.src.port() == *sport && f.dst.port() == port && f.bytes >= MIN_DATA_BYTES
            })
        })
        .count()
}

/// `base` with its flows replaced by every flow of `samples` (newest
/// first), each as the newest sample that held it showed it.
fn merged(samples: &[Status], mut base: Status) -> Status {
    base.flows.clear();
    for flow in samples.iter().flat_map(|s| &s.flows) {
        if !base
            .flows
            .iter()
            .any(|f| f.src == flow.src && f.dst == flow.dst)
        {
            base.flows.push(flow.clone());
        }
    }
    base
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
        run.require_judged(title, flows_opened(args, flows))?;
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use srap_status::FlowRow;

    use super::*;

    fn flow(port: u16, bytes: u64, queue: Option<u32>) -> FlowRow {
        FlowRow {
            src: SocketAddr::from(([10, 0, 0, 1], port)),
            dst: SocketAddr::from(([10, 0, 0, 2], SRAP_PORT)),
            queue,
            cpu: 0,
            rss_cpu: None,
            predicted_queue: queue,
            predicted_cpu: None,
            planned_cpu: None,
            gbps: 0.0,
            rate_cov: None,
            packets: 1,
            bytes,
            moves: 0,
            agent_link: false,
            nic_hash: None,
            nic_hash_agrees: None,
        }
    }

    fn sample(flows: Vec<FlowRow>) -> Status {
        Status {
            flows,
            ..Status::default()
        }
    }

    #[test]
    fn each_flow_is_kept_as_the_newest_sample_showed_it() {
        // Newest first: the flows went idle before the last sample.
        let samples = [
            sample(Vec::new()),
            sample(vec![flow(10, 3 << 20, Some(1))]),
            sample(vec![flow(10, 1 << 20, Some(1)), flow(11, 2 << 20, Some(2))]),
        ];
        let status = merged(&samples, Status::default());
        let bytes: Vec<(u16, u64)> = status
            .flows
            .iter()
            .map(|f| (f.src.port(), f.bytes))
            .collect();
        assert_eq!(bytes, [(10, 3 << 20), (11, 2 << 20)]);
        assert!(merged(&[], Status::default()).flows.is_empty());
    }

    fn guest_run(accepted: &[u16], seen: &[u16]) -> GuestRun {
        let status = sample(
            seen.iter()
                .zip(0..)
                .map(|(&p, q)| flow(p, 2 << 20, Some(q)))
                .collect(),
        );
        GuestRun {
            srap: RunReport::from_status(&status, SRAP_PORT, MIN_DATA_BYTES),
            rx_queue_packets: Vec::new(),
            busy_queues: BTreeSet::new(),
            accepted: accepted.iter().map(|&p| (p, 0)).collect(),
            status,
            samples_taken: 6,
            samples_holding: usize::from(!seen.is_empty()),
            samples_failed: (0, String::new()),
            samples_timeline: vec![
                "sample 0 at unix ms 1: 0 active flows; toward the port: []".into(),
            ],
        }
    }

    #[test]
    fn a_view_short_of_flows_says_what_the_samples_held() {
        let text = guest_run(&[10, 11], &[]).render("SRAP", 1.0);
        assert!(
            text.contains(
                "6 status samples taken in the guest, 0 of them holding a flow of the run, 0 failed"
            ),
            "{text}"
        );
        let text = guest_run(&[10], &[10]).render("SRAP", 1.0);
        assert!(!text.contains("status samples taken"), "{text}");
    }

    #[test]
    fn a_run_judged_on_fewer_flows_than_it_opened_has_no_verdict() {
        // The receiver's view read after the flows had gone: nothing.
        let err = guest_run(&[10, 11, 12, 13], &[])
            .require_judged("SRAP", 4)
            .unwrap_err();
        assert_eq!((err.opened, err.judged), (4, 0), "{err}");
        let err = guest_run(&[10, 11, 12, 13], &[10, 11])
            .require_judged("SRAP", 4)
            .unwrap_err();
        assert_eq!((err.opened, err.judged), (4, 2), "{err}");
        // The guest's server accepted fewer than were opened.
        let err = guest_run(&[10], &[10])
            .require_judged("SRAP", 4)
            .unwrap_err();
        assert!(err.to_string().contains("guest's server"), "{err}");
        assert_eq!(
            guest_run(&[10, 11], &[11, 10]).require_judged("SRAP", 2),
            Ok(())
        );
    }
}
