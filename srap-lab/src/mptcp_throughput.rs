//! What steering every MPTCP subflow buys (`srap-lab --experiment mptcp`):
//! the veth lab's two namespaces joined by a second link, the RSS-NIC
//! emulator and `--queue-rate` on the receiver side of both (flows on one
//! receive queue share its rate, as flows on one core share it), each link
//! capped too (`--nic-rate`), and MPTCP on both hosts as a user sets it up:
//! the sender's second address a `subflow` endpoint, routed out of the
//! second link by its source. `--flows` MPTCP connections, each a subflow
//! per link, carry equal bulk data, trial after trial with the kernel's
//! ports and with the sender agent's (the connections opened in its cgroup;
//! the second subflows, which the kernel's path manager opens, steered at
//! their bind), the two taking turns.
//!
//! Nothing of the verdict is SRAP's word: the aggregate is what the
//! receiving sink read over its first to last byte, and each trial's
//! placement is the subflows the receiver's kernel lists (`ss -tn` on the
//! server's port, the link told by the peer's address), hashed with the
//! emulator's key as the other experiments judge placement.
//!
//! The defaults (4 connections, 8 queues a link, 50 Mbit/s a queue, links
//! of 4 × 50 Mbit/s, 5 s of data) make placement the limit: the ideal is
//! 8 subflows × 50 = 400 Mbit/s, well below what the throughput
//! experiment carries on a small machine, so a trial is slower only where
//! subflows share a queue; the link cap is what one full queue per
//! connection needs, so it binds only on a link whose subflows all have
//! queues of their own. 8 queues for 8 subflows is a small receiver whose
//! cores SRAP must fill exactly, where the kernel's ports leave both links
//! free of collisions in only (8·7·6·5 / 8⁴)² ≈ 17 % of trials. The data
//! is equal per connection and timed from the first byte to the last, so a
//! trial with a shared queue loses more than that queue's half: the
//! connections on it finish last, alone. Both links' emulators take the
//! receiver's one description (the agent plans CPUs, and on this receiver
//! queue q is CPU q on either NIC); each link's queues are capped on their
//! own ([`LinkShaper`]), so a kernel subflow sharing CPU q with one on the
//! other link is not slowed here as it would be on a real receiver: the
//! kernel's side is, if anything, flattered. What a default run takes and
//! gives: docs/lab.md.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream},
    ops::ControlFlow,
    path::Path,
    process::Command,
    sync::{Arc, Barrier},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use srap_common::rss::RssModel;
use srap_harness::{
    InCgroup, Subnet, command,
    emulator::Emulator,
    interrupt::interrupted,
    landings, poll_until,
    veth::{MptcpEndpoint, VethConfig, VethEnd, link},
};

use crate::{
    agents::LabAgents,
    capacity::{self, Rate},
    throughput::Spread,
    topology::{LabNet, LabNetConfig, Watch, set_rps},
};

/// MPTCP connections per trial unless `--flows` says.
pub const CONNECTIONS: usize = 4;
/// Receive queues of each link's NIC unless `--queues` says.
pub const QUEUES: u32 = 8;
/// Each receive queue's rate unless `--queue-rate` says.
pub const QUEUE_RATE: Rate = Rate::from_mbit(50);
/// Trials per kind unless `--trials` says.
pub const TRIALS: u64 = 8;
/// Trial t's server ports: `FIRST_PORT + 2t` and the next.
const FIRST_PORT: u16 = 23_000;
/// Up to this long for the connections to open and every second subflow
/// to join.
const SETUP: Duration = Duration::from_secs(10);
/// What each connection sends as soon as it is open, before its data (not
/// counted): until the peer acknowledges data at the MPTCP level, the
/// connection is not fully established and its path manager opens no
/// further subflow.
const GREETING: &[u8; 8] = b"srap-mp\n";
/// The routing table that sends the second address's packets out of the
/// second link.
const SECOND_TABLE: &str = "145";

/// What to run.
#[derive(Clone, Debug)]
pub struct MptcpPlan {
    pub connections: usize,
    pub queues: u32,
    pub queue_rate: Rate,
    /// Each link's cap.
    pub link_rate: Rate,
    pub trials: usize,
    /// Seconds an even placement takes to carry the data.
    pub duration: u64,
}

