//! `srap status --sender --once` (or not on a terminal): the sender agent's
//! receivers and binder counters as plain text.

use std::fmt::Write as _;

use srap_common::rss::KeySource;
use srap_status::{
    SenderStatus,
    sender::{BondRow, LocalRoutingRow, LocalRow, OccupancyRow, ReceiverRow, SenderFlowRow},
};

/// The binder's start: how long until steering, and what the kernel's
/// verifier walked of each hook (the settings decide which are loaded).
fn start_line(start: &srap_status::sender::StartRow) -> Option<String> {
    if start.programs.is_empty() {
        return None;
    }
    let hooks: Vec<String> = start
        .programs
        .iter()
        .map(|p| format!("{} {} insns {} ms", p.name, p.verified_insns, p.load_ms))
        .collect();
    Some(format!(
        "steering active {} ms after start; verified: {}",
        start.to_steering_ms,
        hooks.join(", ")
    ))
}

pub fn render(status: &SenderStatus) -> String {
    let mut out = String::new();
    if status.pin_dir.is_empty() {
        let _ = writeln!(
            out,
            "sender: not steering yet (no description from any receiver)"
        );
    } else {
        let _ = writeln!(
            out,
            "sender: cgroup {}, pins {}",
            status.cgroup, status.pin_dir
        );
        if let Some(line) = start_line(&status.start) {
            let _ = writeln!(out, "{line}");
        }
    }
    let counters: Vec<String> = shown_counters(status)
        .map(|(name, count)| format!("{name}={count}"))
        .collect();
    if !counters.is_empty() {
        let _ = writeln!(out, "binder: {} (the rest 0)", counters.join(" "));
    }
    for (errno, count) in &status.bind_errnos {
        let _ = writeln!(out, "  bind refused: {errno} ×{count}");
    }
    for line in occupancy_lines(&status.occupancy) {
        let _ = writeln!(out, "{line}");
    }
    // `--steer local` follows no receiver agent: no table to head.
    if !status.receivers.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<22} {:<10} {:>7} {:<16} {:>3} {:>5} {:>5}  {:<8} grant",
            "receiver", "link", "version", "address", "row", "slots", "flows", "steering"
        );
    }
    for r in &status.receivers {
        receiver_lines(&mut out, r);
    }
    if let Some(local) = &status.local {
        let _ = writeln!(out);
        for line in local_summary(local) {
            let _ = writeln!(out, "{line}");
        }
    }
    for part in [local_nics_summary(status), spread_failing_summary(status)] {
        if !part.is_empty() {
            let _ = writeln!(out);
            for line in part {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    for bond in &status.bonds {
        let _ = writeln!(out);
        for line in bond_summary(bond) {
            let _ = writeln!(out, "{line}");
        }
    }
    let mptcp = [mptcp_summary(status), path_manager_summary(status)].concat();
    if !mptcp.is_empty() {
        let _ = writeln!(out);
        for line in mptcp {
            let _ = writeln!(out, "{line}");
        }
    }
    flow_lines(&mut out, &status.flows);
    out
}

/// The MPTCP connections among the flows: per connection its token (as
/// `ss -tni` prints it) and how many distinct receiver CPUs its subflows
/// use, then per subflow its address ids, tuple, receiver CPU (seen, else
/// planned and marked `p`) and the NIC holding its source address. The
/// plain text's and the dashboard's. Empty without MPTCP.
pub(super) fn mptcp_summary(status: &SenderStatus) -> Vec<String> {
    let mut lines = Vec::new();
    for conn in &status.mptcp {
        lines.push(format!(
            "MPTCP token {:x}: {} subflows on {} receiver CPUs",
            conn.token,
            conn.subflows.len(),
            conn.receiver_cpus().len()
        ));
        for sub in &conn.subflows {
            let cpu = match (sub.receiver_cpu_seen, sub.receiver_cpu_planned) {
                (Some(seen), _) => seen.to_string(),
                (None, Some(planned)) => format!("{planned}p"),
                (None, None) => "-".to_owned(),
            };
            lines.push(format!(
                "  id {}/{} {:<22} -> {:<22} cpu {:>4}  nic {}",
                sub.local_id,
                sub.remote_id,
                sub.src.map_or("-".to_owned(), |a| a.to_string()),
                sub.dst.map_or("-".to_owned(), |a| a.to_string()),
                cpu,
                sub.local_nic.as_deref().unwrap_or("-")
            ));
        }
    }
    lines
}

/// SRAP as the MPTCP path manager (`--mptcp follow-reader`): its
/// counters, then per followed connection the node that reads it, the
/// subflow its data comes by (the one not marked backup) and each
/// subflow's flag, with a warning where none is on the reader's node.
/// Empty in the other modes.
pub(super) fn path_manager_summary(status: &SenderStatus) -> Vec<String> {
    let Some(pm) = &status.path_manager else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "MPTCP path manager (following readers; {} before): {} of {} connections followed, \
         {} moves, {} flags changed, {} subflows made, {} refused",
        pm.before,
        pm.followed.len(),
        pm.connections,
        pm.moves,
        pm.flips,
        pm.subflows_made,
        pm.refused
    )];
    for conn in &pm.followed {
        let node = conn.reader_node.map_or_else(
            || "not read yet".to_owned(),
            |n| format!("read on node {n}"),
        );
        let took = conn
            .last_move_ms
            .map(|ms| format!(", the last followed in {ms} ms"))
            .unwrap_or_default();
        lines.push(format!(
            "  token {:x}{}: {node}, {} moves{took}",
            conn.token,
            if conn.server_side { " (accepted)" } else { "" },
            conn.moves
        ));
        if let Some(why) = &conn.unplaced {
            lines.push(format!("    warning: {why}"));
        }
        for sub in &conn.subflows {
            lines.push(format!(
                "    {:<22} -> {:<22} nic {:<8} {}",
                sub.local.to_string(),
                sub.remote.to_string(),
                sub.nic.as_deref().unwrap_or("-"),
                if sub.backup { "backup" } else { "data" }
            ));
        }
    }
    lines
}

