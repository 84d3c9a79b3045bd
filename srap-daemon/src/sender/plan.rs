//! What goes into the binder's maps: for each receiver address, one
//! port table per local source address (the route's, and every other
//! address of the family an application may bind), their shared layouts,
//! and the destinations that point at them.
//!
//! Each receiver is planned with the RSS model of its own host (one sender
//! may follow several receiver agents, each with its own NIC); receivers
//! whose model is the same `Arc` share their layouts. Every table is for
//! one protocol's flows, and each source address gets one per protocol the
//! binder steers ([`STEERED`]): the NIC hashes each protocol with fields of
//! its own, and the hook looks a connect up under its socket's protocol.
//!
//! With both ends planned ([`Plan::build_both`]) every table toward a
//! receiver has a twin built from this host's own NIC (a model facing
//! [`End::Local`]), and each (receiver layout, local layout) pair a joint
//! row; this host's CPUs are one occupancy row, [`LOCAL_ROW`], shared by
//! the flows toward every receiver. With `--steer local` alone the
//! targets' models face the local end and their row is [`LOCAL_ROW`].
//!
//! Its inputs are types of their own ([`PlanInputs`]): the receivers
//! ([`Target`]: each one's row and its host's model), this host toward
//! them ([`LocalHost`], read by `super::local`), this host's own NIC when
//! both ends are planned, and the ports. Pure computation on them;
//! `super::maps` writes the result.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use srap_common::{
    binder::{
        BinderSizes, DestKey, DestValue, FIRST_RECEIVER_ROW, LOCAL_ROW, MAX_RECEIVERS, STEERED,
        SizeSetting,
    },
    bond::MemberPlan,
    ends::JointTables,
    family::Family,
    local_nics::NicTables,
    port_range::PortRange,
    port_tables::{LayoutPlan, PortTableError, TablePlan, addr_words},
    protocol::Protocol,
    receiver_nics::SpreadRow,
    rss::{End, RssModel},
};

use super::{
    error::SenderError,
    local::{
        LocalHost, ReceiverSources,
        bond::EgressBond,
        nic_choice,
        nics::LocalNics,
        source_models::{LocalModels, SourceModel},
    },
    target::Target,
};

/// One receiver as the agent steers it.
#[derive(Debug, Clone)]
pub struct ReceiverPlan {
    /// Receiver index: its CPU occupancy row in the binder.
    pub index: u32,
    pub receiver: IpAddr,
    /// The address flows to it leave from when the application binds none.
    pub source: IpAddr,
    /// Indexes into [`Plan::tables`], the route source's first.
    pub tables: Vec<usize>,
    /// CPU slots of the receiver (its layouts all have as many).
    pub slots: u32,
    /// The bond the route toward it leaves by, as planned for.
    pub bond: Option<EgressBond>,
}

/// Everything the maps will hold.
#[derive(Debug, Clone)]
pub struct Plan {
    pub receivers: Vec<ReceiverPlan>,
    /// Layout `l` of the binder, with its pool rows assigned.
    pub layouts: Vec<Arc<LayoutPlan>>,
    /// Table `t` of the binder is `tables[t]` (its layout index assigned).
    pub tables: Vec<TablePlan>,
    pub dests: Vec<(DestKey, DestValue)>,
    /// Joint row `j` of the binder (both ends planned), its solutions'
    /// pool rows assigned.
    pub joints: Vec<Arc<JointTables>>,
    /// This host's CPUs as one more receiver row ([`LOCAL_ROW`]), when both
    /// ends are planned: its slots are the local layout's.
    pub local: Option<ReceiverPlan>,
    /// This host as the plan was made for it: a new snapshot that differs
    /// calls for a re-plan.
    pub host: LocalHost,
    /// What the connect hook chooses this host's NIC by
    /// (`--local-nics numa|balance`, `super::local::nic_choice`): for each
    /// destination's route table, its tables under the NICs that reach it.
    pub nic_tables: Vec<(u32, NicTables)>,
    /// The NIC of each NUMA node ([`srap_common::local_nics::NO_NIC`]:
    /// none).
    pub node_nics: Vec<u32>,
    /// The models of this host's end (`--steer local|both`): each source
    /// address's NIC's own ([`LocalModels`]).
    pub local_models: Option<Arc<LocalModels>>,
    /// Which NIC's description each source address of this host's end was
    /// placed with, once each, in plan order.
    pub local_sources: Vec<SourceModel>,
    /// Under `--receiver-nics spread`, the addresses each asked
    /// destination's connects take in turn ([`super::spread::rows`]).
    pub spread: Vec<(DestKey, SpreadRow)>,
}

/// What a plan is made from, each input a type of its own: the receivers
/// (each one's binder row and the model of its host's NIC), this host
/// toward them, this host's own NIC when both ends are planned, and the
/// ports to plan.
#[derive(Debug, Clone)]
pub struct PlanInputs<'a> {
    /// The receivers' descriptions, each on its binder row.
    pub receivers: &'a [Target],
    /// This host toward the receivers, in the same order.
    pub host: LocalHost,
    /// This host's own NIC, a model facing [`End::Local`], when each flow
    /// is placed on both NICs (`--steer both`); `None`: the receivers'
    /// only.
    pub local_nic: Option<&'a Arc<RssModel>>,
    /// The NIC this host's own model (`local_nic`, or the targets' with
    /// `--steer local`) describes: the first `--local-iface`; `None` when
    /// a file does (`--local-rss`). Every other NIC of `host` with a
    /// description places its own addresses.
    pub primary_nic: Option<&'a str>,
    /// Destination ports to plan; empty: every port.
    pub ports: &'a [u16],
    /// The source ports the binder chooses from.
    pub range: PortRange,
}

/// One receiver to plan: its row in the binder, the RSS model of its host,
/// and where flows to it may come from.
#[derive(Debug, Clone)]
pub struct ReceiverInput {
    /// Its row in the binder's per-receiver maps (occupancy, grant): kept
    /// stable across re-plans so live flow counts stay with their receiver.
    pub index: u32,
    pub model: Arc<RssModel>,
    pub sources: ReceiverSources,
}

impl Plan {
    /// Builds the plan of `inputs`: one table per receiver and local source
    /// address, with this host's NIC's twin when both ends are planned.
    pub fn new(inputs: PlanInputs<'_>) -> Result<Self, SenderError> {
        let toward = &inputs.host.toward;
        if toward.len() != inputs.receivers.len() {
            return Err(SenderError::Input(format!(
                "this host was read toward {} receivers, the plan is for {}",
                toward.len(),
                inputs.receivers.len()
            )));
        }
        let receivers: Vec<ReceiverInput> = inputs
            .receivers
            .iter()
            .zip(toward)
            .map(|(target, sources)| ReceiverInput {
                index: target.index,
                model: target.model.clone(),
                sources: sources.clone(),
            })
            .collect();
        let primary = inputs
            .local_nic
            .cloned()
            .or_else(|| local_target(&receivers));
        let models = primary.map(|p| LocalModels::new(p, inputs.primary_nic, &inputs.host.nics));
        let local = LocalPlanning {
            models,
            nics: &inputs.host.nics,
            twins: inputs.local_nic.is_some(),
        };
        let mut plan = Self::build_on(&receivers, inputs.ports, inputs.range, local)?;
        // The NICs choose among the tables (`--local-nics numa|balance`):
        // each destination says which NICs reach it, and a plan keeps them
        // so that a NIC that changes calls for a new one.
        plan.host.nics = inputs.host.nics;
        plan.host.routing = inputs.host.routing;
        plan.choose_nics();
        Ok(plan)
    }

