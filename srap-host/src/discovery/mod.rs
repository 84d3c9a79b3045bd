//! RSS discovery: reads a receiver NIC's RSS configuration from the kernel
//! and turns it into an [`RssDescription`], the same data a user would
//! write into an `--rss FILE`.
//!
//! Sources, in order: ethtool netlink `RSS_GET` ([`netlink`]), the
//! `ETHTOOL_GRSSH` ioctl when netlink cannot answer ([`ioctl`]); hashed
//! fields from the netlink reply (Linux ≥ 6.17) or `ETHTOOL_GRXFH`; queue →
//! CPU from IRQ names and affinities ([`irq`]) or RPS masks ([`rps`]).
//! Parsers are pure; this module does the reading and the deciding.
//!
//! Every part answers for the caller's network namespace ([`device`]): the
//! device and its queue count come from the kernel over netlink and ethtool,
//! and `/sys` (RPS masks) is read only when it shows this namespace.

pub mod device;
mod error;
pub mod hashing;
pub mod ioctl;
pub mod irq;
pub mod netlink;
pub mod placement;
pub mod rps;

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use srap_common::{
    protocol::{FlowType, Protocol},
    rss::{FieldsDescription, KeySource, RssDescription, RssModel},
};
use tracing::debug;

pub use self::{
    device::{Device, RpsUnread},
    error::{DiscoveryError, KernelKeyError},
};
use self::{
    ioctl::{EthtoolSocket, IoctlError},
    irq::IrqNaming,
    netlink::RssReply,
    placement::{QueueFacts, QueuePlacement},
};

/// The kernel's default RSS key, which drivers fill their keys from
/// (`netdev_rss_key_fill`); only the initial network namespace has it.
const KERNEL_KEY: &str = "/proc/sys/net/core/netdev_rss_key";
/// Key bytes taken from [`KERNEL_KEY`] when the driver reports neither key
/// nor size: what Toeplitz needs for any TCP tuple (36 bytes of IPv6 input
/// + 4), and the key length of igb, ixgbe, i40e and virtio-net.
const DEFAULT_KEY_LEN: usize = 40;

/// Linux's "operation not supported" for ethtool ops a driver lacks
/// (`EOPNOTSUPP`, or the kernel-internal `ENOTSUPP` that sometimes leaks).
const NOT_SUPPORTED: [i32; 2] = [libc::EOPNOTSUPP, 524];

/// Where the key and table came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RssSource {
    Netlink,
    Ioctl,
}

/// A device's RSS as discovered, with what else was learnt on the way.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub iface: String,
    pub driver: Option<String>,
    pub source: RssSource,
    /// Where the description's key comes from.
    pub key_source: KeySource,
    /// What `srap rss show --json` prints and a receiver serves.
    pub description: RssDescription,
    /// Every receive queue and the CPU it is counted on.
    pub queues: Vec<QueuePlacement>,
    /// Things that make the description less certain; shown to the user.
    pub warnings: Vec<String>,
}

/// The key and table, whichever way they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRss {
    /// `ETH_RSS_HASH_*` bit; 0 when the driver did not say.
    pub hfunc: u32,
    /// `RXH_XFRM_*` bits.
    pub xfrm_bits: u32,
    pub indir: Vec<u32>,
    pub key: Vec<u8>,
    /// `RXH_*` bits per flow type, those the RSS reply carried.
    pub flow_hash: Vec<(FlowType, u64)>,
    pub source: RssSource,
}

impl From<RssReply> for RawRss {
    fn from(reply: RssReply) -> Self {
        Self {
            hfunc: reply.hfunc.unwrap_or(0),
            xfrm_bits: reply.input_xfrm.unwrap_or(0),
            indir: reply.indir,
            key: reply.key,
            flow_hash: reply.flow_hash,
            source: RssSource::Netlink,
        }
    }
}