/// The receiver addresses new connects are kept off because a moved
/// connect's SYN got no answer there (`--receiver-nics spread`), each with
/// the address asked for and when it is re-admitted. Empty when none.
pub(super) fn spread_failing_summary(status: &SenderStatus) -> Vec<String> {
    if status.spread_failing.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![
        "receiver addresses whose SYN got no answer (connects keep the asked one):".to_owned(),
    ];
    for f in &status.spread_failing {
        lines.push(format!(
            "  {} (asked {} port {}): {} SYN unanswered, re-admitted in {} s; check the firewall and route toward {}",
            f.used,
            f.asked,
            f.port,
            f.syns,
            f.readmit_in_ms.div_ceil(1000),
            f.used
        ));
    }
    lines
}

/// This host's NICs: per NIC its NUMA node (`?` when the device does not
/// say), link, the open flows whose source address it holds, and its
/// addresses; `*` marks a `--local-iface`, with its queues' CPUs. The
/// plain text's and the dashboard's. Empty for an older agent.
pub(super) fn local_nics_summary(status: &SenderStatus) -> Vec<String> {
    if status.local_nics.is_empty() {
        return Vec::new();
    }
    let mut head = "local NICs".to_owned();
    if !status.local_nics_policy.is_empty() {
        let _ = write!(head, " (--local-nics {})", status.local_nics_policy);
    }
    if status.local_nic_replans > 0 {
        let _ = write!(
            head,
            ", {} re-plans on NIC changes",
            status.local_nic_replans
        );
    }
    let mut lines = vec![
        format!("{head}:"),
        format!(
            "  {:<16} {:>4} {:<5} {:>5}  addresses",
            "NIC", "node", "link", "flows"
        ),
    ];
    for nic in &status.local_nics {
        let name = if nic.given {
            format!("{}*", nic.name)
        } else {
            nic.name.clone()
        };
        let node = nic.node.map_or_else(|| "?".to_owned(), |n| n.to_string());
        let addresses: Vec<String> = nic.addresses.iter().map(ToString::to_string).collect();
        let mut line = format!(
            "  {:<16} {:>4} {:<5} {:>5}  {}",
            name,
            node,
            if nic.up { "up" } else { "down" },
            nic.flows,
            if addresses.is_empty() {
                "-".to_owned()
            } else {
                addresses.join(", ")
            }
        );
        if !nic.members.is_empty() {
            let _ = write!(line, " (bond of {})", nic.members.join(", "));
        }
        lines.push(line);
        if let Some(cpus) = &nic.queue_cpu {
            let cpus: Vec<String> = cpus.iter().map(ToString::to_string).collect();
            lines.push(format!("    queue → CPU: {}", cpus.join(" ")));
        }
        if let Some(with) = &nic.placed_with {
            let mut line = format!("    placed on this host's queues with {with}'s description");
            if let Some(why) = &nic.fallback {
                let _ = write!(line, " (fallback: {why})");
            }
            lines.push(line);
        }
    }
    lines.extend(routing_lines(&status.local_routing));
    lines
}

/// The routing block under the local NICs: what flows bound to each
/// NIC's address lack to leave and come back by it, with the fixes, and
/// what `--source-rules install` added. Nothing when it was not checked.
fn routing_lines(routing: &LocalRoutingRow) -> Vec<String> {
    if !routing.checked {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "  routing (--source-rules {}): {}",
        routing.source_rules,
        if routing.findings.is_empty() {
            "each NIC's flows leave and return by it"
        } else {
            "missing"
        }
    )];
    lines.extend(routing.findings.iter().map(|f| format!("    ! {f}")));
    lines.extend(
        routing
            .installed
            .iter()
            .map(|i| format!("    installed: {i}")),
    );
    lines.extend(routing.not_installed.iter().map(|n| format!("    {n}")));
    lines
}

