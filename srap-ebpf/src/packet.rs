//! Bounds-checked parsing of Ethernet → (one VLAN tag) → IPv4/IPv6 → TCP into
//! a [`FlowKey`], over a `[data, data_end)` window of packet memory.
//!
//! XDP and tc both give direct packet access through such a window, so one
//! parser serves both hooks. Every read is preceded by a check against
//! `data_end` that the kernel's verifier can follow.

use core::mem::size_of;

use srap_common::{family::Family, observer::FlowKey, protocol::Protocol};

const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = Protocol::Tcp.as_u8();
const IPV4_MIN_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;
/// Source and destination port: all the TCP header this parser needs.
const TCP_PORTS_LEN: usize = 4;

/// Bytes that must be in the linear part of a packet for [`parse_tcp_flow`]
/// to see the ports of any packet it understands (VLAN + IPv4 with options).
pub(crate) const MAX_HEADER_LEN: usize = ETH_HLEN + VLAN_HLEN + 60 + TCP_PORTS_LEN;

/// A pointer to a `T` at `offset` in the window, if all of it lies inside.
#[inline(always)]
fn ptr_at<T>(data: usize, data_end: usize, offset: usize) -> Option<*const T> {
    let start = data.checked_add(offset)?;
    if start.checked_add(size_of::<T>())? > data_end {
        return None;
    }
    Some(start as *const T)
}

/// Reads a `T` at `offset`; `None` when it would cross `data_end`.
#[inline(always)]
fn read_at<T: Copy>(data: usize, data_end: usize, offset: usize) -> Option<T> {
    let ptr = ptr_at::<T>(data, data_end, offset)?;
    // SAFETY: `ptr_at` checked that the whole `T` lies in packet memory;
    // packet data has no alignment guarantee, hence the unaligned read.
    Some(unsafe { ptr.read_unaligned() })
}

/// A big-endian `u16` at `offset`.
#[inline(always)]
fn read_be16(data: usize, data_end: usize, offset: usize) -> Option<u16> {
    read_at::<[u8; 2]>(data, data_end, offset).map(u16::from_be_bytes)
}

/// The flow key of a TCP packet, or `None` for anything else (other
/// protocols, non-first IPv4 fragments, IPv6 with extension headers,
/// truncated headers).
#[inline(always)]
pub(crate) fn parse_tcp_flow(data: usize, data_end: usize) -> Option<FlowKey> {
    let mut l3 = ETH_HLEN;
    let mut ether_type = read_be16(data, data_end, 12)?;
    if ether_type == ETH_P_8021Q || ether_type == ETH_P_8021AD {
        ether_type = read_be16(data, data_end, ETH_HLEN + 2)?;
        l3 += VLAN_HLEN;
    }
    let mut key = FlowKey::default();
    let l4 = match ether_type {
        ETH_P_IP => {
            let ver_ihl: u8 = read_at(data, data_end, l3)?;
            let ihl = usize::from(ver_ihl & 0x0f) * 4;
            if ver_ihl >> 4 != 4 || ihl < IPV4_MIN_HLEN {
                return None;
            }
            // Fragment offset (low 13 bits): only the first fragment has ports.
            if read_be16(data, data_end, l3 + 6)? & 0x1fff != 0 {
                return None;
            }
            if read_at::<u8>(data, data_end, l3 + 9)? != IPPROTO_TCP {
                return None;
            }
            let src: [u8; 4] = read_at(data, data_end, l3 + 12)?;
            let dst: [u8; 4] = read_at(data, data_end, l3 + 16)?;
            key.family = Family::Inet.as_u8();
            key.src_addr[..4].copy_from_slice(&src);
            key.dst_addr[..4].copy_from_slice(&dst);
            l3 + ihl
        }
        ETH_P_IPV6 => {
            if read_at::<u8>(data, data_end, l3 + 6)? != IPPROTO_TCP {
                return None;
            }
            key.family = Family::Inet6.as_u8();
            key.src_addr = read_at(data, data_end, l3 + 8)?;
            key.dst_addr = read_at(data, data_end, l3 + 24)?;
            l3 + IPV6_HLEN
        }
        _ => return None,
    };
    key.protocol = IPPROTO_TCP;
    key.src_port = read_be16(data, data_end, l4)?;
    key.dst_port = read_be16(data, data_end, l4 + 2)?;
    Some(key)
}
