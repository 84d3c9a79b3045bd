//! The receive observer on a real kernel: two namespaces joined by a veth, a
//! real TCP connection from one to the other, and the flow map must show
//! exactly that connection's 4-tuple.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    ops::ControlFlow,
    thread,
    time::Duration,
};

use srap_daemon::observer::{FlowRecord, Hook, HookChoice, Observer};
use srap_tests::{TwoHosts, VethConfig, harness::poll_until, require_privileged};

/// Bytes the client sends: a few segments' worth.
const PAYLOAD: usize = 16 * 1024;
/// Upper bound on every wait in these tests.
const TIMEOUT: Duration = Duration::from_secs(10);
const QUEUES: u32 = 2;
const PORT: u16 = 5201;

/// What one exchange produced.
struct Exchange {
    client: SocketAddr,
    server: SocketAddr,
    flows: Vec<FlowRecord>,
    hook: Hook,
}

/// Sets up two hosts, attaches the observer on the receiver's end with
/// `choice`, sends `PAYLOAD` bytes over one TCP connection from the sender,
/// and returns the flows recorded. Everything is torn down on return.
fn exchange(choice: HookChoice, v6: bool) -> Exchange {
    exchange_all(&[choice], v6, None)
        .pop()
        .expect("one exchange per choice")
}

/// [`exchange`] with one observer per choice, all attached at once and
/// watching the same connection; with `rps_cpu`, every receive queue's RPS
/// mask is that one CPU.
fn exchange_all(choices: &[HookChoice], v6: bool, rps_cpu: Option<u32>) -> Vec<Exchange> {
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: QUEUES,
        rx_queues: QUEUES,
        ..VethConfig::default()
    })
    .expect("two namespaces joined by a veth");
    let server_addr = SocketAddr::new(hosts.receiver_end.ip(v6), PORT);
    if let Some(cpu) = rps_cpu {
        let script: String = (0..QUEUES)
            .map(|q| {
                format!(
                    "echo {:x} > /sys/class/net/{}/queues/rx-{q}/rps_cpus\n",
                    1u64 << cpu,
                    hosts.receiver_end.ifname
                )
            })
            .collect();
        hosts
            .receiver
            .exec("sh", ["-c", &script])
            .expect("set RPS masks");
    }

    // The receiver side lives on this thread, inside the receiver namespace.
    let inside = hosts.receiver.enter().expect("enter receiver namespace");
    let observers: Vec<Observer> = choices
        .iter()
        .map(|&choice| {
            Observer::attach(&hosts.receiver_end.ifname, choice).expect("attach observer")
        })
        .collect();
    let listener = TcpListener::bind(server_addr).expect("listen in receiver namespace");

    // Not TCP: must not show up in the flow map.
    hosts
        .sender
        .run(|| send_udp(server_addr))
        .expect("enter sender namespace");

    let (client, received) = thread::scope(|scope| {
        let client = scope.spawn(|| {
            hosts
                .sender
                .run(|| send(server_addr))
                .expect("enter sender namespace")
        });
        let received = receive(&listener);
        let client = client
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (client, received)
    });
    assert_eq!(received, PAYLOAD, "server got the whole payload");

    let exchanges = observers
        .iter()
        .map(|observer| Exchange {
            client,
            server: server_addr,
            flows: observer.flows().expect("read flow map"),
            hook: observer.hook(),
        })
        .collect();
    // Detach in the namespace we attached in, then leave it.
    drop(observers);
    drop(inside);
    exchanges
}

/// One UDP datagram to the server's address (nothing listens; the point is
/// that the observer ignores it).
fn send_udp(server: SocketAddr) {
    let bind = SocketAddr::new(
        if server.is_ipv6() {
            Ipv6Addr::UNSPECIFIED.into()
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        },
        0,
    );
    let socket = UdpSocket::bind(bind).expect("udp socket");
    socket.send_to(b"not tcp", server).expect("send udp");
}

/// Client: connect, send the payload, half-close, wait for the server's close.
fn send(server: SocketAddr) -> SocketAddr {
    let mut stream = TcpStream::connect_timeout(&server, TIMEOUT).expect("connect");
    stream
        .set_read_timeout(Some(TIMEOUT))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(TIMEOUT))
        .expect("write timeout");
    // The source port the kernel chose: the flow map must show this one.
    let local = stream.local_addr().expect("getsockname");
    stream.write_all(&[0x5a; PAYLOAD]).expect("send payload");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .expect("wait for server close");
    local
}

/// Server: accept one connection (bounded wait) and read it to the end.
fn receive(listener: &TcpListener) -> usize {
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let mut stream = poll_until(TIMEOUT, Duration::from_millis(10), || {
        match listener.accept() {
            Ok((stream, _)) => ControlFlow::Break(stream),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => ControlFlow::Continue(()),
            Err(err) => panic!("accept: {err}"),
        }
    })
    .unwrap_or_else(|()| panic!("no connection within {TIMEOUT:?}"));
    stream.set_nonblocking(false).expect("blocking stream");
    stream
        .set_read_timeout(Some(TIMEOUT))
        .expect("read timeout");
    let mut data = Vec::new();
    stream.read_to_end(&mut data).expect("read payload");
    data.len()
}

