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

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::*;

    /// The word clap gives `mode` on the command line.
    fn word(mode: MptcpMode) -> String {
        mode.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }

    #[test]
    fn the_config_files_words_are_the_flags_values() {
        #[derive(serde::Deserialize)]
        struct Key {
            mptcp: MptcpMode,
        }
        for mode in MptcpMode::value_variants() {
            let parsed: Key =
                toml::from_str(&format!("mptcp = \"{}\"", word(*mode))).expect("parses");
            assert_eq!(parsed.mptcp, *mode);
        }
    }
}
