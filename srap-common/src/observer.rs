//! The receive observer's ABI: the `#[repr(C)]` keys and values of its BPF
//! maps and the names of its programs, shared with `srap-ebpf`.
//!
//! Both sides compile these exact definitions, so the eBPF programs and user
//! space agree on layout without a second description. Every struct is padded
//! explicitly: BPF hash maps compare keys byte for byte, so implicit padding
//! (which the eBPF side may leave uninitialised) would make equal flows differ.

/// Name of the receive observer's per-flow map in the eBPF object.
pub const FLOWS_MAP: &str = "SRAP_FLOWS";
/// Capacity of [`FLOWS_MAP`]; an LRU map, so old flows are evicted, never refused.
pub const FLOWS_MAX_ENTRIES: u32 = 65_536;

/// Name of the XDP variant of the receive observer.
pub const OBSERVE_XDP_PROGRAM: &str = "srap_obs_xdp";
/// Name of the tc (ingress classifier) variant of the receive observer.
pub const OBSERVE_TC_PROGRAM: &str = "srap_obs_tc";

/// Name of the socket observer's per-connection map in the eBPF object.
pub const SOCK_FLOWS_MAP: &str = "SRAP_SOCK_FLOWS";
/// Name of the socket (`sock_ops`) variant of the receive observer.
pub const OBSERVE_SOCK_PROGRAM: &str = "srap_obs_sock";
/// Name of the socket hook a sender attaches to its steered cgroup: where
/// the connections it opens land on this host's own NIC (their reverse
/// tuple), recorded at the handshake as [`SockFlow`]s.
pub const OBSERVE_LOCAL_PROGRAM: &str = "srap_obs_local";
/// Its per-connection map: [`FlowKey`] with this host (the connecting end)
/// as the source → [`SockFlow`].
pub const LOCAL_FLOWS_MAP: &str = "SRAP_LOCAL_FLOWS";
/// Bare programs that only let the packet (or socket) through: the baselines
/// the observer's cost is measured against, in the same object and run.
pub const BARE_XDP_PROGRAM: &str = "srap_bare_xdp";
/// See [`BARE_XDP_PROGRAM`].
pub const BARE_TC_PROGRAM: &str = "srap_bare_tc";
/// See [`BARE_XDP_PROGRAM`].
pub const BARE_SOCK_PROGRAM: &str = "srap_bare_sock";

/// [`FlowStats::rx_queue`] when the hook could not tell the receive queue
/// (tc ingress on a device that does not record it in the skb).
pub const RX_QUEUE_UNKNOWN: u32 = u32::MAX;

/// One flow as the receiver sees it arrive: `src` is the sender. Its
/// programs record TCP flows only ([`FlowKey::protocol`]).
///
/// Addresses are in network byte order. An IPv4 address occupies the first 4
/// bytes of its 16-byte field and the remaining 12 bytes are zero (it is *not*
/// v4-mapped); [`FlowKey::family`] says which form is in use. Ports are in host
/// byte order, so user space can compare them with `SocketAddr::port()`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// A [`Family`](crate::family::Family) number.
    pub family: u8,
    /// A [`Protocol`](crate::protocol::Protocol) number: TCP's, as every
    /// program of the receive observer records TCP only (`sock_ops` sees
    /// nothing else, the packet parsers skip the rest).
    pub protocol: u8,
    /// Always zero; makes the padding explicit.
    pub pad: [u8; 2],
    /// Source (sender) port, host byte order.
    pub src_port: u16,
    /// Destination (receiver) port, host byte order.
    pub dst_port: u16,
    /// Source address, network byte order.
    pub src_addr: [u8; 16],
    /// Destination address, network byte order.
    pub dst_addr: [u8; 16],
}

