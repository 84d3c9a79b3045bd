//! Receive-queue capacity in the veth lab (`--queue-rate`).
//!
//! On a real receiver, flows that RSS puts on one queue share the one core
//! that services it; on the lab's veth every flow runs at whatever two cores
//! manage, collided or not. The RSS-NIC emulator picks each packet's tx queue
//! (which veth turns into the receiver's rx queue) at tc egress, *before* the
//! root qdisc, so an `mq` root with one `tbf` per tx queue gives every
//! receive queue a rate that the flows on it share (`fq` is not in this
//! kernel; `tbf` is).

use std::{fmt, process::Command, str::FromStr};

use anyhow::Context as _;

use srap_harness::command;

/// A rate in bits per second, written as tc writes rates: `200mbit`,
/// `1.5gbit`, `800kbit`, `64000bit`, or a bare number of bit/s. Decimal
/// units (1 mbit = 10^6 bit), as tc's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    bits_per_second: f64,
}

/// Why a rate did not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RateError {
    #[error(
        "`{0}` is not a rate: write e.g. 200mbit, 1.5gbit, 800kbit (or none, for --queue-rate)"
    )]
    Syntax(String),
    #[error("`{0}` is out of range: 1kbit to 100gbit")]
    Range(String),
}

impl Rate {
    const MIN: f64 = 1e3;
    const MAX: f64 = 100e9;

    /// `mbit` Mbit/s.
    pub const fn from_mbit(mbit: u32) -> Self {
        Self {
            bits_per_second: mbit as f64 * 1e6,
        }
    }

    /// The rate in bits per second.
    pub fn bits_per_second(self) -> f64 {
        self.bits_per_second
    }

    /// The rate in Gbit/s (what the experiment's JSON reports).
    pub fn gbps(self) -> f64 {
        self.bits_per_second / 1e9
    }
}

/// `--queue-rate`: each receive queue's capacity, or `none` for no
/// capacity at all (the veth's own, CPU-bound ceiling: where a per-packet
/// cost, the observer's say, shows in the throughput).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QueueRate {
    /// No qdisc: flows run as fast as the cores carry them.
    Unlimited,
    /// This rate per receive queue.
    Each(Rate),
}

impl QueueRate {
    /// The per-queue rate, if any.
    pub fn rate(self) -> Option<Rate> {
        match self {
            Self::Unlimited => None,
            Self::Each(rate) => Some(rate),
        }
    }
}

impl FromStr for QueueRate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(Self::Unlimited);
        }
        text.parse().map(Self::Each)
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let lower = text.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(lower.len());
        let (number, unit) = lower.split_at(split);
        let scale = match unit {
            "" | "bit" => 1.0,
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            _ => return Err(RateError::Syntax(text.to_owned())),
        };
        let value: f64 = number
            .parse()
            .map_err(|_| RateError::Syntax(text.to_owned()))?;
        let bits_per_second = value * scale;
        if !(Self::MIN..=Self::MAX).contains(&bits_per_second) {
            return Err(RateError::Range(text.to_owned()));
        }
        Ok(Self { bits_per_second })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bps = self.bits_per_second;
        if bps >= 1e9 {
            write!(f, "{}gbit", bps / 1e9)
        } else if bps >= 1e6 {
            write!(f, "{}mbit", bps / 1e6)
        } else {
            write!(f, "{}kbit", bps / 1e3)
        }
    }
}

/// The `tbf` rate that lets a queue carry `rate` of TCP payload: tbf counts
/// every segment's Ethernet, IPv4 and TCP headers (with timestamps), so a
/// flow alone on a queue would otherwise see only (MTU − 52) / (MTU + 14) of
/// it (95.6 % at MTU 1500), too close to the experiment's 5 % tolerance.
pub fn wire_rate(rate: Rate, mtu: u32) -> f64 {
    let frame = f64::from(mtu + 14);
    let payload = f64::from(mtu.saturating_sub(52).max(1));
    rate.bits_per_second * frame / payload
}

/// The per-queue `tbf`s under an `mq` root on one interface, removed on drop
/// (the namespace going takes them too; this undoes them first, so the lab's
/// teardown order is the same whatever removes what).
#[derive(Debug)]
pub struct QueueCapacity {
    netns: String,
    ifname: String,
}

