//! Small formatting helpers shared by the text table and the dashboard.

use srap_common::wire::LandingVerdict;
use srap_host::status::{PeerRow, Ratio, Status};

/// Column titles of the per-flow table, shared by the dashboard and `--once`.
pub const FLOW_COLUMNS: [&str; 10] = [
    "source",
    "destination",
    "queue",
    "cpu",
    "pred.q",
    "pred.cpu",
    "planned",
    "Gbit/s",
    "CoV",
    "moves",
];

pub fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

pub fn gbps(value: f64) -> String {
    format!("{value:.2}")
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

/// How the verifier runs, in a few words.
pub fn verifier(status: &Status) -> String {
    match (&status.verifier.hook, &status.verifier.error) {
        (Some(hook), None) => hook.clone(),
        (Some(hook), Some(error)) => format!("{hook}, failing: {error}"),
        (None, Some(error)) => format!("off: {error}"),
        (None, None) => "off".to_owned(),
    }
}

/// `3 s ago` relative to the snapshot's own clock.
pub fn ago(now_ms: u64, then_ms: Option<u64>) -> String {
    then_ms.map_or_else(
        || "never".to_owned(),
        |then| format!("{} s ago", now_ms.saturating_sub(then) / 1000),
    )
}

/// The closed loop's verdict on the served description, as both views say it.
pub fn landings(status: &Status) -> String {
    let l = status.landings;
    let counts = format!("{}/{}", l.matched, l.judged);
    match l.verdict {
        LandingVerdict::Agreed => format!("landings agree {counts}"),
        LandingVerdict::Contradicted => format!("landings CONTRADICT the description {counts}"),
        LandingVerdict::TupleRewritten => "a sender's tuples are REWRITTEN on the way".to_owned(),
        LandingVerdict::Unknown => "landings not judged yet".to_owned(),
    }
}

/// The one-line summary both views start with.
pub fn summary(status: &Status) -> String {
    format!(
        "{} active flows, {} Gbit/s; collisions: {} queues, {} CPUs (queue_cpu), {} CPUs (verifier); \
         prediction: queue {}, plan {}",
        status.active_flows,
        gbps(status.gbps),
        status.collisions.queues,
        status.collisions.rss_cpus,
        status.collisions.cpus,
        ratio(status.accuracy.queue),
        ratio(status.accuracy.plan),
    )
}

/// A peer's grant: its CPUs, and `(pending)` until its binder applied it.
pub fn granted(peer: &PeerRow) -> String {
    match (peer.granted.is_empty(), peer.grant_applied) {
        (true, _) => "-".into(),
        (false, true) => peer.granted.clone(),
        (false, false) => format!("{} (pending)", peer.granted),
    }
}
