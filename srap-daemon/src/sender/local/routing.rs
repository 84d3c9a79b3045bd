//! Routing that follows the source address (`--local-nics numa|balance`). A
//! flow bound to NIC B's address must leave by B and have its replies
//! accepted on B; the kernel routes by destination, so on a host whose
//! receivers are reached by another NIC's route it does neither without a
//! source rule (`docs/agents.md`, "Several NICs"). [`check`] says, for each
//! NIC SRAP may place flows on and each receiver, exactly what is missing,
//! as [`RoutingFinding`]s whose messages carry the command that fixes them;
//! with `--source-rules install`, [`super::source_rules`] adds the rules it
//! can, and detach and a clean stop take away those, and only those. This
//! module changes nothing on the host: it reads and judges ([`report`]).
//!
//! What SRAP installs is recognizable in the kernel itself, so a restart or
//! `srap-agent detach` finds it without a file: rule priority
//! [`RULE_PRIORITY`], table [`TABLE_BASE`] + the NIC's ifindex, and
//! protocol [`PROTOCOL`] on both the rule and the table's route. A rule or
//! route without that protocol is never removed.
//!
//! The judgement ([`check`]) is pure, over [`HostRouting`] values; only
//! [`HostRouting::read`] reads the kernel, and only `source_rules` changes it.

use std::{
    collections::BTreeSet,
    fmt,
    net::IpAddr,
    sync::{Mutex, PoisonError},
};

use ipnet::IpNet;
use srap_host::fib::{
    self, ACTION_TO_TABLE, FibRoute, FibRule, Ipv4Conf, ROUTE_UNICAST, SourceRule, TABLE_MAIN,
    TableRoute,
};
use srap_host::netlink::NetlinkError;

use crate::sender::{
    ends::{LocalNicsPolicy, SourceRules},
    local::nics::LocalNics,
};

/// The first table of SRAP's source rules: NIC B's table is
/// `TABLE_BASE + ifindex(B)` (0x5a00 = 23040).
pub const TABLE_BASE: u32 = 0x5a00;
/// Tables above this are not SRAP's, whatever their rules say.
pub const TABLE_END: u32 = TABLE_BASE + 0x1000;
/// The priority of every rule SRAP installs: before the main table's
/// (32766), after the local table's (0).
pub const RULE_PRIORITY: u32 = 0x5a00;
/// The `RTPROT_*` value SRAP's rules and routes carry (`proto 90` in
/// `ip rule` and `ip route`), unused by the routing daemons iproute2 names.
pub const PROTOCOL: u8 = 0x5a;
/// `FR_ACT_*` that end a lookup with an error.
const ACTIONS_UNREACHABLE: [u8; 3] = [6, 7, 8];
/// `RTN_*` that end a lookup with an error (blackhole, unreachable,
/// prohibit); `RTN_THROW` (9) goes on to the next rule.
const ROUTES_UNREACHABLE: [u8; 3] = [6, 7, 8];
const ROUTE_THROW: u8 = 9;

/// One NIC SRAP may place flows on, as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicFacts {
    pub name: String,
    pub ifindex: u32,
    /// Its addresses a flow could leave from.
    pub addresses: Vec<IpAddr>,
    /// The subnets its addresses are on.
    pub subnets: Vec<IpNet>,
    /// Its IPv4 settings in force.
    pub conf: Ipv4Conf,
}

/// The host's policy routing and the NICs checked, as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRouting {
    /// Every rule of both families, by priority.
    pub rules: Vec<FibRule>,
    /// Every route of every table, both families.
    pub routes: Vec<FibRoute>,
    /// The NICs flows may be placed on.
    pub nics: Vec<NicFacts>,
    /// Interface index → name, to name the NIC a lookup leaves by.
    pub names: Vec<(u32, String)>,
}

