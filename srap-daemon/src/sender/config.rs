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
//! ```

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use serde::Deserialize;

/// The file's keys (kebab-case, as the flags).
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
        toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            // toml's message says where (line, column) and which key.
            message: err.to_string().trim_end().to_owned(),
        })
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

    /// The shipped example (deploy/etc/srap/sender.toml) parses as it is,
    /// and with every commented key uncommented: it documents real keys.
    #[test]
    fn the_shipped_example_parses() {
        let text = include_str!("../../../deploy/etc/srap/sender.toml");
        let path = Path::new("/etc/srap/sender.toml");
        assert_eq!(
            SenderConfig::parse(path, text).expect("as shipped"),
            SenderConfig::default()
        );
        let uncommented: String = text
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.starts_with(|c: char| c.is_ascii_lowercase()) && l.contains(" = "))
            .map(|l| format!("{l}\n"))
            .collect();
        let all = SenderConfig::parse(path, &uncommented).expect("every key");
        assert_eq!(all.peers.len(), 2);
        assert!(all.rss.is_some() && all.control.is_some() && all.interval.is_some());
        assert_eq!(
            uncommented.lines().count(),
            13,
            "one line per key: {uncommented}"
        );
    }
}
