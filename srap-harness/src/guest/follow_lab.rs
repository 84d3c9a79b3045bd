//! MPTCP connections whose readers move between the two nodes of the
//! NUMA guest ([`super::numa`], a NIC per node), with the data sent by the
//! test's namespace: the lab of `--mptcp follow-reader` ([`FollowLab`]).
//!
//! Each round ([`FollowLab::round`]) runs `srap-readers --mptcp` in the
//! guest: K connections, connection `i`'s thread on node `(i + m) % 2` in
//! period `m`, so the readers move in anti-phase. The guest either
//! connects to the namespace's MPTCP source (a download) or accepts the
//! namespace's connections (a server receiving uploads). Three ways of
//! choosing the subflows, one boot:
//! * [`PathChoice::KernelEndpoints`]: no SRAP, the kernel's path manager
//!   with a `subflow` endpoint on each NIC: a subflow through each NIC,
//!   the data on whichever the peer's scheduler picks (about half the
//!   bytes local);
//! * [`PathChoice::ConnectTime`]: the sender agent's `--local-nics numa`
//!   alone: the connecting CPU's NIC, all local until the first move;
//! * [`PathChoice::FollowReader`]: the agent with `--mptcp
//!   follow-reader`, which the judge ([`FollowRound::judge_following`])
//!   holds to ≥ 90 % of each window's bytes through the reader's NIC.
//!
//! With [`FollowSpec::exchange`] the guest is a request/response server
//! instead (`srap-readers --respond`, the guest accepting): the
//! namespace's closed-loop client times each request
//! ([`MptcpSource::requests`]), and its request bytes are the data judged.
//!
//! Nothing is SRAP's word: a subflow's bytes are its own
//! `tcpi_bytes_received` (`MPTCP_TCPINFO`) as the reading thread read it,
//! its NIC the one holding its local address (`MPTCP_SUBFLOW_ADDRS`), the
//! reader's node the one of the CPU `sched_getcpu()` gave the thread, and
//! the NICs' own `rx_bytes` must carry the subflows' bytes.

use std::{
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};

use super::{
    image::GuestImage,
    numa::{Counters, NumaGuest},
    qemu::GuestNet,
};
use crate::{
    agent::LAB_PORT_RANGE,
    moving_readers::{
        Exchange, MovingReport, MptcpSource, RequestFlow, SourceFlow, Window, parse_moving_reports,
    },
    veth::enable_mptcp_in,
};

/// The steered cgroup in the guest, and the guest sender agent's files.
const GUEST_CGROUP: &str = "srap";
const SENDER_CONTROL: &str = "/tmp/sender.sock";
const SENDER_LOG: &str = "/tmp/sender.log";
const SENDER_PID: &str = "/tmp/sender.pid";
/// What the namespace sends each connection, in bytes a second: a rate
/// the emulated guest's reader keeps up with on either node, far under
/// each tap's pace.
const PACE: u64 = 4_000_000;
/// From a move on, the data has this long to come by the reader's NIC
/// (issue 54's bound).
pub const SETTLE: Duration = Duration::from_millis(500);
/// A window's share through the reader's NIC that passes.
pub const LOCAL_SHARE: f64 = 0.90;
/// A window with fewer bytes judged nothing: the round fails.
const WINDOW_BYTES: u64 = 256 * 1024;
/// A NIC's `rx_bytes` may exceed its subflows' bytes (headers, ACKs) but
/// must hold at least this share of them.
const PAYLOAD_SHARE: f64 = 0.9;
/// How long the agent may take to steer after its start (program
/// verification under emulation).
const AGENT_START: Duration = Duration::from_secs(90);

/// Who chooses a connection's subflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChoice {
    /// The kernel's path manager, a `subflow` endpoint on each NIC.
    KernelEndpoints,
    /// SRAP's NIC by the connecting CPU's node, placed once.
    ConnectTime,
    /// SRAP as the path manager, following each reader.
    FollowReader,
}

impl PathChoice {
    pub fn label(self) -> &'static str {
        match self {
            Self::KernelEndpoints => "kernel path manager, an endpoint per NIC",
            Self::ConnectTime => "SRAP at connect() only (--local-nics numa)",
            Self::FollowReader => "SRAP following the reader (--mptcp follow-reader)",
        }
    }
}

