//! `net.ipv4.ip_local_reserved_ports` (which also covers IPv6): SRAP binds
//! explicit ports, and reserving them keeps the kernel's automatic port
//! choice from handing them to other sockets. The sysctl is per network
//! namespace: it is read and written in the agent's.

use std::{collections::BTreeSet, fs, path::Path};

use srap_common::solver::PortRange;

use crate::HostError;

pub const RESERVED_PORTS: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
pub const LOCAL_PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// Parses the sysctl's `1,2,10-20` form (empty: none).
pub fn parse(text: &str) -> Result<BTreeSet<u16>, String> {
    let mut ports = BTreeSet::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let port = |s: &str| {
            s.trim()
                .parse::<u16>()
                .map_err(|_| format!("`{s}` in `{item}` is not a port"))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (port(a)?, port(b)?);
                if a > b {
                    return Err(format!("`{item}` is an empty range"));
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
    parse(&text).map_err(|problem| HostError::Sysctl {
        path: RESERVED_PORTS.into(),
        problem,
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

/// The kernel's ephemeral range: SRAP's default port range, so it never
/// takes a port a local service might want to listen on.
pub fn local_port_range() -> Result<PortRange, HostError> {
    let text = read_sysctl(Path::new(LOCAL_PORT_RANGE))?;
    text.trim().parse().map_err(|problem| HostError::Sysctl {
        path: LOCAL_PORT_RANGE.into(),
        problem,
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