impl MptcpPlan {
    /// The link cap when `--nic-rate` does not say: one full queue per
    /// connection, so that only placement can leave it unreached.
    pub fn default_link_rate(connections: usize, queue_rate: Rate) -> Rate {
        let mbit = queue_rate.bits_per_second() / 1e6 * connections as f64;
        Rate::from_mbit(mbit.round().clamp(1.0, f64::from(u32::MAX)) as u32)
    }

    /// Every subflow on a queue of its own, under both link caps.
    pub fn ideal_mbps(&self) -> f64 {
        let per_link = (self.connections as f64 * self.queue_rate.bits_per_second())
            .min(self.link_rate.bits_per_second());
        2.0 * per_link / 1e6
    }

    /// Bytes each connection carries: the ideal's share for `duration`.
    pub fn bytes_per_connection(&self) -> u64 {
        (self.ideal_mbps() * 1e6 / 8.0 * self.duration as f64 / self.connections as f64) as u64
    }
}

/// One subflow as the receiver's kernel holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Subflow {
    /// 1: the first link (the connection's own path), 2: the second.
    pub link: u8,
    pub peer: SocketAddr,
    /// The receive queue the emulator's key puts it on.
    pub queue: u32,
}

/// One trial of one kind of ports.
#[derive(Debug, Clone, Serialize)]
pub struct MptcpRun {
    /// Bytes the sink read over its first to last byte.
    pub aggregate_mbps: f64,
    pub seconds: f64,
    pub subflows: Vec<Subflow>,
    /// Distinct (link, queue) pairs the subflows landed on.
    pub queues_used: usize,
}

/// One trial: both kinds, and SRAP's aggregate over the kernel's.
#[derive(Debug, Clone, Serialize)]
pub struct MptcpTrial {
    pub trial: usize,
    pub srap: MptcpRun,
    pub kernel: MptcpRun,
    pub ratio: f64,
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct MptcpReport {
    /// When the run started (UTC, `date -u`).
    pub started: String,
    pub connections: usize,
    pub queues: u32,
    pub queue_rate_mbps: f64,
    pub link_rate_mbps: f64,
    pub ideal_mbps: f64,
    pub bytes_per_connection: u64,
    pub trials: Vec<MptcpTrial>,
    pub srap_mbps: Option<Spread>,
    pub kernel_mbps: Option<Spread>,
    pub ratio: Option<Spread>,
    pub wall_seconds: f64,
}

impl MptcpReport {
    fn summarize(&mut self) {
        let of =
            |f: fn(&MptcpTrial) -> f64| Spread::of(&self.trials.iter().map(f).collect::<Vec<_>>());
        self.srap_mbps = of(|t| t.srap.aggregate_mbps);
        self.kernel_mbps = of(|t| t.kernel.aggregate_mbps);
        self.ratio = of(|t| t.ratio);
    }

    /// The table `--experiment mptcp` prints.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} MPTCP connections x 2 subflows over 2 links of {:.0} Mbit/s, {} queues each \
             of {:.0} Mbit/s; {} trials per kind, {:.1} MB per connection; started {}\n",
            self.connections,
            self.link_rate_mbps,
            self.queues,
            self.queue_rate_mbps,
            self.trials.len(),
            self.bytes_per_connection as f64 / 1e6,
            self.started,
        );
        out += "  Mbit/s at the receiver   min     median  max\n";
        for (name, spread) in [
            ("SRAP ports", self.srap_mbps),
            ("kernel ports", self.kernel_mbps),
            ("SRAP / kernel", self.ratio),
        ] {
            if let Some(s) = spread {
                out += &format!(
                    "  {name:<22} {:>7.2} {:>7.2} {:>7.2}\n",
                    s.min, s.median, s.max
                );
            }
        }
        out + &format!(
            "  ideal {:.0} Mbit/s ({} subflows on queues of their own)",
            self.ideal_mbps,
            2 * self.connections
        )
    }
}

