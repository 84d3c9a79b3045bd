//! Command-line arguments of `srap-agent sender` and `srap-agent detach`
//! (parsed here so the flags and their docs sit next to what they set).

use std::{net::IpAddr, path::PathBuf};

use srap_common::solver::PortRange;

use super::{DEFAULT_PIN_DIR, PacingRate};

/// Where the receiver's RSS description comes from: exactly one of
/// `--rss` and `--peer` (clap's group says so when both or neither are given).
#[derive(clap::Args, Debug, Clone)]
#[group(id = "description", required = true, multiple = false)]
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

#[derive(clap::Args, Debug, Clone)]
pub struct SenderArgs {
    #[command(flatten)]
    pub source: DescriptionSource,
    /// Pre-shared key the receiver agent must prove (and we prove to it).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// With --peer: seconds to wait for the first description before
    /// giving up (nothing is set up until one arrives).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub peer_wait: u64,
    /// With --peer, when every destination port is steered: report the plan
    /// for these destination ports (repeat; a source port's CPU depends on
    /// the destination port). With --port, those ports are reported.
    #[arg(long = "report-port", value_name = "P")]
    pub report_ports: Vec<u16>,
    /// A receiver address to steer toward (repeat for more receivers;
    /// with one --peer, default: the peer's address; with several --peer,
    /// each receiver is steered at its own peer's address).
    #[arg(long = "receiver", value_name = "IP", required_unless_present = "peer")]
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
    /// bpffs directory for the pinned programs, links and maps.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
    /// Source ports SRAP may bind (default: the kernel's ip_local_port_range).
    #[arg(long, value_name = "START-END")]
    pub port_range: Option<PortRange>,
    /// Set up (or adopt) and exit; the pins keep steering running. With
    /// --peer: fetch the description once, set up, report the plan, exit
    /// (later changes on the receiver are not followed).
    #[arg(long)]
    pub once: bool,
    /// Seconds between counter reports while running.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub interval: u64,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DetachArgs {
    /// The pin directory `srap-agent sender` used.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
}
