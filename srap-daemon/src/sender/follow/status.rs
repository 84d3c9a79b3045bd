//! The follow driver's part of the status snapshot: each followed
//! receiver's row, and each open flow with where the receiver saw it; the
//! rest is the shared [`crate::sender::status`]'s. It builds rows from
//! what the follow loop hands it and must not know the loop itself.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
};

use srap_common::{
    binder::DestKey,
    port_tables::addr_words,
    receiver_nics::{MAX_SPREAD, SpreadRow},
    rss::FlowTuple,
    wire::{MAX_SEEN_FLOWS, NicGrants, NicInfo},
};
use srap_status::{
    ListenerRow, SenderStatus,
    sender::{AddressRow, GrantRow, ReceiverNicRow, ReceiverRow, SenderFlowRow},
};
use tracing::warn;

use super::machine::Peer;
use crate::{
    receiver_client::{NicsReport, PeerHandle, PeerStatus, SeenReport},
    sender::{
        binder::RunningBinder, landings::LocalLandings, maps::read_occupancy, target::Target,
    },
};

/// The address each moved flow's application asked for, kept for as long
/// as the flow is open. [`asked_of`] names it from the spread rows, which
/// go when the receiver's listener does (or its NIC): a flow moved before
/// then still went to an address its application did not ask for, and
/// keeps the name it had.
#[derive(Debug, Default)]
pub(super) struct AskedMemory {
    /// By the flow's (source, destination).
    named: BTreeMap<(SocketAddr, SocketAddr), IpAddr>,
}

impl AskedMemory {
    /// Sets each flow's `asked`: the address named when it was first seen
    /// moved, else `named`'s (the rows' today). Forgets the flows no longer
    /// listed.
    pub(super) fn name(
        &mut self,
        flows: &mut [SenderFlowRow],
        named: impl Fn(&SenderFlowRow) -> Option<IpAddr>,
    ) {
        let mut kept = BTreeMap::new();
        for flow in flows {
            let key = flow.src.zip(flow.dst);
            flow.asked = key
                .and_then(|k| self.named.get(&k).copied())
                .or_else(|| named(flow));
            if let (Some(key), Some(asked)) = (key, flow.asked) {
                kept.insert(key, asked);
            }
        }
        self.named = kept;
    }
}

/// The address the application asked for, when `flow` goes to an address
/// it did not ask for: one of a receiver's spread addresses
/// (`--receiver-nics spread`), by the spread row of its port that lists
/// it. The hook records the asked address per socket for getpeername(),
/// not for the agent: a receiver asked at several addresses names the
/// first whose row lists it.
pub(super) fn asked_of(
    flow: &SenderFlowRow,
    peers: &[Peer],
    spread: &[(DestKey, SpreadRow)],
) -> Option<IpAddr> {
    let dst = flow.dst?;
    if !peers
        .iter()
        .any(|p| p.extra.iter().any(|(_, a)| *a == dst.ip()))
    {
        return None;
    }
    let words = addr_words(dst.ip()).1;
    let (key, _) = spread.iter().find(|(key, row)| {
        key.port == u32::from(dst.port())
            && row.addrs[..row.count.min(MAX_SPREAD) as usize].contains(&words)
    })?;
    peers
        .iter()
        .flat_map(|p| p.rows.iter().map(|(_, a)| *a))
        .find(|a| addr_words(*a).1 == key.addr && a.is_ipv4() == dst.is_ipv4())
}

/// The steered cgroup's open connections toward the receivers with
/// `--steer remote` (no local NIC planned): each with the receiver CPU
/// its target's model plans for it.
pub(super) fn add_opened(status: &mut SenderStatus, opened: &LocalLandings, targets: &[Target]) {
    let open = match opened.read() {
        Ok(open) => open,
        Err(err) => {
            warn!("reading the steered cgroup's connections: {err}");
            return;
        }
    };
    status.flows = open
        .iter()
        .filter(|o| !o.closed)
        .filter_map(|o| {
            let target = targets.iter().find(|t| t.addr == o.dst.ip())?;
            let tuple = FlowTuple::from_sockets(o.src, o.dst).ok()?;
            Some(SenderFlowRow {
                src: Some(o.src),
                dst: Some(o.dst),
                receiver_cpu_planned: Some(target.model.landing(&tuple).cpu),
                ..SenderFlowRow::default()
            })
        })
        .collect();
}