/// What the observer saw of one flow, updated on every packet.
///
/// `rx_queue` and `cpu` are those of the *last* packet: a flow that keeps
/// moving shows it in `moves`, which counts packets whose (queue, CPU) differs
/// from the previous packet's.
///
/// Updates are plain read-modify-writes, not atomics (the BPF target has no
/// atomic read-modify-write in stable Rust). That is exact as long as one
/// flow's packets are processed on one CPU at a time, which is what RSS (and
/// RPS) arrange; two CPUs racing on one flow can lose a count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowStats {
    /// Receive queue of the last packet, or [`RX_QUEUE_UNKNOWN`]. The tc
    /// program stores the skb's raw `queue_mapping` here, whose meaning
    /// depends on the driver; the agent translates it when it reads the map.
    pub rx_queue: u32,
    /// CPU that ran the hook for the last packet.
    pub cpu: u32,
    /// Packets seen (with tc, skbs: GRO may have merged several packets).
    pub packets: u64,
    /// Bytes seen, from the Ethernet header on.
    pub bytes: u64,
    /// `bpf_ktime_get_ns()` of the first packet.
    pub first_seen_ns: u64,
    /// `bpf_ktime_get_ns()` of the last packet.
    pub last_seen_ns: u64,
    /// Packets that arrived on another (queue, CPU) than the packet before.
    pub moves: u32,
    /// The NIC's own RSS hash (`skb->hash`) of the packet that created the
    /// record (a flow's first packet, its SYN), or [`NIC_HASH_NONE`]. Only
    /// the tc program reads it: a plain load of `__sk_buff.hash`, the value
    /// the driver stored from the rx descriptor (`skb_get_hash()` would
    /// replace an L3-marked hardware hash, as igb's is, by a software one).
    /// Written once, when the record is created: no per-packet cost.
    pub nic_hash: u32,
}

/// [`FlowStats::nic_hash`] when there is no hash: the hook does not read it
/// (XDP, the socket hook), or the driver hands none over (`rxhash off`).
pub const NIC_HASH_NONE: u32 = 0;

/// What the socket observer saw of one accepted TCP connection: written
/// when the handshake completes and when the connection closes, never per
/// packet.
///
/// `rx_queue` and `cpu` are those of the handshake's last ACK, the packet
/// that created the socket: its CPU is the one that processes the flow (after
/// RPS), its queue the one RSS chose, which every later packet of the flow
/// shares. Bytes and segments while the connection is open come from user
/// space (`tcp_info` through sock_diag); at close the program stores the
/// final counts so a short connection is still accounted.
///
/// On a sender's own connections (`srap_obs_local`) it also holds the
/// CPU of the thread that called `connect()`, recorded then: against `cpu`
/// it says whether the flow's data is received where its reader runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockFlow {
    /// The socket's `rx_queue_mapping` as the kernel reports it to BPF:
    /// `u32::MAX` (-1) when the skb recorded no queue. What a recorded value
    /// means depends on the driver (see the agent's queue reading).
    pub rx_queue: u32,
    /// CPU that processed the handshake's last ACK.
    pub cpu: u32,
    /// `bpf_ktime_get_ns()` when the connection was established.
    pub established_ns: u64,
    /// `bpf_ktime_get_ns()` when it closed; 0 while open.
    pub closed_ns: u64,
    /// `tcp_sock.bytes_received` at close (payload bytes).
    pub bytes: u64,
    /// `tcp_sock.segs_in` at close.
    pub segs_in: u64,
    /// CPU that ran the close callback (diagnostic only).
    pub close_cpu: u32,
    /// CPU of the thread that called `connect()` (a connection this host
    /// opened), else [`CPU_UNKNOWN`]. `established_ns` 0 with it set: the
    /// connection has not been answered yet.
    pub connect_cpu: u32,
}

/// [`SockFlow::connect_cpu`] when no connect was seen (an accepted
/// connection, or one opened before the hook was attached).
pub const CPU_UNKNOWN: u32 = u32::MAX;

impl Default for SockFlow {
    fn default() -> Self {
        Self {
            rx_queue: 0,
            cpu: 0,
            established_ns: 0,
            closed_ns: 0,
            bytes: 0,
            segs_in: 0,
            close_cpu: 0,
            connect_cpu: CPU_UNKNOWN,
        }
    }
}

#[cfg(feature = "user")]
mod user {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    use super::{FlowKey, FlowStats, NIC_HASH_NONE, RX_QUEUE_UNKNOWN, SockFlow};
    use crate::{family::Family, protocol::Protocol};

    // SAFETY: both are `#[repr(C)]`, `Copy`, made only of integers and byte
    // arrays, with all padding explicit, so every bit pattern is valid.
    unsafe impl aya::Pod for FlowKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for FlowStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SockFlow {}

