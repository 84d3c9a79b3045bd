//! Builds the binder's steering tables (see [`crate::binder`]) from the RSS
//! model: what the sender agent writes into the maps.

use std::{collections::BTreeSet, net::IpAddr};

use thiserror::Error;

use crate::{
    binder::{
        ENTRIES_PER_SLOT, FAMILY_INET, FAMILY_INET6, MAX_SLOTS, MAX_VALUES, PORTS_PER_VALUE,
        SlotEntries, SteerTable, ValuePorts,
    },
    rss::{FlowTuple, InputXfrm, RssModel, TupleError},
    solver::{IndexMap, PortHash, PortRange, PortSolver},
};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SteeringError {
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error(
        "the receiver's RSS is not linear in the destination port ({reason}), so SRAP \
         steers named ports only: give --port for each port the workload uses"
    )]
    NeedsPort { reason: String },
    #[error("no source port in {range} lands on any receiver CPU")]
    NoPorts { range: PortRange },
}

/// Which destination ports a table serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every destination port (the linear decomposition).
    AnyPort,
    /// One destination port.
    Port(u16),
}

/// One steering table with its slots and value lists, ready for the maps.
#[derive(Debug, Clone)]
pub struct SteeringTable {
    pub scope: Scope,
    pub table: SteerTable,
    /// One per slot; `slots[s].cpu` is the receiver CPU of slot `s`.
    pub slots: Vec<SlotEntries>,
    /// Indexed by value; values past the end have no ports.
    pub values: Vec<ValuePorts>,
    /// Receiver CPUs beyond [`MAX_SLOTS`] that were left out.
    pub cpus_left_out: usize,
}

/// The kernel's `user_ip4`/`user_ip6` words for an address.
pub fn addr_words(ip: IpAddr) -> (u32, [u32; 4]) {
    match ip {
        IpAddr::V4(v4) => (FAMILY_INET, [u32::from_ne_bytes(v4.octets()), 0, 0, 0]),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let word = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            (FAMILY_INET6, [word(0), word(4), word(8), word(12)])
        }
    }
}

/// Why the index is not linear in both ports, if it is not.
fn nonlinear_reason(model: &RssModel) -> Option<String> {
    match model.index_bits() {
        None => Some(format!(
            "its indirection table has {} entries, not a power of two",
            model.indir().len()
        )),
        Some(bits) if (1u32 << bits) > MAX_VALUES => Some(format!(
            "its indirection table has {} entries; SRAP's any-port tables hold {MAX_VALUES}",
            model.indir().len()
        )),
        Some(_) if model.xfrm() == InputXfrm::SymOrXor => {
            Some("input transform sym-or-xor ORs the two ports".into())
        }
        Some(_) => None,
    }
}

impl SteeringTable {
    /// Builds the table for flows from `src` to `dst` (to `dport`, or to any
    /// port when `dport` is `None` and the model allows it).
    pub fn build(
        model: &RssModel,
        src: IpAddr,
        dst: IpAddr,
        dport: Option<u16>,
        range: PortRange,
    ) -> Result<Self, SteeringError> {
        let template = FlowTuple::new(src, 0, dst, dport.unwrap_or(0))?;
        let mut built = match (nonlinear_reason(model), dport) {
            (None, _) => Self::any_port(model, &template, range)?,
            (Some(_), Some(port)) => Self::one_port(model, &template, port, range)?,
            (Some(reason), None) => return Err(SteeringError::NeedsPort { reason }),
        };
        built.table.src_addr = addr_words(src).1;
        built.table.src_addr6 = addr_words(match src {
            IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
            v6 @ IpAddr::V6(_) => v6,
        })
        .1;
        Ok(built)
    }

