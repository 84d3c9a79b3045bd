//! A receiver with two NICs: the two-NIC guest of [`super::numa`] as the
//! receiver, each NIC on its own tap and subnet of the namespace, the
//! receiver agent in it over both NICs (`--iface` twice) and the sender
//! agent in the namespace, following it by the first NIC's address
//! ([`TwoNicReceiver`]). A round is one `iperf3 -c` of several streams from
//! the namespace to the FIRST NIC's address, against `iperf3 -s` in the
//! guest on the wildcard address (or bound to the first address), steered
//! or with the kernel's ports ([`TwoNicReceiver::round`]).
//!
//! What a round holds is the ground truth, never SRAP's report: each stream
//! as the guest's server accepted it (the address it accepted it on, hence
//! the NIC; the bytes it received), the queue that NIC's own key and table
//! give its tuple, what the client's `getpeername()` said for it (iperf3's
//! `remote_host`), the NICs' own `rx_bytes` and per-queue packets, and the
//! throughput the server measured.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::IpAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail};
use srap_common::rss::{FlowTuple, RssModel};

use super::{
    image::GuestImage,
    numa::{Counters, NODES, NumaGuest, NumaShape},
    qemu::GuestNet,
    truth,
};
use crate::{
    agent::{LAB_PORT_RANGE, PEER_PORT, SenderAgent, SenderOpts},
    programs::{ChildGuard, client_via},
};

const GUEST_CONTROL: &str = "/tmp/receiver.sock";
const GUEST_LOG: &str = "/tmp/receiver.log";
/// A NIC's counter may exceed its streams' payload (headers, the agents'
/// session) but must hold at least this share of it.
const PAYLOAD_SHARE: f64 = 0.9;
/// A NIC that carried no stream may count this much (ARP, the session).
const IDLE_BYTES: u64 = 256 * 1024;
/// How long the guest's server may take to write its result once the
/// client has ended (a loaded 2-core host runs the guest slowly).
const SERVER_END: Duration = Duration::from_secs(90);
/// How long the sender may take to learn of a new listener: the
/// receiver's report (once a tick) and the sender's status (once a second).
const LISTENER_KNOWN: Duration = Duration::from_secs(10);

/// One stream as the guest's server accepted it.
#[derive(Debug, Clone)]
pub struct AcceptedStream {
    /// The client's source port.
    pub port: u16,
    /// The guest address that accepted it, and that NIC's index.
    pub local: IpAddr,
    pub nic: Option<usize>,
    /// The queue the NIC's key and table give its tuple.
    pub queue: Option<u32>,
    /// The CPU that queue's interrupt runs on (pinned, and checked to have
    /// moved there, when the guest booted).
    pub cpu: Option<u32>,
    /// Bytes the server received on it.
    pub bytes: u64,
    /// What the client's `getpeername()` said (iperf3's `remote_host`).
    pub peer_seen: Option<IpAddr>,
}

/// One transfer's streams, the guest's counters over it, and what the
/// server measured.
#[derive(Debug, Clone)]
pub struct ReceiverRound {
    pub title: String,
    pub streams: Vec<AcceptedStream>,
    pub counters: Counters,
    /// The server's own `sum_received` rate, bits per second.
    pub received_bps: f64,
}

impl ReceiverRound {
    /// Streams accepted through NIC `nic`.
    pub fn through(&self, nic: usize) -> usize {
        self.streams.iter().filter(|s| s.nic == Some(nic)).count()
    }

