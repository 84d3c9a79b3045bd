//! What the occupancy audit reads from the kernel: the binder's pinned
//! slot words and socket table, and the open TCP sockets of every network
//! namespace the steered cgroup's processes use.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    os::{fd::AsFd as _, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use aya::maps::MapData;
use srap_common::binder::{MAX_SLOTS, SLOT_STATE_MAP, SOCKETS_MAP, SocketRecord};
use srap_host::netlink::NetlinkError;

use crate::sender::{attach, layout::PinLayout};
use crate::sock_diag::{SockDiagError, SocketSeen, TcpDiag};

/// Bytes of one socket-table row: cookie, then receiver, slot, local, pad.
const SOCKET_ROW_LEN: usize = size_of::<srap_common::binder::SocketRow>();

/// Why an audit could not run, or a repair could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("map {map}: {source}")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the SRAP eBPF object has no {0} (agent and eBPF build out of step?)")]
    Missing(&'static str),
    #[error("program {program}: {source}")]
    Program {
        program: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("{0} gave no usable answer")]
    Answer(&'static str),
    #[error("loading the binder: {0}")]
    Load(String),
    #[error("the sockets of network namespace {ns} cannot be read ({source})")]
    Namespace {
        ns: String,
        #[source]
        source: NamespaceError,
    },
}

/// Why one network namespace's sockets were not read.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("{0}")]
    Unreadable(#[source] std::io::Error),
    #[error(transparent)]
    NoSockDiag(#[from] SockDiagError),
    #[error("{0}")]
    Dump(#[source] NetlinkError),
    #[error("setns: {0}")]
    Enter(#[source] rustix::io::Errno),
    #[error("the dump thread panicked")]
    Panicked,
}

fn pinned(layout: &PinLayout, map: &'static str) -> Result<MapData, AuditError> {
    MapData::from_pin(layout.map(map)).map_err(|source| AuditError::Map { map, source })
}

/// The socket table's rows in use: (row, cookie, slots held).
pub fn read_records(layout: &PinLayout) -> Result<Vec<(u32, u64, SocketRecord)>, AuditError> {
    let map = pinned(layout, SOCKETS_MAP)?;
    let rows = map
        .info()
        .map_err(|source| AuditError::Map {
            map: SOCKETS_MAP,
            source,
        })?
        .max_entries();
    let bytes = srap_host::bpf_sys::array_values(map.fd().as_fd(), SOCKET_ROW_LEN, 0, rows)
        .map_err(|source| AuditError::Io {
            what: "BPF_MAP_LOOKUP_BATCH of the socket table",
            source,
        })?;
    Ok((0u32..)
        .zip(bytes.chunks_exact(SOCKET_ROW_LEN))
        .filter_map(|(index, row)| parse_row(row).map(|(cookie, held)| (index, cookie, held)))
        .collect())
}

/// One row's cookie and slots, when it is in use (cookie not 0).
fn parse_row(row: &[u8]) -> Option<(u64, SocketRecord)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(row.get(at..at + 4)?.try_into().ok()?))
    };
    let cookie = u64::from_ne_bytes(row.get(0..8)?.try_into().ok()?);
    if cookie == 0 {
        return None;
    }
    let held = SocketRecord {
        receiver: u32_at(8)?,
        slot: u32_at(12)?,
        local: u32_at(16)?,
        _pad: 0,
    };
    Some((cookie, held))
}

/// Every slot word of binder rows `rows`, by (row, slot).
pub fn read_words(
    layout: &PinLayout,
    rows: &[u32],
) -> Result<BTreeMap<(u32, u32), u64>, AuditError> {
    let map = pinned(layout, SLOT_STATE_MAP)?;
    // Words per binder row, as the agent sized the map (`--max-cpus`).
    let row_slots = attach::pinned_sizes(layout).map_or(MAX_SLOTS, |s| s.cpus);
    let mut out = BTreeMap::new();
    for &row in rows {
        let bytes = srap_host::bpf_sys::array_values(
            map.fd().as_fd(),
            size_of::<u64>(),
            row * row_slots,
            row_slots,
        )
        .map_err(|source| AuditError::Io {
            what: "BPF_MAP_LOOKUP_BATCH of the slot words",
            source,
        })?;
        for (slot, word) in (0u32..).zip(bytes.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(word);
            out.insert((row, slot), u64::from_ne_bytes(le));
        }
    }
    Ok(out)
}

/// Every TCP socket, by cookie, of this process's network namespace and of
/// every namespace a process of `cgroup` (or of a cgroup below it) is in:
/// a steered socket lives in the namespace of the process that made it. A
/// namespace that cannot be read is an error (the caller then judges no
/// record stale); a process that exited meanwhile is skipped.
pub fn open_sockets(cgroup: &Path) -> Result<BTreeMap<u64, SocketSeen>, AuditError> {
    let own = namespace_of(Path::new("/proc/thread-self/ns/net")).map_err(|source| {
        AuditError::Namespace {
            ns: "of the agent".into(),
            source,
        }
    })?;
    let mut out = dump_here().map_err(|source| AuditError::Namespace {
        ns: "of the agent".into(),
        source,
    })?;
    let mut done = BTreeSet::from([own]);
    for pid in cgroup_pids(cgroup)? {
        let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let Ok(ns) = namespace_of(&path) else {
            continue; // exited meanwhile
        };
        if !done.insert(ns) {
            continue;
        }
        match dump_in(&path) {
            Ok(seen) => out.extend(seen),
            Err(_) if !Path::new(&format!("/proc/{pid}")).exists() => {}
            Err(source) => {
                return Err(AuditError::Namespace {
                    ns: format!("net:[{ns}] of process {pid}"),
                    source,
                });
            }
        }
    }
    Ok(out)
}

fn namespace_of(path: &Path) -> Result<u64, NamespaceError> {
    fs::metadata(path)
        .map(|m| m.ino())
        .map_err(NamespaceError::Unreadable)
}

fn dump_here() -> Result<BTreeMap<u64, SocketSeen>, NamespaceError> {
    let diag = TcpDiag::loaded()?;
    let seen = diag.sockets_by_cookie().map_err(NamespaceError::Dump)?;
    Ok(seen.into_iter().collect())
}

/// Dumps the sockets of the namespace at `path` from a thread of its own
/// that enters it (a netlink socket belongs to the namespace it was made
/// in), so the agent's threads stay where they are.
fn dump_in(path: &Path) -> Result<BTreeMap<u64, SocketSeen>, NamespaceError> {
    let file = fs::File::open(path).map_err(NamespaceError::Unreadable)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                rustix::thread::move_into_link_name_space(
                    file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(NamespaceError::Enter)?;
                dump_here()
            })
            .join()
            .map_err(|_| NamespaceError::Panicked)?
    })
}

