//! Small formatting helpers shared by the text table and the dashboard.

use ratatui::style::{Color, Modifier, Style};
use srap_common::{
    rss::{KeyProvenance, KeySource},
    wire::LandingVerdict,
};
use srap_status::{PeerRow, Ratio, ReceiveCpu, Status};

pub fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// `0.93`; never `-0.00` (a sum of no rates is -0.0 in Rust).
pub fn gbps(value: f64) -> String {
    format!("{:.2}", value + 0.0)
}

pub fn cov(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// `4/4 (100%)`, or `-` with nothing to judge.
pub fn ratio(ratio: Ratio) -> String {
    ratio.value().map_or_else(
        || "-".to_owned(),
        |v| format!("{}/{} ({:.0}%)", ratio.matched, ratio.total, v * 100.0),
    )
}

/// How the observer runs, in a few words, then what it runs without.
pub fn observer(status: &Status) -> String {
    let mut text = match (&status.observer.hook, &status.observer.error) {
        (Some(hook), None) => hook.clone(),
        (Some(hook), Some(error)) => format!("{hook}, failing: {error}"),
        (None, Some(error)) => format!("off: {error}"),
        (None, None) => "off".to_owned(),
    };
    for limit in &status.observer.limits {
        text.push_str(&format!("; without {}: {}", limit.missing, limit.detail));
    }
    text
}

/// `3 s ago` relative to the snapshot's own clock.
pub fn ago(now_ms: u64, then_ms: Option<u64>) -> String {
    then_ms.map_or_else(
        || "never".to_owned(),
        |then| format!("{} s ago", now_ms.saturating_sub(then) / 1000),
    )
}

/// The closed loop's verdict on the served description, as both views say
/// it, and where its key comes from when the driver did not report it.
pub fn landings(status: &Status) -> String {
    let l = status.landings;
    let counts = format!("{}/{}", l.matched, l.judged);
    let verdict = match l.verdict {
        LandingVerdict::Agreed => format!("landings agree {counts}"),
        LandingVerdict::Contradicted => format!("landings CONTRADICT the description {counts}"),
        LandingVerdict::TupleRewritten => "a sender's tuples are REWRITTEN on the way".to_owned(),
        LandingVerdict::Unknown => "landings not judged yet".to_owned(),
    };
    let learning = &status.learning;
    let c = learning.confidence;
    if learning.key_source.is_empty()
        || (learning.source == KeySource::Reported && c.agreeing == c.tested)
    {
        return verdict;
    }
    let model = if learning.source == KeySource::Learned {
        format!(", model {}", learning.revision)
    } else {
        String::new()
    };
    format!("{verdict}; key {}{model} ({c})", learning.key_source)
}

/// A key's provenance in a few characters, for a table cell: `reported`,
/// `kernel`, `learned m2`, `unknown`, then the bits planning needs that
/// the landings determine (`19/19`) once any are needed.
pub fn key_brief(key: Option<&KeyProvenance>) -> String {
    let Some(key) = key else {
        return "-".to_owned();
    };
    let mut text = match key.source {
        KeySource::Reported => "reported".to_owned(),
        KeySource::KernelDefault => "kernel".to_owned(),
        KeySource::Learned => format!("learned m{}", key.revision),
        KeySource::Unknown => "unknown".to_owned(),
    };
    let c = key.confidence;
    if c.needed > 0 {
        text.push_str(&format!(" {}/{}", c.known, c.needed));
    }
    text
}

/// The title of a flow's receive CPU: `emu.cpu` where the receive CPUs
/// are the description's emulated ones (a device without RSS), else `cpu`.
pub fn cpu_title(status: &Status) -> &'static str {
    match status.receive_cpu {
        ReceiveCpu::Observed => "cpu",
        ReceiveCpu::Emulated => "emu.cpu",
    }
}

