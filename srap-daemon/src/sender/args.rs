//! Command-line arguments of `srap-agent sender` and `srap-agent detach`
//! (parsed here so the flags and their docs sit next to what they set).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use srap_common::solver::PortRange;

use super::{
    DEFAULT_PIN_DIR, PacingRate,
    config::{ConfigError, SenderConfig},
};

/// Where the receiver's RSS description comes from: exactly one of
/// `--rss` and `--peer` (clap's group says so when both are given; with
/// neither, `rss` or `peers` of `--config` — [`SenderArgs::resolved`]).
#[derive(clap::Args, Debug, Clone)]
#[group(id = "description", required = false, multiple = false)]
pub struct DescriptionSource {
    /// The receiver's RSS description (JSON, as `srap rss show --json`
    /// prints): offline mode, planned once.
    #[arg(long, value_name = "FILE")]
    pub rss: Option<PathBuf>,
    /// A receiver agent (`srap-agent receiver --listen`) to fetch the
    /// description from: the agent follows every change of it, keeps the
    /// last plan while the receiver is away, and reports its plan back.
    /// Repeat for more receivers: each is planned with its own description
    /// and gets its own grant; one away does not disturb the others.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: Vec<String>,
}

/// `--peer-wait` unless set.
pub const DEFAULT_PEER_WAIT: u64 = 60;
/// `--interval` unless set.
pub const DEFAULT_INTERVAL: u64 = 10;

#[derive(clap::Args, Debug, Clone)]
pub struct SenderArgs {
    /// A TOML file with any of these settings (keys named as the flags,
    /// lists in the plural: `peers`, `receivers`, `ports`,
    /// `report-ports`); flags given here win over it. An unknown key is an
    /// error.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub source: DescriptionSource,
    /// Pre-shared key the receiver agent must prove (and we prove to it).
    /// Read again before every connection, so a rotated key is used from
    /// the next one on.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Keys of single receivers (`psk-file` of a `[[peer]]` table in
    /// `--config`), by their `--peer`; the others use `--psk-file`.
    #[arg(skip)]
    pub peer_psk_files: std::collections::BTreeMap<String, PathBuf>,
    /// With --peer: seconds to wait for the first description before
    /// giving up (nothing is set up until one arrives) [default: 60].
    #[arg(long, value_name = "SECONDS")]
    pub peer_wait: Option<u64>,
    /// With --peer, when every destination port is steered: report the plan
    /// for these destination ports (repeat; a source port's CPU depends on
    /// the destination port). With --port, those ports are reported.
    #[arg(long = "report-port", value_name = "P")]
    pub report_ports: Vec<u16>,
    /// A receiver address to steer toward (repeat for more receivers;
    /// with one --peer, default: the peer's address; with several --peer,
    /// each receiver is steered at its own peer's address).
    #[arg(long = "receiver", value_name = "IP")]
    pub receivers: Vec<IpAddr>,
    /// Steer only this destination port (repeat for more; default: every port).
    #[arg(long = "port", value_name = "P")]
    pub ports: Vec<u16>,
    /// The cgroup whose connections are steered (default `<cgroup2>/srap`;
    /// relative paths are below the cgroup2 mount).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// SO_MAX_PACING_RATE for steered sockets, e.g. `25gbit` or `3gbps`.
    #[arg(long, value_name = "RATE")]
    pub pacing_rate: Option<PacingRate>,
    /// bpffs directory for the pinned programs, links and maps
    /// [default: /sys/fs/bpf/srap].
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// Source ports SRAP may bind, every one of them, shared with other
    /// destinations by 4-tuple (default: the kernel's ip_local_port_range).
    #[arg(long, value_name = "START-END")]
    pub port_range: Option<PortRange>,
    /// Set up (or adopt) and exit; the pins keep steering running. With
    /// --peer: fetch the description once, set up, report the plan, exit
    /// (later changes on the receiver are not followed).
    #[arg(long)]
    pub once: bool,
    /// With --peer: the sender agent's control socket, where `srap status
    /// --sender` reads every receiver, its description version, its grant
    /// and the binder's counters (not made with --once)
    /// [default: /run/srap/sender.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Seconds between counter reports while running [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<u64>,
}

