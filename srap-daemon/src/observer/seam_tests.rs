//! The observer's decisions on in-memory hooks and maps: which hook it
//! tries in which order and what it falls back to, what a missing
//! sock_diag does, and how the records of each kind of hook are read. No
//! root, no kernel.

use std::{
    any::Any,
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
};

use aya::{Pod, maps::MapError};
use srap_common::observer::{FLOWS_MAP, FlowKey, FlowStats, SOCK_FLOWS_MAP, SockFlow};
use srap_common::protocol::Protocol;
use srap_host::netlink::NetlinkError;

use super::{
    AttachFailure, Hook, HookChoice, ObserverError, ObserverLimit, QueueReading, SocketView,
    first_attached, read_table,
    seam::{FlowTable, HookAttacher},
    socket_diag,
};
use crate::sock_diag::{Modprobe, SockDiagError};

/// Hooks that attach unless told to refuse or fail, noting each try.
#[derive(Default)]
struct FakeHooks {
    refused: HashMap<Hook, &'static str>,
    fatal: Option<Hook>,
    tried: Vec<Hook>,
}

impl FakeHooks {
    fn refusing(refused: &[(Hook, &'static str)]) -> Self {
        Self {
            refused: refused.iter().copied().collect(),
            ..Self::default()
        }
    }
}

impl HookAttacher for FakeHooks {
    type Attached = ();

    fn attach(&mut self, hook: Hook) -> Result<(), AttachFailure> {
        self.tried.push(hook);
        if self.fatal == Some(hook) {
            return Err(AttachFailure::Fatal(ObserverError::Missing("program")));
        }
        match self.refused.get(&hook) {
            Some(why) => Err(AttachFailure::Refused((*why).into())),
            None => Ok(()),
        }
    }
}

fn attach(hooks: &mut FakeHooks, choice: HookChoice, driver: &str) -> Result<Hook, ObserverError> {
    first_attached(hooks, "eth0", choice, Some(driver)).map(|(hook, ())| hook)
}

#[test]
fn auto_takes_the_socket_hook_where_it_attaches() {
    let mut hooks = FakeHooks::default();
    let hook = attach(&mut hooks, HookChoice::Auto, "mlx5_core").expect("attached");
    assert_eq!(hook, Hook::SockOps);
    assert_eq!(hooks.tried, [Hook::SockOps]);
}

#[test]
fn auto_on_a_veth_never_tries_the_socket_hook() {
    let mut hooks = FakeHooks::default();
    let hook = attach(&mut hooks, HookChoice::Auto, "veth").expect("attached");
    assert_eq!(hook, Hook::TcxIngress);
    assert_eq!(hooks.tried, [Hook::TcxIngress]);
}

#[test]
fn auto_falls_back_from_the_socket_hook_to_tcx_then_a_clsact_filter() {
    let mut hooks = FakeHooks::refusing(&[
        (Hook::SockOps, "no cgroup2"),
        (Hook::TcxIngress, "tcx needs Linux 6.6"),
    ]);
    let hook = attach(&mut hooks, HookChoice::Auto, "virtio_net").expect("attached");
    assert_eq!(hook, Hook::ClsactIngress);
    assert_eq!(
        hooks.tried,
        [Hook::SockOps, Hook::TcxIngress, Hook::ClsactIngress]
    );
}

#[test]
fn every_hook_refused_is_one_error_naming_each_attempt_in_order() {
    let mut hooks = FakeHooks::refusing(&[
        (Hook::TcxIngress, "tcx needs Linux 6.6"),
        (Hook::ClsactIngress, "no clsact"),
    ]);
    let err = attach(&mut hooks, HookChoice::Auto, "veth").expect_err("none");
    let ObserverError::Attach { iface, attempts } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(iface, "eth0");
    assert_eq!(
        attempts,
        "sock_ops (cgroup): not by default on a veth (queue 0 unknowable); \
         tc ingress (tcx): tcx needs Linux 6.6; tc ingress (clsact): no clsact"
    );
}

#[test]
fn a_fatal_failure_stops_without_trying_the_next_hook() {
    let mut hooks = FakeHooks {
        fatal: Some(Hook::SockOps),
        ..FakeHooks::default()
    };
    let err = attach(&mut hooks, HookChoice::Auto, "mlx5_core").expect_err("fatal");
    assert!(matches!(err, ObserverError::Missing("program")), "{err:?}");
    assert_eq!(hooks.tried, [Hook::SockOps]);
}

#[test]
fn xdp_falls_back_from_driver_to_generic_mode_and_never_to_tc() {
    let mut hooks = FakeHooks::refusing(&[(Hook::XdpDriver, "no native XDP")]);
    let hook = attach(&mut hooks, HookChoice::Xdp, "veth").expect("generic");
    assert_eq!(hook, Hook::XdpGeneric);
    assert_eq!(hooks.tried, [Hook::XdpDriver, Hook::XdpGeneric]);

    let mut hooks = FakeHooks::refusing(&[
        (Hook::XdpDriver, "no native XDP"),
        (Hook::XdpGeneric, "MTU too large"),
    ]);
    let err = attach(&mut hooks, HookChoice::Xdp, "veth").expect_err("no XDP");
    assert!(
        matches!(&err, ObserverError::Attach { attempts, .. }
            if attempts == "xdp (driver): no native XDP; xdp (generic): MTU too large"),
        "{err:?}"
    );
    assert_eq!(hooks.tried, [Hook::XdpDriver, Hook::XdpGeneric], "not tc");
}

#[test]
fn explicit_choices_try_their_own_hooks_only() {
    let mut hooks = FakeHooks::default();
    let hook = attach(&mut hooks, HookChoice::Sock, "veth").expect("asked for");
    assert_eq!(
        hook,
        Hook::SockOps,
        "a veth does not stop an explicit choice"
    );
    let mut hooks = FakeHooks::refusing(&[(Hook::TcxIngress, "old kernel")]);
    let hook = attach(&mut hooks, HookChoice::Tc, "mlx5_core").expect("clsact");
    assert_eq!(hook, Hook::ClsactIngress);
    assert_eq!(hooks.tried, [Hook::TcxIngress, Hook::ClsactIngress]);
    let mut hooks = FakeHooks::refusing(&[(Hook::XdpGeneric, "busy")]);
    let only = HookChoice::Only(Hook::XdpGeneric);
    assert!(attach(&mut hooks, only, "veth").is_err());
    assert_eq!(hooks.tried, [Hook::XdpGeneric]);
}

/// A kernel without `tcp_diag`, whose module will not load.
fn no_tcp_diag() -> SockDiagError {
    SockDiagError::NoTcpDiag {
        first: NetlinkError::Kernel {
            errno: libc::ENOENT,
            message: None,
        },
        modprobe: Modprobe::LoadedStillFails,
    }
}

#[test]
fn auto_without_sock_diag_moves_to_tc_and_says_what_that_costs() {
    let mut limits = Vec::new();
    let refused = socket_diag::<()>(Err(no_tcp_diag()), HookChoice::Auto, &mut limits);
    let missing = no_tcp_diag().to_string();
    assert!(
        matches!(&refused, Err(AttachFailure::Refused(why)) if *why == missing),
        "the socket hook is refused"
    );
    let [limit] = &limits[..] else {
        panic!("{limits:?}");
    };
    assert_eq!(limit.missing, "sock_diag");
    assert!(
        limit.detail.starts_with(&format!("{missing}; ")),
        "{}",
        limit.detail
    );
    assert!(
        limit.detail.contains("runs at tc ingress instead"),
        "{}",
        limit.detail
    );

    // And so the automatic choice lands on tc, the limit still said.
    struct NoDiag<'l>(&'l mut Vec<ObserverLimit>);
    impl HookAttacher for NoDiag<'_> {
        type Attached = ();
        fn attach(&mut self, hook: Hook) -> Result<(), AttachFailure> {
            match hook {
                Hook::SockOps => {
                    socket_diag::<()>(Err(no_tcp_diag()), HookChoice::Auto, self.0).map(drop)
                }
                _ => Ok(()),
            }
        }
    }
    let mut limits = Vec::new();
    let (hook, ()) =
        first_attached(&mut NoDiag(&mut limits), "eth0", HookChoice::Auto, None).expect("tc");
    assert_eq!(hook, Hook::TcxIngress);
    assert_eq!(limits.len(), 1);
}