/// What is missing for flows bound to a NIC's address to leave and come
/// back by it. Its `Display` is the message: the NIC, the address and the
/// command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingFinding {
    /// A connect from `address` toward `receiver` leaves by `leaves_by`
    /// (`None`: by no NIC, unreachable), not by `nic`.
    MissingSourceRule {
        nic: String,
        address: IpAddr,
        receiver: IpAddr,
        leaves_by: Option<String>,
        /// The table its source rule looks up ([`TABLE_BASE`] + ifindex).
        table: u32,
        /// The rule and route that fix it (`None`: no route through `nic`
        /// toward the receiver is known to copy, so no gateway).
        fix: Option<SourceFix>,
    },
    /// `rp_filter` is strict on `nic` while the route back from `address`
    /// says `leaves_by`: the replies arriving on `nic` are dropped.
    StrictReversePath {
        nic: String,
        address: IpAddr,
        receiver: IpAddr,
        leaves_by: String,
    },
    /// Two NICs on one subnet with the kernel's default ARP behaviour: each
    /// answers for the other's address (ARP flux), so replies to one land
    /// on either.
    ArpFlux { nics: [String; 2], subnet: IpNet },
}

/// A source rule and its table's route, for one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFix {
    pub dev: String,
    pub rule: SourceRule,
    pub route: TableRoute,
}

impl SourceFix {
    /// The command an operator runs (no `proto`: a rule SRAP did not
    /// install is never removed by it).
    pub fn command(&self) -> String {
        let ip = if self.rule.src.is_ipv4() {
            "ip"
        } else {
            "ip -6"
        };
        let via = self
            .route
            .gateway
            .map(|gw| format!(" via {gw}"))
            .unwrap_or_default();
        format!(
            "{ip} rule add from {} table {t} && {ip} route add {}{via} dev {} table {t}",
            self.rule.src,
            self.route.dst,
            self.dev,
            t = self.rule.table
        )
    }
}

impl fmt::Display for RoutingFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingSourceRule {
                nic,
                address,
                receiver,
                leaves_by,
                table,
                fix,
            } => {
                let by = leaves_by.as_deref().map_or_else(
                    || "no route".to_owned(),
                    |other| format!("the route leaves by {other}"),
                );
                write!(
                    f,
                    "{nic}: flows from {address} to {receiver} do not leave by {nic} ({by}); "
                )?;
                match fix {
                    Some(fix) => write!(f, "add a source rule: {}", fix.command()),
                    None => write!(
                        f,
                        "add a source rule with a route through {nic}: ip rule add from \
                         {address} table {table} && ip route add {receiver} via GATEWAY dev {nic} \
                         table {table} (no route through {nic} toward {receiver} is known)"
                    ),
                }
            }
            Self::StrictReversePath {
                nic,
                address,
                receiver,
                leaves_by,
            } => write!(
                f,
                "{nic}: rp_filter is strict (1): replies from {receiver} to {address} arriving \
                 on {nic} are dropped while the route back leaves by {leaves_by}; add the source \
                 rule, or loosen it: sysctl -w net.ipv4.conf.{nic}.rp_filter=2"
            ),
            Self::ArpFlux {
                nics: [a, b],
                subnet,
            } => write!(
                f,
                "{a}, {b}: both on {subnet} and answering ARP for each other's addresses (ARP \
                 flux); sysctl -w net.ipv4.conf.{a}.arp_ignore=1 net.ipv4.conf.{a}.arp_announce=2 \
                 net.ipv4.conf.{b}.arp_ignore=1 net.ipv4.conf.{b}.arp_announce=2"
            ),
        }
    }
}

/// Where a lookup ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup<'a> {
    Route(&'a FibRoute),
    Unreachable,
}

/// Whether `rule`'s selectors take a connect of this host from `src` to
/// `dst`: not bound to a device, mark 0, input interface `lo`.
fn rule_matches(rule: &FibRule, src: IpAddr, dst: IpAddr) -> bool {
    if rule.unjudged || rule.oif.is_some() || rule.family != fib::family_of(src) {
        return false;
    }
    let selected = rule.src.is_none_or(|net| net.contains(&src))
        && rule.dst.is_none_or(|net| net.contains(&dst))
        && rule.iif.as_deref().is_none_or(|iif| iif == "lo")
        && rule.fwmark.is_none_or(|(mark, mask)| mark & mask == 0);
    selected != rule.invert
}

