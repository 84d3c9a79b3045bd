//! [`Message::ReceiverNics`](super::Message::ReceiverNics) (protocol 8):
//! every NIC a receiver agent serves, and per destination port which of
//! their addresses a listening socket accepts.
//!
//! A receiver with several NICs is one host behind several addresses; a
//! sender that knows them all (and where each port is listened on) can
//! later spread one transfer over them. Decoding bounds every list before
//! anything is allocated ([`MAX_NICS`], [`MAX_NIC_ADDRS`],
//! [`MAX_NIC_CPUS`], [`MAX_LISTEN_PORTS`]); [`ReceiverNics::check`] then
//! refuses a list that contradicts itself (an address on two NICs, a port
//! accepted on an address no NIC holds), so a lying receiver is named, not
//! believed.

use std::{collections::BTreeSet, net::IpAddr};

use bincode::{Decode, Encode, de::Decoder, error::DecodeError};
use thiserror::Error;

use super::{
    cpus::{CpuCount, CpuGrant, CpuListError},
    description::WireDescription,
    landing::LandingReport,
};

/// Most NICs one report describes.
pub const MAX_NICS: usize = 32;
/// Most addresses one NIC holds in a report.
pub const MAX_NIC_ADDRS: usize = 64;
/// Most CPUs one NIC's offer or grant names (the binder's slots per
/// receiver).
pub const MAX_NIC_CPUS: usize = crate::binder::MAX_SLOTS as usize;
/// Most listening ports one report names.
pub const MAX_LISTEN_PORTS: usize = 1024;
/// Longest interface name (the kernel's `IFNAMSIZ` less its NUL).
pub const MAX_NIC_NAME: usize = 15;

/// Everything a receiver says of its NICs and listeners. Sent at once after
/// the grant, then whenever any of it changes (a listener that comes or
/// goes is re-sent within a second).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode)]
pub struct ReceiverNics {
    /// The NICs in `--iface` order: the first is the one whose description
    /// [`RssUpdate`](super::RssUpdate) carries (what a peer of protocol 7 or
    /// older gets alone).
    pub nics: Vec<NicInfo>,
    /// Per listening TCP port (ascending), the served addresses that accept
    /// it.
    pub ports: Vec<PortAcceptance>,
}

/// Whether a NIC's link carries traffic (`IFF_UP` and carrier, as
/// `operstate` says).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum NicLink {
    #[default]
    Unknown,
    Up,
    Down,
}

/// One NIC a receiver serves.
#[derive(Debug, Clone, PartialEq, Eq, Encode)]
pub struct NicInfo {
    /// The interface's name on the receiver (at most [`MAX_NIC_NAME`] bytes).
    pub name: String,
    /// Its addresses, at most [`MAX_NIC_ADDRS`].
    pub addrs: Vec<IpAddr>,
    /// Its NUMA node (`None`: the platform does not say).
    pub numa_node: Option<u32>,
    pub link: NicLink,
    /// Link speed in Mb/s (`None`: unknown, as on a veth).
    pub speed_mbps: Option<u32>,
    /// Its RSS description, queue → CPU included (`None`: it could not be
    /// read; the reason is in the receiver's log and status).
    pub description: Option<WireDescription>,
    /// The receive observer's verdict on that description (`None`: no
    /// observer on this NIC).
    pub verifier: Option<LandingReport>,
    /// The CPUs granted for flows that enter by this NIC, at most
    /// [`MAX_NIC_CPUS`].
    pub cpus: Vec<u32>,
}

/// The addresses a listener on `port` accepts on.
#[derive(Debug, Clone, PartialEq, Eq, Encode)]
pub struct PortAcceptance {
    pub port: u16,
    /// Ascending, at most [`MAX_NICS`] × [`MAX_NIC_ADDRS`].
    pub addrs: Vec<IpAddr>,
}

