//! Re-planning a running binder for a new RSS description (`--peer` mode):
//! the maps are refilled in place, so the programs and their pinned links
//! stay attached and steering never pauses. A `connect()` racing the refill
//! may get one port planned for the old table: that flow lands where the old
//! plan said. Nothing outside bpffs changes: no port is reserved.

use std::net::IpAddr;

use super::{
    binder::{RunningBinder, plan_on},
    ends::LocalNicsPolicy,
    error::SenderError,
    local::{
        LocalHost,
        link_watch::LinkWake,
        nics::{HostNic, LocalNics},
    },
    maps,
    options::SenderOptions,
    state, summary,
};

/// Rebuilds `steering`'s plan for `options` (receivers with their models,
/// ports and pacing; the port range `start` chose) and refills its maps.
/// On error before the maps are written, the old plan keeps steering
/// untouched.
pub fn replan(binder: &mut RunningBinder, options: &SenderOptions) -> Result<(), SenderError> {
    let host = binder.plan.host.rediscover(
        &options.target_addrs::<Vec<_>>(),
        &options.bonds,
        &options.nics,
    )?;
    replan_on(binder, options, host)
}

/// [`replan`] for `host`, a snapshot of this host already read (the one a
/// caller compared with the plan's): it installs the source rules the
/// snapshot lacks, if asked, and plans on it without reading the host again.
pub fn replan_on(
    binder: &mut RunningBinder,
    options: &SenderOptions,
    mut host: LocalHost,
) -> Result<(), SenderError> {
    // The maps keep the sizes they were made with.
    let options = &SenderOptions {
        sizes: binder.sizes,
        ..options.clone()
    };
    host.install_source_rules(&options.nics, &options.target_addrs::<Vec<_>>());
    let plan = plan_on(options, binder.port_range, host)?;
    let state_path = state::path_for(binder.layout.dir());
    if state::load(&state_path)?.is_none() {
        return Err(SenderError::State {
            path: state_path,
            problem: "it is gone (did `srap-agent detach` run?)".into(),
        });
    }
    maps::fill(&mut binder.ebpf, &plan, options)?;
    binder.plan = plan;
    Ok(())
}

/// Re-plans (for the same RSS models) when this host toward the receivers
/// is no longer the snapshot the plan was made for
/// ([`LocalHost`], re-read with
/// [`rediscover`](super::local::LocalHost::rediscover)): an
/// address added for an application to bind, a route changed, the bond
/// they leave by (a member down or up, a port out of the aggregator), or
/// one of this host's NICs (down or up, an address added or removed, a
/// NIC added: counted in [`RunningBinder::local_nic_replans`]); returns
/// true if it did. Failures are logged and the old plan keeps steering.
pub fn replan_if_sources_changed(binder: &mut RunningBinder, options: &SenderOptions) -> bool {
    let addrs: Vec<IpAddr> = options.target_addrs();
    let now = match binder
        .plan
        .host
        .rediscover(&addrs, &options.bonds, &options.nics)
    {
        Ok(now) if now == binder.plan.host => return false,
        Ok(now) => now,
        Err(err) => {
            tracing::warn!("checking local addresses: {err}");
            return false;
        }
    };
    let nics = nic_changes(&binder.plan.host.nics, &now.nics);
    match replan_on(binder, options, now) {
        Ok(()) => {
            println!("local addresses, routes or bond members changed: replanned");
            if !nics.is_empty() {
                binder.local_nic_replans += 1;
                println!("  this host's NICs changed: {}", nics.join("; "));
            }
            println!("{}", summary::describe(binder));
            true
        }
        Err(err) => {
            tracing::warn!("local addresses changed; cannot re-plan ({err}): keeping the plan");
            false
        }
    }
}

/// Under `--local-nics numa|balance`, whether a NIC the hook chooses among
/// went down or came up since the plan ([`LocalNics::links_moved`], asked
/// every [`super::local::nics::LINKS_EVERY`]); never under `route`.
fn links_moved(binder: &RunningBinder, options: &SenderOptions) -> bool {
    options.nics.policy != LocalNicsPolicy::Route && binder.plan.host.nics.links_moved()
}

/// A link woke the agent ([`LinkWake`]: the link fence, which has already
/// fenced off a NIC down in the hook, or the poll behind it), under
/// `--local-nics numa|balance`: re-plans if a chosen NIC's link or
/// addresses moved; returns true if it did. Under `route` nothing is
/// followed here.
pub fn follow_links(binder: &mut RunningBinder, options: &SenderOptions, wake: &LinkWake) -> bool {
    let moved = links_moved(binder, options)
        || (wake.addresses
            && options.nics.policy != LocalNicsPolicy::Route
            && binder.plan.host.nics_moved(&options.nics));
    moved && replan_if_sources_changed(binder, options)
}

/// What changed between two lists of this host's NICs, one phrase per NIC
/// (`eth1 down`, `eth2 added`, `eth0 addresses 10.0.0.1 → 10.0.0.1,
/// 10.0.0.9`); empty when nothing did.
pub fn nic_changes(before: &LocalNics, now: &LocalNics) -> Vec<String> {
    let mut changes = Vec::new();
    for nic in &now.nics {
        let Some(old) = before.get(&nic.name) else {
            changes.push(format!("{} added", nic.name));
            continue;
        };
        if old.up != nic.up {
            changes.push(format!(
                "{} {}",
                nic.name,
                if nic.up { "up" } else { "down" }
            ));
        }
        if old.addresses != nic.addresses {
            let list = |n: &HostNic| {
                n.addresses
                    .iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            changes.push(format!(
                "{} addresses {} → {}",
                nic.name,
                list(old),
                list(nic)
            ));
        }
        if old.node != nic.node || old.members != nic.members {
            changes.push(format!("{} node or members", nic.name));
        }
    }
    changes.extend(
        before
            .nics
            .iter()
            .filter(|old| now.get(&old.name).is_none())
            .map(|old| format!("{} gone", old.name)),
    );
    changes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn nic(name: &str, address: &str, up: bool) -> HostNic {
        HostNic {
            name: name.into(),
            addresses: BTreeSet::from([address.parse().expect("ip")]),
            node: None,
            up,
            members: Vec::new(),
            given: false,
            description: None,
        }
    }

    #[test]
    fn nic_changes_name_each_nic_and_what_changed() {
        let before = LocalNics {
            nics: vec![nic("eth0", "10.0.0.1", true), nic("eth1", "10.1.0.1", true)],
        };
        assert!(nic_changes(&before, &before).is_empty());
        let now = LocalNics {
            nics: vec![
                nic("eth0", "10.0.0.2", true),
                nic("eth1", "10.1.0.1", false),
                nic("eth2", "10.2.0.1", true),
            ],
        };
        assert_eq!(
            nic_changes(&before, &now),
            [
                "eth0 addresses 10.0.0.1 → 10.0.0.2",
                "eth1 down",
                "eth2 added"
            ]
        );
        assert_eq!(
            nic_changes(&now, &before).last().map(String::as_str),
            Some("eth2 gone")
        );
    }
}
