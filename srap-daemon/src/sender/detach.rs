//! Taking the binder down: its links (detaching the programs), its pins,
//! the reserved ports an older agent added and the cgroup the agent
//! created, as the state file recorded them, and the source rules
//! `--source-rules install` added (recognized in the kernel by their
//! priority, tables and protocol).

use std::{
    io,
    path::{Path, PathBuf},
};

use srap_host::reserved::{self, Reservation};

use super::{attach, error::SenderError, layout::PinLayout, local::source_rules, state};

/// What [`detach`] removed.
#[derive(Debug, Clone, Default)]
pub struct DetachReport {
    pub pins_removed: usize,
    pub ports_unreserved: usize,
    pub cgroup_removed: Option<PathBuf>,
    /// Source rules and their tables' routes `--source-rules install` had
    /// added (found by SRAP's priority, tables and protocol).
    pub source_rules_removed: usize,
    /// The namespace's MPTCP path manager put back (`--mptcp
    /// follow-reader` had taken it).
    pub path_manager_restored: Option<srap_host::mptcp_pm::PathManagerKind>,
    /// Things left in place, and why.
    pub notes: Vec<String>,
}

/// Removes the links (detaching the programs), the program and map pins, the
/// reserved ports the agent added and the cgroup it created (when empty).
pub fn detach(pin_dir: &Path) -> Result<DetachReport, SenderError> {
    let layout = PinLayout::new(pin_dir);
    let state_path = state::path_for(layout.dir());
    let state = state::load(&state_path)?;
    let netns = state::current_netns();
    if let Some(state) = &state
        && state.netns != netns
        && !state.reserved_added.is_empty()
    {
        return Err(SenderError::OtherNetns {
            theirs: state.netns,
            ours: netns,
        });
    }
    let mut report = DetachReport {
        pins_removed: attach::remove_pins(&layout)?,
        ..DetachReport::default()
    };
    match source_rules::remove_installed() {
        Ok(n) => report.source_rules_removed = n,
        Err(err) => report
            .notes
            .push(format!("the source rules SRAP installed stay: {err}")),
    }
    let Some(state) = state else {
        report.notes.push(format!(
            "no state file {}: only pins removed",
            state_path.display()
        ));
        return Ok(report);
    };
    let added = reserved::parse(&state.reserved_added).map_err(|problem| SenderError::State {
        path: state_path.clone(),
        problem: problem.to_string(),
    })?;
    if !added.is_empty() {
        report.ports_unreserved = Reservation::read(added)?.release()?;
    }
    if let Some(before) = state.path_manager_before {
        match before.install() {
            Ok(()) => report.path_manager_restored = Some(before),
            Err(err) => report
                .notes
                .push(format!("the MPTCP path manager stays userspace: {err}")),
        }
    }
    if state.cgroup_created {
        match std::fs::remove_dir(&state.cgroup) {
            Ok(()) => report.cgroup_removed = Some(state.cgroup.clone()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => report.notes.push(format!(
                "cgroup {} left in place: {err} (processes still in it?)",
                state.cgroup.display()
            )),
        }
    }
    std::fs::remove_file(&state_path).map_err(|source| SenderError::Io {
        what: format!("removing {}", state_path.display()),
        source,
    })?;
    Ok(report)
}
