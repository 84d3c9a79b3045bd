//! Which member of a Linux bond a flow leaves on: the bonding driver's
//! transmit hash (`drivers/net/bonding/bond_main.c`: `bond_xmit_hash`,
//! `bond_ip_hash`, `bond_xmit_3ad_xor_slave_get`), as checked against the
//! members' own `tx_packets` in QEMU guests on 6.1 and 6.12 (768 of 768
//! flows, `balance-xor` and `802.3ad`, 2 to 4 members: design.md, "Bonds").
//!
//! In `balance-xor` and `802.3ad` a flow's member is `usable[hash % n]`,
//! `usable` the members that can transmit in enslavement order. Under
//! `xmit_hash_policy=layer3+4` the hash is a fixed function of the 4-tuple,
//! so a source port decides the member as it decides the receiver's queue:
//! the same birthday problem one layer up (16 flows on 2 members split 8/8
//! only 19.6 % of the time, [`even_split`]). For a power-of-two `n` the
//! member index is affine over GF(2) in the source port's bits
//! ([`index_bit_ports`]), a constraint beside the two NICs' RSS.

use std::net::IpAddr;

use crate::rss::FlowTuple;

/// `xmit_hash_policy`, as `/sys/class/net/BOND/bonding/xmit_hash_policy`
/// names it (its first word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashPolicy {
    Layer2,
    Layer23,
    Layer34,
    Encap23,
    Encap34,
    VlanSrcMac,
}

impl HashPolicy {
    /// The policy a sysfs line names (`layer3+4 1`: the name, then its
    /// number); `None` for a word this build does not know.
    pub fn parse(text: &str) -> Option<Self> {
        let word = text.split_whitespace().next()?;
        Self::ALL.into_iter().find(|policy| policy.name() == word)
    }

    /// Every policy this build knows.
    pub const ALL: [Self; 6] = [
        Self::Layer2,
        Self::Layer23,
        Self::Layer34,
        Self::Encap23,
        Self::Encap34,
        Self::VlanSrcMac,
    ];

    /// The policy's name, as sysfs shows it and takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Layer2 => "layer2",
            Self::Layer23 => "layer2+3",
            Self::Layer34 => "layer3+4",
            Self::Encap23 => "encap2+3",
            Self::Encap34 => "encap3+4",
            Self::VlanSrcMac => "vlan+srcmac",
        }
    }

    /// Whether a TCP flow's source port decides its member. Only
    /// `layer3+4`: `layer2`, `layer2+3` and `vlan+srcmac` hash no port, and
    /// `encap3+4` returns the skb's own L4 hash when it has one, which for
    /// TCP this host sends is the socket's random `sk_txhash`
    /// (`skb_set_hash_from_sk`), not a function of the port.
    pub fn port_decides(self) -> bool {
        self == Self::Layer34
    }
}

/// The layer3+4 transmit hash of a TCP flow as this host sends it (before
/// the modulo).
pub fn layer34_hash(tuple: &FlowTuple) -> u32 {
    // The ports as the packet carries them, read as one little-endian word
    // (`memcpy(&hash, &flow.ports.ports, 4)` on x86-64).
    let [s_hi, s_lo] = tuple.sport.to_be_bytes();
    let [d_hi, d_lo] = tuple.dport.to_be_bytes();
    let ports = u32::from_le_bytes([s_hi, s_lo, d_hi, d_lo]);
    let mut hash = ports ^ address_word(tuple.src()) ^ address_word(tuple.dst());
    hash ^= hash >> 16;
    hash ^= hash >> 8;
    // The driver drops the lowest bit ("the common even ports pattern").
    hash >> 1
}

/// An address as `bond_ip_hash` takes it: an IPv4 address's in-memory
/// word; an IPv6 address through `ipv6_addr_hash` (the XOR of its words).
fn address_word(addr: IpAddr) -> u32 {
    match addr {
        IpAddr::V4(v4) => u32::from_le_bytes(v4.octets()),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .fold(0, |acc, w| acc ^ w),
    }
}

