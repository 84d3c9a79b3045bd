//! Writing the plan into the binder's maps, and reading its counters back.

use std::{
    borrow::Borrow,
    collections::BTreeSet,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{
    Ebpf,
    maps::{Array, Map, MapData, PerCpuArray},
};
use srap_common::binder::{
    BIND_ERRNOS, BIND_ERRNOS_MAP, BinderConfig, CONFIG_MAP, COSETS_MAP, COUNTER_NAMES, COUNTERS,
    DestKey, DestValue, ENTRIES_MAP, GRANTS_MAP, JOINTS_MAP, LAYOUTS_MAP, LoadConfig,
    NIC_TABLES_MAP, NODE_NICS_MAP, PINNED_MAPS, RECEIVERS_MAP, ReceiverSlots, SLOT_STATE_MAP,
    SLOTS_MAP, SOLUTIONS_MAP, STATS_MAP, SlotGrant, TABLES_MAP, outcome, slot_word,
};

use tracing::warn;

use super::{error::SenderError, layout::PinLayout, options::SenderOptions, plan::Plan};

mod seam;

pub(crate) use seam::BinderMaps;
use seam::map_error;

/// Writes the config (the maps' sizes the hook indexes by) first, then
/// layouts, pools, tables and receivers, and the destinations last, so a
/// connect() racing with an update never finds a destination whose table
/// is not there yet; destinations no longer in the plan are removed.
pub fn fill(ebpf: &mut Ebpf, plan: &Plan, options: &SenderOptions) -> Result<(), SenderError> {
    fill_maps(ebpf, plan, load_config(options).binder)
}

/// What the hooks of `options` are loaded with: the config row, and the
/// features the settings turn on.
pub fn load_config(options: &SenderOptions) -> LoadConfig {
    LoadConfig {
        binder: binder_config(options, time_wait_stamp_offset()),
        steer_local: u32::from(options.local.is_some()),
        mptcp: options.mptcp.as_config(),
    }
}

/// The config row for `options`, with the kernel's TIME_WAIT stamp offset.
fn binder_config(options: &SenderOptions, tw_stamp_offset: u32) -> BinderConfig {
    let sizes = &options.sizes;
    BinderConfig {
        pacing_rate: options.pacing_rate.map_or(0, |r| r.0),
        tw_stamp_offset,
        socket_mask: sizes.socket_rows() - 1,
        row_slots: sizes.cpus,
        local_placement: options.local_placement.as_config(),
        local_nics: options.nics.policy.as_config(),
        receiver_nics: options.receiver_nics.as_config(),
        sizes: *sizes,
    }
}

/// [`fill`] into any [`BinderMaps`], `config` first and the destinations
/// last; the first failed write stops it (and is the error).
fn fill_maps(
    maps: &mut impl BinderMaps,
    plan: &Plan,
    config: BinderConfig,
) -> Result<(), SenderError> {
    write_rows(maps, CONFIG_MAP, [(0, config)])?;
    fill_layouts(maps, plan)?;
    fill_joints(maps, plan)?;
    write_rows(
        maps,
        TABLES_MAP,
        plan.tables
            .iter()
            .enumerate()
            .map(|(t, table)| (t as u32, table.table)),
    )?;
    fill_receivers(maps, plan, config.row_slots)?;
    fill_nics(maps, plan)?;
    fill_dests(maps, plan)?;
    fill_spread(maps, plan)
}

/// Writes the plan's spread rows (after the destinations they name) and
/// removes every other: a NIC gone down or an address that stopped
/// accepting leaves its rows with the plan that follows the report.
fn fill_spread(maps: &mut impl BinderMaps, plan: &Plan) -> Result<(), SenderError> {
    let present = maps.spread_keys()?;
    for &(key, row) in &plan.spread {
        maps.insert_spread(key, row)?;
    }
    let wanted: BTreeSet<DestKey> = plan.spread.iter().map(|(k, _)| *k).collect();
    for key in present.iter().filter(|k| !wanted.contains(k)) {
        maps.remove_spread(key)?;
    }
    Ok(())
}

/// Where `tcp_timewait_sock.tw_ts_recent_stamp` lies in the running kernel
/// (0: unknown, and the hook then never reuses a TIME_WAIT tuple), read
/// once from its BTF.
fn time_wait_stamp_offset() -> u32 {
    static OFFSET: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        match srap_host::btf::running_member_offset("tcp_timewait_sock", "tw_ts_recent_stamp") {
            Ok(Some(offset)) => offset,
            Ok(None) => {
                warn!(
                    "the kernel's BTF does not show tcp_timewait_sock.tw_ts_recent_stamp: the \
                     binder will skip, not reuse, tuples in TIME_WAIT"
                );
                0
            }
            Err(err) => {
                warn!("{err}: the binder will skip, not reuse, tuples in TIME_WAIT");
                0
            }
        }
    })
}

