//! `srap-lab --nic virtio --direction pull`: the guest downloads. The
//! QEMU guest is the client: it runs the sender agent with `--steer local`
//! on its own virtio NIC (really discovered: key, table, queue → CPU), and
//! `iperf3 -c -R` under `srap exec`, so the data the host serves arrives on
//! the guest's NIC, hashed by QEMU over the reverse tuple. Each run is
//! judged by the guest itself — its per-queue `ethtool -S` counters, and
//! the ports the host's server accepted hashed with the key and table
//! `ethtool -x` shows — beside SRAP's own view (the sender agent's socket
//! hook, in the guest).

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::Serialize;
use srap_status::{SenderStatus, sender::LocalRow};

use srap_harness::{
    LAB_PORT_RANGE,
    guest::{GUEST_IFACE, Guest, GuestImage, GuestNet, GuestNic, GuestShape, truth},
    interrupt::interrupted,
    names::unique_name,
    programs::iperf3_server_with,
    subnet::Subnet,
};

use crate::{
    args::LabArgs,
    report::{Unjudged, require_judged},
    virtio::{self, prepare_image},
};

/// The sender agent's control socket and log, inside the guest.
const GUEST_SENDER_CONTROL: &str = "/tmp/sender.sock";
const GUEST_SENDER_LOG: &str = "/tmp/sender.log";
/// The guest's client's exit code, written when it is done.
const CLIENT_RC: &str = "/tmp/client.rc";
/// The guest's client's PID, and the file saying it is held (stopped).
const CLIENT_PID: &str = "/tmp/client.pid";
const CLIENT_HELD: &str = "/tmp/client.held";
/// How long the streams may take to be established and shown, held.
const HOLD_WITHIN: Duration = Duration::from_secs(120);
/// The steered cgroup inside the guest (below its cgroup2 mount).
pub const GUEST_CGROUP: &str = "srap";
const KERNEL_PORT: u16 = 5201;
const SRAP_PORT: u16 = 5202;

/// One download as the guest saw it, beside SRAP's view.
#[derive(Debug, Clone, Serialize)]
pub struct PullRun {
    /// The guest's sender agent: each steered stream's queue planned and
    /// seen by its socket hook (`None` for kernel ports: nothing watched).
    pub srap: Option<Vec<PlannedSeen>>,
    /// What the guest counted per receive queue during the run
    /// ([`truth::rx_queue_packets`]: `ethtool -S` packets, or interrupts).
    pub rx_queue_packets: Vec<u64>,
    /// Queues that carried at least an eighth of a flow's fair share.
    pub busy_queues: BTreeSet<u32>,
    /// The data streams' ports as the host's server accepted them, each
    /// with the queue the device's key and table give its reverse tuple.
    pub accepted: Vec<(u16, u32)>,
}

/// One steered connection in the guest agent's status.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PlannedSeen {
    pub port: u16,
    pub planned: Option<u32>,
    pub seen: Option<u32>,
}

impl PullRun {
    /// Distinct queues of the accepted streams, by the device's own config.
    pub fn distinct_queues(&self) -> usize {
        truth::distinct_queues(&self.accepted)
    }

    /// This run's verdict rests on every flow it opened: the host's
    /// server accepted at least `opened` streams and, for a steered run,
    /// the guest agent's view showed each accepted one with its queue
    /// planned and seen. Else [`Unjudged`], for the run titled `what`.
    pub fn require_judged(&self, what: &str, opened: usize) -> Result<(), Unjudged> {
        require_judged(
            &format!("{what}: the host's server"),
            opened,
            self.accepted.len(),
        )?;
        let Some(srap) = &self.srap else {
            return Ok(());
        };
        let judged = self
            .accepted
            .iter()
            .filter(|(port, _)| {
                srap.iter()
                    .any(|f| f.port == *port && f.planned.is_some() && f.seen.is_some())
            })
            .count();
        require_judged(
            &format!("{what}: the guest's sender agent's view"),
            self.accepted.len(),
            judged,
        )
    }

