//! What `srap-agent sender` is told: its flags (parsed in the binary,
//! which keeps every flag's name, help and parser) over the `--config`
//! file ([`super::config`]), and the rules they must follow together.
//! No clap here: the library takes plain settings, so it can be driven
//! without a command line (and the flags can change without it).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use srap_common::{binder::BinderSizes, port_range::PortRange};
use srap_host::cpulist;

use super::{
    choices::MptcpMode,
    config::{ConfigError, OneOrMany, SenderConfig},
    ends::{LocalSettings, PlacedEnds},
    layout::DEFAULT_PIN_DIR,
    local::bond::BondMembers,
    rate::PacingRate,
    spread::ReceiverNicsMode,
};

/// Where the receiver's RSS description comes from: `--rss` or `--peer`,
/// exactly one (the command line refuses both; with neither, `rss` or
/// `peers` of `--config` — [`SenderSettings::resolved`]).
#[derive(Debug, Clone, Default)]
pub struct DescriptionSource {
    /// `--rss FILE`: offline mode, planned once.
    pub rss: Option<PathBuf>,
    /// `--peer HOST:PORT`, repeated: receiver agents to follow, each
    /// planned with its own description.
    pub peer: Vec<String>,
}

/// `--peer-wait` unless set.
pub const DEFAULT_PEER_WAIT: u64 = 60;
/// `--interval` unless set.
pub const DEFAULT_INTERVAL: u64 = 10;

/// Every setting of `srap-agent sender`, as the flags gave it: `None` (or
/// empty) is "not given", so [`SenderSettings::under_config`] can tell
/// what the `--config` file may fill in; the accessors give the defaults.
/// Each field is the flag of its name (the binary's `args/sender.rs` holds
/// their help, which `srap-agent sender --help` prints); only what the
/// library adds is said here.
#[derive(Debug, Clone, Default)]
pub struct SenderSettings {
    pub config: Option<PathBuf>,
    pub source: DescriptionSource,
    /// Read again before every connection, so a rotated key is used from
    /// the next one on.
    pub psk_file: Option<PathBuf>,
    /// Keys of single receivers (`psk-file` of a `[[peer]]` table in
    /// `--config`), by their `--peer`; the others use `--psk-file`.
    pub peer_psk_files: std::collections::BTreeMap<String, PathBuf>,
    /// [`Self::peer_wait`] gives the default.
    pub peer_wait: Option<u64>,
    /// `--report-port`, repeated.
    pub report_ports: Vec<u16>,
    /// `--receiver`, repeated.
    pub receivers: Vec<IpAddr>,
    /// `--port`, repeated; empty: every destination port.
    pub ports: Vec<u16>,
    /// Relative paths are below the cgroup2 mount.
    pub cgroup: Option<PathBuf>,
    pub pacing_rate: Option<PacingRate>,
    /// [`Self::pin_dir`] gives the default.
    pub pin_dir: Option<PathBuf>,
    /// `None`: the kernel's `ip_local_port_range`.
    pub port_range: Option<PortRange>,
    pub once: bool,
    /// [`Self::control`] gives the default.
    pub control: Option<PathBuf>,
    pub metrics: Option<std::net::SocketAddr>,
    /// [`Self::interval`] gives the default.
    pub interval: Option<u64>,
    /// `--bond-members`; [`Self::bond_members`] gives the default.
    pub bond_members: Option<BondMembers>,
    pub local: LocalSettings,
    pub sizes: SizeSettings,
    /// `--receiver-nics`; [`Self::receiver_nics`] gives the default.
    pub receiver_nics: Option<ReceiverNicsMode>,
    /// `--mptcp`; [`Self::mptcp`] gives the default.
    pub mptcp: Option<MptcpMode>,
}

/// `--max-receivers`, `--max-cpus`, `--max-sockets`, `--max-layouts`: what
/// the binder's pinned maps are sized for (docs/binder.md gives the
/// kernel memory each takes); `None`: the default [`Self::sizes`] gives.
#[derive(Debug, Clone, Default)]
pub struct SizeSettings {
    pub max_receivers: Option<u32>,
    pub max_cpus: Option<u32>,
    pub max_sockets: Option<u32>,
    pub max_layouts: Option<u32>,
}