/// Which end set the connection up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetUp {
    /// The guest connected (a download).
    GuestConnects,
    /// The guest accepted (uploads into a server).
    GuestAccepts,
}

/// How a round runs.
#[derive(Debug, Clone, Copy)]
pub struct FollowSpec {
    pub choice: PathChoice,
    pub set_up: SetUp,
    /// A fresh port per round.
    pub port: u16,
    pub connections: usize,
    /// Seconds between moves, and moves + 1 periods in all.
    pub period: u64,
    pub periods: u64,
    /// Requests answered by the guest ([`SetUp::GuestAccepts`] only), or
    /// `None`: the namespace streams data.
    pub exchange: Option<Exchange>,
}

impl FollowSpec {
    pub fn title(&self) -> String {
        let way = match self.set_up {
            SetUp::GuestConnects => "the reading host connected",
            SetUp::GuestAccepts => "the reading host accepted",
        };
        format!("{}, {way}", self.choice.label())
    }

    /// The round's length: every period.
    pub fn seconds(&self) -> u64 {
        self.period * self.periods
    }
}

/// One round: each connection as its thread saw it, each as the
/// namespace served it, and the NICs' counters over the round.
#[derive(Debug, Clone)]
pub struct FollowRound {
    pub spec: FollowSpec,
    pub reports: Vec<MovingReport>,
    pub served: Vec<SourceFlow>,
    /// With an exchange: the client's loops (their bytes are `served`).
    pub requests: Vec<RequestFlow>,
    pub counters: Counters,
    /// Each node's CPUs, and each NIC's guest address by node.
    pub node_cpus: Vec<Vec<u32>>,
    pub nic_ips: Vec<IpAddr>,
    /// Sockets of the round the guest still listed after it.
    pub left_open: usize,
}

/// One judged window of one connection.
#[derive(Debug, Clone)]
pub struct JudgedWindow {
    pub connection: usize,
    pub window: Window,
    /// Bytes through each NIC (by node), and through none of them.
    pub by_nic: Vec<u64>,
    pub elsewhere: u64,
}

impl JudgedWindow {
    pub fn total(&self) -> u64 {
        self.by_nic.iter().sum::<u64>() + self.elsewhere
    }

    /// The share through the reader's node's NIC; `None` without bytes.
    pub fn local_share(&self) -> Option<f64> {
        let total = self.total();
        let local = self.by_nic.get(self.window.node as usize).copied()?;
        (total > 0).then(|| local as f64 / total as f64)
    }
}

impl FollowRound {
    /// Every connection's windows from [`SETTLE`] after each move, but
    /// for a move the round's clock makes at its end (a thread still
    /// reading the last bytes when the periods are over).
    pub fn windows(&self) -> Vec<JudgedWindow> {
        let end_ms = self.spec.seconds() * 1000;
        self.reports
            .iter()
            .flat_map(|report| {
                report
                    .windows(SETTLE, &self.node_cpus)
                    .into_iter()
                    .filter(|window| window.from_ms < end_ms)
                    .map(|window| self.judged(report.index, window))
            })
            .collect()
    }

    fn judged(&self, connection: usize, window: Window) -> JudgedWindow {
        let mut by_nic = vec![0; self.nic_ips.len()];
        let mut elsewhere = 0;
        for (ip, bytes) in &window.by_local {
            match self.nic_ips.iter().position(|nic| nic == ip) {
                Some(i) => by_nic[i] += bytes,
                None => elsewhere += bytes,
            }
        }
        JudgedWindow {
            connection,
            window,
            by_nic,
            elsewhere,
        }
    }

    /// What is wrong with the round whoever chose its subflows: a
    /// connection that failed or was not served, a window without data, a
    /// thread that ran off its node, a NIC whose own counter does not
    /// carry its subflows' bytes, a socket left open.
    pub fn judge_data(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        if self.reports.len() != self.spec.connections {
            wrong.push(format!(
                "{} reports from {} connections",
                self.reports.len(),
                self.spec.connections
            ));
        }
        for report in &self.reports {
            if let Some(err) = &report.error {
                wrong.push(format!("connection {} failed: {err}", report.index));
            }
        }
        for flow in &self.served {
            if let Some(err) = &flow.error {
                wrong.push(format!("the namespace's end of {}: {err}", flow.peer));
            }
        }
        wrong.extend(self.judge_nothing_lost());
        for w in self.windows() {
            if w.total() < WINDOW_BYTES {
                wrong.push(format!(
                    "connection {} window {}–{} ms moved {} bytes: it judged nothing",
                    w.connection,
                    w.window.from_ms,
                    w.window.to_ms,
                    w.total()
                ));
            }
            if w.window.ran_on_other_node > 0 {
                wrong.push(format!(
                    "connection {}'s thread read off node {} in {} samples of window {} ms",
                    w.connection, w.window.node, w.window.ran_on_other_node, w.window.from_ms
                ));
            }
        }
        wrong.extend(self.judge_nic_counters());
        if self.left_open > 0 {
            wrong.push(format!(
                "{} sockets of the round still open after it",
                self.left_open
            ));
        }
        wrong
    }

