//! The occupancy audit: at every interval the sender agent checks that the
//! binder's occupancy (each receiver CPU slot's flow count) is what its
//! socket table says, and that every record of the table is an open socket
//! in the kernel; it repairs what stays wrong, counts it and says once
//! what it found. The binder keeps its promise (one flow per receiver CPU)
//! from that occupancy, so a drift quietly puts flows together; a repair
//! is a bug report, and the tests expect none.
//!
//! [`core`] judges (no I/O); this module reads the pinned maps and the
//! kernel's sockets, and repairs in kernel context through
//! `srap_occupancy_repair` (`srap_common::repair`).

pub mod core;
mod kernel;

use std::{
    collections::{BTreeMap, HashSet},
    os::fd::AsFd as _,
};

use aya::{Ebpf, programs::Xdp};
use srap_common::{
    binder::{LOCAL_ROW, SocketRecord},
    repair::{REPAIR_PROGRAM, RepairRequest, op, result},
};
use srap_status::sender::OccupancyRow;
use tracing::{debug, warn};

use self::core::{CountMismatch, Findings, Snapshot, Stability, StaleRecord};
pub use self::kernel::{AuditError, open_sockets, read_records, read_words};
use super::binder::RunningBinder;
use crate::sock_diag::SocketSeen;

/// The audit's state between intervals: what the last audit saw, what it
/// repaired, what it said.
#[derive(Debug, Default)]
pub struct OccupancyAudit {
    stability: Stability,
    counts: OccupancyRow,
    /// Cookies found in two records at once, while a record of theirs is
    /// left.
    doubled: HashSet<u64>,
    /// Finding kinds already logged at warn level.
    warned: HashSet<&'static str>,
    /// Why the last audit could not run, logged once until it runs again.
    failing: Option<String>,
    /// Why the last audit judged no record stale (a namespace of the
    /// steered cgroup it could not read), logged once until it can again.
    blind: Option<String>,
}

impl OccupancyAudit {
    /// The counts for the status (`srap status --sender`, `/metrics`).
    pub fn row(&self) -> OccupancyRow {
        self.counts.clone()
    }

    /// One audit: read, judge, repair what is stable.
    pub fn tick(&mut self, binder: &mut RunningBinder) {
        match self.audit(binder) {
            Ok(()) => {
                if self.failing.take().is_some() {
                    warn!("occupancy audit: running again");
                }
            }
            Err(err) => {
                let text = err.to_string();
                if self.failing.as_deref() != Some(&text) {
                    warn!("occupancy audit: {text}; the occupancy goes unchecked meanwhile");
                }
                self.failing = Some(text);
            }
        }
    }

    fn audit(&mut self, binder: &mut RunningBinder) -> Result<(), AuditError> {
        let Read {
            snapshot,
            seen,
            blind,
        } = take_snapshot(binder)?;
        self.counts.audits += 1;
        if blind != self.blind {
            match &blind {
                Some(why) => warn!(
                    "occupancy audit: no socket record is checked against the kernel's \
                     sockets while {why} (slot counts still are)"
                ),
                None => warn!("occupancy audit: socket records are checked again"),
            }
            self.blind = blind;
        }
        let found = core::examine(&snapshot);
        let stable = self.stability.confirm(&found);
        self.remember_doubled(&snapshot.records);
        if stable != Findings::default() {
            self.repair(binder, &stable, &seen)?;
            // What the repairs touched must be seen twice afresh.
            self.stability.clear();
        }
        Ok(())
    }

    /// Keeps the cookies ever found in two records at once while any
    /// record of theirs is left: when the socket closes, one is forgotten
    /// and the other goes stale, and its log line says where it came from.
    fn remember_doubled(&mut self, records: &[(u32, u64, SocketRecord)]) {
        let present: HashSet<u64> = records.iter().map(|(_, cookie, _)| *cookie).collect();
        self.doubled.retain(|cookie| present.contains(cookie));
        self.doubled.extend(doubled_cookies(records));
    }