/// The lab's second link with its NIC: emulator and RPS on the receiver
/// side, its source route and the MPTCP endpoint (its capacity is a
/// [`LinkShaper`], as the first link's).
/// Field order is drop order: the qdiscs and programs come off first.
pub struct SecondLink {
    _emulator: Emulator,
    /// The sender's end (the `subflow` endpoint's address).
    pub near: VethEnd,
    pub far: VethEnd,
}

impl SecondLink {
    /// A second link of `queues` queues on `subnet` (held by the caller
    /// until `net` is gone), shaped as the lab's first, with MPTCP over
    /// both.
    pub fn add(net: &LabNet, subnet: &Subnet, queues: u32) -> anyhow::Result<Self> {
        let hosts = &net.hosts;
        let near = VethEnd::on_subnet(subnet, 1, "t");
        let far = VethEnd::on_subnet(subnet, 2, "r");
        let shape = VethConfig {
            tx_queues: queues,
            rx_queues: queues,
            subnet: None,
        };
        link(&hosts.sender, &near, &hosts.receiver, &far, shape, false)
            .context("creating the second link")?;
        let emulator = hosts
            .sender
            .run(|| Emulator::attach(&near.ifname, &net.model, queues))?
            .context("attaching the RSS-NIC emulator to the second link")?;
        set_rps(&hosts.receiver, &far.ifname, queues)?;
        Self::route(net, &near, &far)?;
        Ok(Self {
            _emulator: emulator,
            near,
            far,
        })
    }

    /// MPTCP on both hosts with `near` a `subflow` endpoint, and a route by
    /// source that sends what leaves from `near`'s address out of its own
    /// link (else the subflow would take the first link's route to the
    /// receiver's address, as in the binder's tests).
    fn route(net: &LabNet, near: &VethEnd, far: &VethEnd) -> anyhow::Result<()> {
        let hosts = &net.hosts;
        hosts.enable_mptcp_with(near, far, MptcpEndpoint::SenderSubflow { v6: false })?;
        let from = near.ipv4.to_string();
        hosts
            .sender
            .ip(["rule", "add", "from", &from, "table", SECOND_TABLE])
            .context("ip rule: the second address by its own table")?;
        let to = format!("{}/32", net.receiver_ip());
        hosts
            .sender
            .ip([
                "route",
                "add",
                &to,
                "dev",
                &near.ifname,
                "table",
                SECOND_TABLE,
            ])
            .context("ip route: the receiver through the second link")?;
        Ok(())
    }
}

/// A link's capacity on the sender's end of its veth, where the RSS-NIC
/// emulator picks each packet's receive queue: an `htb` root whose one
/// class is the link's rate, with a class per receive queue at
/// `--queue-rate` under it, and a classic-BPF classifier that files each
/// packet by the queue the emulator chose (`skb->queue_mapping`).
/// (`QueueCapacity`'s `mq` of `tbf`s cannot cap the link as a whole, and
/// this kernel has no policer.) Removed on drop.
pub struct LinkShaper {
    netns: String,
    ifname: String,
}

impl LinkShaper {
    pub fn install(
        netns: &str,
        ifname: &str,
        queues: u32,
        queue_rate: Rate,
        link_rate: Rate,
    ) -> anyhow::Result<Self> {
        let mtu = capacity::link_mtu(netns, ifname)?;
        let tc = |args: &[&str]| -> anyhow::Result<()> {
            command::run(Command::new("tc").args(["-n", netns]).args(args))?;
            Ok(())
        };
        tc(&["qdisc", "add", "dev", ifname, "root", "handle", "1:", "htb"])
            .with_context(|| format!("adding an htb root on {ifname}"))?;
        let guard = Self {
            netns: netns.to_owned(),
            ifname: ifname.to_owned(),
        };
        let class = |parent: &str, id: &str, rate: Rate| {
            let wire = format!("{:.0}bit", capacity::wire_rate(rate, mtu));
            // Whole GSO packets within the bursts, as the queues' tbfs.
            let burst = ["burst", "256k", "cburst", "256k"];
            let mut args = vec!["class", "add", "dev", ifname, "parent", parent];
            args.extend(["classid", id, "htb", "rate", &wire, "ceil", &wire]);
            args.extend(burst);
            tc(&args).with_context(|| format!("adding htb class {id} on {ifname}"))
        };
        class("1:", LINK_CLASS, link_rate)?;
        for q in 0..queues {
            class(LINK_CLASS, &format!("1:{:x}", q + 1), queue_rate)?;
        }
        // ld queue_mapping; add 0x10001; ret a: class 1:(q+1).
        let program = format!("3,32 0 0 {QUEUE_MAPPING},4 0 0 65537,22 0 0 0");
        tc(&[
            "filter", "add", "dev", ifname, "parent", "1:", "pref", "1", "bpf", "bytecode",
            &program,
        ])
        .with_context(|| format!("filing {ifname}'s packets by receive queue"))?;
        tracing::info!(%queue_rate, %link_rate, queues, ifname, "link and queue capacity installed");
        Ok(guard)
    }
}

