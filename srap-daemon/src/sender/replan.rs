//! Re-planning a running binder for a new RSS description (`--peer` mode):
//! the maps are refilled in place, so the programs and their pinned links
//! stay attached and steering never pauses, and the port reservation moves
//! with the plan.
//!
//! Order keeps every moment safe: the new plan's ports are reserved (and
//! recorded in the state file) before any map points at them, and ports
//! the new plan dropped are released only after the maps stop using them.
//! A crash anywhere leaves a state file that lets `srap-agent detach` undo
//! everything the agent added. A `connect()` racing the refill may get one
//! port planned for the old table: that flow lands where the old plan said.

use std::collections::BTreeSet;

use srap_host::reserved::{self, Reservation};

use super::{RunningBinder, SenderError, SenderOptions, maps, plan::Plan, state};

/// What a re-plan changed in `ip_local_reserved_ports`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replanned {
    /// Ports the agent newly reserved for the new plan.
    pub reserved: usize,
    /// Ports the agent had reserved for the old plan and released.
    pub released: usize,
}

/// Rebuilds `steering`'s plan for `options` (receivers with their models,
/// ports and pacing; the port range `start` chose) and refills its maps.
/// On error before the maps are written, the old plan keeps steering
/// untouched.
pub fn replan(
    steering: &mut RunningBinder,
    options: &SenderOptions,
) -> Result<Replanned, SenderError> {
    let receivers = super::receiver_inputs(&options.targets)?;
    let plan = Plan::build_each(&receivers, &options.ports, steering.port_range)?;
    let new_ports = plan.ports();

    let state_path = state::path_for(steering.layout.dir());
    let Some(saved) = state::load(&state_path)? else {
        return Err(SenderError::State {
            path: state_path,
            problem: "it is gone (did `srap-agent detach` run?)".into(),
        });
    };
    let bad_state = |problem| SenderError::State {
        path: state_path.clone(),
        problem,
    };
    let added_before = reserved::parse(&saved.reserved_added).map_err(bad_state)?;
    let mut reservation = Reservation::read(added_before.clone())?;
    let added_now = reservation.ours_for(&new_ports);

    // 1. Reserve old ∪ new, recording first what may need undoing.
    let during: BTreeSet<u16> = added_before.union(&added_now).copied().collect();
    state::save(
        &state_path,
        &state::SenderState {
            reserved_added: reserved::format(&during),
            ..saved.clone()
        },
    )?;
    reservation.widen(&new_ports)?;

    // 2. Point the maps at the new plan.
    let pacing = options.pacing_rate.map_or(0, |r| r.0);
    maps::fill(&mut steering.ebpf, &plan, pacing)?;

    // 3. Release what only the old plan used, then record the new set.
    reservation.hold(&new_ports)?;
    state::save(
        &state_path,
        &state::SenderState {
            reserved_added: reserved::format(&added_now),
            ..saved
        },
    )?;
    let outcome = Replanned {
        reserved: added_now.difference(&added_before).count(),
        released: added_before.difference(&added_now).count(),
    };
    steering.plan = plan;
    steering.ports = new_ports;
    Ok(outcome)
}

/// Re-plans (for the same RSS models) when the host's addresses or routes
/// toward the receivers changed since the plan (an address added for an
/// application to bind, say); returns true if it did. Failures are logged
/// and the old plan keeps steering.
pub fn replan_if_sources_changed(steering: &mut RunningBinder, options: &SenderOptions) -> bool {
    let addrs: Vec<_> = options.targets.iter().map(|t| t.addr).collect();
    match super::sources_changed(steering, &addrs) {
        Ok(false) => false,
        Ok(true) => match replan(steering, options) {
            Ok(moved) => {
                println!(
                    "local addresses or routes changed: replanned (+{} -{} reserved ports)",
                    moved.reserved, moved.released
                );
                println!("{}", super::summary::describe(steering));
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
