//! A bonded guest as a steered SRAP sender, judged by ground truth.
//!
//! The QEMU guest bonds its virtio-net NICs ([`GuestBond`]) and runs the
//! sender agent, following a receiver agent in the host's namespace that
//! serves the lab's described 32-CPU RSS NIC on the bridge ([`lab_nic`]).
//! A round opens [`ROUND_FLOWS`] connections from the guest to a sink
//! beside the bridge, all at once (the binder counts open flows), with the
//! kernel's ports or under `srap exec`, each uploading [`ROUND_FLOW_BYTES`].
//!
//! Nothing of a round's verdict comes from SRAP's status. Per member, the
//! flows it carried are its own `tx_bytes` rise in the guest divided by one
//! flow's bytes on the wire; per flow, the receiver CPU is the described
//! model's Toeplitz hash of the tuple the sink accepted, and the member
//! [`member_index`] picks among the usable members in enslavement order —
//! which must account for the counters' counts, as a multiset, since
//! concurrent flows cannot be told apart by a counter.

use std::{
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use srap_common::{
    bond::member_index,
    rss::{FlowTuple, RssModel},
};
use srap_status::SenderStatus;

use super::{
    bond::{BondMode, GuestBond, LacpPartner, counter_rise, counters_line},
    image::GuestImage,
    qemu::{Guest, GuestNet, GuestShape},
};
use crate::{
    agent::{LAB_PORT_RANGE, PEER_PORT, ReceiverAgent, ReceiverOpts},
    emulator::lab_nic,
    keyfile::KeyFile,
    names::unique_name,
    readers::{DataSource, SinkFlow, Transfer},
};

/// The receiver's CPUs: the lab's described NIC, 32 queues each its own CPU.
pub const RECEIVER_CPUS: u32 = 32;

/// Flows in a round: half the receiver's CPUs, the case where kernel ports
/// almost always collide (1 % collision-free).
pub const ROUND_FLOWS: usize = 16;

/// What each flow uploads: about 750 wire packets, so a member's
/// `tx_bytes` rise is a whole number of flows to well within a tenth of
/// one (the agent's control connection and ARP add a few hundred bytes a
/// second), yet 16 of them take seconds under emulation.
pub const ROUND_FLOW_BYTES: u64 = 1 << 20;

/// How far from a whole number of flows a member's bytes may be and still
/// count: retransmissions and stray frames add little, a flow more or less
/// is a whole one.
const WHOLE_FLOW_SLACK: f64 = 0.15;

/// The sink, beside the bridge in the host namespace.
pub const SINK_PORT: u16 = 7620;

/// How long a round's flows may take in all (connect, gate, upload).
const ROUND_TIMEOUT: Duration = Duration::from_secs(150);

/// The guest's sender agent: its key, control socket and log.
const GUEST_KEY: &str = "/tmp/key";
const GUEST_SENDER_CONTROL: &str = "/tmp/sender.sock";
const GUEST_SENDER_LOG: &str = "/tmp/sender.log";
/// The steered cgroup, below the guest's cgroup2 mount.
pub const GUEST_CGROUP: &str = "srap";
/// The round's script in the guest (see [`ROUND_SCRIPT`]).
const GUEST_ROUND_SCRIPT: &str = "/tmp/round.sh";

/// A round in the guest:
/// `sh round.sh HOST PORT BYTES FLOWS PATTERN CONTROL JUDGED`.
/// Every flow's `nc` connects at once, its data held back by a gate until
/// `/proc/net/tcp` shows all of them established toward the sink (the
/// pattern: the sink's address and port as that file prints them), so the
/// binder sees all of them open together; then each sends BYTES and stays
/// open until the sender agent at CONTROL shows its bond judged more than
/// JUDGED times (its member loop judges only flows open at a sample; a
/// CONTROL of `-` holds nothing), then closes. Prints `open N`: how many
/// were established when the gate opened. Then it waits until no flow
/// toward the sink is established or closing with data or its FIN
/// unacknowledged (states 01, 04, 08, 09, 0B): `nc` exits once its data is
/// in the socket, not on the wire, and the counters after must count all
/// of it. The wait loops are bounded (60 s; the hold 30 s) so a flow that
/// never connects cannot hold the guest's shell.
const ROUND_SCRIPT: &[&str] = &[
    "h=$1; p=$2; bytes=$3; n=$4; pat=\"$5 01 \"; ctl=$6; before=$7",
    "rm -f /tmp/round.go /tmp/round.done",
    "i=0",
    "while [ $i -lt $n ]; do",
    "  ( t=0; while [ ! -e /tmp/round.go ] && [ $t -lt 300 ]; do sleep 0.2; t=$((t+1)); done;",
    "    head -c $bytes /dev/zero;",
    "    t=0; while [ ! -e /tmp/round.done ] && [ $t -lt 300 ]; do sleep 0.2; t=$((t+1)); done ) | nc -w 40 $h $p &",
    "  i=$((i+1))",
    "done",
    "t=0",
    "until [ $(grep -c \"$pat\" /proc/net/tcp) -ge $n ] || [ $t -ge 300 ]; do sleep 0.2; t=$((t+1)); done",
    "echo open $(grep -c \"$pat\" /proc/net/tcp)",
    "touch /tmp/round.go",
    "judged() { srap status --sender --once --json --control $ctl | grep -o \"counters_judged.: *[0-9]*\" | grep -o \"[0-9]*$\"; }",
    "t=0",
    "if [ \"$ctl\" != - ]; then until [ \"$(judged)\" -gt \"$before\" ] 2>/dev/null || [ $t -ge 120 ]; do sleep 0.25; t=$((t+1)); done; fi",
    "touch /tmp/round.done",
    "wait",
    "t=0",
    "until ! grep -qE \"$5 0[1489B] \" /proc/net/tcp || [ $t -ge 300 ]; do sleep 0.2; t=$((t+1)); done",
];

/// Which source ports a round's flows get (`kernel` or `srap` in a
/// report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ports {
    /// The kernel's ephemeral ports (no `srap exec`).
    Kernel,
    /// Under `srap exec --cgroup srap`: the sender agent's binder picks.
    #[serde(rename = "srap")]
    Steered,
}

