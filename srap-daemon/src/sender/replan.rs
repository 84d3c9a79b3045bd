//! Re-planning a running binder for a new RSS description (`--peer` mode):
//! the maps are refilled in place, so the programs and their pinned links
//! stay attached and steering never pauses. A `connect()` racing the refill
//! may get one port planned for the old table: that flow lands where the old
//! plan said. Nothing outside bpffs changes: no port is reserved.

use super::{RunningBinder, SenderError, SenderOptions, maps, state};

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
    let plan = super::plan_for(options, binder.port_range)?;
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

/// Re-plans (for the same RSS models) when the host's addresses or routes
/// toward the receivers changed since the plan (an address added for an
/// application to bind, say), or the bond they leave by (a member down or
/// up, a port out of the aggregator); returns true if it did. Failures are logged
/// and the old plan keeps steering.
pub fn replan_if_sources_changed(binder: &mut RunningBinder, options: &SenderOptions) -> bool {
    let addrs: Vec<std::net::IpAddr> = options.target_addrs();
    match super::sources_changed(binder, &addrs, &options.bonds) {
        Ok(false) => false,
        Ok(true) => match replan(binder, options) {
            Ok(()) => {
                println!("local addresses, routes or bond members changed: replanned");
                println!("{}", super::summary::describe(binder));
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