/// The route of `table` toward `dst`: the longest prefix, then the lowest
/// metric.
fn in_table(routes: &[FibRoute], table: u32, dst: IpAddr) -> Option<&FibRoute> {
    routes
        .iter()
        .filter(|r| r.table == table && r.tos == 0 && r.dst.contains(&dst))
        .max_by_key(|r| (r.dst.prefix_len(), std::cmp::Reverse(r.metric)))
}

/// The kernel's lookup for a connect from `src` to `dst`, rule by rule.
fn lookup<'a>(routing: &'a HostRouting, src: IpAddr, dst: IpAddr) -> Lookup<'a> {
    for rule in routing.rules.iter().filter(|r| rule_matches(r, src, dst)) {
        if ACTIONS_UNREACHABLE.contains(&rule.action) {
            return Lookup::Unreachable;
        }
        if rule.action != ACTION_TO_TABLE {
            continue;
        }
        match in_table(&routing.routes, rule.table, dst) {
            Some(route) if route.kind == ROUTE_THROW => continue,
            Some(route) if ROUTES_UNREACHABLE.contains(&route.kind) => return Lookup::Unreachable,
            Some(route) => return Lookup::Route(route),
            None => continue,
        }
    }
    Lookup::Unreachable
}

impl HostRouting {
    pub(super) fn name_of(&self, ifindex: u32) -> String {
        self.names
            .iter()
            .find(|(i, _)| *i == ifindex)
            .map_or_else(|| format!("ifindex {ifindex}"), |(_, n)| n.clone())
    }

    /// The main table's route toward `receiver` through `nic` (the one a
    /// source rule's table copies), or `nic`'s own subnet holding it.
    fn route_through(&self, nic: &NicFacts, receiver: IpAddr) -> Option<(IpNet, Option<IpAddr>)> {
        let through = self
            .routes
            .iter()
            .filter(|r| r.table == TABLE_MAIN && r.kind == ROUTE_UNICAST)
            .filter(|r| r.oif == Some(nic.ifindex) && r.dst.contains(&receiver))
            .max_by_key(|r| (r.dst.prefix_len(), std::cmp::Reverse(r.metric)));
        match through {
            Some(route) => Some((route.dst, route.gateway)),
            None => nic
                .subnets
                .iter()
                .any(|s| s.contains(&receiver))
                .then(|| (IpNet::from(receiver), None)),
        }
    }
}

/// What is missing for every NIC of `routing` toward every receiver:
/// each finding once, in NIC order.
pub fn check(routing: &HostRouting, receivers: &[IpAddr]) -> Vec<RoutingFinding> {
    let mut found = Vec::new();
    for nic in &routing.nics {
        for &receiver in receivers {
            for &address in nic
                .addresses
                .iter()
                .filter(|a| a.is_ipv4() == receiver.is_ipv4())
            {
                found.extend(check_one(routing, nic, address, receiver));
            }
        }
    }
    found.extend(arp_flux(&routing.nics));
    let mut seen = BTreeSet::new();
    found.retain(|f| seen.insert(f.to_string()));
    found
}

