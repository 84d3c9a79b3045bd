//! The kernel's policy routing as plain data: the FIB rules (`ip rule`),
//! the routes of every table (`ip route show table all`), the per-interface
//! IPv4 settings that decide whether replies are accepted (`rp_filter`,
//! `arp_ignore`, `arp_announce`), and the few writes a sender may make to
//! it (a source rule and its table's route). Reads and writes go through
//! [`crate::netlink`] (rtnetlink); what to make of them is the caller's, so
//! every judgement can be tested over values.
//!
//! Layouts follow the kernel's `include/uapi/linux/rtnetlink.h` and
//! `fib_rules.h`.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use ipnet::IpNet;

use crate::netlink::{
    Attr, Message, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NetlinkError, Protocol, REPLY_TIMEOUT,
    Socket, check_error, parse_attrs, put_attr, take,
};

const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const RTM_GETRULE: u16 = 34;
/// `struct rtmsg` and `struct fib_rule_hdr` are both 12 bytes.
const HDR_LEN: usize = 12;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const RTA_TABLE: u16 = 15;

const FRA_DST: u16 = 1;
const FRA_SRC: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
const FRA_OIFNAME: u16 = 17;
const FRA_PROTOCOL: u16 = 21;
/// Selectors a connect's lookup cannot be judged against here (l3mdev, uid
/// range, IP protocol, port ranges): a rule with one is taken not to match.
const FRA_UNJUDGED: [u16; 5] = [19, 20, 22, 23, 24];
const FIB_RULE_INVERT: u32 = 0x2;

/// `FR_ACT_TO_TBL`: look the destination up in a table.
pub const ACTION_TO_TABLE: u8 = 1;
/// `RTN_UNICAST`.
pub const ROUTE_UNICAST: u8 = 1;
/// `RT_TABLE_MAIN`.
pub const TABLE_MAIN: u32 = 254;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;

/// One FIB rule, with only what a locally originated connect's lookup is
/// judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibRule {
    /// `AF_INET` or `AF_INET6`: a rule holds for its own family only.
    pub family: u8,
    pub priority: u32,
    /// The table looked up (`action` [`ACTION_TO_TABLE`]).
    pub table: u32,
    /// `FR_ACT_*`: 1 lookup, 2 goto, 3 nop, 6 blackhole, 7 unreachable,
    /// 8 prohibit.
    pub action: u8,
    pub src: Option<IpNet>,
    pub dst: Option<IpNet>,
    pub iif: Option<String>,
    pub oif: Option<String>,
    /// Mark and mask.
    pub fwmark: Option<(u32, u32)>,
    /// `not`: the selectors' sense is inverted.
    pub invert: bool,
    /// A selector that cannot be judged here (uid range, ports…).
    pub unjudged: bool,
    /// `RTPROT_*` of whoever installed it (`FRA_PROTOCOL`, 4.17+; 0 before).
    pub protocol: u8,
}

/// One route of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibRoute {
    pub table: u32,
    pub dst: IpNet,
    /// `RTN_*`: 1 unicast, 2 local, 6 blackhole, 7 unreachable…
    pub kind: u8,
    /// The interface it leaves by (`None`: multipath or none).
    pub oif: Option<u32>,
    pub gateway: Option<IpAddr>,
    pub prefsrc: Option<IpAddr>,
    pub metric: u32,
    pub protocol: u8,
    /// Type of service it is for (only 0 is judged).
    pub tos: u8,
}

/// A source rule as the sender installs it: `ip rule add from SRC/len
/// priority P table T protocol X`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRule {
    pub src: IpAddr,
    pub table: u32,
    pub priority: u32,
    pub protocol: u8,
}

/// A route of a source rule's table: `ip route add DST [via GW] dev OIF
/// table T proto X`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRoute {
    pub dst: IpNet,
    pub gateway: Option<IpAddr>,
    pub oif: u32,
    pub table: u32,
    pub protocol: u8,
}

/// `AF_INET` or `AF_INET6`, as a rule or route of `ip`'s family says it.
pub fn family_of(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        libc::AF_INET as u8
    } else {
        libc::AF_INET6 as u8
    }
}

fn socket() -> Result<Socket, NetlinkError> {
    Socket::open(Protocol::Route, REPLY_TIMEOUT)
}

