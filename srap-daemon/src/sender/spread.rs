//! `--receiver-nics asked|spread`: whether a steered connect
//! toward one address of a receiver of several NICs keeps that address
//! (`asked`, as the kernel does) or may be sent to another address of the
//! same receiver that accepts its port (`spread`), so a transfer's flows
//! enter by every NIC.
//!
//! Under `spread` the agent plans every address a receiver agent's
//! [`ReceiverNics`] names as a destination of its own, on a binder row of
//! its own and with the RSS description of the NIC that holds it
//! ([`nic_models`]): a flow's slot is then a (NIC, CPU) pair. For each
//! address the application may ask for and each port that a listener
//! accepts there, it writes the row of addresses the connect hook takes in
//! turn ([`rows`], `srap_common::receiver_nics`): the asked one first, then
//! every other address of the receiver that accepts that port, whose NIC is
//! not down, and that this host has a plan toward (a route and a table).
//! The rows follow each new report at once: a NIC reported down, or an
//! address whose listener went, leaves its rows with the next plan.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

pub use super::choices::ReceiverNicsMode;
use srap_common::{
    binder::{DestKey, DestValue, STEERED},
    port_tables::addr_words,
    protocol::Protocol,
    receiver_nics::{MAX_SPREAD, SpreadRow},
    rss::{RssDescription, RssModel},
    wire::{NicLink, ReceiverNics},
};

/// One receiver agent as the spread rows are made for it: the addresses
/// an application may ask for (its `--peer`'s) and what it last said of
/// its NICs and listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadPeer {
    pub asked: Vec<IpAddr>,
    pub nics: ReceiverNics,
}

/// The addresses of `nics` to plan besides `asked`: every address a
/// listener accepts on, not a link-local one (which needs a scope the
/// hook cannot give), ascending.
pub fn extra_addrs(asked: &[IpAddr], nics: &ReceiverNics) -> Vec<IpAddr> {
    let accepting: BTreeSet<IpAddr> = nics
        .ports
        .iter()
        .flat_map(|p| p.addrs.iter().copied())
        .collect();
    accepting
        .into_iter()
        .filter(|a| !asked.contains(a) && !link_local(*a))
        .collect()
}

fn link_local(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// Each address of `nics` with the model of the NIC that holds it (a NIC
/// whose description is missing or not modelled is left out: its
/// addresses are planned with the receiver's first description).
pub fn nic_models(nics: &ReceiverNics) -> BTreeMap<IpAddr, Arc<RssModel>> {
    let mut models = BTreeMap::new();
    for nic in &nics.nics {
        let Some(description) = &nic.description else {
            continue;
        };
        let description = RssDescription::from(description.clone());
        match RssModel::from_description(&description) {
            Ok(model) => {
                let model = Arc::new(model);
                for addr in &nic.addrs {
                    models.insert(*addr, model.clone());
                }
            }
            Err(err) => tracing::warn!(
                "receiver NIC {}: {err}; its addresses are planned with the first NIC's description",
                nic.name
            ),
        }
    }
    models
}

/// The link speed of the NIC that holds `addr` (`None`: unknown).
fn speed_of(nics: &ReceiverNics, addr: IpAddr) -> Option<u32> {
    nics.nic_of(addr)
        .and_then(|n| n.speed_mbps)
        .filter(|s| *s > 0)
}

/// The addresses of a row, each as often as its NIC's speed is a multiple
/// of the slowest's (rounded), interleaved so turns alternate; once each
/// when a speed is unknown (a veth) or the weights would not fit in
/// [`MAX_SPREAD`] turns. The first stays the asked one.
fn weighted(chosen: &[(IpAddr, Option<u32>)]) -> Vec<IpAddr> {
    let once = || chosen.iter().map(|(a, _)| *a).collect();
    let Some(speeds) = chosen.iter().map(|(_, s)| *s).collect::<Option<Vec<u32>>>() else {
        return once();
    };
    let slowest = speeds.iter().copied().min().unwrap_or(1).max(1);
    let mut left: Vec<u32> = speeds.iter().map(|s| (s + slowest / 2) / slowest).collect();
    if left.iter().sum::<u32>() > MAX_SPREAD {
        return once();
    }
    let mut out = Vec::new();
    while left.iter().any(|n| *n > 0) {
        for (i, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                out.push(chosen[i].0);
            }
        }
    }
    out
}

