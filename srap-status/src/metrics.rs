//! `--metrics ADDR`: the status as Prometheus text exposition (format
//! 0.0.4) on `GET /metrics`, over a deliberately tiny HTTP/1.x server: one
//! request per connection, a head of at most `MAX_HEAD` bytes, a deadline
//! per connection, a bounded number of connections at once. Anything else
//! gets a short error status. No web framework: a scrape endpoint needs none.
//!
//! Metrics (every one documented in [`METRICS`] and docs/agents.md):
//! `srap_observer_up`, `srap_active_flows`, `srap_flows{queue}`,
//! `srap_cpu_flows{cpu,by}`, `srap_queue_bytes_total{queue}`,
//! `srap_queue_packets_total{queue}`, `srap_collisions{kind}`,
//! `srap_prediction_accuracy{kind}`, `srap_description_contradicted`,
//! `srap_rss_version`, `srap_peers`, `srap_listen_open`, `srap_psk_keys`,
//! `srap_key_source{source}`, `srap_key_model_revision`,
//! `srap_key_confidence{count}`, `srap_flow_cpu{src,dst,kind}`,
//! `srap_nic_hash_flows{result}`, `srap_sender_flows{sender,cpu}`.

use std::{fmt::Write as _, io, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::watch,
    time::timeout,
};

use srap_common::wire::LandingVerdict;

use crate::{
    bounded::{self, Bounds},
    sender::SenderStatus,
    snapshot::Status,
};

/// Longest request head read.
const MAX_HEAD: usize = 8192;
/// Connections served at once, and how long a scraper has to send its
/// request and take the reply.
const BOUNDS: Bounds = Bounds {
    name: "metrics",
    at_once: 16,
    deadline: Duration::from_secs(5),
};

/// (name, type, help) of every metric, in exposition order.
pub const METRICS: &[(&str, &str, &str)] = &[
    (
        "srap_observer_up",
        "gauge",
        "1 while the receive observer is attached",
    ),
    (
        "srap_observer_limited",
        "gauge",
        "1 for each thing the receive observer runs without (missing=sock_diag: no sock_diag for TCP, so it runs at tc ingress or knows bytes only at close); see srap status",
    ),
    (
        "srap_active_flows",
        "gauge",
        "TCP flows with a packet in the last idle_after_ms",
    ),
    (
        "srap_flows",
        "gauge",
        "Active flows whose last packet arrived on this receive queue",
    ),
    (
        "srap_cpu_flows",
        "gauge",
        "Active flows per CPU, by the CPU the observer ran on (by=observer) or the queue's CPU in the RSS description (by=queue_cpu)",
    ),
    (
        "srap_queue_bytes_total",
        "counter",
        "Bytes received on this queue since the agent started (Ethernet header on)",
    ),
    (
        "srap_queue_packets_total",
        "counter",
        "Packets received on this queue since the agent started",
    ),
    (
        "srap_collisions",
        "gauge",
        "Queues (kind=queue) or CPUs (kind=cpu: the observer's; kind=rss_cpu: queue_cpu's) with more than one active flow",
    ),
    (
        "srap_prediction_accuracy",
        "gauge",
        "Share of active flows on the RSS model's queue (kind=queue) or on the sender's planned CPU (kind=plan); absent when there is nothing to judge",
    ),
    (
        "srap_description_contradicted",
        "gauge",
        "1 when recent flows do not land where the served RSS description says (the senders then stop steering), 0 when they do; absent until enough flows were judged",
    ),
    (
        "srap_rss_version",
        "gauge",
        "Version of the RSS description served to senders",
    ),
    (
        "srap_key_source",
        "gauge",
        "1 for where the served key comes from: reported (by the driver or a file), kernel-default (net.core.netdev_rss_key), learned (from landings) or unknown",
    ),
    (
        "srap_key_model_revision",
        "gauge",
        "Revision of the key learned from landings: grows each time a newly learned key is served or one is withdrawn (0: nothing learned)",
    ),
    (
        "srap_key_confidence",
        "gauge",
        "How far the landings back the served key: tested (recent landings), agreeing (of them on the queue it computes), rank (independent GF(2) equations they gave), needed (key-bit combinations planning the flow groups seen needs), known (of those, determined by the landings)",
    ),
    (
        "srap_nic_hash_flows",
        "gauge",
        "Active flows whose NIC's own RSS hash (skb->hash, tc hook only) equals the served key's Toeplitz hash of their tuple (result=agree), does not (result=differ: the key or hashed fields are not the device's), or who have none (result=none: another hook, or the driver hands none over: ethtool -K DEV rxhash on)",
    ),
    (
        "srap_nic_flows",
        "gauge",
        "Active flows entering by each NIC served (--iface), those to its addresses",
    ),
    (
        "srap_nic_gbps",
        "gauge",
        "Receive rate of the active flows entering by each NIC served, Gbit/s",
    ),
    (
        "srap_nic_cpus",
        "gauge",
        "Distinct receive CPUs of the active flows entering by each NIC served",
    ),
    (
        "srap_nic_up",
        "gauge",
        "1 when a NIC served is operationally up (up and its carrier on), 0 when not",
    ),
    (
        "srap_port_accepting_addresses",
        "gauge",
        "Served addresses a listening TCP port accepts on (sock_diag), per port",
    ),
    ("srap_peers", "gauge", "Sender agents connected"),
    (
        "srap_listen_open",
        "gauge",
        "1 when the receiver serves any address without a key or allow-list (--open)",
    ),
    (
        "srap_psk_keys",
        "gauge",
        "Pre-shared keys the receiver accepts (2 during a key rollover, 0 without a key)",
    ),
    (
        "srap_flow_cpu",
        "gauge",
        "The receiver CPU of each active flow: planned by its sender (kind=planned, where it reported its plan) and seen (kind=seen: the queue's CPU in the RSS description, else the CPU the observer ran on)",
    ),
    (
        "srap_sender_flows",
        "gauge",
        "Active flows of each sender (by source address) that its plan names, seen on the receive CPU it planned (cpu=planned) or on another (cpu=other); one series pair per sender, not per flow",
    ),
];

