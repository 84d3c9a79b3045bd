//! What the guest says of itself, read with its own tools and not with
//! SRAP's: per-queue receive counters (`ethtool -S`), the RSS configuration
//! as `ethtool -x` prints it, and the source ports its server accepted.
//! The lab's verdict and the tests judge SRAP by these.

use std::{collections::BTreeSet, net::IpAddr};

use anyhow::{Context as _, bail};
use srap_common::rss::{FieldsDescription, FlowTuple, RssDescription, RssModel};

use super::{
    files::GuestKernel,
    qemu::{GUEST_IFACE, Guest, GuestNet, GuestNic},
};

/// Per receive queue N = 0.., what the guest counts of it: the driver's
/// `rx_queue_N_packets` in `ethtool -S` (igb, virtio_net on 6.1). The 6.12
/// virtio_net driver moved its per-queue packet counts out of `ethtool -S`
/// (to netdev netlink queue stats, which busybox cannot read): there, each
/// queue's interrupts in `/proc/interrupts` (`virtioK-input.N`, summed over
/// CPUs; virtio has no watchdog firing them idle), which rise with the
/// packets the queue receives.
pub fn rx_queue_packets(guest: &mut Guest) -> anyhow::Result<Vec<u64>> {
    let stats = guest.read(&format!("ethtool -S {GUEST_IFACE}"))?;
    match parse_rx_queue_packets(&stats) {
        Ok(packets) => Ok(packets),
        Err(_) if guest.shape.nic == GuestNic::Virtio => {
            parse_input_interrupts(&guest.read("cat /proc/interrupts")?)
        }
        Err(err) => Err(err),
    }
}

/// Interrupts per `virtioK-input.N` vector, summed over the CPU columns.
pub fn parse_input_interrupts(text: &str) -> anyhow::Result<Vec<u64>> {
    parse_input_interrupts_of(text, None)
}

/// [`parse_input_interrupts`] of one virtio device (`virtio1`) of a guest
/// with several, or of all with `None`.
pub fn parse_input_interrupts_of(text: &str, device: Option<&str>) -> anyhow::Result<Vec<u64>> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| {
        h.split_whitespace()
            .filter(|t| t.starts_with("CPU"))
            .count()
    });
    let mut counts = Vec::new();
    for line in lines {
        let Some(queue) = line
            .split_whitespace()
            .last()
            .and_then(|name| name.split_once("-input."))
            .filter(|(dev, _)| device.is_none_or(|d| d == *dev))
            .and_then(|(_, n)| n.parse::<usize>().ok())
        else {
            continue;
        };
        let sum: u64 = line
            .split_whitespace()
            .skip(1)
            .take(cpus)
            .filter_map(|t| t.parse::<u64>().ok())
            .sum();
        put(&mut counts, queue, sum);
    }
    if counts.is_empty() {
        bail!("neither ethtool -S nor /proc/interrupts count the receive queues");
    }
    Ok(counts)
}