impl Ports {
    /// As a report's tables name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Steered => "SRAP",
        }
    }
}

/// A bonded guest running the sender agent toward a receiver agent in the
/// host namespace. Field order is drop order: the guest (QEMU, killed by
/// PID) first, then the receiver agent, the LACP partner, the key file and
/// last the namespace with its bridge and taps.
pub struct BondLab {
    pub guest: Guest,
    pub bond: GuestBond,
    /// The receiver's described NIC, as the receiver agent serves it.
    pub model: RssModel,
    receiver: ReceiverAgent,
    _partner: Option<LacpPartner>,
    key: KeyFile,
    pub net: GuestNet,
}

impl BondLab {
    /// Boots a guest with `order.len()` NICs bonded in `mode` (enslaved in
    /// `order`), starts the receiver agent on the bridge serving
    /// [`lab_nic`]`(32)` (`agent` is the host's `srap-agent`), gives the
    /// guest the key and starts its sender agent, waiting until it steers.
    pub fn start(
        image: &GuestImage,
        agent: &Path,
        order: &[u32],
        mode: BondMode,
        sender_args: &str,
    ) -> anyhow::Result<Self> {
        let members = u32::try_from(order.len()).context("too many members")?;
        let net = GuestNet::bonded(members)?;
        // The partner answers from the start: the guest's ports aggregate
        // as soon as the bond is made.
        let partner = match mode {
            BondMode::Lacp => Some(LacpPartner::start(&net)?),
            BondMode::BalanceXor => None,
        };
        let key = KeyFile::create(
            std::env::temp_dir().join(format!("srap-bond-{}.psk", unique_name(""))),
        )
        .context("writing the lab's key")?;
        let model = lab_nic(RECEIVER_CPUS)?;
        let listen = SocketAddr::new(IpAddr::V4(net.host_ip), PEER_PORT);
        // `--no-verify`: the bridge is no RSS NIC; the judge here is the
        // model's hash of the tuples the sink accepted.
        let receiver = ReceiverAgent::start(
            &net.ns,
            ReceiverOpts::new(agent, &net.tap, listen)
                .rss(model.to_description())
                .no_verify()
                .arg("--psk-file")
                .arg(key.path()),
        )?;
        let mut guest = Guest::boot(&net, image, GuestShape::bonded(members)?)?;
        let bond = GuestBond::create(&mut guest, &net, order, mode)?;
        let mut lab = Self {
            guest,
            bond,
            model,
            receiver,
            _partner: partner,
            key,
            net,
        };
        lab.write_round_script()?;
        lab.start_sender(sender_args)?;
        Ok(lab)
    }