/// Whether two reports of one receiver make the same plan: the same
/// NICs with the same addresses, links and descriptions, and the same
/// listeners. Its verifiers' verdicts and rates change often and plan
/// nothing.
pub fn same_plan(old: &ReceiverNics, new: &ReceiverNics) -> bool {
    let planned = |r: &ReceiverNics| {
        r.nics
            .iter()
            .map(|n| (n.addrs.clone(), n.link, n.description.clone()))
            .collect::<Vec<_>>()
    };
    old.ports == new.ports && planned(old) == planned(new)
}

/// The spread rows of `peers` over the plan's destinations `dests`: for
/// each asked address and each port accepted there, the asked address and
/// the others that accept the port, are on a NIC not down and have a
/// destination in the plan (source unbound), one per NIC, weighted by
/// link speed (each as often as its speed is a multiple of the
/// slowest's). A row of the asked address alone is not written. Rows are
/// keyed as destinations are, by protocol: one set per steered protocol
/// ([`STEERED`]).
pub fn rows(dests: &[(DestKey, DestValue)], peers: &[SpreadPeer]) -> Vec<(DestKey, SpreadRow)> {
    let planned: BTreeSet<DestKey> = dests
        .iter()
        .filter(|(k, v)| k.src == [0; 4] && v.table != DestValue::BY_PORT)
        .map(|(k, _)| *k)
        .collect();
    STEERED
        .iter()
        .flat_map(|&protocol| protocol_rows(protocol, &planned, peers))
        .collect()
}

/// [`rows`] of `protocol`'s destinations among `planned`.
fn protocol_rows(
    protocol: Protocol,
    planned: &BTreeSet<DestKey>,
    peers: &[SpreadPeer],
) -> Vec<(DestKey, SpreadRow)> {
    let key = |addr: IpAddr, port: u16| {
        let (family, words) = addr_words(addr);
        let family = srap_common::family::Family::from_raw(family);
        family.map(|f| DestKey::new(protocol, f, port, words, [0; 4]))
    };
    let has_plan = |addr: IpAddr, port: u16| {
        [port, 0]
            .into_iter()
            .filter_map(|p| key(addr, p))
            .any(|k| planned.contains(&k))
    };
    let mut out = Vec::new();
    for peer in peers {
        let up = |addr: &IpAddr| {
            peer.nics
                .nic_of(*addr)
                .is_some_and(|nic| nic.link != NicLink::Down)
        };
        for accepted in &peer.nics.ports {
            for asked in peer.asked.iter().filter(|a| accepted.addrs.contains(a)) {
                if !has_plan(*asked, accepted.port) {
                    continue;
                }
                // One address per NIC (the asked one for its own NIC), so
                // a NIC of two addresses is not taken twice as often.
                let mut nics = vec![peer.nics.nic_of(*asked).map(|n| n.name.as_str())];
                let mut chosen = vec![(*asked, speed_of(&peer.nics, *asked))];
                for b in &accepted.addrs {
                    let nic = peer.nics.nic_of(*b).map(|n| n.name.as_str());
                    if b != asked
                        && b.is_ipv4() == asked.is_ipv4()
                        && up(b)
                        && !nics.contains(&nic)
                        && has_plan(*b, accepted.port)
                    {
                        nics.push(nic);
                        chosen.push((*b, speed_of(&peer.nics, *b)));
                    }
                }
                if chosen.len() < 2 {
                    continue;
                }
                let addrs: Vec<[u32; 4]> = weighted(&chosen)
                    .into_iter()
                    .map(|a| addr_words(a).1)
                    .collect();
                if let Some(k) = key(*asked, accepted.port) {
                    out.push((k, SpreadRow::of(&addrs)));
                }
            }
        }
    }
    out
}

pub mod failing;
#[cfg(test)]
mod tests;