fn check_one(
    routing: &HostRouting,
    nic: &NicFacts,
    address: IpAddr,
    receiver: IpAddr,
) -> Vec<RoutingFinding> {
    let leaves_by = match lookup(routing, address, receiver) {
        Lookup::Route(route) if route.oif == Some(nic.ifindex) => return Vec::new(),
        // A multipath route has its next hops, not one device.
        Lookup::Route(route) => Some(route.oif.map_or_else(
            || "several NICs (multipath)".to_owned(),
            |i| routing.name_of(i),
        )),
        Lookup::Unreachable => None,
    };
    let table = TABLE_BASE + nic.ifindex;
    let fix = routing
        .route_through(nic, receiver)
        .map(|(dst, gateway)| SourceFix {
            dev: nic.name.clone(),
            rule: SourceRule {
                src: address,
                table,
                priority: RULE_PRIORITY,
                protocol: PROTOCOL,
            },
            route: TableRoute {
                dst,
                gateway,
                oif: nic.ifindex,
                table,
                protocol: PROTOCOL,
            },
        });
    let mut found = Vec::new();
    if let (true, Some(other)) = (
        address.is_ipv4() && nic.conf.rp_filter == Some(1),
        &leaves_by,
    ) {
        found.push(RoutingFinding::StrictReversePath {
            nic: nic.name.clone(),
            address,
            receiver,
            leaves_by: other.clone(),
        });
    }
    found.insert(
        0,
        RoutingFinding::MissingSourceRule {
            nic: nic.name.clone(),
            address,
            receiver,
            leaves_by,
            table,
            fix,
        },
    );
    found
}

/// Pairs of NICs on one IPv4 subnet where either answers ARP as the
/// kernel does by default (`arp_ignore` 0 or `arp_announce` 0).
fn arp_flux(nics: &[NicFacts]) -> Vec<RoutingFinding> {
    let loose = |n: &NicFacts| n.conf.arp_ignore == Some(0) || n.conf.arp_announce == Some(0);
    let mut found = Vec::new();
    for (i, a) in nics.iter().enumerate() {
        for b in &nics[i + 1..] {
            let shared = a
                .subnets
                .iter()
                .filter(|s| s.addr().is_ipv4())
                .find(|s| b.subnets.iter().any(|t| t.trunc() == s.trunc()));
            if let (Some(subnet), true) = (shared, loose(a) || loose(b)) {
                found.push(RoutingFinding::ArpFlux {
                    nics: [a.name.clone(), b.name.clone()],
                    subnet: subnet.trunc(),
                });
            }
        }
    }
    found
}

/// The NICs the check is for: the `--local-iface` NICs when there are
/// several and the policy places flows by NIC (`numa`, `balance`); none
/// otherwise (with `route` nothing is checked).
pub fn checked_nics(policy: LocalNicsPolicy, nics: &LocalNics) -> Vec<&str> {
    let given: Vec<&str> = nics
        .nics
        .iter()
        .filter(|n| n.given)
        .map(|n| n.name.as_str())
        .collect();
    if policy == LocalNicsPolicy::Route || given.len() < 2 {
        return Vec::new();
    }
    given
}

impl HostRouting {
    /// Reads the rules, routes and settings for the NICs named (blocking:
    /// netlink dumps, `/proc/sys`).
    pub fn read(nics: &LocalNics, names: &[&str]) -> Result<Self, NetlinkError> {
        let mut rules = fib::rules(libc::AF_INET as u8)?;
        rules.extend(fib::rules(libc::AF_INET6 as u8)?);
        rules.sort_by_key(|r| r.priority);
        let mut routes = fib::routes(libc::AF_INET as u8)?;
        routes.extend(fib::routes(libc::AF_INET6 as u8)?);
        let subnets = srap_host::local::subnets().unwrap_or_default();
        let facts = names
            .iter()
            .filter_map(|name| {
                let nic = nics.get(name)?;
                Some(NicFacts {
                    name: nic.name.clone(),
                    ifindex: fib::ifindex(name)?,
                    addresses: nic.addresses.iter().copied().collect(),
                    subnets: subnets
                        .iter()
                        .filter(|(holder, _)| holder == name)
                        .map(|(_, net)| *net)
                        .collect(),
                    conf: Ipv4Conf::read(name),
                })
            })
            .collect();
        let names = nics
            .nics
            .iter()
            .filter_map(|n| Some((fib::ifindex(&n.name)?, n.name.clone())))
            .collect();
        Ok(Self {
            rules,
            routes,
            nics: facts,
            names,
        })
    }
}

