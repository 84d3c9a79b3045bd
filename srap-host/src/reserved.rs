//! `net.ipv4.ip_local_reserved_ports` (which also covers IPv6) and the
//! kernel's ephemeral range. The binder chooses ports by 4-tuple among the
//! whole range and reserves none (`docs/binder.md` has the measurement);
//! agents before it reserved theirs, and what they recorded is released
//! here, never a port someone else reserved. The sysctl is per network
//! namespace: it is read and written in the agent's.

use std::{collections::BTreeSet, fs, path::Path};

use crate::error::{HostError, PortListError};
use srap_common::port_range::PortRange;

pub const RESERVED_PORTS: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
pub const LOCAL_PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// Parses the sysctl's `1,2,10-20` form (empty: none).
pub fn parse(text: &str) -> Result<BTreeSet<u16>, PortListError> {
    let mut ports = BTreeSet::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let port = |s: &str| {
            s.trim()
                .parse::<u16>()
                .map_err(|_| PortListError::NotAPort {
                    word: s.into(),
                    item: item.into(),
                })
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (port(a)?, port(b)?);
                if a > b {
                    return Err(PortListError::EmptyRange { item: item.into() });
                }
                ports.extend(a..=b);
            }
            None => {
                ports.insert(port(item)?);
            }
        }
    }
    Ok(ports)
}

/// The sysctl's form, with runs collapsed into ranges.
pub fn format(ports: &BTreeSet<u16>) -> String {
    let mut items: Vec<String> = Vec::new();
    let mut iter = ports.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while let (Some(next), Some(after)) = (iter.peek().copied(), end.checked_add(1)) {
            if next != after {
                break;
            }
            end = next;
            iter.next();
        }
        items.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    items.join(",")
}

/// The ports currently reserved in this network namespace.
pub fn read() -> Result<BTreeSet<u16>, HostError> {
    let text = read_sysctl(Path::new(RESERVED_PORTS))?;
    parse(&text).map_err(|source| HostError::PortList {
        path: RESERVED_PORTS.into(),
        source,
    })
}

/// Replaces the reserved set (one write: the kernel replaces, not appends).
pub fn write(ports: &BTreeSet<u16>) -> Result<(), HostError> {
    let mut text = format(ports);
    if text.is_empty() {
        // An empty write is rejected; a newline clears the set.
        text.push('\n');
    }
    fs::write(RESERVED_PORTS, text).map_err(|source| HostError::Io {
        what: format!("writing {RESERVED_PORTS}"),
        source,
    })?;
    let now = read()?;
    if now != *ports {
        return Err(HostError::Sysctl {
            path: RESERVED_PORTS.into(),
            problem: format!(
                "wrote {} ports but read back {}: the kernel did not take the whole list",
                ports.len(),
                now.len()
            ),
        });
    }
    Ok(())
}

/// The reserved ports of this namespace, split into the agent's own (the
/// ones it recorded adding) and everyone else's. The one place the set
/// arithmetic lives: setting up, re-planning and detaching all change the
/// sysctl through it, and never release a port someone else reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    current: BTreeSet<u16>,
    ours: BTreeSet<u16>,
}

impl Reservation {
    /// Reads the sysctl; `ours` is what the agent recorded adding (ports
    /// in it that are no longer reserved are simply not ours any more).
    pub fn read(ours: BTreeSet<u16>) -> Result<Self, HostError> {
        Ok(Self::from_sets(read()?, ours))
    }

    /// The pure part of [`Reservation::read`].
    pub fn from_sets(current: BTreeSet<u16>, ours: BTreeSet<u16>) -> Self {
        let ours = ours.intersection(&current).copied().collect();
        Self { current, ours }
    }

    /// The ports the agent added.
    pub fn ours(&self) -> &BTreeSet<u16> {
        &self.ours
    }

    /// Ports reserved by someone else: never the agent's to release.
    pub fn foreign(&self) -> BTreeSet<u16> {
        self.current.difference(&self.ours).copied().collect()
    }

    /// The ports the agent would own were `ports` its whole set.
    pub fn ours_for(&self, ports: &BTreeSet<u16>) -> BTreeSet<u16> {
        ports.difference(&self.foreign()).copied().collect()
    }