/// Everything discovery read from the system, as plain data; [`assemble`]
/// makes the decisions, so they are testable without a NIC.
#[derive(Debug)]
pub struct Observed {
    pub iface: String,
    pub driver: Option<String>,
    /// `major.minor` of the running kernel.
    pub kernel: Option<(u32, u32)>,
    pub rss: RawRss,
    /// `RXH_*` bits of each flow type of [`FlowType::ALL`] (from the RSS
    /// reply or `ETHTOOL_GRXFH`), or why they are unknown.
    pub flow_hash: Vec<(FlowType, Result<u64, IoctlError>)>,
    /// Receive queues the device has in use ([`Device::rx_queues`]).
    pub rx_queues: u32,
    /// Facts about queues `0..queue_count(rss, rx_queues)`.
    pub facts: Vec<QueueFacts>,
    /// Host-wide warnings (irqbalance, RFS).
    pub system_warnings: Vec<String>,
    /// `net.core.netdev_rss_key`, read when the driver reports no key (or
    /// why it could not be read).
    pub kernel_key: Option<Result<Vec<u8>, KernelKeyError>>,
}

/// How many queues to place: all the device has, and at least every queue
/// the indirection table names.
pub fn queue_count(rss: &RawRss, rx_queues: u32) -> u32 {
    rx_queues.max(rss.indir.iter().max().map_or(0, |m| m.saturating_add(1)))
}

/// Whether this network namespace has `iface` (asked of the kernel: `/sys`
/// shows another namespace's devices when entered with setns/nsenter).
pub fn iface_exists(iface: &str) -> bool {
    crate::link::Link::by_name(iface).is_ok_and(|link| link.is_some())
}

/// Discovers the RSS of `iface` in the caller's network namespace.
pub fn discover(iface: &str) -> Result<Discovery, DiscoveryError> {
    let device = Device::find(iface)?;
    let socket = EthtoolSocket::open(iface).map_err(|e| DiscoveryError::Unsupported {
        iface: iface.to_owned(),
        problem: e.to_string(),
    })?;
    let drvinfo = socket
        .drvinfo()
        .inspect_err(|e| debug!(iface, error = %e, "no driver info"))
        .ok();
    let rss = read_rss(iface, &socket)?;
    let flow_hash = FlowType::ALL
        .into_iter()
        .map(|flow| {
            let reported = rss.flow_hash.iter().find(|(f, _)| *f == flow);
            let bits = match reported {
                Some((_, bits)) => Ok(*bits),
                None => socket.flow_hash(flow),
            };
            (flow, bits)
        })
        .collect();
    let rx_queues = device.rx_queues;
    let mut warnings = Vec::new();
    let naming = IrqNaming {
        ifname: iface.to_owned(),
        driver: drvinfo.as_ref().map(|d| d.driver.clone()),
        bus_info: drvinfo
            .as_ref()
            .map(|d| d.bus_info.clone())
            .filter(|b| !b.is_empty()),
        virtio_index: device.virtio_index(),
    };
    let rps_dir = device
        .rps_dir()
        .map_err(|why| warnings.push(why.to_string()))
        .ok();
    let facts = queue_facts(
        Path::new("/"),
        &naming,
        queue_count(&rss, rx_queues),
        rps_dir.as_deref(),
        &mut warnings,
    );
    warnings.extend(system_warnings());
    let kernel_key = rss
        .key
        .is_empty()
        .then(|| read_kernel_key(Path::new(KERNEL_KEY)));
    assemble(Observed {
        iface: iface.to_owned(),
        driver: drvinfo.map(|d| d.driver),
        kernel: crate::kernel::running_version(),
        rss,
        flow_hash,
        rx_queues,
        facts,
        system_warnings: warnings,
        kernel_key,
    })
}

