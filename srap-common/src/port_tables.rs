//! Builds the binder's port tables (see [`crate::binder`]) from the RSS
//! model: what the sender agent writes into the maps.
//!
//! A table is built for one protocol's flows, which the caller names: the
//! NIC hashes each protocol with fields of its own, so the ports that land
//! on a CPU differ by protocol, and the hook looks its destination up under
//! the connecting socket's protocol (`crate::binder::DestKey`).

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use thiserror::Error;

use crate::{
    binder::{CosetRow, LISTED_PORTS_PER_SLOT, LayoutRow, MAX_SLOTS, SlotRow, TableRow, slot_turn},
    bond::MemberPlan,
    family::Family,
    port_range::PortRange,
    protocol::{FlowType, Protocol},
    rss::{FlowTuple, RssModel, TupleError, Unhashed},
    solver::{IndexMap, PortHash, PortSolver},
};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PortTableError {
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error(transparent)]
    Unhashed(#[from] Unhashed),
    #[error(
        "the receiver's RSS is not linear in the destination port ({reason}), so SRAP \
         steers named destination ports only: name each port the workload uses"
    )]
    NeedsPort { reason: String },
    #[error("no source port in {range} lands on any receiver CPU")]
    NoPorts { range: PortRange },
    #[error(
        "{members} bond members add {member_bits} bits to the receiver's {receiver_bits} \
         indirection bits: more than a port's 16"
    )]
    MembersTooWide {
        members: u32,
        member_bits: u32,
        receiver_bits: u32,
    },
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
/// [`crate::binder`]): built once per configuration, protocol and address
/// family and shared by every table toward such a receiver, or, where the
/// RSS is not linear, once per (source, destination, port).
#[derive(Debug, Clone)]
pub struct LayoutPlan {
    /// The protocol whose flows its ports are placed for: the NIC hashes
    /// its flows with that protocol's fields.
    pub protocol: Protocol,
    pub scope: Scope,
    /// The map row, without its pool offsets (the plan assigns those).
    pub layout: LayoutRow,
    /// One per slot; `slots[s].cpu` is the receiver CPU of slot `s`.
    pub slots: Vec<SlotRow>,
    /// Every slot's entries, slot after slot.
    pub entries: Vec<u32>,
    /// Indexed by value.
    pub cosets: Vec<CosetRow>,
    /// Receiver CPUs beyond [`MAX_SLOTS`] that were left out.
    pub cpus_left_out: usize,
    /// The bond members the ports are balanced over: a value's bits above
    /// the receiver's indirection bits are its member index, and slot `s`'s
    /// entries all ask for member [`MemberPlan::member_of_slot`]. `None`:
    /// the receiver's CPU alone.
    pub members: Option<MemberPlan>,
}

/// One port table: a source address toward a receiver address, with
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
        Some(bits) if bits > 16 => Some(format!(
            "its indirection table has {} entries; a port has 16 bits",
            model.indir().len()
        )),
        Some(_) => model
            .xfrm()
            .not_affine_because()
            .map(|why| format!("input transform {} {why}", model.xfrm())),
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

/// Refuses `protocol`'s flows toward `addr`'s family when the model does
/// not say which fields its NIC hashes for them: their ports would be
/// placed by a guess.
fn check_hashed(model: &RssModel, protocol: Protocol, addr: IpAddr) -> Result<(), Unhashed> {
    model.hashed(FlowType::new(protocol, Family::of(&addr)))?;
    Ok(())
}

impl LayoutPlan {
    /// The layout every table toward a receiver with `model` shares, for
    /// `protocol`'s flows between addresses of `family_of`'s family, or
    /// `None` when the model is not linear in the ports (then tables are
    /// built per port, see [`TablePlan::build`]).
    pub fn any_port(
        model: &RssModel,
        protocol: Protocol,
        family_of: IpAddr,
        range: PortRange,
    ) -> Result<Option<Self>, PortTableError> {
        Self::any_port_over(model, protocol, family_of, range, None)
    }

    /// [`LayoutPlan::any_port`], each slot's ports also leaving on one
    /// member of a bond of `members` (when given): the member's index bits
    /// stacked above the receiver's, one coset per (entry, member) value.
    pub fn any_port_over(
        model: &RssModel,
        protocol: Protocol,
        family_of: IpAddr,
        range: PortRange,
        members: Option<MemberPlan>,
    ) -> Result<Option<Self>, PortTableError> {
        check_hashed(model, protocol, family_of)?;
        if nonlinear_reason(model).is_some() {
            return Ok(None);
        }
        let index = ValueBits::new(model, members)?;
        let any = unspecified_like(family_of);
        let template = FlowTuple::of(protocol, any, 0, any, 0)?;
        let sport = PortHash::from_fn(|port| index.value(&template.with_sport(port)));
        let dport = PortHash::from_fn(|port| index.value(&template.with_dport(port)));
        let mut plan = Self::linear(protocol, &sport, &index, (range, Scope::AnyPort));
        let mask = plan.layout.values - 1;
        let (low, high) = dport.byte_tables();
        // Masked to k ≤ 16 bits: fits a u16.
        plan.layout.dport_low = low.map(|v| (v & mask) as u16);
        plan.layout.dport_high = high.map(|v| (v & mask) as u16);
        Ok(Some(plan))
    }