#[test]
fn an_explicit_socket_hook_goes_on_without_sock_diag_from_handshakes() {
    let mut limits = Vec::new();
    let diag = socket_diag::<()>(Err(no_tcp_diag()), HookChoice::Sock, &mut limits);
    assert!(matches!(diag, Ok(None)), "kept, without counters");
    assert_eq!(limits.len(), 1);
    assert!(
        limits[0].detail.contains("from its handshake"),
        "{}",
        limits[0].detail
    );

    let mut limits = Vec::new();
    assert!(matches!(
        socket_diag(Ok(7), HookChoice::Auto, &mut limits),
        Ok(Some(7))
    ));
    assert!(limits.is_empty());
}

/// Flow maps in memory; removals noted.
#[derive(Default)]
struct FakeTable {
    packets: HashMap<FlowKey, FlowStats>,
    sockets: HashMap<FlowKey, SockFlow>,
    removed: Vec<(&'static str, FlowKey)>,
}

impl FlowTable for FakeTable {
    fn walk<V: Pod>(&self, name: &'static str) -> Result<HashMap<FlowKey, V>, ObserverError> {
        let map: &dyn Any = match name {
            FLOWS_MAP => &self.packets,
            SOCK_FLOWS_MAP => &self.sockets,
            _ => return Err(ObserverError::Missing(name)),
        };
        map.downcast_ref::<HashMap<FlowKey, V>>()
            .cloned()
            .ok_or(ObserverError::Missing(name))
    }

