//! The flags of `srap-agent receiver`, and `--hook` (which `verify` takes
//! too).

use std::{net::SocketAddr, path::PathBuf};

use ipnet::IpNet;
use srap_daemon::{observer::HookChoice, receiver::DEFAULT_MAX_PEERS};

#[derive(clap::Args, Debug, Clone)]
pub struct ReceiverArgs {
    /// A receiving interface to serve; repeat for each NIC of this host
    /// (`--iface eth0 --iface eth1`). The first is the one whose RSS every
    /// sender plans by (and the only one a sender of protocol 7 or older
    /// learns of); senders of protocol 8 are told of every NIC, its
    /// addresses, RSS, NUMA node and link, and which addresses accept each
    /// listening port.
    #[arg(long, value_name = "DEV", required = true)]
    pub iface: Vec<String>,
    /// Address and port to serve senders on, e.g. `0.0.0.0:7447` or `[::]:7447`.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Serve this RSS description (JSON) instead of discovering the first
    /// DEV's; the
    /// file is watched and a changed file is a new version. Repeat to give
    /// the second `--iface` its own too, and so on in `--iface` order (a
    /// DEV without one is discovered).
    #[arg(long, value_name = "FILE")]
    pub rss: Vec<PathBuf>,
    /// Require senders to prove this pre-shared key (and prove it to them).
    /// Repeat during a key rollover: a sender may use either key. SIGHUP
    /// reads the files again and closes sessions whose key is gone.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Vec<PathBuf>,
    /// Accept senders only from this network (repeat for more; default: any).
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<IpNet>,
    /// Serve any address without a key: needed to listen beyond loopback
    /// with neither --psk-file nor --allow (whoever reaches the port then
    /// reads the NIC's RSS description and is granted CPUs).
    #[arg(long, conflicts_with_all = ["psk_file", "allow"])]
    pub open: bool,
    /// Senders served at once; more are refused until one leaves.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_PEERS)]
    pub max_peers: usize,
    /// CPUs granted to senders' flows, as a cpulist (`0-7,16-23`); default:
    /// every CPU a receive queue reaches, those on DEV's NUMA node first
    /// (the others only when those are all taken). Leave out the CPUs the
    /// application's own threads use.
    #[arg(long, value_name = "LIST", value_parser = super::parse_cpus)]
    pub cpus: Option<std::collections::BTreeSet<u32>>,
    /// Do not attach the receive observer to DEV (then `srap status` shows
    /// peers and versions but no flows).
    #[arg(long)]
    pub no_verify: bool,
    /// Where the receive observer runs.
    #[arg(long, value_enum, default_value_t = HookArg::Auto)]
    pub hook: HookArg,
    /// cgroup2 directory whose TCP servers the socket hook watches
    /// (default: the cgroup2 root, i.e. every local server).
    #[arg(long, value_name = "DIR")]
    pub verify_cgroup: Option<PathBuf>,
    /// Unix socket `srap status` reads the status from (mode 0600; default
    /// /run/srap/receiver.sock). A socket that cannot be made is fatal when
    /// given here, and only an error message with the default.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics, e.g. `127.0.0.1:9447`.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Read the flags, the key files and the --rss files as a start would,
    /// print what it would serve, and exit: 0 when a start would accept
    /// them, 2 with the error it would give. Touches nothing of the host
    /// (no eBPF, no socket, no NIC discovery), so it needs no privilege.
    #[arg(long)]
    pub check: bool,
}

/// `--hook`: where the receive observer runs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum HookArg {
    /// The socket hook if it attaches (no per-packet work), else tc
    /// ingress (tcx, then a clsact filter). Neither changes the device.
    Auto,
    /// XDP (driver, then generic), only when asked: attaching XDP
    /// reconfigures some NICs (virtio_net drops QEMU's RSS, mlx5 rebuilds
    /// its rings and refuses it with HW-GRO/LRO on).
    Xdp,
    /// tc ingress only: parses every skb (after GRO), and also sees flows
    /// that do not end on this host.
    Tc,
    /// `sock_ops` on a cgroup only: runs once per accepted connection and
    /// never per packet; queue and CPU come from the handshake's last ACK,
    /// bytes from `tcp_info`.
    Sock,
}

impl From<HookArg> for HookChoice {
    fn from(arg: HookArg) -> Self {
        match arg {
            HookArg::Auto => Self::Auto,
            HookArg::Xdp => Self::Xdp,
            HookArg::Tc => Self::Tc,
            HookArg::Sock => Self::Sock,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::*;

    /// `--hook`'s words stay what README.md and docs/ show, each to its
    /// own choice.
    #[test]
    fn hook_values_map_one_to_one() {
        let names: Vec<_> = HookArg::value_variants()
            .iter()
            .map(|h| {
                let name = h.to_possible_value().expect("shown");
                (name.get_name().to_owned(), HookChoice::from(*h))
            })
            .collect();
        assert_eq!(
            names,
            [
                ("auto".to_owned(), HookChoice::Auto),
                ("xdp".to_owned(), HookChoice::Xdp),
                ("tc".to_owned(), HookChoice::Tc),
                ("sock".to_owned(), HookChoice::Sock),
            ]
        );
    }
}