    /// Builds the plan for `receivers`, for every destination port (`ports`
    /// empty) or only `ports`.
    pub fn build(
        model: &RssModel,
        receivers: &[ReceiverSources],
        ports: &[u16],
        range: PortRange,
    ) -> Result<Self, SenderError> {
        let model = Arc::new(model.clone());
        let inputs: Vec<ReceiverInput> = receivers
            .iter()
            .enumerate()
            .map(|(index, sources)| ReceiverInput {
                index: FIRST_RECEIVER_ROW + index as u32,
                model: model.clone(),
                sources: sources.clone(),
            })
            .collect();
        Self::build_each(&inputs, ports, range)
    }

    /// Builds the plan for receivers that each have their own model and
    /// binder row.
    pub fn build_each(
        receivers: &[ReceiverInput],
        ports: &[u16],
        range: PortRange,
    ) -> Result<Self, SenderError> {
        Self::build_with(receivers, ports, range, None)
    }

    /// [`Plan::build_each`] with this host's own NIC planned too, `local`
    /// (a model facing [`End::Local`]): one port for both NICs.
    pub fn build_both(
        receivers: &[ReceiverInput],
        ports: &[u16],
        range: PortRange,
        local: &Arc<RssModel>,
    ) -> Result<Self, SenderError> {
        Self::build_with(receivers, ports, range, Some(local))
    }

    fn build_with(
        receivers: &[ReceiverInput],
        ports: &[u16],
        range: PortRange,
        local: Option<&Arc<RssModel>>,
    ) -> Result<Self, SenderError> {
        let nics = LocalNics::default();
        let primary = local.cloned().or_else(|| local_target(receivers));
        let planning = LocalPlanning {
            models: primary.map(LocalModels::single),
            nics: &nics,
            twins: local.is_some(),
        };
        Self::build_on(receivers, ports, range, planning)
    }

    /// The plan of `receivers`, this host's end placed as `local` says.
    fn build_on(
        receivers: &[ReceiverInput],
        ports: &[u16],
        range: PortRange,
        local: LocalPlanning<'_>,
    ) -> Result<Self, SenderError> {
        check_receivers(receivers)?;
        let ports: Vec<u16> = ports
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if ports.contains(&0) {
            return Err(SenderError::Input(
                "--port 0 is not a destination port; leave --port out to steer every port".into(),
            ));
        }
        let mut plan = Self {
            receivers: Vec::new(),
            layouts: Vec::new(),
            tables: Vec::new(),
            dests: Vec::new(),
            joints: Vec::new(),
            local: None,
            nic_tables: Vec::new(),
            node_nics: Vec::new(),
            local_models: local.models.map(Arc::new),
            local_sources: Vec::new(),
            spread: Vec::new(),
            host: LocalHost {
                toward: receivers.iter().map(|r| r.sources.clone()).collect(),
                nics: local.nics.clone(),
                ..LocalHost::default()
            },
        };
        let mut shared = SharedLayouts::default();
        let mut both = local.twins.then(|| LocalEnd { joints: Vec::new() });
        for input in receivers {
            plan.add_receiver(&mut shared, both.as_mut(), input, &ports, range)?;
        }
        plan.place_layouts();
        if let Some(both) = both {
            plan.place_joints(both);
        }
        Ok(plan)
    }

    /// The joints' solution rows, and this host's occupancy row.
    fn place_joints(&mut self, both: LocalEnd) {
        let mut base = 0u64;
        for (_, _, joint) in both.joints {
            let mut joint = (*joint).clone();
            joint.row.solution_base = base as u32;
            base += joint.solutions.len() as u64;
            self.joints.push(Arc::new(joint));
        }
        let first_local = self
            .dests
            .iter()
            .map(|(_, v)| v.local_table)
            .find(|t| *t != DestValue::NO_LOCAL);
        self.local = first_local.map(|t| ReceiverPlan {
            index: LOCAL_ROW,
            receiver: std::net::Ipv4Addr::UNSPECIFIED.into(),
            source: std::net::Ipv4Addr::UNSPECIFIED.into(),
            bond: None,
            tables: vec![t as usize],
            slots: self.tables[t as usize].layout.slots.len() as u32,
        });
    }

    /// For each destination's route table (no source bound), its tables
    /// under the addresses of the NICs that reach its receiver; and each
    /// node's NIC (`super::local::nic_choice`).
    fn choose_nics(&mut self) {
        self.node_nics = nic_choice::node_nics(&self.host.nics);
        // By the receiver's address, not its row: with `--steer local`
        // every target shares this host's row.
        let reach: Vec<(IpAddr, Vec<(u32, IpAddr)>)> = self
            .host
            .toward
            .iter()
            .map(|sources| {
                let nics = nic_choice::reaching(&self.host, sources);
                (sources.receiver, nics)
            })
            .collect();
        let by_key: BTreeMap<DestKey, DestValue> = self.dests.iter().copied().collect();
        let mut rows: BTreeMap<u32, NicTables> = BTreeMap::new();
        for (key, value) in &self.dests {
            if key.src != [0; 4] || value.table == DestValue::BY_PORT {
                continue;
            }
            let toward = |r: &IpAddr| {
                let (family, words) = (Family::of(r).as_u16(), addr_words(*r).1);
                family == key.family && words == key.addr
            };
            let Some((_, nics)) = reach.iter().find(|(r, _)| toward(r)) else {
                continue;
            };
            let row = rows.entry(value.table).or_default();
            for (nic, address) in nics {
                let under = DestKey {
                    src: addr_words(*address).1,
                    ..*key
                };
                if let Some(found) = by_key.get(&under) {
                    row.set(*nic, found.table, found.local_table);
                }
            }
        }
        self.nic_tables = rows.into_iter().collect();
    }

    /// Every occupancy row of the plan: the receivers', then this host's.
    pub fn rows(&self) -> impl Iterator<Item = &ReceiverPlan> {
        self.receivers.iter().chain(self.local.iter())
    }

    fn add_receiver(
        &mut self,
        shared: &mut SharedLayouts,
        mut both: Option<&mut LocalEnd>,
        input: &ReceiverInput,
        ports: &[u16],
        range: PortRange,
    ) -> Result<(), SenderError> {
        let (index, sources) = (input.index, &input.sources);
        let receiver = sources.receiver;
        // The bond is this host's: it balances the flows a receiver's
        // model places (not this host's own NIC's, `--steer local`). A
        // count that is not a power of two is balanced through each named
        // port's listed ports; any-port tables then place CPUs only.
        let local_end = input.model.end() == End::Local;
        let members = sources.members().filter(|_| !local_end);
        let listed = members.filter(|m| m.linear_bits().is_none() && !ports.is_empty());
        // The receiver's layout of each steered protocol, once; this
        // host's, per source address (each its NIC's model, shared by the
        // addresses of one NIC).
        let remote = match (local_end, listed) {
            (true, _) => vec![None; STEERED.len()],
            (false, Some(_)) => vec![Some(None); STEERED.len()],
            (false, None) => remote_layouts(shared, &input.model, receiver, range, members)?,
        };
        let mut plan = ReceiverPlan {
            index,
            receiver,
            source: sources.route,
            tables: Vec::new(),
            slots: 0,
            bond: sources.bond.clone(),
        };
        for (n, src) in sources.sources().into_iter().enumerate() {
            for (&protocol, remote) in STEERED.iter().zip(&remote) {
                let (model, layout) = match remote {
                    Some(layout) => (input.model.clone(), layout.clone()),
                    None => {
                        let model = self.local_model(src, &input.model);
                        let slots = self.local_slot_cpus();
                        let layout = shared
                            .get(&model, protocol, receiver, range, None, slots.as_deref())
                            .map_err(steering_error(receiver, None))?;
                        (model, layout)
                    }
                };
                self.add_source(
                    (shared, both.as_deref_mut()),
                    &mut plan,
                    (&model, layout, listed),
                    (protocol, src, n == 0),
                    (ports, range),
                )?;
            }
        }
        self.receivers.push(plan);
        Ok(())
    }