/// The one-line summary `--once` starts with.
pub fn summary(status: &Status) -> String {
    let kind = match status.receive_cpu {
        ReceiveCpu::Observed => "CPUs",
        ReceiveCpu::Emulated => "emulated CPUs",
    };
    format!(
        "{} active flows, {} Gbit/s; collisions: {} queues, {} {kind}; \
         prediction: queue {}, plan {}",
        status.active_flows,
        gbps(status.gbps),
        status.collisions.queues,
        status.cpu_collisions(),
        ratio(status.accuracy.queue),
        ratio(status.accuracy.plan),
    )
}

/// What the NIC's own RSS hash of the active flows says of the served
/// key, in one line: how many agree, how many differ, or why there is none.
pub fn nic_hash(status: &Status) -> String {
    let n = status.nic_hash;
    if !n.read {
        return "NIC hash: not read (only the tc ingress hook reads it: --hook tc)".to_owned();
    }
    let judged = n.agree + n.differ;
    let without = if n.none > 0 && judged > 0 {
        format!("; {} without a hash", n.none)
    } else {
        String::new()
    };
    if judged == 0 && n.none > 0 {
        let iface = &status.iface;
        return format!(
            "NIC hash: no hash from the NIC ({} flows; `ethtool -K {iface} rxhash on` hands it over)",
            n.none
        );
    }
    if judged == 0 {
        return "NIC hash: no active flows".to_owned();
    }
    if n.differ == 0 {
        format!(
            "NIC hash: {} of {judged} flows agree with the key{without}",
            n.agree
        )
    } else {
        format!(
            "NIC hash: {} of {judged} flows DIFFER from the key (not the one the device uses){without}",
            n.differ
        )
    }
}

/// Who may connect: `keys …; from …`, or OPEN in capitals for `--open`.
pub fn access(status: &Status) -> String {
    let a = &status.access;
    if a.open {
        return "OPEN to any address, no key (--open)".to_owned();
    }
    let keys = match a.keys.as_slice() {
        [] => "no key".to_owned(),
        [one] => format!("key {one}"),
        many => format!("keys {} (rollover)", many.join(", ")),
    };
    let from = if a.allow.is_empty() {
        "any address".to_owned()
    } else {
        a.allow.join(", ")
    };
    format!("{keys} from {from}")
}

/// A peer's grant: its CPUs, and `(pending)` until its binder applied it.
/// With several NICs served, each NIC's grant by name (`eth0 0-1, eth1
/// 2-3`).
pub fn granted(peer: &PeerRow) -> String {
    let cpus = if peer.granted_nics.is_empty() {
        peer.granted.clone()
    } else {
        peer.granted_nics
            .iter()
            .map(|g| {
                let cpus = if g.cpus.is_empty() { "-" } else { &g.cpus };
                format!("{} {cpus}", g.nic)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (cpus.is_empty(), peer.grant_applied) {
        (true, _) => "-".into(),
        (false, true) => cpus,
        (false, false) => format!("{cpus} (pending)"),
    }
}

/// Titles and headers.
pub fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// Collisions, contradictions, a receiver away.
pub fn red() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

/// What is as planned.
pub fn green() -> Style {
    Style::new().fg(Color::Green)
}

/// Column headers.
pub fn header() -> Style {
    bold().fg(Color::Cyan)
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_rate_is_zero_not_minus_zero() {
        let none: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(super::gbps(none), "0.00");
        assert_eq!(super::gbps(12.954), "12.95");
    }

    #[test]
    fn a_grant_per_nic_is_shown_by_nic() {
        use srap_status::{NicGrantRow, PeerRow};
        let mut peer = PeerRow {
            granted: "0".into(),
            grant_applied: true,
            ..PeerRow::default()
        };
        assert_eq!(super::granted(&peer), "0");
        peer.granted_nics = vec![
            NicGrantRow {
                nic: "eth0".into(),
                cpus: "0".into(),
            },
            NicGrantRow {
                nic: "eth1".into(),
                cpus: "2-3".into(),
            },
        ];
        assert_eq!(super::granted(&peer), "eth0 0, eth1 2-3");
        peer.grant_applied = false;
        assert_eq!(super::granted(&peer), "eth0 0, eth1 2-3 (pending)");
    }
}