/// Decodes a `Vec`'s layout (a length, then the items) with the length
/// checked against `max` before anything is allocated.
fn bounded_vec<T: Decode<C>, C, D: Decoder<Context = C>>(
    decoder: &mut D,
    max: usize,
    what: &str,
) -> Result<Vec<T>, DecodeError> {
    let len = u64::decode(decoder)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| {
            DecodeError::OtherString(format!(
                "{what} claims {len} entries; at most {max} are allowed"
            ))
        })?;
    decoder.claim_container_read::<T>(len)?;
    let mut items = Vec::with_capacity(len);
    for _ in 0..len {
        decoder.unclaim_bytes_read(core::mem::size_of::<T>());
        items.push(T::decode(decoder)?);
    }
    Ok(items)
}

/// Decoded with the frame's protocol version as context: each NIC's
/// [`WireDescription`] has that version's layout.
impl Decode<u16> for ReceiverNics {
    fn decode<D: Decoder<Context = u16>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            nics: bounded_vec(decoder, MAX_NICS, "a NIC list")?,
            ports: bounded_vec(decoder, MAX_LISTEN_PORTS, "a listener list")?,
        })
    }
}
bincode::impl_borrow_decode_with_context!(ReceiverNics, u16);

impl Decode<u16> for NicInfo {
    fn decode<D: Decoder<Context = u16>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            name: String::decode(decoder)?,
            addrs: bounded_vec(decoder, MAX_NIC_ADDRS, "a NIC's address list")?,
            numa_node: Decode::decode(decoder)?,
            link: Decode::decode(decoder)?,
            speed_mbps: Decode::decode(decoder)?,
            description: Decode::decode(decoder)?,
            verifier: Decode::decode(decoder)?,
            cpus: bounded_vec(decoder, MAX_NIC_CPUS, "a NIC's CPU list")?,
        })
    }
}
bincode::impl_borrow_decode_with_context!(NicInfo, u16);

impl<C> Decode<C> for PortAcceptance {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            port: u16::decode(decoder)?,
            addrs: bounded_vec(decoder, MAX_NICS * MAX_NIC_ADDRS, "a port's address list")?,
        })
    }
}
bincode::impl_borrow_decode!(PortAcceptance);

/// What is wrong with a receiver's [`ReceiverNics`]: the list contradicts
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NicListError {
    #[error(
        "a NIC's name {:?} is not an interface name (1 to {MAX_NIC_NAME} bytes)",
        .name.escape_debug().to_string()
    )]
    BadName { name: String },
    #[error("NIC {name} is listed twice")]
    NicTwice { name: String },
    #[error("address {addr} is listed twice (NIC {nic})")]
    AddressTwice { addr: IpAddr, nic: String },
    #[error("port {port} is listed twice")]
    PortTwice { port: u16 },
    #[error("port {port} is said to accept on {addr}, which no NIC listed holds")]
    AcceptsElsewhere { port: u16, addr: IpAddr },
}

/// What is wrong with a receiver's [`NicGrants`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NicGrantsError {
    #[error(
        "a NIC grant's name {:?} is not an interface name (1 to {MAX_NIC_NAME} bytes)",
        .name.escape_debug().to_string()
    )]
    BadName { name: String },
    #[error("NIC {name} is granted twice")]
    GrantedTwice { name: String },
    #[error("NIC {nic}: {source}")]
    Cpus {
        nic: String,
        #[source]
        source: CpuListError,
    },
}