/// `net.core.netdev_rss_key` as bytes.
fn read_kernel_key(path: &Path) -> Result<Vec<u8>, KernelKeyError> {
    let text = fs::read_to_string(path).map_err(|source| KernelKeyError::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    let key = parse_hex_key(text.trim()).ok_or_else(|| KernelKeyError::NotAKey {
        path: path.to_owned(),
    })?;
    if key.iter().all(|&b| b == 0) {
        return Err(KernelKeyError::AllZeros {
            path: path.to_owned(),
        });
    }
    Ok(key)
}

/// `3c:3f:…` as bytes.
fn parse_hex_key(text: &str) -> Option<Vec<u8>> {
    text.split(':')
        .map(|byte| u8::from_str_radix(byte, 16).ok())
        .collect()
}

/// Decides the description from what was observed, and validates it.
pub fn assemble(observed: Observed) -> Result<Discovery, DiscoveryError> {
    let Observed {
        iface,
        driver,
        kernel,
        rss,
        flow_hash,
        rx_queues,
        mut facts,
        system_warnings,
        kernel_key,
    } = observed;
    let reached = queues_reached(&iface, &rss, rx_queues)?;
    let mut warnings = Vec::new();
    let (key, key_source) = effective_key(&iface, &rss, kernel_key);
    let drv = driver.as_deref().unwrap_or("unknown");
    match key_source {
        KeySource::KernelDefault => warnings.push(format!(
            "the driver ({drv}) reports no hash key: using the kernel's default key, the first \
             {} bytes of net.core.netdev_rss_key, which drivers fill their keys from; the \
             receiver agent checks it against where flows land",
            key.len()
        )),
        KeySource::Unknown => warnings.push(format!(
            "the driver ({drv}) reports no hash key and net.core.netdev_rss_key is not \
             readable here (only the initial network namespace has it): the key is unknown; \
             the receiver agent learns it from where flows land, and senders do not steer \
             until then"
        )),
        KeySource::Reported | KeySource::Learned => {}
    }
    let hfunc = hashing::hfunc_name(rss.hfunc).unwrap_or_else(|| {
        warnings.push("the driver does not name its hash function: assuming toeplitz".into());
        "toeplitz".into()
    });
    let reported =
        hashing::xfrm_name(rss.xfrm_bits).map_err(|source| DiscoveryError::Transform {
            iface: iface.clone(),
            source,
        })?;
    let (input_xfrm, note) = hashing::effective_xfrm(reported, driver.as_deref(), kernel);
    warnings.extend(note);
    let fields = hashed_fields(&iface, flow_hash, &mut warnings)?;

    facts.resize(queue_count(&rss, rx_queues) as usize, QueueFacts::default());
    let (queues, placement_warnings) = placement::place(&facts, &reached);
    warnings.extend(placement_warnings);
    warnings.extend(system_warnings);

    let description = RssDescription {
        hfunc,
        key: hex_key(&key),
        indir: rss.indir,
        input_xfrm: input_xfrm.to_owned(),
        fields,
        queue_cpu: Some(queues.iter().map(|q| q.cpu).collect()),
    };
    if let Err(source) = RssModel::from_description(&description) {
        return Err(DiscoveryError::Unmodelled { iface, source });
    }
    Ok(Discovery {
        iface,
        driver,
        source: rss.source,
        key_source,
        description,
        queues,
        warnings,
    })
}

/// The queues the indirection table reaches, or why the device does no RSS
/// SRAP could steer by (no table, no key, or a single queue).
fn queues_reached(iface: &str, rss: &RawRss, rx_queues: u32) -> Result<Vec<u32>, DiscoveryError> {
    let no_rss = |reason: &str| DiscoveryError::NoRss {
        iface: iface.to_owned(),
        reason: reason.into(),
    };
    if rss.indir.is_empty() {
        return Err(no_rss(if rx_queues <= 1 {
            "it has a single receive queue and reports no indirection table"
        } else {
            "the driver reports no indirection table"
        }));
    }
    let reached: Vec<u32> = rss
        .indir
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if reached.len() == 1 && rx_queues <= 1 {
        return Err(no_rss("it has a single receive queue"));
    }
    Ok(reached)
}

/// The key the device hashes with: the one the driver reports, else the
/// kernel's default key (`netdev_rss_key`), cut to [`DEFAULT_KEY_LEN`],
/// else a placeholder of zeros to be learned.
fn effective_key(
    iface: &str,
    rss: &RawRss,
    kernel_key: Option<Result<Vec<u8>, KernelKeyError>>,
) -> (Vec<u8>, KeySource) {
    if !rss.key.is_empty() {
        return (rss.key.clone(), KeySource::Reported);
    }
    let why = match kernel_key {
        Some(Ok(key)) if key.len() >= DEFAULT_KEY_LEN => {
            return (key[..DEFAULT_KEY_LEN].to_vec(), KeySource::KernelDefault);
        }
        Some(Ok(key)) => format!("it has {} bytes", key.len()),
        Some(Err(why)) => why.to_string(),
        None => "it was not read".into(),
    };
    debug!(iface, why, "no kernel default key");
    // A placeholder the receiver agent replaces with what the landings
    // teach; senders do not steer by it (see KeySource::Unknown).
    (vec![0; DEFAULT_KEY_LEN], KeySource::Unknown)
}

/// The hashed fields of each flow type from `rx-flow-hash`, keyed by
/// protocol and family. TCP's (what SRAP steers) are needed: it warns when
/// the source port is not hashed (SRAP cannot steer such flows) or the
/// driver does not say (the default is assumed), and fails on a type the
/// NIC discards or fields it cannot name. UDP's are recorded where the NIC
/// answers, and left out otherwise (nothing steers by them yet).
fn hashed_fields(
    iface: &str,
    flow_hash: Vec<(FlowType, Result<u64, IoctlError>)>,
    warnings: &mut Vec<String>,
) -> Result<FieldsDescription, DiscoveryError> {
    let mut fields = FieldsDescription::default();
    for (flow, bits) in flow_hash {
        let name = flow.name();
        match flow.protocol {
            Protocol::Tcp => {
                if let Some(letters) = tcp_fields(iface, name, bits, warnings)? {
                    fields.set(flow, letters);
                }
            }
            Protocol::Udp => match bits.map(hashing::rxh_letters) {
                Ok(Ok(letters)) => fields.set(flow, letters),
                Ok(Err(why)) => debug!(iface, flow = name, why = %why, "no hashed fields recorded"),
                Err(why) => debug!(iface, flow = name, why = %why, "no hashed fields recorded"),
            },
        }
    }
    Ok(fields)
}

/// One TCP flow type's letters from its `RXH_*` bits; `None` (the default
/// kept) when the driver does not say.
fn tcp_fields(
    iface: &str,
    name: &'static str,
    bits: Result<u64, IoctlError>,
    warnings: &mut Vec<String>,
) -> Result<Option<String>, DiscoveryError> {
    let bits = match bits {
        Ok(bits) => bits,
        Err(err) => {
            warnings.push(format!(
                "rx-flow-hash {name} unknown ({err}): assuming sdfn \
                 (`ethtool -n {iface} rx-flow-hash {name}` shows it)"
            ));
            return Ok(None);
        }
    };
    let letters = hashing::rxh_letters(bits).map_err(|source| DiscoveryError::FlowHash {
        iface: iface.to_owned(),
        flow: name,
        source,
    })?;
    if !letters.contains('f') {
        warnings.push(format!(
            "rx-flow-hash {name} is `{letters}`: the source port is not hashed, so \
             SRAP cannot steer {name} flows (`ethtool -N {iface} rx-flow-hash \
             {name} sdfn`)"
        ));
    }
    Ok(Some(letters))
}

/// Key and table: netlink first, then the ioctl.
fn read_rss(iface: &str, socket: &EthtoolSocket) -> Result<RawRss, DiscoveryError> {
    let netlink = match netlink::rss_get(iface) {
        Ok(reply) => return Ok(reply.into()),
        Err(err) => err,
    };
    debug!(iface, error = %netlink, "netlink RSS_GET failed; trying ETHTOOL_GRSSH");
    match socket.rxfh() {
        Ok(rxfh) => Ok(RawRss {
            hfunc: u32::from(rxfh.hfunc),
            xfrm_bits: u32::from(rxfh.input_xfrm),
            indir: rxfh.indir,
            key: rxfh.key,
            flow_hash: Vec::new(),
            source: RssSource::Ioctl,
        }),
        Err(ioctl) => {
            let unsupported =
                |errno: Option<i32>| errno.is_some_and(|e| NOT_SUPPORTED.contains(&e));
            if unsupported(ioctl.errno())
                && (unsupported(netlink.errno()) || netlink.errno().is_none())
            {
                Err(DiscoveryError::NoRss {
                    iface: iface.to_owned(),
                    reason: "its driver does not report an RSS key or indirection table \
                             (as for veth, lo and single-queue virtio)"
                        .into(),
                })
            } else if ioctl.errno() == Some(libc::ENODEV) {
                Err(DiscoveryError::NoSuchInterface {
                    iface: iface.to_owned(),
                })
            } else {
                Err(DiscoveryError::Query {
                    iface: iface.to_owned(),
                    netlink,
                    ioctl,
                })
            }
        }
    }
}

/// `6d:5a:56:…`, as ethtool prints keys.
fn hex_key(key: &[u8]) -> String {
    key.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|t| t.trim().to_owned())
}