    pub fn render(&self, title: &str) -> String {
        let mut out = format!("{title}\n");
        let _ = writeln!(
            out,
            "  {:<8} {:>18} {:>18}",
            "port", "queue (device)", "SRAP planned/seen"
        );
        for (port, queue) in &self.accepted {
            let srap = self
                .srap
                .iter()
                .flatten()
                .find(|f| f.port == *port)
                .map_or_else(String::new, |f| {
                    let q = |q: Option<u32>| q.map_or("-".to_owned(), |q| q.to_string());
                    format!("{}/{}", q(f.planned), q(f.seen))
                });
            let _ = writeln!(out, "  {port:<8} {queue:>18} {srap:>18}");
        }
        let counts = truth::queue_counts(&self.rx_queue_packets);
        let _ = writeln!(out, "  per-queue rx counts  {counts}");
        let _ = writeln!(
            out,
            "  {} streams accepted, on {} distinct guest queues by the device's key and table; {} queues busy by the guest's counters",
            self.accepted.len(),
            self.distinct_queues(),
            self.busy_queues.len()
        );
        out
    }
}

/// The guest on `net` with the sender agent inside (`--steer local` on its
/// own NIC), the host's server beside the tap.
pub struct PullLab<'n> {
    pub guest: Guest,
    pub net: &'n GuestNet,
}

impl<'n> PullLab<'n> {
    /// Boots the guest, turns its RSS on and starts the sender agent in it,
    /// steering toward the host.
    pub fn start(net: &'n GuestNet, image: &GuestImage, shape: GuestShape) -> anyhow::Result<Self> {
        let mut lab = Self::boot(net, image, shape)?;
        lab.start_sender("")?;
        Ok(lab)
    }

    /// The guest booted with its RSS on, its sender agent not yet started
    /// ([`PullLab::start_sender`]): runs with kernel ports first measure
    /// a guest the agent does not touch.
    pub fn boot(net: &'n GuestNet, image: &GuestImage, shape: GuestShape) -> anyhow::Result<Self> {
        let mut guest = Guest::boot(net, image, shape)?;
        guest.enable_rss()?;
        Ok(Self { guest, net })
    }

    /// Starts the guest's sender agent (`--steer local` on its NIC, toward
    /// the host) with `extra` flags (`--local-placement reader`), and waits
    /// until it steers.
    pub fn start_sender(&mut self, extra: &str) -> anyhow::Result<()> {
        self.guest.run(&format!(
            "srap-agent sender --steer local --local-iface {GUEST_IFACE} --receiver {host} \
             --cgroup {GUEST_CGROUP} --control {GUEST_SENDER_CONTROL} \
             --port-range {LAB_PORT_RANGE} --interval 1 {extra} > {GUEST_SENDER_LOG} 2>&1 &",
            host = self.net.host_ip
        ))?;
        self.wait(
            &format!("grep -q '^steering active' {GUEST_SENDER_LOG}"),
            "the guest's sender agent",
            Duration::from_secs(60),
        )
    }

    /// The sender agent's output so far (inside the guest).
    pub fn sender_log(&mut self) -> String {
        self.guest.read_or_why(GUEST_SENDER_LOG)
    }

    /// The guest's sender agent's status.
    pub fn status(&mut self) -> anyhow::Result<SenderStatus> {
        self.guest
            .srap_status(&format!("--sender --control {GUEST_SENDER_CONTROL}"))
    }

    /// `flows` parallel downloads of `duration` s from the host's iperf3,
    /// under `srap exec` when `steered`; judged by the guest.
    pub fn download(
        &mut self,
        flows: usize,
        steered: bool,
        duration: u64,
    ) -> anyhow::Result<PullRun> {
        let port = if steered { SRAP_PORT } else { KERNEL_PORT };
        let report = std::env::temp_dir().join(format!("srap-pull-{}.json", unique_name("")));
        let _remove = RemoveOnDrop(&report);
        let mut server = iperf3_server_with(
            &self.net.ns,
            port,
            &["-J"],
            Stdio::from(std::fs::File::create(&report)?),
        )?;
        let before = truth::rx_queue_packets(&mut self.guest)?;
        // The agent lists open connections only: the streams are held open
        // (the client stopped) until its status has shown them, then let go.
        if steered {
            self.hold_streams(flows, port, duration)?;
        }
        self.start_client(&format!("-R -P {flows} -t {duration}"), port, steered)?;
        let srap = if steered {
            Some(self.steered_streams(flows)?)
        } else {
            None
        };
        self.client_done(Duration::from_secs(duration + 60))?;
        server
            .wait(Duration::from_secs(10))
            .context("the host's iperf3 -s")?;
        let after = truth::rx_queue_packets(&mut self.guest)?;
        let ports = truth::iperf3_accepted_ports(&std::fs::read_to_string(&report)?)?;
        let model = truth::device_model(&mut self.guest)?;
        // What the host sends goes from the server's port to the guest's.
        let accepted = truth::guest_queues(&model, self.net, &ports, |guest| (port, guest))?;
        let rx_queue_packets = truth::delta(&before, &after);
        Ok(PullRun {
            busy_queues: truth::busy_queues(&rx_queue_packets, accepted.len()),
            srap,
            rx_queue_packets,
            accepted,
        })
    }