    /// The layout of an index affine in the source port, `sport` (with a
    /// power-of-two table) of `protocol`'s flows: the slots' entries, and
    /// for each value of the port's part its coset, least port first, cut
    /// to `range`.
    fn linear(
        protocol: Protocol,
        sport: &PortHash,
        index: &ValueBits<'_>,
        (range, scope): (PortRange, Scope),
    ) -> Self {
        let model = index.model;
        let bits = index.bits();
        let map = IndexMap::new(sport, bits);
        let span = map.kernel();
        let mask = (1u32 << bits) - 1;
        let cosets = (0..=mask)
            .map(
                |value| match map.least_port(value ^ (sport.base() & mask)) {
                    Some(least) => {
                        let (first, count) = span.within(least, range);
                        CosetRow {
                            port0: u32::from(least),
                            first,
                            count,
                        }
                    }
                    None => CosetRow::default(),
                },
            )
            .collect();
        let mut slot = 0;
        let (slots, entries, cpus_left_out) = slots_by_cpu(model, |cpu| {
            let member = index.member_bits_of_slot(slot);
            slot += 1;
            (0..model.indir().len() as u32)
                .filter(|entry| model.queue_cpu()[model.indir()[*entry as usize] as usize] == cpu)
                .map(|entry| entry | member)
                .collect()
        });
        let (span_low, span_high) = span.byte_tables();
        let layout = LayoutRow {
            slots: slots.len() as u32,
            values: mask + 1,
            span_low,
            span_high,
            ..LayoutRow::default()
        };
        Self {
            protocol,
            scope,
            layout,
            slots,
            entries,
            cosets,
            cpus_left_out,
            members: index.members,
        }
    }

    /// A layout for one destination port of a receiver whose index is not
    /// linear in both ports, and the table `base` that goes with it. With a
    /// power-of-two table the index is still affine in the source port;
    /// otherwise the ports are listed, up to [`LISTED_PORTS_PER_SLOT`] per
    /// slot, spread over the range.
    fn one_port(
        model: &RssModel,
        template: &FlowTuple,
        dport: u16,
        range: PortRange,
        members: Option<MemberPlan>,
    ) -> Result<(Self, u32), PortTableError> {
        let flow = template.with_dport(dport);
        if let Some(bits) = model.index_bits()
            && members.is_none()
        {
            let sport = PortHash::new(model, &flow);
            let index = ValueBits::new(model, None)?;
            let scope = Scope::Port(dport);
            let plan = Self::linear(flow.protocol(), &sport, &index, (range, scope));
            if plan.cosets.iter().all(|c| c.count == 0) {
                return Err(PortTableError::NoPorts { range });
            }
            return Ok((plan, sport.base() & ((1u32 << bits) - 1)));
        }
        let by_cpu = PortSolver::new(model, &flow).ports_by_cpu(range);
        if by_cpu.is_empty() {
            return Err(PortTableError::NoPorts { range });
        }
        // Value v is the v-th listed port, a coset of one; a slot's entries
        // are the values of its ports (with a bond to balance, those that
        // leave on the slot's member).
        let mut cosets = Vec::new();
        let mut slot = 0;
        let (slots, entries, cpus_left_out) = slots_by_cpu(model, |cpu| {
            let all = by_cpu.get(&cpu).map_or(&[][..], Vec::as_slice);
            let ports: Vec<u16> = match members {
                Some(plan) => {
                    let member = plan.member_of_slot(slot);
                    all.iter()
                        .copied()
                        .filter(|port| plan.index(&flow.with_sport(*port)) == member)
                        .collect()
                }
                None => all.to_vec(),
            };
            slot += 1;
            let step = ports.len().div_ceil(LISTED_PORTS_PER_SLOT).max(1);
            ports
                .iter()
                .step_by(step)
                .map(|port| {
                    cosets.push(CosetRow {
                        port0: u32::from(*port),
                        first: 0,
                        count: 1,
                    });
                    cosets.len() as u32 - 1
                })
                .collect()
        });
        let layout = LayoutRow {
            slots: slots.len() as u32,
            values: cosets.len() as u32,
            ..LayoutRow::default()
        };
        let plan = Self {
            protocol: flow.protocol(),
            scope: Scope::Port(dport),
            layout,
            slots,
            entries,
            cosets,
            cpus_left_out,
            members,
        };
        Ok((plan, 0))
    }