/// IRQ, affinity and RPS mask of every queue, read from `/proc` under
/// `root` (`/` on a live host; a directory laid out the same way in tests)
/// and from the device's `queues` directory in `/sys` (`None`: not read).
/// Missing files are not errors: the placement then falls back, and says so.
fn queue_facts(
    root: &Path,
    naming: &IrqNaming,
    queues: u32,
    rps_dir: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Vec<QueueFacts> {
    let interrupts = fs::read_to_string(root.join("proc/interrupts")).unwrap_or_default();
    let irqs = naming.queue_irqs(&irq::parse_interrupts(&interrupts));
    let cpus = |path: PathBuf| -> Vec<u32> {
        read_trimmed(&path)
            .map(|text| crate::cpulist::parse(&text).map(|cpus| cpus.into_iter().collect()))
            .transpose()
            .unwrap_or_else(|e| {
                debug!(path = %path.display(), error = %e, "unreadable CPU list");
                None
            })
            .unwrap_or_default()
    };
    (0..queues)
        .map(|queue| {
            let irq = irqs.get(&queue).copied();
            let rps_path = rps_dir.map(|dir| dir.join(format!("rx-{queue}/rps_cpus")));
            let read = rps_path.as_deref().and_then(read_trimmed);
            let rps = match read.map(|t| rps::parse_cpu_mask(&t)) {
                Some(Ok(cpus)) => cpus,
                Some(Err(e)) => {
                    let path = rps_path.as_deref().unwrap_or(Path::new("rps_cpus"));
                    warnings.push(format!("{}: {e}", path.display()));
                    Vec::new()
                }
                None => Vec::new(),
            };
            let irq_list = |file: &str| {
                irq.map_or_else(Vec::new, |n| {
                    cpus(root.join(format!("proc/irq/{n}/{file}")))
                })
            };
            QueueFacts {
                irq,
                affinity: irq_list("smp_affinity_list"),
                effective: irq_list("effective_affinity_list"),
                hint: irq.map_or_else(Vec::new, |n| {
                    hint_cpus(&root.join(format!("proc/irq/{n}/affinity_hint")))
                }),
                rps,
            }
        })
        .collect()
}

/// The CPUs of an `affinity_hint` mask (hex words, as `rps_cpus`); none
/// when the driver set no hint (the mask is all zeros) or it is unreadable.
fn hint_cpus(path: &Path) -> Vec<u32> {
    read_trimmed(path)
        .and_then(|text| rps::parse_cpu_mask(&text).ok())
        .unwrap_or_default()
}

/// Host-wide things that move flows between CPUs behind SRAP's back.
fn system_warnings() -> Vec<String> {
    let mut warnings = Vec::new();
    if irqbalance_running() {
        warnings.push(
            "irqbalance is running: it may move queue IRQs to other CPUs at any time \
             (stop it, or ban these IRQs, and pin them)"
                .into(),
        );
    }
    let rfs = read_trimmed(Path::new("/proc/sys/net/core/rps_sock_flow_entries"))
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0);
    if rfs > 0 {
        warnings.push(
            "RFS is on (net.core.rps_sock_flow_entries > 0): flows follow their \
             application's CPU, not the RSS queue's"
                .into(),
        );
    }
    warnings
}

