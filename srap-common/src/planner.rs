//! The flow planner: N flows to one receiver → N source ports on as many
//! distinct receiver CPUs as there are, and never more than one flow apart.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::{
    port_range::PortRange,
    rss::{FlowTuple, Landing, RssModel, Unhashed},
    solver::PortSolver,
};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    #[error(transparent)]
    Unhashed(#[from] Unhashed),
    #[error("no source port in {range} lands on any receiver CPU")]
    NoPorts { range: PortRange },
    #[error("{flows} flows asked for, but the range {range} holds only {available} ports")]
    TooManyFlows {
        flows: usize,
        range: PortRange,
        available: usize,
    },
}

/// One planned flow: its source port and where the receiver will put it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedFlow {
    pub port: u16,
    pub landing: Landing,
}

/// N flows to one receiver, each with its port and landing (what `srap
/// predict` prints); not the sender's binder plan (`srap_daemon::sender::Plan`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPlan {
    pub flows: Vec<PlannedFlow>,
}

impl FlowPlan {
    /// Flows per receiver CPU.
    pub fn cpu_loads(&self) -> BTreeMap<u32, usize> {
        let mut loads = BTreeMap::new();
        for flow in &self.flows {
            *loads.entry(flow.landing.cpu).or_insert(0) += 1;
        }
        loads
    }

    pub fn distinct_cpus(&self) -> usize {
        self.cpu_loads().len()
    }
}

/// Plans `flows` flows shaped like `template` (its source port is ignored;
/// its protocol's fields are hashed, which the model must know).
///
/// Each flow goes to the CPU with the fewest flows so far (ties: lowest CPU
/// first, which makes rounds), on that CPU's lowest unused port in `range`.
/// Distinct CPUs are used while they last; past that, loads differ by at most
/// one — unless `range` is so narrow that some CPU runs out of ports.
pub fn plan(
    model: &RssModel,
    template: &FlowTuple,
    flows: usize,
    range: PortRange,
) -> Result<FlowPlan, PlanError> {
    model.hashed(template.flow_type())?;
    let solver = PortSolver::new(model, template);
    let by_cpu = solver.ports_by_cpu(range);
    let available: usize = by_cpu.values().map(Vec::len).sum();
    if available == 0 {
        return Err(PlanError::NoPorts { range });
    }
    if flows > available {
        return Err(PlanError::TooManyFlows {
            flows,
            range,
            available,
        });
    }
    // (ports of the CPU, how many are used); BTreeMap order is CPU order.
    let mut slots: Vec<(&Vec<u16>, usize)> = by_cpu.values().map(|ports| (ports, 0)).collect();
    let mut planned = Vec::with_capacity(flows);
    for _ in 0..flows {
        let slot = slots
            .iter_mut()
            .filter(|(ports, used)| *used < ports.len())
            .min_by_key(|(_, used)| *used)
            .ok_or(PlanError::NoPorts { range })?;
        let port = slot.0[slot.1];
        slot.1 += 1;
        planned.push(PlannedFlow {
            port,
            landing: solver.landing(port),
        });
    }
    Ok(FlowPlan { flows: planned })
}
