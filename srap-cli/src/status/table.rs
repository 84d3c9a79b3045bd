//! `srap status --once`: one snapshot as plain text.

use std::fmt::Write as _;

use srap_status::{CpuRow, Status};

use super::format::{
    access, ago, cov, cpu_title, gbps, granted, landings, nic_hash, observer, opt, summary,
};

const MARK: &str = "  << collision";

pub fn render(status: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "receiver {}: observer {}; RSS version {}; {} peer(s); {}; {}",
        status.iface,
        observer(status),
        status.rss_version,
        status.peers.len(),
        landings(status),
        access(status)
    );
    let _ = writeln!(out, "{}", summary(status));
    let _ = writeln!(out, "{}\n", nic_hash(status));
    nic_table(&mut out, status);

    let _ = writeln!(
        out,
        "{:>5} {:>4} {:>5} {:>8} {:>12}",
        "queue", "cpu", "flows", "Gbit/s", "packets"
    );
    for q in &status.queues {
        let _ = writeln!(
            out,
            "{:>5} {:>4} {:>5} {:>8} {:>12}{}",
            q.queue,
            opt(q.cpu),
            q.flows,
            gbps(q.gbps),
            q.packets,
            if q.collision { MARK } else { "" }
        );
    }
    // The receive CPUs only: on a device without RSS the CPUs the observer
    // ran on are the machine's, which no plan is about (they stay in --json).
    cpu_table(&mut out, cpu_title(status), status.receive_cpus());

    let _ = writeln!(
        out,
        "\n{:<46} {:<46} {:>5} {:>7} {:>6} {:>8} {:>7} {:>8} {:>5} {:>5}",
        "source",
        "destination",
        "queue",
        cpu_title(status),
        "pred.q",
        "pred.cpu",
        "planned",
        "Gbit/s",
        "CoV",
        "moves"
    );
    for f in &status.flows {
        let _ = writeln!(
            out,
            "{:<46} {:<46} {:>5} {:>7} {:>6} {:>8} {:>7} {:>8} {:>5} {:>5}",
            f.src.to_string(),
            f.dst.to_string(),
            opt(f.queue),
            opt(f.receive_cpu(status.receive_cpu)),
            opt(f.predicted_queue),
            opt(f.predicted_cpu),
            opt(f.planned_cpu),
            gbps(f.gbps),
            cov(f.rate_cov),
            f.moves
        );
    }
    if status.flows.is_empty() {
        let _ = writeln!(out, "(no active flows)");
    }

    let _ = writeln!(out, "\npeers");
    for p in &status.peers {
        let _ = writeln!(
            out,
            "  {:<46} {:<24} connected {}, last plan {} (version {}); {} flows, granted CPUs {}{}",
            p.addr,
            p.agent,
            ago(status.unix_ms, Some(p.connected_unix_ms)),
            ago(status.unix_ms, p.last_plan_unix_ms),
            opt(p.plan_version),
            p.flows,
            granted(p),
            p.key
                .as_ref()
                .map(|k| format!("; key {k}"))
                .unwrap_or_default()
        );
    }
    if status.peers.is_empty() {
        let _ = writeln!(out, "  (none connected)");
    }
    out
}

fn cpu_table(out: &mut String, title: &str, rows: &[CpuRow]) {
    let _ = writeln!(
        out,
        "\n{title:>15} {:>5} {:>8} {:>12}",
        "flows", "Gbit/s", "packets"
    );
    for c in rows {
        let _ = writeln!(
            out,
            "{:>15} {:>5} {:>8} {:>12}{}",
            c.cpu,
            c.flows,
            gbps(c.gbps),
            c.packets,
            if c.collision { MARK } else { "" }
        );
    }
}