    fn family_and_bytes(ip: IpAddr) -> (u8, [u8; 16]) {
        let mut bytes = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => {
                bytes[..4].copy_from_slice(&v4.octets());
                (Family::Inet.as_u8(), bytes)
            }
            IpAddr::V6(v6) => (Family::Inet6.as_u8(), v6.octets()),
        }
    }

    impl FlowKey {
        /// The key the observer records for `protocol` packets from `src`
        /// to `dst`; `None` when the two addresses are of different
        /// families.
        pub fn from_addrs(protocol: Protocol, src: SocketAddr, dst: SocketAddr) -> Option<Self> {
            let (family, src_addr) = family_and_bytes(src.ip());
            let (dst_family, dst_addr) = family_and_bytes(dst.ip());
            (family == dst_family).then_some(Self {
                family,
                protocol: protocol.as_u8(),
                pad: [0; 2],
                src_port: src.port(),
                dst_port: dst.port(),
                src_addr,
                dst_addr,
            })
        }

        fn ip(&self, bytes: [u8; 16]) -> Option<IpAddr> {
            match Family::from_raw(u32::from(self.family)) {
                Some(Family::Inet) => Some(IpAddr::V4(Ipv4Addr::new(
                    bytes[0], bytes[1], bytes[2], bytes[3],
                ))),
                Some(Family::Inet6) => Some(IpAddr::V6(Ipv6Addr::from(bytes))),
                _ => None,
            }
        }

        /// The sender's address and port; `None` for an unknown family.
        pub fn src(&self) -> Option<SocketAddr> {
            self.ip(self.src_addr)
                .map(|ip| SocketAddr::new(ip, self.src_port))
        }

        /// The receiver's address and port; `None` for an unknown family.
        pub fn dst(&self) -> Option<SocketAddr> {
            self.ip(self.dst_addr)
                .map(|ip| SocketAddr::new(ip, self.dst_port))
        }
    }

    impl FlowStats {
        /// The receive queue, or `None` when the hook could not tell it.
        pub fn rx_queue(&self) -> Option<u32> {
            (self.rx_queue != RX_QUEUE_UNKNOWN).then_some(self.rx_queue)
        }

        /// The NIC's hash of the flow's first packet, or `None` when there
        /// is none ([`NIC_HASH_NONE`]).
        pub fn nic_hash(&self) -> Option<u32> {
            (self.nic_hash != NIC_HASH_NONE).then_some(self.nic_hash)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn ipv4_key_round_trips_and_keeps_the_tail_zero() {
            let src: SocketAddr = "10.199.1.1:40000".parse().expect("addr");
            let dst: SocketAddr = "10.199.1.2:5201".parse().expect("addr");
            let key = FlowKey::from_addrs(Protocol::Tcp, src, dst).expect("same family");
            assert_eq!(key.family, Family::Inet.as_u8());
            assert_eq!((key.protocol, key.pad), (Protocol::Tcp.as_u8(), [0; 2]));
            assert_eq!(key.src_addr[..4], [10, 199, 1, 1]);
            assert!(key.src_addr[4..].iter().all(|b| *b == 0));
            assert_eq!(key.src(), Some(src));
            assert_eq!(key.dst(), Some(dst));
        }

        #[test]
        fn ipv6_key_round_trips() {
            let src: SocketAddr = "[fd00:5a::1]:40000".parse().expect("addr");
            let dst: SocketAddr = "[fd00:5a::2]:5201".parse().expect("addr");
            let key = FlowKey::from_addrs(Protocol::Tcp, src, dst).expect("same family");
            assert_eq!(key.family, Family::Inet6.as_u8());
            assert_eq!(key.src(), Some(src));
            assert_eq!(key.dst(), Some(dst));
        }

        #[test]
        fn mixed_families_have_no_key() {
            let src: SocketAddr = "10.199.1.1:1".parse().expect("addr");
            let dst: SocketAddr = "[fd00:5a::2]:2".parse().expect("addr");
            assert_eq!(FlowKey::from_addrs(Protocol::Tcp, src, dst), None);
        }

        #[test]
        fn layout_matches_what_the_ebpf_side_writes() {
            assert_eq!(std::mem::size_of::<FlowKey>(), 40);
            assert_eq!(std::mem::size_of::<FlowStats>(), 48);
            assert_eq!(std::mem::size_of::<SockFlow>(), 48);
        }
    }
}
