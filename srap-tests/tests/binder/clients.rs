//! The client matrix: ordinary clients, run unmodified under `srap exec`
//! against a 32-CPU receiver, judged from the (address, port) pairs the
//! receiver accepted, hashed with the RSS model. (`iperf3 -P 16` is
//! `iperf3_parallel_streams_land_on_distinct_cpus` above.)

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use srap_common::binder::{event, outcome};
use srap_tests::{built_binary, cgroup::ChildGuard, harness::landings, harness::srap_exec};

use super::{DPORT, Lab, TIMEOUT};
use srap_tests::require_privileged;

/// Where the client programs' sources are.
fn client_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// A tool on PATH (or Go's default install directory). Always `Some`: a
/// missing tool fails the test (it was asked to run; the `#[ignore]`
/// reason names the runtime), the `Option` keeps the callers' shape.
fn tool(name: &str) -> Option<PathBuf> {
    Some(srap_tests::privilege::require_program(
        name,
        &[Path::new("/usr/local/go/bin")],
        "`cargo xtask setup` installs the client matrix's runtimes",
    ))
}

/// Runs `program args` under `srap exec` in the sender's namespace.
fn spawn_client(lab: &Lab, program: &Path, args: &[String]) -> ChildGuard {
    let child = srap_exec(
        &lab.hosts.sender,
        &built_binary("srap"),
        Some(lab.agent.cgroup()),
        program,
    )
    .args(args)
    .stdout(Stdio::null())
    .spawn()
    .expect("spawn client under srap exec");
    ChildGuard::new(child)
}

/// Accepts `n` connections of a client and checks they land on `n`
/// distinct receiver CPUs by the model of the tuple the receiver saw.
fn accepts_on_distinct_cpus(lab: &Lab, server: &mut super::Server, n: usize) -> Vec<SocketAddr> {
    let peers = server.accept_peers(n);
    let server = SocketAddr::new(lab.receiver_ip(), DPORT);
    let cpus: Vec<u32> = landings(&lab.model, &peers, server)
        .expect("same-family tuples")
        .iter()
        .map(|landing| landing.cpu)
        .collect();
    let distinct: std::collections::BTreeSet<u32> = cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        n,
        "flows share receiver CPUs: {peers:?} land on {cpus:?}"
    );
    peers
}

/// The matrix's common case: a fresh lab on `subnet` with the binder
/// attached, the client (`args` made for that lab) run under `srap exec`,
/// and its `n` connections on `n` distinct CPUs, all steered.
fn client_steers(program: &Path, args: impl FnOnce(&Lab) -> Vec<String>, n: usize) {
    let lab = Lab::new(false);
    lab.attach_once();
    let mut server = lab.listen();
    let _client = spawn_client(&lab, program, &args(&lab));
    accepts_on_distinct_cpus(&lab, &mut server, n);
    assert_eq!(steered(&lab), n as u64, "{}", lab.stats());
}

/// Adds `cidr` to the sender's veth end.
/// Adds host `host` of the lab's subnet to the sender's end; returns it.
pub(super) fn add_sender_address(lab: &Lab, host: u8) -> IpAddr {
    let address = lab.hosts.subnet().ipv4(host);
    let cidr = format!("{address}/24");
    let added = lab
        .hosts
        .sender
        .exec(
            "ip",
            ["addr", "add", &cidr, "dev", &lab.hosts.sender_end.ifname],
        )
        .expect("ip addr add");
    assert!(added.status.success(), "{added:?}");
    address.into()
}

fn steered(lab: &Lab) -> u64 {
    let stats = lab.stats();
    stats.get(outcome::STEERED) + stats.get(outcome::RETRIED)
}

fn python_clients(family: &str) {
    let Some(python) = tool("python3") else {
        return;
    };
    let args = |lab: &Lab| {
        vec![
            client_source("connect.py").display().to_string(),
            family.into(),
            lab.receiver_ip().to_string(),
            DPORT.to_string(),
            "16".into(),
        ]
    };
    client_steers(&python, args, 16);
}

#[test]
#[ignore = "client runtime: needs root, netns, bpffs and python3; run as root by `cargo xtask test`"]
fn python_af_inet_clients_are_steered() {
    require_privileged("clients: python AF_INET");
    python_clients("inet");
}

#[test]
#[ignore = "client runtime: needs root, netns, bpffs and python3; run as root by `cargo xtask test`"]
fn python_dual_stack_af_inet6_clients_are_steered() {
    require_privileged("clients: python AF_INET6 dual-stack");
    python_clients("inet6");
}

/// java.net.Socket: a dual-stack AF_INET6 socket to `::ffff:a.b.c.d`.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and a JDK; run as root by `cargo xtask test`"]
fn jdk_clients_are_steered() {
    require_privileged("clients: JDK");
    let Some(java) = tool("java") else {
        return;
    };
    let args = |lab: &Lab| {
        vec![
            client_source("Connect.java").display().to_string(),
            lab.receiver_ip().to_string(),
            DPORT.to_string(),
            "16".into(),
        ]
    };
    client_steers(&java, args, 16);
}

/// Builds the Go client once into the test target directory.
fn go_client(go: &Path) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("srap-go-client");
    let exe = dir.join("connect");
    let out = Command::new(go)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(client_source("connect.go"))
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOFLAGS", "-mod=mod")
        .env("GO111MODULE", "off")
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// 32 goroutines released at once: concurrent connects on a 32-CPU
/// receiver take 32 distinct CPUs.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and Go; run as root by `cargo xtask test`"]
fn go_thirty_two_goroutines_take_thirty_two_cpus() {
    require_privileged("clients: Go");
    let Some(go) = tool("go") else {
        return;
    };
    let exe = go_client(&go);
    let args = |lab: &Lab| vec![lab.server_addr().to_string(), "32".into()];
    client_steers(&exe, args, 32);
}