/// The link's own class under the `htb` root.
const LINK_CLASS: &str = "1:1000";
/// Classic BPF's ancillary load of `skb->queue_mapping` (`SKF_AD_OFF +
/// SKF_AD_QUEUE`, as an unsigned 32-bit `k`).
const QUEUE_MAPPING: u32 = (-0x1000i32 + 24) as u32;

impl Drop for LinkShaper {
    fn drop(&mut self) {
        if let Err(err) = capacity::tc(&self.netns, ["qdisc", "del", "dev", &self.ifname, "root"]) {
            eprintln!(
                "lab cleanup: removing the link's htb on {}: {err:#}",
                self.ifname
            );
        }
    }
}

/// The experiment's whole lab: both links shaped, MPTCP over them and
/// both agents. Field order is drop order: the agents, the qdiscs, the
/// second link's programs, the namespaces, and the second link's subnet
/// last.
pub struct MptcpLab {
    pub agents: LabAgents,
    _shapers: Vec<LinkShaper>,
    pub second: SecondLink,
    pub net: LabNet,
    _subnet: Subnet,
}

impl MptcpLab {
    /// Brings the lab up for `plan` on the lab's own subnet (on a leased
    /// one when `leased`: a test beside other labs), with `agent` the
    /// `srap-agent` binary.
    pub fn start(plan: &MptcpPlan, agent: &Path, leased: bool) -> anyhow::Result<Self> {
        let second_subnet = Subnet::lease()?;
        let mut config = LabNetConfig::new(plan.queues, Watch::Agent);
        if leased {
            config.subnet = None;
        }
        let net = LabNet::with_config(config)?;
        let second = SecondLink::add(&net, &second_subnet, plan.queues)?;
        let sender = net.hosts.sender.name();
        let shapers = [&net.hosts.sender_end.ifname, &second.near.ifname]
            .map(|ifname| {
                LinkShaper::install(sender, ifname, plan.queues, plan.queue_rate, plan.link_rate)
            })
            .into_iter()
            .collect::<anyhow::Result<Vec<_>>>()?;
        let agents = LabAgents::start_for_with(
            &net,
            agent,
            FIRST_PORT,
            crate::direction::Direction::Push,
            &["--mptcp", "subflows"],
        )?;
        Ok(Self {
            agents,
            _shapers: shapers,
            second,
            net,
            _subnet: second_subnet,
        })
    }

    /// [`run`] on this lab, SRAP's trials in the sender agent's cgroup.
    pub fn run(
        &self,
        plan: &MptcpPlan,
        progress: &mut dyn FnMut(&MptcpTrial),
    ) -> anyhow::Result<MptcpReport> {
        run(
            &self.net,
            &self.second,
            self.agents.sender.cgroup(),
            plan,
            progress,
        )
    }
}