/// A bond on the route: whether flows are balanced over its members (or
/// why not), what the members' own counters said of the driver's hash, and
/// per member its flows (by the driver's hash) and what its own counters
/// say it sent. The plain text's and the dashboard's.
pub(super) fn bond_summary(bond: &BondRow) -> Vec<String> {
    let state = if bond.balanced {
        "flows balanced over the usable members".to_owned()
    } else {
        format!(
            "members not balanced: {}",
            bond.why_not.as_deref().unwrap_or("no plan")
        )
    };
    let mut lines = vec![format!(
        "bond {} ({}, {}): {state}",
        bond.name, bond.mode, bond.policy
    )];
    if let Some(counters) = &bond.counters {
        lines.push(format!(
            "  members' own counters vs the driver's hash: {counters}"
        ));
    }
    lines.push(format!(
        "  {:<12} {:<7} {:>5} {:>14} {:>12}",
        "member", "usable", "flows", "tx bytes", "tx rate"
    ));
    for m in &bond.members {
        let rate = m.tx_bytes_per_s.map_or("-".to_owned(), |r| {
            format!("{:.1} Mbit/s", r as f64 * 8.0 / 1e6)
        });
        lines.push(format!(
            "  {:<12} {:<7} {:>5} {:>14} {:>12}",
            m.name,
            if m.usable { "yes" } else { "no" },
            m.flows,
            m.tx_bytes,
            rate
        ));
    }
    lines
}

/// The occupancy audit's repairs, only when it made any: each is a bug
/// report (docs/troubleshooting.md). The text's lines and the live page's.
pub(super) fn occupancy_lines(audit: &OccupancyRow) -> Vec<String> {
    if audit.repaired == 0 {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "occupancy_repaired={} (stale records {}, count mismatches {}) in {} audits: a bug, \
         please report it with the agent's log",
        audit.repaired, audit.stale_records, audit.count_mismatches, audit.audits
    )];
    if let Some(last) = &audit.last {
        lines.push(format!("  last: {last}"));
    }
    lines
}

/// This host's NIC (`--steer local|both`), its landings verdict and its
/// key: the text's lines and the live page's.
pub(super) fn local_summary(local: &LocalRow) -> Vec<String> {
    let verdict = if local.watching {
        format!(
            "landings {} ({} of {} on the planned queue){}",
            serde_json::to_value(local.verdict)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            local.matched,
            local.judged,
            if local.paused {
                ", steering paused"
            } else {
                ""
            }
        )
    } else {
        "landings not watched (no socket hook)".to_owned()
    };
    let placement = if local.placement.is_empty() {
        String::new()
    } else {
        format!(", --local-placement {}", local.placement)
    };
    let mut lines = vec![format!(
        "this host's NIC {} (--steer {}{placement}): CPUs {}; {verdict}",
        local.nic,
        local.steer,
        srap_host::cpulist::format(local.cpus.iter().copied())
    )];
    if let Some(key) = &local.key {
        lines.push(format!("  description version {}, {key}", local.version));
    }
    lines
}

/// Each open connection's CPU at both ends, planned/seen; `!` marks a
/// receiver CPU seen other than planned, and why a seen CPU is unknown
/// follows the table (once per reason).
fn flow_lines(out: &mut String, flows: &[SenderFlowRow]) {
    if flows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<26} {:<26} {:>17} {:>14} {:>15}",
        "flow", "to", "receiver CPU p/s", "local CPU p/s", "reader CPU c/r"
    );
    for f in flows {
        let [src, dst, receiver, local, reader] = flow_cells(f);
        let _ = writeln!(
            out,
            "{src:<26} {dst:<26} {receiver:>17} {local:>14} {reader:>15}"
        );
    }
    if let Some(line) = reader_line(flows) {
        let _ = writeln!(out, "{line}");
    }
    let off = flows.iter().filter(|f| f.receiver_cpu_off_plan).count();
    if off > 0 {
        let _ = writeln!(
            out,
            "! {off} of {} flows seen on another receiver CPU than planned",
            flows.len()
        );
    }
    for (why, n) in unknown_reasons(flows) {
        let _ = writeln!(out, "receiver CPU seen unknown for {n} flow(s): {why}");
    }
}