/// Sets `rows` of the array map `name`, in order.
fn write_rows<V: aya::Pod>(
    maps: &mut impl BinderMaps,
    name: &'static str,
    rows: impl IntoIterator<Item = (u32, V)>,
) -> Result<(), SenderError> {
    for (index, value) in rows {
        maps.set(name, index, value)?;
    }
    Ok(())
}

/// Each layout's row and its rows in the slot, entry and coset pools.
fn fill_layouts(maps: &mut impl BinderMaps, plan: &Plan) -> Result<(), SenderError> {
    let layouts = || plan.layouts.iter();
    write_rows(
        maps,
        LAYOUTS_MAP,
        layouts()
            .enumerate()
            .map(|(l, layout)| (l as u32, layout.layout)),
    )?;
    write_rows(
        maps,
        SLOTS_MAP,
        layouts().flat_map(|l| pool_rows(l.layout.slot_base, &l.slots)),
    )?;
    write_rows(
        maps,
        ENTRIES_MAP,
        layouts().flat_map(|l| pool_rows(l.layout.entry_base, &l.entries)),
    )?;
    write_rows(
        maps,
        COSETS_MAP,
        layouts().flat_map(|l| pool_rows(l.layout.coset_base, &l.cosets)),
    )
}

/// Each joint row and its solutions (both ends planned).
fn fill_joints(maps: &mut impl BinderMaps, plan: &Plan) -> Result<(), SenderError> {
    let joints = || plan.joints.iter();
    write_rows(
        maps,
        JOINTS_MAP,
        joints().enumerate().map(|(j, joint)| (j as u32, joint.row)),
    )?;
    write_rows(
        maps,
        SOLUTIONS_MAP,
        joints().flat_map(|j| pool_rows(j.row.solution_base, &j.solutions)),
    )
}

/// What the hook chooses this host's NIC by: each route table's tables
/// under the NICs (every table's row rewritten: a table no NIC reaches any
/// more gets an empty one), and each node's NIC.
fn fill_nics(maps: &mut impl BinderMaps, plan: &Plan) -> Result<(), SenderError> {
    write_rows(
        maps,
        NIC_TABLES_MAP,
        (0..plan.tables.len() as u32).map(|t| {
            let row = plan.nic_tables.iter().find(|(table, _)| *table == t);
            (t, row.map(|(_, row)| *row).unwrap_or_default())
        }),
    )?;
    write_rows(
        maps,
        NODE_NICS_MAP,
        plan.node_nics
            .iter()
            .enumerate()
            .map(|(n, nic)| (n as u32, *nic)),
    )
}

/// `rows` as (index, row) from `base` in a shared pool.
fn pool_rows<T: Copy>(base: u32, rows: &[T]) -> impl Iterator<Item = (u32, T)> + '_ {
    rows.iter()
        .enumerate()
        .map(move |(i, row)| (base + i as u32, *row))
}

/// Open flows of a receiver's first `slots` slots, from the hooks' slot
/// words (one read per slot in use; `row_slots` words per binder row).
pub fn slot_flows<T: Borrow<MapData>>(
    words: &Array<T, u64>,
    row: (u32, u32),
    slots: u32,
) -> Result<Vec<u32>, SenderError> {
    let word = |index| words.get(&index, 0).map_err(map_error(SLOT_STATE_MAP));
    flows_by_slot(word, row, slots)
}

/// [`slot_flows`], each slot word read by `word` (from its index in
/// [`SLOT_STATE_MAP`]).
fn flows_by_slot(
    word: impl Fn(u32) -> Result<u64, SenderError>,
    (receiver, row_slots): (u32, u32),
    slots: u32,
) -> Result<Vec<u32>, SenderError> {
    (0..slots.min(row_slots))
        .map(|slot| word(receiver * row_slots + slot).map(slot_word::flows))
        .collect()
}