impl SizeSettings {
    /// The sizes these settings give, the rest at their defaults; a
    /// setting that is 0 or past its limit is an error naming it.
    pub fn sizes(&self) -> anyhow::Result<BinderSizes> {
        let receivers = self.max_receivers.unwrap_or(BinderSizes::DEFAULT.receivers);
        let defaults = BinderSizes::for_receivers(receivers);
        let sizes = BinderSizes {
            receivers,
            cpus: self.max_cpus.unwrap_or(defaults.cpus),
            sockets: self.max_sockets.unwrap_or(defaults.sockets),
            layouts: self.max_layouts.unwrap_or(defaults.layouts),
        };
        match sizes.out_of_range() {
            Some(setting) => anyhow::bail!(
                "--{} {} is out of range: 1 to {} (`{}` in the --config file)",
                setting.key(),
                sizes.get(setting),
                setting.limit(),
                setting.key()
            ),
            None => Ok(sizes),
        }
    }
}

impl SenderSettings {
    /// The flags over `--config`'s file, checked for a description source
    /// (none is needed with `--steer local`: the destinations are enough).
    pub fn resolved(&self) -> anyhow::Result<Self> {
        let args = match &self.config {
            Some(path) => self.clone().under_config(path, SenderConfig::load(path)?)?,
            None => self.clone(),
        };
        args.local.check(args.mptcp())?;
        if args.local.placed_ends() == PlacedEnds::Local {
            return args.local_only();
        }
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

    /// `--steer local`: the receiver's description is not used, so `--rss`
    /// is refused; the destinations are `--receiver` or `--peer`.
    fn local_only(self) -> anyhow::Result<Self> {
        if self.source.rss.is_some() {
            anyhow::bail!(
                "--steer local plans for this host's NIC only: leave --rss out (or use \
                 --steer both to place flows on the receiver's CPUs too)"
            );
        }
        if self.receivers.is_empty() && self.source.peer.is_empty() {
            anyhow::bail!(
                "--steer local needs the destinations: give --receiver IP (and --port P), or \
                 --peer HOST:PORT (`receivers` or `peers` in the --config file)"
            );
        }
        Ok(self)
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
            .map(|r| {
                r.parse::<PacingRate>()
                    .map_err(|e| value("pacing-rate")(e.to_string()))
            })
            .transpose()?;
        let range = config
            .port_range
            .map(|r| {
                r.parse::<PortRange>()
                    .map_err(|e| value("port-range")(e.to_string()))
            })
            .transpose()?;
        let local_cpus = config
            .local_cpus
            .map(|c| cpulist::parse_some(&c).map_err(|e| value("local-cpus")(e.to_string())))
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
        fill(&mut self.local.placed_ends, config.steer);
        if self.local.local_ifaces.is_empty() && self.local.local_rss.is_none() {
            self.local.local_ifaces = config
                .local_iface
                .map(OneOrMany::into_vec)
                .unwrap_or_default();
            self.local.local_rss = config.local_rss;
        }
        fill(&mut self.local.local_nics, config.local_nics);
        fill(&mut self.local.source_rules, config.source_rules);
        fill(&mut self.local.local_cpus, local_cpus);
        fill(&mut self.local.local_placement, config.local_placement);
        fill(&mut self.bond_members, config.bond_members);
        fill(&mut self.receiver_nics, config.receiver_nics);
        fill(&mut self.mptcp, config.mptcp);
        fill(&mut self.sizes.max_receivers, config.max_receivers);
        fill(&mut self.sizes.max_cpus, config.max_cpus);
        fill(&mut self.sizes.max_sockets, config.max_sockets);
        fill(&mut self.sizes.max_layouts, config.max_layouts);
        Ok(self)
    }

    /// `--mptcp`, [`MptcpMode::Off`] unless set.
    pub fn mptcp(&self) -> MptcpMode {
        self.mptcp.unwrap_or_default()
    }

    /// `--receiver-nics`, [`ReceiverNicsMode::Asked`] unless set.
    pub fn receiver_nics(&self) -> ReceiverNicsMode {
        self.receiver_nics.unwrap_or_default()
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

    /// `--bond-members`, balance unless set.
    pub fn bond_members(&self) -> BondMembers {
        self.bond_members.unwrap_or_default()
    }

    pub fn pin_dir(&self) -> PathBuf {
        self.pin_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_DIR))
    }