    /// Repairs the stable findings (stale records first: freeing one moves
    /// its slot's word, so a mismatch there waits for the next audits).
    fn repair(
        &mut self,
        binder: &mut RunningBinder,
        stable: &Findings,
        seen: &BTreeMap<u64, SocketSeen>,
    ) -> Result<(), AuditError> {
        let mut touched = HashSet::new();
        for stale in &stable.stale {
            let request = RepairRequest {
                op: op::FORGET,
                cookie: stale.cookie,
                ..RepairRequest::default()
            };
            if run(&mut binder.ebpf, REPAIR_PROGRAM, request)?.result == result::DONE {
                self.counts.stale_records += 1;
                self.counts.repaired += 1;
                touched.insert((stale.held.receiver, stale.held.slot));
                let what = describe_stale(binder, stale, seen.get(&stale.cookie), &self.doubled);
                self.say("stale", what);
            }
        }
        for mismatch in &stable.mismatches {
            if touched.contains(&(mismatch.receiver, mismatch.slot)) {
                continue;
            }
            let request = RepairRequest {
                op: op::SET_FLOWS,
                receiver: mismatch.receiver,
                slot: mismatch.slot,
                expected: mismatch.word,
                value: u64::from(mismatch.records),
                ..RepairRequest::default()
            };
            if run(&mut binder.ebpf, REPAIR_PROGRAM, request)?.result == result::DONE {
                self.counts.count_mismatches += 1;
                self.counts.repaired += 1;
                self.say("count", describe_mismatch(binder, mismatch));
            }
        }
        Ok(())
    }

    /// Logs a repair: at warn level the first of its kind, then at debug.
    fn say(&mut self, kind: &'static str, what: String) {
        self.counts.last = Some(what.clone());
        if self.warned.insert(kind) {
            warn!(
                "occupancy audit: repaired {what}. A repair is a bug report: please file one \
                 with this line (docs/troubleshooting.md, `occupancy_repaired`). Said once for \
                 this kind; `srap status --sender` counts them all."
            );
        } else {
            debug!("occupancy audit: repaired {what}");
        }
    }
}

/// Reads one snapshot: the slot words, the socket table, the kernel's
/// sockets, the slot words again.
fn take_snapshot(binder: &RunningBinder) -> Result<Read, AuditError> {
    let layout = &binder.layout;
    let mut plan_rows: Vec<u32> = binder.plan.receivers.iter().map(|r| r.index).collect();
    if binder.plan.local.is_some() {
        plan_rows.push(LOCAL_ROW);
    }
    let early = read_records(layout)?;
    let rows = core::rows_to_read(&plan_rows, &early);
    let before = read_words(layout, &rows)?;
    let records = read_records(layout)?;
    let sockets = open_sockets(&binder.cgroup);
    let after = read_words(layout, &rows)?;
    let (open, seen, blind) = match sockets {
        Ok(seen) => {
            let open = seen
                .iter()
                .filter(|(_, s)| s.open)
                .map(|(c, _)| *c)
                .collect();
            (Some(open), seen, None)
        }
        Err(err) => (None, BTreeMap::new(), Some(err.to_string())),
    };
    let snapshot = Snapshot {
        before,
        after,
        records,
        open,
    };
    Ok(Read {
        snapshot,
        seen,
        blind,
    })
}

/// What one audit read: the snapshot judged, every socket the kernel
/// listed (for the log), and why no record could be judged stale.
struct Read {
    snapshot: Snapshot,
    seen: BTreeMap<u64, SocketSeen>,
    blind: Option<String>,
}

/// Cookies two rows of the table hold at once.
fn doubled_cookies(records: &[(u32, u64, SocketRecord)]) -> HashSet<u64> {
    let mut once = HashSet::new();
    records
        .iter()
        .filter(|(_, cookie, _)| !once.insert(*cookie))
        .map(|(_, cookie, _)| *cookie)
        .collect()
}