/// The index into the usable members (`None` without one) a layer3+4 bond
/// of `members` usable members sends `tuple` on.
pub fn member_index(tuple: &FlowTuple, members: u32) -> Option<u32> {
    (members > 0).then(|| layer34_hash(tuple) % members)
}

/// For `members` a power of two: bit `j` of the member index is source-port
/// bit `j + 1` XOR source-port bit `j + 9` XOR a constant of the addresses
/// and destination port. The pairs of source-port bits, one per index bit;
/// `None` for another member count (the modulo is then not affine in the
/// port: its port sets are listed instead).
pub fn index_bit_ports(members: u32) -> Option<Vec<(u32, u32)>> {
    if !members.is_power_of_two() || members > 1 << 7 {
        return None;
    }
    Some(
        (0..members.trailing_zeros())
            .map(|j| (j + 1, j + 9))
            .collect(),
    )
}

/// Member balancing as the binder's plan does it: each receiver CPU slot
/// is given a member, round robin in slot order, so the flows the binder
/// spreads over distinct receiver CPUs spread as evenly over the members.
/// With a power-of-two count of usable members the member index is
/// [`MemberPlan::linear_bits`] more linear bits of the port, stacked above
/// the receiver's indirection bits so one port satisfies both, toward any
/// destination port ([`crate::port_tables`]). Other counts (3, 5, 6, 7)
/// take the modulo, which is not affine in the port: their ports are
/// listed per destination port, so they balance only toward named ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemberPlan {
    members: u32,
}

impl MemberPlan {
    /// The most members a plan balances: 2^3. Each member bit doubles a
    /// layout's cosets, and bonds of 2 or 4 members are the norm.
    pub const MOST: u32 = 8;

    /// The plan for `members` usable members, 2 to [`MemberPlan::MOST`]
    /// (one member needs no balancing).
    pub fn new(members: u32) -> Option<Self> {
        (2..=Self::MOST)
            .contains(&members)
            .then_some(Self { members })
    }

    pub fn members(self) -> u32 {
        self.members
    }

    /// The index bits the member adds to a port's value, for a power-of-two
    /// count; `None` for another (not linear in the port).
    pub fn linear_bits(self) -> Option<u32> {
        self.members
            .is_power_of_two()
            .then(|| self.members.trailing_zeros())
    }

    /// The member index a slot's ports are planned for: slots round robin.
    pub fn member_of_slot(self, slot: usize) -> u32 {
        (slot % self.members as usize) as u32
    }

    /// The member index of `tuple` (the driver's, [`member_index`]).
    pub fn index(self, tuple: &FlowTuple) -> u32 {
        member_index(tuple, self.members).unwrap_or(0)
    }
}