    /// The table(s) of `protocol`'s flows from `src` toward `plan`'s
    /// receiver, on the shared any-port `layout` (of that protocol) or,
    /// without one, one per named port (`listed`: balancing a bond's
    /// members there).
    fn add_source(
        &mut self,
        (shared, mut both): (&mut SharedLayouts, Option<&mut LocalEnd>),
        plan: &mut ReceiverPlan,
        (model, layout, listed): (&Arc<RssModel>, Option<Arc<LayoutPlan>>, Option<MemberPlan>),
        (protocol, src, route): (Protocol, IpAddr, bool),
        (ports, range): (&[u16], PortRange),
    ) -> Result<(), SenderError> {
        let receiver = plan.receiver;
        match layout {
            Some(layout) => {
                let table = TablePlan::with_layout(model, layout, src, receiver)
                    .map_err(steering_error(receiver, None))?;
                let keys: Vec<u16> = if ports.is_empty() {
                    vec![0]
                } else {
                    ports.to_vec()
                };
                let twin = self.local_twin(shared, both, &table, receiver, range)?;
                self.add_table(plan, table, twin, &keys, route);
            }
            None if ports.is_empty() => {
                // Fails, naming the flag to use.
                let table = TablePlan::build(model, protocol, (src, receiver), None, range)
                    .map_err(steering_error(receiver, None))?;
                self.add_table(plan, table, None, &[0], route);
            }
            None => {
                for port in ports {
                    let mut table = TablePlan::one_port_over(
                        model,
                        protocol,
                        (src, receiver),
                        *port,
                        range,
                        listed,
                    )
                    .map_err(steering_error(receiver, Some(*port)))?;
                    if let (End::Local, Some(slots)) = (model.end(), self.local_slot_cpus()) {
                        table.layout = Arc::new(table.layout.reslotted(&slots));
                    }
                    let twin =
                        self.local_twin(shared, both.as_deref_mut(), &table, receiver, range)?;
                    self.add_table(plan, table, twin, &[*port], route);
                }
            }
        }
        Ok(())
    }

    /// The model of this host's end `src` is placed with: its NIC's own
    /// ([`LocalModels::of`]), `default` without models; recorded once per
    /// address, a fallback logged.
    fn local_model(&mut self, src: IpAddr, default: &Arc<RssModel>) -> Arc<RssModel> {
        let Some(models) = self.local_models.clone() else {
            return default.clone();
        };
        let (model, chosen) = models.of(src, &self.host.nics);
        if !self.local_sources.iter().any(|c| c.source == src) {
            if let Some(why) = &chosen.fallback {
                tracing::warn!(
                    "{src}: placed on this host's NIC with {}'s description ({why})",
                    chosen.described_by.as_deref().unwrap_or("--local-rss")
                );
            }
            self.local_sources.push(chosen);
        }
        model
    }

    /// This host's row's CPUs, slot by slot, when several NICs' models
    /// share it (every local layout is laid over them); `None`: one model,
    /// its layouts as built.
    fn local_slot_cpus(&self) -> Option<Vec<u32>> {
        let models = self.local_models.as_ref()?;
        models.several().then(|| models.slot_cpus().to_vec())
    }

    /// How many source addresses of this host's end are placed with
    /// another NIC's description than their own (a [`LocalFallback`]).
    ///
    /// [`LocalFallback`]: super::local::source_models::LocalFallback
    pub fn local_fallbacks(&self) -> usize {
        self.local_sources
            .iter()
            .filter(|c| c.fallback.is_some())
            .count()
    }

    /// With both ends planned: the local table twin of `table` (same
    /// protocol, source and receiver, the model of the NIC holding that
    /// source facing the reverse tuple) and the index of the joint row of
    /// their layouts.
    fn local_twin(
        &mut self,
        shared: &mut SharedLayouts,
        both: Option<&mut LocalEnd>,
        table: &TablePlan,
        receiver: IpAddr,
        range: PortRange,
    ) -> Result<Option<(TablePlan, u32)>, SenderError> {
        let Some(both) = both else {
            return Ok(None);
        };
        let Some(primary) = self.local_models.as_ref().map(|m| m.primary().clone()) else {
            return Ok(None);
        };
        let model = self.local_model(table.source, &primary);
        let slots = self.local_slot_cpus();
        let not_linear = |problem: String| {
            SenderError::Input(format!(
                "--steer both toward {receiver}: this host's NIC {problem}; use --steer local \
                 or --steer remote"
            ))
        };
        let protocol = table.layout.protocol;
        let layout = shared
            .get(&model, protocol, receiver, range, None, slots.as_deref())
            .map_err(|e| not_linear(e.to_string()))?
            .ok_or_else(|| {
                not_linear("is not linear in the port (its table size or input transform)".into())
            })?;
        let twin = TablePlan::with_layout(&model, layout.clone(), table.source, receiver)
            .map_err(|e| not_linear(e.to_string()))?;
        let joint = match both
            .joints
            .iter()
            .position(|(r, l, _)| Arc::ptr_eq(r, &table.layout) && Arc::ptr_eq(l, &layout))
        {
            Some(j) => j,
            None => {
                let tables = JointTables::new(&table.layout.layout, &model, protocol, receiver)
                    .map_err(|e| not_linear(e.to_string()))?;
                both.joints
                    .push((table.layout.clone(), layout, Arc::new(tables)));
                both.joints.len() - 1
            }
        };
        Ok(Some((twin, joint as u32)))
    }

    /// Adds `table` (and its local twin with its joint row, both ends
    /// planned) and its destinations: keyed by its layout's protocol and
    /// its own source address, and, for the route's source, by no source
    /// too (an unbound socket).
    /// Named ports also get the any-port key saying so
    /// ([`DestValue::BY_PORT`]): the hook looks the any-port key up first.
    fn add_table(
        &mut self,
        receiver: &mut ReceiverPlan,
        table: TablePlan,
        twin: Option<(TablePlan, u32)>,
        ports: &[u16],
        route: bool,
    ) {
        let addr = addr_words(receiver.receiver).1;
        let (protocol, family) = (table.layout.protocol, Family::of(&receiver.receiver));
        let src = addr_words(table.source).1;
        let t = self.tables.len();
        receiver.slots = table.layout.slots.len() as u32;
        receiver.tables.push(t);
        self.tables.push(table);
        let (local_table, joint) = match twin {
            Some((mut twin, joint)) => {
                // The hook reads the joint row from the twin it took,
                // whichever NIC's it is (`--local-nics`).
                twin.table.joint = joint;
                self.tables.push(twin);
                (t as u32 + 1, joint)
            }
            None => (DestValue::NO_LOCAL, 0),
        };
        let value = DestValue {
            table: t as u32,
            receiver: receiver.index,
            local_table,
            joint,
        };
        let by_port = DestValue {
            table: DestValue::BY_PORT,
            ..value
        };
        let sources = std::iter::once(src).chain(route.then_some([0; 4]));
        for src in sources {
            let key = |port: u16| DestKey::new(protocol, family, port, addr, src);
            if ports.iter().any(|p| *p != 0) && !self.dests.contains(&(key(0), by_port)) {
                self.dests.push((key(0), by_port));
            }
            self.dests
                .extend(ports.iter().map(|port| (key(*port), value)));
        }
    }