/// Every FIB rule of `family` (`libc::AF_INET` or `AF_INET6`), in the
/// kernel's order (by priority).
pub fn rules(family: u8) -> Result<Vec<FibRule>, NetlinkError> {
    let mut found = Vec::new();
    let body = header(family, 0, 0, 0, 0, 0, 0);
    socket()?.dump(RTM_GETRULE, &body, |msg| {
        found.push(parse_rule(msg)?);
        Ok(())
    })?;
    found.sort_by_key(|r| r.priority);
    Ok(found)
}

/// Every route of every table of `family`.
pub fn routes(family: u8) -> Result<Vec<FibRoute>, NetlinkError> {
    let mut found = Vec::new();
    let body = header(family, 0, 0, 0, 0, 0, 0);
    socket()?.dump(RTM_GETROUTE, &body, |msg| {
        if let Some(route) = parse_route(msg)? {
            found.push(route);
        }
        Ok(())
    })?;
    Ok(found)
}

/// Installs `rule`; the kernel's error (EEXIST, EPERM) is returned as is.
pub fn add_rule(rule: &SourceRule) -> Result<(), NetlinkError> {
    command(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &rule_body(rule))
}

/// Removes `rule` (the one with exactly these selectors and action).
pub fn delete_rule(rule: &SourceRule) -> Result<(), NetlinkError> {
    command(RTM_DELRULE, 0, &rule_body(rule))
}

/// Installs `route` in its table.
pub fn add_route(route: &TableRoute) -> Result<(), NetlinkError> {
    command(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &route_body(route))
}

/// Removes `route` from its table.
pub fn delete_route(route: &TableRoute) -> Result<(), NetlinkError> {
    command(RTM_DELROUTE, 0, &route_body(route))
}

/// A write acknowledged by the kernel: no reply but the ack.
fn command(kind: u16, flags: u16, body: &[u8]) -> Result<(), NetlinkError> {
    socket()?.acked(kind, flags | NLM_F_ACK, body)
}

/// `struct rtmsg` / `struct fib_rule_hdr`: the same twelve bytes, named
/// differently (family, dst len, src len, tos, table, protocol|res1,
/// scope|res2, type|action, flags).
fn header(
    family: u8,
    src_len: u8,
    table: u8,
    protocol: u8,
    scope: u8,
    kind: u8,
    dst_len: u8,
) -> Vec<u8> {
    let mut body = vec![family, dst_len, src_len, 0, table, protocol, scope, kind];
    body.extend_from_slice(&0u32.to_ne_bytes());
    body
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn rule_body(rule: &SourceRule) -> Vec<u8> {
    let len = if rule.src.is_ipv4() { 32 } else { 128 };
    // fib_rule_hdr: res1 and res2 are zero, the action is "to table".
    let mut body = header(family_of(rule.src), len, 0, 0, 0, ACTION_TO_TABLE, 0);
    put_attr(&mut body, FRA_SRC, &ip_bytes(rule.src));
    put_attr(&mut body, FRA_PRIORITY, &rule.priority.to_ne_bytes());
    put_attr(&mut body, FRA_TABLE, &rule.table.to_ne_bytes());
    put_attr(&mut body, FRA_PROTOCOL, &[rule.protocol]);
    body
}

fn route_body(route: &TableRoute) -> Vec<u8> {
    let scope = if route.gateway.is_some() {
        RT_SCOPE_UNIVERSE
    } else {
        RT_SCOPE_LINK
    };
    let family = family_of(route.dst.addr());
    let mut body = header(
        family,
        0,
        0,
        route.protocol,
        scope,
        ROUTE_UNICAST,
        route.dst.prefix_len(),
    );
    put_attr(&mut body, RTA_TABLE, &route.table.to_ne_bytes());
    put_attr(&mut body, RTA_DST, &ip_bytes(route.dst.network()));
    if let Some(gateway) = route.gateway {
        put_attr(&mut body, RTA_GATEWAY, &ip_bytes(gateway));
    }
    put_attr(&mut body, RTA_OIF, &route.oif.to_ne_bytes());
    body
}

fn ip_of(family: u8, payload: &[u8]) -> Result<IpAddr, NetlinkError> {
    match (i32::from(family), payload) {
        (libc::AF_INET, [a, b, c, d]) => Ok(Ipv4Addr::new(*a, *b, *c, *d).into()),
        (libc::AF_INET6, bytes) if bytes.len() == 16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(bytes);
            Ok(Ipv6Addr::from(octets).into())
        }
        _ => Err(NetlinkError::Malformed(format!(
            "an address of {} bytes for family {family}",
            payload.len()
        ))),
    }
}

