//! The receivers as the plan takes them: each address with the RSS model
//! of its host (its description) and its row in the binder's maps.

use std::{net::IpAddr, sync::Arc};

use srap_common::{
    binder::{FIRST_RECEIVER_ROW, LOCAL_ROW},
    rss::{End, RssModel},
};

/// One receiver address to steer toward, with the RSS model of its host.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its row in the binder's per-receiver maps.
    pub index: u32,
    pub addr: IpAddr,
    pub model: Arc<RssModel>,
}

impl Target {
    /// `receivers` (rows 1, 2, ...), all on one receiver host's `model`;
    /// with a model of this host's own NIC (`--steer local`), all on its
    /// one row, [`LOCAL_ROW`].
    pub fn all(model: &RssModel, receivers: &[IpAddr]) -> Vec<Target> {
        let model = Arc::new(model.clone());
        receivers
            .iter()
            .enumerate()
            .map(|(index, addr)| Target {
                index: match model.end() {
                    End::Remote => FIRST_RECEIVER_ROW + index as u32,
                    End::Local => LOCAL_ROW,
                },
                addr: *addr,
                model: model.clone(),
            })
            .collect()
    }
}