/// How many flows this host receives on the CPU of the thread that opened
/// them, of those where both are known; `None` when none is.
pub(super) fn reader_line(flows: &[SenderFlowRow]) -> Option<String> {
    let known: Vec<bool> = flows.iter().filter_map(SenderFlowRow::on_reader).collect();
    if known.is_empty() {
        return None;
    }
    let on = known.iter().filter(|on| **on).count();
    Some(format!(
        "{on} of {} flows received on the CPU of the thread that connected{}",
        known.len(),
        if on < known.len() {
            " (! marks the others)"
        } else {
            ""
        }
    ))
}

/// A flow's cells: its address, the server's (with the address the
/// application asked for when the hook sent it to another of the
/// receiver's, `--receiver-nics spread`), its receiver CPU planned/seen
/// (`!` first when they differ), its local CPU planned/seen and the CPU of
/// the thread that connected / the CPU that receives its data (`!` first
/// when they differ; `-`: unknown). The text's and the live page's.
pub(super) fn flow_cells(f: &SenderFlowRow) -> [String; 5] {
    let cpu = |c: Option<u32>| c.map_or("-".to_owned(), |c| c.to_string());
    let addr = |a: Option<std::net::SocketAddr>| a.map_or("-".to_owned(), |a| a.to_string());
    let off = if f.receiver_cpu_off_plan { "!" } else { "" };
    let dst = match f.asked {
        Some(asked) => format!("{} (asked {asked})", addr(f.dst)),
        None => addr(f.dst),
    };
    [
        addr(f.src),
        dst,
        format!(
            "{off}{}/{}",
            cpu(f.receiver_cpu_planned),
            cpu(f.receiver_cpu_seen)
        ),
        format!("{}/{}", cpu(f.local_cpu_planned), cpu(f.local_cpu_seen)),
        format!(
            "{}{}/{}",
            if f.on_reader() == Some(false) {
                "!"
            } else {
                ""
            },
            cpu(f.connecting_cpu),
            cpu(f.local_softirq_cpu)
        ),
    ]
}

/// Why receiver CPUs seen are unknown, each reason once with its count, in
/// the order first met.
pub(super) fn unknown_reasons(flows: &[SenderFlowRow]) -> Vec<(&str, usize)> {
    let mut reasons: Vec<(&str, usize)> = Vec::new();
    for why in flows
        .iter()
        .filter_map(|f| f.receiver_seen_unknown.as_deref())
    {
        match reasons.iter_mut().find(|(r, _)| *r == why) {
            Some((_, n)) => *n += 1,
            None => reasons.push((why, 1)),
        }
    }
    reasons
}

fn receiver_lines(out: &mut String, r: &ReceiverRow) {
    let version = r.version.map_or("-".to_owned(), |v| v.to_string());
    let steering = steering(r);
    let grant = r.grant.as_ref().map_or("none (every CPU)".to_owned(), |g| {
        format!(
            "epoch {}: {} CPUs {}",
            g.epoch,
            g.cpus.len(),
            srap_host::cpulist::format(g.cpus.iter().copied())
        )
    });
    for (i, a) in r.addresses.iter().enumerate() {
        let addr = a.addr.map_or("-".to_owned(), |ip| ip.to_string());
        let first = i == 0;
        let pick = |s: &str| if first { s.to_owned() } else { String::new() };
        let _ = writeln!(
            out,
            "{:<22} {:<10} {:>7} {addr:<16} {:>3} {:>5} {:>5}  {:<8} {}",
            pick(&r.peer),
            pick(&r.link),
            pick(&version),
            a.row,
            a.slots,
            a.open_flows,
            pick(steering),
            pick(&grant)
        );
    }
    if let Some(reason) = &r.reason {
        let _ = writeln!(out, "{:<22} away: {reason}", "");
    }
    if let Some(key) = r
        .key
        .filter(|k| k.source != KeySource::Reported || k.confidence.agreeing < k.confidence.tested)
    {
        let _ = writeln!(out, "{:<22} {key}", "");
    }
    for line in receiver_nic_lines(r) {
        let _ = writeln!(out, "{:<22} {line}", "");
    }
}