    /// Starts `iperf3 -c HOST -p port {args}` in the guest, in the
    /// background, under `srap exec` when `steered`.
    fn start_client(&mut self, args: &str, port: u16, steered: bool) -> anyhow::Result<()> {
        let exec = if steered {
            format!("srap exec --cgroup {GUEST_CGROUP} -- ")
        } else {
            String::new()
        };
        // `srap exec` execs iperf3: the PID kept is the client's.
        self.guest.run(&format!(
            "rm -f /tmp/client.rc {CLIENT_PID} {CLIENT_HELD}; ({exec}iperf3 -c {host} -p {port} \
             {args} & echo $! > {CLIENT_PID}; wait $!; echo $? > /tmp/client.rc) \
             > /tmp/client.log 2>&1 &",
            host = self.net.host_ip
        ))?;
        Ok(())
    }

    /// Waits (up to `within`) for the guest's client to finish; an error
    /// when it failed.
    fn client_done(&mut self, within: Duration) -> anyhow::Result<()> {
        self.wait("test -e /tmp/client.rc", "the guest's iperf3 -c -R", within)?;
        let rc = self.guest.run("cat /tmp/client.rc")?;
        if rc.trim() != "0" {
            let log = self.guest.run("cat /tmp/client.log").unwrap_or_default();
            bail!("iperf3 -c -R in the guest exited with {}: {log}", rc.trim());
        }
        Ok(())
    }

    /// Rounds of short steered downloads (`iperf3 -c -R -P flows -n 256K`
    /// under `srap exec`, at most `rounds`) until two rounds in a row land
    /// where the guest's sender agent's key says, steering on, each under
    /// the description it began with: at once for a device that reports its
    /// key; for one that misreports or hides it, after learning it from its
    /// own landings (paused, the streams get the kernel's ports, which the
    /// learner learns from; then the steered ports teach it more, each newly
    /// learned key a new description the binder is re-planned with). The
    /// last status, agreeing or not (the caller judges it).
    pub fn drive_until_agreed(
        &mut self,
        flows: usize,
        rounds: usize,
    ) -> anyhow::Result<SenderStatus> {
        let mut agreeing = 0;
        let mut status = self.status()?;
        let version = |status: &SenderStatus| status.local.as_ref().map(|l| l.version);
        for _ in 0..rounds {
            let before = version(&status);
            let _server = iperf3_server_with(&self.net.ns, SRAP_PORT, &[], Stdio::null())?;
            self.start_client(&format!("-R -P {flows} -n 256K"), SRAP_PORT, true)?;
            self.client_done(Duration::from_secs(60))?;
            // The agent samples its landings every second.
            std::thread::sleep(Duration::from_millis(1500));
            status = self.status()?;
            // Settled: agreeing with the description the round began with
            // (a newly learned key re-plans the binder mid-round).
            let settled = version(&status) == before;
            agreeing = if settled && status.local.as_ref().is_some_and(landings_agree) {
                agreeing + 1
            } else {
                0
            };
            if agreeing == 2 || interrupted() {
                break;
            }
        }
        Ok(status)
    }

    /// Holds the next client's streams open until its status has been read
    /// ([`PullLab::steered_streams`]): the agent lists open connections
    /// only, and on a busy host a status read can take longer than the
    /// streams live. In the guest's background, started before the client:
    /// once the `flows` streams and the control connection to the host's
    /// `port` are established and have carried data for half of
    /// `duration`, the client is stopped (stopped, it closes nothing; the
    /// host's server blocks once the windows are full). Bounded: 60 s for
    /// the connections; a client already done is not stopped.
    fn hold_streams(&mut self, flows: usize, port: u16, duration: u64) -> anyhow::Result<()> {
        let remote = format!(
            "{:08X}:{port:04X}",
            u32::from_le_bytes(self.net.host_ip.octets())
        );
        self.guest.run(&format!(
            "rm -f {CLIENT_RC} {CLIENT_PID} {CLIENT_HELD} {CLIENT_HELD}.tried; (t=0; \
             until [ $(grep -c '{remote} 01 ' /proc/net/tcp) -gt {flows} ] || \
             test -e {CLIENT_RC} || [ $t -ge 600 ]; do sleep 0.1; t=$((t+1)); done; \
             sleep {half}; test -e {CLIENT_RC} || {{ kill -STOP $(cat {CLIENT_PID}) && \
             touch {CLIENT_HELD}; }}; touch {CLIENT_HELD}.tried) > /dev/null 2>&1 &",
            half = duration.div_ceil(2)
        ))?;
        Ok(())
    }

