//! Capabilities as the packaged units bound them: read from the unit files
//! in `deploy/systemd/`, and as a process holds them (`/proc/PID/status`,
//! decoded by `capsh`). For the least-privilege tests, which run the agents
//! with exactly their unit's set.

use std::{collections::BTreeSet, process::Command};

/// The receiver's and the sender's units, as the package installs them.
pub const RECEIVER_UNIT: &str = include_str!("../../deploy/systemd/srap-receiver.service");
pub const SENDER_UNIT: &str = include_str!("../../deploy/systemd/srap-sender.service");

/// A unit's `CapabilityBoundingSet`, as setpriv and capsh spell the names
/// (`CAP_NET_ADMIN` → `net_admin`).
pub fn bounding_set(unit: &str) -> Vec<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_default()
        .split_whitespace()
        .map(|cap| cap.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// The effective and bounding capabilities of process `pid`, by name.
pub fn held(pid: u32) -> std::io::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> std::io::Result<BTreeSet<String>> {
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .ok_or_else(|| std::io::Error::other(format!("no {name} in /proc/{pid}/status")))?;
        decode(hex)
    };
    Ok((field("CapEff:")?, field("CapBnd:")?))
}

/// `capsh --decode=HEX`: `0x…=cap_bpf,cap_perfmon` → {"bpf", "perfmon"}.
fn decode(hex: &str) -> std::io::Result<BTreeSet<String>> {
    let out = Command::new("capsh")
        .arg(format!("--decode={hex}"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .trim()
        .rsplit_once('=')
        .map(|(_, names)| {
            names
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| n.trim_start_matches("cap_").to_owned())
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_units_bound_the_agents_to_what_they_need() {
        assert_eq!(bounding_set(RECEIVER_UNIT), ["bpf", "net_admin", "perfmon"]);
        assert_eq!(
            bounding_set(SENDER_UNIT),
            ["bpf", "net_admin", "perfmon", "dac_override"]
        );
    }
}