/// Fills in where the receiver's observer saw `flow` (protocol 7), matched
/// by its whole tuple as this host sees it: a receiver that sees another
/// source (a NAT rewrote it) reports a flow that matches none of ours.
pub(super) fn seen_at_receiver(
    flow: &mut SenderFlowRow,
    receivers: &[Peer],
    handles: &[PeerHandle],
) {
    let (Some(src), Some(dst)) = (flow.src, flow.dst) else {
        return;
    };
    let receiver = receivers
        .iter()
        .position(|r| r.all_rows().any(|(_, addr)| *addr == dst.ip()))
        .and_then(|n| handles.get(n));
    let seen = match receiver {
        Some(handle) => match &*handle.seen().borrow() {
            SeenReport::Flows(report) => report
                .flows
                .iter()
                .find(|f| f.src == src && f.dst == dst)
                .copied()
                .ok_or_else(|| {
                    format!(
                        "not among the {} active flows the receiver reports (idle there, not \
                         seen by its observer yet, its tuple rewritten on the way, or past the \
                         first {MAX_SEEN_FLOWS})",
                        report.flows.len()
                    )
                }),
            SeenReport::Unsupported(version) => Err(format!(
                "the receiver speaks protocol {version}, which reports no flows (7 does)"
            )),
            SeenReport::Waiting => Err("the receiver has not reported flows yet".to_owned()),
            SeenReport::NotConnected => Err("the receiver agent is not connected".to_owned()),
        },
        None => Err(format!("no receiver agent for {}", dst.ip())),
    };
    match seen {
        Ok(seen) => {
            flow.receiver_cpu_seen = seen.cpu;
            flow.receiver_queue_seen = seen.queue;
            flow.receiver_cpu_off_plan = matches!(
                (flow.receiver_cpu_planned, seen.cpu),
                (Some(planned), Some(cpu)) if planned != cpu
            );
            if seen.cpu.is_none() {
                flow.receiver_seen_unknown = Some("the receiver cannot tell its CPU".to_owned());
            }
        }
        Err(why) => flow.receiver_seen_unknown = Some(why),
    }
}

pub(super) fn receiver_row(receiver: &Peer, binder: Option<&RunningBinder>) -> ReceiverRow {
    let link = match &receiver.status {
        _ if receiver.away => "away",
        PeerStatus::Connected => "connected",
        PeerStatus::Connecting | PeerStatus::Away(_) => "connecting",
    };
    let planned = receiver.model.is_some();
    ReceiverRow {
        peer: receiver.addr.clone(),
        link: link.to_owned(),
        reason: receiver.last_reason.clone().filter(|_| receiver.away),
        version: receiver.current.as_ref().map(|c| c.version),
        addresses: receiver
            .all_rows()
            .map(|(row, addr)| address_row(*row, *addr, binder.filter(|_| planned)))
            .collect(),
        grant: receiver.granted.as_ref().map(|g| GrantRow {
            epoch: g.epoch,
            cpus: g.cpus.iter().map(|c| c.cpu).collect(),
        }),
        paused: receiver.paused,
        key: receiver.current.as_ref().map(|c| c.key),
        ..ReceiverRow::default()
    }
}

