//! The receiver's RSS description for the offline commands (`srap predict`,
//! `srap odds`): `--rss FILE`, or the embedded 32-queue default.

use std::path::Path;

use srap_common::rss::{RssDescription, RssModel, embedded_default};

/// Loads `--rss FILE`, or the embedded default (saying so on stderr).
pub fn load(path: Option<&Path>) -> anyhow::Result<RssModel> {
    match path {
        Some(path) => Ok(RssDescription::load(path)?.1),
        None => {
            eprintln!(
                "srap: no --rss FILE given: using the embedded 32-queue receiver \
                 (describe a real NIC in a file: see docs/how-it-works.md, \"RSS description file\")"
            );
            Ok(RssModel::from_description(&embedded_default())?)
        }
    }
}

/// One line that says which receiver a result is for.
pub fn summary(model: &RssModel) -> String {
    let key = model.key().to_string();
    format!(
        "receiver: {} CPUs reachable over {} queues, {}-entry table, key {}…, xfrm {}",
        model.reachable_cpus().len(),
        model.queue_cpu().len(),
        model.indir().len(),
        &key[..key.len().min(23)],
        model.xfrm(),
    )
}
