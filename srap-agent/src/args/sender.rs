//! The flags of `srap-agent sender`: every name, help text and parser is
//! here (stable: README.md and docs/ show them), and [`SenderSettings`]
//! is what the library takes of them.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::PathBuf,
};

use srap_common::port_range::PortRange;
use srap_daemon::sender::{
    PacingRate,
    choices::MptcpMode,
    ends::{LocalNicsPolicy, LocalPlacement, LocalSettings, PlacedEnds, SourceRules},
    local::bond::BondMembers,
    settings::{DescriptionSource, SenderSettings, SizeSettings},
    spread::ReceiverNicsMode,
};

/// Where the receiver's RSS description comes from: exactly one of
/// `--rss` and `--peer` (clap's group says so when both are given; with
/// neither, `rss` or `peers` of `--config` — [`SenderSettings::resolved`]).
#[derive(clap::Args, Debug, Clone)]
#[group(id = "description", required = false, multiple = false)]
pub struct DescriptionSourceArgs {
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

/// `srap-agent sender`'s flags: `None` or empty where not given, so the
/// `--config` file can fill them in (flags win).
#[derive(clap::Args, Debug, Clone)]
pub struct SenderArgs {
    /// A TOML file with any of these settings (keys named as the flags,
    /// lists in the plural: `peers`, `receivers`, `ports`,
    /// `report-ports`); flags given here win over it. An unknown key is an
    /// error.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub source: DescriptionSourceArgs,
    /// Pre-shared key the receiver agent must prove (and we prove to it).
    /// Read again before every connection, so a rotated key is used from
    /// the next one on.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
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
    /// Read the flags and the --config file as a start would, print the
    /// settings it would run with, and exit: 0 when a start would accept
    /// them, 2 with the error it would give. Touches nothing of the host
    /// (no eBPF, no cgroup, no socket, no NIC discovery), so it needs no
    /// privilege.
    #[arg(long)]
    pub check: bool,
    /// With --peer: the sender agent's control socket, where `srap status
    /// --sender` reads every receiver, its description version, its grant
    /// and the binder's counters (not made with --once)
    /// [default: /run/srap/sender.sock].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics (the binder's counters, the occupancy
    /// audit's repairs) on http://ADDR/metrics, e.g. `127.0.0.1:9448`
    /// (with the control socket: not with --once).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Seconds between counter reports (and occupancy audits) while
    /// running [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<u64>,
    /// When the route toward a receiver leaves by a bond whose member the
    /// port decides (`balance-xor` or `802.3ad` with `layer3+4`):
    /// `balance`, each flow also on an even share of the usable members
    /// (followed as members go down or up); `ignore`, the receiver's CPUs
    /// only [default: balance].
    #[arg(long, value_enum, value_name = "HOW")]
    pub bond_members: Option<BondMembers>,
    /// Which of a receiver's addresses a steered flow goes to, when its
    /// agent serves several NICs (`--iface` repeated): `asked`, the one
    /// the application connected to, as the kernel does; `spread`, in
    /// turn every address of that receiver whose listener accepts the
    /// port, whose NIC is up and that this host routes to, each flow on a
    /// CPU of the NIC it enters. The application's getpeername() still
    /// returns the address it asked for [default: asked].
    #[arg(long, value_enum, value_name = "WHICH")]
    pub receiver_nics: Option<ReceiverNicsMode>,
    /// What the binder does with MPTCP connections: `off`, each subflow
    /// keeps the kernel's port and no MPTCP program is loaded; `subflows`,
    /// every subflow steered to a receiver CPU of its own and released at
    /// its close [default: off].
    #[arg(long, value_enum, value_name = "HOW")]
    pub mptcp: Option<MptcpMode>,
    #[command(flatten)]
    pub local: LocalArgs,
    #[command(flatten)]
    pub sizes: SizeArgs,
}

/// What the binder's pinned maps are sized for: the kernel memory they
/// take grows with each (docs/binder.md gives the formula). A plan that
/// needs more stops with an error naming the flag to raise; a binder
/// already attached keeps the sizes it was made with (change them after
/// `srap-agent detach`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SizeArgs {
    /// Receiver addresses steered toward (each --receiver, or each address
    /// of a --peer) [default: 64].
    #[arg(long, value_name = "N")]
    pub max_receivers: Option<u32>,
    /// CPUs of one receiver its RSS reaches, and of this host with --steer
    /// local|both [default: 512, the most SRAP steers].
    #[arg(long, value_name = "N")]
    pub max_cpus: Option<u32>,
    /// Steered sockets open at once (the socket table has twice as many
    /// rows, rounded up to a power of two) [default: 32768].
    #[arg(long, value_name = "N")]
    pub max_sockets: Option<u32>,
    /// Distinct RSS layouts: one per receiver address family and
    /// description, one per --port of a receiver whose hash is not linear
    /// in the ports, and this host's NIC's [default: --max-receivers + 1].
    #[arg(long, value_name = "N")]
    pub max_layouts: Option<u32>,
}

