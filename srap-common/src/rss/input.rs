//! What the NIC feeds to the hash: which fields of the packet (ethtool's
//! `rx-flow-hash` letters) and the input transform applied to them.

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    str::FromStr,
};

use serde::{Deserialize, Serialize};

use thiserror::Error;

use super::error::{FieldsError, TupleError};
use crate::{
    family::Family,
    protocol::{FlowType, Protocol},
};

/// The longest hash input: an IPv6 4-tuple, 16 + 16 + 2 + 2 bytes.
pub const MAX_INPUT_LEN: usize = 36;

/// The packet fields a NIC hashes for one flow type, as `ethtool -n DEV
/// rx-flow-hash tcp4` reports them: `s` IP source, `d` IP destination, `f` L4
/// bytes 0–1 (source port), `n` L4 bytes 2–3 (destination port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashFields {
    pub src_ip: bool,
    pub dst_ip: bool,
    pub src_port: bool,
    pub dst_port: bool,
}

impl HashFields {
    /// The full 4-tuple, every NIC's default for TCP.
    pub const ALL: Self = Self {
        src_ip: true,
        dst_ip: true,
        src_port: true,
        dst_port: true,
    };
}

impl Default for HashFields {
    fn default() -> Self {
        Self::ALL
    }
}

impl FromStr for HashFields {
    type Err = FieldsError;

    /// Parses ethtool letters. Letters for fields that never vary within a TCP
    /// flow of one host pair (L2 address, VLAN, L3 protocol) would change the
    /// hash by a constant SRAP cannot know, so they are refused, not ignored.
    fn from_str(letters: &str) -> Result<Self, Self::Err> {
        let mut fields = Self {
            src_ip: false,
            dst_ip: false,
            src_port: false,
            dst_port: false,
        };
        for letter in letters.chars() {
            let slot = match letter {
                's' => &mut fields.src_ip,
                'd' => &mut fields.dst_ip,
                'f' => &mut fields.src_port,
                'n' => &mut fields.dst_port,
                'm' | 'v' | 't' => return Err(FieldsError::Unmodelled(letter)),
                other => return Err(FieldsError::NotALetter(other)),
            };
            if *slot {
                return Err(FieldsError::Twice(letter));
            }
            *slot = true;
        }
        Ok(fields)
    }
}

impl fmt::Display for HashFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (on, letter) in [
            (self.src_ip, "s"),
            (self.dst_ip, "d"),
            (self.src_port, "f"),
            (self.dst_port, "n"),
        ] {
            if on {
                f.write_str(letter)?;
            }
        }
        Ok(())
    }
}

/// The input transform (`ETHTOOL_A_RSS_INPUT_XFRM`) applied before hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputXfrm {
    /// Fields are hashed as they are.
    #[default]
    None,
    /// Both copies of each src/dst pair are replaced by `src ^ dst` (ice, iavf).
    SymXor,
    /// The first copy becomes `src | dst`, the second `src ^ dst` (mlx5, always).
    SymOrXor,
}

impl InputXfrm {
    /// Every transform. A new one is a variant here and an arm in each of
    /// the functions below (the compiler names them): its name, how it
    /// combines a byte pair, its kernel bits, and what the port tables and
    /// the emulator can do with it.
    pub const ALL: [Self; 3] = [Self::None, Self::SymXor, Self::SymOrXor];
    /// Their names, as ethtool and the description file write them.
    pub const NAMES: [&'static str; 3] = [
        Self::ALL[0].name(),
        Self::ALL[1].name(),
        Self::ALL[2].name(),
    ];