/// Sets each receiver's slot count. The level bitmaps are rebuilt from the
/// slots' counts only when the count changed; the counts themselves (the
/// hooks' slot words) are never written here, so flows still open keep
/// theirs.
fn fill_receivers(
    maps: &mut impl BinderMaps,
    plan: &Plan,
    row_slots: u32,
) -> Result<(), SenderError> {
    // Per row: its slots' open flows when its count changes, and whether
    // no hook can claim in it yet (no slots before).
    let changes: Vec<Option<(Vec<u32>, bool)>> = plan
        .rows()
        .map(|receiver| {
            let now: ReceiverSlots = maps.get(RECEIVERS_MAP, receiver.index)?;
            if now.slots == receiver.slots {
                return Ok(None);
            }
            let word = |index| maps.get(SLOT_STATE_MAP, index);
            let flows = flows_by_slot(word, (receiver.index, row_slots), receiver.slots)?;
            Ok(Some((flows, now.slots == 0)))
        })
        .collect::<Result<_, SenderError>>()?;
    for (receiver, change) in plan.rows().zip(&changes) {
        if change.as_ref().is_some_and(|(_, unclaimable)| *unclaimable) {
            scatter_turns(maps, (receiver.index, row_slots), receiver.slots)?;
        }
    }
    for (receiver, change) in plan.rows().zip(changes) {
        let Some((flows, _)) = change else {
            continue;
        };
        let now: ReceiverSlots = maps.get(RECEIVERS_MAP, receiver.index)?;
        let rebuilt = ReceiverSlots::rebuilt(receiver.slots, &flows, &now);
        maps.set(RECEIVERS_MAP, receiver.index, rebuilt)?;
    }
    Ok(())
}

/// Starts each unused slot's port rotation (a word still 0: no flow, no
/// turn taken) of binder row `receiver`, which no hook can claim in yet (it
/// had no slots), at a random turn, before its slot count is set. From one
/// plan, two hosts or two runs then take different ports first: SRAP's
/// ports are no more predictable than its plan makes them (RFC 6056: an
/// off-path attacker must guess a connection's port). A turn of its own per
/// slot, not one per row: the first round of connects then varies many
/// port directions, so a closed loop catches a wrong key at once and a
/// learner sees more of a rotation sooner (with one turn per row, a
/// misreported key can agree with every early landing and go unlearned).
/// It costs the kernel's bind a cold hash bucket per connect
/// (docs/binder.md, "What it costs"). A word in use is left alone: it
/// counts open flows.
fn scatter_turns(
    maps: &mut impl BinderMaps,
    (receiver, row_slots): (u32, u32),
    slots: u32,
) -> Result<(), SenderError> {
    let mut random = vec![0u8; 4 * slots.min(row_slots) as usize];
    if getrandom::fill(&mut random).is_err() {
        // Predictable rotations still steer: nothing to stop for.
        return Ok(());
    }
    for (slot, bytes) in (0..).zip(random.chunks_exact(4)) {
        let index = receiver * row_slots + slot;
        let word: u64 = maps.get(SLOT_STATE_MAP, index)?;
        if word != 0 {
            continue;
        }
        let turn = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        maps.set(SLOT_STATE_MAP, index, u64::from(turn) * slot_word::TURN)?;
    }
    Ok(())
}

fn fill_dests(maps: &mut impl BinderMaps, plan: &Plan) -> Result<(), SenderError> {
    put_dests(maps, plan, &BTreeSet::new())
}

/// Puts the plan's destinations in the binder's map, except those toward
/// the receivers (binder rows) in `paused`, which are taken out: connects
/// to them miss and keep the kernel's port (the binder fails open), while
/// every other receiver steers on.
pub fn fill_dests_except(
    ebpf: &mut Ebpf,
    plan: &Plan,
    paused: &BTreeSet<u32>,
) -> Result<(), SenderError> {
    put_dests(ebpf, plan, paused)
}

/// [`fill_dests_except`] into any [`BinderMaps`]: every wanted destination
/// written first, then the stale ones removed.
fn put_dests(
    maps: &mut impl BinderMaps,
    plan: &Plan,
    paused: &BTreeSet<u32>,
) -> Result<(), SenderError> {
    let present = maps.dest_keys()?;
    let (active, stale) = dest_changes(&plan.dests, paused, present);
    for &(key, value) in active {
        maps.insert_dest(key, value)?;
    }
    for key in &stale {
        maps.remove_dest(key)?;
    }
    Ok(())
}