pub fn parse_rx_queue_packets(stats: &str) -> anyhow::Result<Vec<u64>> {
    let mut packets = Vec::new();
    for line in stats.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(queue) = name
            .strip_prefix("rx_queue_")
            .and_then(|rest| rest.strip_suffix("_packets"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let value = value
            .trim()
            .parse()
            .with_context(|| format!("ethtool -S: {line}"))?;
        put(&mut packets, queue, value);
    }
    if packets.is_empty() {
        bail!("ethtool -S shows no rx_queue_N_packets counters");
    }
    Ok(packets)
}

/// Sets queue `queue`'s count, growing the list as needed.
fn put(counts: &mut Vec<u64>, queue: usize, value: u64) {
    if queue >= counts.len() {
        counts.resize(queue + 1, 0);
    }
    counts[queue] = value;
}

/// Per-queue packets between two readings.
pub fn delta(before: &[u64], after: &[u64]) -> Vec<u64> {
    after
        .iter()
        .enumerate()
        .map(|(q, a)| a.saturating_sub(before.get(q).copied().unwrap_or(0)))
        .collect()
}

/// Queues that received at least an eighth of a fair share of `flows`
/// flows' packets: with one flow per queue every such queue is one flow's,
/// and a queue no flow lands on gets only the agents' session (a few
/// hundred packets against thousands). An eighth, not a quarter: in an
/// emulated igb guest a stream alone on its queue can get just under a
/// quarter of a fair share of the packets, and would read as idle.
pub fn busy_queues(delta: &[u64], flows: usize) -> BTreeSet<u32> {
    let total: u64 = delta.iter().sum();
    let share = total / (8 * flows.max(1) as u64);
    (0u32..)
        .zip(delta)
        .filter(|&(_, &packets)| packets > share.max(100))
        .map(|(q, _)| q)
        .collect()
}

/// How many distinct queues the `(port, queue)` pairs of a run reach.
pub fn distinct_queues(accepted: &[(u16, u32)]) -> usize {
    accepted
        .iter()
        .map(|&(_, q)| q)
        .collect::<BTreeSet<_>>()
        .len()
}

/// Per-queue packet counts as `rx-0 N, rx-1 M, …`, for a run's report.
pub fn queue_counts(packets: &[u64]) -> String {
    let counters: Vec<String> = (0..)
        .zip(packets)
        .map(|(q, p)| format!("rx-{q} {p}"))
        .collect();
    counters.join(", ")
}

/// The RSS configuration as `ethtool -x` prints it (the guest driver's
/// key and table; Toeplitz over addresses and ports).
pub fn ethtool_rss(guest: &mut Guest) -> anyhow::Result<RssDescription> {
    ethtool_rss_of(guest, GUEST_IFACE)
}

/// [`ethtool_rss`] of the guest's NIC `iface` (a guest with several).
pub fn ethtool_rss_of(guest: &mut Guest, iface: &str) -> anyhow::Result<RssDescription> {
    parse_ethtool_x(&guest.read(&format!("ethtool -x {iface}"))?)
}

pub fn parse_ethtool_x(text: &str) -> anyhow::Result<RssDescription> {
    let mut indir = Vec::new();
    let mut lines = text.lines();
    let mut key = None;
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.starts_with("RSS hash key:") {
            key = lines.next().map(|k| k.trim().to_owned());
        } else if let Some((_, entries)) = line.split_once(':')
            && line
                .split(':')
                .next()
                .is_some_and(|n| n.trim().parse::<u32>().is_ok())
        {
            for entry in entries.split_whitespace() {
                indir.push(
                    entry
                        .parse()
                        .with_context(|| format!("ethtool -x: {line}"))?,
                );
            }
        }
    }
    // igb prints "Operation not supported" in the key's place: no key.
    let key = key
        .filter(|k| {
            k.split(':')
                .all(|b| b.len() == 2 && u8::from_str_radix(b, 16).is_ok())
        })
        .unwrap_or_default();
    if indir.is_empty() {
        bail!("ethtool -x shows no indirection table");
    }
    Ok(RssDescription {
        hfunc: "toeplitz".into(),
        key,
        indir,
        input_xfrm: "none".into(),
        fields: FieldsDescription::tcp("sdfn", "sdfn"),
        queue_cpu: None,
    })
}

/// The key the guest's device really hashes with, as measured against
/// QEMU's own hash trace and the NIC's `skb->hash` (see the design notes,
/// "A second emulated RSS NIC"), from what the guest itself shows:
/// * igb never reports its key; the device uses the first 40 bytes of the
///   kernel's `net.core.netdev_rss_key`;
/// * virtio-net with the 6.12 driver hashes with `00 || reported[0:39]`
///   (the driver's one-byte key offset);
/// * virtio-net with the 6.1 driver: the key `ethtool -x` shows.
pub fn device_key(guest: &mut Guest, ethtool: &RssDescription) -> anyhow::Result<String> {
    match (guest.shape.nic, guest.kernel) {
        (GuestNic::Igb, _) => {
            // A guest that hides the sysctl kept a copy in /run.
            let key = guest.read(
                "cat /run/netdev_rss_key 2>/dev/null || cat /proc/sys/net/core/netdev_rss_key",
            )?;
            Ok(key.trim().split(':').take(40).collect::<Vec<_>>().join(":"))
        }
        (GuestNic::Virtio, GuestKernel::V6_12) => {
            let bytes: Vec<&str> = ethtool.key.split(':').collect();
            let shifted: Vec<&str> = std::iter::once("00")
                .chain(bytes.iter().take(bytes.len().saturating_sub(1)).copied())
                .collect();
            Ok(shifted.join(":"))
        }
        (GuestNic::Virtio, GuestKernel::V6_1) => Ok(ethtool.key.clone()),
    }
}

