//! Re-planning a running binder for a new RSS description (`--peer` mode):
//! the maps are refilled in place, so the programs and their pinned links
//! stay attached and steering never pauses. A `connect()` racing the refill
//! may get one port planned for the old table: that flow lands where the old
//! plan said. Nothing outside bpffs changes: no port is reserved.

use std::net::IpAddr;

use super::{
    binder::{RunningBinder, plan_for},
    error::SenderError,
    local::LocalHost,
    maps,
    options::SenderOptions,
    state, summary,
};

/// Rebuilds `steering`'s plan for `options` (receivers with their models,
/// ports and pacing; the port range `start` chose) and refills its maps.
/// On error before the maps are written, the old plan keeps steering
/// untouched.
pub fn replan(binder: &mut RunningBinder, options: &SenderOptions) -> Result<(), SenderError> {
    // The maps keep the sizes they were made with.
    let options = &SenderOptions {
        sizes: binder.sizes,
        ..options.clone()
    };
    let plan = plan_for(options, binder.port_range)?;
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
/// is no longer the snapshot the plan was made for ([`LocalHost`]): an
/// address added for an application to bind, a route changed, or the bond
/// they leave by (a member down or up, a port out of the aggregator);
/// returns true if it did. Failures are logged and the old plan keeps
/// steering.
pub fn replan_if_sources_changed(binder: &mut RunningBinder, options: &SenderOptions) -> bool {
    let addrs: Vec<IpAddr> = options.target_addrs();
    match LocalHost::discover(&addrs, &options.bonds).map(|now| now != binder.plan.host) {
        Ok(false) => false,
        Ok(true) => match replan(binder, options) {
            Ok(()) => {
                println!("local addresses, routes or bond members changed: replanned");
                println!("{}", summary::describe(binder));
                true
            }
            Err(err) => {
                tracing::warn!("local addresses changed; cannot re-plan ({err}): keeping the plan");
                false
            }
        },
        Err(err) => {
            tracing::warn!("checking local addresses: {err}");
            false
        }
    }
}
