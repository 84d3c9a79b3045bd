//! `--mptcp` (`mptcp` in the `--config` file): whether the binder steers
//! the subflows of MPTCP connections. Defined once: the command line's
//! values, the config file's words and the number the hooks are loaded
//! with all come from this enum.

use srap_common::binder::mptcp;

/// What the binder does with MPTCP connections.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[repr(u32)]
pub enum MptcpMode {
    /// Left to the kernel: a subflow keeps the kernel's port, and the
    /// MPTCP programs are not loaded (nothing is verified or run for it).
    #[default]
    Off = mptcp::OFF,
    /// Every subflow steered to a receiver CPU of its own: the first at
    /// its connect, each further one at the bind its path manager makes,
    /// each released at its TCP close.
    Subflows = mptcp::SUBFLOWS,
}

impl MptcpMode {
    /// The number the hooks are loaded with (`LoadConfig::mptcp`).
    pub fn as_config(self) -> u32 {
        self as u32
    }
}

crate::setting::display_as_word!(MptcpMode);