    /// Its name, as ethtool and the description file write it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SymXor => "sym-xor",
            Self::SymOrXor => "sym-or-xor",
        }
    }

    /// Its bits in the kernel's `input_xfrm` mask (`RXH_XFRM_*`; 0 for none).
    pub const fn ethtool_bits(self) -> u32 {
        match self {
            Self::None => 0,
            Self::SymXor => 1 << 0,
            Self::SymOrXor => 1 << 1,
        }
    }

    /// Why the hash is not affine in the ports under this transform, if it
    /// is not: the port tables plan by cosets, which needs the hash to be
    /// affine over GF(2) in the source port's bits.
    pub const fn not_affine_because(self) -> Option<&'static str> {
        match self {
            Self::None | Self::SymXor => None,
            Self::SymOrXor => Some("ORs the two ports"),
        }
    }

    /// The lab's RSS-NIC emulator (`srap_rss_nic`) can hash with it: it
    /// hashes the fields as they are, with no transform.
    pub const fn can_be_emulated(self) -> bool {
        match self {
            Self::None => true,
            Self::SymXor | Self::SymOrXor => false,
        }
    }

    fn combine(self, src: u8, dst: u8) -> (u8, u8) {
        match self {
            Self::None => (src, dst),
            Self::SymXor => (src ^ dst, src ^ dst),
            Self::SymOrXor => (src | dst, src ^ dst),
        }
    }
}

/// A name that is no input transform.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "`{name}` is not an input transform (use one of {})",
    InputXfrm::NAMES.join(", ")
)]
pub struct UnknownXfrm {
    pub name: String,
}

impl FromStr for InputXfrm {
    type Err = UnknownXfrm;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == name)
            .ok_or_else(|| UnknownXfrm {
                name: name.to_owned(),
            })
    }
}

impl fmt::Display for InputXfrm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A flow's 4-tuple as the receiver's NIC sees it (`src` is the sender),
/// and its protocol: a NIC hashes each protocol's flows with fields of its
/// own ([`super::model::RssModel::fields`]), so a tuple says which it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    protocol: Protocol,
    src: IpAddr,
    dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

impl FlowTuple {
    /// A TCP flow's tuple: the flows every description has fields for,
    /// and the only ones the kernel reports to SRAP's TCP sources (the
    /// socket hooks, `sock_diag`, the observer). A flow of another
    /// protocol is [`FlowTuple::of`].
    pub fn new(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Result<Self, TupleError> {
        Self::of(Protocol::Tcp, src, sport, dst, dport)
    }

    /// A `protocol` flow's tuple.
    pub fn of(
        protocol: Protocol,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
    ) -> Result<Self, TupleError> {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(TupleError::MixedFamily {
                src: src.to_string(),
                dst: dst.to_string(),
            });
        }
        Ok(Self {
            protocol,
            src,
            dst,
            sport,
            dport,
        })
    }

    /// A TCP flow's tuple from its two ends (see [`FlowTuple::new`]).
    pub fn from_sockets(src: SocketAddr, dst: SocketAddr) -> Result<Self, TupleError> {
        Self::new(src.ip(), src.port(), dst.ip(), dst.port())
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Its protocol over its address family: which of a NIC's hashed
    /// fields it is hashed with.
    pub fn flow_type(&self) -> FlowType {
        let family = if self.is_ipv4() {
            Family::Inet
        } else {
            Family::Inet6
        };
        FlowType::new(self.protocol, family)
    }

    pub fn src(&self) -> IpAddr {
        self.src
    }

    pub fn dst(&self) -> IpAddr {
        self.dst
    }

    pub fn is_ipv4(&self) -> bool {
        self.src.is_ipv4()
    }

    /// The same flow from another source port.
    pub fn with_sport(self, sport: u16) -> Self {
        Self { sport, ..self }
    }

    /// The same flow to another destination port.
    pub fn with_dport(self, dport: u16) -> Self {
        Self { dport, ..self }
    }

    /// The flow's packets the other way: what the connecting host's own
    /// NIC hashes (see [`crate::ends`]).
    pub fn reversed(self) -> Self {
        Self {
            protocol: self.protocol,
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
        }
    }
}

/// The bytes fed to the Toeplitz hash for one tuple.
#[derive(Clone, Copy)]
pub struct HashInput {
    bytes: [u8; MAX_INPUT_LEN],
    len: usize,
}

impl HashInput {
    /// Lays out `src_ip | dst_ip | src_port | dst_port` (network byte order),
    /// each only if hashed, after the input transform.
    pub fn new(tuple: &FlowTuple, fields: HashFields, xfrm: InputXfrm) -> Self {
        let mut input = Self {
            bytes: [0; MAX_INPUT_LEN],
            len: 0,
        };
        let (src, dst) = match (tuple.src, tuple.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                (s.to_ipv6_mapped().octets(), d.to_ipv6_mapped().octets())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => (s.octets(), d.octets()),
            // FlowTuple::new refuses mixed families.
            _ => unreachable!("FlowTuple holds one address family"),
        };
        let ip_bytes = if tuple.is_ipv4() { 12..16 } else { 0..16 };
        input.push_pair(
            &src[ip_bytes.clone()],
            &dst[ip_bytes],
            fields.src_ip,
            fields.dst_ip,
            xfrm,
        );
        input.push_pair(
            &tuple.sport.to_be_bytes(),
            &tuple.dport.to_be_bytes(),
            fields.src_port,
            fields.dst_port,
            xfrm,
        );
        input
    }