    /// Holds exactly `ports` for the agent (what others reserved stays).
    pub fn hold(&mut self, ports: &BTreeSet<u16>) -> Result<(), HostError> {
        let wanted = self.foreign().union(ports).copied().collect();
        let ours = self.ours_for(ports);
        self.apply(wanted, ours)
    }

    /// Adds `ports` to what the agent holds, releasing nothing: the moment
    /// between two plans, when connections may use either.
    pub fn widen(&mut self, ports: &BTreeSet<u16>) -> Result<(), HostError> {
        let wanted = self.current.union(ports).copied().collect();
        let ours = self.ours.union(&self.ours_for(ports)).copied().collect();
        self.apply(wanted, ours)
    }

    /// Releases every port the agent added; returns how many.
    pub fn release(&mut self) -> Result<usize, HostError> {
        let released = self.ours.len();
        self.hold(&BTreeSet::new())?;
        Ok(released)
    }

    /// Writes `wanted` when it differs from what is reserved.
    fn apply(&mut self, wanted: BTreeSet<u16>, ours: BTreeSet<u16>) -> Result<(), HostError> {
        if wanted != self.current {
            write(&wanted)?;
            self.current = wanted;
        }
        self.ours = ours;
        Ok(())
    }
}

/// The kernel's ephemeral range: SRAP's default port range, so it never
/// takes a port a local service might want to listen on.
pub fn local_port_range() -> Result<PortRange, HostError> {
    let text = read_sysctl(Path::new(LOCAL_PORT_RANGE))?;
    text.trim().parse().map_err(|source| HostError::PortRange {
        path: LOCAL_PORT_RANGE.into(),
        source,
    })
}

/// Longest sysctl text read: every other port listed, `1,3,5,…`, is
/// ~200 KB.
const MAX_SYSCTL_TEXT: usize = 512 << 10;

/// Reads a sysctl in one `read()`: procfs renders `ip_local_reserved_ports`
/// afresh on each read and a read at a non-zero offset returns nothing, so
/// `read_to_string` (whose first read is a small probe) got only the first
/// 32 bytes of a long list.
fn read_sysctl(path: &Path) -> Result<String, HostError> {
    use std::io::Read as _;
    let io = |source| HostError::Io {
        what: format!("reading {}", path.display()),
        source,
    };
    let mut buf = vec![0u8; MAX_SYSCTL_TEXT];
    let n = fs::File::open(path)
        .and_then(|mut f| f.read(&mut buf))
        .map_err(io)?;
    if n == buf.len() {
        return Err(HostError::Sysctl {
            path: path.display().to_string(),
            problem: format!("longer than {MAX_SYSCTL_TEXT} bytes"),
        });
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|_| HostError::Sysctl {
        path: path.display().to_string(),
        problem: "not UTF-8".into(),
    })
}

#[cfg(test)]
mod tests {

    fn set(ports: &[u16]) -> BTreeSet<u16> {
        ports.iter().copied().collect()
    }

    #[test]
    fn a_reservation_never_claims_what_others_reserved() {
        // 10 and 11 belong to someone else; the agent recorded 20, 21 and
        // 99 (99 was unreserved behind its back since).
        let r = Reservation::from_sets(set(&[10, 11, 20, 21]), set(&[20, 21, 99]));
        assert_eq!(r.ours(), &set(&[20, 21]));
        assert_eq!(r.foreign(), set(&[10, 11]));
        // A plan using 11 (already reserved by another) and 30: only 30
        // becomes the agent's.
        assert_eq!(r.ours_for(&set(&[11, 30])), set(&[30]));
    }
    use super::*;

    #[test]
    fn round_trips_ranges() {
        let ports = parse("5,1-3, 9-9,10").unwrap();
        assert_eq!(ports, BTreeSet::from([1, 2, 3, 5, 9, 10]));
        assert_eq!(format(&ports), "1-3,5,9-10");
        assert_eq!(format(&BTreeSet::new()), "");
        assert_eq!(format(&BTreeSet::from([65534, 65535])), "65534-65535");
        assert!(parse("\n").unwrap().is_empty());
        assert!(parse("3-1").is_err());
        assert!(parse("x").is_err());
    }
}