fn irqbalance_running() -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|entry| {
        let name = entry.file_name();
        name.to_string_lossy().bytes().all(|b| b.is_ascii_digit())
            && read_trimmed(&entry.path().join("comm")).is_some_and(|comm| comm == "irqbalance")
    })
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::{
        irq::{IrqNaming, parse_interrupts},
        netlink::tests::{key, parse, round_robin, rss_reply},
        *,
    };

    /// What discovery would observe on a host whose /proc/interrupts is
    /// `interrupts`, with each IRQ pinned to the CPU that counted it.
    fn observed(
        reply: &[u8],
        driver: &str,
        kernel: (u32, u32),
        rx_queues: u32,
        naming: &IrqNaming,
        interrupts: &str,
        pinning: &[(u32, Vec<u32>)],
    ) -> Observed {
        let rss: RawRss = parse(reply).expect("fixture parses").into();
        let irqs = naming.queue_irqs(&parse_interrupts(interrupts));
        let facts = (0..queue_count(&rss, rx_queues))
            .map(|q| {
                let irq = irqs.get(&q).copied();
                let affinity = irq
                    .and_then(|n| pinning.iter().find(|(i, _)| *i == n))
                    .map(|(_, cpus)| cpus.clone())
                    .unwrap_or_default();
                QueueFacts {
                    irq,
                    affinity,
                    effective: Vec::new(),
                    hint: Vec::new(),
                    rps: Vec::new(),
                }
            })
            .collect();
        Observed {
            iface: naming.ifname.clone(),
            driver: Some(driver.into()),
            kernel: Some(kernel),
            flow_hash: FlowType::ALL
                .into_iter()
                .map(|flow| {
                    let reported = rss.flow_hash.iter().find(|(f, _)| *f == flow);
                    let bits = match (reported, flow.protocol) {
                        (Some((_, bits)), _) => Ok(*bits),
                        (None, Protocol::Tcp) => Ok(0xf0),
                        (None, Protocol::Udp) => Err(IoctlError::Os {
                            what: "ETHTOOL_GRXFH",
                            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                        }),
                    };
                    (flow, bits)
                })
                .collect(),
            rss,
            rx_queues,
            facts,
            system_warnings: Vec::new(),
            kernel_key: None,
        }
    }

    fn naming(ifname: &str, driver: &str, bus: Option<&str>, virtio: Option<u32>) -> IrqNaming {
        IrqNaming {
            ifname: ifname.into(),
            driver: Some(driver.into()),
            bus_info: bus.map(Into::into),
            virtio_index: virtio,
        }
    }

    #[test]
    fn mlx5_fixture_on_an_old_kernel() {
        let reply = rss_reply("enp8s0f0np0", &round_robin(256, 4), &key(40), None, None);
        let discovery = assemble(observed(
            &reply,
            "mlx5_core",
            (6, 1),
            4,
            &naming("enp8s0f0np0", "mlx5_core", Some("0000:08:00.0"), None),
            irq::tests::MLX5,
            &[(98, vec![0]), (99, vec![1]), (100, vec![2]), (101, vec![3])],
        ))
        .unwrap();
        let desc = &discovery.description;
        assert_eq!(desc.hfunc, "toeplitz");
        assert_eq!(desc.indir.len(), 256);
        assert_eq!(desc.key.len(), 40 * 3 - 1);
        assert_eq!(desc.input_xfrm, "sym-or-xor");
        assert_eq!(desc.fields.tcp4, "sdfn");
        assert_eq!(desc.queue_cpu.as_deref(), Some(&[0, 1, 2, 3][..]));
        assert_eq!(discovery.warnings.len(), 1, "{:?}", discovery.warnings);
        assert!(discovery.warnings[0].contains("assumed sym-or-xor"));
        // The JSON is the description format, and reads back the same.
        let json = desc.to_json_pretty();
        println!("{json}");
        assert_eq!(&RssDescription::from_json(&json).unwrap(), desc);
    }

    #[test]
    fn ice_fixture_with_sym_xor_and_a_shared_cpu() {
        let reply = rss_reply(
            "ens1f0",
            &round_robin(512, 2),
            &key(52),
            Some(1),
            Some((0xf0, 0x30)),
        );
        let discovery = assemble(observed(
            &reply,
            "ice",
            (6, 18),
            2,
            &naming("ens1f0", "ice", Some("0000:3b:00.0"), None),
            irq::tests::ICE,
            &[(141, vec![1]), (142, vec![1])],
        ))
        .unwrap();
        let desc = &discovery.description;
        assert_eq!(desc.input_xfrm, "sym-xor");
        assert_eq!(
            (desc.fields.tcp4.as_str(), desc.fields.tcp6.as_str()),
            ("sdfn", "sd")
        );
        assert_eq!(
            (
                desc.fields.of(FlowType::UDP4),
                desc.fields.of(FlowType::UDP6)
            ),
            (Some("sd"), None),
            "UDP's where the NIC said, without a warning"
        );
        assert!(desc.to_json_pretty().contains(r#""udp4": "sd""#));
        assert_eq!(desc.queue_cpu.as_deref(), Some(&[1, 1][..]));
        assert_eq!(discovery.warnings.len(), 2, "{:?}", discovery.warnings);
        assert!(discovery.warnings[0].starts_with("rx-flow-hash tcp6 is `sd`"));
        assert_eq!(
            discovery.warnings[1],
            "queues 0,1 are all served by CPU 1: flows on them share one core"
        );
    }

    #[test]
    fn virtio_fixture_with_a_spread_irq_and_a_missing_queue() {
        let reply = rss_reply("eth0", &round_robin(128, 3), &key(40), None, None);
        let discovery = assemble(observed(
            &reply,
            "virtio_net",
            (6, 18),
            3,
            &naming("eth0", "virtio_net", None, Some(0)),
            irq::tests::VIRTIO,
            &[(25, vec![0]), (27, vec![0, 1])],
        ))
        .unwrap();
        assert_eq!(
            discovery.description.queue_cpu.as_deref(),
            Some(&[0, 0, 2][..])
        );
        let warnings = discovery.warnings.join("\n");
        assert!(
            warnings.contains("queue(s) 1 may run on CPUs 0,1"),
            "{warnings}"
        );
        assert!(warnings.contains("queue(s) 2"), "{warnings}");
        assert!(
            warnings.contains("queues 0,1 are all served by CPU 0"),
            "{warnings}"
        );
    }

    #[test]
    fn one_queue_or_no_table_is_no_rss() {
        let reply = rss_reply("eth0", &[0; 128], &key(40), None, None);
        let err = assemble(observed(
            &reply,
            "virtio_net",
            (6, 18),
            1,
            &naming("eth0", "virtio_net", None, Some(0)),
            "",
            &[],
        ))
        .unwrap_err();
        assert!(matches!(err, DiscoveryError::NoRss { .. }), "{err}");
        let reply = rss_reply("eth0", &[], &key(40), None, None);
        let err = assemble(observed(
            &reply,
            "x",
            (6, 18),
            4,
            &naming("eth0", "x", None, None),
            "",
            &[],
        ))
        .unwrap_err();
        assert!(err.to_string().contains("--rss FILE"), "{err}");
    }

    #[test]
    fn unmodelled_hash_functions_and_fields_are_refused() {
        let reply = rss_reply("eth0", &round_robin(128, 4), &key(40), Some(3), None);
        let err = assemble(observed(
            &reply,
            "x",
            (6, 18),
            4,
            &naming("eth0", "x", None, None),
            "",
            &[],
        ))
        .unwrap_err();
        assert!(matches!(err, DiscoveryError::Transform { .. }), "{err}");
        let mut obs = observed(
            &rss_reply("eth0", &round_robin(128, 4), &key(40), None, None),
            "x",
            (6, 18),
            4,
            &naming("eth0", "x", None, None),
            "",
            &[],
        );
        obs.rss.hfunc = 2; // xor
        let err = assemble(obs).unwrap_err();
        assert!(matches!(err, DiscoveryError::Unmodelled { .. }), "{err}");
    }

    #[test]
    fn a_driver_without_a_key_gets_the_kernel_default_key() {
        // igb on 6.12: the netlink reply has the table and no HKEY.
        let reply = rss_reply("eth0", &round_robin(128, 4), &[], Some(1), None);
        let igb = naming("eth0", "igb", Some("0000:00:03.0"), None);
        let observe = || observed(&reply, "igb", (6, 12), 4, &igb, "", &[]);
        let mut obs = observe();
        let kernel: Vec<u8> = (0..52).collect();
        obs.kernel_key = Some(Ok(kernel.clone()));
        let found = assemble(obs).expect("described");
        assert_eq!(found.key_source, KeySource::KernelDefault);
        assert_eq!(found.description.key, hex_key(&kernel[..40]));
        assert!(
            found.warnings[0].contains("reports no hash key")
                && found.warnings[0].contains("first 40 bytes of net.core.netdev_rss_key"),
            "{:?}",
            found.warnings
        );
        // Outside the initial namespace the sysctl is missing: the key is
        // unknown (a placeholder to learn), and the warning says so.
        let mut obs = observe();
        obs.kernel_key = Some(Err(KernelKeyError::Unreadable {
            path: KERNEL_KEY.into(),
            source: io::ErrorKind::NotFound.into(),
        }));
        let found = assemble(obs).expect("described");
        assert_eq!(found.key_source, KeySource::Unknown);
        assert!(
            found.warnings[0].contains("the key is unknown"),
            "{:?}",
            found.warnings
        );
    }

    #[test]
    fn the_kernel_key_reads_as_the_sysctl_prints_it() {
        assert_eq!(parse_hex_key("3c:3f:0e"), Some(vec![0x3c, 0x3f, 0x0e]));
        assert_eq!(parse_hex_key("3c:zz"), None);
    }

    #[test]
    fn keys_print_as_ethtool_does() {
        assert_eq!(hex_key(&[0x6d, 0x5a, 0x05]), "6d:5a:05");
        assert_eq!(hex_key(&[]), "");
    }

    #[test]
    fn a_missing_interface_is_named() {
        let err = discover("srap-no-such0").unwrap_err();
        assert!(
            matches!(err, DiscoveryError::NoSuchInterface { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("srap-no-such0"));
    }

    #[test]
    fn the_no_rss_message_points_at_rss_file() {
        let err = DiscoveryError::NoRss {
            iface: "veth0".into(),
            reason: "its driver does not report an RSS key or indirection table".into(),
        };
        let text = err.to_string();
        assert!(text.contains("veth0 has no RSS"));
        assert!(text.contains("--rss FILE"));
    }

    /// `/proc` as a 4-vCPU, 4-queue virtio_net guest shows it, with each
    /// queue's IRQ pinned to its own CPU and `effective` as last routed.
    fn guest_proc(effective: [u32; 4]) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "srap-discovery-{}-{}",
            std::process::id(),
            effective.map(|c| c.to_string()).concat()
        ));
        let mut interrupts = String::from("  CPU0 CPU1 CPU2 CPU3\n");
        for queue in 0..4u32 {
            let irq = 25 + 2 * queue;
            interrupts += &format!(
                " {irq}: 0 0 0 0 PCI-MSIX-0000:00:03.0 {}-edge virtio0-input.{queue}\n",
                1 + 2 * queue
            );
            let dir = root.join(format!("proc/irq/{irq}"));
            fs::create_dir_all(&dir).expect("fixture dir");
            fs::write(dir.join("smp_affinity_list"), format!("{queue}\n")).expect("fixture");
            let now = effective[queue as usize];
            fs::write(dir.join("effective_affinity_list"), format!("{now}\n")).expect("fixture");
        }
        fs::write(root.join("proc/interrupts"), interrupts).expect("fixture");
        root
    }

    fn guest_cpus(effective: [u32; 4]) -> (Vec<u32>, Vec<String>) {
        let root = guest_proc(effective);
        let naming = IrqNaming {
            ifname: "eth0".into(),
            driver: Some("virtio_net".into()),
            bus_info: None,
            virtio_index: Some(0),
        };
        let mut warnings = Vec::new();
        let facts = queue_facts(&root, &naming, 4, None, &mut warnings);
        let _ = fs::remove_dir_all(&root);
        let (placed, place_warnings) = placement::place(&facts, &[0, 1, 2, 3]);
        warnings.extend(place_warnings);
        (placed.iter().map(|p| p.cpu).collect(), warnings)
    }

    #[test]
    fn queue_cpu_is_true_before_the_first_interrupt() {
        // Before any queue's first interrupt the guest shows the boot CPUs.
        let (before, warnings) = guest_cpus([3, 1, 3, 1]);
        assert_eq!(before, [0, 1, 2, 3]);
        assert!(warnings.is_empty(), "{warnings:?}");
        // After traffic reached every queue: the same description.
        let (after, warnings) = guest_cpus([0, 1, 2, 3]);
        assert_eq!(after, before);
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