/// The receiver's NICs (protocol 8) and, per listening port, its addresses
/// that accept it; or why they are unknown. Nothing for a receiver of one
/// NIC that listens nowhere else.
pub(super) fn receiver_nic_lines(r: &ReceiverRow) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(why) = &r.nics_unknown {
        lines.push(format!("NICs: unknown ({why})"));
        return lines;
    }
    let list = |addrs: &[std::net::IpAddr]| {
        addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for nic in &r.nics {
        let speed = nic
            .speed_mbps
            .map_or(String::new(), |s| format!(" {s} Mb/s"));
        let node = nic
            .numa_node
            .map_or("node ?".to_owned(), |n| format!("node {n}"));
        let link = serde_json::to_value(nic.link)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let rss = match &nic.queue_cpu {
            Some(cpus) => format!(
                "RSS {} entries, {} queues on CPUs {}",
                nic.indir_entries,
                cpus.len(),
                srap_host::cpulist::format(cpus.iter().copied())
            ),
            None if nic.indir_entries > 0 => format!("RSS {} entries", nic.indir_entries),
            None => "no RSS described".to_owned(),
        };
        let verifier = match nic.verdict {
            Some(verdict) => format!(
                "verifier {}: {} of {} landed as computed",
                serde_json::to_value(verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                nic.matched,
                nic.judged
            ),
            None => "no verifier".to_owned(),
        };
        let cpus = if nic.cpus.is_empty() {
            "no CPUs offered".to_owned()
        } else {
            format!(
                "CPUs {}",
                srap_host::cpulist::format(nic.cpus.iter().copied())
            )
        };
        let granted = nic.granted.as_ref().map_or(String::new(), |g| {
            format!(
                "; granted {}",
                if g.is_empty() {
                    "none".to_owned()
                } else {
                    srap_host::cpulist::format(g.iter().copied())
                }
            )
        });
        lines.push(format!(
            "NIC {} {link}{speed} {node}: {}; {rss}; {verifier}; {cpus}{granted}",
            nic.name,
            list(&nic.addrs)
        ));
    }
    for port in &r.ports {
        lines.push(format!(
            "port {} accepted on {}",
            port.port,
            list(&port.addrs)
        ));
    }
    lines
}

/// Whether steering toward `r` is on: `yes`, `paused` (its landings
/// contradict its description) or `no` (no description yet).
pub fn steering(r: &ReceiverRow) -> &'static str {
    match (r.version, r.paused) {
        (None, _) => "no",
        (Some(_), true) => "paused",
        (Some(_), false) => "yes",
    }
}

/// The binder's counters worth a line: `steered` always, the others once
/// they happened (most outcomes stay zero on a healthy host, and a wall of
/// zeros hides the one that is not).
pub(super) fn shown_counters(status: &SenderStatus) -> impl Iterator<Item = (&str, u64)> {
    status
        .binder
        .iter()
        .filter(|(name, count)| *count > 0 || name == "steered")
        .map(|(name, count)| (name.as_str(), *count))
}

/// This host's NIC under `--steer local`, its key learned and agreeing:
/// for this module's tests and the live view's.
#[cfg(test)]
pub(super) fn learned_local() -> LocalRow {
    LocalRow {
        steer: "local".into(),
        nic: "eth0".into(),
        cpus: vec![0, 1, 2, 3, 8],
        watching: true,
        verdict: srap_common::wire::LandingVerdict::Agreed,
        matched: 16,
        judged: 16,
        paused: false,
        key: Some(srap_common::rss::KeyProvenance {
            source: KeySource::Learned,
            revision: 1,
            confidence: srap_common::rss::KeyConfidence {
                tested: 40,
                agreeing: 40,
                rank: 19,
                needed: 19,
                known: 19,
            },
        }),
        version: 2,
        placement: String::new(),
    }
}

/// Three open flows toward one receiver: on the planned CPU, on another,
/// and one the receiver (protocol 6) did not report. For this module's
/// tests and the live view's.
#[cfg(test)]
pub(super) fn three_flows() -> Vec<SenderFlowRow> {
    let flow = |port: u16, planned, seen: Option<u32>| SenderFlowRow {
        src: format!("10.0.0.1:{port}").parse().ok(),
        dst: "10.0.0.2:5201".parse().ok(),
        receiver_cpu_planned: Some(planned),
        receiver_cpu_seen: seen,
        receiver_cpu_off_plan: seen.is_some_and(|s| s != planned),
        receiver_seen_unknown: seen
            .is_none()
            .then(|| "the receiver speaks protocol 6, which reports no flows (7 does)".into()),
        ..SenderFlowRow::default()
    };
    vec![
        flow(40001, 3, Some(3)),
        flow(40002, 4, Some(5)),
        flow(40003, 6, None),
    ]
}

