//! The `SIOCETHTOOL` ioctls discovery needs: `ETHTOOL_GRSSH` (key and table,
//! for kernels or drivers without netlink RSS), `ETHTOOL_GRXFH` (hashed
//! fields per flow type), `ETHTOOL_GDRVINFO` (driver name, bus address) and
//! `ETHTOOL_GCHANNELS` (the receive queues in use).
//!
//! Each command's buffer layout (`include/uapi/linux/ethtool.h`) is built
//! and parsed by pure functions; `EthtoolSocket::ethtool_ioctl` is the only
//! syscall. It stays ours: no crate speaks these commands (the `ethtool`
//! crate has no RSS, flow-hash or driver-info messages; rustix and nix only
//! offer an `unsafe` ioctl of their own).

use std::{
    ffi::c_void,
    io,
    os::fd::{AsRawFd as _, OwnedFd},
};

use srap_common::{
    family::Family,
    protocol::{FlowType, Protocol},
};
use thiserror::Error;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRXFH: u32 = 0x29;
const ETHTOOL_GRSSH: u32 = 0x46;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// ethtool's number of a flow type (`TCP_V4_FLOW`, `UDP_V4_FLOW`, …), as
/// `ETHTOOL_GRXFH` asks for it.
pub const fn ethtool_flow_type(flow: FlowType) -> u32 {
    match (flow.protocol, flow.family) {
        (Protocol::Tcp, Family::Inet) => 0x01,
        (Protocol::Udp, Family::Inet) => 0x02,
        (Protocol::Tcp, Family::Inet6) => 0x05,
        (Protocol::Udp, Family::Inet6) => 0x06,
    }
}

/// `struct ethtool_rxfh` up to `rss_config`: cmd, rss_context, indir_size,
/// key_size, hfunc, input_xfrm (Linux ≥ 6.8; reserved before), 2 reserved
/// bytes, a reserved u32.
const RXFH_HDR_LEN: usize = 24;
/// `struct ethtool_drvinfo`: cmd, five 32-byte strings, 12 reserved bytes,
/// five u32 counters.
const DRVINFO_LEN: usize = 196;
const DRVINFO_DRIVER: std::ops::Range<usize> = 4..36;
const DRVINFO_BUS_INFO: std::ops::Range<usize> = 100..132;
/// `struct ethtool_channels`: cmd, then max_rx, max_tx, max_other,
/// max_combined, rx_count, tx_count, other_count, combined_count.
const CHANNELS_LEN: usize = 36;
/// `struct ethtool_rxnfc` is 192 bytes; GRXFH reads cmd, flow_type and data
/// (the first 16) but the kernel may copy the whole struct back.
const RXNFC_LEN: usize = 192;
/// Larger than any NIC's table or key: a reply claiming more is refused
/// before anything is allocated for it.
const MAX_INDIR: u32 = 1 << 16;
const MAX_KEY: u32 = 1 << 10;

#[derive(Debug, Error)]
pub enum IoctlError {
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{what} reply is malformed: {problem}")]
    Malformed { what: &'static str, problem: String },
    #[error("interface name `{0}` is longer than 15 bytes")]
    NameTooLong(String),
}

impl IoctlError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// What `ETHTOOL_GRSSH` returned for context 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rxfh {
    pub hfunc: u8,
    /// `RXH_XFRM_*` bits; always 0 on kernels before 6.8.
    pub input_xfrm: u8,
    pub indir: Vec<u32>,
    pub key: Vec<u8>,
}

