//! The receive verifier on a real kernel: two namespaces joined by a veth, a
//! real TCP connection from one to the other, and the flow map must show
//! exactly that connection's 4-tuple.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    thread,
    time::{Duration, Instant},
};

use srap_daemon::verifier::{FlowRecord, Hook, HookChoice, Verifier};
use srap_tests::{TwoHosts, VethConfig, require_privileged};

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

/// Sets up two hosts, attaches the verifier on the receiver's end with
/// `choice`, sends `PAYLOAD` bytes over one TCP connection from the sender,
/// and returns the flows recorded. Everything is torn down on return.
fn exchange(choice: HookChoice, v6: bool, subnet: u8) -> Exchange {
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: QUEUES,
        rx_queues: QUEUES,
        subnet,
    })
    .expect("two namespaces joined by a veth");
    let server_addr = SocketAddr::new(hosts.receiver_end.ip(v6), PORT);

    // The receiver side lives on this thread, inside the receiver namespace.
    let inside = hosts.receiver.enter().expect("enter receiver namespace");
    let verifier = Verifier::attach(&hosts.receiver_end.ifname, choice).expect("attach verifier");
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

    let flows = verifier.flows().expect("read flow map");
    let hook = verifier.hook();
    // Detach in the namespace we attached in, then leave it.
    drop(verifier);
    drop(inside);
    Exchange {
        client,
        server: server_addr,
        flows,
        hook,
    }
}

/// One UDP datagram to the server's address (nothing listens; the point is
/// that the verifier ignores it).
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
    let deadline = Instant::now() + TIMEOUT;
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    Instant::now() < deadline,
                    "no connection within {TIMEOUT:?}"
                );
                thread::sleep(Duration::from_millis(10));
            }
            Err(err) => panic!("accept: {err}"),
        }
    };
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

fn assert_xdp_flow(v6: bool, subnet: u8) {
    let exchange = exchange(HookChoice::Xdp, v6, subnet);
    assert_eq!(exchange.hook, Hook::XdpDriver, "veth takes native XDP");
    let flow = assert_single_flow(&exchange);
    let queue = flow.stats.rx_queue().expect("XDP knows the rx queue");
    assert!(queue < QUEUES, "rx queue {queue} < {QUEUES}");
}

#[test]
fn xdp_verifier_records_the_ipv4_flow() {
    if !require_privileged("xdp_verifier_records_the_ipv4_flow") {
        return;
    }
    assert_xdp_flow(false, 11);
}

#[test]
fn xdp_verifier_records_the_ipv6_flow() {
    if !require_privileged("xdp_verifier_records_the_ipv6_flow") {
        return;
    }
    assert_xdp_flow(true, 12);
}

#[test]
fn tcx_by_default_records_the_flow() {
    if !require_privileged("tcx_by_default_records_the_flow") {
        return;
    }
    // The default never reconfigures the device: no XDP unless asked.
    let exchange = exchange(HookChoice::Auto, false, 13);
    // tcx needs Linux 6.6; older kernels fall through to clsact, also fine.
    assert!(
        matches!(exchange.hook, Hook::TcxIngress | Hook::ClsactIngress),
        "tc hook: {}",
        exchange.hook
    );
    assert_single_flow(&exchange);
}

#[test]
fn clsact_fallback_records_the_ipv6_flow() {
    if !require_privileged("clsact_fallback_records_the_ipv6_flow") {
        return;
    }
    let exchange = exchange(HookChoice::Only(Hook::ClsactIngress), true, 14);
    assert_eq!(exchange.hook, Hook::ClsactIngress);
    assert_single_flow(&exchange);
}