    /// Each connection read every byte the namespace sent on it (the
    /// namespace's end is found by the connection's addresses).
    fn judge_nothing_lost(&self) -> Vec<String> {
        self.reports
            .iter()
            .filter_map(|report| {
                // Both ends: one end alone is the listener's address,
                // which every connection of the round shares.
                let sent = self
                    .served
                    .iter()
                    .find(|f| f.peer == report.local && f.local == report.remote);
                match sent {
                    None => Some(format!(
                        "connection {} ({} to {}): the namespace served no such connection",
                        report.index, report.local, report.remote
                    )),
                    Some(f) if f.bytes != report.read => Some(format!(
                        "connection {} read {} of the {} bytes the namespace sent",
                        report.index, report.read, f.bytes
                    )),
                    Some(_) => None,
                }
            })
            .collect()
    }

    /// Each NIC's `rx_bytes` over the round holds its subflows' bytes.
    fn judge_nic_counters(&self) -> Vec<String> {
        let mut through = vec![0u64; self.nic_ips.len()];
        for report in &self.reports {
            let Some(last) = report.samples.last() else {
                continue;
            };
            for s in &last.subflows {
                if let Some(i) = self.nic_ips.iter().position(|ip| *ip == s.local.ip()) {
                    through[i] += s.bytes_received;
                }
            }
        }
        through
            .iter()
            .zip(&self.counters.nics)
            .enumerate()
            .filter(|(_, (bytes, nic))| (nic.rx_bytes as f64) < **bytes as f64 * PAYLOAD_SHARE)
            .map(|(i, (bytes, nic))| {
                format!(
                    "NIC {i} counted rx_bytes {} for subflows that received {bytes}",
                    nic.rx_bytes
                )
            })
            .collect()
    }

    /// Issue 54's bound: every window from [`SETTLE`] after a move holds
    /// ≥ [`LOCAL_SHARE`] of its bytes through the reader's node's NIC.
    pub fn judge_following(&self) -> Vec<String> {
        self.windows()
            .iter()
            .filter_map(|w| {
                let share = w.local_share().unwrap_or(0.0);
                (share < LOCAL_SHARE).then(|| {
                    format!(
                        "connection {}, window {}–{} ms on node {}: {:.1} % through its NIC",
                        w.connection,
                        w.window.from_ms,
                        w.window.to_ms,
                        w.window.node,
                        share * 100.0
                    )
                })
            })
            .collect()
    }

    /// The share through the reader's NIC over every window (bytes
    /// weighted), and over the windows of period 0 (before any move).
    pub fn shares(&self) -> (f64, f64) {
        let windows = self.windows();
        let share = |ws: &mut dyn Iterator<Item = &JudgedWindow>| {
            let (local, all) = ws.fold((0u64, 0u64), |(l, a), w| {
                let local = w.by_nic.get(w.window.node as usize).copied().unwrap_or(0);
                (l + local, a + w.total())
            });
            if all == 0 {
                0.0
            } else {
                local as f64 / all as f64
            }
        };
        let first_ms = self.spec.period * 1000;
        (
            share(&mut windows.iter()),
            share(&mut windows.iter().filter(|w| w.window.from_ms < first_ms)),
        )
    }