    /// The steered streams as the guest agent's status shows them while
    /// they are held open ([`PullLab::hold_streams`]): read until every one
    /// of the `flows` streams (and the control connection) shows its queue
    /// planned and seen, each stream as the newest read showed it; then the
    /// client is let go. A client that finished before it was held leaves
    /// what one read shows; streams no read showed are missing, and the
    /// caller's verdict names them.
    fn steered_streams(&mut self, flows: usize) -> anyhow::Result<Vec<PlannedSeen>> {
        let tried = format!("test -e {CLIENT_HELD}.tried");
        self.wait(&tried, "the guest's hold of its streams", HOLD_WITHIN)?;
        let held = self
            .guest
            .read(&format!("test -e {CLIENT_HELD} && echo held || echo done"))?
            .trim()
            == "held";
        let mut shown: Vec<SenderStatus> = Vec::new();
        let deadline = Instant::now() + HOLD_WITHIN;
        let streams = loop {
            // Newest first.
            shown.insert(0, self.status()?);
            let streams = streams_of(&shown);
            let judged = streams
                .iter()
                .filter(|s| s.planned.is_some() && s.seen.is_some())
                .count();
            if judged > flows || !held || Instant::now() >= deadline || interrupted() {
                break streams;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        if held {
            self.guest.run(&format!("kill -CONT $(cat {CLIENT_PID})"))?;
        }
        Ok(streams)
    }

    /// Polls `check` in the guest until it succeeds (up to `within`).
    fn wait(&mut self, check: &str, what: &str, within: Duration) -> anyhow::Result<()> {
        if !self.guest.poll_until(check, within)? {
            let log = self.sender_log();
            bail!("{what} did not come up within {within:?}; the guest's sender log:\n{log}");
        }
        Ok(())
    }
}

/// The steered connections of `samples` (newest first), one per source
/// port: from the newest sample that shows its queue seen, or else the
/// newest that shows it at all.
fn streams_of(samples: &[SenderStatus]) -> Vec<PlannedSeen> {
    let mut streams: Vec<PlannedSeen> = Vec::new();
    let rows = samples.iter().flat_map(|s| &s.flows).filter_map(|f| {
        Some(PlannedSeen {
            port: f.src?.port(),
            planned: f.local_queue_planned,
            seen: f.local_queue_seen,
        })
    });
    for row in rows {
        match streams.iter_mut().find(|s| s.port == row.port) {
            Some(kept) if kept.seen.is_none() && row.seen.is_some() => *kept = row,
            Some(_) => {}
            None => streams.push(row),
        }
    }
    streams
}

/// This host's NIC's landings agree with the key planned with (every one
/// tested), and local steering is on.
pub fn landings_agree(local: &LocalRow) -> bool {
    local
        .key
        .is_some_and(|k| k.confidence.tested > 0 && k.confidence.agreeing == k.confidence.tested)
        && local.verdict == srap_common::wire::LandingVerdict::Agreed
        && !local.paused
}

/// Removes a file when dropped.
struct RemoveOnDrop<'a>(&'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// `srap-lab --nic virtio --direction pull`.
pub fn run(args: &LabArgs, nic: GuestNic, queues: u32, flows: usize) -> anyhow::Result<()> {
    let shape = GuestShape::with_nic(nic, queues, args.smp)?;
    let image = prepare_image(args)?;
    let net = GuestNet::on(Subnet::take(virtio::SUBNET)?)?;
    let mut lab = PullLab::start(&net, &image, shape)?;
    if !args.json {
        println!(
            "lab up: QEMU guest ({}) with a {queues}-queue {} (RSS computed by QEMU), \
             {} vCPUs, downloading from the host ({}); sender agent in the guest with \
             --steer local --local-iface {GUEST_IFACE}\n",
            image.package,
            nic.device(),
            shape.cpus,
            net.host_ip
        );
    }
    // A key the driver misreports is learned from the first downloads'
    // landings before the runs (as the push lab does at the receiver).
    let status = lab.drive_until_agreed(8, 16)?;
    if !args.json
        && let Some(local) = &status.local
    {
        let key = local.key.map_or_else(String::new, |k| k.to_string());
        println!(
            "sender (guest): description version {}, {key}; landings {:?} ({} of {} on the \
             planned queue)\n",
            local.version, local.verdict, local.matched, local.judged
        );
    }
    let mut runs = Vec::new();
    for (title, steered) in [
        ("kernel-chosen source ports", false),
        ("SRAP-chosen source ports", true),
    ] {
        let run = lab.download(flows, steered, args.duration).map_err(|err| {
            let kept = lab.guest.keep_dir().display().to_string();
            err.context(format!(
                "download with {title} (the guest's console and QEMU's log are kept in {kept})"
            ))
        })?;
        if !args.json {
            println!("{}", run.render(title));
        }
        run.require_judged(title, flows)?;
        runs.push(run);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"nic": "virtio", "direction": "pull", "kernel": runs[0], "srap": runs[1]})
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use srap_status::sender::SenderFlowRow;

    use super::*;

    fn row(port: u16, seen: Option<u32>) -> SenderFlowRow {
        SenderFlowRow {
            src: Some(SocketAddr::from(([10, 0, 0, 2], port))),
            dst: Some(SocketAddr::from(([10, 0, 0, 1], SRAP_PORT))),
            local_queue_planned: Some(1),
            local_queue_seen: seen,
            ..SenderFlowRow::default()
        }
    }

    fn sample(flows: Vec<SenderFlowRow>) -> SenderStatus {
        SenderStatus {
            flows,
            ..SenderStatus::default()
        }
    }

    fn run(accepted: &[u16], srap: Option<Vec<PlannedSeen>>) -> PullRun {
        PullRun {
            srap,
            rx_queue_packets: Vec::new(),
            busy_queues: BTreeSet::new(),
            accepted: accepted.iter().map(|&p| (p, 1)).collect(),
        }
    }

    fn judged(port: u16) -> PlannedSeen {
        PlannedSeen {
            port,
            planned: Some(1),
            seen: Some(1),
        }
    }

    #[test]
    fn streams_outlive_the_samples_that_no_longer_show_them() {
        // Newest first: the last sample came after the streams closed.
        let samples = [
            sample(Vec::new()),
            sample(vec![row(10, Some(1)), row(11, None)]),
            sample(vec![row(11, Some(1)), row(12, Some(0))]),
        ];
        let streams = streams_of(&samples);
        let by_port = |p: u16| streams.iter().find(|s| s.port == p).map(|s| s.seen);
        assert_eq!(streams.len(), 3, "{streams:?}");
        assert_eq!(by_port(10), Some(Some(1)));
        // Not seen yet in the newest sample holding it: the older one saw it.
        assert_eq!(by_port(11), Some(Some(1)));
        assert_eq!(by_port(12), Some(Some(0)));
        assert!(streams_of(&[]).is_empty());
    }

    #[test]
    fn a_run_the_agent_showed_no_stream_of_has_no_verdict() {
        let err = run(&[10, 11], Some(Vec::new()))
            .require_judged("SRAP", 2)
            .unwrap_err();
        assert_eq!((err.opened, err.judged), (2, 0), "{err}");
        assert!(err.to_string().contains("sender agent's view"), "{err}");
    }

    #[test]
    fn a_short_run_has_no_verdict() {
        // One stream the agent never saw with its queue.
        let unseen = PlannedSeen {
            seen: None,
            ..judged(11)
        };
        let err = run(&[10, 11], Some(vec![judged(10), unseen]))
            .require_judged("SRAP", 2)
            .unwrap_err();
        assert_eq!((err.opened, err.judged), (2, 1));
        // The server accepted fewer streams than were opened.
        let err = run(&[10], Some(vec![judged(10)]))
            .require_judged("SRAP", 2)
            .unwrap_err();
        assert!(err.to_string().contains("host's server"), "{err}");
        // Nothing at all.
        assert!(run(&[], None).require_judged("kernel", 4).is_err());
    }

    #[test]
    fn a_whole_run_is_judged() {
        let whole = run(&[10, 11], Some(vec![judged(11), judged(10)]));
        assert_eq!(whole.require_judged("SRAP", 2), Ok(()));
        // Kernel ports: no agent view to judge, the server's count is.
        assert_eq!(run(&[10, 11], None).require_judged("kernel", 2), Ok(()));
    }
}