/// Each NIC served with its flows, CPUs and rate, then the ports its
/// listeners accept on which addresses; nothing from an agent of one NIC
/// before this table existed.
fn nic_table(out: &mut String, status: &Status) {
    if status.nics.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{:<15} {:<7} {:>4} {:>5} {:>8} {:<12} {:<10} {:<22} addresses",
        "nic", "link", "node", "flows", "Gbit/s", "cpus", "offered", "verifier"
    );
    for nic in &status.nics {
        let cpulist = |cpus: &[u32]| match cpus {
            [] => "-".to_owned(),
            some => srap_host::cpulist::format(some.iter().copied()),
        };
        let link = serde_json::to_value(nic.link)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let verifier = match (&nic.hook, &nic.error) {
            (Some(_), _) => format!(
                "{} {}/{}",
                serde_json::to_value(nic.landings.verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                nic.landings.matched,
                nic.landings.judged
            ),
            (None, _) => "off".to_owned(),
        };
        let addrs: Vec<String> = nic.addrs.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "{:<15} {link:<7} {:>4} {:>5} {:>8} {:<12} {:<10} {verifier:<22} {}",
            nic.name,
            opt(nic.numa_node),
            nic.active_flows,
            gbps(nic.gbps),
            cpulist(&nic.cpus),
            cpulist(&nic.offered),
            addrs.join(", ")
        );
        if let Some(error) = &nic.error {
            let _ = writeln!(out, "  {}: {error}", nic.name);
        }
    }
    for port in &status.listeners {
        let addrs: Vec<String> = port.addrs.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "port {} accepted on {}", port.port, addrs.join(", "));
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use srap_status::PeerRow;

    use super::*;

    /// Each NIC is a row with its flows, rate, CPUs, offer, verifier and
    /// addresses, a NIC's problem under it, then the ports; an agent of one
    /// NIC from before the table shows none.
    #[test]
    fn each_nic_and_port_is_shown() {
        use srap_common::wire::{LandingVerdict, NicLink};
        use srap_status::{Landings, ListenerRow, NicRow};
        let ip = |a: &str| a.parse::<std::net::IpAddr>().expect("address");
        let status = Status {
            nics: vec![
                NicRow {
                    name: "eth0".into(),
                    addrs: vec![ip("10.0.0.2")],
                    numa_node: Some(1),
                    link: NicLink::Up,
                    hook: Some("socket (sock_ops)".into()),
                    landings: Landings {
                        verdict: LandingVerdict::Agreed,
                        matched: 8,
                        judged: 8,
                    },
                    active_flows: 8,
                    gbps: 12.5,
                    cpus: vec![0, 1, 2, 3],
                    offered: vec![0, 1, 2, 3, 4, 5, 6, 7],
                    ..NicRow::default()
                },
                NicRow {
                    name: "eth1".into(),
                    addrs: vec![ip("10.0.1.2")],
                    link: NicLink::Down,
                    error: Some("no RSS".into()),
                    ..NicRow::default()
                },
            ],
            listeners: vec![ListenerRow {
                port: 5201,
                addrs: vec![ip("10.0.0.2"), ip("10.0.1.2")],
            }],
            ..Status::default()
        };
        let text = render(&status);
        let row = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} in\n{text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            row("eth0 "),
            [
                "eth0", "up", "1", "8", "12.50", "0-3", "0-7", "agreed", "8/8", "10.0.0.2"
            ]
        );
        assert_eq!(
            row("eth1 "),
            [
                "eth1", "down", "-", "0", "0.00", "-", "-", "off", "10.0.1.2"
            ]
        );
        assert!(text.contains("\n  eth1: no RSS\n"), "{text}");
        assert!(
            text.contains("port 5201 accepted on 10.0.0.2, 10.0.1.2\n"),
            "{text}"
        );
        assert!(!render(&Status::default()).contains("nic "), "no NIC table");
    }

    #[test]
    fn peers_show_their_flows_and_grants() {
        let peer = |addr: &str, granted: &str, applied: bool| PeerRow {
            addr: addr.into(),
            agent: "srap-agent 0.1.0".into(),
            connected_unix_ms: 1_000,
            granted: granted.into(),
            flows: 5,
            grant_applied: applied,
            ..PeerRow::default()
        };
        let status = Status {
            unix_ms: 3_000,
            peers: vec![
                peer("10.0.0.1:1", "0-5", true),
                peer("10.0.0.2:1", "6-10", false),
                peer("10.0.0.3:1", "", false),
            ],
            ..Status::default()
        };
        let text = render(&status);
        assert!(text.contains("; 5 flows, granted CPUs 0-5\n"), "{text}");
        assert!(text.contains("granted CPUs 6-10 (pending)\n"), "{text}");
        assert!(text.contains("granted CPUs -\n"), "{text}");
        assert!(text.contains("; no key from any address\n"), "{text}");
    }

    #[test]
    fn the_access_says_keys_networks_or_open() {
        let mut status = Status::default();
        status.access.keys = vec!["aa".into(), "bb".into()];
        status.access.allow = vec!["10.0.0.0/8".into()];
        status.peers = vec![PeerRow {
            key: Some("bb".into()),
            ..PeerRow::default()
        }];
        let text = render(&status);
        assert!(
            text.contains("; keys aa, bb (rollover) from 10.0.0.0/8\n"),
            "{text}"
        );
        assert!(text.contains("granted CPUs -; key bb\n"), "{text}");
        status.access = srap_status::Access {
            open: true,
            ..Default::default()
        };
        assert!(render(&status).contains("; OPEN to any address, no key (--open)\n"));
    }
}