/// A sender with two receivers, one away: for this module's tests and the
/// live view's.
#[cfg(test)]
pub(super) fn two_receivers() -> SenderStatus {
    use srap_status::sender::{AddressRow, GrantRow};

    SenderStatus {
        cgroup: "/sys/fs/cgroup/srap".into(),
        pin_dir: "/sys/fs/bpf/srap".into(),
        binder: vec![("steered".into(), 24), ("miss".into(), 1)],
        reserved_ports: 0,
        receivers: vec![
            ReceiverRow {
                peer: "10.0.0.2:7447".into(),
                link: "connected".into(),
                version: Some(3),
                addresses: vec![AddressRow {
                    addr: "10.0.0.2".parse().ok(),
                    row: 0,
                    slots: 16,
                    open_flows: 16,
                }],
                grant: Some(GrantRow {
                    epoch: 2,
                    cpus: vec![7, 0, 1, 2, 3],
                }),
                ..ReceiverRow::default()
            },
            ReceiverRow {
                peer: "10.0.1.2:7447".into(),
                link: "away".into(),
                reason: Some("cannot connect: Connection refused (os error 111)".into()),
                addresses: vec![AddressRow::default()],
                ..ReceiverRow::default()
            },
        ],
        ..SenderStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_flow_shows_the_address_asked_for_beside_the_one_used() {
        let moved = SenderFlowRow {
            src: "10.0.1.1:40002".parse().ok(),
            dst: "10.0.1.2:5201".parse().ok(),
            asked: "10.0.0.2".parse().ok(),
            ..SenderFlowRow::default()
        };
        assert_eq!(flow_cells(&moved)[1], "10.0.1.2:5201 (asked 10.0.0.2)");
        let kept = SenderFlowRow {
            asked: None,
            ..moved
        };
        assert_eq!(flow_cells(&kept)[1], "10.0.1.2:5201");
    }

    #[test]
    fn a_receiver_address_whose_syn_got_no_answer_is_named_with_what_to_check() {
        let status = SenderStatus {
            spread_failing: vec![srap_status::sender::SpreadFailingRow {
                asked: "10.0.0.2".parse().unwrap(),
                used: "10.0.1.2".parse().unwrap(),
                port: 5201,
                syns: 2,
                readmit_in_ms: 29_001,
            }],
            ..SenderStatus::default()
        };
        let text = render(&status);
        assert!(
            text.lines().any(|l| l
                == "  10.0.1.2 (asked 10.0.0.2 port 5201): 2 SYN unanswered, re-admitted in 30 s; \
                    check the firewall and route toward 10.0.1.2"),
            "{text}"
        );
        assert!(spread_failing_summary(&SenderStatus::default()).is_empty());
    }

    #[test]
    fn every_receiver_with_its_version_grant_and_counters() {
        let status = two_receivers();
        let text = render(&status);
        assert!(
            text.contains("binder: steered=24 miss=1 (the rest 0)"),
            "{text}"
        );
        assert!(text.contains("epoch 2: 5 CPUs 0-3,7"), "{text}");
        assert!(
            text.contains("away: cannot connect: Connection refused"),
            "{text}"
        );
        let first = text
            .lines()
            .find(|l| l.starts_with("10.0.0.2:7447"))
            .expect("a line for the first receiver");
        assert!(
            first.contains("connected") && first.contains(" 3 "),
            "{first}"
        );
        assert!(
            render(&SenderStatus::default()).contains("not steering yet"),
            "before the first description"
        );
    }

    /// A receiver of protocol 8 lists each NIC and, per port, the
    /// addresses that accept it; an older one says why there is no list.
    #[test]
    fn a_receivers_nics_and_listeners_are_shown() {
        use srap_common::wire::{LandingVerdict, NicLink};
        use srap_status::{ListenerRow, sender::ReceiverNicRow};
        let mut status = two_receivers();
        let ip = |a: &str| a.parse::<std::net::IpAddr>().expect("address");
        status.receivers[0].nics = vec![
            ReceiverNicRow {
                name: "eth0".into(),
                addrs: vec![ip("10.0.0.2")],
                numa_node: Some(0),
                link: NicLink::Up,
                speed_mbps: Some(200_000),
                queue_cpu: Some(vec![0, 1]),
                indir_entries: 128,
                verdict: Some(LandingVerdict::Agreed),
                matched: 8,
                judged: 8,
                cpus: vec![0, 1],
                granted: Some(vec![1]),
            },
            ReceiverNicRow {
                name: "eth1".into(),
                addrs: vec![ip("10.0.1.2")],
                link: NicLink::Down,
                ..ReceiverNicRow::default()
            },
        ];
        status.receivers[0].ports = vec![ListenerRow {
            port: 5201,
            addrs: vec![ip("10.0.0.2"), ip("10.0.1.2")],
        }];
        status.receivers[1].nics_unknown = Some("the receiver speaks protocol 7".into());
        let text = render(&status);
        assert!(
            text.contains(
                "NIC eth0 up 200000 Mb/s node 0: 10.0.0.2; RSS 128 entries, 2 queues on CPUs 0-1; \
                 verifier agreed: 8 of 8 landed as computed; CPUs 0-1; granted 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("NIC eth1 down node ?: 10.0.1.2; no RSS described; no verifier"),
            "{text}"
        );
        assert!(
            text.contains("port 5201 accepted on 10.0.0.2, 10.0.1.2"),
            "{text}"
        );
        assert!(
            text.contains("NICs: unknown (the receiver speaks protocol 7)"),
            "{text}"
        );
    }

    /// A receiver serving a key it learned says so under its row, with
    /// the model and how far its landings back it; a reported key its
    /// landings all agree with adds nothing.
    #[test]
    fn a_learned_key_is_shown_with_its_model_and_confidence() {
        use srap_common::rss::{KeyConfidence, KeyProvenance};

        let mut status = two_receivers();
        status.receivers[0].key = Some(KeyProvenance::default());
        assert!(!render(&status).contains("key "), "{}", render(&status));
        status.receivers[0].key = Some(KeyProvenance {
            source: KeySource::Learned,
            revision: 2,
            confidence: KeyConfidence {
                tested: 32,
                agreeing: 32,
                rank: 36,
                needed: 19,
                known: 19,
            },
        });
        let text = render(&status);
        assert!(
            text.contains(
                "key learned from landings, model 2: 32 of 32 landings agree, rank 36, \
                 19 of 19 bits planning needs"
            ),
            "{text}"
        );
        assert_eq!(
            super::super::format::key_brief(status.receivers[0].key.as_ref()),
            "learned m2 19/19"
        );
    }

    /// Under `--local-placement reader` each flow shows the CPU of the
    /// thread that connected and the CPU that receives it, `!` where they
    /// differ, and the count of those on their reader's CPU.
    #[test]
    fn each_flows_connecting_and_receiving_cpu() {
        let flow = |port: u16, connecting, receiving| SenderFlowRow {
            src: format!("10.0.0.1:{port}").parse().ok(),
            dst: "10.0.0.2:5201".parse().ok(),
            local_softirq_cpu: Some(receiving),
            connecting_cpu: Some(connecting),
            ..SenderFlowRow::default()
        };
        let status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            local: Some(LocalRow {
                placement: "reader".into(),
                ..learned_local()
            }),
            flows: vec![flow(40001, 2, 2), flow(40002, 3, 1)],
            ..SenderStatus::default()
        };
        let text = render(&status);
        assert!(
            text.contains("(--steer local, --local-placement reader)"),
            "{text}"
        );
        assert!(text.contains("reader CPU c/r"), "{text}");
        assert!(text.contains(" 2/2\n"), "{text}");
        assert!(text.contains("!3/1\n"), "{text}");
        assert!(
            text.contains("1 of 2 flows received on the CPU of the thread that connected (!"),
            "{text}"
        );
    }

    #[test]
    fn this_hosts_nic_and_each_flow_at_both_ends() {
        let status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            local: Some(learned_local()),
            flows: vec![SenderFlowRow {
                src: "10.0.0.1:40001".parse().ok(),
                dst: "10.0.0.2:5201".parse().ok(),
                local_cpu_planned: Some(3),
                local_cpu_seen: Some(3),
                ..SenderFlowRow::default()
            }],
            ..SenderStatus::default()
        };
        let text = render(&status);
        assert!(
            text.contains(
                "this host's NIC eth0 (--steer local): CPUs 0-3,8; landings agreed (16 of 16"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  description version 2, key learned from landings, model 1: 40 of 40 landings \
                 agree, rank 19, 19 of 19 bits planning needs"
            ),
            "{text}"
        );
        let flow = text
            .lines()
            .find(|l| l.starts_with("10.0.0.1:40001"))
            .expect("the flow's line");
        assert!(
            flow.contains(" -/- ") && flow.contains(" 3/3 ") && flow.ends_with(" -/-"),
            "{flow}"
        );
    }

    #[test]
    fn a_bond_shows_each_member_its_flows_and_what_it_sent() {
        let member = |name: &str, usable: bool, flows: u32| srap_status::sender::MemberRow {
            name: name.into(),
            usable,
            flows,
            tx_bytes: 4_400_000,
            tx_bytes_per_s: Some(1_000_000),
        };
        let status = SenderStatus {
            bonds: vec![BondRow {
                name: "bond0".into(),
                mode: "802.3ad".into(),
                policy: "layer3+4".into(),
                balanced: false,
                why_not: Some("3 usable members: …".into()),
                counters: Some("agree".into()),
                counters_judged: 4,
                members: vec![member("eth2", false, 0), member("eth0", true, 6)],
            }],
            ..two_receivers()
        };
        let text = render(&status);
        for line in [
            "bond bond0 (802.3ad, layer3+4): members not balanced: 3 usable members: …",
            "  members' own counters vs the driver's hash: agree",
            "  eth2         no          0        4400000   8.0 Mbit/s",
            "  eth0         yes         6        4400000   8.0 Mbit/s",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
    }

    #[test]
    fn local_nics_show_node_link_flows_and_addresses() {
        use srap_status::sender::LocalNicRow;
        let nic = |name: &str, node: Option<u32>, up: bool, ip: &str| LocalNicRow {
            name: name.into(),
            node,
            up,
            addresses: vec![ip.parse().expect("ip")],
            ..LocalNicRow::default()
        };
        let mut status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            local_nics: vec![
                LocalNicRow {
                    given: true,
                    queue_cpu: Some(vec![0, 1, 2, 3]),
                    placed_with: Some("eth0".into()),
                    ..nic("eth0", Some(0), true, "10.0.0.1")
                },
                LocalNicRow {
                    placed_with: Some("eth0".into()),
                    fallback: Some("eth1 has no RSS description".into()),
                    ..nic("eth1", Some(1), false, "10.1.0.1")
                },
                LocalNicRow {
                    members: vec!["eth2".into(), "eth3".into()],
                    ..nic("bond0", None, true, "10.2.0.1")
                },
            ],
            local_nics_policy: "route".into(),
            local_nic_replans: 1,
            flows: three_flows(),
            ..SenderStatus::default()
        };
        status.count_local_nic_flows();
        let text = render(&status);
        for line in [
            "local NICs (--local-nics route), 1 re-plans on NIC changes:",
            "  NIC              node link  flows  addresses",
            "  eth0*               0 up        3  10.0.0.1",
            "    queue → CPU: 0 1 2 3",
            "    placed on this host's queues with eth0's description",
            "  eth1                1 down      0  10.1.0.1",
            "    placed on this host's queues with eth0's description (fallback: eth1 has no RSS \
             description)",
            "  bond0               ? up        0  10.2.0.1 (bond of eth2, eth3)",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
        status.local_nics.clear();
        assert!(!render(&status).contains("local NICs"), "an older agent");
    }

    /// The routing block: said only when checked, each finding with its
    /// fix, and what was installed.
    #[test]
    fn the_routing_block_says_what_is_missing_and_what_was_installed() {
        let mut status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            local_nics: vec![srap_status::sender::LocalNicRow {
                name: "eth1".into(),
                given: true,
                ..Default::default()
            }],
            ..SenderStatus::default()
        };
        assert!(!render(&status).contains("routing"), "route: not checked");
        let fix = "eth1: flows from 10.0.2.1 to 10.0.9.1 do not leave by eth1 (the route leaves \
                   by eth0); add a source rule: ip rule add from 10.0.2.1 table 23043 && ip \
                   route add 10.0.9.0/24 via 10.0.2.2 dev eth1 table 23043";
        status.local_routing = LocalRoutingRow {
            checked: true,
            source_rules: "check".into(),
            findings: vec![fix.into()],
            ..LocalRoutingRow::default()
        };
        let text = render(&status);
        for line in [
            "  routing (--source-rules check): missing".to_owned(),
            format!("    ! {fix}"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
        status.local_routing.findings.clear();
        status.local_routing.installed = vec!["ip rule add from 10.0.2.1 table 23043".into()];
        let text = render(&status);
        assert!(
            text.contains(
                "  routing (--source-rules check): each NIC's flows leave and return by it"
            ),
            "{text}"
        );
        assert!(
            text.contains("    installed: ip rule add from 10.0.2.1 table 23043"),
            "{text}"
        );
    }

    #[test]
    fn occupancy_repairs_show_only_when_there_are_any() {
        let mut status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            ..SenderStatus::default()
        };
        status.occupancy.audits = 40;
        assert!(
            !render(&status).contains("occupancy"),
            "{}",
            render(&status)
        );
        status.occupancy.repaired = 2;
        status.occupancy.stale_records = 1;
        status.occupancy.count_mismatches = 1;
        status.occupancy.last = Some("a count mismatch: …".into());
        let text = render(&status);
        assert!(
            text.contains(
                "occupancy_repaired=2 (stale records 1, count mismatches 1) in 40 audits: a bug"
            ),
            "{text}"
        );
        assert!(text.contains("  last: a count mismatch: …"), "{text}");
    }

    #[test]
    fn each_flow_with_its_receiver_cpu_planned_and_seen() {
        let status = SenderStatus {
            pin_dir: "/sys/fs/bpf/srap".into(),
            flows: three_flows(),
            ..SenderStatus::default()
        };
        let text = render(&status);
        let line = |port: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("10.0.0.1:{port}")))
                .expect("the flow's line")
                .to_owned()
        };
        assert!(line("40001").contains(" 3/3 "), "{text}");
        assert!(line("40002").contains(" !4/5 "), "{text}");
        assert!(line("40003").contains(" 6/- "), "{text}");
        assert!(
            text.contains("! 1 of 3 flows seen on another receiver CPU than planned"),
            "{text}"
        );
        assert!(
            text.contains(
                "receiver CPU seen unknown for 1 flow(s): the receiver speaks protocol 6, \
                 which reports no flows (7 does)"
            ),
            "{text}"
        );
    }
}