fn net_of(family: u8, payload: &[u8], len: u8) -> Result<IpNet, NetlinkError> {
    IpNet::new(ip_of(family, payload)?, len)
        .map_err(|_| NetlinkError::Malformed(format!("prefix length {len}")))
}

/// Any address of `family` with prefix length 0: what a route with no
/// `RTA_DST` (a default route) covers.
fn any_net(family: u8) -> IpNet {
    let any: IpAddr = if i32::from(family) == libc::AF_INET6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    IpNet::new(any, 0).unwrap_or_default()
}

fn parse_rule(msg: &Message<'_>) -> Result<FibRule, NetlinkError> {
    check_error(msg)?;
    let hdr = take(msg.payload, 0, HDR_LEN, "fib_rule_hdr")?;
    let (family, dst_len, src_len) = (hdr[0], hdr[1], hdr[2]);
    let flags = u32::from_ne_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
    let mut rule = FibRule {
        family,
        priority: 0,
        table: u32::from(hdr[4]),
        action: hdr[7],
        src: None,
        dst: None,
        iif: None,
        oif: None,
        fwmark: None,
        invert: flags & FIB_RULE_INVERT != 0,
        unjudged: hdr[3] != 0, // a TOS selector
        protocol: 0,
    };
    let mut mark = None;
    let mut mask = u32::MAX;
    for attr in parse_attrs(&msg.payload[HDR_LEN..])? {
        match attr.kind {
            FRA_SRC => rule.src = Some(net_of(family, attr.payload, src_len)?),
            FRA_DST => rule.dst = Some(net_of(family, attr.payload, dst_len)?),
            FRA_IIFNAME => rule.iif = Some(attr.str()),
            FRA_OIFNAME => rule.oif = Some(attr.str()),
            FRA_PRIORITY => rule.priority = attr.u32("FRA_PRIORITY")?,
            FRA_TABLE => rule.table = attr.u32("FRA_TABLE")?,
            FRA_FWMARK => mark = Some(attr.u32("FRA_FWMARK")?),
            FRA_FWMASK => mask = attr.u32("FRA_FWMASK")?,
            FRA_PROTOCOL => rule.protocol = attr.payload.first().copied().unwrap_or(0),
            kind if FRA_UNJUDGED.contains(&kind) => rule.unjudged = true,
            _ => {}
        }
    }
    rule.fwmark = mark.map(|m| (m, mask));
    Ok(rule)
}

fn parse_route(msg: &Message<'_>) -> Result<Option<FibRoute>, NetlinkError> {
    check_error(msg)?;
    let hdr = take(msg.payload, 0, HDR_LEN, "rtmsg")?;
    let family = hdr[0];
    if !matches!(i32::from(family), libc::AF_INET | libc::AF_INET6) {
        return Ok(None);
    }
    let mut route = FibRoute {
        table: u32::from(hdr[4]),
        dst: any_net(family),
        kind: hdr[7],
        oif: None,
        gateway: None,
        prefsrc: None,
        metric: 0,
        protocol: hdr[5],
        tos: hdr[3],
    };
    for attr in parse_attrs(&msg.payload[HDR_LEN..])? {
        route_attr(&mut route, family, hdr[1], &attr)?;
    }
    Ok(Some(route))
}

fn route_attr(
    route: &mut FibRoute,
    family: u8,
    dst_len: u8,
    attr: &Attr<'_>,
) -> Result<(), NetlinkError> {
    match attr.kind {
        RTA_DST => route.dst = net_of(family, attr.payload, dst_len)?,
        RTA_OIF => route.oif = Some(attr.u32("RTA_OIF")?),
        RTA_GATEWAY => route.gateway = Some(ip_of(family, attr.payload)?),
        RTA_PREFSRC => route.prefsrc = Some(ip_of(family, attr.payload)?),
        RTA_PRIORITY => route.metric = attr.u32("RTA_PRIORITY")?,
        RTA_TABLE => route.table = attr.u32("RTA_TABLE")?,
        _ => {}
    }
    Ok(())
}

