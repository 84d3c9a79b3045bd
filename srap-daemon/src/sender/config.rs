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
use srap_common::solver::PortRange;

use super::{PacingRate, args::SenderArgs};

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

    /// `args` with every setting the command line left unset taken from
    /// the file (flags win).
    pub fn under(self, path: &Path, mut args: SenderArgs) -> Result<SenderArgs, ConfigError> {
        let value = |key: &'static str| {
            move |message: String| ConfigError::Value {
                path: path.to_owned(),
                key,
                message,
            }
        };
        let pacing = self
            .pacing_rate
            .map(|r| r.parse::<PacingRate>().map_err(value("pacing-rate")))
            .transpose()?;
        let range = self
            .port_range
            .map(|r| r.parse::<PortRange>().map_err(value("port-range")))
            .transpose()?;
        if args.source.rss.is_none() && args.source.peer.is_empty() {
            args.source.rss = self.rss;
            args.source.peer = self.peers;
        }
        fill_vec(&mut args.report_ports, self.report_ports);
        fill_vec(&mut args.receivers, self.receivers);
        fill_vec(&mut args.ports, self.ports);
        fill(&mut args.psk_file, self.psk_file);
        fill(&mut args.peer_wait, self.peer_wait);
        fill(&mut args.cgroup, self.cgroup);
        fill(&mut args.pacing_rate, pacing);
        fill(&mut args.pin_dir, self.pin_dir);
        fill(&mut args.port_range, range);
        fill(&mut args.interval, self.interval);
        fill(&mut args.control, self.control);
        Ok(args)
    }
}

fn fill<T>(flag: &mut Option<T>, file: Option<T>) {
    if flag.is_none() {
        *flag = file;
    }
}

fn fill_vec<T>(flag: &mut Vec<T>, file: Vec<T>) {
    if flag.is_empty() {
        *flag = file;
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: SenderArgs,
    }

    fn args(flags: &[&str]) -> SenderArgs {
        let argv = std::iter::once("srap-agent-sender").chain(flags.iter().copied());
        Cli::try_parse_from(argv).expect("flags").args
    }

    const FILE: &str = r#"
        # Two receivers, one key.
        peers = ["10.199.89.2:7447", "r2.example:7447"]
        psk-file = "/etc/srap/psk"
        peer-wait = 30
        report-ports = [5201, 443]
        ports = [5201]
        cgroup = "srap"
        pacing-rate = "25gbit"
        pin-dir = "/sys/fs/bpf/srap-x"
        port-range = "40000-60999"
        interval = 5
        control = "/run/srap/x.sock"
    "#;

    #[test]
    fn every_key_sets_its_flag_and_flags_win() {
        let path = Path::new("/etc/srap/sender.toml");
        let config = SenderConfig::parse(path, FILE).expect("valid");
        let merged = config
            .clone()
            .under(path, args(&["--peer-wait", "9", "--port", "80"]))
            .expect("merged");
        assert_eq!(merged.source.peer, ["10.199.89.2:7447", "r2.example:7447"]);
        assert_eq!(merged.psk_file.as_deref(), Some(Path::new("/etc/srap/psk")));
        assert_eq!(merged.peer_wait, Some(9), "the flag wins");
        assert_eq!(merged.ports, [80], "the flag wins");
        assert_eq!(merged.report_ports, [5201, 443]);
        assert_eq!(merged.cgroup.as_deref(), Some(Path::new("srap")));
        assert_eq!(merged.pacing_rate, Some("25gbit".parse().expect("rate")));
        assert_eq!(
            merged.port_range,
            Some("40000-60999".parse().expect("range"))
        );
        assert_eq!(
            merged.pin_dir.as_deref(),
            Some(Path::new("/sys/fs/bpf/srap-x"))
        );
        assert_eq!(merged.interval, Some(5));
        assert_eq!(
            merged.control.as_deref(),
            Some(Path::new("/run/srap/x.sock"))
        );

        // --peer on the command line replaces the file's peers.
        let merged = config
            .under(path, args(&["--peer", "10.0.0.9:7447"]))
            .expect("merged");
        assert_eq!(merged.source.peer, ["10.0.0.9:7447"]);
    }

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

    #[test]
    fn bad_values_name_the_key_and_the_file() {
        let path = Path::new("sender.toml");
        for (text, key) in [
            ("pacing-rate = \"fast\"\n", "pacing-rate"),
            ("port-range = \"9-3\"\n", "port-range"),
        ] {
            let config = SenderConfig::parse(path, text).expect("parses");
            let err = config.under(path, args(&[])).expect_err("bad value");
            let text = err.to_string();
            assert!(text.contains("sender.toml") && text.contains(key), "{text}");
        }
        let err = SenderConfig::parse(path, "peer-wait = \"long\"\n").expect_err("a string");
        let text = err.to_string();
        assert!(
            text.contains("sender.toml") && text.contains("peer-wait"),
            "{text}"
        );
    }
}