/// The model of what the device really does: `ethtool -x`'s table with the
/// key of [`device_key`].
pub fn device_model(guest: &mut Guest) -> anyhow::Result<RssModel> {
    device_model_of(guest, GUEST_IFACE)
}

/// [`device_model`] of the guest's NIC `iface` (a guest with several).
pub fn device_model_of(guest: &mut Guest, iface: &str) -> anyhow::Result<RssModel> {
    let mut description = ethtool_rss_of(guest, iface)?;
    description.key = device_key(guest, &description)?;
    RssModel::from_description(&description)
        .with_context(|| format!("the guest's {iface}: its device key and table"))
}

/// `received_rps` (the 10th column, hex) of `/proc/net/softnet_stat`
/// summed over its rows (one per CPU): packets RPS/RFS handed to another
/// CPU, an inter-processor interrupt per batch. A flow the NIC itself puts
/// on its reader's CPU needs none.
pub fn parse_received_rps(text: &str) -> anyhow::Result<u64> {
    let mut sum = 0u64;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let field = line
            .split_whitespace()
            .nth(9)
            .with_context(|| format!("softnet_stat row without a 10th column: {line}"))?;
        sum += u64::from_str_radix(field, 16)
            .with_context(|| format!("softnet_stat: {field:?} is not hex"))?;
    }
    Ok(sum)
}

/// Each of `ports` with the guest queue `model` gives the packets the host
/// sends on its flow; `ends(port)` is that flow's (host port, guest port).
pub fn guest_queues(
    model: &RssModel,
    net: &GuestNet,
    ports: &[u16],
    ends: impl Fn(u16) -> (u16, u16),
) -> anyhow::Result<Vec<(u16, u32)>> {
    ports
        .iter()
        .map(|&port| {
            let (host_port, guest_port) = ends(port);
            let tuple = FlowTuple::new(
                net.host_ip.into(),
                host_port,
                net.guest_ip.into(),
                guest_port,
            )?;
            Ok((port, model.landing(&tuple).queue))
        })
        .collect()
}

/// Remote ports of the data streams an `iperf3 -s -J` run accepted.
pub fn iperf3_accepted_ports(json: &str) -> anyhow::Result<Vec<u16>> {
    let value: serde_json::Value =
        serde_json::from_str(json).context("the guest's iperf3 -J output")?;
    let connected = value["start"]["connected"]
        .as_array()
        .context("iperf3 -J output without start.connected")?;
    connected
        .iter()
        .map(|stream| {
            stream["remote_port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .context("iperf3 -J stream without remote_port")
        })
        .collect()
}

/// One data stream of an `iperf3 -J` run, as that side's sockets saw it:
/// its own address and port, its peer's (`getpeername()`), and the bytes
/// it received (the server's count; 0 on the sending side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iperf3Stream {
    pub local_host: IpAddr,
    pub local_port: u16,
    pub remote_host: IpAddr,
    pub remote_port: u16,
    pub bytes: u64,
}

/// Every data stream of an `iperf3 -J` output (`start.connected`), with
/// the bytes its socket received (`end.streams[].receiver`, by socket).
pub fn iperf3_accepted_streams(json: &str) -> anyhow::Result<Vec<Iperf3Stream>> {
    let value: serde_json::Value = serde_json::from_str(json).context("an iperf3 -J output")?;
    let connected = value["start"]["connected"]
        .as_array()
        .context("iperf3 -J output without start.connected")?;
    let received = |socket: &serde_json::Value| {
        value["end"]["streams"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["receiver"]["socket"] == *socket)
            .and_then(|s| s["receiver"]["bytes"].as_u64())
            .unwrap_or(0)
    };
    let host = |v: &serde_json::Value, what: &str| -> anyhow::Result<IpAddr> {
        v.as_str()
            .and_then(|h| h.trim_start_matches("::ffff:").parse().ok())
            .with_context(|| format!("iperf3 -J stream without a {what}"))
    };
    let port = |v: &serde_json::Value, what: &str| -> anyhow::Result<u16> {
        v.as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .with_context(|| format!("iperf3 -J stream without a {what}"))
    };
    connected
        .iter()
        .map(|s| {
            Ok(Iperf3Stream {
                local_host: host(&s["local_host"], "local_host")?,
                local_port: port(&s["local_port"], "local_port")?,
                remote_host: host(&s["remote_host"], "remote_host")?,
                remote_port: port(&s["remote_port"], "remote_port")?,
                bytes: received(&s["socket"]),
            })
        })
        .collect()
}