    /// Source ports of the range the layout may bind (each port has one
    /// value, so this counts every port of the range, or the listed ones).
    pub fn port_count(&self) -> u64 {
        self.cosets.iter().map(|c| u64::from(c.count)).sum()
    }

    /// This layout with one slot per CPU of `cpus` (at most [`MAX_SLOTS`],
    /// in that order): a CPU its NIC's queues reach keeps its entries, and
    /// one they do not takes the entries of one they do, in turn. Several
    /// NICs of one host share one occupancy row, whose slot `s` must be the
    /// same CPU in every NIC's layout: each is re-slotted onto the union of
    /// their CPUs, and a flow whose claim fell on a CPU its NIC does not
    /// serve still gets a port of that NIC, on a CPU the NIC does serve.
    /// Not for a layout balancing bond members (their bits follow the slot).
    pub fn reslotted(&self, cpus: &[u32]) -> Self {
        let mut entries = Vec::new();
        let mut lent = 0;
        let slots = cpus
            .iter()
            .take(MAX_SLOTS as usize)
            .map(|&cpu| {
                let own = self.slots.iter().position(|s| s.cpu == cpu);
                let from = own.or_else(|| {
                    let reached = self.slots.len();
                    lent += 1;
                    (reached > 0).then(|| (lent - 1) % reached)
                });
                let mine = from.map_or(&[][..], |slot| self.entries_of(slot));
                let row = SlotRow {
                    cpu,
                    first: entries.len() as u32,
                    count: mine.len() as u32,
                };
                entries.extend_from_slice(mine);
                row
            })
            .collect::<Vec<_>>();
        Self {
            layout: LayoutRow {
                slots: slots.len() as u32,
                ..self.layout
            },
            slots,
            entries,
            cpus_left_out: cpus.len().saturating_sub(MAX_SLOTS as usize),
            ..self.clone()
        }
    }

    /// The entries of slot `slot`.
    pub fn entries_of(&self, slot: usize) -> &[u32] {
        self.slots.get(slot).map_or(&[], |s| {
            let first = s.first as usize;
            self.entries
                .get(first..first + s.count as usize)
                .unwrap_or(&[])
        })
    }
}

impl TablePlan {
    /// Builds the table for `protocol`'s flows from `src` to `dst` (to
    /// `dport`, or to any port when `dport` is `None` and the model allows
    /// it), with a layout of its own. A linear model with a `dport` still
    /// gets an any-port table (one table serves every port).
    pub fn build(
        model: &RssModel,
        protocol: Protocol,
        (src, dst): (IpAddr, IpAddr),
        dport: Option<u16>,
        range: PortRange,
    ) -> Result<Self, PortTableError> {
        match (LayoutPlan::any_port(model, protocol, dst, range)?, dport) {
            (Some(layout), _) => Self::with_layout(model, Arc::new(layout), src, dst),
            (None, Some(dport)) => {
                Self::one_port_over(model, protocol, (src, dst), dport, range, None)
            }
            (None, None) => Err(PortTableError::NeedsPort {
                reason: nonlinear_reason(model).unwrap_or_default(),
            }),
        }
    }