    fn remove<V: Pod>(&mut self, name: &'static str, keys: &[FlowKey]) -> Result<(), MapError> {
        self.removed.extend(keys.iter().map(|k| (name, *k)));
        Ok(())
    }
}

fn addr(last: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)), port)
}

fn key(src: SocketAddr, dst: SocketAddr) -> FlowKey {
    FlowKey::from_addrs(Protocol::Tcp, src, dst).expect("one family")
}

fn seen(rx_queue: u32, last_seen_ns: u64) -> FlowStats {
    FlowStats {
        rx_queue,
        last_seen_ns,
        ..FlowStats::default()
    }
}

#[test]
fn packet_records_read_their_queues_sorted_less_the_stale() {
    let (late, early) = (
        key(addr(1, 4000), addr(2, 80)),
        key(addr(1, 3000), addr(2, 80)),
    );
    let old = key(addr(1, 5000), addr(2, 80));
    let mut table = FakeTable::default();
    table.packets.insert(late, seen(4, 900));
    table.packets.insert(early, seen(0, 800));
    table.packets.insert(old, seen(2, 100));
    table.packets.insert(FlowKey::default(), seen(1, 900));
    let stale = |last_ns: u64| last_ns < 500;
    let read =
        read_table(&table, None, QueueReading::RecordedPlusOne, (1_000, &stale)).expect("read");

    assert_eq!(read.held, 4, "every record counts toward the map's fill");
    assert_eq!(read.stale, [old]);
    let got: Vec<(SocketAddr, u32)> = read
        .records
        .iter()
        .map(|r| (r.src, r.stats.rx_queue))
        .collect();
    assert_eq!(
        got,
        [
            (addr(1, 3000), srap_common::observer::RX_QUEUE_UNKNOWN),
            (addr(1, 4000), 3)
        ],
        "sorted; queue + 1 read back; a key of no family left out"
    );
}

#[test]
fn socket_records_are_this_interfaces_own_with_handshake_queues() {
    let local = addr(2, 80);
    let open = key(addr(1, 4000), local);
    let closed_long_ago = key(addr(1, 4001), local);
    let closed_lately = key(addr(1, 4002), local);
    let elsewhere = key(addr(1, 4003), addr(9, 80));
    let mapped = FlowKey::from_addrs(
        Protocol::Tcp,
        SocketAddr::new(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into(), 4004),
        SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped().into(), 80),
    )
    .expect("v6");
    let flow = |rx_queue, closed_ns| SockFlow {
        rx_queue,
        cpu: 5,
        established_ns: 10,
        closed_ns,
        bytes: 1_000,
        segs_in: 3,
        ..SockFlow::default()
    };
    let mut table = FakeTable::default();
    table.sockets.insert(open, flow(u32::MAX, 0));
    table.sockets.insert(closed_long_ago, flow(1, 50));
    table.sockets.insert(closed_lately, flow(2, 700));
    table.sockets.insert(elsewhere, flow(1, 0));
    table.sockets.insert(mapped, flow(3, 0));
    let view = SocketView {
        diag: None,
        local: vec![local.ip()],
    };
    let stale = |closed_ns: u64| closed_ns < 500;
    let read = read_table(
        &table,
        Some(&view),
        QueueReading::SocketPeerTxQueue,
        (1_000, &stale),
    )
    .expect("read");

    assert_eq!(read.held, 5);
    assert_eq!(read.stale, [closed_long_ago], "open ones are never stale");
    let got: Vec<(SocketAddr, u32, u64)> = read
        .records
        .iter()
        .map(|r| (r.src, r.stats.rx_queue, r.stats.last_seen_ns))
        .collect();
    assert_eq!(
        got,
        [
            (addr(1, 4000), 0, 1_000),
            (addr(1, 4002), 3, 700),
            (addr(1, 4004), 4, 1_000),
        ],
        "queue − 1 read back; open: seen now; closed: at its close; \
         v4-mapped as IPv4; another address's left out"
    );
    let unmapped = read.records.last().expect("mapped");
    assert_eq!(unmapped.key, key(addr(1, 4004), local));
    assert_eq!(unmapped.stats.bytes, 1_000);
}
