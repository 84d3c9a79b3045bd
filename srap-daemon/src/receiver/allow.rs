//! The peer allow-list (`--allow CIDR`): checked on accept, before a byte of
//! the peer's is read.

use std::{fmt, net::IpAddr};

use ipnet::IpNet;

/// Networks whose hosts may connect; empty allows everyone.
#[derive(Debug, Clone, Default)]
pub struct AllowList(Vec<IpNet>);

impl AllowList {
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self(nets)
    }

    /// Whether `ip` may connect. An IPv4 peer on a dual-stack socket
    /// (`::ffff:a.b.c.d`) is matched as the IPv4 address it is.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.is_empty() || self.0.iter().any(|net| net.contains(&ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The networks, for `srap status`.
    pub fn nets(&self) -> &[IpNet] {
        &self.0
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("any address");
        }
        let nets: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&nets.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(nets: &[&str]) -> AllowList {
        AllowList::new(nets.iter().map(|n| n.parse().expect("cidr")).collect())
    }

    #[test]
    fn empty_allows_all() {
        assert!(AllowList::default().permits("192.0.2.1".parse().expect("ip")));
    }

    #[test]
    fn matches_networks_of_both_families() {
        let allow = list(&["10.0.0.0/8", "fd00::/8"]);
        assert!(allow.permits("10.1.2.3".parse().expect("ip")));
        assert!(allow.permits("fd00::5".parse().expect("ip")));
        assert!(!allow.permits("127.0.0.1".parse().expect("ip")));
        assert!(!allow.permits("::1".parse().expect("ip")));
    }

    #[test]
    fn v4_mapped_peers_match_v4_networks() {
        let allow = list(&["10.0.0.0/8"]);
        assert!(allow.permits("::ffff:10.0.0.1".parse().expect("ip")));
    }
}