    /// The round as a table: a line per window.
    pub fn render(&self) -> String {
        let (all, first) = self.shares();
        let mut out = format!(
            "{}: {:.1} % of the bytes through the reader's NIC ({:.1} % before the first move)\n",
            self.spec.title(),
            all * 100.0,
            first * 100.0
        );
        let _ = writeln!(
            out,
            "  conn  window ms      node  NIC 0 bytes  NIC 1 bytes  local"
        );
        for w in self.windows() {
            let _ = writeln!(
                out,
                "  {:>4}  {:>5}–{:<6}  {:>4}  {:>11}  {:>11}  {:>5.1} %",
                w.connection,
                w.window.from_ms,
                w.window.to_ms,
                w.window.node,
                w.by_nic.first().copied().unwrap_or(0),
                w.by_nic.get(1).copied().unwrap_or(0),
                w.local_share().unwrap_or(0.0) * 100.0
            );
        }
        for (i, nic) in self.counters.nics.iter().enumerate() {
            let _ = writeln!(out, "  NIC {i}: rx_bytes {}", nic.rx_bytes);
        }
        out
    }
}

/// The two-node guest, MPTCP on in it and in the namespace. The guest
/// goes first on drop (QEMU killed by PID), then the namespace.
pub struct FollowLab {
    pub numa: NumaGuest,
    pub net: GuestNet,
    /// The agent running in the guest, if one does.
    agent: Option<PathChoice>,
}

impl FollowLab {
    /// Boots `image` (a kernel with `sock:sock_recv_length`: 6.12) on a
    /// namespace with a tap per node and turns MPTCP on at both ends.
    pub fn start(image: &GuestImage) -> anyhow::Result<Self> {
        let (net, mut numa) = NumaGuest::boot_readers(image)?;
        numa.guest.run(
            "modprobe tcp_diag; sysctl -qw net.mptcp.enabled=1 && \
             ip2 mptcp limits set subflows 2 add_addr_accepted 2",
        )?;
        enable_mptcp_in(&net.ns)?;
        Ok(Self {
            numa,
            net,
            agent: None,
        })
    }

    /// The namespace's address a download connects to, through either NIC.
    fn server(&self) -> anyhow::Result<IpAddr> {
        self.net
            .routed_ip
            .map(IpAddr::V4)
            .context("the namespace has no routed address")
    }

    /// Makes `choice` the guest's: the kernel's endpoints, or the agent
    /// (re)started with or without following.
    pub fn choose(&mut self, choice: PathChoice) -> anyhow::Result<()> {
        if self.agent == Some(choice) {
            return Ok(());
        }
        self.stop_agent()?;
        self.endpoints(choice == PathChoice::KernelEndpoints)?;
        let follow = match choice {
            PathChoice::KernelEndpoints => return Ok(()),
            PathChoice::ConnectTime => "--mptcp subflows ",
            PathChoice::FollowReader => "--mptcp follow-reader ",
        };
        self.start_agent(follow)?;
        self.agent = Some(choice);
        Ok(())
    }

    /// A `subflow` endpoint on each NIC (bound to it), or none.
    fn endpoints(&mut self, on: bool) -> anyhow::Result<()> {
        let mut script = String::from("ip2 mptcp endpoint flush");
        if on {
            for nic in &self.numa.nics {
                let _ = write!(
                    script,
                    " && ip2 mptcp endpoint add {} dev {} subflow",
                    nic.guest_ip, nic.name
                );
            }
        }
        self.numa.guest.run(&script).map(drop)
    }

    fn start_agent(&mut self, follow: &str) -> anyhow::Result<()> {
        let ifaces: String = self
            .numa
            .names()
            .iter()
            .map(|name| format!("--local-iface {name} "))
            .collect();
        let receiver = self.server()?;
        self.numa.guest.run(&format!(
            "srap-agent sender --steer local {ifaces}--local-nics numa --source-rules install \
             --local-placement reader {follow}--receiver {receiver} --cgroup {GUEST_CGROUP} \
             --control {SENDER_CONTROL} --port-range {LAB_PORT_RANGE} --interval 1 \
             > {SENDER_LOG} 2>&1 & echo $! > {SENDER_PID}"
        ))?;
        let ready = format!("grep -q '^steering active' {SENDER_LOG}");
        if !self.numa.guest.poll_until(&ready, AGENT_START)? {
            bail!(
                "the guest's sender agent was not steering within {AGENT_START:?}; its log:\n{}",
                self.sender_log()
            );
        }
        Ok(())
    }

