//! The source rules SRAP installs with `--source-rules install`, and their
//! removal. A rule is added with its table's route first, so it never
//! points at an empty table; what SRAP added carries its priority, one of
//! its tables and its protocol ([`super::routing::RULE_PRIORITY`],
//! [`super::routing::TABLE_BASE`], [`super::routing::PROTOCOL`]), which is
//! how a restart, a clean stop and `srap-agent detach` find exactly those,
//! and never anyone else's. [`apply`] is the one step of a (re)plan that
//! changes the host's routing: with `--source-rules install`, it installs
//! what [`super::routing`]'s read found missing.

use std::net::IpAddr;

use srap_host::{
    fib::{self, SourceRule, TableRoute},
    netlink::NetlinkError,
};

use crate::sender::{
    ends::{LocalNicsPolicy, SourceRules},
    local::{
        nics::LocalNics,
        routing::{
            self, HostRouting, PROTOCOL, RoutingFinding, RoutingReport, TABLE_BASE, TABLE_END,
            checked_nics, is_ours, stale_rules, warn_once,
        },
    },
};

/// Removes `stale` rules and, where no other of SRAP's rules looks its
/// table up, that table's routes of SRAP's protocol; says what failed.
pub fn prune(routing: &HostRouting, stale: &[SourceRule]) -> Vec<String> {
    let mut failed = Vec::new();
    for rule in stale {
        if let Err(err) = fib::delete_rule(rule) {
            failed.push(format!(
                "removing SRAP's stale rule from {}: {err}",
                rule.src
            ));
            continue;
        }
        let still_used = routing
            .rules
            .iter()
            .filter_map(|r| is_ours(r).map(|src| (src, r.table)))
            .any(|(src, table)| table == rule.table && !stale.iter().any(|s| s.src == src));
        let routes = routing
            .routes
            .iter()
            .filter(|r| !still_used && r.table == rule.table && r.protocol == PROTOCOL);
        for route in routes {
            let Some(oif) = route.oif else { continue };
            let table_route = TableRoute {
                dst: route.dst,
                gateway: route.gateway,
                oif,
                table: route.table,
                protocol: route.protocol,
            };
            if let Err(err) = fib::delete_route(&table_route) {
                failed.push(format!(
                    "removing SRAP's route of table {}: {err}",
                    rule.table
                ));
            }
        }
    }
    failed
}

/// What [`install`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    pub installed: Vec<String>,
    pub failed: Vec<String>,
}

/// Installs the source rule and table route of every finding that has
/// one: the route first, so the rule never points at an empty table; a
/// rule the kernel refuses takes its route away again. Nothing is
/// black-holed: a NIC whose rule cannot be added keeps today's routing.
pub fn install(findings: &[RoutingFinding]) -> Installed {
    let mut done = Installed::default();
    let fixes = findings.iter().filter_map(|f| match f {
        RoutingFinding::MissingSourceRule { fix: Some(fix), .. } => Some(fix),
        _ => None,
    });
    for fix in fixes {
        let route = match fib::add_route(&fix.route) {
            Ok(()) => true,
            Err(err) if err.errno() == Some(libc::EEXIST) => false,
            Err(err) => {
                done.failed.push(format!(
                    "{}: not installed ({err}): {}",
                    fix.dev,
                    fix.command()
                ));
                continue;
            }
        };
        match fib::add_rule(&fix.rule) {
            Ok(()) => done.installed.push(fix.command()),
            Err(err) => {
                if route {
                    let _ = fib::delete_route(&fix.route);
                }
                done.failed.push(format!(
                    "{}: not installed ({err}): {}",
                    fix.dev,
                    fix.command()
                ));
            }
        }
    }
    done
}