    /// The table from `src` to `dst` on a shared any-port `layout`, for
    /// the flows of the layout's protocol.
    pub fn with_layout(
        model: &RssModel,
        layout: Arc<LayoutPlan>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<Self, PortTableError> {
        check_hashed(model, layout.protocol, dst)?;
        let template = FlowTuple::of(layout.protocol, src, 0, dst, 0)?;
        let index = ValueBits::new(model, layout.members)?;
        let table = TableRow {
            base: index.value(&template),
            ..source_words(src)
        };
        Ok(Self {
            source: src,
            table,
            layout,
        })
    }

    /// A table (with a layout of its own) for `protocol`'s flows to one
    /// destination port of a receiver whose RSS is not linear in the ports.
    pub fn one_port(
        model: &RssModel,
        protocol: Protocol,
        (src, dst): (IpAddr, IpAddr),
        dport: u16,
        range: PortRange,
    ) -> Result<Self, PortTableError> {
        Self::one_port_over(model, protocol, (src, dst), dport, range, None)
    }

    /// [`TablePlan::one_port`] with each slot's ports listed among those
    /// that leave on its member of a bond of `members`: how a count that
    /// is not a power of two is balanced (the driver's modulo, per port).
    pub fn one_port_over(
        model: &RssModel,
        protocol: Protocol,
        (src, dst): (IpAddr, IpAddr),
        dport: u16,
        range: PortRange,
        members: Option<MemberPlan>,
    ) -> Result<Self, PortTableError> {
        check_hashed(model, protocol, dst)?;
        let template = FlowTuple::of(protocol, src, 0, dst, dport)?;
        let (layout, base) = LayoutPlan::one_port(model, &template, dport, range, members)?;
        Ok(Self {
            source: src,
            table: TableRow {
                base,
                ..source_words(src)
            },
            layout: Arc::new(layout),
        })
    }

    /// Which destination ports the table serves (its layout's).
    pub fn scope(&self) -> Scope {
        self.layout.scope
    }

    /// The slots of the table's layout.
    pub fn slots(&self) -> &[SlotRow] {
        &self.layout.slots
    }

    /// The port the hook binds toward `dport` on `slot`'s `turn`-th visit:
    /// the hook's own steps, for tests and reports.
    pub fn port_for(&self, slot: usize, turn: u32, dport: u16) -> Option<u16> {
        let entries = self.layout.entries_of(slot);
        if entries.is_empty() {
            return None;
        }
        let (position, round) = slot_turn(turn, entries.len() as u32);
        let entry = entries[position as usize];
        let row = &self.layout.layout;
        let value = row.value_for(self.table.base, entry, dport);
        row.port_of(self.layout.cosets.get(value as usize)?, round)
    }

    /// Every port `slot`'s rotation visits toward `dport`, ascending.
    pub fn slot_ports(&self, slot: usize, dport: u16) -> BTreeSet<u16> {
        let row = &self.layout.layout;
        self.layout
            .entries_of(slot)
            .iter()
            .filter_map(|entry| {
                let value = row.value_for(self.table.base, *entry, dport);
                self.layout.cosets.get(value as usize)
            })
            .flat_map(|coset| (0..coset.count).filter_map(|round| row.port_of(coset, round)))
            .collect()
    }
}

/// What a port's value is made of: the receiver's indirection bits (the
/// low `receiver_bits` of its hash), and above them, with a bond to
/// balance, the member index.
struct ValueBits<'m> {
    model: &'m RssModel,
    receiver_bits: u32,
    members: Option<MemberPlan>,
}

impl<'m> ValueBits<'m> {
    /// The value bits of `model` and, when their count is a power of two,
    /// `members` (another count adds no bits: see [`MemberPlan`]).
    fn new(model: &'m RssModel, members: Option<MemberPlan>) -> Result<Self, PortTableError> {
        let receiver_bits = model.index_bits().unwrap_or(0);
        let members = members.filter(|m| m.linear_bits().is_some());
        if let Some(plan) = members
            && let Some(bits) = plan.linear_bits()
            && receiver_bits + bits > 16
        {
            return Err(PortTableError::MembersTooWide {
                members: plan.members(),
                member_bits: bits,
                receiver_bits,
            });
        }
        Ok(Self {
            model,
            receiver_bits,
            members,
        })
    }

    fn bits(&self) -> u32 {
        self.receiver_bits + self.members.and_then(MemberPlan::linear_bits).unwrap_or(0)
    }

    /// The value of `flow`: its indirection entry, and its member index
    /// above it.
    fn value(&self, flow: &FlowTuple) -> u32 {
        let entry = self.model.hash(flow) & ((1u32 << self.receiver_bits) - 1);
        let member = self
            .members
            .map_or(0, |plan| plan.index(flow) << self.receiver_bits);
        entry | member
    }

    /// The member bits slot `slot`'s entries carry.
    fn member_bits_of_slot(&self, slot: usize) -> u32 {
        self.members
            .map_or(0, |plan| plan.member_of_slot(slot) << self.receiver_bits)
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

/// One slot per reachable receiver CPU (ascending, at most [`MAX_SLOTS`]),
/// with the entries `entries_of(cpu)` names, laid out slot after slot.
fn slots_by_cpu(
    model: &RssModel,
    mut entries_of: impl FnMut(u32) -> Vec<u32>,
) -> (Vec<SlotRow>, Vec<u32>, usize) {
    let cpus = model.reachable_cpus();
    let left_out = cpus.len().saturating_sub(MAX_SLOTS as usize);
    let mut entries = Vec::new();
    let slots = cpus
        .into_iter()
        .take(MAX_SLOTS as usize)
        .map(|cpu| {
            let mine = entries_of(cpu);
            let slot = SlotRow {
                cpu,
                first: entries.len() as u32,
                count: mine.len() as u32,
            };
            entries.extend(mine);
            slot
        })
        .collect();
    (slots, entries, left_out)
}