    /// Payload the server received on streams through `nic`.
    pub fn payload_through(&self, nic: usize) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.nic == Some(nic))
            .map(|s| s.bytes)
            .sum()
    }

    /// NIC `nic`'s own `rx_bytes` over the round.
    pub fn rx_bytes(&self, nic: usize) -> u64 {
        self.counters.nics.get(nic).map_or(0, |c| c.rx_bytes)
    }

    /// The distinct (NIC, CPU) pairs the streams sit on: the NIC they
    /// entered by, the CPU its queue for their tuple interrupts.
    pub fn pairs(&self) -> BTreeSet<(usize, u32)> {
        self.streams
            .iter()
            .filter_map(|s| s.nic.zip(s.cpu))
            .collect()
    }

    /// The distinct receiver CPUs the streams sit on, whichever NIC.
    pub fn cpus(&self) -> BTreeSet<u32> {
        self.streams.iter().filter_map(|s| s.cpu).collect()
    }

    /// Streams whose `getpeername()` was not `asked`.
    pub fn peers_not(&self, asked: IpAddr) -> Vec<&AcceptedStream> {
        self.streams
            .iter()
            .filter(|s| s.peer_seen != Some(asked))
            .collect()
    }

    /// What the NICs' own counters contradict: a NIC short of its streams'
    /// payload, one without a stream that counted traffic, or busy queues
    /// other than those its streams' tuples hash to.
    pub fn judge_counters(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        for (nic, counters) in self.counters.nics.iter().enumerate() {
            let (payload, rx) = (self.payload_through(nic), self.rx_bytes(nic));
            if payload == 0 && rx > IDLE_BYTES {
                wrong.push(format!(
                    "NIC {nic} carried no stream but counted {rx} bytes"
                ));
            }
            if (rx as f64) < payload as f64 * PAYLOAD_SHARE {
                wrong.push(format!(
                    "NIC {nic} counted {rx} bytes for its streams' {payload}"
                ));
            }
            let predicted: BTreeSet<u32> = self
                .streams
                .iter()
                .filter(|s| s.nic == Some(nic))
                .filter_map(|s| s.queue)
                .collect();
            let busy = truth::busy_queues(&counters.rx_queue_packets, self.through(nic));
            if self.through(nic) > 0 && busy != predicted {
                wrong.push(format!(
                    "NIC {nic}: queues {busy:?} busy by its own counters, {predicted:?} by its key and table"
                ));
            }
        }
        wrong
    }

    /// The round as a table: per NIC, then per stream.
    pub fn render(&self, numa: &NumaGuest) -> String {
        let mut out = format!(
            "{} ({:.0} Mbit/s at the server)\n",
            self.title,
            self.received_bps / 1e6
        );
        for (i, nic) in numa.nics.iter().enumerate() {
            let queues = self
                .counters
                .nics
                .get(i)
                .map_or(String::new(), |c| truth::queue_counts(&c.rx_queue_packets));
            let _ = writeln!(
                out,
                "  NIC {i} {} ({}): {} streams, rx_bytes {:.1} MB, their payload {:.1} MB, rx packets {queues}",
                nic.name,
                nic.guest_ip,
                self.through(i),
                self.rx_bytes(i) as f64 / 1e6,
                self.payload_through(i) as f64 / 1e6,
            );
        }
        let _ = writeln!(
            out,
            "  distinct (NIC, CPU) pairs {}/{}, CPUs {}; RPS-steered packets {}",
            self.pairs().len(),
            self.streams.len(),
            self.cpus().len(),
            self.counters.received_rps
        );
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        for s in &self.streams {
            let _ = writeln!(
                out,
                "  port {:>5} accepted on {:<15} NIC {:>2} queue {:>2} CPU {:>2} {:>10} bytes, getpeername {}",
                s.port,
                s.local,
                opt(s.nic.map(|n| n.to_string())),
                opt(s.queue.map(|q| q.to_string())),
                opt(s.cpu.map(|c| c.to_string())),
                s.bytes,
                opt(s.peer_seen.map(|p| p.to_string()))
            );
        }
        out
    }
}

/// How a round runs.
#[derive(Debug, Clone, Copy)]
pub struct RoundSpec<'a> {
    pub title: &'a str,
    /// Under `srap exec` in the sender agent's cgroup, or the kernel's ports.
    pub steered: bool,
    /// The server's port (a fresh one per round).
    pub port: u16,
    /// The server listens on the first NIC's address only.
    pub bind_first: bool,
    pub streams: usize,
    pub seconds: u64,
}

/// An iperf3 client run from the namespace ([`TwoNicReceiver::spawn_client`]).
#[derive(Debug, Clone, Copy)]
pub struct ClientRun<'a> {
    /// The command before `-c`: `iperf3`, or a wrapper of it (`mptcpize run
    /// iperf3`).
    pub program: &'a str,
    pub port: u16,
    pub streams: usize,
    pub seconds: u64,
    /// Under `srap exec` in the sender agent's cgroup, or the kernel's ports.
    pub steered: bool,
}

/// A running iperf3 client. Its JSON goes to a file of its own: through a
/// pipe read only after the exit, its size could fill the pipe and stall
/// iperf3. The file goes when this drops; the process too, by its guard.
pub struct IperfClient {
    child: ChildGuard,
    log: PathBuf,
    program: String,
}

impl IperfClient {
    /// Whether the client has exited.
    pub fn exited(&mut self) -> bool {
        self.child.exited()
    }

    /// Waits up to `within` for the client's end; its JSON output, or why
    /// it failed with that output.
    pub fn finish(mut self, within: Duration) -> anyhow::Result<String> {
        let status = self.child.wait(within)?;
        let json = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !status.success() {
            bail!("{} -c exited with {status}: {json}", self.program);
        }
        Ok(json)
    }
}