    pub fn control(&self) -> PathBuf {
        self.control
            .clone()
            .unwrap_or_else(|| PathBuf::from(srap_status::DEFAULT_SENDER_CONTROL_PATH))
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
    use super::*;
    use crate::sender::ends::{LocalNicsPolicy, LocalPlacement, SourceRules};

    /// The settings a `--config` file of `text` gives when no flag is
    /// given: the same as the flags of the same names (the binary's tests
    /// check each flag lands in its field).
    fn settings(text: &str) -> SenderSettings {
        let path = Path::new("sender.toml");
        let config = SenderConfig::parse(path, text).expect("valid");
        SenderSettings::default()
            .under_config(path, config)
            .expect("merged")
    }

    fn peers(peers: &[&str]) -> DescriptionSource {
        DescriptionSource {
            rss: None,
            peer: peers.iter().map(|p| p.to_string()).collect(),
        }
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
        steer = "both"
        local-iface = "eth0"
        local-cpus = "0-7"
        local-placement = "reader"
        local-nics = "numa"
        source-rules = "install"
        bond-members = "ignore"
        max-receivers = 200
        max-sockets = 1000
    "#;

    #[test]
    fn every_key_sets_its_flag_and_flags_win() {
        let path = Path::new("/etc/srap/sender.toml");
        let config = SenderConfig::parse(path, FILE).expect("valid");
        let flags = SenderSettings {
            peer_wait: Some(9),
            ports: vec![80],
            ..SenderSettings::default()
        };
        let merged = flags.under_config(path, config.clone()).expect("merged");
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
        assert_eq!(merged.local.placed_ends, Some(PlacedEnds::Both));
        assert_eq!(merged.local.local_ifaces, ["eth0"]);
        assert_eq!(merged.local.local_nics(), LocalNicsPolicy::Numa);
        assert_eq!(merged.local.source_rules(), SourceRules::Install);
        assert_eq!(merged.local.local_cpus, Some((0..8).collect()));
        assert_eq!(merged.local.local_placement, Some(LocalPlacement::Reader));
        assert_eq!(merged.bond_members(), BondMembers::Ignore);
        let sizes = merged.sizes.sizes().expect("sizes");
        assert_eq!(
            sizes,
            BinderSizes {
                receivers: 200,
                sockets: 1000,
                layouts: 201,
                ..BinderSizes::DEFAULT
            },
            "layouts follow receivers unless set"
        );

        // --peer on the command line replaces the file's peers.
        let flags = SenderSettings {
            source: peers(&["10.0.0.9:7447"]),
            ..SenderSettings::default()
        };
        let merged = flags.under_config(path, config).expect("merged");
        assert_eq!(merged.source.peer, ["10.0.0.9:7447"]);
    }

    #[test]
    fn a_peer_table_key_wins_over_the_flat_one_for_its_receiver() {
        let path = Path::new("sender.toml");
        let text = "peers = [\"a:7447\"]\npsk-file = \"/etc/srap/psk\"\n\
                    [[peer]]\naddress = \"b:7447\"\npsk-file = \"/etc/srap/psk-b\"\n";
        let config = SenderConfig::parse(path, text).expect("valid");
        let merged = SenderSettings::default()
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
        let flags = SenderSettings {
            source: peers(&["b:7447"]),
            ..SenderSettings::default()
        };
        let merged = flags.under_config(path, config).expect("merged");
        assert_eq!(merged.source.peer, ["b:7447"]);
        assert_eq!(
            merged.psk_file_for("b:7447"),
            Some(Path::new("/etc/srap/psk-b"))
        );
    }

    /// `local-iface` takes one NIC, as it always did, or a list.
    #[test]
    fn local_iface_takes_a_string_or_a_list() {
        let path = Path::new("sender.toml");
        for (text, ifaces) in [
            ("local-iface = \"eth0\"\n", vec!["eth0"]),
            ("local-iface = [\"eth0\", \"eth1\"]\n", vec!["eth0", "eth1"]),
        ] {
            let config = SenderConfig::parse(path, text).expect("parses");
            let merged = SenderSettings::default()
                .under_config(path, config)
                .expect("merged");
            assert_eq!(merged.local.local_ifaces, ifaces, "{text}");
            assert_eq!(merged.local.local_nics(), LocalNicsPolicy::Route);
        }
        assert!(SenderConfig::parse(path, "local-iface = 3\n").is_err());
    }

    #[test]
    fn bad_values_name_the_key_and_the_file() {
        let path = Path::new("sender.toml");
        for (text, key) in [
            ("pacing-rate = \"fast\"\n", "pacing-rate"),
            ("port-range = \"9-3\"\n", "port-range"),
            ("local-cpus = \"3-1\"\n", "local-cpus"),
        ] {
            let config = SenderConfig::parse(path, text).expect("parses");
            let err = SenderSettings::default()
                .under_config(path, config)
                .expect_err("bad value");
            let text = err.to_string();
            assert!(text.contains("sender.toml") && text.contains(key), "{text}");
        }
        // An enum-valued key is refused as the file is read, with the
        // words it takes.
        for (text, key, word) in [
            ("steer = \"push\"\n", "steer", "both"),
            ("local-placement = \"near\"\n", "local-placement", "reader"),
            ("local-nics = \"nearest\"\n", "local-nics", "balance"),
            ("source-rules = \"add\"\n", "source-rules", "install"),
            ("bond-members = \"some\"\n", "bond-members", "ignore"),
            ("receiver-nics = \"all\"\n", "receiver-nics", "spread"),
            ("mptcp = \"on\"\n", "mptcp", "subflows"),
        ] {
            let err = SenderConfig::parse(path, text).expect_err("bad value");
            let text = err.to_string();
            assert!(
                text.contains("sender.toml") && text.contains(key) && text.contains(word),
                "{text}"
            );
        }
        let err = SenderConfig::parse(path, "peer-wait = \"long\"\n").expect_err("a string");
        let text = err.to_string();
        assert!(
            text.contains("sender.toml") && text.contains("peer-wait"),
            "{text}"
        );
    }

    #[test]
    fn sizes_default_for_a_data_transfer_node_and_refuse_zero_or_too_many() {
        assert_eq!(
            SizeSettings::default().sizes().expect("defaults"),
            BinderSizes::DEFAULT
        );
        let set = SizeSettings {
            max_cpus: Some(64),
            max_layouts: Some(3),
            ..SizeSettings::default()
        };
        let sizes = set.sizes().expect("set");
        assert_eq!((sizes.cpus, sizes.layouts, sizes.receivers), (64, 3, 64));
        for (set, says) in [
            (
                SizeSettings {
                    max_receivers: Some(0),
                    ..SizeSettings::default()
                },
                "--max-receivers 0 is out of range: 1 to 4096",
            ),
            (
                SizeSettings {
                    max_cpus: Some(513),
                    ..SizeSettings::default()
                },
                "--max-cpus 513 is out of range: 1 to 512",
            ),
        ] {
            let err = set.sizes().expect_err("refused");
            assert!(err.to_string().contains(says), "{set:?}: {err}");
        }
    }

    #[test]
    fn local_steering_needs_this_hosts_nic_and_the_destinations_only() {
        let ok = settings("steer = \"local\"\nlocal-iface = \"eth0\"\nreceivers = [\"10.0.0.2\"]");
        let resolved = ok.resolved().expect("no receiver description needed");
        assert_eq!(resolved.local.placed_ends(), PlacedEnds::Local);
        let peer = settings("steer = \"local\"\nlocal-rss = \"l.json\"\npeers = [\"r:7447\"]");
        assert!(peer.resolved().is_ok(), "--peer names the destinations");
        for (text, says) in [
            (
                "steer = \"local\"\nreceivers = [\"10.0.0.2\"]",
                "--local-iface",
            ),
            ("steer = \"local\"\nlocal-iface = \"eth0\"", "destinations"),
            (
                "steer = \"local\"\nlocal-iface = \"e\"\nrss = \"r.json\"\n\
                 receivers = [\"1.2.3.4\"]",
                "leave --rss out",
            ),
            (
                "local-iface = \"eth0\"\npeers = [\"r:7447\"]",
                "--steer local or both",
            ),
            (
                "steer = \"both\"\nlocal-iface = \"eth0\"",
                "description source",
            ),
            ("steer = \"both\"\npeers = [\"r:7447\"]", "--local-rss"),
            (
                "steer = \"both\"\nlocal-iface = \"e\"\nlocal-rss = \"l.json\"\n\
                 peers = [\"r:7447\"]",
                "not both",
            ),
        ] {
            let err = settings(text).resolved().expect_err("refused");
            assert!(err.to_string().contains(says), "{text:?}: {err}");
        }
        let both = settings("steer = \"both\"\nlocal-iface = \"eth0\"\npeers = [\"r:7447\"]");
        assert_eq!(
            both.resolved().expect("both").local.placed_ends(),
            PlacedEnds::Both
        );
        let none = SenderSettings::default();
        assert_eq!(none.local.placed_ends(), PlacedEnds::Remote, "the default");
    }
}