/// The index of interface `name` in this network namespace (`None`: no
/// such interface).
pub fn ifindex(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string for the call's length.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The IPv4 settings of one interface that decide whether replies are
/// accepted on it, each the value in force: the larger of `all` and the
/// interface's own, as the kernel takes them (`None`: unreadable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ipv4Conf {
    /// 0 off, 1 strict, 2 loose.
    pub rp_filter: Option<u8>,
    pub arp_ignore: Option<u8>,
    pub arp_announce: Option<u8>,
}

impl Ipv4Conf {
    /// `iface`'s settings in this network namespace, from
    /// `/proc/sys/net/ipv4/conf`.
    pub fn read(iface: &str) -> Self {
        Self::read_under(Path::new("/proc/sys/net/ipv4/conf"), iface)
    }

    fn read_under(conf: &Path, iface: &str) -> Self {
        let value = |dir: &str, key: &str| -> Option<u8> {
            std::fs::read_to_string(conf.join(dir).join(key))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let effective = |key| match (value("all", key), value(iface, key)) {
            (Some(all), Some(own)) => Some(all.max(own)),
            (one, other) => one.or(other),
        };
        Self {
            rp_filter: effective("rp_filter"),
            arp_ignore: effective("arp_ignore"),
            arp_announce: effective("arp_announce"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{encode, parse_messages};

    #[test]
    fn a_rule_encodes_and_parses_back() {
        let rule = SourceRule {
            src: "10.0.2.1".parse().expect("ip"),
            table: 0x5a03,
            priority: 0x5a00,
            protocol: 90,
        };
        let msg = encode(RTM_NEWRULE, 0, 1, &rule_body(&rule));
        let parsed = parse_messages(&msg).expect("one message");
        let back = parse_rule(&parsed[0]).expect("a rule");
        assert_eq!(back.src, Some("10.0.2.1/32".parse().expect("net")));
        assert_eq!(
            (back.table, back.priority, back.protocol),
            (0x5a03, 0x5a00, 90)
        );
        assert_eq!(back.action, ACTION_TO_TABLE);
        assert!(!back.invert && !back.unjudged && back.iif.is_none());
    }

    #[test]
    fn a_route_encodes_and_parses_back() {
        let route = TableRoute {
            dst: "10.0.9.0/24".parse().expect("net"),
            gateway: Some("10.0.2.2".parse().expect("ip")),
            oif: 7,
            table: 0x5a07,
            protocol: 90,
        };
        let msg = encode(RTM_NEWROUTE, 0, 1, &route_body(&route));
        let parsed = parse_messages(&msg).expect("one message");
        let back = parse_route(&parsed[0]).expect("parsed").expect("a route");
        assert_eq!(back.dst, route.dst);
        assert_eq!(
            (back.oif, back.gateway, back.table),
            (Some(7), route.gateway, 0x5a07)
        );
        assert_eq!((back.kind, back.protocol), (ROUTE_UNICAST, 90));
        let truncated = &msg[..msg.len() - 3];
        assert!(parse_messages(truncated).is_err());
    }

    #[test]
    fn the_setting_in_force_is_the_larger_of_all_and_the_interface() {
        let dir = std::env::temp_dir().join(format!("srap-fib-conf-{}", std::process::id()));
        for (sub, rp, ignore) in [("all", "1", "0"), ("eth1", "2", "0")] {
            std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
            std::fs::write(dir.join(sub).join("rp_filter"), rp).expect("write");
            std::fs::write(dir.join(sub).join("arp_ignore"), ignore).expect("write");
        }
        let conf = Ipv4Conf::read_under(&dir, "eth1");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(conf.rp_filter, Some(2));
        assert_eq!(conf.arp_ignore, Some(0));
        assert_eq!(conf.arp_announce, None);
    }

    /// Every namespace has the local and main rules and a route to 127.0.0.1.
    #[test]
    fn the_kernel_lists_its_default_rules_and_local_routes() {
        let found = rules(libc::AF_INET as u8).expect("RTM_GETRULE");
        assert!(
            found
                .iter()
                .any(|r| r.table == TABLE_MAIN && r.priority == 32766),
            "{found:?}"
        );
        let routes = routes(libc::AF_INET as u8).expect("RTM_GETROUTE");
        assert!(
            routes
                .iter()
                .any(|r| r.dst.contains(&IpAddr::from([127, 0, 0, 1]))),
            "{routes:?}"
        );
    }
}