/// P(`flows` uniformly random flows split evenly over `members`): the
/// multinomial coefficient of the even split over `members^flows`; 0 when
/// `flows` is not a multiple of `members`. (16 on 2: 19.6 %; on 4: 1.5 %.)
pub fn even_split(flows: u32, members: u32) -> f64 {
    if members == 0 || !flows.is_multiple_of(members) {
        return 0.0;
    }
    let share = flows / members;
    let ln_fact = |n: u32| (1..=n).map(|i| f64::from(i).ln()).sum::<f64>();
    let ln = ln_fact(flows)
        - f64::from(members) * ln_fact(share)
        - f64::from(flows) * f64::from(members).ln();
    ln.exp()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn v4(sport: u16, dport: u16) -> FlowTuple {
        FlowTuple::new(
            IpAddr::V4(Ipv4Addr::new(10, 199, 7, 1)),
            sport,
            IpAddr::V4(Ipv4Addr::new(10, 199, 7, 2)),
            dport,
        )
        .expect("tuple")
    }

    /// The driver's arithmetic written out on bytes, as design.md gives it:
    /// the XOR of all 12 bytes of saddr, daddr, sport and dport, shifted
    /// right once, is the index for a power-of-two count.
    #[test]
    fn a_power_of_two_index_is_the_xor_of_the_tuples_bytes_shifted_once() {
        for sport in (0..=u16::MAX).step_by(7) {
            let tuple = v4(sport, 5201);
            let bytes = [10u8, 199, 7, 1, 10, 199, 7, 2]
                .into_iter()
                .chain(sport.to_be_bytes())
                .chain(5201u16.to_be_bytes())
                .fold(0u8, |acc, b| acc ^ b);
            for n in [2u32, 4, 8, 16] {
                assert_eq!(
                    member_index(&tuple, n),
                    Some((u32::from(bytes) >> 1) & (n - 1)),
                    "{sport} on {n}"
                );
            }
        }
    }

    /// Exhaustively over the 65 536 ports: each index bit follows its two
    /// source-port bits (bits 0 and 8 never matter), for 2, 4, 8 and 16
    /// members; for 3 the modulo is not affine.
    #[test]
    fn each_index_bit_follows_two_port_bits_and_three_members_do_not() {
        for n in [2u32, 4, 8, 16] {
            let pairs = index_bit_ports(n).expect("a power of two");
            let base = member_index(&v4(0, 443), n).expect("members");
            for sport in 0..=u16::MAX {
                let flipped = pairs.iter().enumerate().fold(0, |acc, (j, &(a, b))| {
                    let bit = (u32::from(sport) >> a ^ u32::from(sport) >> b) & 1;
                    acc | bit << j
                });
                assert_eq!(member_index(&v4(sport, 443), n), Some(base ^ flipped));
            }
        }
        assert_eq!(index_bit_ports(3), None);
        // Affine would mean f(a ^ b) = f(a) ^ f(b) ^ f(0) for every a, b.
        let f = |p: u16| member_index(&v4(p, 443), 3).expect("members");
        let broken = (0..=u16::MAX)
            .filter(|&p| f(p) != f(p & 0xff00) ^ f(p & 0x00ff) ^ f(0))
            .count();
        assert!(broken > 10_000, "{broken} ports break linearity");
    }

    #[test]
    fn ipv6_addresses_hash_by_the_xor_of_their_words() {
        let a: Ipv6Addr = "fd00::1".parse().expect("addr");
        let b: Ipv6Addr = "fd00::2".parse().expect("addr");
        let tuple = FlowTuple::new(IpAddr::V6(a), 40000, IpAddr::V6(b), 5201).expect("tuple");
        // fd00::1 ^ fd00::2 = 0x03 in the last byte: only it survives.
        let ports = u32::from_le_bytes([0x9c, 0x40, 0x14, 0x51]);
        let mut hash = ports ^ (0x03 << 24);
        hash ^= hash >> 16;
        hash ^= hash >> 8;
        assert_eq!(layer34_hash(&tuple), hash >> 1);
    }

    #[test]
    fn sixteen_flows_split_evenly_on_two_members_one_time_in_five() {
        assert!((even_split(16, 2) - 12_870.0 / 65_536.0).abs() < 1e-9);
        assert!((even_split(16, 4) - 0.014_68).abs() < 1e-4);
        assert_eq!(even_split(15, 2), 0.0);
        assert_eq!(even_split(4, 0), 0.0);
    }

    #[test]
    fn only_layer3_plus_4_lets_the_port_decide() {
        assert_eq!(HashPolicy::parse("layer3+4 1"), Some(HashPolicy::Layer34));
        assert_eq!(HashPolicy::parse("encap3+4 4"), Some(HashPolicy::Encap34));
        assert_eq!(HashPolicy::parse("mystery 9"), None);
        for policy in HashPolicy::ALL {
            assert_eq!(HashPolicy::parse(policy.name()), Some(policy));
        }
        assert!(HashPolicy::Layer34.port_decides());
        assert!(!HashPolicy::Encap34.port_decides());
        assert!(!HashPolicy::Layer23.port_decides());
    }
}