    /// Gives each distinct layout its index and pool rows, and each table
    /// its layout's index.
    fn place_layouts(&mut self) {
        let (mut slot_rows, mut entry_rows, mut coset_rows) = (0u64, 0u64, 0u64);
        // The tables' own Arcs, by layout index.
        let mut placed: Vec<Arc<LayoutPlan>> = Vec::new();
        for table in &mut self.tables {
            let known = placed.iter().position(|l| Arc::ptr_eq(l, &table.layout));
            let index = match known {
                Some(i) => i,
                None => {
                    let mut layout = (*table.layout).clone();
                    layout.layout.slot_base = slot_rows as u32;
                    layout.layout.entry_base = entry_rows as u32;
                    layout.layout.coset_base = coset_rows as u32;
                    slot_rows += layout.slots.len() as u64;
                    entry_rows += layout.entries.len() as u64;
                    coset_rows += layout.cosets.len() as u64;
                    placed.push(table.layout.clone());
                    self.layouts.push(Arc::new(layout));
                    self.layouts.len() - 1
                }
            };
            table.table.layout = index as u32;
        }
    }

    /// Fails, naming the setting to raise, unless the binder's maps sized
    /// by `sizes` hold this plan: its binder rows, each layout's CPU slots,
    /// the layouts and their pools, the tables, destinations and joint rows.
    pub fn check_fits(&self, sizes: &BinderSizes) -> Result<(), SenderError> {
        let sum = |rows: &mut dyn Iterator<Item = usize>| rows.map(|n| n as u64).sum::<u64>();
        let layouts = || self.layouts.iter();
        let per_layout = ": the pools hold 512 indirection entries per layout on average";
        let per_row = ": 16 port tables per receiver, one per local source address";
        let checks: [(&str, u64, u32, SizeSetting, &str); 10] = [
            (
                "receiver rows",
                self.receivers
                    .iter()
                    .map(|r| u64::from(r.index))
                    .max()
                    .unwrap_or(0),
                sizes.receivers,
                SizeSetting::Receivers,
                "",
            ),
            (
                "CPU slots of one receiver",
                sum(&mut layouts().map(|l| l.slots.len()).max().into_iter()),
                sizes.cpus,
                SizeSetting::Cpus,
                "",
            ),
            (
                "RSS layouts",
                self.layouts.len() as u64,
                sizes.layout_rows(),
                SizeSetting::Layouts,
                "",
            ),
            (
                "CPU slots of all layouts",
                sum(&mut layouts().map(|l| l.slots.len())),
                sizes.slot_rows(),
                SizeSetting::Layouts,
                "",
            ),
            (
                "indirection entries of all layouts",
                sum(&mut layouts().map(|l| l.entries.len())),
                sizes.entry_rows(),
                SizeSetting::Layouts,
                per_layout,
            ),
            (
                "port cosets of all layouts",
                sum(&mut layouts().map(|l| l.cosets.len())),
                sizes.coset_rows(),
                SizeSetting::Layouts,
                per_layout,
            ),
            (
                "port tables",
                self.tables.len() as u64,
                sizes.tables(),
                SizeSetting::Receivers,
                per_row,
            ),
            (
                "destinations",
                self.dests.len() as u64,
                sizes.dests(),
                SizeSetting::Receivers,
                per_row,
            ),
            (
                "joint rows",
                self.joints.len() as u64,
                sizes.joints(),
                SizeSetting::Layouts,
                "",
            ),
            (
                "joint solutions",
                sum(&mut self.joints.iter().map(|j| j.solutions.len())),
                sizes.solution_rows(),
                SizeSetting::Layouts,
                per_layout,
            ),
        ];
        match checks
            .into_iter()
            .find(|(_, needed, sized, ..)| *needed > u64::from(*sized))
        {
            Some((what, needed, sized, setting, hint)) => Err(SenderError::Capacity {
                what,
                needed,
                sized: u64::from(sized),
                setting,
                sizes: *sizes,
                hint,
            }),
            None => Ok(()),
        }
    }
}

/// This host's NIC while a plan for both ends is built: the joint rows
/// made so far, by (receiver layout, local layout).
struct LocalEnd {
    joints: Vec<(Arc<LayoutPlan>, Arc<LayoutPlan>, Arc<JointTables>)>,
}

/// How this host's end is planned: its NICs' models (none with `--steer
/// remote`), the NICs that hold its addresses, and whether each table
/// gets a local twin (`--steer both`).
struct LocalPlanning<'a> {
    models: Option<LocalModels>,
    nics: &'a LocalNics,
    twins: bool,
}

/// The model of this host's NIC a `--steer local` target is placed with.
fn local_target(receivers: &[ReceiverInput]) -> Option<Arc<RssModel>> {
    receivers
        .iter()
        .find(|r| r.model.end() == End::Local)
        .map(|r| r.model.clone())
}

/// The error of a table toward `receiver` (and `dport`) that cannot be
/// built.
fn steering_error(receiver: IpAddr, dport: Option<u16>) -> impl Fn(PortTableError) -> SenderError {
    move |source| SenderError::PortTables {
        receiver,
        dport,
        source,
    }
}

/// A receiver's layout of one protocol as its tables take it: `None` for a
/// target placed on this host's NIC (`--steer local`: its layouts are each
/// source's NIC's), `Some(None)` where each named port gets a layout of its
/// own, else the shared any-port one (`Some(None)` too when not linear).
type RemoteLayout = Option<Option<Arc<LayoutPlan>>>;

/// The shared any-port layout of a receiver's `model` for each steered
/// protocol, in [`STEERED`]'s order.
fn remote_layouts(
    shared: &mut SharedLayouts,
    model: &Arc<RssModel>,
    receiver: IpAddr,
    range: PortRange,
    members: Option<MemberPlan>,
) -> Result<Vec<RemoteLayout>, SenderError> {
    STEERED
        .iter()
        .map(|&protocol| any_port_layout(shared, model, protocol, receiver, range, members))
        .map(|layout| layout.map(Some))
        .collect()
}

/// The shared any-port layout of a receiver's `model` for `protocol`'s
/// flows over `members`; when the members add too many bits, the
/// receiver's CPUs alone (its placement comes first), said so.
fn any_port_layout(
    shared: &mut SharedLayouts,
    model: &Arc<RssModel>,
    protocol: Protocol,
    receiver: IpAddr,
    range: PortRange,
    members: Option<MemberPlan>,
) -> Result<Option<Arc<LayoutPlan>>, SenderError> {
    match shared.get(model, protocol, receiver, range, members, None) {
        Err(err @ PortTableError::MembersTooWide { .. }) => {
            tracing::warn!("toward {receiver}: {err}; bond members are not balanced");
            shared.get(model, protocol, receiver, range, None, None)
        }
        other => other,
    }
    .map_err(steering_error(receiver, None))
}