/// The processes of `cgroup` and of every cgroup below it.
fn cgroup_pids(cgroup: &Path) -> Result<Vec<u32>, AuditError> {
    let mut pids = Vec::new();
    let mut dirs = vec![cgroup.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let procs = match fs::read_to_string(dir.join("cgroup.procs")) {
            Ok(text) => text,
            // A child cgroup removed meanwhile.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && dir != cgroup => continue,
            Err(source) => {
                return Err(AuditError::Io {
                    what: "reading the steered cgroup's processes",
                    source,
                });
            }
        };
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        if let Ok(entries) = fs::read_dir(&dir) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_row_reads_as_the_hook_writes_it() {
        let mut row = [0u8; SOCKET_ROW_LEN];
        row[0..8].copy_from_slice(&77u64.to_ne_bytes());
        row[8..12].copy_from_slice(&2u32.to_ne_bytes());
        row[12..16].copy_from_slice(&9u32.to_ne_bytes());
        row[16..20].copy_from_slice(&SocketRecord::NONE.to_ne_bytes());
        let (cookie, held) = parse_row(&row).expect("a row in use");
        assert_eq!(cookie, 77);
        assert_eq!(
            (held.receiver, held.slot, held.local),
            (2, 9, SocketRecord::NONE)
        );
        assert_eq!(parse_row(&[0u8; SOCKET_ROW_LEN]), None, "a free row");
        assert_eq!(SOCKET_ROW_LEN, 24);
    }
}
