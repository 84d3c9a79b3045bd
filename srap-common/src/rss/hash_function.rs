//! The hash function a NIC's RSS applies to the input ([`super::input`]),
//! as ethtool names it (`ethtool -x`: `hfunc`). The description file
//! carries the name as the driver gave it; this is what SRAP knows of each.

use std::{fmt, str::FromStr};

use thiserror::Error;

/// A hash function ethtool can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashFunction {
    Toeplitz,
    Xor,
    Crc32,
}

impl HashFunction {
    /// Every function. A new one is a variant here and an arm in each of
    /// the functions below (the compiler names them).
    pub const ALL: [Self; 3] = [Self::Toeplitz, Self::Xor, Self::Crc32];

    /// Its name, as ethtool and the description file write it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Toeplitz => "toeplitz",
            Self::Xor => "xor",
            Self::Crc32 => "crc32",
        }
    }

    /// Its bit in the kernel's `hfunc` mask (`ETH_RSS_HASH_*`).
    pub const fn ethtool_bit(self) -> u32 {
        match self {
            Self::Toeplitz => 1 << 0,
            Self::Xor => 1 << 1,
            Self::Crc32 => 1 << 2,
        }
    }

    /// The function of a kernel `hfunc` mask that has exactly its bit.
    pub fn from_ethtool_bits(bits: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.ethtool_bit() == bits)
    }

    /// Its output is affine over GF(2) in the input's bits, so in the
    /// source port's: what the port tables' cosets need to plan for it.
    /// Toeplitz and XOR are linear, CRC32 affine.
    pub const fn affine_in_ports(self) -> bool {
        match self {
            Self::Toeplitz | Self::Xor | Self::Crc32 => true,
        }
    }

    /// [`super::model::RssModel`] predicts where a flow lands with it.
    pub const fn modelled(self) -> bool {
        match self {
            Self::Toeplitz => true,
            Self::Xor | Self::Crc32 => false,
        }
    }

    /// The lab's RSS-NIC emulator (`srap_rss_nic`) can hash with it.
    pub const fn can_be_emulated(self) -> bool {
        match self {
            Self::Toeplitz => true,
            Self::Xor | Self::Crc32 => false,
        }
    }
}

/// A name that is no hash function ethtool names.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "`{name}` is not a hash function ethtool names ({})",
    HashFunction::names()
)]
pub struct UnknownHashFunction {
    pub name: String,
}

impl FromStr for HashFunction {
    type Err = UnknownHashFunction;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| UnknownHashFunction {
                name: name.to_owned(),
            })
    }
}

impl HashFunction {
    /// Every function's name, as a list for a message: `toeplitz, xor, crc32`.
    pub(crate) fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|f| f.name()).collect();
        names.join(", ")
    }
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_reads_back_from_its_name_and_its_bit() {
        for function in HashFunction::ALL {
            assert_eq!(function.name().parse(), Ok(function));
            assert_eq!(
                HashFunction::from_ethtool_bits(function.ethtool_bit()),
                Some(function)
            );
        }
        assert_eq!(HashFunction::from_ethtool_bits(0b11), None);
        assert!("siphash".parse::<HashFunction>().is_err());
    }
}
