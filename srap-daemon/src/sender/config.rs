//! `srap-agent sender --config FILE`: the sender's settings in a TOML file,
//! for what does not fit on a command line (several receivers, their key,
//! the port range, the cgroup, pacing). Every key is a flag of the same
//! name (lists take the plural: `peers`, `receivers`, `ports`,
//! `report-ports`); a flag given on the command line wins over the file.
//! A key the agent does not know is an error naming the key and the file,
//! so a typo never passes silently.
//!
//! ```toml
//! peers = ["receiver-a.example:7447", "receiver-b.example:7447"]
//! psk-file = "/etc/srap/psk"
//! report-ports = [5201]
//! cgroup = "srap"
//! pacing-rate = "25gbit"
//! port-range = "40000-60999"
//!
//! # A receiver with a key of its own (the flat `psk-file` is for the rest).
//! [[peer]]
//! address = "receiver-c.example:7447"
//! psk-file = "/etc/srap/psk-c"
//! ```

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use super::choices::{
    BondMembers, LocalNicsPolicy, LocalPlacement, MptcpMode, PlacedEnds, ReceiverNicsMode,
    SourceRules,
};

/// The file's keys (kebab-case, as the flags); an enum-valued key parses
/// into the flag's own enum, so it takes the flag's words (`crate::setting`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SenderConfig {
    pub rss: Option<PathBuf>,
    #[serde(default)]
    pub peers: Vec<String>,
    pub psk_file: Option<PathBuf>,
    pub peer_wait: Option<u64>,
    #[serde(default)]
    pub report_ports: Vec<u16>,
    #[serde(default)]
    pub receivers: Vec<IpAddr>,
    #[serde(default)]
    pub ports: Vec<u16>,
    pub cgroup: Option<PathBuf>,
    pub pacing_rate: Option<String>,
    pub pin_dir: Option<PathBuf>,
    pub port_range: Option<String>,
    pub interval: Option<u64>,
    pub control: Option<PathBuf>,
    pub steer: Option<PlacedEnds>,
    /// One NIC (`"eth0"`) or several (`["eth0", "eth1"]`), as
    /// `--local-iface` given once or several times.
    pub local_iface: Option<OneOrMany>,
    pub local_nics: Option<LocalNicsPolicy>,
    pub source_rules: Option<SourceRules>,
    pub local_rss: Option<PathBuf>,
    pub local_cpus: Option<String>,
    pub local_placement: Option<LocalPlacement>,
    pub bond_members: Option<BondMembers>,
    pub receiver_nics: Option<ReceiverNicsMode>,
    pub mptcp: Option<MptcpMode>,
    pub max_receivers: Option<u32>,
    pub max_cpus: Option<u32>,
    pub max_sockets: Option<u32>,
    pub max_layouts: Option<u32>,
    /// `[[peer]]` tables: receivers named one by one, each with its own
    /// key if it has one.
    #[serde(default)]
    pub peer: Vec<PeerTable>,
}

/// A key that takes one string or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, in the file's order.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(one) => vec![one],
            Self::Many(many) => many,
        }
    }
}

/// One `[[peer]]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PeerTable {
    /// `HOST:PORT` of the receiver agent, as in `peers`.
    pub address: String,
    /// The key this receiver proves (default: the file's `psk-file`).
    pub psk_file: Option<PathBuf>,
}

/// Why the file cannot be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Value {
        path: PathBuf,
        key: &'static str,
        message: String,
    },
}

impl SenderConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses `text` (read from `path`, named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            // toml's message says where (line, column) and which key.
            message: err.to_string().trim_end().to_owned(),
        })?;
        config.check_peers(path)?;
        Ok(config)
    }

    /// Every receiver of `peers` and `[[peer]]`, in that order.
    pub fn all_peers(&self) -> Vec<String> {
        let tables = self.peer.iter().map(|p| p.address.clone());
        self.peers.iter().cloned().chain(tables).collect()
    }

    /// A receiver named twice would be followed twice.
    fn check_peers(&self, path: &Path) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        match self
            .all_peers()
            .into_iter()
            .find(|p| !seen.insert(p.clone()))
        {
            Some(twice) => Err(ConfigError::Value {
                path: path.to_owned(),
                key: "peer",
                message: format!("{twice} is named twice (in `peers` or `[[peer]]`)"),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_an_error_naming_it_and_the_file() {
        let path = Path::new("/etc/srap/sender.toml");
        let err = SenderConfig::parse(path, "pears = [\"a:1\"]\n").expect_err("unknown key");
        let text = err.to_string();
        assert!(text.contains("/etc/srap/sender.toml"), "{text}");
        assert!(text.contains("pears"), "{text}");
    }

    #[test]
    fn peer_tables_name_receivers_with_keys_of_their_own() {
        let path = Path::new("sender.toml");
        let text = "peers = [\"a:7447\"]\npsk-file = \"/k\"\n\n[[peer]]\naddress = \"b:7447\"\n\
                    psk-file = \"/kb\"\n\n[[peer]]\naddress = \"c:7447\"\n";
        let config = SenderConfig::parse(path, text).expect("valid");
        assert_eq!(config.all_peers(), ["a:7447", "b:7447", "c:7447"]);
        assert_eq!(config.peer[0].psk_file.as_deref(), Some(Path::new("/kb")));
        assert_eq!(config.peer[1].psk_file, None);
        let twice = "peers = [\"a:7447\"]\n[[peer]]\naddress = \"a:7447\"\n";
        let err = SenderConfig::parse(path, twice).expect_err("twice");
        assert!(err.to_string().contains("a:7447 is named twice"), "{err}");
        let typo = "[[peer]]\naddress = \"a:7447\"\npsk = \"/k\"\n";
        let err = SenderConfig::parse(path, typo).expect_err("unknown key");
        assert!(err.to_string().contains("psk"), "{err}");
    }

    /// The shipped example (deploy/etc/srap/sender.toml) parses as it is,
    /// and with every commented key uncommented: it documents real keys.
    #[test]
    fn the_shipped_example_parses() {
        let text = include_str!("../../../deploy/etc/srap/sender.toml");
        let path = Path::new("/etc/srap/sender.toml");
        assert_eq!(
            SenderConfig::parse(path, text).expect("as shipped"),
            SenderConfig {
                psk_file: Some("/etc/srap/psk".into()),
                ..SenderConfig::default()
            },
            "only the key the package makes is set"
        );
        let uncommented: String = text
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| {
                (l.starts_with(|c: char| c.is_ascii_lowercase()) && l.contains(" = "))
                    || *l == "[[peer]]"
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let all = SenderConfig::parse(path, &uncommented).expect("every key");
        assert_eq!(all.peers.len(), 2);
        assert!(all.rss.is_some() && all.control.is_some() && all.interval.is_some());
        assert_eq!(all.peer.len(), 1);
        assert!(all.peer[0].psk_file.is_some());
        assert_eq!(all.receiver_nics, Some(ReceiverNicsMode::Spread));
        assert_eq!(all.mptcp, Some(MptcpMode::Subflows));
        assert_eq!(
            uncommented.lines().count(),
            29,
            "one line per key, and a [[peer]] table: {uncommented}"
        );
    }
}
