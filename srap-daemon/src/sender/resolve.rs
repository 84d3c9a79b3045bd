//! A `--peer` given as a DNS name follows every address the name resolves
//! to: each address is a receiver address steered toward (with the peer's
//! description and grant), and the name is resolved again periodically, so
//! an address added or removed in DNS is planned for or dropped.
//!
//! The resolver is injected ([`Resolve`]) so the follow logic is tested
//! without a DNS server; the agent uses the system's ([`system`]).

use std::{collections::BTreeSet, future::Future, net::IpAddr, pin::Pin};

/// Resolves `HOST:PORT` to its addresses.
pub type Resolve = Box<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system resolver (`getaddrinfo` through tokio).
pub fn system() -> Resolve {
    Box::new(|peer: String| {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host(peer.as_str()).await?;
            Ok(distinct(addrs.map(|a| a.ip())))
        })
    })
}

/// Each address once, in the resolver's order.
pub fn distinct(addrs: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut seen = BTreeSet::new();
    addrs.into_iter().filter(|a| seen.insert(*a)).collect()
}

/// True when `peer` (`HOST:PORT`) names its host rather than giving an
/// address: only then is it resolved again.
pub fn is_name(peer: &str) -> bool {
    let host = peer.rsplit_once(':').map_or(peer, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<IpAddr>().is_err()
}

/// The binder rows for a peer's addresses `now`: an address it had keeps
/// its row (its live flow counts stay with it), a new one takes the lowest
/// row no receiver uses (`taken`, the rows of every peer, this one's
/// included). `None` when nothing changed.
pub fn reassign(
    rows: &[(u32, IpAddr)],
    now: &[IpAddr],
    taken: &BTreeSet<u32>,
) -> Option<Vec<(u32, IpAddr)>> {
    let had: BTreeSet<IpAddr> = rows.iter().map(|(_, a)| *a).collect();
    let want: BTreeSet<IpAddr> = now.iter().copied().collect();
    if had == want || want.is_empty() {
        return None;
    }
    let mut used: BTreeSet<u32> = taken.clone();
    let mut next = rows
        .iter()
        .filter(|(_, a)| want.contains(a))
        .copied()
        .collect::<Vec<_>>();
    for (row, _) in rows.iter().filter(|(_, a)| !want.contains(a)) {
        used.remove(row);
    }
    for addr in now.iter().filter(|a| !had.contains(a)) {
        let free = (srap_common::binder::FIRST_RECEIVER_ROW..)
            .find(|r| !used.contains(r))
            .unwrap_or(u32::MAX);
        used.insert(free);
        next.push((free, *addr));
    }
    next.sort_unstable();
    Some(next)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn names_and_addresses() {
        assert!(is_name("receiver.example:7447"));
        assert!(is_name("localhost:7447"));
        assert!(!is_name("10.0.0.2:7447"));
        assert!(!is_name("[fd00::2]:7447"));
    }

    #[test]
    fn kept_addresses_keep_their_rows_and_new_ones_take_free_rows() {
        let rows = [(1, ip("10.0.0.1")), (3, ip("10.0.0.2"))];
        // Another peer uses row 2 (row 0 is this host's CPUs').
        let taken: BTreeSet<u32> = [1, 2, 3].into();
        assert_eq!(
            reassign(&rows, &[ip("10.0.0.2"), ip("10.0.0.1")], &taken),
            None,
            "same set, other order"
        );
        assert_eq!(
            reassign(&rows, &[], &taken),
            None,
            "no address: keep the last"
        );
        let next = reassign(&rows, &[ip("10.0.0.2"), ip("10.0.0.3")], &taken).expect("changed");
        // 10.0.0.1 left: its row 1 is free again for 10.0.0.3.
        assert_eq!(next, [(1, ip("10.0.0.3")), (3, ip("10.0.0.2"))]);
        let next = reassign(
            &rows,
            &[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::9")],
            &taken,
        )
        .expect("changed");
        assert_eq!(
            next,
            [(1, ip("10.0.0.1")), (3, ip("10.0.0.2")), (4, ip("fd00::9"))]
        );
    }

    /// An injected resolver whose answer the test changes: the follow
    /// logic sees every address, then the new set.
    #[tokio::test]
    async fn an_injected_resolver_is_followed() {
        let answer = Arc::new(Mutex::new(vec![
            ip("10.0.0.1"),
            ip("10.0.0.1"),
            ip("10.0.0.2"),
        ]));
        let shared = Arc::clone(&answer);
        let resolve: Resolve = Box::new(move |_peer| {
            let now = shared.lock().map(|a| a.clone()).unwrap_or_default();
            Box::pin(async move { Ok(distinct(now)) })
        });
        let first = resolve("receiver.example:7447".into())
            .await
            .expect("resolved");
        assert_eq!(
            first,
            [ip("10.0.0.1"), ip("10.0.0.2")],
            "every address, once"
        );
        let rows: Vec<(u32, IpAddr)> = first
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u32 + 1, *a))
            .collect();
        *answer.lock().expect("lock") = vec![ip("10.0.0.2"), ip("10.0.0.7")];
        let now = resolve("receiver.example:7447".into())
            .await
            .expect("resolved");
        let taken: BTreeSet<u32> = rows.iter().map(|(r, _)| *r).collect();
        assert_eq!(
            reassign(&rows, &now, &taken),
            Some(vec![(1, ip("10.0.0.7")), (2, ip("10.0.0.2"))])
        );
    }

    #[tokio::test]
    async fn the_system_resolver_finds_localhost() {
        let addrs = system()("localhost:7447".into())
            .await
            .expect("localhost resolves");
        assert!(addrs.iter().all(|a| a.is_loopback()), "{addrs:?}");
    }
}