/// Runs `plan.trials` trials of each kind, taking turns (the kernel first
/// in odd trials, SRAP first in even ones); `cgroup` is the sender agent's
/// steered cgroup. `progress` hears of each trial as it ends.
pub fn run(
    net: &LabNet,
    second: &SecondLink,
    cgroup: &Path,
    plan: &MptcpPlan,
    progress: &mut dyn FnMut(&MptcpTrial),
) -> anyhow::Result<MptcpReport> {
    ensure!(plan.duration >= 1, "--duration must be 1 s or more");
    ensure!(plan.trials <= 1000, "at most 1000 trials (two ports each)");
    let started = utc_now()?;
    let clock = Instant::now();
    let mut trials = Vec::new();
    for t in 0..plan.trials {
        let port = FIRST_PORT + 2 * t as u16;
        let srap_first = t % 2 == 1;
        let one = |steered: bool| {
            let (port, cgroup) = match steered {
                true => (port, Some(cgroup)),
                false => (port + 1, None),
            };
            let kind = if steered { "SRAP" } else { "kernel" };
            trial(net, second, plan, port, cgroup)
                .with_context(|| format!("{kind} trial {}", t + 1))
        };
        let (first, other) = (one(srap_first)?, one(!srap_first)?);
        let (srap, kernel) = if srap_first {
            (first, other)
        } else {
            (other, first)
        };
        let trial = MptcpTrial {
            trial: t + 1,
            ratio: srap.aggregate_mbps / kernel.aggregate_mbps.max(1e-9),
            srap,
            kernel,
        };
        progress(&trial);
        trials.push(trial);
    }
    let mut report = MptcpReport {
        started,
        connections: plan.connections,
        queues: plan.queues,
        queue_rate_mbps: plan.queue_rate.bits_per_second() / 1e6,
        link_rate_mbps: plan.link_rate.bits_per_second() / 1e6,
        ideal_mbps: plan.ideal_mbps(),
        bytes_per_connection: plan.bytes_per_connection(),
        trials,
        srap_mbps: None,
        kernel_mbps: None,
        ratio: None,
        wall_seconds: clock.elapsed().as_secs_f64(),
    };
    report.summarize();
    Ok(report)
}

/// One trial: an MPTCP sink on `port`, the connections opened (from
/// `cgroup` when given), every second subflow awaited and placed by the
/// receiver's list, then the data sent at once on all of them.
fn trial(
    net: &LabNet,
    second: &SecondLink,
    plan: &MptcpPlan,
    port: u16,
    cgroup: Option<&Path>,
) -> anyhow::Result<MptcpRun> {
    let server = SocketAddr::new(net.receiver_ip(), port);
    let listener = net.hosts.receiver.run(|| mptcp_listener(server))??;
    let connections = plan.connections;
    let bytes = plan.bytes_per_connection();
    // Six times the ideal, and time to start: bounds a transfer gone wrong.
    let limit = Duration::from_secs(plan.duration * 6 + 20);
    let sink = thread::spawn(move || sink(listener, connections, limit));
    let streams = {
        // Sockets join the cgroup their creator is in at creation time.
        let _steered = cgroup.map(InCgroup::enter).transpose()?;
        net.hosts
            .sender
            .run(|| connect_all(server, connections))??
    };
    let subflows = await_subflows(net, second, server, connections)?;
    send_all(streams, bytes, limit)?;
    let received = sink
        .join()
        .map_err(|_| anyhow::anyhow!("the sink panicked"))??;
    if interrupted() {
        bail!("interrupted");
    }
    let (total, seconds) = span(&received, bytes)?;
    let queues_used = subflows
        .iter()
        .map(|s| (s.link, s.queue))
        .collect::<BTreeSet<_>>()
        .len();
    Ok(MptcpRun {
        aggregate_mbps: total as f64 * 8.0 / seconds / 1e6,
        seconds,
        subflows,
        queues_used,
    })
}

/// An MPTCP socket (`IPPROTO_MPTCP`) of `addr`'s family.
fn mptcp_socket(addr: SocketAddr) -> anyhow::Result<Socket> {
    Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::MPTCP),
    )
    .context("an MPTCP socket (is net.mptcp.enabled 1?)")
}

fn mptcp_listener(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = mptcp_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    socket.listen(64)?;
    Ok(socket.into())
}