/// The receiver's NICs and where each of its ports is accepted, as it said
/// (protocol 8), or why they are unknown.
pub(super) fn add_receiver_nics(
    row: &mut ReceiverRow,
    handle: Option<&PeerHandle>,
    granted: Option<&NicGrants>,
) {
    let report = handle.map(|h| h.nics().borrow().clone());
    let nics = match report {
        Some(NicsReport::Nics(nics)) => nics,
        Some(NicsReport::Unsupported(version)) => {
            row.nics_unknown = Some(format!(
                "the receiver speaks protocol {version}, which describes one NIC (8 describes \
                 every NIC it serves)"
            ));
            return;
        }
        Some(NicsReport::Waiting) => {
            row.nics_unknown = Some("the receiver has not described its NICs yet".to_owned());
            return;
        }
        Some(NicsReport::NotConnected) | None => {
            row.nics_unknown = Some("the receiver agent is not connected".to_owned());
            return;
        }
    };
    row.nics = nics
        .nics
        .iter()
        .map(|nic| ReceiverNicRow {
            granted: granted
                .and_then(|g| g.of(&nic.name))
                .map(|g| g.cpus.iter().map(|c| c.cpu).collect()),
            ..nic_row(nic)
        })
        .collect();
    row.ports = nics
        .ports
        .iter()
        .map(|p| ListenerRow {
            port: p.port,
            addrs: p.addrs.clone(),
        })
        .collect();
}

fn nic_row(nic: &NicInfo) -> ReceiverNicRow {
    ReceiverNicRow {
        name: nic.name.clone(),
        addrs: nic.addrs.clone(),
        numa_node: nic.numa_node,
        link: nic.link,
        speed_mbps: nic.speed_mbps,
        queue_cpu: nic.description.as_ref().and_then(|d| d.queue_cpu.clone()),
        indir_entries: nic.description.as_ref().map_or(0, |d| d.indir.len()),
        verdict: nic.verifier.map(|v| v.verdict),
        matched: nic.verifier.map_or(0, |v| v.matched),
        judged: nic.verifier.map_or(0, |v| v.judged),
        cpus: nic.cpus.clone(),
        granted: None,
    }
}

fn address_row(row: u32, addr: std::net::IpAddr, binder: Option<&RunningBinder>) -> AddressRow {
    let mut out = AddressRow {
        addr: Some(addr),
        row,
        ..AddressRow::default()
    };
    let Some(binder) = binder else {
        return out;
    };
    out.slots = binder
        .plan
        .receivers
        .iter()
        .find(|r| r.index == row)
        .map_or(0, |r| r.slots);
    match read_occupancy(&binder.layout, row) {
        Ok(flows) => out.open_flows = flows.iter().map(|f| u64::from(*f)).sum(),
        Err(err) => warn!("reading the binder's open flows: {err}"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(src: &str, dst: &str) -> SenderFlowRow {
        SenderFlowRow {
            src: src.parse().ok(),
            dst: dst.parse().ok(),
            ..SenderFlowRow::default()
        }
    }

    /// A moved flow keeps the address it asked for after its spread row
    /// goes (the listener closed), and is forgotten once it is not listed.
    #[test]
    fn a_moved_flow_keeps_its_asked_address_after_its_row_goes() {
        let asked: IpAddr = "10.0.1.2".parse().expect("address");
        let mut memory = AskedMemory::default();
        let mut flows = vec![
            flow("10.0.9.1:40000", "10.0.2.2:5201"),
            flow("10.0.9.1:40001", "10.0.1.2:5201"),
        ];
        let rows_there =
            |f: &SenderFlowRow| (f.dst.map(|d| d.ip()) == "10.0.2.2".parse().ok()).then_some(asked);
        memory.name(&mut flows, rows_there);
        assert_eq!(flows[0].asked, Some(asked));
        assert_eq!(flows[1].asked, None);

        memory.name(&mut flows, |_| None);
        assert_eq!(flows[0].asked, Some(asked), "named while its row was there");
        assert_eq!(flows[1].asked, None);

        let mut later = vec![flow("10.0.9.1:40001", "10.0.1.2:5201")];
        memory.name(&mut later, |_| None);
        let mut again = vec![flow("10.0.9.1:40000", "10.0.2.2:5201")];
        memory.name(&mut again, |_| None);
        assert_eq!(again[0].asked, None, "a flow no longer listed is forgotten");
    }
}