impl SenderArgs {
    /// The flags over `--config`'s file, checked for a description source.
    pub fn resolved(&self) -> anyhow::Result<Self> {
        let args = match &self.config {
            Some(path) => self.clone().under_config(path, SenderConfig::load(path)?)?,
            None => self.clone(),
        };
        match (&args.source.rss, args.source.peer.is_empty()) {
            (None, true) => anyhow::bail!(
                "no description source: give --peer HOST:PORT (or --rss FILE), or `peers` \
                 (or `rss`) in the --config file"
            ),
            (Some(_), false) => anyhow::bail!(
                "give one description source: --rss/`rss` or --peer/`peers`, not both"
            ),
            (Some(_), true) if args.receivers.is_empty() => anyhow::bail!(
                "--rss needs the receiver's address: give --receiver IP (or `receivers` in \
                 the --config file)"
            ),
            _ => Ok(args),
        }
    }

    /// These flags with every setting the command line left unset taken
    /// from `config`, read from `path` (flags win).
    pub fn under_config(
        mut self,
        path: &Path,
        mut config: SenderConfig,
    ) -> Result<Self, ConfigError> {
        let value = |key: &'static str| {
            move |message: String| ConfigError::Value {
                path: path.to_owned(),
                key,
                message,
            }
        };
        if self.source.rss.is_none() && self.source.peer.is_empty() {
            self.source.peer = config.all_peers();
            self.source.rss = config.rss.take();
        }
        for table in std::mem::take(&mut config.peer) {
            if let Some(key) = table.psk_file {
                self.peer_psk_files.insert(table.address, key);
            }
        }
        let pacing = config
            .pacing_rate
            .map(|r| r.parse::<PacingRate>().map_err(value("pacing-rate")))
            .transpose()?;
        let range = config
            .port_range
            .map(|r| r.parse::<PortRange>().map_err(value("port-range")))
            .transpose()?;
        fill_vec(&mut self.report_ports, config.report_ports);
        fill_vec(&mut self.receivers, config.receivers);
        fill_vec(&mut self.ports, config.ports);
        fill(&mut self.psk_file, config.psk_file);
        fill(&mut self.peer_wait, config.peer_wait);
        fill(&mut self.cgroup, config.cgroup);
        fill(&mut self.pacing_rate, pacing);
        fill(&mut self.pin_dir, config.pin_dir);
        fill(&mut self.port_range, range);
        fill(&mut self.interval, config.interval);
        fill(&mut self.control, config.control);
        Ok(self)
    }

    /// The key file for receiver `peer`: its `[[peer]]` table's, else
    /// `--psk-file`.
    pub fn psk_file_for(&self, peer: &str) -> Option<&Path> {
        self.peer_psk_files
            .get(peer)
            .or(self.psk_file.as_ref())
            .map(PathBuf::as_path)
    }

    pub fn peer_wait(&self) -> u64 {
        self.peer_wait.unwrap_or(DEFAULT_PEER_WAIT)
    }

    pub fn interval(&self) -> u64 {
        self.interval.unwrap_or(DEFAULT_INTERVAL)
    }

    pub fn pin_dir(&self) -> PathBuf {
        self.pin_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_DIR))
    }

    pub fn control(&self) -> PathBuf {
        self.control
            .clone()
            .unwrap_or_else(|| PathBuf::from(srap_host::status::DEFAULT_SENDER_CONTROL_PATH))
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct DetachArgs {
    /// The pin directory `srap-agent sender` used.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
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
        let merged = args(&["--peer-wait", "9", "--port", "80"])
            .under_config(path, config.clone())
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
        let merged = args(&["--peer", "10.0.0.9:7447"])
            .under_config(path, config)
            .expect("merged");
        assert_eq!(merged.source.peer, ["10.0.0.9:7447"]);
    }

    #[test]
    fn a_peer_table_key_wins_over_the_flat_one_for_its_receiver() {
        let path = Path::new("sender.toml");
        let text = "peers = [\"a:7447\"]\npsk-file = \"/etc/srap/psk\"\n\
                    [[peer]]\naddress = \"b:7447\"\npsk-file = \"/etc/srap/psk-b\"\n";
        let config = SenderConfig::parse(path, text).expect("valid");
        let merged = args(&[])
            .under_config(path, config.clone())
            .expect("merged");
        assert_eq!(merged.source.peer, ["a:7447", "b:7447"]);
        assert_eq!(
            merged.psk_file_for("a:7447"),
            Some(Path::new("/etc/srap/psk"))
        );
        assert_eq!(
            merged.psk_file_for("b:7447"),
            Some(Path::new("/etc/srap/psk-b"))
        );
        // A --peer on the command line still finds its table's key.
        let merged = args(&["--peer", "b:7447"])
            .under_config(path, config)
            .expect("merged");
        assert_eq!(merged.source.peer, ["b:7447"]);
        assert_eq!(
            merged.psk_file_for("b:7447"),
            Some(Path::new("/etc/srap/psk-b"))
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
            let err = args(&[]).under_config(path, config).expect_err("bad value");
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