/// The receiving side's own rate over an `iperf3 -J` run
/// (`end.sum_received.bits_per_second`).
pub fn iperf3_received_bps(json: &str) -> anyhow::Result<f64> {
    let value: serde_json::Value = serde_json::from_str(json).context("an iperf3 -J output")?;
    value["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 -J output without end.sum_received.bits_per_second")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ethtool_s_and_x_as_the_guest_prints_them() {
        let stats = "NIC statistics:\n     rx_queue_0_packets: 5446\n     rx_queue_0_xdp_packets: 0\n     rx_queue_1_packets: 5572\n";
        assert_eq!(parse_rx_queue_packets(stats).unwrap(), vec![5446, 5572]);
        let x = "RX flow hash indirection table for eth0 with 2 RX ring(s):\n    0:      0     1     0     1\n    4:      1     0     1     0\nRSS hash key:\naf:eb:5c\nRSS hash function:\n    toeplitz: on\n";
        let rss = parse_ethtool_x(x).unwrap();
        assert_eq!(rss.indir, vec![0, 1, 0, 1, 1, 0, 1, 0]);
        assert_eq!(rss.key, "af:eb:5c");
    }

    #[test]
    fn iperf3_streams_carry_both_ends_and_the_bytes_received() {
        let json = r#"{"start":{"connected":[
            {"socket":5,"local_host":"10.0.1.2","local_port":5201,"remote_host":"::ffff:10.0.0.1","remote_port":40000},
            {"socket":6,"local_host":"10.0.2.2","local_port":5201,"remote_host":"10.0.0.1","remote_port":40001}]},
            "end":{"streams":[{"receiver":{"socket":6,"bytes":77}},{"receiver":{"socket":5,"bytes":55}}]}}"#;
        let streams = iperf3_accepted_streams(json).expect("parses");
        let got: Vec<(String, u16, u64)> = streams
            .iter()
            .map(|s| (s.local_host.to_string(), s.remote_port, s.bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.1.2".to_string(), 40000, 55),
                ("10.0.2.2".to_string(), 40001, 77)
            ]
        );
        assert_eq!(streams[0].remote_host.to_string(), "10.0.0.1");
        assert!(iperf3_accepted_streams(r#"{"start":{}}"#).is_err());
        let rate = r#"{"end":{"sum_received":{"bits_per_second":2.5e8}}}"#;
        assert_eq!(iperf3_received_bps(rate).expect("parses"), 2.5e8);
        assert!(iperf3_received_bps(json).is_err());
    }

    #[test]
    fn virtio_input_interrupts_count_per_queue() {
        let text = "           CPU0       CPU1\n 25:        10          5  PCI-MSIX-0000:00:03.0   1-edge      virtio0-input.0\n 26:         0          0  PCI-MSIX-0000:00:03.0   2-edge      virtio0-output.0\n 27:         7          0  PCI-MSIX-0000:00:03.0   3-edge      virtio0-input.1\n";
        assert_eq!(parse_input_interrupts(text).unwrap(), vec![15, 7]);
    }

    #[test]
    fn busy_queues_ignore_stray_packets() {
        assert_eq!(
            busy_queues(&[5000, 3, 4900, 120], 2),
            BTreeSet::from([0, 2])
        );
        // A starved stream alone on its queue is still its queue's.
        assert_eq!(
            busy_queues(&[4119, 23057, 20560, 19035], 4),
            BTreeSet::from([0, 1, 2, 3])
        );
        // Two streams on one queue leave another with the session alone.
        assert_eq!(
            busy_queues(&[30000, 25000, 150, 20000], 4),
            BTreeSet::from([0, 1, 3])
        );
    }
}