fn connect_all(server: SocketAddr, connections: usize) -> anyhow::Result<Vec<TcpStream>> {
    (0..connections)
        .map(|_| {
            let socket = mptcp_socket(server)?;
            socket
                .connect_timeout(&server.into(), SETUP)
                .with_context(|| format!("MPTCP connect to {server}"))?;
            let mut stream: TcpStream = socket.into();
            stream.write_all(GREETING).context("greeting")?;
            Ok(stream)
        })
        .collect()
}

/// What one accepted connection delivered: bytes, first and last read.
type Received = (u64, Instant, Instant);

/// Accepts `connections` and reads each to its end on a thread of its own,
/// each within `limit`.
fn sink(
    listener: TcpListener,
    connections: usize,
    limit: Duration,
) -> anyhow::Result<Vec<Received>> {
    listener.set_nonblocking(true)?;
    let mut accepted = Vec::new();
    let all = poll_until(SETUP, Duration::from_millis(5), || {
        while accepted.len() < connections {
            match listener.accept() {
                Ok((stream, _)) => accepted.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return ControlFlow::Continue(());
                }
                Err(e) => return ControlFlow::Break(Err(e)),
            }
        }
        ControlFlow::Break(Ok(()))
    });
    match all {
        Ok(result) => result.context("accepting")?,
        Err(()) => bail!("{} of {connections} connections accepted", accepted.len()),
    }
    let readers: Vec<_> = accepted
        .into_iter()
        .map(|stream| thread::spawn(move || read_to_end(stream, limit)))
        .collect();
    readers
        .into_iter()
        .map(|r| r.join().map_err(|_| anyhow::anyhow!("a reader panicked"))?)
        .collect()
}

fn read_to_end(mut stream: TcpStream, limit: Duration) -> anyhow::Result<Received> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(limit))?;
    let mut greeting = [0u8; GREETING.len()];
    stream
        .read_exact(&mut greeting)
        .context("reading the greeting")?;
    ensure!(
        greeting == *GREETING,
        "not the lab's greeting: {greeting:?}"
    );
    let mut buf = vec![0u8; 256 * 1024];
    let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
    let deadline = last + limit;
    loop {
        ensure!(Instant::now() < deadline, "still reading after {limit:?}");
        let n = stream.read(&mut buf).context("reading a connection")?;
        if n == 0 {
            break;
        }
        last = Instant::now();
        first.get_or_insert(last);
        bytes += n as u64;
    }
    Ok((bytes, first.unwrap_or(last), last))
}

/// Every connection sends `bytes` at once (a barrier starts them), then
/// closes its sending side, each within `limit`.
fn send_all(streams: Vec<TcpStream>, bytes: u64, limit: Duration) -> anyhow::Result<()> {
    let start = Arc::new(Barrier::new(streams.len()));
    let writers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let start = Arc::clone(&start);
            thread::spawn(move || -> anyhow::Result<()> {
                stream.set_write_timeout(Some(limit))?;
                let chunk = vec![0x5au8; 256 * 1024];
                start.wait();
                let deadline = Instant::now() + limit;
                let mut left = bytes;
                while left > 0 {
                    ensure!(Instant::now() < deadline, "still sending after {limit:?}");
                    let n = left.min(chunk.len() as u64) as usize;
                    stream.write_all(&chunk[..n]).context("sending")?;
                    left -= n as u64;
                }
                stream.shutdown(std::net::Shutdown::Write)?;
                Ok(())
            })
        })
        .collect();
    for writer in writers {
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
    }
    Ok(())
}

/// All bytes received and the seconds from the first byte to the last,
/// each connection having delivered exactly `bytes`.
fn span(received: &[Received], bytes: u64) -> anyhow::Result<(u64, f64)> {
    ensure!(!received.is_empty(), "nothing received");
    for (got, _, _) in received {
        ensure!(
            *got == bytes,
            "a connection delivered {got} of {bytes} bytes"
        );
    }
    let first = received
        .iter()
        .map(|r| r.1)
        .min()
        .context("no first byte")?;
    let last = received.iter().map(|r| r.2).max().context("no last byte")?;
    let seconds = last.duration_since(first).as_secs_f64();
    ensure!(seconds > 0.0, "the data took no time");
    Ok((received.iter().map(|r| r.0).sum(), seconds))
}