    /// Stops the guest's agent (SIGTERM) and waits for it to end.
    fn stop_agent(&mut self) -> anyhow::Result<()> {
        if self.agent.take().is_none() {
            return Ok(());
        }
        self.numa.guest.run(&format!("kill $(cat {SENDER_PID})"))?;
        let gone = format!("! kill -0 $(cat {SENDER_PID}) 2>/dev/null");
        if !self.numa.guest.poll_until(&gone, Duration::from_secs(30))? {
            bail!(
                "the guest's agent did not stop on SIGTERM; its log:\n{}",
                self.sender_log()
            );
        }
        Ok(())
    }

    /// `kill -9` of the agent, then a new one as before; `Ok` once it
    /// steers again.
    pub fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.numa
            .guest
            .run(&format!("kill -9 $(cat {SENDER_PID}); sleep 1"))?;
        self.numa
            .guest
            .run(&format!("cat {SENDER_LOG} >> {SENDER_LOG}.killed"))?;
        self.start_agent("--mptcp follow-reader ")
    }

    /// One round as `spec` says, with the guest's agent as `spec.choice`.
    pub fn round(&mut self, spec: FollowSpec) -> anyhow::Result<FollowRound> {
        self.choose(spec.choice)?;
        let running = self.start_round(spec)?;
        self.finish_round(spec, running)
    }

    /// The readers started in the guest and the namespace's end: a
    /// listening source (the guest connects) or connecting senders (the
    /// guest listens, once it does).
    pub fn start_round(&mut self, spec: FollowSpec) -> anyhow::Result<RunningRound> {
        let exec = match spec.choice {
            PathChoice::KernelEndpoints => String::new(),
            _ => format!("srap exec --cgroup {GUEST_CGROUP} -- "),
        };
        let nodes: Vec<String> = self
            .numa
            .node_cpus
            .iter()
            .map(|cpus| {
                cpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let port = spec.port;
        let seconds = spec.seconds();
        let (end, source) = match spec.set_up {
            SetUp::GuestConnects if spec.exchange.is_some() => {
                bail!("a request/response round has the guest accept (the server)")
            }
            SetUp::GuestConnects => {
                let server = SocketAddr::new(self.server()?, port);
                let source = MptcpSource::listen(
                    &self.net.ns,
                    server,
                    spec.connections,
                    seconds,
                    Some(PACE),
                )?;
                (format!("--connect {server}"), Some(source))
            }
            // On every address, as a server does: the peer's subflows
            // toward the other NIC's announced address join there.
            SetUp::GuestAccepts => (format!("--listen 0.0.0.0:{port}"), None),
        };
        let end = match spec.exchange {
            Some(e) => format!("{end} --request {} --respond {}", e.request, e.response),
            None => end,
        };
        let files = RoundFiles::new(port);
        let before = self.numa.counters()?;
        self.numa.guest.run(&format!(
            "rm -f {out} {rc}; ({exec}srap-readers --mptcp {end} --nodes '{nodes}' \
             --connections {k} --move-every {period} --seconds {seconds} > {out} 2> {err}; \
             echo $? > {rc}) &",
            out = files.out,
            err = files.err,
            rc = files.rc,
            nodes = nodes.join(";"),
            k = spec.connections,
            period = spec.period,
        ))?;
        let source = match source {
            Some(source) => NamespaceEnd::Source(source),
            None => self.connect_to_guest(spec)?,
        };
        Ok(RunningRound {
            files,
            source,
            before,
        })
    }

    /// The namespace's senders (or request client) to the guest's
    /// listener on NIC 0, once it listens.
    fn connect_to_guest(&mut self, spec: FollowSpec) -> anyhow::Result<NamespaceEnd> {
        let ip = self
            .numa
            .nics
            .first()
            .context("the guest has no NIC")?
            .guest_ip;
        let listening = format!("netstat -tln | grep -q ':{} '", spec.port);
        if !self
            .numa
            .guest
            .poll_until(&listening, Duration::from_secs(30))?
        {
            bail!("the guest's readers did not listen on port {}", spec.port);
        }
        let target = SocketAddr::new(IpAddr::V4(ip), spec.port);
        let (ns, k, seconds) = (&self.net.ns, spec.connections, spec.seconds());
        Ok(match spec.exchange {
            Some(exchange) => {
                NamespaceEnd::Requests(MptcpSource::requests(ns, target, k, seconds, exchange)?)
            }
            None => NamespaceEnd::Source(MptcpSource::connect(ns, target, k, seconds, Some(PACE))?),
        })
    }

    /// Waits for the readers, reads their reports and the NICs' counters,
    /// and what the guest still lists of the round.
    pub fn finish_round(
        &mut self,
        spec: FollowSpec,
        running: RunningRound,
    ) -> anyhow::Result<FollowRound> {
        let RunningRound {
            files,
            source,
            before,
        } = running;
        let within = Duration::from_secs(spec.seconds() + 60);
        if !self
            .numa
            .guest
            .poll_until(&format!("test -s {}", files.rc), within)?
        {
            bail!(
                "the guest's readers did not end within {within:?}: {}",
                self.numa.guest.read_or_why(&files.err)
            );
        }
        let counters = self.numa.counters()?.since(&before);
        let (served, requests) = source.finish(Duration::from_secs(30))?;
        let out = self.numa.guest.read(&format!("cat {}", files.out))?;
        let reports = parse_moving_reports(&out).map_err(|err| {
            anyhow!(
                "{err:#}: the readers said {out}{}",
                self.numa.guest.read_or_why(&files.err)
            )
        })?;
        Ok(FollowRound {
            spec,
            reports,
            served,
            requests,
            counters,
            node_cpus: self.numa.node_cpus.clone(),
            nic_ips: self
                .numa
                .nics
                .iter()
                .map(|n| IpAddr::V4(n.guest_ip))
                .collect(),
            left_open: self.left_open(spec.port)?,
        })
    }

    /// The guest's sockets on `port` still listed a few seconds after the
    /// round (closing ones are given time to go).
    fn left_open(&mut self, port: u16) -> anyhow::Result<usize> {
        let listing = format!(
            "ss -Htan '( sport = :{port} or dport = :{port} )' | grep -v -e TIME-WAIT -e LISTEN"
        );
        let empty = format!("! {listing} | grep -q .");
        if self
            .numa
            .guest
            .poll_until(&empty, Duration::from_secs(10))?
        {
            return Ok(0);
        }
        let left = self.numa.guest.read(&format!("{listing} || true"))?;
        Ok(left.lines().filter(|l| !l.trim().is_empty()).count())
    }

    /// The guest sender agent's log (with that of a killed one before
    /// it), or why it could not be read.
    pub fn sender_log(&mut self) -> String {
        let killed = self
            .numa
            .guest
            .read(&format!("cat {SENDER_LOG}.killed 2>/dev/null || true"))
            .unwrap_or_default();
        format!("{killed}{}", self.numa.guest.read_or_why(SENDER_LOG))
    }

    /// The agent's status, as `srap status` prints it.
    pub fn sender_status(&mut self) -> String {
        self.numa
            .guest
            .read(&format!("srap status --sender --control {SENDER_CONTROL}"))
            .unwrap_or_else(|err| format!("(no status: {err:#})"))
    }

    /// The connection table the guest's kernel lists now, for failures.
    pub fn subflow_listing(&mut self) -> String {
        self.numa
            .guest
            .read("ss -HtniM state established 2>&1 || true")
            .unwrap_or_else(|err| format!("(no listing: {err:#})"))
    }
}

/// The guest's files of one round.
pub struct RoundFiles {
    out: String,
    err: String,
    rc: String,
}

impl RoundFiles {
    fn new(port: u16) -> Self {
        Self {
            out: format!("/tmp/movers-{port}.json"),
            err: format!("/tmp/movers-{port}.err"),
            rc: format!("/tmp/movers-{port}.rc"),
        }
    }
}

/// A round under way ([`FollowLab::start_round`]).
pub struct RunningRound {
    files: RoundFiles,
    source: NamespaceEnd,
    before: Counters,
}

/// The namespace's end of a round: a data source, or the request client.
enum NamespaceEnd {
    Source(MptcpSource),
    Requests(MptcpSource<RequestFlow>),
}

impl NamespaceEnd {
    /// What each connection was sent, and the client's loops if it ran
    /// them.
    fn finish(self, within: Duration) -> anyhow::Result<(Vec<SourceFlow>, Vec<RequestFlow>)> {
        match self {
            Self::Source(source) => Ok((source.finish(within)?, Vec::new())),
            Self::Requests(client) => {
                let flows = client.finish(within)?;
                Ok((flows.iter().map(RequestFlow::as_source).collect(), flows))
            }
        }
    }
}
