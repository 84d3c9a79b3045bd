//! The series the Grafana dashboard (`deploy/helm/srap/dashboards/
//! srap.json`) queries, read from its panels' and variables' PromQL, so a
//! test can hold them to what the agents export: a renamed metric or label
//! value would leave a panel empty without any error.

use std::{collections::BTreeSet, path::PathBuf};

/// The dashboard's path in the workspace.
pub fn dashboard_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/srap/dashboards/srap.json")
}

/// One metric a query names, with the `label="value"` matchers it puts on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub metric: String,
    pub matchers: Vec<(String, String)>,
}

/// Every query of the dashboard: panel targets' `expr` and the variables'
/// `query` (a string, or an object with one).
pub fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(dashboard, &mut out);
    out
}

fn collect(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("expr" | "query", serde_json::Value::String(text)) => out.push(text.clone()),
                    _ => collect(item, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

/// The `srap_…` metrics `query` names, each with its equality matchers
/// (`=~`, `!=` and `$variable` values are not facts about the export).
pub fn series(query: &str) -> BTreeSet<Series> {
    let mut out = BTreeSet::new();
    let mut rest = query;
    while let Some(at) = rest.find("srap_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let (metric, after) = tail.split_at(end);
        let matchers = after
            .strip_prefix('{')
            .and_then(|m| m.split_once('}'))
            .map(|(inside, _)| equalities(inside))
            .unwrap_or_default();
        out.insert(Series {
            metric: metric.to_owned(),
            matchers,
        });
        rest = after;
    }
    out
}

fn equalities(inside: &str) -> Vec<(String, String)> {
    inside
        .split(',')
        .filter_map(|m| {
            let (label, value) = m.split_once('=')?;
            let value = value.strip_prefix('"')?.strip_suffix('"')?;
            let plain = !label.ends_with('!') && !value.starts_with('$');
            plain.then(|| (label.trim().to_owned(), value.to_owned()))
        })
        .collect()
}

/// Every series the dashboard queries.
pub fn dashboard_series() -> BTreeSet<Series> {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    queries(&json).iter().flat_map(|q| series(q)).collect()
}

/// The series of `wanted` that `scrape` (an agent's Prometheus
/// text) lacks: a metric with no `# TYPE` line, or matchers no sample of it
/// has.
pub fn missing_from(scrape: &str, wanted: &BTreeSet<Series>) -> Vec<Series> {
    wanted
        .iter()
        .filter(|s| !present(scrape, s))
        .cloned()
        .collect()
}

fn present(scrape: &str, series: &Series) -> bool {
    let typed = scrape
        .lines()
        .any(|l| l.starts_with(&format!("# TYPE {} ", series.metric)));
    let sampled = || {
        scrape.lines().any(|l| {
            l.strip_prefix(&series.metric).is_some_and(|rest| {
                rest.starts_with('{')
                    && series
                        .matchers
                        .iter()
                        .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
            })
        })
    };
    typed && (series.matchers.is_empty() || sampled())
}

/// Which agent's `/metrics` a series comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    Receiver,
    Sender,
}

/// Panics naming every series of the dashboard that `agent`'s real scrape
/// lacks (its metric or a label value a panel selects).
pub fn check_scrape(agent: Agent, scrape: &str) {
    let table = match agent {
        Agent::Receiver => srap_status::metrics::METRICS,
        Agent::Sender => srap_status::metrics::SENDER_METRICS,
    };
    let wanted: BTreeSet<Series> = dashboard_series()
        .into_iter()
        .filter(|s| table.iter().any(|(name, _, _)| *name == s.metric))
        .collect();
    assert!(
        !wanted.is_empty(),
        "the dashboard queries no {agent:?} series"
    );
    let missing = missing_from(scrape, &wanted);
    assert!(
        missing.is_empty(),
        "the dashboard queries series the {agent:?} agent's /metrics lacks: {missing:?}\n{scrape}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_gives_its_metrics_and_their_equality_matchers() {
        let got = series(
            "sum by (outcome) (rate(srap_sender_binder_total{outcome!=\"released\",\
             instance=~\"$s\"}[5m])) / srap_collisions{kind=\"cpu\",instance=\"$x\"}",
        );
        let want = [
            Series {
                metric: "srap_collisions".into(),
                matchers: vec![("kind".into(), "cpu".into())],
            },
            Series {
                metric: "srap_sender_binder_total".into(),
                matchers: vec![],
            },
        ];
        assert_eq!(got.into_iter().collect::<Vec<_>>(), want);
    }

    #[test]
    fn a_matcher_no_sample_has_is_missing() {
        let scrape = "# TYPE srap_collisions gauge\nsrap_collisions{kind=\"queue\"} 0\n";
        let wanted = series("srap_collisions{kind=\"cpu\"} + srap_collisions{kind=\"queue\"}");
        let missing = missing_from(scrape, &wanted);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].matchers, [("kind".into(), "cpu".into())]);
    }
}
