//! Receiver addresses a moved connect's SYN got no answer from
//! (`--receiver-nics spread`): the kernel marks them, the agent says so
//! and re-admits them.
//!
//! The mark is the kernel's: the `sock_ops` program sees a moved socket's
//! SYN still unanswered at its first retransmit timeout (about 1 s after it
//! left) and marks the address it was sent to in `SRAP_SPREAD_FAILING`
//! (`srap_common::receiver_nics::SpreadFailing`); the connect hook keeps
//! the asked address for every connect whose turn falls on a marked one,
//! from the next connect on, before the agent reads anything. What the
//! agent adds ([`SynFallback`], read each status tick, 1 s): one warning per
//! mark naming the asked and the used address and what to check, the
//! marks in `srap status --sender` and `/metrics`, and the re-admission.
//!
//! Re-admission is by time alone, after a back-off that doubles each time
//! the same address is marked again soon after it was re-admitted
//! ([`FIRST_BACKOFF`] up to [`MAX_BACKOFF`]). Not on the receiver's next
//! report: the receiver agent sees its NIC up and its listener there
//! whatever drops the SYNs on the way (a firewall on that NIC, a route of
//! this host's, a middlebox), so its report says nothing about the failure
//! and would re-admit at once into the same silence. Not on a test connect
//! of the agent's own: it would go to the application's own listener, which
//! would accept a connection nobody asked for. A re-admission costs the
//! connects whose turn falls on the address until its next SYN timeout (the
//! first of them marks it again within about 1 s); the doubling bounds that
//! to one such second per [`MAX_BACKOFF`] on a path that stays dead.
//!
//! The sockets whose SYN went there before the mark (those of about the
//! first second, and those of the second after each re-admission) are left
//! to the kernel: it retransmits their SYN (each second at first on Linux
//! 6.18, `tcp_syn_linear_timeouts`, then doubling, up to
//! `tcp_syn_retries`), so a path that comes back meanwhile connects them,
//! late; one that stays dead fails them with `ETIMEDOUT`, as it fails any
//! connect to a dead address (after over two minutes with 6.18's
//! defaults). Nothing can send a connecting socket elsewhere, and
//! aborting it early would fail a connect that might still succeed.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::{Duration, Instant},
};

use aya::maps::{HashMap, Map, MapData};
use srap_common::{binder::SPREAD_FAILING_MAP, receiver_nics::SpreadFailing};
use tracing::{info, warn};

use crate::sender::layout::PinLayout;

/// The first back-off of a marked address.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest back-off; an address re-admitted and not marked again for
/// this long starts again from [`FIRST_BACKOFF`].
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// One marked address as the agent shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingAddr {
    /// The address the connect that found it failing asked for.
    pub asked: IpAddr,
    /// The address its SYN was sent to and got no answer from.
    pub used: IpAddr,
    /// The port it asked for.
    pub port: u16,
    /// Moved connects whose SYN got no answer there while marked.
    pub syns: u32,
    /// When the agent first saw the mark.
    pub seen: Instant,
    /// How long after `seen` it is re-admitted.
    pub backoff: Duration,
}

impl FailingAddr {
    /// How long until it is re-admitted, at `now`.
    pub fn readmit_in(&self, now: Instant) -> Duration {
        (self.seen + self.backoff).saturating_duration_since(now)
    }
}

/// The marks the agent follows, and the back-off each address earned.
#[derive(Debug, Default)]
pub struct SynFallback {
    marked: BTreeMap<[u32; 4], FailingAddr>,
    /// Addresses re-admitted: the back-off they were re-admitted after and
    /// when, so a new mark soon after doubles it.
    readmitted: BTreeMap<[u32; 4], (Duration, Instant)>,
}

impl SynFallback {
    /// The addresses marked now, as last read.
    pub fn marked(&self) -> impl Iterator<Item = &FailingAddr> {
        self.marked.values()
    }

    /// Reads the kernel's marks from the pinned map and re-admits those
    /// whose back-off is over (their entries deleted). A map that cannot
    /// be read (an older pin) leaves everything as it is.
    pub fn follow(&mut self, layout: &PinLayout) {
        let Some(mut map) = open(layout) else {
            return;
        };
        let marks: Vec<([u32; 4], SpreadFailing)> = map.iter().filter_map(Result::ok).collect();
        for key in self.step(Instant::now(), &marks) {
            match map.remove(&key) {
                Ok(()) => info!(
                    "receiver address {} re-admitted to the spread after its back-off",
                    addr_of(key)
                ),
                Err(err) => warn!("cannot re-admit receiver address {}: {err}", addr_of(key)),
            }
        }
    }