/// Driver name and bus address, from `ETHTOOL_GDRVINFO`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrvInfo {
    pub driver: String,
    pub bus_info: String,
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at + 4)?;
    Some(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// A GRSSH request for `indir_size` entries and `key_size` key bytes (both
/// 0: "tell me the sizes").
pub fn rxfh_request(indir_size: u32, key_size: u32) -> Vec<u8> {
    let mut buf = vec![0u8; RXFH_HDR_LEN + indir_size as usize * 4 + key_size as usize];
    buf[0..4].copy_from_slice(&ETHTOOL_GRSSH.to_ne_bytes());
    buf[8..12].copy_from_slice(&indir_size.to_ne_bytes());
    buf[12..16].copy_from_slice(&key_size.to_ne_bytes());
    buf
}

/// The sizes a GRSSH size query returned: (indir entries, key bytes).
pub fn parse_rxfh_sizes(buf: &[u8]) -> Result<(u32, u32), IoctlError> {
    let malformed = |problem: String| IoctlError::Malformed {
        what: "ETHTOOL_GRSSH",
        problem,
    };
    let (Some(indir), Some(key)) = (u32_at(buf, 8), u32_at(buf, 12)) else {
        return Err(malformed(format!(
            "{} bytes, shorter than the header",
            buf.len()
        )));
    };
    if indir > MAX_INDIR || key > MAX_KEY {
        return Err(malformed(format!(
            "claims a {indir}-entry table and a {key}-byte key"
        )));
    }
    Ok((indir, key))
}

/// A full GRSSH reply: header, `indir_size` u32 entries, then the key.
pub fn parse_rxfh(buf: &[u8]) -> Result<Rxfh, IoctlError> {
    let (indir_size, key_size) = parse_rxfh_sizes(buf)?;
    let indir_end = RXFH_HDR_LEN + indir_size as usize * 4;
    let key_end = indir_end + key_size as usize;
    let (Some(table), Some(key)) = (
        buf.get(RXFH_HDR_LEN..indir_end),
        buf.get(indir_end..key_end),
    ) else {
        return Err(IoctlError::Malformed {
            what: "ETHTOOL_GRSSH",
            problem: format!(
                "{} bytes cannot hold {indir_size} entries and a {key_size}-byte key",
                buf.len()
            ),
        });
    };
    Ok(Rxfh {
        hfunc: buf[16],
        input_xfrm: buf[17],
        indir: table
            .chunks_exact(4)
            .map(|e| u32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
            .collect(),
        key: key.to_vec(),
    })
}

pub fn rxnfc_request(flow_type: u32) -> Vec<u8> {
    let mut buf = vec![0u8; RXNFC_LEN];
    buf[0..4].copy_from_slice(&ETHTOOL_GRXFH.to_ne_bytes());
    buf[4..8].copy_from_slice(&flow_type.to_ne_bytes());
    buf
}

/// The `RXH_*` bits of a GRXFH reply (`data`, a u64 at offset 8).
pub fn parse_rxnfc_fields(buf: &[u8]) -> Result<u64, IoctlError> {
    let bytes = buf.get(8..16).ok_or_else(|| IoctlError::Malformed {
        what: "ETHTOOL_GRXFH",
        problem: format!("{} bytes, shorter than cmd + flow_type + data", buf.len()),
    })?;
    let mut data = [0u8; 8];
    data.copy_from_slice(bytes);
    Ok(u64::from_ne_bytes(data))
}

pub fn drvinfo_request() -> Vec<u8> {
    let mut buf = vec![0u8; DRVINFO_LEN];
    buf[0..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    buf
}

pub fn channels_request() -> Vec<u8> {
    let mut buf = vec![0u8; CHANNELS_LEN];
    buf[0..4].copy_from_slice(&ETHTOOL_GCHANNELS.to_ne_bytes());
    buf
}

/// The receive queues in use: receive-only plus combined channels.
pub fn parse_channels(buf: &[u8]) -> Result<u32, IoctlError> {
    let (Some(rx), Some(combined)) = (u32_at(buf, 20), u32_at(buf, 32)) else {
        return Err(IoctlError::Malformed {
            what: "ETHTOOL_GCHANNELS",
            problem: format!("{} bytes, shorter than struct ethtool_channels", buf.len()),
        });
    };
    rx.checked_add(combined)
        .ok_or_else(|| IoctlError::Malformed {
            what: "ETHTOOL_GCHANNELS",
            problem: format!("{rx} receive and {combined} combined channels"),
        })
}

fn c_string(bytes: &[u8]) -> String {
    let text = bytes.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

pub fn parse_drvinfo(buf: &[u8]) -> Result<DrvInfo, IoctlError> {
    let (Some(driver), Some(bus_info)) = (buf.get(DRVINFO_DRIVER), buf.get(DRVINFO_BUS_INFO))
    else {
        return Err(IoctlError::Malformed {
            what: "ETHTOOL_GDRVINFO",
            problem: format!("{} bytes, shorter than struct ethtool_drvinfo", buf.len()),
        });
    };
    Ok(DrvInfo {
        driver: c_string(driver),
        bus_info: c_string(bus_info),
    })
}

// ---------------------------------------------------------------------------
// The syscall layer.

/// `struct ifreq` with the `ifr_data` member of its union.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut c_void,
    _rest: [u8; 16],
}

/// An AF_INET datagram socket: the handle SIOCETHTOOL is issued on, in the
/// caller's network namespace.
pub struct EthtoolSocket {
    fd: OwnedFd,
    ifname: [libc::c_char; libc::IFNAMSIZ],
}

impl EthtoolSocket {
    pub fn open(ifname: &str) -> Result<Self, IoctlError> {
        if ifname.len() >= libc::IFNAMSIZ {
            return Err(IoctlError::NameTooLong(ifname.into()));
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (slot, byte) in name.iter_mut().zip(ifname.bytes()) {
            *slot = byte as libc::c_char;
        }
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| IoctlError::Os {
            what: "socket(AF_INET)",
            source: e.into(),
        })?;
        Ok(Self { fd, ifname: name })
    }

    /// Issues the ethtool command in `buf` (which the kernel overwrites).
    fn ethtool_ioctl(&self, what: &'static str, buf: &mut [u8]) -> Result<(), IoctlError> {
        // The kernel reads u32/u64 fields at their natural alignment within
        // the buffer: copy into 8-byte-aligned storage.
        let mut aligned: Vec<u64> = buf
            .chunks(8)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                u64::from_ne_bytes(word)
            })
            .collect();
        let mut ifr = IfreqData {
            name: self.ifname,
            data: aligned.as_mut_ptr().cast(),
            _rest: [0; 16],
        };
        // SAFETY: valid fd; `ifr` names the interface (NUL-terminated, checked
        // in `open`) and points at a buffer as large as the command's struct
        // (each request builder sizes it so), alive and not otherwise
        // borrowed for the call. Ours: see the module's note.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                SIOCETHTOOL as libc::Ioctl,
                &raw mut ifr,
            )
        };
        if rc < 0 {
            return Err(IoctlError::Os {
                what,
                source: io::Error::last_os_error(),
            });
        }
        for (chunk, word) in buf.chunks_mut(8).zip(&aligned) {
            chunk.copy_from_slice(&word.to_ne_bytes()[..chunk.len()]);
        }
        Ok(())
    }

    pub fn rxfh(&self) -> Result<Rxfh, IoctlError> {
        let mut sizes = rxfh_request(0, 0);
        self.ethtool_ioctl("ETHTOOL_GRSSH", &mut sizes)?;
        let (indir, key) = parse_rxfh_sizes(&sizes)?;
        let mut full = rxfh_request(indir, key);
        self.ethtool_ioctl("ETHTOOL_GRSSH", &mut full)?;
        parse_rxfh(&full)
    }

    /// `RXH_*` bits hashed for `flow` (`ethtool -n DEV rx-flow-hash tcp4`).
    pub fn flow_hash(&self, flow: FlowType) -> Result<u64, IoctlError> {
        let mut buf = rxnfc_request(ethtool_flow_type(flow));
        self.ethtool_ioctl("ETHTOOL_GRXFH", &mut buf)?;
        parse_rxnfc_fields(&buf)
    }

    /// The receive queues in use (`ethtool -l`: rx + combined).
    pub fn rx_channels(&self) -> Result<u32, IoctlError> {
        let mut buf = channels_request();
        self.ethtool_ioctl("ETHTOOL_GCHANNELS", &mut buf)?;
        parse_channels(&buf)
    }

    pub fn drvinfo(&self) -> Result<DrvInfo, IoctlError> {
        let mut buf = drvinfo_request();
        self.ethtool_ioctl("ETHTOOL_GDRVINFO", &mut buf)?;
        parse_drvinfo(&buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GRSSH reply built field by field as the kernel writes it.
    fn rxfh_reply(indir: &[u32], key: &[u8], hfunc: u8, xfrm: u8) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0x46u32.to_ne_bytes()); // cmd
        out.extend_from_slice(&0u32.to_ne_bytes()); // rss_context
        out.extend_from_slice(&(indir.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(key.len() as u32).to_ne_bytes());
        out.extend_from_slice(&[hfunc, xfrm, 0, 0]);
        out.extend_from_slice(&0u32.to_ne_bytes()); // rsvd32
        for q in indir {
            out.extend_from_slice(&q.to_ne_bytes());
        }
        out.extend_from_slice(key);
        out
    }

    #[test]
    fn grssh_reply_of_an_mlx5_like_device() {
        let indir: Vec<u32> = (0..256).map(|i| i % 8).collect();
        let key: Vec<u8> = (0..40).collect();
        let reply = parse_rxfh(&rxfh_reply(&indir, &key, 1, 0)).unwrap();
        assert_eq!(reply.indir, indir);
        assert_eq!(reply.key, key);
        assert_eq!(reply.hfunc, 1);
        assert_eq!(reply.input_xfrm, 0);
    }

    #[test]
    fn grssh_reply_of_an_ice_like_device_with_sym_xor() {
        let indir: Vec<u32> = (0..512).map(|i| i % 16).collect();
        let key: Vec<u8> = (0..52).collect();
        let bytes = rxfh_reply(&indir, &key, 1, 1);
        assert_eq!(parse_rxfh_sizes(&bytes).unwrap(), (512, 52));
        let reply = parse_rxfh(&bytes).unwrap();
        assert_eq!(reply.input_xfrm, 1);
        assert_eq!(reply.key.len(), 52);
    }

    #[test]
    fn grssh_truncated_or_oversized_is_an_error() {
        let bytes = rxfh_reply(&[0, 1, 2, 3], &[9; 40], 1, 0);
        for cut in 0..bytes.len() {
            assert!(parse_rxfh(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = bytes.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse_rxfh_sizes(&huge).is_err());
        assert!(parse_rxfh(&huge).is_err());
    }

    #[test]
    fn requests_carry_command_and_sizes() {
        let req = rxfh_request(128, 40);
        assert_eq!(req.len(), 24 + 512 + 40);
        assert_eq!(u32_at(&req, 0), Some(0x46));
        assert_eq!(u32_at(&req, 8), Some(128));
        assert_eq!(u32_at(&req, 12), Some(40));
        let req = rxnfc_request(ethtool_flow_type(FlowType::TCP6));
        assert_eq!((u32_at(&req, 0), u32_at(&req, 4)), (Some(0x29), Some(5)));
        assert_eq!(u32_at(&drvinfo_request(), 0), Some(3));
    }

    #[test]
    fn flow_types_are_ethtools_numbers() {
        let numbers = FlowType::ALL.map(ethtool_flow_type);
        assert_eq!(numbers, [0x01, 0x05, 0x02, 0x06], "tcp4 tcp6 udp4 udp6");
    }

    #[test]
    fn grxfh_data_is_read_at_offset_8() {
        let mut buf = rxnfc_request(ethtool_flow_type(FlowType::TCP4));
        buf[8..16].copy_from_slice(&0xf0u64.to_ne_bytes());
        assert_eq!(parse_rxnfc_fields(&buf).unwrap(), 0xf0);
        assert!(parse_rxnfc_fields(&buf[..15]).is_err());
    }

    #[test]
    fn gchannels_counts_receive_and_combined_channels() {
        let mut buf = channels_request();
        assert_eq!(u32_at(&buf, 0), Some(0x3c));
        buf[16..20].copy_from_slice(&64u32.to_ne_bytes()); // max_combined
        buf[20..24].copy_from_slice(&2u32.to_ne_bytes()); // rx_count
        buf[32..36].copy_from_slice(&16u32.to_ne_bytes()); // combined_count
        assert_eq!(parse_channels(&buf).unwrap(), 18);
        assert!(parse_channels(&buf[..35]).is_err());
    }

    #[test]
    fn drvinfo_strings_stop_at_nul() {
        let mut buf = drvinfo_request();
        buf[4..13].copy_from_slice(b"mlx5_core");
        buf[36..41].copy_from_slice(b"6.18\0");
        buf[100..112].copy_from_slice(b"0000:08:00.0");
        let info = parse_drvinfo(&buf).unwrap();
        assert_eq!(info.driver, "mlx5_core");
        assert_eq!(info.bus_info, "0000:08:00.0");
        // A driver name filling all 32 bytes, no NUL: still no overrun.
        buf[4..36].fill(b'x');
        assert_eq!(parse_drvinfo(&buf).unwrap().driver.len(), 32);
        assert!(parse_drvinfo(&buf[..120]).is_err());
    }
}