/// Which NIC the ports are chosen for, and this host's own NIC when it is
/// one of them (see `docs/directions.md`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LocalArgs {
    /// Whose CPUs each steered flow is placed on: `remote`, the
    /// receiver's (its NIC hashes the data this host sends: uploads);
    /// `local`, this host's own (its NIC hashes the reverse tuple: the data
    /// of downloads over connections this host opens, the ACKs of
    /// uploads), which needs no agent on the server; `both`, one port for
    /// both NICs [default: remote].
    #[arg(long, value_enum, value_name = "WHICH")]
    pub steer: Option<PlacedEnds>,
    /// With --steer local|both: this host's NIC, discovered as the
    /// receiver agent discovers its own (key, table, hashed fields,
    /// transform, queue → CPU, RPS, NUMA node). Give it once per NIC SRAP
    /// may place flows on: flows are placed on the first's queues, every
    /// one is described and shown (`srap status --sender`). With
    /// --local-nics numa|balance (also under --steer remote): the NICs
    /// whose addresses the connect hook chooses among.
    #[arg(
        long,
        value_name = "DEV",
        conflicts_with = "local_rss",
        action = clap::ArgAction::Append
    )]
    pub local_iface: Vec<String>,
    /// Which of this host's NICs a steered flow leaves and arrives by
    /// where several reach its destination: `route`, the route's (as the
    /// kernel chooses); `numa`, the one on the connecting CPU's NUMA node;
    /// `balance`, spread evenly. The hook binds that NIC's address (an
    /// application's own address is kept); where the NIC cannot take the
    /// flow (node unknown, down, no address of the family, routed by
    /// another NIC) the route's address, counted as `nic_fallback`
    /// [default: route].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub local_nics: Option<LocalNicsPolicy>,
    /// With --local-nics numa|balance and several --local-iface: `check`
    /// says which source rules (`ip rule add from ADDR table N`) the NICs
    /// lack for flows to leave and come back by the NIC of their address;
    /// `install` also adds them (priority 23040, table 23040 + ifindex,
    /// protocol 90) and removes exactly those on detach and on a clean
    /// stop [default: check].
    #[arg(long, value_enum, value_name = "MODE")]
    pub source_rules: Option<SourceRules>,
    /// With --steer local|both: this host's NIC described in a file (the
    /// JSON `srap rss show --json` prints), offline.
    #[arg(long, value_name = "FILE")]
    pub local_rss: Option<PathBuf>,
    /// With --steer local|both: only these CPUs of this host take steered
    /// flows, as a cpulist (`0-7,16-23`) [default: every CPU a receive
    /// queue reaches, those on the NIC's NUMA node first].
    #[arg(long, value_name = "LIST", value_parser = super::parse_cpus)]
    pub local_cpus: Option<BTreeSet<u32>>,
    /// With --steer local|both: which of this host's CPUs each flow's
    /// local end goes to: `spread`, the least occupied; `reader`, the CPU
    /// of the thread that connects (its own queue's, else the nearest:
    /// SMT sibling, last-level cache, NUMA node), so a pinned reader gets
    /// its data on its own CPU. Holds for the CPU at connect() [default:
    /// spread].
    #[arg(long, value_enum, value_name = "WHERE")]
    pub local_placement: Option<LocalPlacement>,
}

