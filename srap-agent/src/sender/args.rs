//! Command-line arguments of `srap-agent sender` and `srap-agent detach`
//! (parsed here so the flags and their docs sit next to what they set).

use std::{net::IpAddr, path::PathBuf};

use srap_common::solver::PortRange;

use super::{DEFAULT_PIN_DIR, PacingRate};

#[derive(clap::Args, Debug, Clone)]
pub struct SenderArgs {
    /// The receiver's RSS description (JSON, as `srap rss show --json` prints).
    #[arg(long, value_name = "FILE")]
    pub rss: PathBuf,
    /// A receiver address to steer toward (repeat for more receivers).
    #[arg(long = "receiver", value_name = "IP", required = true)]
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
    /// Set up (or adopt) and exit; the pins keep steering running.
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
