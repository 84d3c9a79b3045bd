//! Builds the binder's steering tables (see [`crate::binder`]) from the RSS
//! model: what the sender agent writes into the maps.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use thiserror::Error;

use crate::{
    binder::{
        ENTRIES_PER_SLOT, LayoutRow, MAX_SLOTS, MAX_VALUES, PORTS_PER_VALUE, SlotEntries, TableRow,
        ValuePorts,
    },
    family::Family,
    rss::{FlowTuple, InputXfrm, RssModel, TupleError},
    solver::{IndexMap, PortHash, PortRange, PortSolver},
};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SteeringError {
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error(
        "the receiver's RSS is not linear in the destination port ({reason}), so SRAP \
         steers named destination ports only: name each port the workload uses"
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

/// What a receiver's RSS configuration alone decides (see
/// [`crate::binder`]): built once per configuration and address family
/// and shared by every table toward such a receiver, or, where the RSS is
/// not linear, once per (source, destination, port).
#[derive(Debug, Clone)]
pub struct LayoutPlan {
    pub scope: Scope,
    /// The map row, without its pool offsets (the plan assigns those).
    pub layout: LayoutRow,
    /// One per slot; `slots[s].cpu` is the receiver CPU of slot `s`.
    pub slots: Vec<SlotEntries>,
    /// Indexed by value; values past the end have no ports.
    pub values: Vec<ValuePorts>,
    /// Receiver CPUs beyond [`MAX_SLOTS`] that were left out.
    pub cpus_left_out: usize,
}

/// One steering table: a source address toward a receiver address, with
/// its layout.
#[derive(Debug, Clone)]
pub struct TablePlan {
    /// The source address the table binds.
    pub source: IpAddr,
    /// The map row; its `layout` index is assigned by the plan.
    pub table: TableRow,
    pub layout: Arc<LayoutPlan>,
}

/// The kernel's `user_ip4`/`user_ip6` words for an address.
pub fn addr_words(ip: IpAddr) -> (u32, [u32; 4]) {
    match ip {
        IpAddr::V4(v4) => (
            Family::Inet.as_u32(),
            [u32::from_ne_bytes(v4.octets()), 0, 0, 0],
        ),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let word = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            (
                Family::Inet6.as_u32(),
                [word(0), word(4), word(8), word(12)],
            )
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

/// The unspecified address of `ip`'s family: a template whose hash is the
/// ports' part alone.
fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

impl LayoutPlan {
    /// The layout every table toward a receiver with `model` shares, for
    /// addresses of `family_of`'s family, or `None` when the model is not
    /// linear in the ports (then tables are built per port, see
    /// [`TablePlan::build`]).
    pub fn any_port(
        model: &RssModel,
        family_of: IpAddr,
        range: PortRange,
    ) -> Result<Option<Self>, SteeringError> {
        if nonlinear_reason(model).is_some() {
            return Ok(None);
        }
        let any = unspecified_like(family_of);
        let template = FlowTuple::new(any, 0, any, 0)?;
        let bits = model.index_bits().unwrap_or(0);
        let mask = (1u32 << bits) - 1;
        let sport = PortHash::new(model, &template);
        let dport = PortHash::from_fn(|port| model.hash(&template.with_dport(port)));
        let index_map = IndexMap::new(&sport, bits);
        let values = (0..=mask)
            .map(|value| {
                let mut ports = index_map.ports_for(value ^ (sport.base() & mask));
                ports.retain(|port| range.contains(*port));
                ports.sort_unstable();
                value_ports(&ports)
            })
            .collect::<Vec<_>>();
        let (low, high) = dport.byte_tables();
        let (slots, cpus_left_out) = slots_by_cpu(model, |cpu| {
            (0..model.indir().len() as u32)
                .filter(|entry| model.queue_cpu()[model.indir()[*entry as usize] as usize] == cpu)
                .collect()
        });
        let layout = LayoutRow {
            slots: slots.len() as u32,
            values: values.len() as u32,
            // Masked to k ≤ 11 bits: fits a u16.
            dport_low: low.map(|v| (v & mask) as u16),
            dport_high: high.map(|v| (v & mask) as u16),
            ..LayoutRow::default()
        };
        Ok(Some(Self {
            scope: Scope::AnyPort,
            layout,
            slots,
            values,
            cpus_left_out,
        }))
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
        let values: Vec<_> = slots
            .iter()
            .map(|slot| value_ports(by_cpu.get(&slot.cpu).map_or(&[][..], Vec::as_slice)))
            .collect();
        let layout = LayoutRow {
            slots: slots.len() as u32,
            values: values.len() as u32,
            ..LayoutRow::default()
        };
        Ok(Self {
            scope: Scope::Port(dport),
            layout,
            slots,
            values,
            cpus_left_out,
        })
    }

    /// Every source port the layout may bind: what to reserve.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.values
            .iter()
            .flat_map(|v| v.ports[..v.count as usize].iter().copied())
            .collect()
    }
}

impl TablePlan {
    /// Builds the table for flows from `src` to `dst` (to `dport`, or to any
    /// port when `dport` is `None` and the model allows it), with a layout
    /// of its own. A linear model with a `dport` still gets an any-port
    /// table (one table serves every port).
    pub fn build(
        model: &RssModel,
        src: IpAddr,
        dst: IpAddr,
        dport: Option<u16>,
        range: PortRange,
    ) -> Result<Self, SteeringError> {
        match (LayoutPlan::any_port(model, dst, range)?, dport) {
            (Some(layout), _) => Self::with_layout(model, Arc::new(layout), src, dst),
            (None, Some(dport)) => Self::one_port(model, src, dst, dport, range),
            (None, None) => Err(SteeringError::NeedsPort {
                reason: nonlinear_reason(model).unwrap_or_default(),
            }),
        }
    }

    /// The table from `src` to `dst` on a shared any-port `layout`.
    pub fn with_layout(
        model: &RssModel,
        layout: Arc<LayoutPlan>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<Self, SteeringError> {
        let template = FlowTuple::new(src, 0, dst, 0)?;
        let mask = layout.values.len().saturating_sub(1) as u32;
        let table = TableRow {
            base: model.hash(&template) & mask,
            ..source_words(src)
        };
        Ok(Self {
            source: src,
            table,
            layout,
        })
    }

    /// A table (with a layout of its own) for one destination port of a
    /// receiver whose RSS is not linear in the ports.
    pub fn one_port(
        model: &RssModel,
        src: IpAddr,
        dst: IpAddr,
        dport: u16,
        range: PortRange,
    ) -> Result<Self, SteeringError> {
        let template = FlowTuple::new(src, 0, dst, dport)?;
        let layout = LayoutPlan::one_port(model, &template, dport, range)?;
        Ok(Self {
            source: src,
            table: source_words(src),
            layout: Arc::new(layout),
        })
    }

    /// Which destination ports the table serves (its layout's).
    pub fn scope(&self) -> Scope {
        self.layout.scope
    }

    /// The slots of the table's layout.
    pub fn slots(&self) -> &[SlotEntries] {
        &self.layout.slots
    }

    /// Every source port the table may bind.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.layout.ports()
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
        let entries = self.layout.slots.get(slot)?;
        if entries.count == 0 {
            return None;
        }
        let entry = entries.entries[entry_choice % entries.count as usize];
        let value = self
            .layout
            .layout
            .value_for(self.table.base, u32::from(entry), dport);
        let value = self.layout.values.get(value as usize)?;
        (value.count > 0).then(|| value.ports[port_choice % value.count as usize])
    }
}

/// A table row with `src`'s address words (both forms) and nothing else.
fn source_words(src: IpAddr) -> TableRow {
    let src6 = match src {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 @ IpAddr::V6(_) => v6,
    };
    TableRow {
        src_addr: addr_words(src).1,
        src_addr6: addr_words(src6).1,
        ..TableRow::default()
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
                // Indirection tables have at most 65 536 entries.
                *dst = entry as u16;
            }
            slot
        })
        .collect();
    (slots, left_out)
}