impl From<SenderArgs> for SenderSettings {
    /// The flags as the library takes them, nothing resolved yet: the
    /// `--config` file is merged under them by [`SenderSettings::resolved`].
    fn from(args: SenderArgs) -> Self {
        Self {
            config: args.config,
            source: DescriptionSource {
                rss: args.source.rss,
                peer: args.source.peer,
            },
            psk_file: args.psk_file,
            peer_psk_files: BTreeMap::new(),
            peer_wait: args.peer_wait,
            report_ports: args.report_ports,
            receivers: args.receivers,
            ports: args.ports,
            cgroup: args.cgroup,
            pacing_rate: args.pacing_rate,
            pin_dir: args.pin_dir,
            port_range: args.port_range,
            once: args.once,
            control: args.control,
            metrics: args.metrics,
            interval: args.interval,
            bond_members: args.bond_members,
            receiver_nics: args.receiver_nics,
            mptcp: args.mptcp,
            local: LocalSettings {
                placed_ends: args.local.steer,
                local_ifaces: args.local.local_iface,
                local_nics: args.local.local_nics,
                source_rules: args.local.source_rules,
                local_rss: args.local.local_rss,
                local_cpus: args.local.local_cpus,
                local_placement: args.local.local_placement,
            },
            sizes: SizeSettings {
                max_receivers: args.sizes.max_receivers,
                max_cpus: args.sizes.max_cpus,
                max_sockets: args.sizes.max_sockets,
                max_layouts: args.sizes.max_layouts,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser as _;

    use super::*;
    use crate::{Cli, Command};

    /// `srap-agent sender FLAGS…` as the library gets it.
    fn settings(flags: &[&str]) -> SenderSettings {
        let argv = ["srap-agent", "sender"]
            .into_iter()
            .chain(flags.iter().copied());
        match Cli::try_parse_from(argv).expect("flags").command {
            Command::Sender(args) => (*args).into(),
            other => panic!("not the sender: {other:?}"),
        }
    }

    #[test]
    fn every_flag_lands_in_its_setting() {
        let set = settings(&[
            "--config=/etc/srap/sender.toml",
            "--peer=a:7447",
            "--peer=b:7447",
            "--psk-file=/k",
            "--peer-wait=9",
            "--report-port=443",
            "--receiver=10.0.0.2",
            "--port=5201",
            "--cgroup=srap",
            "--pacing-rate=25gbit",
            "--pin-dir=/sys/fs/bpf/x",
            "--port-range=40000-60999",
            "--once",
            "--control=/run/x.sock",
            "--metrics=127.0.0.1:9448",
            "--interval=5",
            "--steer=both",
            "--local-iface=eth0",
            "--local-iface=eth1",
            "--local-nics=balance",
            "--local-cpus=0-3",
            "--local-placement=reader",
            "--bond-members=ignore",
            "--max-receivers=3",
            "--max-cpus=4",
            "--max-sockets=5",
            "--max-layouts=6",
        ]);
        assert_eq!(
            set.config.as_deref(),
            Some(Path::new("/etc/srap/sender.toml"))
        );
        assert_eq!(set.source.rss, None);
        assert_eq!(set.source.peer, ["a:7447", "b:7447"]);
        assert_eq!(set.psk_file.as_deref(), Some(Path::new("/k")));
        assert!(set.peer_psk_files.is_empty(), "only --config names them");
        assert_eq!(set.peer_wait, Some(9));
        assert_eq!(set.bond_members, Some(BondMembers::Ignore));
        assert_eq!(
            (&set.report_ports[..], &set.ports[..]),
            (&[443][..], &[5201][..])
        );
        assert_eq!(set.receivers, ["10.0.0.2".parse::<IpAddr>().expect("ip")]);
        assert_eq!(set.cgroup.as_deref(), Some(Path::new("srap")));
        assert_eq!(set.pacing_rate, Some("25gbit".parse().expect("rate")));
        assert_eq!(set.pin_dir.as_deref(), Some(Path::new("/sys/fs/bpf/x")));
        assert_eq!(set.port_range, Some("40000-60999".parse().expect("range")));
        assert!(set.once);
        assert_eq!(set.control.as_deref(), Some(Path::new("/run/x.sock")));
        assert_eq!(set.metrics, Some("127.0.0.1:9448".parse().expect("addr")));
        assert_eq!(set.interval, Some(5));
        assert_eq!(set.local.placed_ends, Some(PlacedEnds::Both));
        assert_eq!(set.local.local_ifaces, ["eth0", "eth1"]);
        assert_eq!(set.local.local_nics, Some(LocalNicsPolicy::Balance));
        assert_eq!(set.local.local_rss, None);
        assert_eq!(set.local.local_cpus, Some((0..4).collect()));
        assert_eq!(set.local.local_placement, Some(LocalPlacement::Reader));
        let sizes = &set.sizes;
        assert_eq!(
            (
                sizes.max_receivers,
                sizes.max_cpus,
                sizes.max_sockets,
                sizes.max_layouts
            ),
            (Some(3), Some(4), Some(5), Some(6))
        );
        let none = settings(&[]);
        assert!(none.config.is_none() && none.local.placed_ends.is_none() && !none.once);
        assert!(none.local.local_ifaces.is_empty() && none.local.local_nics.is_none());
        let one = settings(&["--steer=local", "--local-iface", "eth0"]);
        assert_eq!(one.local.local_ifaces, ["eth0"], "one NIC");
        assert_eq!(
            none.pin_dir(),
            Path::new(srap_daemon::sender::DEFAULT_PIN_DIR)
        );
    }

    /// `--local-placement reader` needs this host's NIC planned.
    #[test]
    fn reader_placement_needs_this_hosts_nic() {
        let err = settings(&["--local-placement=reader"])
            .local
            .check(srap_daemon::sender::choices::MptcpMode::Off)
            .expect_err("reader without this host's NIC");
        assert!(
            err.to_string().contains("--local-placement reader"),
            "{err}"
        );
    }

    /// The rules of the local flags, from the command line through the
    /// library's check (the precedence over `--config` is the library's
    /// test).
    #[test]
    fn local_steering_needs_this_hosts_nic_and_the_destinations_only() {
        let ok = settings(&[
            "--steer",
            "local",
            "--local-iface",
            "eth0",
            "--receiver",
            "10.0.0.2",
        ]);
        let resolved = ok.resolved().expect("no receiver description needed");
        assert_eq!(resolved.local.placed_ends(), PlacedEnds::Local);
        for (flags, says) in [
            (
                &["--steer", "local", "--receiver", "10.0.0.2"][..],
                "--local-iface",
            ),
            (
                &["--steer", "local", "--local-iface", "eth0"][..],
                "destinations",
            ),
            (
                &[
                    "--steer",
                    "local",
                    "--local-iface",
                    "e",
                    "--rss",
                    "r.json",
                    "--receiver",
                    "1.2.3.4",
                ][..],
                "leave --rss out",
            ),
            (
                &["--local-iface", "eth0", "--peer", "r:7447"][..],
                "--steer local or both",
            ),
            (
                &["--steer", "both", "--local-iface", "eth0"][..],
                "description source",
            ),
            (&["--steer", "both", "--peer", "r:7447"][..], "--local-rss"),
        ] {
            let err = settings(flags).resolved().expect_err("refused");
            assert!(err.to_string().contains(says), "{flags:?}: {err}");
        }
    }
}