/// A slot as the log names it: its receiver, and the CPU the plan gives it.
fn slot_name(binder: &RunningBinder, receiver: u32, slot: u32) -> String {
    if receiver == LOCAL_ROW {
        return format!("this host's CPU slot {slot}");
    }
    let Some(plan) = binder.plan.receivers.iter().find(|r| r.index == receiver) else {
        return format!("binder row {receiver} (no receiver planned there now), CPU slot {slot}");
    };
    let cpu = plan
        .tables
        .first()
        .and_then(|t| binder.plan.tables.get(*t))
        .and_then(|t| t.slots().get(slot as usize))
        .map_or_else(String::new, |s| format!(" (its CPU {})", s.cpu));
    format!("receiver {} CPU slot {slot}{cpu}", plan.receiver)
}

fn describe_stale(
    binder: &RunningBinder,
    stale: &StaleRecord,
    seen: Option<&SocketSeen>,
    doubled: &HashSet<u64>,
) -> String {
    let held = if stale.held.receiver == SocketRecord::NONE {
        "no slot (a bind(addr, 0) mark)".to_owned()
    } else {
        let mut held = slot_name(binder, stale.held.receiver, stale.held.slot);
        if stale.held.local != SocketRecord::NONE {
            held.push_str(&format!(" and this host's CPU slot {}", stale.held.local));
        }
        held
    };
    let socket = match seen {
        Some(s) => format!(
            "{} -> {}, closed by its application (kernel state {})",
            s.local,
            s.remote,
            state_name(s.state)
        ),
        None => "gone from the kernel, or in TIME_WAIT, which the audit does not list \
                 (addresses unknown)"
            .to_owned(),
    };
    let origin = if doubled.contains(&stale.cookie) {
        "; the socket had two records at once (it was bound with port 0 before its \
         connect): its close forgot only one"
    } else {
        "; its close did not forget it"
    };
    format!(
        "a stale socket record: row {} of the socket table, cookie {}, holding {held}; the \
         socket: {socket}{origin}. Its slot's flow was freed",
        stale.index, stale.cookie
    )
}

fn describe_mismatch(binder: &RunningBinder, m: &CountMismatch) -> String {
    format!(
        "a count mismatch: {} counted {} flow(s) while {} socket record(s) hold it, \
         unchanged over two audits (a claim never recorded nor released, or a release \
         lost); its count is now {}",
        slot_name(binder, m.receiver, m.slot),
        m.flows(),
        m.records,
        m.records
    )
}

/// `TCP_*` state names, for the log.
fn state_name(state: u8) -> &'static str {
    match state {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        11 => "CLOSING",
        _ => "other",
    }
}

/// Runs `program` of the loaded object once on `request` (loading it into
/// the kernel first if need be) and returns the request as it wrote it:
/// how the agent repairs, and how a test makes a drift with the lab
/// object's injector (`srap_harness::drift`).
pub fn run(
    ebpf: &mut Ebpf,
    program: &'static str,
    request: RepairRequest,
) -> Result<RepairRequest, AuditError> {
    let xdp: &mut Xdp = ebpf
        .program_mut(program)
        .ok_or(AuditError::Missing(program))?
        .try_into()
        .map_err(|source| AuditError::Program { program, source })?;
    if xdp.fd().is_err() {
        xdp.load()
            .map_err(|source| AuditError::Program { program, source })?;
    }
    let fd = xdp
        .fd()
        .map_err(|source| AuditError::Program { program, source })?;
    let out = srap_host::bpf_sys::prog_test_run(fd.as_fd(), &request.to_bytes(), 256).map_err(
        |source| AuditError::Io {
            what: "BPF_PROG_TEST_RUN",
            source,
        },
    )?;
    let answer = RepairRequest::from_bytes(&out.data_out).ok_or(AuditError::Answer(program))?;
    if answer.result == result::MISSING {
        return Err(AuditError::Answer(program));
    }
    Ok(answer)
}
