//! Why the binder could not be set up, planned or taken down: one error
//! for the whole sender, each variant naming what to do about it.

use std::{io, net::IpAddr, path::PathBuf};

use srap_common::{
    binder::{BinderSizes, SizeSetting},
    port_tables::PortTableError,
};

/// Why the binder could not be set up or taken down.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    #[error("{0}")]
    Input(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    Host(#[from] srap_host::HostError),
    #[error("steering toward {receiver}{}: {source}", dport.map(|p| format!(" port {p}")).unwrap_or_default())]
    PortTables {
        receiver: IpAddr,
        dport: Option<u16>,
        source: PortTableError,
    },
    #[error("state file {path} is unreadable ({problem}): remove it, then run `srap-agent detach`")]
    State { path: PathBuf, problem: String },
    #[error(
        "{dir} is not on a bpf file system: mount one (`mount -t bpf bpf /sys/fs/bpf`) or pick --pin-dir under it"
    )]
    NotBpffs { dir: PathBuf },
    #[error("pins under {dir} do not match this agent ({detail}): run `srap-agent detach --pin-dir {}` first", dir.display())]
    StalePins { dir: PathBuf, detail: String },
    #[error(
        "the binder pinned under {dir} is attached with maps sized by {pinned}, and this agent's \
         settings size them by {wanted} ({maps}): its occupancy maps hold the slots of the flows \
         open now, so they are not re-created under a running binder. Start the agent with the \
         pinned settings ({pinned}, in the --config file or as flags), or run `srap-agent detach \
         --pin-dir {}` first (flows open then keep their ports, but their CPUs are no longer \
         counted)",
        dir.display()
    )]
    PinnedSizes {
        dir: PathBuf,
        pinned: String,
        wanted: String,
        maps: String,
    },
    #[error(
        "{what}: these receivers need {needed}, the binder is sized for {sized} (--{key} {value}): \
         raise --{key} (`{key}` in the --config file){hint}",
        key = setting.key(),
        value = sizes.get(*setting)
    )]
    Capacity {
        what: &'static str,
        needed: u64,
        sized: u64,
        setting: SizeSetting,
        sizes: BinderSizes,
        hint: &'static str,
    },
    #[error(
        "the binder pinned under {pin_dir} is attached to {attached}, not {requested}: \
         run `srap-agent detach --pin-dir {}` first, or use another --pin-dir",
        pin_dir.display()
    )]
    AttachedElsewhere {
        pin_dir: PathBuf,
        attached: PathBuf,
        requested: PathBuf,
    },
    #[error(
        "the agent reserved ports in another network namespace (inode {theirs}, this is {ours}): \
         run detach where the agent ran (e.g. `ip netns exec NS srap-agent detach`)"
    )]
    OtherNetns { theirs: u64, ours: u64 },
    #[error("loading the SRAP eBPF object: {0}")]
    Load(#[source] aya::EbpfError),
    #[error("the SRAP eBPF object has no {0} (agent and eBPF build out of step?)")]
    Missing(&'static str),
    #[error("program {program}: {source}")]
    Program {
        program: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("link of {program}: {source}")]
    Link {
        program: &'static str,
        source: aya::programs::links::LinkError,
    },
    #[error("pinning {path}: {source}")]
    Pin {
        path: PathBuf,
        source: aya::pin::PinError,
    },
    #[error("map {map}: {source}")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
}