    fn any_port(
        model: &RssModel,
        template: &FlowTuple,
        range: PortRange,
    ) -> Result<Self, SteeringError> {
        let bits = model.index_bits().unwrap_or(0);
        let mask = (1u32 << bits) - 1;
        let sport = PortHash::new(model, &template.with_dport(0));
        let dport = PortHash::from_fn(|port| model.hash(&template.with_sport(0).with_dport(port)));
        let index_map = IndexMap::new(&sport, bits);
        let base = sport.base() & mask;
        let values = (0..=mask)
            .map(|value| {
                let mut ports = index_map.ports_for(value ^ base);
                ports.retain(|port| range.contains(*port));
                ports.sort_unstable();
                value_ports(&ports)
            })
            .collect();
        let (low, high) = dport.byte_tables();
        let mut table = SteerTable {
            base,
            dport_low: low.map(|v| v & mask),
            dport_high: high.map(|v| v & mask),
            ..SteerTable::default()
        };
        let (slots, cpus_left_out) = slots_by_cpu(model, |cpu| {
            (0..model.indir().len() as u32)
                .filter(|entry| model.queue_cpu()[model.indir()[*entry as usize] as usize] == cpu)
                .collect()
        });
        table.slots = slots.len() as u32;
        Ok(Self {
            scope: Scope::AnyPort,
            table,
            slots,
            values,
            cpus_left_out,
        })
    }

    fn one_port(
        model: &RssModel,
        template: &FlowTuple,
        dport: u16,
        range: PortRange,
    ) -> Result<Self, SteeringError> {
        let by_cpu = PortSolver::new(model, &template.with_dport(dport)).ports_by_cpu(range);
        if by_cpu.is_empty() {
            return Err(SteeringError::NoPorts { range });
        }
        // Slot s has the single entry s, and value s lists its CPU's ports.
        let mut next_slot = 0u32..;
        let (slots, cpus_left_out) =
            slots_by_cpu(model, |_| next_slot.next().into_iter().collect());
        let values = slots
            .iter()
            .map(|slot| value_ports(by_cpu.get(&slot.cpu).map_or(&[][..], Vec::as_slice)))
            .collect();
        let table = SteerTable {
            slots: slots.len() as u32,
            ..SteerTable::default()
        };
        Ok(Self {
            scope: Scope::Port(dport),
            table,
            slots,
            values,
            cpus_left_out,
        })
    }

    /// Every source port the table may bind: what to reserve from the kernel.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.values
            .iter()
            .flat_map(|v| v.ports[..v.count as usize].iter().copied())
            .collect()
    }

    /// The port the hook binds for slot `slot`, its entry choice and port
    /// choice, to `dport` — the hook's own steps, for tests and reports.
    pub fn port_for(
        &self,
        slot: usize,
        entry_choice: usize,
        port_choice: usize,
        dport: u16,
    ) -> Option<u16> {
        let entries = self.slots.get(slot)?;
        if entries.count == 0 {
            return None;
        }
        let entry = entries.entries[entry_choice % entries.count as usize];
        let value = self
            .values
            .get(self.table.value_for(entry, dport) as usize)?;
        (value.count > 0).then(|| value.ports[port_choice % value.count as usize])
    }
}

fn value_ports(ports: &[u16]) -> ValuePorts {
    let mut value = ValuePorts::default();
    for (slot, port) in value.ports.iter_mut().zip(ports) {
        *slot = *port;
    }
    value.count = ports.len().min(PORTS_PER_VALUE) as u32;
    value
}

/// One slot per reachable receiver CPU (ascending, at most [`MAX_SLOTS`]),
/// with the entries `entries_of(cpu)` names.
fn slots_by_cpu(
    model: &RssModel,
    mut entries_of: impl FnMut(u32) -> Vec<u32>,
) -> (Vec<SlotEntries>, usize) {
    let cpus = model.reachable_cpus();
    let left_out = cpus.len().saturating_sub(MAX_SLOTS as usize);
    let slots = cpus
        .into_iter()
        .take(MAX_SLOTS as usize)
        .map(|cpu| {
            let entries = entries_of(cpu);
            let mut slot = SlotEntries {
                cpu,
                count: entries.len().min(ENTRIES_PER_SLOT) as u32,
                ..SlotEntries::default()
            };
            for (dst, entry) in slot.entries.iter_mut().zip(entries) {
                *dst = entry;
            }
            slot
        })
        .collect();
    (slots, left_out)
}