/// The any-port layout of each (model, protocol, address family, bond
/// members), built once per plan: receivers of one description (the same
/// `Arc`) reached over the same members share it.
#[derive(Default)]
struct SharedLayouts {
    built: Vec<(LayoutKey, Option<Arc<LayoutPlan>>)>,
}

/// What a shared layout is built for: the model, the protocol, IPv4 or
/// not, the members.
type LayoutKey = (Arc<RssModel>, Protocol, bool, Option<MemberPlan>);

impl SharedLayouts {
    /// The layout of `model` for `protocol`'s flows toward `receiver`'s
    /// family over `members`; laid over `slots` (this host's row's CPUs)
    /// when given, which one plan gives alike for every model of this
    /// host's end.
    fn get(
        &mut self,
        model: &Arc<RssModel>,
        protocol: Protocol,
        receiver: IpAddr,
        range: PortRange,
        members: Option<MemberPlan>,
        slots: Option<&[u32]>,
    ) -> Result<Option<Arc<LayoutPlan>>, PortTableError> {
        let key = (model.clone(), protocol, receiver.is_ipv4(), members);
        let same = |(m, p, v4, over): &LayoutKey| {
            Arc::ptr_eq(m, &key.0) && (*p, *v4, *over) == (key.1, key.2, key.3)
        };
        if let Some((_, layout)) = self.built.iter().find(|(k, _)| same(k)) {
            return Ok(layout.clone());
        }
        let layout = LayoutPlan::any_port_over(model, protocol, receiver, range, members)?
            .map(|built| match slots {
                Some(cpus) => built.reslotted(cpus),
                None => built,
            })
            .map(Arc::new);
        self.built.push((key, layout.clone()));
        Ok(layout)
    }
}