impl Drop for IperfClient {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The two-NIC receiver guest, its agent, and the sender agent in the
/// namespace. Field order is drop order: the sender (detached) first, then
/// the guest (QEMU killed by PID); the namespace and its taps last.
pub struct TwoNicReceiver {
    sender: SenderAgent,
    srap: PathBuf,
    pub numa: NumaGuest,
    /// Each NIC's RSS as the device hashes (its own `ethtool -x`).
    pub models: Vec<RssModel>,
    pub net: GuestNet,
}

impl TwoNicReceiver {
    /// Boots the guest on a namespace of its own, starts the receiver agent
    /// over both NICs and the sender agent (`agent`, with `sender_args`)
    /// following it by NIC 0's address; `srap` is the `srap` binary for
    /// `srap exec`.
    pub fn start(
        image: &GuestImage,
        agent: &Path,
        srap: &Path,
        sender_args: &[&str],
    ) -> anyhow::Result<Self> {
        let net = GuestNet::per_node(NODES)?;
        let mut numa = NumaGuest::boot(&net, image, NumaShape::RECEIVER)?;
        let models = numa
            .names()
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
            .iter()
            .map(|name| truth::device_model_of(&mut numa.guest, name))
            .collect::<anyhow::Result<Vec<_>>>()?;
        start_receiver(&mut numa)?;
        let first = numa.nics[0].guest_ip;
        let sender = SenderAgent::start(
            &net.ns,
            SenderOpts::new(agent)
                .peer(format!("{first}:{PEER_PORT}"))
                .port_range(LAB_PORT_RANGE)
                .args(sender_args.iter().copied()),
        )?;
        Ok(Self {
            sender,
            srap: srap.to_path_buf(),
            numa,
            models,
            net,
        })
    }

    /// The address every round's client asks for: NIC 0's.
    pub fn asked(&self) -> IpAddr {
        IpAddr::V4(self.numa.nics[0].guest_ip)
    }

    /// One round as `spec` says, judged by the guest and the server.
    pub fn round(&mut self, spec: &RoundSpec<'_>) -> anyhow::Result<ReceiverRound> {
        let port = spec.port;
        let bound = if spec.bind_first {
            format!(" -B {}", self.asked())
        } else {
            String::new()
        };
        self.numa.guest.run(&format!(
            "rm -f /tmp/iperf3-{port}.json; iperf3 -s -1 -J -p {port}{bound} > /tmp/iperf3-{port}.json 2>&1 &"
        ))?;
        let listening = format!("netstat -tln | grep -q ':{port} '");
        if !self
            .numa
            .guest
            .poll_until(&listening, Duration::from_secs(30))?
        {
            bail!("iperf3 -s did not listen on port {port} in the guest");
        }
        if spec.steered {
            let accepting = if spec.bind_first {
                1
            } else {
                self.numa.nics.len()
            };
            self.wait_listener_known(port, accepting)?;
        }
        let before = self.numa.counters()?;
        let client = self.client(spec)?;
        let file = format!("/tmp/iperf3-{port}.json");
        let done = format!("! netstat -tln | grep -q ':{port} ' && grep -q '\"end\"' {file}");
        if !self.numa.guest.poll_until(&done, SERVER_END)? {
            let sockets = self
                .numa
                .guest
                .read(&format!("netstat -tn | grep ':{port} '"))
                .unwrap_or_default();
            bail!(
                "the guest's iperf3 wrote no result for port {port} within {SERVER_END:?} after \
                 the client ended; its sockets:\n{sockets}\nits output:\n{}",
                self.numa.guest.read_or_why(&file)
            );
        }
        let after = self.numa.counters()?;
        let server = self.numa.guest.read(&format!("cat {file}"))?;
        Ok(ReceiverRound {
            title: spec.title.into(),
            streams: self.streams(&server, &client, port)?,
            counters: after.since(&before),
            received_bps: truth::iperf3_received_bps(&server)?,
        })
    }

