//! The lab's RSS-NIC emulator: a tc egress program on the sender side of a
//! multi-queue veth that computes the receiver NIC's Toeplitz hash and
//! indirection, and steers each packet to the receive queue a real NIC would
//! pick (veth chooses the peer's RX queue from `skb->hash`).
//!
//! The Toeplitz lookup tables are the ones [`crate::rss::ToeplitzTable`]
//! builds, copied into a map: the hash is computed by the same tables user
//! space predicts with, so the model lives in one place.

/// Bytes of hash input the emulator handles (an IPv6 4-tuple).
pub const INPUT_BYTES: u32 = 36;
/// Entries of the Toeplitz table map: `position * 256 + byte`.
pub const TOEPLITZ_ENTRIES: u32 = INPUT_BYTES * 256;
/// Longest indirection table the emulator holds.
pub const MAX_INDIR: u32 = 4096;

pub const TOEPLITZ_MAP: &str = "SRAP_EMU_TOEPLITZ";
pub const INDIR_MAP: &str = "SRAP_EMU_INDIR";
pub const CONFIG_MAP: &str = "SRAP_EMU_CONFIG";
pub const STATS_MAP: &str = "SRAP_EMU_STATS";
pub const PROGRAM: &str = "srap_rss_nic";

/// Indexes of the emulator's per-CPU packet counters.
pub mod counter {
    /// TCP packets given a queue.
    pub const STEERED: u32 = 0;
    /// Packets passed on untouched (not TCP, not configured).
    pub const PASSED: u32 = 1;
    pub const COUNT: u32 = 2;
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmulatorConfig {
    /// Entries in use in the indirection map; 0 = not configured.
    pub indir_len: u32,
    /// TX queues of the veth (= RX queues of its peer).
    pub queues: u32,
}

impl EmulatorConfig {
    /// The `skb->hash` that makes veth (which scales the hash by the queue
    /// count: `(hash * queues) >> 32`) pick `queue`: the middle of its band.
    #[inline(always)]
    pub fn hash_for_queue(&self, queue: u32) -> u32 {
        if self.queues == 0 {
            return 0;
        }
        (((u64::from(queue) << 32) + (1u64 << 31)) / u64::from(self.queues)) as u32
    }
}

#[cfg(feature = "user")]
mod user {
    use thiserror::Error;

    use super::{EmulatorConfig, INPUT_BYTES, MAX_INDIR};
    use crate::{
        protocol::FlowType,
        rss::{HashFields, RssModel, ToeplitzTable},
    };

    // SAFETY: `#[repr(C)]`, two u32s, no padding.
    unsafe impl aya::Pod for EmulatorConfig {}

    #[derive(Debug, Clone, PartialEq, Eq, Error)]
    pub enum EmulatorError {
        #[error(
            "the emulated NIC hashes all of src, dst, sport, dport with no input transform; \
             this description has tcp4 `{tcp4}`, tcp6 `{tcp6}`, input_xfrm `{xfrm}`"
        )]
        Unsupported {
            tcp4: String,
            tcp6: String,
            xfrm: String,
        },
        #[error("the emulated NIC holds {MAX_INDIR} indirection entries; this table has {0}")]
        TableTooLong(usize),
        #[error("queue {queue} of the table is beyond the veth's {queues} queues")]
        QueueBeyond { queue: u32, queues: u32 },
    }

    /// What the emulator's maps hold for one RSS model.
    pub struct EmulatorTables {
        /// `position * 256 + byte` → that byte's share of the hash.
        pub toeplitz: Vec<u32>,
        pub indir: Vec<u32>,
        pub config: EmulatorConfig,
    }

    impl EmulatorTables {
        /// Tables for emulating `model` on a veth with `queues` queues.
        pub fn new(model: &RssModel, queues: u32) -> Result<Self, EmulatorError> {
            // TCP's: the emulator's tc program hashes TCP packets only.
            let four_tuple = |flow| model.fields(flow) == Some(HashFields::ALL);
            let letters = |flow| {
                model
                    .fields(flow)
                    .map_or_else(String::new, |f| f.to_string())
            };
            let tcp = [FlowType::TCP4, FlowType::TCP6];
            if !tcp.into_iter().all(four_tuple) || !model.xfrm().can_be_emulated() {
                return Err(EmulatorError::Unsupported {
                    tcp4: letters(FlowType::TCP4),
                    tcp6: letters(FlowType::TCP6),
                    xfrm: model.xfrm().to_string(),
                });
            }
            if model.indir().len() > MAX_INDIR as usize {
                return Err(EmulatorError::TableTooLong(model.indir().len()));
            }
            if let Some(queue) = model.indir().iter().find(|q| **q >= queues) {
                return Err(EmulatorError::QueueBeyond {
                    queue: *queue,
                    queues,
                });
            }
            let table = ToeplitzTable::new(model.key().clone());
            let toeplitz = table.rows()[..INPUT_BYTES as usize]
                .iter()
                .flat_map(|row| row.iter().copied())
                .collect();
            Ok(Self {
                toeplitz,
                indir: model.indir().to_vec(),
                config: EmulatorConfig {
                    indir_len: model.indir().len() as u32,
                    queues,
                },
            })
        }
    }
}

#[cfg(feature = "user")]
pub use user::{EmulatorError, EmulatorTables};
