//! Where the binder's programs, links and maps are pinned on bpffs.
//!
//! The pins are the binder's lifetime: a link stays attached as long as its
//! pin exists, whatever happens to the agent, and a restarted agent finds
//! the maps (with their occupancy counts) by name here.

use std::path::{Path, PathBuf};

use srap_common::{
    binder::{
        BIND4_PROGRAM, BIND6_PROGRAM, CLOSE_PROGRAM, CONNECT4_PROGRAM, CONNECT6_PROGRAM,
        GETPEERNAME4_PROGRAM, GETPEERNAME6_PROGRAM, LoadConfig, PINNED_MAPS, RELEASE_PROGRAM,
        SUBFLOW_CONNECT_PROGRAM, SUBFLOW_CONNECTED_PROGRAM, mptcp,
    },
    receiver_nics,
};

/// The default pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/srap";

/// Every map the binder pins, by name (sizes in [`PINNED_MAPS`]).
pub const MAPS: [&str; PINNED_MAPS.len()] = {
    let mut names = [""; PINNED_MAPS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = PINNED_MAPS[i].name;
        i += 1;
    }
    names
};

/// The binder's programs, in attach order: the release hook and the TCP
/// close's (the kernel sockets' release: MPTCP's subflows) first, so every
/// socket that the connect hooks steer also frees its slot when it closes,
/// and the bind hooks before the connect hooks, so a socket bound while
/// they attach is never judged by a connect hook without its bind record.
/// The `getpeername` hooks come before the connect hooks too, so a socket
/// a connect hook moves to another receiver address always reports the
/// address it asked for.
pub const PROGRAMS: [&str; 8] = [
    RELEASE_PROGRAM,
    CLOSE_PROGRAM,
    GETPEERNAME4_PROGRAM,
    GETPEERNAME6_PROGRAM,
    BIND4_PROGRAM,
    BIND6_PROGRAM,
    CONNECT4_PROGRAM,
    CONNECT6_PROGRAM,
];

/// The tracing programs that tell the bind hooks each further MPTCP
/// subflow's destination, in attach order: the exit's first, so a record
/// the entry's writes is always removed. Not among [`PROGRAMS`]: the
/// binder steers without them (a kernel that refuses them,
/// `super::attach::trace`), and is attached whether or not they are.
pub const TRACE_PROGRAMS: [&str; 2] = [SUBFLOW_CONNECTED_PROGRAM, SUBFLOW_CONNECT_PROGRAM];

/// The programs of [`PROGRAMS`] that hooks loaded with `config` use, in
/// attach order: the `getpeername` hooks only to spread over a receiver's
/// addresses, the TCP close's only for what only it sees (MPTCP's subflows,
/// a spread connect's unanswered SYN).
pub fn programs_for(config: &LoadConfig) -> Vec<&'static str> {
    let spreads = config.binder.receiver_nics == receiver_nics::mode::SPREAD;
    let subflows = config.mptcp != mptcp::OFF;
    PROGRAMS
        .into_iter()
        .filter(|&name| match name {
            GETPEERNAME4_PROGRAM | GETPEERNAME6_PROGRAM => spreads,
            CLOSE_PROGRAM => spreads || subflows,
            _ => true,
        })
        .collect()
}

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
        let all = || PROGRAMS.iter().chain(&TRACE_PROGRAMS);
        let links = all().map(|p| self.link(p));
        let programs = all().map(|p| self.program(p));
        let maps = MAPS.iter().map(|m| self.map(m));
        links.chain(programs).chain(maps).collect()
    }

    /// True if the connect hooks' links are pinned (every setting uses
    /// both): the binder is attached.
    pub fn links_pinned(&self) -> bool {
        [CONNECT4_PROGRAM, CONNECT6_PROGRAM]
            .iter()
            .all(|p| self.link(p).exists())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table the agent pins, checks and fills by is the eBPF object's
    /// own: every pinned map is declared there with these sizes.
    #[test]
    fn pinned_maps_match_the_ebpf_object() {
        let object = aya_obj::Object::parse(crate::ebpf_object()).expect("parse the eBPF object");
        for spec in PINNED_MAPS {
            let map = object
                .maps
                .get(spec.name)
                .unwrap_or_else(|| panic!("{} is not in the eBPF object", spec.name));
            assert_eq!(
                (
                    map.key_size() as usize,
                    map.value_size() as usize,
                    map.max_entries()
                ),
                (
                    spec.key_size,
                    spec.value_size,
                    spec.max_entries(&srap_common::binder::BinderSizes::DEFAULT)
                ),
                "{}",
                spec.name
            );
        }
        for program in PROGRAMS.iter().chain(&TRACE_PROGRAMS) {
            assert!(object.programs.contains_key(*program), "{program}");
        }
    }
}