    fn push_pair(
        &mut self,
        src: &[u8],
        dst: &[u8],
        with_src: bool,
        with_dst: bool,
        xfrm: InputXfrm,
    ) {
        let (mut first, mut second) = ([0u8; 16], [0u8; 16]);
        for (i, (s, d)) in src.iter().zip(dst).enumerate() {
            (first[i], second[i]) = xfrm.combine(*s, *d);
        }
        if with_src {
            self.push(&first[..src.len()]);
        }
        if with_dst {
            self.push(&second[..dst.len()]);
        }
    }

    fn push(&mut self, part: &[u8]) {
        self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_through_ethtool_letters() {
        for letters in ["sdfn", "sd", "fn", "", "s"] {
            assert_eq!(letters.parse::<HashFields>().unwrap().to_string(), letters);
        }
        let refusal = |letters: &str| letters.parse::<HashFields>().unwrap_err().to_string();
        assert!(refusal("sdfnx").contains("`x`"));
        assert!(refusal("sdfnt").contains("rx-flow-hash"));
        assert!(refusal("ss").contains("twice"));
    }

    #[test]
    fn input_is_laid_out_in_network_order() {
        let tuple = FlowTuple::new(
            "1.2.3.4".parse().unwrap(),
            0x0102,
            "5.6.7.8".parse().unwrap(),
            0x0304,
        )
        .unwrap();
        let input = HashInput::new(&tuple, HashFields::ALL, InputXfrm::None);
        assert_eq!(input.as_bytes(), [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4]);
        let xor = HashInput::new(&tuple, HashFields::ALL, InputXfrm::SymXor);
        assert_eq!(xor.as_bytes(), [4, 4, 4, 12, 4, 4, 4, 12, 2, 6, 2, 6]);
        let or_xor = HashInput::new(&tuple, HashFields::ALL, InputXfrm::SymOrXor);
        assert_eq!(or_xor.as_bytes(), [5, 6, 7, 12, 4, 4, 4, 12, 3, 6, 2, 6]);
    }

    #[test]
    fn a_tuple_keeps_its_protocol_reversed_and_with_other_ports() {
        let (a, b) = ("10.0.0.1".parse().unwrap(), "fd00::2".parse().unwrap());
        let udp = FlowTuple::of(Protocol::Udp, a, 1, a, 2).unwrap();
        assert_eq!(udp.flow_type(), FlowType::UDP4);
        let moved = udp.reversed().with_sport(3).with_dport(4);
        assert_eq!(moved.protocol(), Protocol::Udp);
        let tcp6 = FlowTuple::new(b, 1, b, 2).unwrap();
        assert_eq!(tcp6.flow_type(), FlowType::TCP6);
    }

    #[test]
    fn mixed_families_are_refused() {
        let err =
            FlowTuple::new("1.2.3.4".parse().unwrap(), 1, "::1".parse().unwrap(), 2).unwrap_err();
        assert!(err.to_string().contains("different address families"));
    }
}
