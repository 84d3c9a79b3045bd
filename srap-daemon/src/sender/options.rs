//! What a binder is started and re-planned with ([`SenderOptions`]): the
//! receivers, the ports, the cgroup and pins, and the settings that shape
//! the plan and the hook. Both drivers (`offline` and `follow`) make them
//! from the agent's settings ([`SenderOptions::from_settings`]).

use std::{net::IpAddr, path::PathBuf, sync::Arc};

use srap_common::{binder::BinderSizes, port_range::PortRange, rss::RssModel};

use super::{
    choices::MptcpMode,
    ends::LocalPlacement,
    local::{
        bond::BondSettings,
        nic::LocalNic,
        nics::{GivenNic, NicSettings},
    },
    rate::PacingRate,
    settings::SenderSettings,
    spread::{ReceiverNicsMode, SpreadPeer},
    target::Target,
};

/// What `srap-agent sender` steers, and where.
#[derive(Debug, Clone)]
pub struct SenderOptions {
    /// Each receiver address with its own model (several receiver hosts
    /// may have different NICs).
    pub targets: Vec<Target>,
    /// Destination ports to steer; empty: every port.
    pub ports: Vec<u16>,
    /// The cgroup (default `<cgroup2>/srap`); relative paths are below the mount.
    pub cgroup: Option<PathBuf>,
    pub pin_dir: PathBuf,
    pub pacing_rate: Option<PacingRate>,
    /// Source ports to use (default: the kernel's `ip_local_port_range`).
    pub port_range: Option<PortRange>,
    /// This host's own NIC (a model facing the local end) when each flow
    /// is placed on both NICs (`--steer both`); `None`: the targets' NICs
    /// only.
    pub local: Option<Arc<RssModel>>,
    /// Where each flow's local end goes (`--local-placement`).
    pub local_placement: LocalPlacement,
    /// Whether a bond on the route has its members balanced
    /// (`--bond-members`), and the bonds its counters paused.
    pub bonds: BondSettings,
    /// What the binder's maps are sized for (`--max-*`).
    pub sizes: BinderSizes,
    /// `--local-nics` and the NICs of `--local-iface`, described: what
    /// this host's NICs are read with ([`super::local::LocalHost`]).
    pub nics: NicSettings,
    /// `--receiver-nics`.
    pub receiver_nics: ReceiverNicsMode,
    /// `--mptcp`.
    pub mptcp: MptcpMode,
    /// Under `--receiver-nics spread`, each receiver agent's asked
    /// addresses and NIC report, which the spread rows are made of
    /// ([`super::spread::rows`]).
    pub spread: Vec<SpreadPeer>,
}

impl SenderOptions {
    /// The receiver addresses steered toward, as whatever collection the
    /// caller keeps them in.
    pub fn target_addrs<C: FromIterator<IpAddr>>(&self) -> C {
        self.targets.iter().map(|t| t.addr).collect()
    }
}

impl SenderOptions {
    /// The binder's options for `targets`, the rest from the command line
    /// (the maps' sizes checked: a setting out of range is an error naming it).
    pub fn from_settings(args: &SenderSettings, targets: Vec<Target>) -> anyhow::Result<Self> {
        Ok(Self {
            targets,
            ports: args.ports.clone(),
            cgroup: args.cgroup.clone(),
            pin_dir: args.pin_dir(),
            pacing_rate: args.pacing_rate,
            port_range: args.port_range,
            local: None,
            local_placement: args.local.local_placement(),
            bonds: BondSettings::new(args.bond_members()),
            sizes: args.sizes.sizes()?,
            nics: nic_settings(args),
            receiver_nics: args.receiver_nics(),
            mptcp: args.mptcp(),
            spread: Vec::new(),
        })
    }
}

/// `--local-nics` and each `--local-iface` with its description, read now
/// (blocking: ethtool and netlink). A NIC that cannot be described is
/// listed without one, with a warning: flows are placed on the first
/// `--local-iface` only, which the driver describes itself and for which
/// a failure stops the agent.
fn nic_settings(args: &SenderSettings) -> NicSettings {
    let policy = args.local.local_nics();
    let given = args
        .local
        .local_ifaces
        .iter()
        .map(|name| GivenNic {
            name: name.clone(),
            description: LocalNic::describe(name)
                .map_err(|err| tracing::warn!("{err}: listed without its RSS description"))
                .ok()
                .map(|nic| Arc::new(nic.description)),
        })
        .collect();
    NicSettings {
        policy,
        given,
        source_rules: args.local.source_rules(),
    }
}
