//! Loads the lab's RSS-NIC emulator (`srap_rss_nic`, tc egress) onto the
//! sender side of a multi-queue veth, so the peer receives every TCP packet
//! on the queue the given RSS model names — a NIC's RSS, on any Linux box.
//!
//! Dropping the [`Emulator`] detaches it (in the caller's network namespace).
//! [`lab_nic`] is the NIC it emulates unless a test brings its own.

use aya::{
    Ebpf,
    maps::{Array, MapError},
    programs::{ProgramError, SchedClassifier, TcAttachType},
};
use srap_common::{
    emulator::{CONFIG_MAP, EmulatorError, EmulatorTables, INDIR_MAP, PROGRAM, TOEPLITZ_MAP},
    rss::{RssDescription, RssModel, embedded_default},
};
use tracing::info;

#[derive(Debug, thiserror::Error)]
pub enum EmulatorLoadError {
    #[error("loading the SRAP eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("the SRAP eBPF object has no {0}")]
    Missing(&'static str),
    #[error("the RSS description cannot be emulated: {0}")]
    Model(#[from] EmulatorError),
    #[error("filling the emulator's maps: {0}")]
    Map(#[from] MapError),
    #[error("loading or attaching {PROGRAM} to {iface} (tc egress): {source}")]
    Program { iface: String, source: ProgramError },
}

/// The emulator, attached; dropping it detaches.
pub struct Emulator {
    _ebpf: Ebpf,
}

impl Emulator {
    /// Emulates `model` on `iface`, a veth with `queues` TX queues (its peer's
    /// RX queues), in the calling thread's network namespace.
    pub fn attach(iface: &str, model: &RssModel, queues: u32) -> Result<Self, EmulatorLoadError> {
        let tables = EmulatorTables::new(model, queues)?;
        let mut ebpf = Ebpf::load(crate::lab_object::lab_ebpf_object())?;
        fill(&mut ebpf, &tables)?;
        let program_error = |source| EmulatorLoadError::Program {
            iface: iface.to_owned(),
            source,
        };
        let program: &mut SchedClassifier = ebpf
            .program_mut(PROGRAM)
            .ok_or(EmulatorLoadError::Missing(PROGRAM))?
            .try_into()
            .map_err(program_error)?;
        program.load().map_err(program_error)?;
        srap_daemon::tc::attach_with_fallback(program, iface, TcAttachType::Egress)
            .map_err(program_error)?;
        info!(
            iface,
            queues,
            entries = tables.indir.len(),
            "RSS-NIC emulator attached"
        );
        Ok(Self { _ebpf: ebpf })
    }
}

fn fill(ebpf: &mut Ebpf, tables: &EmulatorTables) -> Result<(), EmulatorLoadError> {
    let mut toeplitz: Array<_, u32> = ebpf
        .map_mut(TOEPLITZ_MAP)
        .ok_or(EmulatorLoadError::Missing(TOEPLITZ_MAP))?
        .try_into()?;
    for (index, share) in tables.toeplitz.iter().enumerate() {
        toeplitz.set(index as u32, share, 0)?;
    }
    let mut indir: Array<_, u32> = ebpf
        .map_mut(INDIR_MAP)
        .ok_or(EmulatorLoadError::Missing(INDIR_MAP))?
        .try_into()?;
    for (index, queue) in tables.indir.iter().enumerate() {
        indir.set(index as u32, queue, 0)?;
    }
    let mut config: Array<_, srap_common::emulator::EmulatorConfig> = ebpf
        .map_mut(CONFIG_MAP)
        .ok_or(EmulatorLoadError::Missing(CONFIG_MAP))?
        .try_into()?;
    // Last: the program steers nothing until the tables are complete.
    config.set(0, tables.config, 0)?;
    Ok(())
}

/// The lab's receiver NIC with `queues` queues: the embedded 32-queue
/// description when it fits, else the same key over a round-robin table
/// (`ethtool -X DEV equal N`). Each queue counts as its own CPU: the lab has
/// more queues than this machine has cores.
pub fn lab_nic(queues: u32) -> anyhow::Result<RssModel> {
    anyhow::ensure!((1..=256).contains(&queues), "--queues must be 1 to 256");
    let default = embedded_default();
    let desc = if default.queue_cpu.as_ref().map(Vec::len) == Some(queues as usize) {
        default
    } else {
        let len = (queues as usize).next_power_of_two().max(128) as u32;
        RssDescription {
            indir: (0..len).map(|i| i % queues).collect(),
            queue_cpu: Some((0..queues).collect()),
            ..default
        }
    };
    Ok(RssModel::from_description(&desc)?)
}