/// What [`fill_dests_except`] writes into a map holding `present`: the
/// plan's destinations toward receivers not `paused` (each written, so a
/// re-plan's new values replace the old), and the keys to take out (every
/// other one there: a paused receiver's, a destination the plan dropped).
fn dest_changes<'p>(
    dests: &'p [(DestKey, DestValue)],
    paused: &BTreeSet<u32>,
    present: impl IntoIterator<Item = DestKey>,
) -> (Vec<&'p (DestKey, DestValue)>, Vec<DestKey>) {
    let active: Vec<_> = dests
        .iter()
        .filter(|(_, v)| !paused.contains(&v.receiver))
        .collect();
    let wanted: BTreeSet<DestKey> = active.iter().map(|(k, _)| *k).collect();
    let stale = present
        .into_iter()
        .filter(|k| !wanted.contains(k))
        .collect();
    (active, stale)
}

/// The binder's outcome counters, summed over CPUs, by [`outcome`] index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinderStats {
    pub counts: [u64; COUNTERS as usize],
    /// The binds the kernel refused ([`outcome::BIND_REFUSED`]) by errno,
    /// those that happened only, in errno order.
    pub bind_errnos: Vec<(u32, u64)>,
}

/// All zero (written out: `Default` is derived for arrays of at most 32).
impl Default for BinderStats {
    fn default() -> Self {
        Self {
            counts: [0; COUNTERS as usize],
            bind_errnos: Vec::new(),
        }
    }
}

impl BinderStats {
    pub fn get(&self, outcome: u32) -> u64 {
        self.counts.get(outcome as usize).copied().unwrap_or(0)
    }

    /// Connects SRAP could not steer as planned ([`outcome::FAILURES`]).
    pub fn failures(&self) -> u64 {
        outcome::FAILURES.iter().map(|&o| self.get(o)).sum()
    }
}

/// `steered=N` and every other counter that is not zero, then `(the rest
/// 0)`: most outcomes stay zero on a healthy host, and a line of twenty
/// zeros hides the one that is not.
impl std::fmt::Display for BinderStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = COUNTER_NAMES
            .iter()
            .zip(self.counts)
            .enumerate()
            .filter(|&(i, (_, count))| count > 0 || i as u32 == outcome::STEERED);
        for (_, (name, count)) in shown {
            write!(f, "{name}={count} ")?;
        }
        for (errno, count) in &self.bind_errnos {
            write!(f, "bind_errno_{errno}={count} ")?;
        }
        write!(f, "(the rest 0)")
    }
}

fn open_pinned(layout: &PinLayout, name: &'static str) -> Result<Map, SenderError> {
    let data = MapData::from_pin(layout.map(name)).map_err(map_error(name))?;
    Map::from_map_data(data).map_err(map_error(name))
}

/// What each pinned map takes in kernel memory, as the kernel charges it:
/// the `memlock` line of its fdinfo, which `bpftool map show` prints
/// (`BinderSizes::pinned_bytes` is the formula for it).
pub fn pinned_memory(layout: &PinLayout) -> Result<Vec<(&'static str, u64)>, SenderError> {
    PINNED_MAPS
        .iter()
        .map(|spec| {
            let data = MapData::from_pin(layout.map(spec.name)).map_err(map_error(spec.name))?;
            let fd = data.fd().as_fd().as_raw_fd();
            let fdinfo = format!("/proc/self/fdinfo/{fd}");
            let text = std::fs::read_to_string(&fdinfo).map_err(|source| SenderError::Io {
                what: format!("reading {fdinfo} ({})", spec.name),
                source,
            })?;
            let memlock = text
                .lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| {
                    SenderError::Input(format!("{fdinfo} ({}) has no memlock line", spec.name))
                })?;
            Ok((spec.name, memlock))
        })
        .collect()
}

/// Reads the pinned stats map (works from any process, agent or not).
pub fn read_stats(layout: &PinLayout) -> Result<BinderStats, SenderError> {
    let map = open_pinned(layout, STATS_MAP)?;
    let stats: PerCpuArray<_, u64> = PerCpuArray::try_from(map).map_err(map_error(STATS_MAP))?;
    let mut out = BinderStats::default();
    for (i, count) in out.counts.iter_mut().enumerate() {
        let per_cpu = stats.get(&(i as u32), 0).map_err(map_error(STATS_MAP))?;
        *count = per_cpu.iter().sum();
    }
    out.bind_errnos = read_bind_errnos(layout)?;
    Ok(out)
}