/// The exposition text of `status`.
pub fn render(status: &Status) -> String {
    let mut out = String::new();
    for &(name, kind, help) in METRICS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        let mut sample = |labels: &str, value: f64| {
            let _ = writeln!(out, "{name}{labels} {value}");
        };
        match name {
            "srap_observer_up" => sample("", f64::from(u8::from(status.observer.hook.is_some()))),
            "srap_observer_limited" => {
                for limit in &status.observer.limits {
                    sample(&format!("{{missing=\"{}\"}}", limit.missing), 1.0);
                }
            }
            "srap_active_flows" => sample("", status.active_flows as f64),
            "srap_flows" => {
                for q in &status.queues {
                    sample(&format!("{{queue=\"{}\"}}", q.queue), q.flows as f64);
                }
            }
            "srap_cpu_flows" => {
                for (by, rows) in [("observer", &status.cpus), ("queue_cpu", &status.rss_cpus)] {
                    for c in rows {
                        sample(
                            &format!("{{cpu=\"{}\",by=\"{by}\"}}", c.cpu),
                            c.flows as f64,
                        );
                    }
                }
            }
            "srap_queue_bytes_total" => {
                for q in &status.queues {
                    sample(&format!("{{queue=\"{}\"}}", q.queue), q.bytes as f64);
                }
            }
            "srap_queue_packets_total" => {
                for q in &status.queues {
                    sample(&format!("{{queue=\"{}\"}}", q.queue), q.packets as f64);
                }
            }
            "srap_collisions" => {
                let c = status.collisions;
                for (kind, n) in [
                    ("queue", c.queues),
                    ("cpu", c.cpus),
                    ("rss_cpu", c.rss_cpus),
                ] {
                    sample(&format!("{{kind=\"{kind}\"}}"), n as f64);
                }
            }
            "srap_prediction_accuracy" => {
                let a = status.accuracy;
                for (kind, ratio) in [("queue", a.queue), ("plan", a.plan)] {
                    if let Some(value) = ratio.value() {
                        sample(&format!("{{kind=\"{kind}\"}}"), value);
                    }
                }
            }
            "srap_description_contradicted" => match status.landings.verdict {
                LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => sample("", 1.0),
                LandingVerdict::Agreed => sample("", 0.0),
                LandingVerdict::Unknown => {}
            },
            "srap_rss_version" => sample("", status.rss_version as f64),
            "srap_key_source" => {
                sample(
                    &format!("{{source=\"{}\"}}", status.learning.source.name()),
                    1.0,
                );
            }
            "srap_key_model_revision" => sample("", f64::from(status.learning.revision)),
            "srap_key_confidence" => {
                let c = status.learning.confidence;
                for (count, n) in [
                    ("tested", c.tested),
                    ("agreeing", c.agreeing),
                    ("rank", c.rank),
                    ("needed", c.needed),
                    ("known", c.known),
                ] {
                    sample(&format!("{{count=\"{count}\"}}"), f64::from(n));
                }
            }
            "srap_nic_hash_flows" => {
                let n = status.nic_hash;
                for (result, count) in [("agree", n.agree), ("differ", n.differ), ("none", n.none)]
                {
                    sample(&format!("{{result=\"{result}\"}}"), count as f64);
                }
            }
            "srap_nic_flows" | "srap_nic_gbps" | "srap_nic_cpus" | "srap_nic_up" => {
                for nic in &status.nics {
                    let value = match name {
                        "srap_nic_flows" => nic.active_flows as f64,
                        // Never -0: a sum of no flows.
                        "srap_nic_gbps" => nic.gbps + 0.0,
                        "srap_nic_cpus" => nic.cpus.len() as f64,
                        _ => match nic.link {
                            srap_common::wire::NicLink::Up => 1.0,
                            srap_common::wire::NicLink::Down => 0.0,
                            srap_common::wire::NicLink::Unknown => continue,
                        },
                    };
                    sample(&format!("{{nic=\"{}\"}}", nic.name), value);
                }
            }
            "srap_port_accepting_addresses" => {
                for port in &status.listeners {
                    sample(
                        &format!("{{port=\"{}\"}}", port.port),
                        port.addrs.len() as f64,
                    );
                }
            }
            "srap_peers" => sample("", status.peers.len() as f64),
            "srap_listen_open" => sample("", f64::from(u8::from(status.access.open))),
            "srap_psk_keys" => sample("", status.access.keys.len() as f64),
            "srap_sender_flows" => {
                for (sender, planned, other) in sender_flows(status) {
                    for (cpu, count) in [("planned", planned), ("other", other)] {
                        sample(
                            &format!("{{sender=\"{sender}\",cpu=\"{cpu}\"}}"),
                            count as f64,
                        );
                    }
                }
            }
            "srap_flow_cpu" => {
                for f in status.flows.iter().filter(|f| !f.agent_link) {
                    let labels =
                        |kind| format!("{{src=\"{}\",dst=\"{}\",kind=\"{kind}\"}}", f.src, f.dst);
                    if let Some(planned) = f.planned_cpu {
                        sample(&labels("planned"), f64::from(planned));
                    }
                    // On the basis every other view counts by (the
                    // receiver's own CPU, or the description's CPU of the
                    // queue on a device without RSS), as senders are told.
                    if let Some(seen) = f.receive_cpu(status.receive_cpu) {
                        sample(&labels("seen"), f64::from(seen));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Per sender address (in order), its planned flows on the planned receive
/// CPU and on another, on the basis the receiver counts by.
fn sender_flows(status: &Status) -> Vec<(std::net::IpAddr, usize, usize)> {
    let mut senders = std::collections::BTreeMap::new();
    for f in status.flows.iter().filter(|f| !f.agent_link) {
        let Some(planned) = f.planned_cpu else {
            continue;
        };
        let counts = senders.entry(f.src.ip().to_canonical()).or_insert((0, 0));
        if f.receive_cpu(status.receive_cpu) == Some(planned) {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }
    senders
        .into_iter()
        .map(|(sender, (planned, other))| (sender, planned, other))
        .collect()
}

/// A snapshot served as Prometheus text: the receiver's [`Status`] or the
/// sender's [`SenderStatus`], so both agents share one tiny server.
pub trait Exposition: Send + Sync + 'static {
    fn exposition(&self) -> String;
}

impl Exposition for Status {
    fn exposition(&self) -> String {
        render(self)
    }
}

impl Exposition for SenderStatus {
    fn exposition(&self) -> String {
        render_sender(self)
    }
}

/// (name, type, help) of every metric of the sender agent, in exposition
/// order.
pub const SENDER_METRICS: &[(&str, &str, &str)] = &[
    (
        "srap_sender_binder_total",
        "counter",
        "The binder's counters by outcome (steered, retried, no_free_port, …, released; see docs/binder.md)",
    ),
    (
        "srap_sender_occupancy_audits_total",
        "counter",
        "Occupancy audits run since the agent started (one per --interval)",
    ),
    (
        "srap_sender_occupancy_repaired_total",
        "counter",
        "Occupancy repairs by kind (kind=stale_record: a socket record whose socket was closed, forgotten and its slot freed; kind=count_mismatch: a slot count set to the records that hold it). A repair is a bug report: expected 0",
    ),
    (
        "srap_sender_reader_flows",
        "gauge",
        "Open steered flows (--steer local|both) this host receives on the CPU of the thread that connected them (cpu=reader), on another CPU (cpu=other), or with either unknown (cpu=unknown)",
    ),
    (
        "srap_sender_spread_flows",
        "gauge",
        "Open steered flows the hook sent to another address of their receiver than the one the application asked for (--receiver-nics spread), by the address asked for and the one used",
    ),
    (
        "srap_sender_flow_cpu",
        "gauge",
        "Each open steered flow's CPU on this host: of the thread that connected it, at connect() (kind=connecting), and the one that processes what it receives (kind=receiving)",
    ),
    (
        "srap_sender_bond_member_flows",
        "gauge",
        "Open steered flows the bonding driver's layer3+4 hash puts on each member of a bond the route toward a receiver leaves by (0 for a member that cannot send)",
    ),
    (
        "srap_sender_bond_member_tx_bytes_total",
        "counter",
        "Each bond member's own tx_bytes counter: what it really sent",
    ),
    (
        "srap_sender_bond_member_usable",
        "gauge",
        "1 when the member can send (up; in 802.3ad, distributing in the active aggregator)",
    ),
    (
        "srap_sender_local_nic_up",
        "gauge",
        "1 when this host's NIC is operationally up; node is its NUMA node (unknown when the device does not say)",
    ),
    (
        "srap_sender_local_nic_flows",
        "gauge",
        "Open steered flows whose source address this host's NIC holds",
    ),
    (
        "srap_sender_local_nic_placed_fallback",
        "gauge",
        "With flows placed on this host's queues: 1 when this NIC's flows are placed with another NIC's RSS description (its own has none), 0 with its own; described_by names the one used",
    ),
    (
        "srap_sender_start_to_steering_seconds",
        "gauge",
        "From the binder's start (plan, the kernel's verifier, attach) to its hooks attached",
    ),
    (
        "srap_sender_program_verified_instructions",
        "gauge",
        "Instructions the kernel's verifier walked for each binder program loaded with these settings",
    ),
    (
        "srap_sender_local_nic_replans_total",
        "counter",
        "Re-plans made because this host's NICs changed (a link down or up, an address added or removed, a NIC added or gone)",
    ),
    (
        "srap_sender_spread_failing_addresses",
        "gauge",
        "Receiver addresses a moved connect's SYN got no answer from (--receiver-nics spread), which new connects are kept off until re-admitted",
    ),
    (
        "srap_sender_local_routing_missing",
        "gauge",
        "What the routing lacks for flows bound to a NIC's address to leave and come back by it (source rules, strict rp_filter, ARP flux); 0 when not checked",
    ),
    (
        "srap_sender_local_routing_installed",
        "gauge",
        "Source rules SRAP installed (--source-rules install) and keeps in the kernel",
    ),
    (
        "srap_sender_mptcp_connections",
        "gauge",
        "Open MPTCP connections of the steered cgroup, grouped by the kernel's token",
    ),
    (
        "srap_sender_mptcp_subflows",
        "gauge",
        "Their open subflows, the first one included",
    ),
    (
        "srap_sender_mptcp_subflows_sharing_cpu",
        "gauge",
        "Subflows on a receiver CPU that another subflow of the same connection uses (seen, else planned)",
    ),
    (
        "srap_sender_path_manager_followed_connections",
        "gauge",
        "MPTCP connections whose reader SRAP follows as the namespace's path manager (--mptcp follow-reader)",
    ),
    (
        "srap_sender_path_manager_unplaced_connections",
        "gauge",
        "Followed MPTCP connections with no subflow through a NIC of their reader's NUMA node",
    ),
    (
        "srap_sender_path_manager_total",
        "counter",
        "What the path manager did since it started: reader moves followed (moves), backup flags changed (flips), subflows asked for (subflows_made), subflows or announcements the kernel refused (refused)",
    ),
];

/// The sender agent's exposition text: the binder's counters and the
/// occupancy audit.
pub fn render_sender(status: &SenderStatus) -> String {
    let mut out = String::new();
    for &(name, kind, help) in SENDER_METRICS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        let mut sample = |labels: &str, value: u64| {
            let _ = writeln!(out, "{name}{labels} {value}");
        };
        match name {
            "srap_sender_binder_total" => {
                for (outcome, count) in &status.binder {
                    sample(&format!("{{outcome=\"{outcome}\"}}"), *count);
                }
            }
            "srap_sender_occupancy_audits_total" => sample("", status.occupancy.audits),
            "srap_sender_occupancy_repaired_total" => {
                let o = &status.occupancy;
                sample("{kind=\"stale_record\"}", o.stale_records);
                sample("{kind=\"count_mismatch\"}", o.count_mismatches);
            }
            "srap_sender_reader_flows" => {
                let (reader, other, unknown) = reader_flows(&status.flows);
                sample("{cpu=\"reader\"}", reader);
                sample("{cpu=\"other\"}", other);
                sample("{cpu=\"unknown\"}", unknown);
            }
            "srap_sender_spread_flows" => {
                for ((asked, used), n) in spread_flows(&status.flows) {
                    sample(&format!("{{asked=\"{asked}\",used=\"{used}\"}}"), n);
                }
            }
            "srap_sender_flow_cpu" => {
                for f in &status.flows {
                    let (Some(src), Some(dst)) = (f.src, f.dst) else {
                        continue;
                    };
                    let cpus = [
                        ("connecting", f.connecting_cpu),
                        ("receiving", f.local_softirq_cpu),
                    ];
                    for (kind, cpu) in cpus {
                        if let Some(cpu) = cpu {
                            let labels = format!("{{src=\"{src}\",dst=\"{dst}\",kind=\"{kind}\"}}");
                            sample(&labels, u64::from(cpu));
                        }
                    }
                }
            }
            "srap_sender_bond_member_flows"
            | "srap_sender_bond_member_tx_bytes_total"
            | "srap_sender_bond_member_usable" => {
                for bond in &status.bonds {
                    for m in &bond.members {
                        let labels = format!("{{bond=\"{}\",member=\"{}\"}}", bond.name, m.name);
                        let value = match name {
                            "srap_sender_bond_member_flows" => u64::from(m.flows),
                            "srap_sender_bond_member_usable" => u64::from(m.usable),
                            _ => m.tx_bytes,
                        };
                        sample(&labels, value);
                    }
                }
            }
            "srap_sender_local_nic_up" | "srap_sender_local_nic_flows" => {
                for nic in &status.local_nics {
                    let node = nic
                        .node
                        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
                    let (labels, value) = match name {
                        "srap_sender_local_nic_up" => (
                            format!("{{iface=\"{}\",node=\"{node}\"}}", nic.name),
                            u64::from(nic.up),
                        ),
                        _ => (format!("{{iface=\"{}\"}}", nic.name), u64::from(nic.flows)),
                    };
                    sample(&labels, value);
                }
            }
            "srap_sender_local_nic_placed_fallback" => {
                for nic in &status.local_nics {
                    let Some(with) = &nic.placed_with else {
                        continue;
                    };
                    let labels = format!("{{iface=\"{}\",described_by=\"{with}\"}}", nic.name);
                    sample(&labels, u64::from(nic.fallback.is_some()));
                }
            }
            "srap_sender_local_nic_replans_total" => sample("", status.local_nic_replans),
            // An older agent (no start row) gets no sample.
            // Seconds, as Prometheus names time (milliseconds in the
            // status); an older agent (no start row) gets no sample.
            "srap_sender_start_to_steering_seconds" if !status.start.programs.is_empty() => {
                let seconds = status.start.to_steering_ms as f64 / 1000.0;
                let _ = writeln!(out, "{name} {seconds:.3}");
            }
            "srap_sender_program_verified_instructions" => {
                for program in &status.start.programs {
                    let labels = format!("{{program=\"{}\"}}", program.name);
                    sample(&labels, u64::from(program.verified_insns));
                }
            }
            "srap_sender_spread_failing_addresses" => {
                sample("", status.spread_failing.len() as u64);
            }
            "srap_sender_local_routing_missing" => {
                sample("", status.local_routing.findings.len() as u64);
            }
            "srap_sender_local_routing_installed" => {
                sample("", status.local_routing.installed.len() as u64);
            }
            "srap_sender_mptcp_connections" => sample("", status.mptcp.len() as u64),
            "srap_sender_mptcp_subflows" | "srap_sender_mptcp_subflows_sharing_cpu" => {
                let subflows: usize = status.mptcp.iter().map(|m| m.subflows.len()).sum();
                let cpus: usize = status.mptcp.iter().map(|m| m.receiver_cpus().len()).sum();
                let value = match name {
                    "srap_sender_mptcp_subflows" => subflows,
                    _ => subflows.saturating_sub(cpus),
                };
                sample("", value as u64);
            }
            "srap_sender_path_manager_followed_connections"
            | "srap_sender_path_manager_unplaced_connections"
            | "srap_sender_path_manager_total" => {
                path_manager_samples(name, status.path_manager.as_ref(), &mut sample);
            }
            _ => {}
        }
    }
    out
}

/// The path manager's samples of metric `name`: none in another mode.
fn path_manager_samples(
    name: &str,
    pm: Option<&crate::sender::PathManagerRow>,
    sample: &mut dyn FnMut(&str, u64),
) {
    let Some(pm) = pm else {
        return;
    };
    match name {
        "srap_sender_path_manager_followed_connections" => sample("", pm.followed.len() as u64),
        "srap_sender_path_manager_unplaced_connections" => sample("", pm.unplaced() as u64),
        _ => {
            for (what, n) in [
                ("moves", pm.moves),
                ("flips", pm.flips),
                ("subflows_made", pm.subflows_made),
                ("refused", pm.refused),
            ] {
                sample(&format!("{{what=\"{what}\"}}"), n);
            }
        }
    }
}

/// Open flows the hook sent elsewhere than asked, per (address asked
/// for, address used), in address order.
fn spread_flows(
    flows: &[crate::sender::SenderFlowRow],
) -> std::collections::BTreeMap<(std::net::IpAddr, std::net::IpAddr), u64> {
    let mut counts = std::collections::BTreeMap::new();
    for f in flows {
        if let (Some(asked), Some(dst)) = (f.asked, f.dst) {
            *counts.entry((asked, dst.ip())).or_insert(0) += 1;
        }
    }
    counts
}

/// Open flows received on their connecting thread's CPU, on another, and
/// with either unknown.
fn reader_flows(flows: &[crate::sender::SenderFlowRow]) -> (u64, u64, u64) {
    flows
        .iter()
        .fold((0, 0, 0), |(on, off, unknown), f| match f.on_reader() {
            Some(true) => (on + 1, off, unknown),
            Some(false) => (on, off + 1, unknown),
            None => (on, off, unknown + 1),
        })
}

/// Serves scrapes on `listener` until the task is dropped or aborted.
pub async fn serve<T: Exposition>(listener: TcpListener, status: watch::Receiver<Arc<T>>) {
    bounded::serve_latest(listener, BOUNDS, status, |stream, status| async move {
        exchange(stream, &status).await
    })
    .await;
}

async fn exchange<T: Exposition>(
    mut stream: TcpStream,
    status: &watch::Receiver<Arc<T>>,
) -> io::Result<()> {
    let reply = match read_head(&mut stream).await? {
        Some(head) => respond(&head, status),
        None => response(
            "431 Request Header Fields Too Large",
            "request head too large\n",
        ),
    };
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await?;
    // Read what the client still sends (bounded) before closing: closing on
    // unread data sends a reset, which can destroy the reply in flight.
    let mut sink = [0u8; 4096];
    let mut left = 64 * 1024usize;
    let _ = timeout(Duration::from_secs(1), async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    Ok(())
}

/// The request head (up to the blank line), or None when it is too long.
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before the end of the request head",
            ));
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

fn respond<T: Exposition>(head: &str, status: &watch::Receiver<Arc<T>>) -> String {
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
        return response("400 Bad Request", "not an HTTP/1.x request\n");
    }
    let path = target.unwrap_or("").split('?').next().unwrap_or("");
    match (method, path) {
        (Some("GET"), "/metrics") => {
            let body = status.borrow().exposition();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        (Some("GET"), _) => response("404 Not Found", "only /metrics is served\n"),
        _ => response("405 Method Not Allowed", "only GET /metrics is served\n"),
    }
}

fn response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Collisions, FlowRow, NicHashCounts, ObserverState, QueueRow, Ratio};

    fn status() -> Status {
        let mut status = Status {
            rss_version: 3,
            observer: ObserverState {
                hook: Some("xdp (driver)".into()),
                error: None,
                limits: Vec::new(),
            },
            queues: vec![
                QueueRow {
                    queue: 0,
                    flows: 2,
                    bytes: 3000,
                    packets: 3,
                    collision: true,
                    ..QueueRow::default()
                },
                QueueRow {
                    queue: 1,
                    ..QueueRow::default()
                },
            ],
            collisions: Collisions {
                queues: 1,
                cpus: 0,
                rss_cpus: 1,
            },
            flows: vec![FlowRow {
                src: "10.0.0.1:40001".parse().expect("addr"),
                dst: "10.0.0.2:5201".parse().expect("addr"),
                queue: Some(0),
                cpu: 1,
                rss_cpu: Some(4),
                predicted_queue: Some(0),
                predicted_cpu: Some(4),
                planned_cpu: Some(4),
                gbps: 0.0,
                rate_cov: None,
                packets: 3,
                bytes: 3000,
                moves: 0,
                agent_link: false,
                nic_hash: None,
                nic_hash_agrees: None,
            }],
            ..Status::default()
        };
        status.accuracy.queue = Ratio {
            matched: 1,
            total: 2,
        };
        status.nic_hash = NicHashCounts {
            read: true,
            agree: 1,
            differ: 1,
            none: 0,
        };
        status
    }

    #[test]
    fn each_moved_flow_counts_under_the_address_asked_for_and_the_one_used() {
        let flow = |src: &str, dst: &str, asked: Option<&str>| crate::sender::SenderFlowRow {
            src: src.parse().ok(),
            dst: dst.parse().ok(),
            asked: asked.and_then(|a| a.parse().ok()),
            ..Default::default()
        };
        let status = SenderStatus {
            flows: vec![
                flow("10.0.0.1:40001", "10.0.0.2:5201", None),
                flow("10.0.1.1:40002", "10.0.1.2:5201", Some("10.0.0.2")),
                flow("10.0.1.1:40003", "10.0.1.2:5201", Some("10.0.0.2")),
            ],
            ..SenderStatus::default()
        };
        let text = render_sender(&status);
        assert!(
            text.contains("# TYPE srap_sender_spread_flows gauge"),
            "{text}"
        );
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("srap_sender_spread_flows{"))
            .collect();
        assert_eq!(
            lines,
            ["srap_sender_spread_flows{asked=\"10.0.0.2\",used=\"10.0.1.2\"} 2"],
            "the flow kept on its address counts nowhere"
        );
    }

    #[test]
    fn the_sender_exposes_its_counters_and_occupancy_repairs() {
        let mut status = SenderStatus {
            binder: vec![("steered".into(), 16), ("released".into(), 8)],
            flows: vec![crate::sender::SenderFlowRow {
                src: "10.0.0.1:40001".parse().ok(),
                dst: "10.0.0.2:5201".parse().ok(),
                connecting_cpu: Some(3),
                local_softirq_cpu: Some(3),
                ..Default::default()
            }],
            ..SenderStatus::default()
        };
        status.occupancy.audits = 12;
        status.occupancy.repaired = 1;
        status.occupancy.stale_records = 1;
        status.bonds = vec![crate::sender::BondRow {
            name: "bond0".into(),
            members: vec![
                crate::sender::MemberRow {
                    name: "eth1".into(),
                    usable: true,
                    flows: 8,
                    tx_bytes: 900,
                    tx_bytes_per_s: None,
                },
                crate::sender::MemberRow {
                    name: "eth0".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }];
        status.local_nics = vec![
            crate::sender::LocalNicRow {
                name: "eth0".into(),
                node: Some(1),
                addresses: vec!["10.0.0.1".parse().expect("ip")],
                up: true,
                ..Default::default()
            },
            crate::sender::LocalNicRow {
                name: "veth1".into(),
                addresses: vec!["10.9.0.1".parse().expect("ip")],
                placed_with: Some("eth0".into()),
                fallback: Some("veth1 has no RSS description".into()),
                ..Default::default()
            },
        ];
        status.local_nic_replans = 2;
        status.spread_failing = vec![crate::sender::SpreadFailingRow {
            asked: "10.0.0.2".parse().unwrap(),
            used: "10.0.1.2".parse().unwrap(),
            port: 5201,
            syns: 1,
            readmit_in_ms: 30_000,
        }];
        status.local_routing.findings = vec!["eth1: flows from …".into()];
        status.count_local_nic_flows();
        let subflow = |cpu| crate::sender::MptcpSubflowRow {
            receiver_cpu_planned: Some(cpu),
            ..Default::default()
        };
        status.mptcp = vec![crate::sender::MptcpRow {
            token: 0xabc,
            subflows: vec![subflow(1), subflow(1), subflow(2)],
        }];
        status.path_manager = Some(crate::sender::PathManagerRow {
            moves: 3,
            flips: 6,
            followed: vec![crate::sender::FollowedRow {
                unplaced: Some("node 1 has no followed NIC".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let text = render_sender(&status);
        for line in [
            "# TYPE srap_sender_occupancy_repaired_total counter",
            "srap_sender_binder_total{outcome=\"steered\"} 16",
            "srap_sender_occupancy_audits_total 12",
            "srap_sender_occupancy_repaired_total{kind=\"stale_record\"} 1",
            "srap_sender_occupancy_repaired_total{kind=\"count_mismatch\"} 0",
            "srap_sender_reader_flows{cpu=\"reader\"} 1",
            "srap_sender_reader_flows{cpu=\"other\"} 0",
            "srap_sender_reader_flows{cpu=\"unknown\"} 0",
            "srap_sender_flow_cpu{src=\"10.0.0.1:40001\",dst=\"10.0.0.2:5201\",kind=\"connecting\"} 3",
            "srap_sender_flow_cpu{src=\"10.0.0.1:40001\",dst=\"10.0.0.2:5201\",kind=\"receiving\"} 3",
            "srap_sender_bond_member_flows{bond=\"bond0\",member=\"eth1\"} 8",
            "srap_sender_bond_member_tx_bytes_total{bond=\"bond0\",member=\"eth1\"} 900",
            "srap_sender_bond_member_usable{bond=\"bond0\",member=\"eth0\"} 0",
            "srap_sender_local_nic_up{iface=\"eth0\",node=\"1\"} 1",
            "srap_sender_local_nic_up{iface=\"veth1\",node=\"unknown\"} 0",
            "srap_sender_local_nic_flows{iface=\"eth0\"} 1",
            "srap_sender_local_nic_flows{iface=\"veth1\"} 0",
            "srap_sender_local_nic_placed_fallback{iface=\"veth1\",described_by=\"eth0\"} 1",
            "srap_sender_local_nic_replans_total 2",
            "srap_sender_spread_failing_addresses 1",
            "srap_sender_local_routing_missing 1",
            "srap_sender_local_routing_installed 0",
            "srap_sender_mptcp_connections 1",
            "srap_sender_mptcp_subflows 3",
            "srap_sender_mptcp_subflows_sharing_cpu 1",
            "srap_sender_path_manager_followed_connections 1",
            "srap_sender_path_manager_unplaced_connections 1",
            "srap_sender_path_manager_total{what=\"moves\"} 3",
            "srap_sender_path_manager_total{what=\"flips\"} 6",
            "srap_sender_path_manager_total{what=\"refused\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn every_metric_has_help_type_and_samples() {
        let text = render(&status());
        for &(name, kind, _) in METRICS {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        }
        for line in [
            "srap_observer_up 1",
            "srap_flows{queue=\"0\"} 2",
            "srap_flows{queue=\"1\"} 0",
            "srap_queue_bytes_total{queue=\"0\"} 3000",
            "srap_queue_packets_total{queue=\"0\"} 3",
            "srap_collisions{kind=\"queue\"} 1",
            "srap_collisions{kind=\"rss_cpu\"} 1",
            "srap_prediction_accuracy{kind=\"queue\"} 0.5",
            "srap_rss_version 3",
            "srap_peers 0",
            "srap_key_source{source=\"reported\"} 1",
            "srap_key_model_revision 0",
            "srap_key_confidence{count=\"needed\"} 0",
            "srap_flow_cpu{src=\"10.0.0.1:40001\",dst=\"10.0.0.2:5201\",kind=\"planned\"} 4",
            // Observed basis: the observer's CPU 1, planned 4; the flow's
            // seen CPU and the per-sender count say the same.
            "srap_flow_cpu{src=\"10.0.0.1:40001\",dst=\"10.0.0.2:5201\",kind=\"seen\"} 1",
            "srap_sender_flows{sender=\"10.0.0.1\",cpu=\"planned\"} 0",
            "srap_sender_flows{sender=\"10.0.0.1\",cpu=\"other\"} 1",
            "srap_nic_hash_flows{result=\"agree\"} 1",
            "srap_nic_hash_flows{result=\"differ\"} 1",
            "srap_nic_hash_flows{result=\"none\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("kind=\"plan\""),
            "nothing to judge: no sample"
        );
    }

    /// Each NIC served is a series of each per-NIC metric, its link up
    /// as 1 or 0 (unknown: none), each listening port one series.
    #[test]
    fn each_nic_and_port_is_a_series() {
        use crate::snapshot::{ListenerRow, NicRow};
        use srap_common::wire::NicLink;
        let mut status = status();
        status.nics = vec![
            NicRow {
                name: "eth0".into(),
                link: NicLink::Up,
                active_flows: 4,
                gbps: 1.5,
                cpus: vec![0, 2],
                ..NicRow::default()
            },
            NicRow {
                name: "eth1".into(),
                link: NicLink::Down,
                gbps: -0.0,
                ..NicRow::default()
            },
            NicRow {
                name: "eth2".into(),
                ..NicRow::default()
            },
        ];
        status.listeners = vec![ListenerRow {
            port: 5201,
            addrs: vec![
                "10.0.0.2".parse().expect("address"),
                "10.0.1.2".parse().expect("address"),
            ],
        }];
        let text = render(&status);
        for line in [
            "srap_nic_flows{nic=\"eth0\"} 4",
            "srap_nic_gbps{nic=\"eth0\"} 1.5",
            "srap_nic_gbps{nic=\"eth1\"} 0",
            "srap_nic_cpus{nic=\"eth0\"} 2",
            "srap_nic_up{nic=\"eth0\"} 1",
            "srap_nic_up{nic=\"eth1\"} 0",
            "srap_port_accepting_addresses{port=\"5201\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("srap_nic_up{nic=\"eth2\"}"), "{text}");
    }

    #[tokio::test]
    async fn serves_get_metrics_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (_tx, rx) = watch::channel(Arc::new(status()));
        let server = tokio::spawn(serve(listener, rx));
        let ask = |request: Vec<u8>| async move {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.write_all(&request).await.expect("send");
            let mut reply = String::new();
            stream.read_to_string(&mut reply).await.expect("reply");
            reply
        };
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\r\n\r\n# HELP srap_observer_up"));
        assert!(ok.contains("srap_rss_version 3\n"));
        let missing = ask(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = ask(b"POST /metrics HTTP/1.1\r\n\r\n".to_vec()).await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let junk = ask(b"hello\r\n\r\n".to_vec()).await;
        assert!(junk.starts_with("HTTP/1.1 400"), "{junk}");
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 3 * MAX_HEAD));
        let huge = ask(huge).await;
        assert!(huge.starts_with("HTTP/1.1 431"), "{huge}");
        server.abort();
    }
}