/// Removes every rule and route SRAP installed (priority, table range
/// and protocol all SRAP's), in both families; returns how many. Rules
/// and routes anyone else installed stay, whatever their table.
pub fn remove_installed() -> Result<usize, NetlinkError> {
    let ours =
        |table: u32, protocol: u8| protocol == PROTOCOL && (TABLE_BASE..TABLE_END).contains(&table);
    let mut removed = 0;
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        for rule in fib::rules(family)? {
            if let Some(src) = is_ours(&rule) {
                fib::delete_rule(&SourceRule {
                    src,
                    table: rule.table,
                    priority: rule.priority,
                    protocol: rule.protocol,
                })?;
                removed += 1;
            }
        }
        for route in fib::routes(family)? {
            if let (true, Some(oif)) = (ours(route.table, route.protocol), route.oif) {
                fib::delete_route(&TableRoute {
                    dst: route.dst,
                    gateway: route.gateway,
                    oif,
                    table: route.table,
                    protocol: route.protocol,
                })?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// On a clean stop with `--source-rules install`: removes the source
/// rules and routes SRAP installed, and says so.
pub fn remove_on_stop(mode: SourceRules) {
    if mode != SourceRules::Install {
        return;
    }
    match remove_installed() {
        Ok(0) => {}
        Ok(n) => tracing::info!("removed the {n} source rules and routes SRAP installed"),
        Err(err) => tracing::warn!(
            "removing the source rules SRAP installed: {err}; `srap-agent detach` removes them"
        ),
    }
}

/// `--source-rules install`, the one step of a (re)plan that changes the
/// host: removes SRAP's rules no checked NIC's address holds any more,
/// installs the missing ones `report` (a pure read, [`routing::report`])
/// found, and leaves in `report` what the host is now, with what could not
/// be done. Under `check`, or with nothing missing or stale, it changes
/// nothing.
pub fn apply(
    report: &mut RoutingReport,
    policy: LocalNicsPolicy,
    nics: &LocalNics,
    receivers: &[IpAddr],
) {
    if report.mode != SourceRules::Install || !report.checked {
        return;
    }
    let Ok(routing) = HostRouting::read(nics, &checked_nics(policy, nics)) else {
        return; // the report already says the read failed
    };
    let stale = stale_rules(&routing);
    if report.findings.is_empty() && stale.is_empty() {
        return;
    }
    let mut failed = prune(&routing, &stale);
    failed.extend(install(&report.findings).failed);
    *report = routing::report(policy, report.mode, nics, receivers);
    for line in &failed {
        warn_once(line);
    }
    report.not_installed.extend(failed);
}

#[cfg(test)]
mod tests {
    use srap_host::fib::{FibRoute, FibRule};

    use super::*;
    use crate::sender::local::routing::{
        PROTOCOL, RULE_PRIORITY,
        fixtures::{host, ip, nic_row, route, rule},
        installed_commands,
    };

    /// SRAP's rules in the kernel are listed as commands (an earlier run's
    /// too); one whose address no checked NIC holds with its table is
    /// stale; anyone else's rule, even in SRAP's priority and tables, is
    /// neither.
    #[test]
    fn srap_rules_are_listed_and_those_no_nic_holds_are_stale() {
        let mut routing = host();
        let ours = |src: &str, table| FibRule {
            protocol: PROTOCOL,
            ..rule(RULE_PRIORITY, table, Some(src))
        };
        routing.rules.push(ours("10.0.2.1/32", 0x5a03));
        routing.rules.push(ours("10.0.7.1/32", 0x5a07));
        routing
            .rules
            .push(rule(RULE_PRIORITY, 0x5a08, Some("10.0.8.1/32")));
        routing.routes.push(FibRoute {
            protocol: PROTOCOL,
            ..route(0x5a03, "10.0.9.0/24", Some("10.0.2.2"), 3, 0)
        });
        assert_eq!(
            installed_commands(&routing),
            [
                "ip rule add from 10.0.2.1 table 23043 && ip route add 10.0.9.0/24 via 10.0.2.2 \
              dev eth1 table 23043"
            ]
        );
        let stale = stale_rules(&routing);
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert_eq!((stale[0].src, stale[0].table), (ip("10.0.7.1"), 0x5a07));
    }

    /// Under `route` nothing is checked, so nothing is installed.
    #[test]
    fn under_route_nothing_is_checked_or_installed() {
        let nics = LocalNics {
            nics: vec![nic_row("eth0", true), nic_row("eth1", true)],
        };
        let mut report = routing::report(
            LocalNicsPolicy::Route,
            SourceRules::Install,
            &nics,
            &[ip("10.0.9.1")],
        );
        assert_eq!(report, RoutingReport::default());
        apply(
            &mut report,
            LocalNicsPolicy::Route,
            &nics,
            &[ip("10.0.9.1")],
        );
        assert_eq!(report, RoutingReport::default());
    }
}