    /// Copies the key into the guest and starts its sender agent toward
    /// the receiver agent, with `extra` flags (`--port 7620`); waits for
    /// `steering active` in its log.
    fn start_sender(&mut self, extra: &str) -> anyhow::Result<()> {
        let key = self.key.key().context("reading the lab's key")?;
        if !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("the lab's key is not hex");
        }
        self.guest
            .run(&format!("umask 077 && printf '%s\\n' {key} > {GUEST_KEY}"))?;
        self.guest.run(&format!(
            "srap-agent sender --peer {host}:{PEER_PORT} --psk-file {GUEST_KEY} \
             --cgroup {GUEST_CGROUP} --control {GUEST_SENDER_CONTROL} \
             --port-range {LAB_PORT_RANGE} {extra} > {GUEST_SENDER_LOG} 2>&1 &",
            host = self.net.host_ip
        ))?;
        let within = Duration::from_secs(90);
        if !self.guest.poll_until(
            &format!("grep -q '^steering active' {GUEST_SENDER_LOG}"),
            within,
        )? {
            bail!(
                "the guest's sender agent was not steering within {within:?}; its log:\n{}\n\
                 the receiver agent's log:\n{}",
                self.sender_log(),
                self.receiver.log().tail()
            );
        }
        Ok(())
    }

    /// Writes [`ROUND_SCRIPT`] into the guest, a line at a time (the shell
    /// takes one line per command; the script has no single quotes).
    fn write_round_script(&mut self) -> anyhow::Result<()> {
        let quoted: Vec<String> = ROUND_SCRIPT.iter().map(|l| format!("'{l}'")).collect();
        self.guest.run(&format!(
            "printf '%s\\n' {} > {GUEST_ROUND_SCRIPT}",
            quoted.join(" ")
        ))?;
        Ok(())
    }

    /// The guest's sender agent's log so far.
    pub fn sender_log(&mut self) -> String {
        self.guest.read_or_why(GUEST_SENDER_LOG)
    }

    /// The receiver agent's log tail (for failure reports).
    pub fn receiver_log(&self) -> String {
        self.receiver.log().tail()
    }

    /// The guest's sender agent's status.
    pub fn sender_status(&mut self) -> anyhow::Result<SenderStatus> {
        self.guest
            .srap_status(&format!("--sender --control {GUEST_SENDER_CONTROL}"))
    }

    /// How many samples the guest's sender agent's member loop has judged
    /// its bond by (0 before it shows a bond).
    pub fn bond_judged(&mut self) -> anyhow::Result<u64> {
        let status = self.sender_status()?;
        Ok(status.bonds.first().map_or(0, |bond| bond.counters_judged))
    }

    /// The guest's `srap status --sender --once`, as an operator reads it.
    pub fn sender_status_text(&mut self) -> anyhow::Result<String> {
        self.guest.run(&format!(
            "srap status --sender --once --control {GUEST_SENDER_CONTROL}"
        ))
    }

    /// Waits (up to `within`) until the guest's sender agent plans for
    /// exactly `usable` members of its bond, as its status says: how long
    /// it took. The members' own counters judge the rounds after; this
    /// only times the agent's following.
    pub fn await_followed(
        &mut self,
        usable: &[String],
        within: Duration,
    ) -> anyhow::Result<Duration> {
        let started = std::time::Instant::now();
        let mut last = Vec::new();
        while started.elapsed() < within {
            let status = self.sender_status()?;
            last = status
                .bonds
                .iter()
                .flat_map(|b| b.members.iter().filter(|m| m.usable))
                .map(|m| m.name.clone())
                .collect();
            if last == usable {
                return Ok(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "the guest's sender agent plans for {last:?}, not {usable:?}, {within:?} after the \
             change; its log:\n{}",
            self.sender_log()
        )
    }

    /// Takes `member`'s link down (see [`GuestBond::take_down`]).
    pub fn take_down(&mut self, member: &str) -> anyhow::Result<()> {
        self.bond.take_down(&mut self.guest, member)
    }

    /// One round: [`ROUND_FLOWS`] flows open at once from the guest to the
    /// sink with `ports`, each uploading [`ROUND_FLOW_BYTES`]; judged by
    /// the members' `tx_bytes` and the described model.
    pub fn round(&mut self, ports: Ports, title: &str) -> anyhow::Result<BondRound> {
        self.round_of(ports, title, ROUND_FLOW_BYTES)
    }

    /// [`BondLab::round`] with each flow uploading `flow_bytes` (at least
    /// [`ROUND_FLOW_BYTES`], so a member's counter still counts whole
    /// flows): a capacity experiment sizes its flows to its links' rate.
    pub fn round_of(
        &mut self,
        ports: Ports,
        title: &str,
        flow_bytes: u64,
    ) -> anyhow::Result<BondRound> {
        if flow_bytes < ROUND_FLOW_BYTES {
            bail!("a round's flows upload at least {ROUND_FLOW_BYTES} bytes, not {flow_bytes}");
        }
        let started = Instant::now();
        let slaves = self.bond.slaves(&mut self.guest)?;
        let usable = self.bond.usable(&mut self.guest)?;
        let host = self.net.host_ip;
        let sink = DataSource::start_for(
            &self.net.ns,
            SocketAddr::new(IpAddr::V4(host), SINK_PORT),
            ROUND_FLOWS,
            ROUND_TIMEOUT.as_secs(),
            None,
            Transfer::Upload,
        )?;
        let exec = match ports {
            Ports::Kernel => String::new(),
            Ports::Steered => format!("srap exec --cgroup {GUEST_CGROUP} -- "),
        };
        let judged_before = match ports {
            Ports::Kernel => None,
            Ports::Steered => Some(self.bond_judged()?),
        };
        let hold = match judged_before {
            Some(judged) => format!("{GUEST_SENDER_CONTROL} {judged}"),
            None => "- 0".to_owned(),
        };
        let counters = counters_line(&slaves, "tx_bytes");
        // One shell line: the counters, the flows, the counters.
        let line = format!(
            "{counters}; {exec}sh {GUEST_ROUND_SCRIPT} {host} {SINK_PORT} {flow_bytes} \
             {ROUND_FLOWS} {pattern} {hold}; rc=$?; {counters}; exit $rc",
            pattern = proc_net_tcp_addr(host, SINK_PORT)
        );
        let output = self.guest.run(&line)?;
        let received = sink.finish_flows(ROUND_TIMEOUT)?;
        let open_at_once = output
            .lines()
            .find_map(|l| l.strip_prefix("open "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .with_context(|| format!("the round printed no `open N`:\n{output}"))?;
        let tx_bytes = counter_rise(&output, slaves.len())?;
        let flows = received
            .iter()
            .map(|flow| self.judge(flow.port, &usable))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(BondRound {
            title: title.to_owned(),
            ports,
            slaves,
            usable,
            flows,
            tx_bytes,
            open_at_once,
            judged_before,
            seconds: started.elapsed().as_secs_f64(),
            flow_bytes,
            received,
        })
    }

    /// The flow the sink accepted from `port`: its receiver CPU by the
    /// model, its member by [`member_index`] among `usable`.
    fn judge(&self, port: u16, usable: &[String]) -> anyhow::Result<RoundFlow> {
        let tuple = FlowTuple::new(
            IpAddr::V4(self.net.guest_ip),
            port,
            IpAddr::V4(self.net.host_ip),
            SINK_PORT,
        )?;
        let count = u32::try_from(usable.len()).context("too many members")?;
        let index = member_index(&tuple, count).context("the bond has no usable member")?;
        let member = usable
            .get(index as usize)
            .cloned()
            .context("the model's member index is past the usable members")?;
        Ok(RoundFlow {
            port,
            cpu: self.model.landing(&tuple).cpu,
            member,
        })
    }
}

/// `ADDR:PORT` as `/proc/net/tcp` prints a remote address: the IPv4
/// address as its in-memory u32 in hex (little-endian here), the port in
/// hex.
fn proc_net_tcp_addr(ip: Ipv4Addr, port: u16) -> String {
    format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()))
}

/// One flow of a round, as the sink accepted it.
#[derive(Debug, Clone)]
pub struct RoundFlow {
    pub port: u16,
    /// The receiver CPU the described model's Toeplitz hash gives it.
    pub cpu: u32,
    /// The member [`member_index`] picks among the usable members.
    pub member: String,
}

/// A round and its ground truth.
#[derive(Debug, Clone)]
pub struct BondRound {
    pub title: String,
    pub ports: Ports,
    /// The bond's slaves, in enslavement order.
    pub slaves: Vec<String>,
    /// Those usable during the round, in the same order.
    pub usable: Vec<String>,
    /// The flows, in the order the sink accepted them.
    pub flows: Vec<RoundFlow>,
    /// Each slave's `tx_bytes` rise over the round.
    pub tx_bytes: Vec<u64>,
    /// How many flows the guest saw established when their data was let
    /// go: all of them, or the binder did not see them open together.
    pub open_at_once: usize,
    /// For a steered round, how many samples the sender agent's member
    /// loop had judged its bond by before the round: a verdict read after
    /// it speaks of the round only if the count rose.
    pub judged_before: Option<u64>,
    /// The round's wall time, setup to verdict.
    pub seconds: f64,
    /// What each flow uploaded.
    pub flow_bytes: u64,
    /// Each flow as the sink received it (its bytes and their times), in
    /// accept order: the receiver's own measure of the round.
    pub received: Vec<SinkFlow>,
}

impl BondRound {
    /// Distinct receiver CPUs of the flows.
    pub fn distinct_cpus(&self) -> usize {
        let cpus: std::collections::BTreeSet<u32> = self.flows.iter().map(|f| f.cpu).collect();
        cpus.len()
    }

    /// One flow's bytes on the wire: the slaves' rise over the flows (every
    /// flow sent the same payload, so each added as much, give or take a
    /// retransmission).
    pub fn flow_wire_bytes(&self) -> f64 {
        self.tx_bytes.iter().sum::<u64>() as f64 / self.flows.len().max(1) as f64
    }

    /// One flow's wire bytes are its payload and at most a fifth more: headers
    /// add about 5 % (66 bytes a 1448-byte segment), retransmissions on a
    /// loaded emulator a little (a few percent). Under the payload, the
    /// counters missed some flow's bytes, and nothing is judged by them. A
    /// flow's worth more (6 %) is not told apart from retransmissions here: it
    /// shows as members' counts that are not whole numbers
    /// ([`BondRound::by_counters`]).
    pub fn wire_bytes_plausible(&self) -> bool {
        let payload = self.flow_bytes as f64;
        (payload..=payload * 1.2).contains(&self.flow_wire_bytes())
    }

    /// Flows per slave by its own `tx_bytes`: its rise divided by one
    /// flow's wire bytes; `None` for a slave whose rise is not a whole
    /// number of flows (within 0.15 of one).
    pub fn by_counters(&self) -> Vec<Option<usize>> {
        let per_flow = self.flow_wire_bytes();
        self.tx_bytes
            .iter()
            .map(|&bytes| {
                let flows = bytes as f64 / per_flow;
                let whole = flows.round();
                ((flows - whole).abs() <= WHOLE_FLOW_SLACK).then_some(whole as usize)
            })
            .collect()
    }

    /// Flows per slave by the model.
    pub fn by_model(&self) -> Vec<usize> {
        self.slaves
            .iter()
            .map(|m| self.flows.iter().filter(|f| &f.member == m).count())
            .collect()
    }

    /// The counters and the model give every slave the same number of
    /// flows: the model's members, as a multiset, are the counters'.
    pub fn counters_agree_with_model(&self) -> bool {
        self.wire_bytes_plausible()
            && self
                .by_counters()
                .iter()
                .zip(self.by_model())
                .all(|(counted, modelled)| *counted == Some(modelled))
    }

    /// The table: each flow's port, receiver CPU and member by the model;
    /// then a line per member (flows by its counters and by the model) and
    /// the verdict lines.
    pub fn render(&self) -> String {
        let mut out = format!("{}\n", self.title);
        let _ = writeln!(
            out,
            "  {:>6}  {:>12}  {:<16}",
            "port", "receiver CPU", "member (model)"
        );
        let mut flows = self.flows.clone();
        flows.sort_by_key(|f| (f.cpu, f.port));
        for flow in &flows {
            let shared = self.flows.iter().filter(|f| f.cpu == flow.cpu).count() > 1;
            let _ = writeln!(
                out,
                "  {:>6}  {:>12}  {:<16}{}",
                flow.port,
                flow.cpu,
                flow.member,
                if shared { "  << shares its CPU" } else { "" }
            );
        }
        let counted = self.by_counters();
        let modelled = self.by_model();
        for (i, member) in self.slaves.iter().enumerate() {
            let state = if self.usable.contains(member) {
                "usable"
            } else {
                "down"
            };
            let _ = writeln!(
                out,
                "  {member} ({state}): {} flows by its tx_bytes (+{} bytes), {} by the model",
                counted[i].map_or_else(|| "unclear".to_owned(), |n| n.to_string()),
                self.tx_bytes[i],
                modelled[i]
            );
        }
        let _ = writeln!(
            out,
            "  {} flows ({} open at once) on {} distinct receiver CPUs of {RECEIVER_CPUS}; \
             one flow = {:.0} bytes on the wire; counters {} the model; {:.1} s",
            self.flows.len(),
            self.open_at_once,
            self.distinct_cpus(),
            self.flow_wire_bytes(),
            if self.counters_agree_with_model() {
                "agree with"
            } else {
                "DIFFER from"
            },
            self.seconds
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(tx_bytes: Vec<u64>, members: &[&str]) -> BondRound {
        let flows = members
            .iter()
            .enumerate()
            .map(|(i, m)| RoundFlow {
                port: 10_000 + i as u16,
                cpu: i as u32,
                member: (*m).to_owned(),
            })
            .collect();
        BondRound {
            title: "t".into(),
            ports: Ports::Kernel,
            slaves: vec!["eth1".into(), "eth0".into()],
            usable: vec!["eth1".into(), "eth0".into()],
            flows,
            tx_bytes,
            open_at_once: members.len(),
            judged_before: None,
            seconds: 1.0,
            flow_bytes: ROUND_FLOW_BYTES,
            received: Vec::new(),
        }
    }

    /// One flow on the wire: the payload and 5 % of headers.
    const FLOW: u64 = ROUND_FLOW_BYTES + ROUND_FLOW_BYTES / 20;

    #[test]
    fn members_count_whole_flows_of_their_bytes() {
        // Three flows: two on eth1, one on eth0, a few stray bytes on each.
        let r = round(
            vec![2 * FLOW + 3000, FLOW + 1000],
            &["eth1", "eth1", "eth0"],
        );
        assert!(r.wire_bytes_plausible());
        assert_eq!(r.by_counters(), [Some(2), Some(1)]);
        assert_eq!(r.by_model(), [2, 1]);
        assert!(r.counters_agree_with_model());
        // The model puts them the other way round: they differ.
        let r = round(vec![2 * FLOW, FLOW], &["eth0", "eth0", "eth1"]);
        assert!(!r.counters_agree_with_model());
        // A quarter of a flow's bytes over or under names no count.
        let r = round(
            vec![2 * FLOW + FLOW / 4, FLOW - FLOW / 4],
            &["eth1", "eth1", "eth0"],
        );
        assert_eq!(r.by_counters(), [None, None]);
        assert!(!r.counters_agree_with_model());
        // The counters missed a flow: each seems to carry less than its
        // payload, and nothing is judged by them.
        let r = round(vec![2 * FLOW, 0], &["eth1", "eth1", "eth0"]);
        assert!(!r.wire_bytes_plausible());
        assert!(!r.counters_agree_with_model());
    }

    #[test]
    fn proc_net_tcp_prints_addresses_as_their_in_memory_u32() {
        // 10.199.3.1:7620 as /proc/net/tcp shows it on x86.
        let printed = proc_net_tcp_addr(Ipv4Addr::new(10, 199, 3, 1), 7620);
        if cfg!(target_endian = "little") {
            assert_eq!(printed, "0103C70A:1DC4");
        }
    }

    #[test]
    fn the_round_script_has_no_single_quote() {
        assert!(ROUND_SCRIPT.iter().all(|l| !l.contains('\'')));
    }
}