/// Whether `rule` is one SRAP installed: its priority, a table of its
/// range and its protocol, from one address.
pub fn is_ours(rule: &FibRule) -> Option<IpAddr> {
    let src = rule
        .src
        .filter(|net| net.prefix_len() == net.max_prefix_len())?;
    (rule.priority == RULE_PRIORITY
        && rule.protocol == PROTOCOL
        && (TABLE_BASE..TABLE_END).contains(&rule.table))
    .then(|| src.addr())
}

/// SRAP's rules in the kernel, each with its table's routes of SRAP's
/// protocol, as the commands that would add them.
pub fn installed_commands(routing: &HostRouting) -> Vec<String> {
    let mut commands = Vec::new();
    for rule in &routing.rules {
        let Some(src) = is_ours(rule) else { continue };
        for route in routing
            .routes
            .iter()
            .filter(|r| r.table == rule.table && r.protocol == PROTOCOL)
        {
            let Some(oif) = route.oif else { continue };
            let fix = SourceFix {
                dev: routing.name_of(oif),
                rule: SourceRule {
                    src,
                    table: rule.table,
                    priority: rule.priority,
                    protocol: rule.protocol,
                },
                route: TableRoute {
                    dst: route.dst,
                    gateway: route.gateway,
                    oif,
                    table: route.table,
                    protocol: route.protocol,
                },
            };
            commands.push(fix.command());
        }
    }
    commands
}

/// SRAP's rules whose address no checked NIC holds with that table (an
/// address gone or moved, a NIC no longer given).
pub fn stale_rules(routing: &HostRouting) -> Vec<SourceRule> {
    routing
        .rules
        .iter()
        .filter_map(|rule| {
            let src = is_ours(rule)?;
            let held = routing
                .nics
                .iter()
                .any(|n| n.addresses.contains(&src) && TABLE_BASE + n.ifindex == rule.table);
            (!held).then_some(SourceRule {
                src,
                table: rule.table,
                priority: rule.priority,
                protocol: rule.protocol,
            })
        })
        .collect()
}

/// What the check found and what `--source-rules install` did, as the
/// status shows it. Two reports are equal when the host is the same
/// (`not_installed` aside: what the agent could not do does not make the
/// next read of the host differ, so it does not re-plan).
#[derive(Debug, Clone, Default)]
pub struct RoutingReport {
    /// Whether the check ran (the policy places by NIC, with ≥ 2 NICs).
    pub checked: bool,
    /// `--source-rules`.
    pub mode: SourceRules,
    pub findings: Vec<RoutingFinding>,
    /// The source rules SRAP installed, as commands.
    pub installed: Vec<String>,
    /// Why a rule could not be installed (the findings stay shown).
    pub not_installed: Vec<String>,
}

impl PartialEq for RoutingReport {
    fn eq(&self, other: &Self) -> bool {
        (self.checked, self.mode, &self.findings, &self.installed)
            == (other.checked, other.mode, &other.findings, &other.installed)
    }
}

impl Eq for RoutingReport {}

/// Reads and checks the routing for `nics` toward `receivers` under
/// `policy`; changes nothing (installing is [`super::source_rules::apply`]).
/// With `--source-rules install`, SRAP's rules in place are listed. Each
/// finding, and a read that failed, is logged as a warning once per
/// process.
pub fn report(
    policy: LocalNicsPolicy,
    mode: SourceRules,
    nics: &LocalNics,
    receivers: &[IpAddr],
) -> RoutingReport {
    let names = checked_nics(policy, nics);
    if names.is_empty() {
        return RoutingReport::default();
    }
    let mut report = RoutingReport {
        checked: true,
        mode,
        ..RoutingReport::default()
    };
    match HostRouting::read(nics, &names) {
        Ok(routing) => {
            report.findings = check(&routing, receivers);
            if mode == SourceRules::Install {
                report.installed = installed_commands(&routing);
            }
        }
        Err(err) => report
            .not_installed
            .push(format!("reading the routing: {err}")),
    }
    for line in report
        .findings
        .iter()
        .map(ToString::to_string)
        .chain(report.not_installed.clone())
    {
        warn_once(&line);
    }
    for line in &report.installed {
        say_once(&format!("source rule in place (SRAP's): {line}"), false);
    }
    report
}

