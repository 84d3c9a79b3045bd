//! The source ports SRAP may choose from: an inclusive range, as the
//! kernel's `ip_local_port_range` and `--port-range` give it, and the
//! directions over GF(2) its ports vary in (what a hash linear in the port
//! must be known for). Its own file, beneath the model (`rss`) and the
//! solver, which both take ranges.

use std::{fmt, str::FromStr};

use thiserror::Error;

/// Why a port range was refused, or its text not read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PortRangeError {
    #[error("port 0 means `any port` to the kernel; start the range at 1 or above")]
    StartsAtZero,
    #[error("the range {start}-{end} is empty (start above end)")]
    Empty { start: u16, end: u16 },
    #[error("`{text}` is not a port range like 1024-65535")]
    NotARange { text: String },
    #[error("`{word}` in `{text}` is not a port (0-65535)")]
    NotAPort { word: String, text: String },
}

/// An inclusive range of source ports SRAP may choose from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    start: u16,
    end: u16,
}

impl PortRange {
    /// Ports below 1024 need privileges and belong to services.
    pub const DEFAULT: Self = Self {
        start: 1024,
        end: 65535,
    };

    pub fn new(start: u16, end: u16) -> Result<Self, PortRangeError> {
        if start == 0 {
            return Err(PortRangeError::StartsAtZero);
        }
        if start > end {
            return Err(PortRangeError::Empty { start, end });
        }
        Ok(Self { start, end })
    }

    pub fn start(&self) -> u16 {
        self.start
    }

    pub fn end(&self) -> u16 {
        self.end
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.start..=self.end).contains(&port)
    }

    pub fn len(&self) -> usize {
        usize::from(self.end - self.start) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Port bit masks whose span over GF(2) is every difference (XOR) of
    /// two ports of the range: the directions a port chosen from it can
    /// vary in. What a hash linear in the port needs to be known for to
    /// place every port of the range is its value at [`PortRange::start`]
    /// and how these flip it. The difference of two ports is the XOR of
    /// the steps between them, and the step from `q − 1` to `q` flips the
    /// bits up to `q`'s lowest set bit; so the masks are `2^(t+1) − 1` for
    /// every `t` some `q` of `start+1..=end` has as its lowest set bit. The
    /// kernel's 32768-60999 never flips bit 15 alone: its ports all have
    /// it set, and how bit 15 flips the hash is never needed for them.
    pub fn directions(&self) -> impl Iterator<Item = u16> + '_ {
        (0..16u32).filter_map(|t| {
            let (start, step) = (u32::from(self.start), 1u32 << t);
            // The least q above start with q's lowest set bit at t.
            let mut q = (start >> (t + 1) << (t + 1)) | step;
            if q <= start {
                q += step << 1;
            }
            (q <= u32::from(self.end)).then(|| u16::try_from((step << 1) - 1).unwrap_or(u16::MAX))
        })
    }
}

impl Default for PortRange {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl FromStr for PortRange {
    type Err = PortRangeError;

    /// `START-END`, as in `ip_local_port_range` (which separates with a tab).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (start, end) =
            text.split_once(['-', '\t', ' '])
                .ok_or_else(|| PortRangeError::NotARange {
                    text: text.to_owned(),
                })?;
        let port = |s: &str| {
            s.trim()
                .parse::<u16>()
                .map_err(|_| PortRangeError::NotAPort {
                    word: s.trim().to_owned(),
                    text: text.to_owned(),
                })
        };
        Self::new(port(start)?, port(end)?)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}
