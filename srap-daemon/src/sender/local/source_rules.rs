//! The source rules SRAP installs with `--source-rules install`, and their
//! removal. A rule is added with its table's route first, so it never
//! points at an empty table; what SRAP added carries its priority, one of
//! its tables and its protocol ([`super::routing::RULE_PRIORITY`],
//! [`super::routing::TABLE_BASE`], [`super::routing::PROTOCOL`]), which is
//! how a restart, a clean stop and `srap-agent detach` find exactly those,
//! and never anyone else's.

use std::net::IpAddr;

use srap_host::{
    fib::{self, FibRule, SourceRule, TableRoute},
    netlink::NetlinkError,
};

use crate::sender::{
    ends::SourceRules,
    local::routing::{
        HostRouting, PROTOCOL, RULE_PRIORITY, RoutingFinding, SourceFix, TABLE_BASE, TABLE_END,
    },
};

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

impl HostRouting {
    /// SRAP's rules in the kernel, each with its table's routes of SRAP's
    /// protocol, as the commands that would add them.
    pub fn installed_commands(&self) -> Vec<String> {
        let mut commands = Vec::new();
        for rule in &self.rules {
            let Some(src) = is_ours(rule) else { continue };
            for route in self
                .routes
                .iter()
                .filter(|r| r.table == rule.table && r.protocol == PROTOCOL)
            {
                let Some(oif) = route.oif else { continue };
                let fix = SourceFix {
                    dev: self.name_of(oif),
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
    pub fn stale_rules(&self) -> Vec<SourceRule> {
        self.rules
            .iter()
            .filter_map(|rule| {
                let src = is_ours(rule)?;
                let held = self
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
}

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