impl ReceiverNics {
    /// Whether a sender may take this report as it is: names that are
    /// interface names, each NIC and address once, each port once, and
    /// every accepting address one of the NICs'. The error says which.
    pub fn check(&self) -> Result<(), NicListError> {
        let mut names = BTreeSet::new();
        let mut served = BTreeSet::new();
        for nic in &self.nics {
            if nic.name.is_empty() || nic.name.len() > MAX_NIC_NAME {
                return Err(NicListError::BadName {
                    name: nic.name.clone(),
                });
            }
            if !names.insert(nic.name.as_str()) {
                return Err(NicListError::NicTwice {
                    name: nic.name.clone(),
                });
            }
            if let Some(addr) = nic.addrs.iter().find(|a| !served.insert(**a)) {
                return Err(NicListError::AddressTwice {
                    addr: *addr,
                    nic: nic.name.clone(),
                });
            }
        }
        let mut ports = BTreeSet::new();
        for accepted in &self.ports {
            if !ports.insert(accepted.port) {
                return Err(NicListError::PortTwice {
                    port: accepted.port,
                });
            }
            if let Some(addr) = accepted.addrs.iter().find(|a| !served.contains(a)) {
                return Err(NicListError::AcceptsElsewhere {
                    port: accepted.port,
                    addr: *addr,
                });
            }
        }
        Ok(())
    }

    /// The NIC that holds `addr`.
    pub fn nic_of(&self, addr: IpAddr) -> Option<&NicInfo> {
        self.nics.iter().find(|n| n.addrs.contains(&addr))
    }
}

/// [`Message::NicGrants`](super::Message::NicGrants) (protocol 9): this
/// sender's grant on each NIC the receiver serves, so that a sender that
/// plans each receiver address as a destination of its own (a slot is a
/// (NIC, CPU) pair) uses on every NIC only the CPUs granted there. The
/// first NIC's grant is also [`Message::Grant`](super::Message::Grant)'s,
/// all a peer of protocol 8 or older learns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode)]
pub struct NicGrants {
    /// Grows with every grant of one receiver run (the same counter as
    /// [`CpuGrant::epoch`]).
    pub epoch: u64,
    /// One entry per served NIC, in `--iface` order, at most [`MAX_NICS`].
    pub nics: Vec<NicGrant>,
}

/// One NIC's grant to one sender.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode)]
pub struct NicGrant {
    /// The interface's name, as in [`NicInfo::name`].
    pub name: String,
    /// The CPUs granted for flows that enter by this NIC, each with the
    /// flows other senders hold there; at most [`MAX_NIC_CPUS`].
    pub cpus: Vec<CpuCount>,
}

impl<C> Decode<C> for NicGrants {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            epoch: u64::decode(decoder)?,
            nics: bounded_vec(decoder, MAX_NICS, "a NIC grant list")?,
        })
    }
}
bincode::impl_borrow_decode!(NicGrants);

impl<C> Decode<C> for NicGrant {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Ok(Self {
            name: String::decode(decoder)?,
            cpus: bounded_vec(decoder, MAX_NIC_CPUS, "a NIC's granted CPU list")?,
        })
    }
}
bincode::impl_borrow_decode!(NicGrant);

impl NicGrants {
    /// Whether a sender may apply these grants as they are: interface
    /// names, each NIC once, each NIC's CPUs once. The error says which.
    pub fn check(&self) -> Result<(), NicGrantsError> {
        let mut names = BTreeSet::new();
        for nic in &self.nics {
            if nic.name.is_empty() || nic.name.len() > MAX_NIC_NAME {
                return Err(NicGrantsError::BadName {
                    name: nic.name.clone(),
                });
            }
            if !names.insert(nic.name.as_str()) {
                return Err(NicGrantsError::GrantedTwice {
                    name: nic.name.clone(),
                });
            }
            CpuGrant {
                epoch: self.epoch,
                cpus: nic.cpus.clone(),
            }
            .check()
            .map_err(|source| NicGrantsError::Cpus {
                nic: nic.name.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The grant of the NIC named `name`, as a [`CpuGrant`] of this epoch.
    pub fn of(&self, name: &str) -> Option<CpuGrant> {
        self.nics.iter().find(|n| n.name == name).map(|n| CpuGrant {
            epoch: self.epoch,
            cpus: n.cpus.clone(),
        })
    }
}