fn check_receivers(receivers: &[ReceiverInput]) -> Result<(), SenderError> {
    if receivers.is_empty() {
        return Err(SenderError::Input(
            "no receiver: give --receiver IP (once per receiver address)".into(),
        ));
    }
    let remote = receivers
        .iter()
        .filter(|r| r.model.end() == End::Remote)
        .count();
    if remote > MAX_RECEIVERS as usize {
        return Err(SenderError::Input(format!(
            "{remote} receivers given; the binder tracks at most {MAX_RECEIVERS} (rows \
             {FIRST_RECEIVER_ROW} to {MAX_RECEIVERS}; row {LOCAL_ROW} is this host's own CPUs)"
        )));
    }
    let mut seen = BTreeSet::new();
    let mut rows = BTreeSet::new();
    for input in receivers {
        let sources = &input.sources;
        // This host's row is shared by every target of `--steer local`, and
        // no receiver's otherwise.
        let local = input.model.end() == End::Local;
        if local != (input.index == LOCAL_ROW) {
            return Err(SenderError::Input(format!(
                "receiver {}: binder row {} is {}",
                sources.receiver,
                input.index,
                if local {
                    "not this host's row"
                } else {
                    "this host's own CPUs' row"
                }
            )));
        }
        if input.index > MAX_RECEIVERS || (!local && !rows.insert(input.index)) {
            return Err(SenderError::Input(format!(
                "receiver {}: binder row {} is taken or beyond row {MAX_RECEIVERS}",
                sources.receiver, input.index
            )));
        }
        if !seen.insert(sources.receiver) {
            return Err(SenderError::Input(format!(
                "receiver {} is given twice",
                sources.receiver
            )));
        }
        if sources.route.is_ipv4() != sources.receiver.is_ipv4() {
            return Err(SenderError::Input(format!(
                "receiver {} is routed from {}, an address of the other family",
                sources.receiver, sources.route
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use srap_common::rss::{FlowTuple, RssModel, embedded_default};

    use super::*;

    fn model() -> RssModel {
        RssModel::from_description(&embedded_default()).unwrap()
    }

    fn v4() -> ReceiverSources {
        ReceiverSources {
            receiver: IpAddr::V4(Ipv4Addr::new(10, 199, 9, 2)),
            route: IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
            others: vec![],
            bond: None,
        }
    }

    /// `v4()` reached over a layer3+4 bond of `up.len()` members.
    fn over_bond(up: &[bool]) -> ReceiverSources {
        let bond = srap_host::bond::Bond {
            name: "bond0".into(),
            mode: "balance-xor".into(),
            policy_name: "layer3+4 1".into(),
            policy: srap_common::bond::HashPolicy::parse("layer3+4"),
            active_aggregator: None,
            members: up
                .iter()
                .enumerate()
                .map(|(i, up)| srap_host::bond::Member {
                    name: format!("eth{i}"),
                    up: *up,
                    aggregator: None,
                    port_state: None,
                })
                .collect(),
        };
        ReceiverSources {
            bond: Some(EgressBond::of(&bond)),
            ..v4()
        }
    }

    /// Every port of every slot of `table` toward port 5201 lands on the
    /// slot's CPU and leaves on member `slot % members` by the driver's
    /// formula, and each slot has ports.
    fn each_slot_on_its_cpu_and_member(table: &TablePlan, members: u32) {
        let (src, dst) = (v4().route, v4().receiver);
        for slot in 0..table.slots().len() {
            let ports = table.slot_ports(slot, 5201);
            assert!(ports.len() > 100, "slot {slot}: {} ports", ports.len());
            for port in ports {
                let tuple = FlowTuple::new(src, port, dst, 5201).expect("tuple");
                assert_eq!(
                    srap_common::bond::member_index(&tuple, members),
                    Some(slot as u32 % members)
                );
                assert_eq!(model().landing(&tuple).cpu, table.slots()[slot].cpu);
            }
        }
    }

    /// Each source gets a table per steered protocol, and its
    /// destinations are keyed by that table's protocol: the protocol is
    /// the plan's data, named once in `STEERED`.
    #[test]
    fn every_table_and_destination_is_of_a_steered_protocol() {
        let plan = Plan::build(&model(), &[v4()], &[5201], PortRange::DEFAULT).expect("plan");
        assert_eq!(plan.tables.len(), STEERED.len());
        for (table, protocol) in plan.tables.iter().zip(STEERED) {
            assert_eq!(table.layout.protocol, *protocol);
        }
        let keyed: BTreeSet<u8> = plan.dests.iter().map(|(k, _)| k.protocol).collect();
        let steered: BTreeSet<u8> = STEERED.iter().map(|p| p.as_u8()).collect();
        assert_eq!(keyed, steered);
    }

    /// Over a bond of four, each receiver CPU's ports all leave on one
    /// member (the driver's formula), slot after slot round robin; over
    /// three usable the plan is the receiver's alone.
    #[test]
    fn a_bonded_receivers_slots_each_take_one_member() {
        let plan =
            Plan::build(&model(), &[over_bond(&[true; 4])], &[], PortRange::DEFAULT).expect("plan");
        let table = &plan.tables[0];
        assert_eq!(table.layout.cosets.len(), 128 * 4, "(entry, member) values");
        each_slot_on_its_cpu_and_member(table, 4);
        let three = Plan::build(
            &model(),
            &[over_bond(&[true, true, false, true])],
            &[],
            PortRange::DEFAULT,
        )
        .expect("plan");
        assert_eq!(three.tables[0].layout.cosets.len(), 128);
        assert_eq!(three.tables[0].layout.members, None);
        // Toward a named port, three members are balanced by listed ports.
        let named = Plan::build(
            &model(),
            &[over_bond(&[true, true, false, true])],
            &[5201],
            PortRange::DEFAULT,
        )
        .expect("plan");
        let table = &named.tables[0];
        assert_eq!(table.scope(), srap_common::port_tables::Scope::Port(5201));
        each_slot_on_its_cpu_and_member(table, 3);
    }

    #[test]
    fn any_port_receiver_has_one_wildcard_dest_per_key() {
        let plan = Plan::build(&model(), &[v4()], &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.tables.len(), 1);
        assert_eq!(plan.layouts.len(), 1);
        // Bound to the route's source, or unbound.
        assert_eq!(plan.dests.len(), 2);
        assert!(plan.dests.iter().all(|(k, _)| k.port == 0));
        assert_eq!(plan.dests[1].0.src, [0; 4]);
        assert_eq!(plan.tables[0].slots().len(), 32);
        assert_eq!(plan.receivers[0].slots, 32);
        assert_eq!(
            plan.layouts[0].port_count(),
            PortRange::DEFAULT.len() as u64
        );
    }

    /// Under `--local-nics`, the route table's row names, for each NIC
    /// that reaches the receiver, the table of that NIC's address; a NIC
    /// down is left out, and each node gets its NIC.
    #[test]
    fn each_route_table_names_the_table_of_each_reaching_nic() {
        use crate::sender::local::{nics::HostNic, routing::RoutingReport};
        use srap_common::local_nics::NO_NIC;
        let mut r = v4();
        let second = IpAddr::V4(Ipv4Addr::new(10, 199, 9, 11));
        r.others = vec![second];
        let nic = |name: &str, ip: IpAddr, node, up| HostNic {
            name: name.into(),
            addresses: [ip].into(),
            node: Some(node),
            up,
            members: Vec::new(),
            given: true,
            description: None,
        };
        let with_nics = |mut plan: Plan, up: bool| {
            plan.host.nics.nics = vec![nic("eth0", r.route, 0, true), nic("eth1", second, 1, up)];
            plan.host.routing = RoutingReport {
                checked: true,
                ..RoutingReport::default()
            };
            plan.choose_nics();
            plan
        };
        let plan_with = |up: bool| {
            let plan = Plan::build(&model(), &[r.clone()], &[], PortRange::DEFAULT).unwrap();
            with_nics(plan, up)
        };
        // With both ends planned, each NIC's table brings its local twin.
        let input = ReceiverInput {
            index: FIRST_RECEIVER_ROW,
            model: Arc::new(model()),
            sources: r.clone(),
        };
        let both = with_nics(
            Plan::build_both(&[input], &[], PortRange::DEFAULT, &local_nic()).unwrap(),
            true,
        );
        let plan = plan_with(true);
        let route_table = plan
            .dests
            .iter()
            .find(|(k, _)| k.src == [0; 4])
            .map(|(_, v)| v.table)
            .expect("the route's entry");
        let table_of = |ip: IpAddr| {
            plan.tables
                .iter()
                .position(|t| t.source == ip)
                .expect("a table") as u32
        };
        assert_eq!(plan.nic_tables.len(), 1, "one route table");
        let (table, row) = plan.nic_tables[0];
        assert_eq!(table, route_table);
        assert_eq!(row.reach, 0b11);
        assert_eq!(row.of(0), Some((table_of(r.route), DestValue::NO_LOCAL)));
        assert_eq!(row.of(1), Some((table_of(second), DestValue::NO_LOCAL)));
        assert_eq!(&plan.node_nics[..3], [0, 1, NO_NIC]);
        let down = plan_with(false);
        assert_eq!(
            down.nic_tables[0].1.reach, 0b01,
            "a NIC down reaches nothing"
        );
        assert_eq!(down.node_nics[1], NO_NIC);
        let (_, row) = both.nic_tables[0];
        for nic in [0, 1] {
            let (table, local) = row.of(nic).expect("both NICs reach");
            assert_ne!(local, DestValue::NO_LOCAL);
            assert_ne!(local, table);
            let twin = &both.tables[local as usize];
            assert_eq!(twin.source, both.tables[table as usize].source);
        }
    }

    #[test]
    fn every_local_address_of_the_family_gets_a_table_on_one_layout() {
        let mut r = v4();
        let second = IpAddr::V4(Ipv4Addr::new(10, 199, 9, 11));
        r.others = vec![second, r.route, IpAddr::V6(Ipv6Addr::LOCALHOST)];
        let plan = Plan::build(&model(), &[r], &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.tables.len(), 2, "route source and the second address");
        assert_eq!(plan.tables[1].source, second);
        assert_eq!(plan.layouts.len(), 1);
        assert!(plan.tables.iter().all(|t| t.table.layout == 0));
        assert_ne!(plan.tables[0].table.base, plan.tables[1].table.base);
        let keyed: Vec<_> = plan.dests.iter().map(|(k, v)| (k.src, v.table)).collect();
        assert!(keyed.contains(&(addr_words(second).1, 1)));
        assert!(keyed.contains(&([0; 4], 0)));
    }

    #[test]
    fn linear_receiver_with_ports_shares_its_table() {
        let v6 = ReceiverSources {
            receiver: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 2)),
            route: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 1)),
            others: vec![],
            bond: None,
        };
        let plan =
            Plan::build(&model(), &[v4(), v6], &[5201, 80, 5201], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.tables.len(), 2);
        assert_eq!(plan.layouts.len(), 2, "one per family");
        assert_eq!(plan.layouts[1].layout.slot_base, 32);
        assert_eq!(plan.layouts[1].layout.entry_base, 128);
        // Per receiver and source (route's, none): the any-port key saying
        // "by port", then the two ports.
        assert_eq!(plan.dests.len(), 12);
        for (key, value) in &plan.dests {
            assert_eq!(key.port == 0, value.table == DestValue::BY_PORT, "{key:?}");
        }
        assert_eq!(plan.receivers[1].index, 2, "rows from 1 on");
        assert!(
            plan.dests[6..]
                .iter()
                .all(|(_, v)| v.receiver == 2 && (v.table == 1 || v.table == DestValue::BY_PORT))
        );
    }

    #[test]
    fn four_thousand_receivers_share_one_layout() {
        let receivers: Vec<ReceiverSources> = (0..MAX_RECEIVERS)
            .map(|i| {
                let [_, _, a, b] = i.to_be_bytes();
                ReceiverSources::routed(
                    IpAddr::V4(Ipv4Addr::new(10, 200, a, b)),
                    IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
                )
            })
            .collect();
        let plan = Plan::build(&model(), &receivers, &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.receivers.len(), 4096);
        assert_eq!(plan.tables.len(), 4096);
        assert_eq!(plan.layouts.len(), 1);
        assert_eq!(plan.receivers[4095].index, 4096, "the last row");
        plan.check_fits(&BinderSizes {
            layouts: 1,
            ..BinderSizes::for_receivers(4096)
        })
        .expect("4096 receivers of one layout fit their settings");
        let mut more = receivers;
        more.push(ReceiverSources::routed(
            IpAddr::V4(Ipv4Addr::new(10, 201, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
        ));
        let err = Plan::build(&model(), &more, &[], PortRange::DEFAULT).unwrap_err();
        assert!(err.to_string().contains("at most 4096"), "{err}");
    }

    /// A plan the maps cannot hold names the setting to raise (never a
    /// plan cut short): receivers past `--max-receivers`, a receiver with
    /// more CPUs than `--max-cpus`, more layouts than `--max-layouts`.
    #[test]
    fn a_plan_past_the_sizes_names_the_setting_to_raise() {
        let two: Vec<ReceiverSources> = (0..2u8)
            .map(|i| {
                ReceiverSources::routed(
                    IpAddr::V4(Ipv4Addr::new(10, 200, 0, i)),
                    IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
                )
            })
            .collect();
        let plan = Plan::build(&model(), &two, &[], PortRange::DEFAULT).unwrap();
        plan.check_fits(&BinderSizes::DEFAULT)
            .expect("fits the defaults");
        for (sizes, says) in [
            (BinderSizes::for_receivers(1), "--max-receivers 1"),
            (
                BinderSizes {
                    cpus: 16,
                    ..BinderSizes::DEFAULT
                },
                "raise --max-cpus (`max-cpus` in the --config file)",
            ),
        ] {
            let err = plan.check_fits(&sizes).expect_err("too small");
            assert!(err.to_string().contains(says), "{err}");
        }
        let v6 = ReceiverSources {
            receiver: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 2)),
            route: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 1)),
            others: vec![],
            bond: None,
        };
        let plan = Plan::build(&model(), &[v4(), v6], &[], PortRange::DEFAULT).unwrap();
        let err = plan
            .check_fits(&BinderSizes {
                layouts: 1,
                ..BinderSizes::DEFAULT
            })
            .expect_err("two layouts");
        let text = err.to_string();
        assert!(
            text.contains("RSS layouts: these receivers need 2, the binder is sized for 1")
                && text.contains("raise --max-layouts"),
            "{text}"
        );
    }

    #[test]
    fn each_receiver_gets_the_layout_of_its_own_model() {
        let sixteen = RssModel::from_description(&srap_common::rss::RssDescription {
            indir: (0..128).map(|i| i % 16).collect(),
            queue_cpu: Some((0..16).collect()),
            ..embedded_default()
        })
        .unwrap();
        let (a, b) = (Arc::new(model()), Arc::new(sixteen));
        let second = ReceiverSources::routed(
            IpAddr::V4(Ipv4Addr::new(10, 199, 10, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 199, 10, 1)),
        );
        let inputs = [
            ReceiverInput {
                index: 3,
                model: a.clone(),
                sources: v4(),
            },
            ReceiverInput {
                index: 7,
                model: b.clone(),
                sources: second.clone(),
            },
        ];
        let plan = Plan::build_each(&inputs, &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.layouts.len(), 2, "one layout per model");
        assert_eq!(plan.receivers[0].slots, 32);
        assert_eq!(plan.receivers[1].slots, 16);
        assert_eq!(
            (plan.receivers[0].index, plan.receivers[1].index),
            (3, 7),
            "binder rows as given"
        );
        assert!(
            plan.dests
                .iter()
                .any(|(_, v)| v.receiver == 7 && v.table == 1)
        );
        // The same model (one Arc) shares one layout.
        let shared = [
            inputs[0].clone(),
            ReceiverInput {
                model: a,
                ..inputs[1].clone()
            },
        ];
        let plan = Plan::build_each(&shared, &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.layouts.len(), 1);
        // A binder row given twice is refused.
        let twice = [
            inputs[0].clone(),
            ReceiverInput {
                index: 3,
                ..inputs[1].clone()
            },
        ];
        assert!(Plan::build_each(&twice, &[], PortRange::DEFAULT).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let m = model();
        assert!(Plan::build(&m, &[], &[], PortRange::DEFAULT).is_err());
        assert!(Plan::build(&m, &[v4(), v4()], &[], PortRange::DEFAULT).is_err());
        assert!(Plan::build(&m, &[v4()], &[0], PortRange::DEFAULT).is_err());
        let mixed = ReceiverSources {
            route: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..v4()
        };
        assert!(Plan::build(&m, &[mixed], &[], PortRange::DEFAULT).is_err());
    }

    /// Two NICs of this host with different keys, indirection tables and
    /// queue → CPU maps, each holding one source address: under `--steer
    /// local` and `--steer both`, each address's local table is its own
    /// NIC's — every port of every slot lands, by that NIC's Toeplitz model
    /// of the reverse tuple, on the slot's CPU, not by the other's — and
    /// both layouts are laid over one list of CPUs (this host's one row).
    #[test]
    fn each_source_address_is_placed_with_its_own_nics_description() {
        use srap_common::rss::RssDescription;

        use crate::sender::local::nics::{HostNic, LocalNics};
        let a = RssDescription {
            indir: (0..128).map(|i| i % 4).collect(),
            queue_cpu: Some(vec![0, 1, 2, 3]),
            ..embedded_default()
        };
        let b = RssDescription {
            key: a.key.chars().rev().collect(),
            indir: (0..64).map(|i| (i * 3 + 1) % 4).collect(),
            queue_cpu: Some(vec![3, 2, 4, 5]),
            ..embedded_default()
        };
        let facing = |d: &RssDescription| {
            Arc::new(RssModel::from_description(d).unwrap().facing(End::Local))
        };
        let (model_a, model_b) = (facing(&a), facing(&b));
        let r = ReceiverSources {
            others: vec![IpAddr::V4(Ipv4Addr::new(10, 199, 9, 11))],
            ..v4()
        };
        let (src_a, src_b) = (r.route, r.others[0]);
        let nic = |name: &str, ip: IpAddr, d: &RssDescription| HostNic {
            name: name.into(),
            addresses: [ip].into(),
            node: None,
            up: true,
            members: Vec::new(),
            given: true,
            description: Some(Arc::new(d.clone())),
        };
        let nics = LocalNics {
            nics: vec![nic("eth0", src_a, &a), nic("eth1", src_b, &b)],
        };
        for twins in [false, true] {
            let target = Target {
                index: if twins { FIRST_RECEIVER_ROW } else { LOCAL_ROW },
                addr: r.receiver,
                model: if twins {
                    Arc::new(model())
                } else {
                    model_a.clone()
                },
            };
            let plan = Plan::new(PlanInputs {
                receivers: &[target],
                host: LocalHost {
                    toward: vec![r.clone()],
                    nics: nics.clone(),
                    routing: crate::sender::local::routing::RoutingReport {
                        checked: true,
                        ..Default::default()
                    },
                },
                local_nic: twins.then_some(&model_a),
                primary_nic: Some("eth0"),
                ports: &[],
                range: PortRange::DEFAULT,
            })
            .expect("plan");
            assert_eq!(plan.local_fallbacks(), 0);
            let local_table = |src: IpAddr| {
                let (_, value) = plan
                    .dests
                    .iter()
                    .find(|(k, _)| k.src == addr_words(src).1)
                    .expect("a destination");
                let t = if twins {
                    value.local_table
                } else {
                    value.table
                };
                &plan.tables[t as usize]
            };
            let mut by_nic = Vec::new();
            for (src, own, other) in [(src_a, &model_a, &model_b), (src_b, &model_b, &model_a)] {
                let table = local_table(src);
                let cpus: Vec<u32> = table.slots().iter().map(|s| s.cpu).collect();
                assert_eq!(cpus, [0, 1, 2, 3, 4, 5], "one row, slot for slot");
                let (mut placed, mut elsewhere) = (0, 0);
                for (slot, row) in table.slots().iter().enumerate() {
                    let ports = table.slot_ports(slot, 5201);
                    // A CPU this NIC's queues do not reach lends one that
                    // they do: a port of this NIC all the same.
                    let reached = own.reachable_cpus().contains(&row.cpu);
                    assert!(!ports.is_empty(), "slot {slot} of {src}");
                    for port in ports.iter().step_by(7) {
                        let tuple = FlowTuple::new(src, *port, r.receiver, 5201).unwrap();
                        let landed = own.landing(&tuple).cpu;
                        if !reached {
                            assert!(own.reachable_cpus().contains(&landed), "{src} {port}");
                            continue;
                        }
                        assert_eq!(landed, row.cpu, "{src} port {port}");
                        elsewhere += usize::from(other.landing(&tuple).cpu != row.cpu);
                        placed += 1;
                    }
                }
                assert!(
                    elsewhere > placed / 2,
                    "{elsewhere} of {placed}: the NICs differ"
                );
                by_nic.push(table.slot_ports(0, 5201));
            }
            assert_ne!(by_nic[0], by_nic[1], "the two twins differ");
            let described: Vec<_> = plan
                .local_sources
                .iter()
                .map(|c| c.described_by.as_deref())
                .collect();
            assert_eq!(described, [Some("eth0"), Some("eth1")]);
            let row = plan
                .rows()
                .find(|p| p.index == LOCAL_ROW)
                .expect("this host's row");
            assert_eq!(row.slots, 6);
            // The hook's NIC choice takes each NIC's own table and twin,
            // and the twin names its own joint row (the twins' layouts
            // differ, so their joints do): the route's is not the other's.
            let (_, choices) = plan.nic_tables[0];
            let chosen: Vec<(u32, u32)> = (0..2).filter_map(|n| choices.of(n)).collect();
            assert_eq!(chosen.len(), 2);
            for (choice, src) in chosen.iter().zip([src_a, src_b]) {
                let (_, under) = plan
                    .dests
                    .iter()
                    .find(|(k, _)| k.src == addr_words(src).1)
                    .expect("a destination");
                assert_eq!(*choice, (under.table, under.local_table), "{src}");
                if twins {
                    let twin = &plan.tables[under.local_table as usize];
                    assert_eq!(twin.table.joint, under.joint, "{src}");
                }
            }
            if twins {
                let joint = |(_, local): (u32, u32)| plan.tables[local as usize].table.joint;
                assert_ne!(joint(chosen[0]), joint(chosen[1]));
            }
        }
    }

    /// This host's NIC: 16 queues over 128 entries, facing the local end.
    fn local_nic() -> Arc<RssModel> {
        let desc = srap_common::rss::RssDescription {
            indir: (0..128).map(|i| i % 16).collect(),
            queue_cpu: Some((0..16).collect()),
            ..embedded_default()
        };
        Arc::new(
            RssModel::from_description(&desc)
                .unwrap()
                .facing(End::Local),
        )
    }

    #[test]
    fn both_ends_give_each_table_a_local_twin_and_each_layout_pair_a_joint_row() {
        let v6 = ReceiverSources {
            receiver: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 2)),
            route: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 1)),
            others: vec![],
            bond: None,
        };
        let remote = Arc::new(model());
        let inputs: Vec<ReceiverInput> = [v4(), v6]
            .into_iter()
            .enumerate()
            .map(|(i, sources)| ReceiverInput {
                index: FIRST_RECEIVER_ROW + i as u32,
                model: remote.clone(),
                sources,
            })
            .collect();
        let plan = Plan::build_both(&inputs, &[], PortRange::DEFAULT, &local_nic()).unwrap();
        assert_eq!(plan.tables.len(), 4, "a twin per table");
        assert_eq!(plan.layouts.len(), 4, "receiver and local, per family");
        assert_eq!(plan.joints.len(), 2, "one per layout pair");
        assert_eq!(plan.joints[1].row.solution_base, 128);
        let local = plan.local.as_ref().expect("this host's row");
        assert_eq!((local.index, local.slots), (LOCAL_ROW, 16));
        for (_, value) in &plan.dests {
            assert_eq!(value.local_table, value.table + 1);
            assert!(plan.tables[value.local_table as usize].layout.slots.len() == 16);
        }
        assert_eq!(plan.rows().count(), 3);
        // Without this host's NIC: no twin, no joint row.
        let plain = Plan::build_each(&inputs, &[], PortRange::DEFAULT).unwrap();
        assert!(plain.joints.is_empty() && plain.local.is_none());
        assert!(
            plain
                .dests
                .iter()
                .all(|(_, v)| v.local_table == DestValue::NO_LOCAL)
        );
    }

    /// `--steer both` over a bond of four: the joint map solves receiver,
    /// member and this host's bits together; every port it gives a
    /// receiver slot still leaves on the slot's member and lands on the
    /// slot's CPU.
    #[test]
    fn both_ends_over_a_bond_keep_each_slots_member() {
        let inputs = [ReceiverInput {
            index: FIRST_RECEIVER_ROW,
            model: Arc::new(model()),
            sources: over_bond(&[true; 4]),
        }];
        let local = local_nic();
        let plan = Plan::build_both(&inputs, &[], PortRange::DEFAULT, &local).expect("plan");
        let (table, joint) = (&plan.tables[0], &plan.joints[0]);
        let layout = &table.layout;
        let (src, dst, dport) = (v4().route, v4().receiver, 5201);
        let mut joint_ports = 0;
        for slot in 0..4 {
            for entry in layout.entries_of(slot) {
                let value = layout.layout.value_for(table.table.base, *entry, dport);
                let coset = &layout.cosets[value as usize];
                for v in 0..joint.row.local_values {
                    for port in joint.ports(&layout.layout, coset, v) {
                        let tuple = FlowTuple::new(src, port, dst, dport).expect("tuple");
                        assert_eq!(
                            srap_common::bond::member_index(&tuple, 4),
                            Some(slot as u32 % 4)
                        );
                        assert_eq!(model().landing(&tuple).cpu, table.slots()[slot].cpu);
                        joint_ports += 1;
                    }
                }
            }
        }
        assert!(joint_ports > 100, "{joint_ports} joint ports on 4 slots");
    }

    #[test]
    fn local_steering_shares_this_hosts_row_among_receivers() {
        let second = ReceiverSources::routed(
            IpAddr::V4(Ipv4Addr::new(10, 199, 10, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 199, 10, 1)),
        );
        let local = local_nic();
        let inputs: Vec<ReceiverInput> = [v4(), second]
            .into_iter()
            .map(|sources| ReceiverInput {
                index: LOCAL_ROW,
                model: local.clone(),
                sources,
            })
            .collect();
        let plan = Plan::build_each(&inputs, &[], PortRange::DEFAULT).unwrap();
        assert!(plan.dests.iter().all(|(_, v)| v.receiver == LOCAL_ROW));
        assert_eq!(plan.layouts.len(), 1);
        // A receiver's model on this host's row, or the other way round,
        // is refused.
        let wrong = [ReceiverInput {
            index: LOCAL_ROW,
            model: Arc::new(model()),
            sources: v4(),
        }];
        assert!(Plan::build_each(&wrong, &[], PortRange::DEFAULT).is_err());
        let wrong = [ReceiverInput {
            index: FIRST_RECEIVER_ROW,
            model: local,
            sources: v4(),
        }];
        assert!(Plan::build_each(&wrong, &[], PortRange::DEFAULT).is_err());
    }
}
