//! Where the binder's programs, links and maps are pinned on bpffs.
//!
//! The pins are the binder's lifetime: a link stays attached as long as its
//! pin exists, whatever happens to the agent, and a restarted agent finds
//! the maps (with their occupancy counts) by name here.

use std::path::{Path, PathBuf};

use srap_common::binder::{
    BIND4_PROGRAM, BIND6_PROGRAM, CONFIG_MAP, CONNECT4_PROGRAM, CONNECT6_PROGRAM, DESTS_MAP,
    LAYOUTS_MAP, RECEIVERS_MAP, RELEASE_PROGRAM, SLOTS_MAP, SOCKETS_MAP, STATS_MAP, TABLES_MAP,
    VALUES_MAP,
};

/// The default pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/srap";

/// Every map the binder uses, all pinned.
pub const MAPS: [&str; 9] = [
    DESTS_MAP,
    TABLES_MAP,
    LAYOUTS_MAP,
    SLOTS_MAP,
    VALUES_MAP,
    RECEIVERS_MAP,
    SOCKETS_MAP,
    STATS_MAP,
    CONFIG_MAP,
];

/// The binder's programs, in attach order: the release hook first, so every
/// socket that the connect hooks steer also frees its slot when it closes,
/// and the bind hooks before the connect hooks, so a socket bound while
/// they attach is never judged by a connect hook without its bind record.
pub const PROGRAMS: [&str; 5] = [
    RELEASE_PROGRAM,
    BIND4_PROGRAM,
    BIND6_PROGRAM,
    CONNECT4_PROGRAM,
    CONNECT6_PROGRAM,
];

/// Paths under one pin directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinLayout {
    dir: PathBuf,
}

impl PinLayout {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A map's pin: `<dir>/<MAP_NAME>`.
    pub fn map(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A program's pin: `<dir>/<program>`.
    pub fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The pin of a program's cgroup link: `<dir>/<program>_link`.
    pub fn link(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}_link"))
    }

    /// Every pin the binder makes, links first (the order to remove them in:
    /// unpinning a link detaches its program at once).
    pub fn all_pins(&self) -> Vec<PathBuf> {
        let links = PROGRAMS.iter().map(|p| self.link(p));
        let programs = PROGRAMS.iter().map(|p| self.program(p));
        let maps = MAPS.iter().map(|m| self.map(m));
        links.chain(programs).chain(maps).collect()
    }

    /// True if every link is pinned: the binder is attached.
    pub fn links_pinned(&self) -> bool {
        PROGRAMS.iter().all(|p| self.link(p).exists())
    }
}