/// curl with 16 parallel transfers (URL globbing); the receiver never
/// answers, so each transfer times out after its connection is made.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and curl; run as root by `cargo xtask test`"]
fn curl_parallel_transfers_are_steered() {
    require_privileged("clients: curl");
    let Some(curl) = tool("curl") else {
        return;
    };
    let args = |lab: &Lab| {
        let url = format!("http://{}/[1-16]", lab.server_addr());
        [
            "-s",
            "--no-progress-meter",
            "-o",
            "/dev/null",
            "--parallel",
            "--parallel-immediate",
            "--parallel-max",
            "16",
        ]
        .into_iter()
        .map(String::from)
        .chain(["--max-time".into(), TIMEOUT.as_secs().to_string(), url])
        .collect()
    };
    client_steers(&curl, args, 16);
}

/// `n` Python connections bound to `addr` with IP_BIND_ADDRESS_NO_PORT:
/// each keeps that address, lands on its own CPU, and is counted as
/// steered with its source kept.
fn bound_clients_keep(lab: &Lab, python: &Path, addr: IpAddr, n: usize) {
    let mut server = lab.listen();
    let args = [
        client_source("connect.py").display().to_string(),
        "inet".into(),
        lab.receiver_ip().to_string(),
        DPORT.to_string(),
        n.to_string(),
        addr.to_string(),
    ];
    let _client = spawn_client(lab, python, &args);
    let peers = accepts_on_distinct_cpus(lab, &mut server, n);
    assert!(
        peers.iter().all(|p| p.ip() == addr),
        "the application's address was not kept: {peers:?}"
    );
    let stats = lab.stats();
    assert_eq!(steered(lab), n as u64, "{stats}");
    assert_eq!(stats.get(event::SOURCE_KEPT), n as u64, "{stats}");
}

/// A socket bound to a second local address with IP_BIND_ADDRESS_NO_PORT
/// (as HAProxy, nginx `proxy_bind` and Envoy do) keeps that address and
/// gets a port planned for it.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and python3; run as root by `cargo xtask test`"]
fn a_bound_second_address_is_kept_and_steered() {
    require_privileged("clients: IP_BIND_ADDRESS_NO_PORT");
    let Some(python) = tool("python3") else {
        return;
    };
    let lab = Lab::new(false);
    let second = add_sender_address(&lab, 11);
    // Planned after the address exists.
    lab.attach_once();
    bound_clients_keep(&lab, &python, second, 16);
}

/// An address added while the agent runs (a VIP moved to this host, say)
/// is planned at the agent's next tick; a client bound to it keeps it.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and python3; run as root by `cargo xtask test`"]
fn an_address_added_while_running_is_planned() {
    require_privileged("clients: address added at run time");
    let Some(python) = tool("python3") else {
        return;
    };
    let mut lab = Lab::new(false);
    lab.start_agent();
    let added = add_sender_address(&lab, 12);
    lab.await_agent_line("local addresses, routes or bond members changed: replanned");
    bound_clients_keep(&lab, &python, added, 4);
}

/// Sockets bound to their address with `IP_BIND_ADDRESS_NO_PORT` and port
/// 0 before `connect()`, as a real client binds them (were the bind hook's
/// record and the connect's two, closing would leave the second with its
/// CPU counted): each is recorded once, and once they are closed
/// the pinned occupancy is zero with nothing for the audit to repair.
#[test]
#[ignore = "client runtime: needs root, netns, bpffs and python3; run as root by `cargo xtask test`"]
fn sockets_bound_before_connect_are_recorded_once_and_leave_nothing_to_repair() {
    require_privileged("clients: occupancy after IP_BIND_ADDRESS_NO_PORT sockets close");
    let Some(python) = tool("python3") else {
        return;
    };
    let mut lab = Lab::new(false);
    lab.start_agent();
    let mut server = lab.listen();
    let args = [
        client_source("connect.py").display().to_string(),
        "inet".into(),
        lab.receiver_ip().to_string(),
        DPORT.to_string(),
        "4".into(),
        lab.sender_ip().to_string(),
    ];
    let mut client = spawn_client(&lab, &python, &args);
    let peers = accepts_on_distinct_cpus(&lab, &mut server, 4);
    let records =
        srap_daemon::sender::audit::read_records(&lab.agent.layout()).expect("the socket table");
    let mut rows = std::collections::BTreeMap::<u64, usize>::new();
    for (_, cookie, _) in &records {
        *rows.entry(*cookie).or_default() += 1;
    }
    let doubled = rows.values().filter(|n| **n > 1).count() as u64;
    assert_eq!(super::occupancy::occupied(&lab), 4);
    let before = super::occupancy::after_audits(&lab, 1);
    client.kill();
    server.await_closed(&peers.iter().map(SocketAddr::port).collect::<Vec<_>>());
    let after = super::occupancy::after_audits(&lab, before.audits + 3);
    eprintln!(
        "4 sockets bound before connect: {} records ({doubled} sockets recorded twice); \
         after they closed: occupancy {}, repaired {} ({:?})",
        records.len(),
        super::occupancy::occupied(&lab),
        after.repaired,
        after.last
    );
    assert_eq!(doubled, 0, "sockets recorded twice: {records:?}");
    assert_eq!(super::occupancy::occupied(&lab), 0, "{after:?}");
    assert_eq!(after.repaired, 0, "{after:?}");
}