/// Logs `line` as a warning the first time this process says it.
pub(super) fn warn_once(line: &str) {
    say_once(line, true);
}

/// Logs `line` the first time this process says it (a warning or info).
fn say_once(line: &str, warn: bool) {
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut said = SAID.lock().unwrap_or_else(PoisonError::into_inner);
    if said.insert(line.to_owned()) {
        if warn {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Hosts and routing entries the routing tests and `source_rules`'s
    //! judge.
    use super::*;

    pub(crate) fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    pub(crate) fn net(text: &str) -> IpNet {
        text.parse().expect("net")
    }

    pub(crate) fn rule(priority: u32, table: u32, src: Option<&str>) -> FibRule {
        FibRule {
            family: libc::AF_INET as u8,
            priority,
            table,
            action: ACTION_TO_TABLE,
            src: src.map(net),
            dst: None,
            iif: None,
            oif: None,
            fwmark: None,
            invert: false,
            unjudged: false,
            protocol: 0,
        }
    }

    pub(crate) fn route(
        table: u32,
        dst: &str,
        gateway: Option<&str>,
        oif: u32,
        metric: u32,
    ) -> FibRoute {
        FibRoute {
            table,
            dst: net(dst),
            kind: ROUTE_UNICAST,
            oif: Some(oif),
            gateway: gateway.map(ip),
            prefsrc: None,
            metric,
            protocol: 0,
            tos: 0,
        }
    }

    pub(crate) fn nic(name: &str, ifindex: u32, cidr: &str) -> NicFacts {
        let subnet = net(cidr);
        NicFacts {
            name: name.into(),
            ifindex,
            addresses: vec![subnet.addr()],
            subnets: vec![subnet],
            conf: Ipv4Conf {
                rp_filter: Some(2),
                arp_ignore: Some(1),
                arp_announce: Some(2),
            },
        }
    }

    /// This host's NIC `name`, up, without addresses, `given` or not.
    pub(crate) fn nic_row(name: &str, given: bool) -> crate::sender::local::nics::HostNic {
        crate::sender::local::nics::HostNic {
            name: name.into(),
            addresses: BTreeSet::new(),
            node: None,
            up: true,
            members: Vec::new(),
            given,
            description: None,
        }
    }

    /// A two-NIC host: eth0 (2) on 10.0.1.0/24, eth1 (3) on 10.0.2.0/24,
    /// the receivers' 10.0.9.0/24 reached via eth0 by the main table and,
    /// at a worse metric, via eth1.
    pub(crate) fn host() -> HostRouting {
        HostRouting {
            rules: vec![
                rule(0, 255, None),
                rule(32766, 254, None),
                rule(32767, 253, None),
            ],
            routes: vec![
                route(254, "10.0.1.0/24", None, 2, 0),
                route(254, "10.0.2.0/24", None, 3, 0),
                route(254, "10.0.9.0/24", Some("10.0.1.2"), 2, 0),
                route(254, "10.0.9.0/24", Some("10.0.2.2"), 3, 200),
            ],
            nics: vec![nic("eth0", 2, "10.0.1.1/24"), nic("eth1", 3, "10.0.2.1/24")],
            names: vec![(2, "eth0".into()), (3, "eth1".into())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{fixtures::*, *};

    /// eth1's address is not the route's source toward the receiver: it
    /// needs a source rule, and the message names the NIC, the address and
    /// the exact command; eth0, the route's NIC, needs none.
    #[test]
    fn a_nic_off_the_route_needs_a_source_rule_with_its_command() {
        let found = check(&host(), &[ip("10.0.9.1")]);
        assert_eq!(found.len(), 1, "{found:?}");
        let RoutingFinding::MissingSourceRule {
            nic,
            address,
            leaves_by,
            fix,
            ..
        } = &found[0]
        else {
            panic!("{found:?}");
        };
        assert_eq!((nic.as_str(), *address), ("eth1", ip("10.0.2.1")));
        assert_eq!(leaves_by.as_deref(), Some("eth0"));
        let fix = fix.as_ref().expect("a route via eth1 is known");
        assert_eq!((fix.rule.table, fix.rule.priority), (0x5a03, 0x5a00));
        assert_eq!(
            found[0].to_string(),
            "eth1: flows from 10.0.2.1 to 10.0.9.1 do not leave by eth1 (the route leaves by \
             eth0); add a source rule: ip rule add from 10.0.2.1 table 23043 && ip route add \
             10.0.9.0/24 via 10.0.2.2 dev eth1 table 23043"
        );
    }

    /// With the source rule and its table's route in place, nothing is
    /// missing; a rule for another address or an empty table changes
    /// nothing.
    #[test]
    fn the_source_rule_and_its_route_satisfy_the_check() {
        let mut routing = host();
        routing.rules.push(rule(100, 0x5a03, Some("10.0.3.1/32")));
        routing.rules.push(rule(101, 0x5a04, Some("10.0.2.1/32")));
        routing.rules.sort_by_key(|r| r.priority);
        assert_eq!(check(&routing, &[ip("10.0.9.1")]).len(), 1);
        routing
            .rules
            .push(rule(0x5a00, 0x5a03, Some("10.0.2.1/32")));
        routing.rules.sort_by_key(|r| r.priority);
        routing
            .routes
            .push(route(0x5a03, "10.0.9.0/24", Some("10.0.2.2"), 3, 0));
        assert_eq!(check(&routing, &[ip("10.0.9.1")]), []);
    }

    /// A receiver on eth1's own subnet is reached by eth1 from its address
    /// (the connected route): no rule. eth0 has no route toward it to copy,
    /// so its message says the gateway is for the operator to give.
    #[test]
    fn a_nic_on_the_receivers_subnet_needs_none_and_an_unknown_gateway_is_said() {
        let found = check(&host(), &[ip("10.0.2.9")]);
        assert_eq!(found.len(), 1, "{found:?}");
        let text = found[0].to_string();
        assert!(
            text.starts_with("eth0: flows from 10.0.1.1 to 10.0.2.9"),
            "{text}"
        );
        assert!(
            text.contains("10.0.2.9 via GATEWAY dev eth0 table 23042"),
            "{text}"
        );
        assert!(matches!(
            &found[0],
            RoutingFinding::MissingSourceRule { fix: None, .. }
        ));
    }

    /// rp_filter strict on the NIC whose replies the route back does not
    /// expect there: said with the sysctl that loosens it.
    #[test]
    fn strict_reverse_path_filtering_is_said_with_its_sysctl() {
        let mut routing = host();
        routing.nics[1].conf.rp_filter = Some(1);
        routing.nics[0].conf.rp_filter = Some(1);
        let found = check(&routing, &[ip("10.0.9.1")]);
        assert_eq!(found.len(), 2, "eth0 is on the route: {found:?}");
        assert!(
            matches!(&found[1], RoutingFinding::StrictReversePath { nic, .. } if nic == "eth1")
        );
        let text = found[1].to_string();
        assert!(text.contains("rp_filter is strict (1)"), "{text}");
        assert!(
            text.ends_with("sysctl -w net.ipv4.conf.eth1.rp_filter=2"),
            "{text}"
        );
    }

    /// Two NICs on one subnet with the kernel's ARP defaults: ARP flux,
    /// said once with the sysctls for both; set as advised, none.
    #[test]
    fn two_nics_on_one_subnet_are_arp_flux_unless_told_otherwise() {
        let mut routing = host();
        routing.nics[1] = nic("eth1", 3, "10.0.1.7/24");
        routing.nics[1].conf.arp_ignore = Some(0);
        let found = arp_flux(&routing.nics);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "eth0, eth1: both on 10.0.1.0/24 and answering ARP for each other's addresses (ARP \
             flux); sysctl -w net.ipv4.conf.eth0.arp_ignore=1 net.ipv4.conf.eth0.arp_announce=2 \
             net.ipv4.conf.eth1.arp_ignore=1 net.ipv4.conf.eth1.arp_announce=2"
        );
        routing.nics[1].conf.arp_ignore = Some(1);
        assert_eq!(arp_flux(&routing.nics), []);
    }

    /// A rule for marked traffic only, and one inverted on a mark (as
    /// WireGuard tools install), are judged as the kernel would for an
    /// unmarked connect; an unreachable rule ends the lookup.
    #[test]
    fn marks_inversion_and_unreachable_rules_are_judged_as_the_kernel_does() {
        let mut routing = host();
        let marked = FibRule {
            fwmark: Some((0x10, 0xff)),
            ..rule(10, 0x5a03, None)
        };
        routing.rules.insert(0, marked);
        routing
            .routes
            .push(route(0x5a03, "0.0.0.0/0", Some("10.0.2.2"), 3, 0));
        assert_eq!(
            check(&routing, &[ip("10.0.9.1")]).len(),
            1,
            "a mark 0 connect"
        );
        routing.rules[0].invert = true;
        assert_eq!(
            check(&routing, &[ip("10.0.9.1")]).len(),
            1,
            "now eth0 leaves by eth1"
        );
        routing.rules[0] = FibRule {
            action: 7,
            ..rule(10, 0, None)
        };
        let found = check(&routing, &[ip("10.0.9.1")]);
        assert!(
            found.iter().all(|f| f.to_string().contains("(no route)")),
            "{found:?}"
        );
    }

    /// A rule holds for its own family: an IPv4 `unreachable` rule does
    /// not end an IPv6 lookup.
    #[test]
    fn rules_of_the_other_family_are_not_applied() {
        let mut routing = host();
        routing.rules.insert(
            0,
            FibRule {
                action: 7,
                ..rule(10, 0, None)
            },
        );
        routing.rules.push(FibRule {
            family: libc::AF_INET6 as u8,
            ..rule(32766, TABLE_MAIN, None)
        });
        routing
            .routes
            .push(route(TABLE_MAIN, "fd00:9::/64", None, 2, 0));
        let found = lookup(&routing, ip("fd00:1::1"), ip("fd00:9::1"));
        assert!(
            matches!(found, Lookup::Route(r) if r.oif == Some(2)),
            "{found:?}"
        );
        assert_eq!(
            lookup(&routing, ip("10.0.1.1"), ip("10.0.9.1")),
            Lookup::Unreachable
        );
    }

    /// A multipath route toward the receiver leaves by no single NIC: both
    /// NICs are told so, each with its own rule.
    #[test]
    fn a_multipath_route_is_named_as_such() {
        let mut routing = host();
        routing.routes.push(FibRoute {
            oif: None,
            ..route(TABLE_MAIN, "10.0.9.1/32", None, 0, 0)
        });
        let found = check(&routing, &[ip("10.0.9.1")]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found.iter().all(|f| f
                .to_string()
                .contains("(the route leaves by several NICs (multipath))")),
            "{found:?}"
        );
    }

    /// Only the given NICs, only when several, only under numa or balance.
    #[test]
    fn route_or_a_single_nic_checks_nothing() {
        let nics = LocalNics {
            nics: vec![
                nic_row("eth0", true),
                nic_row("eth1", true),
                nic_row("lo", false),
            ],
        };
        assert_eq!(checked_nics(LocalNicsPolicy::Numa, &nics), ["eth0", "eth1"]);
        assert_eq!(
            checked_nics(LocalNicsPolicy::Balance, &nics),
            ["eth0", "eth1"]
        );
        assert!(checked_nics(LocalNicsPolicy::Route, &nics).is_empty());
        let one = LocalNics {
            nics: vec![nic_row("eth0", true), nic_row("eth1", false)],
        };
        assert!(checked_nics(LocalNicsPolicy::Numa, &one).is_empty());
    }
}