/// Waits until the receiver holds two subflows per connection, one from
/// each of the sender's addresses, and places them by the emulator's key.
fn await_subflows(
    net: &LabNet,
    second: &SecondLink,
    server: SocketAddr,
    connections: usize,
) -> anyhow::Result<Vec<Subflow>> {
    let links: BTreeMap<IpAddr, u8> = [
        (net.hosts.sender_end.ip(false), 1),
        (second.near.ip(false), 2),
    ]
    .into();
    let seen = poll_until(SETUP, Duration::from_millis(50), || {
        let peers = match receiver_peers(net, server.port()) {
            Ok(peers) => peers,
            Err(err) => return ControlFlow::Break(Err(err)),
        };
        let per_link = |l: u8| {
            peers
                .iter()
                .filter(|p| links.get(&p.ip()) == Some(&l))
                .count()
        };
        if per_link(1) >= connections && per_link(2) >= connections {
            ControlFlow::Break(Ok(peers))
        } else {
            ControlFlow::Continue(peers)
        }
    });
    let peers = match seen {
        Ok(peers) => peers?,
        Err(peers) => bail!(
            "within {SETUP:?} the receiver held {peers:?}, not {connections} subflows from each \
             of {links:?} (did MPTCP open the second subflows?)"
        ),
    };
    place(&net.model, &peers, server, &links)
}

/// Each subflow's link (by its peer's address) and receive queue.
fn place(
    model: &RssModel,
    peers: &[SocketAddr],
    server: SocketAddr,
    links: &BTreeMap<IpAddr, u8>,
) -> anyhow::Result<Vec<Subflow>> {
    let landed = landings(model, peers, server)?;
    Ok(peers
        .iter()
        .zip(landed)
        .map(|(peer, landing)| Subflow {
            link: links.get(&peer.ip()).copied().unwrap_or(0),
            peer: *peer,
            queue: landing.queue,
        })
        .collect())
}

/// The peers of every TCP connection (subflow) the receiver holds on
/// `port`, as its kernel lists them.
fn receiver_peers(net: &LabNet, port: u16) -> anyhow::Result<Vec<SocketAddr>> {
    let filter = format!("( sport = :{port} )");
    let out = net
        .hosts
        .receiver
        .exec("ss", ["-Htn", "state", "established", &filter])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().nth(3)?.parse().ok())
        .collect())
}

/// Now, as `date -u` writes it (the run's time in the report).
fn utc_now() -> anyhow::Result<String> {
    let out = command::run(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(connections: usize, queue_mbit: u32, link_mbit: u32) -> MptcpPlan {
        MptcpPlan {
            connections,
            queues: 8,
            queue_rate: Rate::from_mbit(queue_mbit),
            link_rate: Rate::from_mbit(link_mbit),
            trials: 1,
            duration: 5,
        }
    }

    #[test]
    fn the_ideal_is_a_queue_per_subflow_under_both_link_caps() {
        assert!((plan(4, 50, 200).ideal_mbps() - 400.0).abs() < 1e-9);
        // A link cap under the queues' sum binds.
        assert!((plan(4, 50, 100).ideal_mbps() - 200.0).abs() < 1e-9);
        // 400 Mbit/s for 5 s over 4 connections: 62.5 MB each.
        assert_eq!(plan(4, 50, 200).bytes_per_connection(), 62_500_000);
        let link = MptcpPlan::default_link_rate(4, Rate::from_mbit(50));
        assert_eq!(link, Rate::from_mbit(200));
    }

    #[test]
    fn the_span_runs_from_the_first_byte_to_the_last_and_counts_every_byte() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let received = [(10, at(0), at(1000)), (10, at(500), at(2000))];
        let (total, seconds) = span(&received, 10).expect("a span");
        assert_eq!(total, 20);
        assert!((seconds - 2.0).abs() < 1e-9);
        assert!(
            span(&[(9, at(0), at(1000))], 10).is_err(),
            "a short connection"
        );
        assert!(span(&[], 10).is_err());
    }
}