/// The nonzero counts of [`BIND_ERRNOS_MAP`], by errno.
fn read_bind_errnos(layout: &PinLayout) -> Result<Vec<(u32, u64)>, SenderError> {
    let map = open_pinned(layout, BIND_ERRNOS_MAP)?;
    let errnos: PerCpuArray<_, u64> =
        PerCpuArray::try_from(map).map_err(map_error(BIND_ERRNOS_MAP))?;
    let mut out = Vec::new();
    for errno in 0..BIND_ERRNOS {
        let per_cpu = errnos.get(&errno, 0).map_err(map_error(BIND_ERRNOS_MAP))?;
        let count: u64 = per_cpu.iter().sum();
        if count > 0 {
            out.push((errno, count));
        }
    }
    Ok(out)
}

/// Open flows per slot of receiver `receiver` (its slots in use).
pub fn read_occupancy(layout: &PinLayout, receiver: u32) -> Result<Vec<u32>, SenderError> {
    let row = read_receiver(layout, receiver)?;
    let row_slots = read_config(layout)?.row_slots;
    let words: Array<_, u64> =
        Array::try_from(open_pinned(layout, SLOT_STATE_MAP)?).map_err(map_error(SLOT_STATE_MAP))?;
    slot_flows(&words, (receiver, row_slots), row.slots)
}

/// The binder's config as the agent last wrote it (pacing, the maps'
/// sizes).
pub fn read_config(layout: &PinLayout) -> Result<BinderConfig, SenderError> {
    let config: Array<_, BinderConfig> =
        Array::try_from(open_pinned(layout, CONFIG_MAP)?).map_err(map_error(CONFIG_MAP))?;
    config.get(&0, 0).map_err(map_error(CONFIG_MAP))
}

/// Slot words per binder row of a loaded binder (its config's).
pub fn row_slots(ebpf: &Ebpf) -> Result<u32, SenderError> {
    let map = ebpf
        .map(CONFIG_MAP)
        .ok_or(SenderError::Missing(CONFIG_MAP))?;
    let config: Array<_, BinderConfig> = Array::try_from(map).map_err(map_error(CONFIG_MAP))?;
    Ok(config.get(&0, 0).map_err(map_error(CONFIG_MAP))?.row_slots)
}

/// The next turn of slot `slot`'s port rotation in binder row `receiver`
/// (a fresh row's rotations start at random turns: `scatter_turns`).
pub fn read_turn(layout: &PinLayout, receiver: u32, slot: u32) -> Result<u32, SenderError> {
    let row_slots = read_config(layout)?.row_slots;
    if slot >= row_slots {
        return Err(SenderError::Input(format!(
            "slot {slot} is past the binder's {row_slots} slots per receiver"
        )));
    }
    let words: Array<_, u64> =
        Array::try_from(open_pinned(layout, SLOT_STATE_MAP)?).map_err(map_error(SLOT_STATE_MAP))?;
    words
        .get(&(receiver * row_slots + slot), 0)
        .map(slot_word::turn)
        .map_err(map_error(SLOT_STATE_MAP))
}

/// Receiver `receiver`'s row: its slot count and the connects that found
/// their slot dry.
pub fn read_receiver(layout: &PinLayout, receiver: u32) -> Result<ReceiverSlots, SenderError> {
    let map = open_pinned(layout, RECEIVERS_MAP)?;
    let receivers: Array<_, ReceiverSlots> =
        Array::try_from(map).map_err(map_error(RECEIVERS_MAP))?;
    receivers
        .get(&receiver, 0)
        .map_err(map_error(RECEIVERS_MAP))
}

/// The grant in force toward receiver `receiver` (its pinned `SRAP_GRANTS`
/// row; works from any process, so a bench or `srap` can see what the
/// agent applied).
pub fn read_grant(layout: &PinLayout, receiver: u32) -> Result<SlotGrant, SenderError> {
    let map = open_pinned(layout, GRANTS_MAP)?;
    let grants: Array<_, SlotGrant> = Array::try_from(map).map_err(map_error(GRANTS_MAP))?;
    grants.get(&receiver, 0).map_err(map_error(GRANTS_MAP))
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