    /// Takes the marks read at `now`: a new one is logged once and given
    /// its back-off; returns the addresses to re-admit.
    pub fn step(&mut self, now: Instant, marks: &[([u32; 4], SpreadFailing)]) -> Vec<[u32; 4]> {
        self.marked
            .retain(|key, _| marks.iter().any(|(k, _)| k == key));
        let mut readmit = Vec::new();
        for (key, mark) in marks {
            if let Some(known) = self.marked.get_mut(key) {
                known.syns = mark.syns;
                if known.readmit_in(now).is_zero() {
                    self.readmitted.insert(*key, (known.backoff, now));
                    readmit.push(*key);
                }
                continue;
            }
            let backoff = self.backoff_for(key, now);
            let failing = FailingAddr {
                asked: addr_of(mark.asked),
                used: addr_of(*key),
                port: mark.port as u16,
                syns: mark.syns,
                seen: now,
                backoff,
            };
            warn!(
                "a connect to {asked} port {port} sent to {used} got no answer to its SYN: \
                 new connects keep {asked} for {backoff:?}; check the firewall and the route \
                 toward {used} (the receiver's NIC of that address, and this host's route to it)",
                asked = failing.asked,
                port = failing.port,
                used = failing.used,
            );
            self.marked.insert(*key, failing);
        }
        for key in &readmit {
            self.marked.remove(key);
        }
        self.readmitted
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < MAX_BACKOFF);
        readmit
    }

    /// The back-off of a new mark of `key`: double the last one when it
    /// was re-admitted less than [`MAX_BACKOFF`] ago, else the first.
    fn backoff_for(&self, key: &[u32; 4], now: Instant) -> Duration {
        match self.readmitted.get(key) {
            Some((last, at)) if now.saturating_duration_since(*at) < MAX_BACKOFF => {
                (*last * 2).min(MAX_BACKOFF)
            }
            _ => FIRST_BACKOFF,
        }
    }
}

/// The pinned map of marks, or `None` (logged) when it cannot be opened.
fn open(layout: &PinLayout) -> Option<HashMap<MapData, [u32; 4], SpreadFailing>> {
    let opened = MapData::from_pin(layout.map(SPREAD_FAILING_MAP))
        .map_err(|e| e.to_string())
        .and_then(|data| HashMap::try_from(Map::HashMap(data)).map_err(|e| e.to_string()));
    match opened {
        Ok(map) => Some(map),
        Err(err) => {
            tracing::debug!("{SPREAD_FAILING_MAP}: {err}");
            None
        }
    }
}

/// The address of `words`, in the form of `DestKey::addr`: IPv4 in word
/// 0 with the others zero.
pub fn addr_of(words: [u32; 4]) -> IpAddr {
    let bytes = |w: u32| w.to_ne_bytes();
    if words[1..] == [0, 0, 0] {
        return IpAddr::V4(Ipv4Addr::from(bytes(words[0])));
    }
    let mut octets = [0; 16];
    for (i, w) in words.iter().enumerate() {
        octets[i * 4..i * 4 + 4].copy_from_slice(&bytes(*w));
    }
    IpAddr::V6(Ipv6Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use srap_common::port_tables::addr_words;

    use super::*;

    fn mark(asked: &str, syns: u32) -> SpreadFailing {
        SpreadFailing {
            asked: addr_words(asked.parse().unwrap()).1,
            since_ns: 1,
            syns,
            port: 5201,
        }
    }

    fn key(addr: &str) -> [u32; 4] {
        addr_words(addr.parse().unwrap()).1
    }

    #[test]
    fn a_mark_is_shown_until_its_backoff_is_over_then_readmitted() {
        let mut fallback = SynFallback::default();
        let t0 = Instant::now();
        let marks = [(key("10.0.1.2"), mark("10.0.0.2", 1))];
        assert!(fallback.step(t0, &marks).is_empty());
        let shown: Vec<_> = fallback.marked().cloned().collect();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].asked, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(shown[0].used, "10.0.1.2".parse::<IpAddr>().unwrap());
        assert_eq!((shown[0].port, shown[0].backoff), (5201, FIRST_BACKOFF));
        let marks = [(key("10.0.1.2"), mark("10.0.0.2", 3))];
        assert!(fallback.step(t0 + FIRST_BACKOFF / 2, &marks).is_empty());
        assert_eq!(fallback.marked().next().map(|m| m.syns), Some(3));
        assert_eq!(fallback.step(t0 + FIRST_BACKOFF, &marks), [key("10.0.1.2")]);
        assert_eq!(fallback.marked().count(), 0);
    }

    #[test]
    fn marked_again_soon_after_readmission_doubles_up_to_the_cap() {
        let mut fallback = SynFallback::default();
        let marks = [(key("10.0.1.2"), mark("10.0.0.2", 1))];
        let mut now = Instant::now();
        let mut backoffs = Vec::new();
        for _ in 0..7 {
            fallback.step(now, &marks);
            let backoff = fallback.marked().next().unwrap().backoff;
            backoffs.push(backoff.as_secs());
            now += backoff;
            assert_eq!(fallback.step(now, &marks), [key("10.0.1.2")]);
            now += Duration::from_secs(1);
        }
        assert_eq!(backoffs, [30, 60, 120, 240, 480, 600, 600]);
        // Quiet for the cap: the next mark starts again from the first.
        fallback.step(now + MAX_BACKOFF, &[]);
        fallback.step(now + MAX_BACKOFF, &marks);
        assert_eq!(fallback.marked().next().unwrap().backoff, FIRST_BACKOFF);
    }

    #[test]
    fn a_mark_removed_elsewhere_is_no_longer_shown() {
        let mut fallback = SynFallback::default();
        let now = Instant::now();
        fallback.step(now, &[(key("10.0.1.2"), mark("10.0.0.2", 1))]);
        fallback.step(now, &[]);
        assert_eq!(fallback.marked().count(), 0);
    }

    #[test]
    fn words_give_the_address_back() {
        for text in ["10.0.1.2", "fd00::1:2", "::ffff:10.0.0.1"] {
            let addr: IpAddr = text.parse().unwrap();
            assert_eq!(addr_of(addr_words(addr).1), addr, "{text}");
        }
    }
}
