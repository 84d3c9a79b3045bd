//! Command-line arguments of `srap-agent receiver`.

use std::{net::SocketAddr, path::PathBuf};

use ipnet::IpNet;

use super::DEFAULT_MAX_PEERS;

#[derive(clap::Args, Debug, Clone)]
pub struct ReceiverArgs {
    /// The receiving interface whose RSS is served.
    #[arg(long, value_name = "DEV")]
    pub iface: String,
    /// Address and port to serve senders on, e.g. `0.0.0.0:7447` or `[::]:7447`.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Serve this RSS description (JSON) instead of discovering DEV's; the
    /// file is watched and a changed file is a new version.
    #[arg(long, value_name = "FILE")]
    pub rss: Option<PathBuf>,
    /// Require senders to prove this pre-shared key (and prove it to them).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Accept senders only from this network (repeat for more; default: any).
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<IpNet>,
    /// Senders served at once; more are refused until one leaves.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_PEERS)]
    pub max_peers: usize,
}