    /// Waits until the sender agent knows the guest's new listener on
    /// `port` accepts on `accepting` addresses (the receiver reports its
    /// listeners as they come, within its tick; the sender spreads a port
    /// only once it is reported): a round started before would judge the
    /// report's timing, not the spreading.
    pub fn wait_listener_known(&self, port: u16, accepting: usize) -> anyhow::Result<()> {
        let known = || {
            self.sender.status().is_ok_and(|status| {
                status.receivers.iter().any(|r| {
                    r.ports
                        .iter()
                        .any(|l| l.port == port && l.addrs.len() == accepting)
                })
            })
        };
        let deadline = std::time::Instant::now() + LISTENER_KNOWN;
        while !known() {
            if std::time::Instant::now() > deadline {
                bail!(
                    "the sender agent did not learn within {LISTENER_KNOWN:?} that port {port} is \
                     accepted on {accepting} of the guest's addresses"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Runs the client to its end; its JSON output.
    fn client(&self, spec: &RoundSpec<'_>) -> anyhow::Result<String> {
        let run = ClientRun {
            program: "iperf3",
            port: spec.port,
            streams: spec.streams,
            seconds: spec.seconds,
            steered: spec.steered,
        };
        self.spawn_client(&run)?
            .finish(Duration::from_secs(spec.seconds + 60))
    }

    /// Starts `run`'s client in the namespace toward the address asked
    /// for, under `srap exec` in the sender agent's cgroup when steered.
    pub fn spawn_client(&self, run: &ClientRun<'_>) -> anyhow::Result<IperfClient> {
        let log = std::env::temp_dir().join(format!(
            "srap-receiver-nics-{}-{}.json",
            std::process::id(),
            run.port
        ));
        let _ = std::fs::remove_file(&log);
        let workload: Vec<String> = format!(
            "{} -c {{server}} -p {{port}} -P {} -t {} -J --logfile {}",
            run.program,
            run.streams,
            run.seconds,
            log.display()
        )
        .split_whitespace()
        .map(String::from)
        .collect();
        let cgroup = run.steered.then(|| self.sender.cgroup().to_path_buf());
        let mut command = client_via(
            &self.srap,
            &self.net.ns,
            &workload,
            &self.asked().to_string(),
            run.port,
            cgroup.as_deref(),
        )?;
        Ok(IperfClient {
            child: ChildGuard::spawn(command.stdout(Stdio::null()))?,
            log,
            program: run.program.to_owned(),
        })
    }

    /// The server's accepted streams, each with its NIC, its queue by that
    /// NIC's model, its bytes, and the client's `getpeername()` for it.
    fn streams(
        &self,
        server: &str,
        client: &str,
        port: u16,
    ) -> anyhow::Result<Vec<AcceptedStream>> {
        let seen = truth::iperf3_accepted_streams(client).context("the client's iperf3 -J")?;
        truth::iperf3_accepted_streams(server)
            .context("the guest server's iperf3 -J")?
            .into_iter()
            .map(|a| {
                let nic = self
                    .numa
                    .nics
                    .iter()
                    .position(|n| IpAddr::V4(n.guest_ip) == a.local_host);
                let queue = match nic {
                    Some(i) => {
                        let tuple =
                            FlowTuple::new(a.remote_host, a.remote_port, a.local_host, port)?;
                        Some(self.models[i].landing(&tuple).queue)
                    }
                    None => None,
                };
                let cpu = nic.zip(queue).and_then(|(i, q)| {
                    let nic = self.numa.nics.get(i)?;
                    nic.queue_cpus.get(q as usize).copied()
                });
                let peer_seen = seen
                    .iter()
                    .find(|c| c.local_port == a.remote_port)
                    .map(|c| c.remote_host);
                Ok(AcceptedStream {
                    port: a.remote_port,
                    local: a.local_host,
                    nic,
                    queue,
                    cpu,
                    bytes: a.bytes,
                    peer_seen,
                })
            })
            .collect()
    }

    /// The sender agent in the namespace (its cgroup, status, counters).
    pub fn sender(&self) -> &SenderAgent {
        &self.sender
    }

    /// The `srap` binary, for `srap exec` into the sender's cgroup.
    pub fn srap(&self) -> &Path {
        &self.srap
    }

    /// Both agents' logs, for a failure's report.
    pub fn logs(&mut self) -> String {
        format!(
            "the sender agent's log:\n{}\nthe receiver agent's log (in the guest):\n{}",
            self.sender.log().text(),
            self.numa.guest.read_or_why(GUEST_LOG)
        )
    }
}

/// `srap-agent receiver` in the guest over both NICs, listening on NIC 0's
/// address and serving the namespace's addresses only (`--allow`: no key
/// has to cross the guest's console).
fn start_receiver(numa: &mut NumaGuest) -> anyhow::Result<()> {
    let ifaces: String = numa
        .names()
        .iter()
        .map(|n| format!("--iface {n} "))
        .collect();
    let allow: String = numa
        .nics
        .iter()
        .map(|n| format!("--allow {}/32 ", n.host_ip))
        .collect();
    let first = numa.nics[0].guest_ip;
    numa.guest.run(&format!(
        "srap-agent receiver {ifaces}--listen {first}:{PEER_PORT} {allow}\
         --control {GUEST_CONTROL} > {GUEST_LOG} 2>&1 &"
    ))?;
    if !numa
        .guest
        .poll_until(&format!("test -S {GUEST_CONTROL}"), Duration::from_secs(60))?
    {
        bail!(
            "the receiver agent did not come up in the guest within 60 s; its log:\n{}",
            numa.guest.read_or_why(GUEST_LOG)
        );
    }
    Ok(())
}