impl QueueCapacity {
    /// Gives each of `queues` tx queues of `ifname` (in namespace `netns`) a
    /// `tbf` of `rate` (of TCP payload).
    pub fn install(netns: &str, ifname: &str, queues: u32, rate: Rate) -> anyhow::Result<Self> {
        let mtu = link_mtu(netns, ifname)?;
        tc(
            netns,
            ["qdisc", "add", "dev", ifname, "root", "handle", "1:", "mq"],
        )
        .with_context(|| format!("adding an mq root qdisc on {ifname}"))?;
        // From here on the guard owns the root: an error below removes it.
        let guard = Self {
            netns: netns.to_owned(),
            ifname: ifname.to_owned(),
        };
        let wire = wire_rate(rate, mtu);
        // A burst above a 64 KiB GSO packet: tbf passes those whole instead
        // of segmenting them (CPU the lab's two cores need for the flows).
        let burst = (wire / 8.0 * 0.004).max(128.0 * 1024.0);
        for q in 1..=queues {
            add_tbf(netns, ifname, &["parent", &format!("1:{q:x}")], wire, burst)
                .with_context(|| format!("adding tx queue {q}'s tbf on {ifname}"))?;
        }
        tracing::info!(%rate, queues, ifname, "per-queue capacity installed");
        Ok(guard)
    }
}

impl Drop for QueueCapacity {
    fn drop(&mut self) {
        if let Err(err) = tc(&self.netns, ["qdisc", "del", "dev", &self.ifname, "root"]) {
            eprintln!("lab cleanup: removing the per-queue tbfs: {err:#}");
        }
    }
}

pub(crate) fn tc<const N: usize>(
    netns: &str,
    args: [&str; N],
) -> anyhow::Result<std::process::Output> {
    command::run(Command::new("tc").args(["-n", netns]).args(args))
}

/// The interface's MTU, from `ip -o link show`.
pub(crate) fn link_mtu(netns: &str, ifname: &str) -> anyhow::Result<u32> {
    let out =
        command::run(Command::new("ip").args(["-n", netns, "-o", "link", "show", "dev", ifname]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words
        .find(|w| *w == "mtu")
        .and_then(|_| words.next())
        .and_then(|mtu| mtu.parse().ok())
        .with_context(|| format!("no MTU for {ifname} in `{}`", text.trim()))
}

/// `tc qdisc add dev IFNAME WHERE… tbf` at `wire` bit/s with a `burst` of
/// bytes: a per-queue or per-member link rate.
pub(crate) fn add_tbf(
    netns: &str,
    ifname: &str,
    place: &[&str],
    wire: f64,
    burst: f64,
) -> anyhow::Result<()> {
    let (rate, burst) = (format!("{wire:.0}bit"), format!("{burst:.0}"));
    let mut args = vec!["qdisc", "add", "dev", ifname];
    args.extend_from_slice(place);
    args.extend(["tbf", "rate", &rate, "burst", &burst, "latency", "100ms"]);
    command::run(Command::new("tc").args(["-n", netns]).args(args))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_tc_writes_them() {
        let bps = |s: &str| s.parse::<Rate>().map(Rate::bits_per_second);
        assert_eq!(bps("200mbit"), Ok(200e6));
        assert_eq!(bps("1.5Gbit"), Ok(1.5e9));
        assert_eq!(bps("800kbit"), Ok(800e3));
        assert_eq!(bps("64000bit"), Ok(64e3));
        assert_eq!(bps("5000000"), Ok(5e6));
        assert!(matches!(bps("200mb"), Err(RateError::Syntax(_))));
        assert!(matches!(bps("mbit"), Err(RateError::Syntax(_))));
        assert!(matches!(bps("1.2.3mbit"), Err(RateError::Syntax(_))));
        assert!(matches!(bps("0mbit"), Err(RateError::Range(_))));
        assert!(matches!(bps("500gbit"), Err(RateError::Range(_))));
    }

    #[test]
    fn rates_print_in_the_largest_whole_unit() {
        let show = |s: &str| s.parse::<Rate>().map(|r| r.to_string());
        assert_eq!(show("200mbit"), Ok("200mbit".into()));
        assert_eq!(show("1500mbit"), Ok("1.5gbit".into()));
        assert_eq!(show("64kbit"), Ok("64kbit".into()));
    }

    #[test]
    fn the_wire_rate_pays_for_full_size_segments_headers() {
        let rate: Rate = "100mbit".parse().expect("rate");
        let wire = wire_rate(rate, 1500);
        assert!((wire - 100e6 * 1514.0 / 1448.0).abs() < 1.0, "{wire}");
    }
}