/// The map holds exactly the client→server flow, with real counts.
fn assert_single_flow(exchange: &Exchange) -> FlowRecord {
    let [flow] = exchange.flows.as_slice() else {
        panic!(
            "expected exactly one flow {} -> {}, got {:#?}",
            exchange.client, exchange.server, exchange.flows
        );
    };
    assert_eq!(
        flow.src, exchange.client,
        "source is the client's real port"
    );
    assert_eq!(flow.dst, exchange.server);
    assert!(flow.stats.packets > 0, "packets counted: {flow:?}");
    assert!(
        flow.stats.bytes >= PAYLOAD as u64,
        "bytes counted (frames include headers): {flow:?}"
    );
    let cpus = thread::available_parallelism().map_or(1024, |n| n.get() as u32);
    assert!(flow.stats.cpu < cpus.max(1024), "plausible cpu: {flow:?}");
    *flow
}

fn assert_xdp_flow(v6: bool) {
    let exchange = exchange(HookChoice::Xdp, v6);
    assert_eq!(exchange.hook, Hook::XdpDriver, "veth takes native XDP");
    let flow = assert_single_flow(&exchange);
    let queue = flow.stats.rx_queue().expect("XDP knows the rx queue");
    assert_eq!(flow.stats.nic_hash(), None, "XDP does not read the hash");
    assert!(queue < QUEUES, "rx queue {queue} < {QUEUES}");
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn xdp_observer_records_the_ipv4_flow() {
    require_privileged("xdp_observer_records_the_ipv4_flow");
    assert_xdp_flow(false);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn xdp_observer_records_the_ipv6_flow() {
    require_privileged("xdp_observer_records_the_ipv6_flow");
    assert_xdp_flow(true);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn tcx_records_the_flow() {
    require_privileged("tcx_records_the_flow");
    let exchange = exchange(HookChoice::Tc, false);
    // tcx needs Linux 6.6; older kernels fall through to clsact, also fine.
    assert!(
        matches!(exchange.hook, Hook::TcxIngress | Hook::ClsactIngress),
        "tc hook: {}",
        exchange.hook
    );
    let flow = assert_single_flow(&exchange);
    // What a veth delivers as skb->hash: no NIC hashed the packet, but TCP
    // stamps every segment with its socket's random tx hash (never 0), and
    // crossing the veth keeps it.
    assert!(
        flow.stats.nic_hash().is_some(),
        "the sending socket's tx hash: {flow:?}"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn the_socket_hook_records_the_flow_and_auto_keeps_tc_on_veth() {
    require_privileged("the_socket_hook_records_the_flow_and_auto_keeps_tc_on_veth");
    let exchange = exchange(HookChoice::Sock, false);
    assert_eq!(exchange.hook, Hook::SockOps);
    assert_single_flow(&exchange);
    // A veth cannot tell the socket hook its queue 0: the default uses tc
    // there (and the socket hook on real NICs).
    let exchange = exchange_all(&[HookChoice::Auto], false, None)
        .pop()
        .expect("one exchange");
    assert_eq!(exchange.hook, Hook::TcxIngress);
    assert_single_flow(&exchange);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn clsact_fallback_records_the_ipv6_flow() {
    require_privileged("clsact_fallback_records_the_ipv6_flow");
    let exchange = exchange(HookChoice::Only(Hook::ClsactIngress), true);
    assert_eq!(exchange.hook, Hook::ClsactIngress);
    assert_single_flow(&exchange);
}

/// The socket hook (no per-packet work) and the tc program (every skb) watch
/// one connection with every receive queue's RPS pinned to one CPU: both
/// must name the same flow, the same receive queue (the socket's
/// `rx_queue_mapping` translated for veth) and that RPS CPU, and the socket
/// hook must count the payload.
fn assert_socket_hook_agrees_with_tc(v6: bool) {
    let cpus = thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let rps_cpu = cpus - 1;
    let [tc, sock] = <[Exchange; 2]>::try_from(exchange_all(
        &[HookChoice::Only(Hook::TcxIngress), HookChoice::Sock],
        v6,
        Some(rps_cpu),
    ))
    .unwrap_or_else(|_| panic!("two exchanges"));
    assert_eq!(sock.hook, Hook::SockOps);
    let tc_flow = assert_single_flow(&tc);
    let sock_flow = assert_single_flow(&sock);
    // tcp_info's bytes_received advances with the sequence space, which the
    // FIN takes one byte of.
    assert!(
        (PAYLOAD as u64..=PAYLOAD as u64 + 1).contains(&sock_flow.stats.bytes),
        "payload bytes from the socket's counters: {sock_flow:?}"
    );
    // A veth's "receive queue" is the tx queue the sending socket picked,
    // which may change after the handshake (tc counts that in `moves`); a
    // NIC's RSS keeps a 4-tuple on one queue. Compare when nothing moved.
    // And a veth records no queue for its queue 0: the socket then holds a
    // stale value (why `auto` keeps tc on veth).
    if tc_flow.stats.moves == 0 && tc_flow.stats.rx_queue() != Some(0) {
        assert_eq!(
            sock_flow.stats.rx_queue(),
            tc_flow.stats.rx_queue(),
            "same receive queue: socket {sock_flow:?}, tc {tc_flow:?}"
        );
    } else {
        // The socket's queue is then stale, possibly from another device.
        eprintln!("veth queue 0 or a moved flow, queues not compared: {tc_flow:?}");
    }
    assert_eq!(tc_flow.stats.cpu, rps_cpu, "tc runs on the RPS CPU");
    assert_eq!(
        sock_flow.stats.cpu, rps_cpu,
        "the socket hook reports the RPS CPU: {sock_flow:?}"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn socket_hook_agrees_with_tc_ipv4() {
    require_privileged("socket_hook_agrees_with_tc_ipv4");
    assert_socket_hook_agrees_with_tc(false);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn socket_hook_agrees_with_tc_ipv6() {
    require_privileged("socket_hook_agrees_with_tc_ipv6");
    assert_socket_hook_agrees_with_tc(true);
}

/// What an agent sampling for days keeps in its map: records of flows that
/// closed (socket hook) or went idle (tc) longer ago than `forget_after`
/// are deleted at the next sample, so a host's many short connections do
/// not fill the map and make every sample walk them; a connection still
/// open keeps its record on the socket hook (its queue and CPU are known
/// from the handshake only), and comes back on tc with its next packet.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn samples_forget_closed_and_idle_flows_and_keep_open_ones() {
    require_privileged("samples_forget_closed_and_idle_flows_and_keep_open_ones");
    const SHORT: usize = 20;
    let forget_after = Duration::from_millis(600);
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: QUEUES,
        rx_queues: QUEUES,
        ..VethConfig::default()
    })
    .expect("two namespaces joined by a veth");
    let server = SocketAddr::new(hosts.receiver_end.ip(false), PORT);
    let inside = hosts.receiver.enter().expect("enter receiver namespace");
    let mut observers: Vec<Observer> = [HookChoice::Only(Hook::TcxIngress), HookChoice::Sock]
        .into_iter()
        .map(|choice| {
            let mut observer =
                Observer::attach(&hosts.receiver_end.ifname, choice).expect("attach observer");
            observer.forget_after(forget_after);
            observer
        })
        .collect();
    let listener = TcpListener::bind(server).expect("listen in receiver namespace");

    // Short connections that close, then one that stays open, idle.
    let closed: Vec<SocketAddr> = thread::scope(|scope| {
        let client = scope.spawn(|| {
            hosts
                .sender
                .run(|| (0..SHORT).map(|_| send(server)).collect())
                .expect("enter sender namespace")
        });
        for _ in 0..SHORT {
            assert_eq!(receive(&listener), PAYLOAD);
        }
        client
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let (mut open, open_addr) = hosts
        .sender
        .run(|| {
            let mut stream = TcpStream::connect_timeout(&server, TIMEOUT).expect("connect");
            stream.write_all(b"hello").expect("send");
            let local = stream.local_addr().expect("getsockname");
            (stream, local)
        })
        .expect("enter sender namespace");
    let (mut accepted, _) = listener.accept().expect("accept the open connection");
    let mut hello = [0u8; 5];
    accepted.read_exact(&mut hello).expect("read hello");

    let sources = |observer: &mut Observer| -> Vec<SocketAddr> {
        let flows = observer.sample().expect("sample");
        flows
            .iter()
            .filter(|f| f.dst == server)
            .map(|f| f.src)
            .collect()
    };
    for observer in &mut observers {
        let seen = sources(observer);
        for addr in closed.iter().chain([&open_addr]) {
            assert!(
                seen.contains(addr),
                "{}: {addr} recorded: {seen:?}",
                observer.hook()
            );
        }
    }

    thread::sleep(forget_after * 2);
    for observer in &mut observers {
        // This sample forgets; the next one shows what is left.
        let _ = sources(observer);
        let held = observer.held();
        // `flows()` forgets nothing and shows closed records too: what it
        // shows is what the map holds (other namespaces' flows, recorded by
        // the same cgroup hook, are left out of both).
        let kept: Vec<SocketAddr> = observer
            .flows()
            .expect("read")
            .iter()
            .filter(|f| f.dst == server)
            .map(|f| f.src)
            .collect();
        assert!(
            held > SHORT,
            "{}: the forgetting sample saw them all",
            observer.hook()
        );
        match observer.hook() {
            Hook::SockOps => assert_eq!(kept, [open_addr], "only the open connection stays"),
            hook => assert!(kept.is_empty(), "{hook}: idle flows deleted: {kept:?}"),
        }
    }

    // The open connection speaks again: tc records it anew.
    open.write_all(b"again").expect("send again");
    accepted.read_exact(&mut hello).expect("read again");
    let tc = &mut observers[0];
    assert_eq!(tc.hook(), Hook::TcxIngress);
    assert_eq!(
        sources(tc),
        [open_addr],
        "tc records the flow with its next packet"
    );
    drop(observers);
    drop(inside);
}
