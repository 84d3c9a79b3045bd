//! The userspace MPTCP path manager as SRAP drives it
//! (`srap_host::mptcp_pm`), against the real kernel: two namespaces joined
//! by two links, the connecting one under the userspace path manager, a
//! server in the other sending to one MPTCP connection.
//!
//! Judged by the connecting host's kernel, never by what SRAP asked for:
//! `ss` lists the second subflow with the local port SRAP chose, and each
//! subflow's own `bytes_received` shows which link the data came by after
//! each backup flag SRAP set (`MP_PRIO`, which the peer's scheduler obeys).

use std::{
    io::{Read as _, Write as _},
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream},
    ops::ControlFlow,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::Duration,
};

use srap_common::rss::embedded_default;
use srap_daemon::sender::path_manager::Reads;
use srap_host::mptcp_pm::{
    PathManager, PathManagerKind, PmEndpoint, PmEvent, PmEventKind, PmEvents,
};
use srap_tests::{
    TwoHosts, VethConfig, built_binary,
    flows::{Server, mptcp_listener},
    harness::{SenderOpts, SenderPair},
    harness::{Subnet, poll_until},
    require_privileged, socket_patterns,
    test_workload::Workload,
    two_links::serve_over_both,
    veth::enable_mptcp_in,
};

/// The server's port.
const PORT: u16 = 5301;
/// The local port SRAP asks for the second subflow: outside the
/// ephemeral range, so nothing else of the namespace takes it.
const SUBFLOW_PORT: u16 = 20_001;
/// The server's pace: about 50 MiB/s, a flow the links carry without
/// queueing, so a subflow's share is the scheduler's choice.
const CHUNK: usize = 256 * 1024;
const PAUSE: Duration = Duration::from_millis(5);
/// How long after a flag change before the share is judged, and the
/// window it is judged over.
const SETTLE: Duration = Duration::from_millis(500);
const WINDOW: Duration = Duration::from_millis(1500);
/// The least share of a window's bytes through the subflow that is not
/// backup.
const SHARE: f64 = 0.90;
/// How long events and subflows may take to appear.
const WAIT: Duration = Duration::from_secs(5);

#[test]
#[ignore = "needs root: network namespaces and MPTCP"]
fn a_subflow_opens_from_the_port_asked_and_backup_flags_choose_the_link_data_comes_by() {
    require_privileged("the userspace path manager test");
    let lab = PmLab::new();
    let (events, mut pm) = lab
        .hosts
        .sender
        .run(|| -> anyhow::Result<_> {
            Ok((
                PmEvents::open(Duration::from_millis(100))?,
                PathManager::open()?,
            ))
        })
        .expect("enter the sender's namespace")
        .expect("the path manager's sockets");
    let server = Sender::start(&lab.hosts);
    let client = Reader::connect(&lab.hosts, lab.far1);
    let first = client.local;
    let token = await_event(&events, |e| {
        e.kind == PmEventKind::Established && e.local == Some(first)
    })
    .token;

    let local = SocketAddr::new(IpAddr::V4(lab.near2), SUBFLOW_PORT);
    let remote = SocketAddr::new(IpAddr::V4(lab.far2), PORT);
    let asked = PmEndpoint {
        id: 1,
        addr: local,
        ifindex: None,
    };
    pm.create_subflow(token, &asked, remote)
        .expect("the kernel opens the subflow");
    await_event(&events, |e| {
        e.kind == PmEventKind::SubEstablished && e.token == token && e.local == Some(local)
    });
    let listed = lab.await_subflows(2);
    assert!(
        listed
            .iter()
            .any(|s| s.local == local && s.remote == remote),
        "the kernel lists the second subflow from {local}: {listed:?}"
    );

    let server_first = SocketAddr::new(IpAddr::V4(lab.far1), PORT);
    for (backup_first, via) in [(true, local), (false, first)] {
        pm.set_backup(token, first, server_first, backup_first)
            .expect("flag the first subflow");
        pm.set_backup(token, local, remote, !backup_first)
            .expect("flag the second subflow");
        let share = lab.share_through(via);
        eprintln!("first subflow backup {backup_first}: {share:.3} of the bytes through {via}");
        assert!(
            share >= SHARE,
            "with the other subflow backup, {share:.3} of a window's bytes came through {via} \
             (want ≥ {SHARE})"
        );
    }
    drop(client);
    drop(server);
}

#[test]
#[ignore = "needs root: network namespaces and MPTCP"]
fn the_in_kernel_path_manager_refuses_a_subflow_request_with_the_kernels_reason() {
    require_privileged("the userspace path manager test");
    let hosts = TwoHosts::new(VethConfig::default()).expect("two namespaces");
    enable_mptcp_in(&hosts.sender).expect("MPTCP on");
    let kind = hosts
        .sender
        .run(PathManagerKind::current)
        .expect("enter the sender's namespace")
        .expect("the path manager sysctl");
    assert_eq!(kind, PathManagerKind::Kernel, "a new namespace's default");
    let mut pm = hosts
        .sender
        .run(PathManager::open)
        .expect("enter the sender's namespace")
        .expect("the path manager's socket");
    let asked = PmEndpoint {
        id: 1,
        addr: SocketAddr::new(hosts.sender_end.ip(false), SUBFLOW_PORT),
        ifindex: None,
    };
    let refused = pm
        .create_subflow(1, &asked, hosts.receiver_addr(PORT, false))
        .expect_err("no connection has token 1");
    assert!(refused.errno().is_some(), "the kernel's refusal: {refused}");
}

#[test]
#[ignore = "needs root: network namespaces, MPTCP and a raw tracepoint"]
fn the_reader_tracepoint_counts_a_followed_connections_reads_on_the_cpu_of_its_thread() {
    require_privileged("the reader tracepoint test");
    let hosts = TwoHosts::new(VethConfig::default()).expect("two namespaces");
    for ns in [&hosts.sender, &hosts.receiver] {
        enable_mptcp_in(ns).expect("MPTCP on");
    }
    let events = hosts
        .sender
        .run(|| PmEvents::open(Duration::from_millis(100)))
        .expect("enter the sender's namespace")
        .expect("the path manager's events");
    let mut ebpf = aya::Ebpf::load(srap_daemon::ebpf_object()).expect("the agent's object");
    let mut reads = Reads::attach(&mut ebpf).expect("the reader tracepoint attached");
    let server = Sender::start(&hosts);
    let server_addr = SocketAddr::new(IpAddr::V4(hosts.receiver_end.ipv4), PORT);
    let stream = hosts
        .sender
        .run(|| socket_patterns::mptcp(server_addr, WAIT))
        .expect("enter the sender's namespace");
    let local = stream.local_addr().expect("the connection's address");
    let token = await_event(&events, |e| {
        e.kind == PmEventKind::Created && e.local == Some(local)
    })
    .token;
    reads.follow(token).expect("follow the connection");
    assert_eq!(
        reads.counts(token.wrapping_add(1)),
        None,
        "an unfollowed token"
    );

    let cpus = available_cpus();
    let mut read_so_far = 0;
    let mut stream = stream;
    for cpu in cpus.iter().copied().cycle().take(4) {
        let phase = read_on(&mut stream, cpu, Duration::from_millis(300));
        read_so_far += phase.bytes;
        let counts = reads.counts(token).expect("the followed row");
        let counted: u64 = counts.bytes.iter().sum::<u64>() + counts.beyond;
        eprintln!(
            "reader on CPU {} (node {}): {} bytes so far ({} reads this phase); the tracepoint counted \
             {counted} in {} reads, last on CPU {}",
            phase.cpu, phase.node, read_so_far, phase.reads, counts.reads, counts.last_cpu
        );
        assert!(phase.bytes > 0, "the reader read nothing on CPU {cpu}");
        assert_eq!(counted, read_so_far, "every byte the thread read, counted");
        assert_eq!(
            counts.last_cpu, phase.cpu,
            "the reader's own sched_getcpu()"
        );
        assert_eq!(counts.last_node, phase.node, "the node of the reader's CPU");
        let on_node = counts
            .bytes
            .get(phase.node as usize)
            .copied()
            .unwrap_or(counts.beyond);
        assert!(on_node > 0, "bytes under the reader's node {}", phase.node);
    }
    reads.forget(token);
    assert_eq!(reads.counts(token), None, "a forgotten connection");
    drop(stream);
    drop(server);
}

#[test]
#[ignore = "needs root: network namespaces, MPTCP and the agent's programs"]
fn the_agent_opens_a_steered_subflow_per_nic_keeps_others_on_the_kernels_endpoints_and_hands_back_the_path_manager()
 {
    require_privileged("the follow-reader agent test");
    let mut lab = FollowLab::new();
    assert_eq!(
        lab.pm_type(),
        "1",
        "the agent's namespace under the userspace path manager"
    );
    let (mut server, _workload) = lab.open_steered(lab.service, STEERED);
    let second = lab.await_subflows_from_b(STEERED);
    for peer in &second {
        assert!(
            LAB_PORTS.contains(&peer.port()),
            "a steered connection's subflow from link B leaves from {peer}: a port of the \
             binder's range {LAB_PORTS:?}, not the kernel's"
        );
    }

    // Outside the cgroup: the namespace's own endpoint gives a subflow.
    lab.pair
        .hosts
        .sender
        .ip(["mptcp", "endpoint", "add", &lab.b.to_string(), "subflow"])
        .expect("an endpoint");
    let mut other = lab
        .pair
        .hosts
        .sender
        .run(|| socket_patterns::mptcp(lab.service, WAIT))
        .expect("enter the sender's namespace");
    // Data acknowledged at the MPTCP level makes the connection fully
    // established, as an application's first bytes do.
    other.write_all(b"hello").expect("a greeting");
    server.accept(1);
    let all = lab.await_subflows_from_b(STEERED + 1);
    let kernel_port = all
        .iter()
        .find(|p| !second.contains(p))
        .expect("a third subflow");
    assert!(
        !LAB_PORTS.contains(&kernel_port.port()),
        "the unsteered connection's subflow {kernel_port} keeps a kernel port"
    );

    lab.pair.agent.stop();
    assert_eq!(
        lab.pm_type(),
        "0",
        "a clean stop restores the kernel's path manager"
    );
    lab.pair.agent.launch().expect("the agent again");
    assert_eq!(lab.pm_type(), "1");
    lab.pair.agent.kill();
    assert_eq!(
        lab.pm_type(),
        "1",
        "a killed agent leaves the namespace as it was"
    );
    let out = lab.pair.agent.detach().expect("srap-agent detach");
    assert!(out.status.success(), "detach: {out:?}");
    assert_eq!(
        lab.pm_type(),
        "0",
        "detach restores the kernel's path manager"
    );
    drop(other);
}

/// A NIC's subflows lost while it was down (reset here with `ss -K`, as a
/// link that stays down ends them) are not asked for while it is down,
/// and each steered connection gets its subflow through it again, from a
/// port of the binder's range, once it is back.
#[test]
#[ignore = "needs root: network namespaces, MPTCP and the agent's programs"]
fn a_nics_lost_subflows_are_made_again_when_it_comes_back_and_not_while_it_is_down() {
    require_privileged("the follow-reader repair test");
    let lab = FollowLab::new();
    let (_server, _workload) = lab.open_steered(lab.service, STEERED);
    let before = lab.await_subflows_from_b(STEERED);

    lab.set_b(false);
    let b = lab.b.to_string();
    lab.pair
        .hosts
        .sender
        .exec("ss", ["-K", "src", &b])
        .expect("ss -K");
    // Three repair rounds with link B down.
    thread::sleep(Duration::from_secs(3));
    let while_down = lab.sender_sockets_from_b();
    lab.set_b(true);
    assert!(
        while_down.is_empty(),
        "no subflow from link B while it is down: {while_down:?}"
    );
    let after = poll_until(WAIT * 2, Duration::from_millis(100), || {
        let new: Vec<SocketAddr> = lab
            .subflows_from_b()
            .into_iter()
            .filter(|peer| !before.contains(peer))
            .collect();
        if new.len() >= STEERED {
            ControlFlow::Break(new)
        } else {
            ControlFlow::Continue(new)
        }
    })
    .unwrap_or_else(|seen| {
        panic!(
            "{STEERED} new subflows from link B once it is back: {seen:?}\n{}",
            lab.pair.agent.log().tail()
        )
    });
    for peer in &after {
        assert!(
            LAB_PORTS.contains(&peer.port()),
            "a subflow made again leaves from {peer}: a port of the binder's range"
        );
    }
}

/// The receiver announces its address on link B (a `signal` endpoint):
/// a steered connection joins it from each of the sender's NICs, with
/// ports of the binder's range, and a connection of another cgroup joins
/// it once, with a kernel port, as the kernel's own path manager would
/// under the namespace's `add_addr_accepted` — judged by the subflows the
/// receiver's kernel lists on that address.
#[test]
#[ignore = "needs root: network namespaces, MPTCP and the agent's programs"]
fn announced_addresses_are_joined_by_steered_connections_and_by_everyone_elses() {
    require_privileged("the follow-reader announced-address test");
    let lab = FollowLab::new();
    let receiver = &lab.pair.hosts.receiver;
    let far = lab.far.to_string();
    receiver
        .ip(["mptcp", "endpoint", "add", &far, "signal"])
        .expect("a signal endpoint");
    receiver
        .ip([
            "mptcp",
            "limits",
            "set",
            "subflows",
            "8",
            "add_addr_accepted",
            "8",
        ])
        .expect("the receiver's limits");
    // On every address, as a server does: a join toward the announced
    // address needs a listener there.
    let any = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), SERVICE_PORT);
    let (mut server, _workload) = lab.open_steered(any, 1);
    let mut other = lab
        .pair
        .hosts
        .sender
        .run(|| socket_patterns::mptcp(lab.service, WAIT))
        .expect("enter the sender's namespace");
    other.write_all(b"hello").expect("a greeting");
    server.accept(1);
    let joined = poll_until(WAIT * 2, Duration::from_millis(100), || {
        let peers = lab.subflows_on(lab.far);
        let steered = peers
            .iter()
            .filter(|p| LAB_PORTS.contains(&p.port()))
            .count();
        if steered >= 2 && peers.len() >= 3 {
            ControlFlow::Break(peers)
        } else {
            ControlFlow::Continue(peers)
        }
    })
    .unwrap_or_else(|seen| {
        panic!(
            "subflows to the announced {far}: 2 steered (one per NIC) and one of the other \
             connection; the receiver listed {seen:?}\n{}",
            lab.pair.agent.log().tail()
        )
    });
    let from: std::collections::BTreeSet<IpAddr> = joined
        .iter()
        .filter(|p| LAB_PORTS.contains(&p.port()))
        .map(SocketAddr::ip)
        .collect();
    assert_eq!(from.len(), 2, "from each of the sender's NICs: {joined:?}");
    assert_eq!(
        joined
            .iter()
            .filter(|p| !LAB_PORTS.contains(&p.port()))
            .count(),
        1,
        "the other cgroup's connection joins once, with a kernel port: {joined:?}"
    );
    drop(other);
}

/// MPTCP connections the steered test workload opens.
const STEERED: usize = 3;
/// The agent's source ports: below the namespace's ephemeral range, so a
/// port the binder chose cannot be the kernel's.
const LAB_PORTS: std::ops::RangeInclusive<u16> = 10_000..=32_767;
const SERVICE_PORT: u16 = 5302;

/// Two namespaces joined by two links, the receiver's service address on
/// its loopback reached by either, MPTCP on in both, and a sender agent
/// given both links with `--mptcp follow-reader`. Field order is drop
/// order.
struct FollowLab {
    pair: SenderPair,
    /// Link B's address and interface in the sender's namespace.
    b: IpAddr,
    b_iface: String,
    /// The receiver's address on link B.
    far: IpAddr,
    service: SocketAddr,
    _subnets: [Subnet; 2],
}

impl FollowLab {
    fn new() -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let service_net = Subnet::lease().expect("the receiver's service subnet");
        let service = service_net.ipv4(1);
        let (mut b, mut b_iface, mut far_ip) = (None, None, None);
        let pair = SenderPair::new(VethConfig::default(), |hosts, _| {
            let (near, far) = hosts.second_link(&second)?;
            for ns in [&hosts.sender, &hosts.receiver] {
                enable_mptcp_in(ns)?;
                ns.exec("sysctl", ["-qw", "net.ipv4.conf.all.rp_filter=0"])?;
            }
            for iface in [&hosts.receiver_end.ifname, &far.ifname] {
                let setting = format!("net.ipv4.conf.{iface}.rp_filter=0");
                hosts.receiver.exec("sysctl", ["-qw", &setting])?;
            }
            serve_over_both(hosts, &near, &far, service)?;
            let a = hosts.sender_end.clone();
            b = Some(IpAddr::V4(near.ipv4));
            b_iface = Some(near.ifname.clone());
            far_ip = Some(IpAddr::V4(far.ipv4));
            Ok(SenderOpts::new(built_binary("srap-agent"))
                .rss(embedded_default())
                .port_range("10000-32767")
                .args(["--receiver", &service.to_string()])
                .args(["--local-iface", &a.ifname, "--local-iface", &near.ifname])
                .args(["--source-rules", "install", "--mptcp", "follow-reader"]))
        })
        .expect("two namespaces joined by two veth links, a sender agent");
        let mut lab = Self {
            pair,
            b: b.expect("link B's address"),
            b_iface: b_iface.expect("link B's name"),
            far: far_ip.expect("the receiver's address on link B"),
            service: SocketAddr::new(service.into(), SERVICE_PORT),
            _subnets: [second, service_net],
        };
        lab.pair.agent.launch().expect("the agent steers");
        lab
    }

    /// `net.mptcp.pm_type` of the agent's namespace.
    fn pm_type(&self) -> String {
        let out = self
            .pair
            .hosts
            .sender
            .exec("sysctl", ["-n", "net.mptcp.pm_type"])
            .expect("sysctl");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A server on `bound` in the receiver's namespace that has accepted
    /// `n` MPTCP connections the test workload opened in the agent's
    /// cgroup; the workload holds them open.
    fn open_steered(&self, bound: SocketAddr, n: usize) -> (Server, Workload) {
        let mut server = Server::bind_mptcp(&self.pair.hosts.receiver, bound, WAIT);
        let mut workload = Workload::spawn(
            &self.pair.hosts.sender,
            Some(self.pair.agent.cgroup()),
            self.service,
        );
        let opened = workload.ask(&format!("mptcp {n}"));
        assert_eq!(opened.len(), n, "steered MPTCP connections opened");
        server.accept(n);
        (server, workload)
    }

    /// The peers of the receiver's established subflows from link B's
    /// address, as its kernel lists them.
    fn subflows_from_b(&self) -> Vec<SocketAddr> {
        self.receiver_subflows()
            .into_iter()
            .filter(|(_, peer)| peer.ip() == self.b)
            .map(|(_, peer)| peer)
            .collect()
    }

    /// The peers of the receiver's established subflows on its address
    /// `local`.
    fn subflows_on(&self, local: IpAddr) -> Vec<SocketAddr> {
        self.receiver_subflows()
            .into_iter()
            .filter(|(on, _)| on.ip() == local)
            .map(|(_, peer)| peer)
            .collect()
    }

    /// The receiver's established subflows of the service port, (local,
    /// peer), as its kernel lists them.
    fn receiver_subflows(&self) -> Vec<(SocketAddr, SocketAddr)> {
        let filter = format!("( sport = :{SERVICE_PORT} )");
        let out = self
            .pair
            .hosts
            .receiver
            .exec("ss", ["-Htn", "state", "established", &filter])
            .expect("ss in the receiver's namespace");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace().skip(2);
                Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
            })
            .collect()
    }

    /// The sender's sockets from link B's address, in any state, as its
    /// kernel lists them.
    fn sender_sockets_from_b(&self) -> Vec<String> {
        let b = self.b.to_string();
        let out = self
            .pair
            .hosts
            .sender
            .exec("ss", ["-Htna", "src", &b])
            .expect("ss in the sender's namespace");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Link B up or down at the sender.
    fn set_b(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        self.pair
            .hosts
            .sender
            .ip(["link", "set", "dev", &self.b_iface, state])
            .expect("ip link set");
    }

    /// Waits until the receiver holds `n` subflows from link B's address,
    /// as its kernel lists them.
    fn await_subflows_from_b(&self, n: usize) -> Vec<SocketAddr> {
        poll_until(WAIT * 2, Duration::from_millis(50), || {
            let from_b = self.subflows_from_b();
            if from_b.len() >= n {
                ControlFlow::Break(from_b)
            } else {
                ControlFlow::Continue(from_b)
            }
        })
        .unwrap_or_else(|seen| {
            panic!(
                "{n} subflows from link B within {:?}: {seen:?}\n{}",
                WAIT * 2,
                self.pair.agent.log().tail()
            )
        })
    }
}

/// What one pinned phase of reading saw, by the thread itself.
struct Phase {
    cpu: u32,
    node: u32,
    bytes: u64,
    reads: u64,
}

/// Reads `stream` for `span` on a thread pinned to `cpu`; the thread's
/// own `sched_getcpu()` and the NUMA node sysfs gives that CPU.
fn read_on(stream: &mut TcpStream, cpu: usize, span: Duration) -> Phase {
    thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut set = rustix::thread::CpuSet::new();
                set.set(cpu);
                rustix::thread::sched_setaffinity(None, &set).expect("pin the reader");
                let mut buf = vec![0u8; CHUNK];
                let (mut bytes, mut reads) = (0, 0);
                let until = std::time::Instant::now() + span;
                while std::time::Instant::now() < until {
                    let n = stream.read(&mut buf).expect("read the connection");
                    assert!(n > 0, "the server closed early");
                    bytes += n as u64;
                    reads += 1;
                }
                let ran_on = rustix::thread::sched_getcpu() as u32;
                Phase {
                    cpu: ran_on,
                    node: node_of(ran_on),
                    bytes,
                    reads,
                }
            })
            .join()
            .expect("the reading thread")
    })
}

/// The CPUs this process may run on.
fn available_cpus() -> Vec<usize> {
    let set = rustix::thread::sched_getaffinity(None).expect("this process's CPUs");
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|cpu| set.is_set(*cpu))
        .collect()
}

/// The NUMA node of `cpu` by sysfs (`cpuN/nodeM`); 0 on a host without.
fn node_of(cpu: u32) -> u32 {
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Two namespaces joined by two links, MPTCP on in both, the sender's
/// under the userspace path manager. Field order is drop order.
struct PmLab {
    hosts: TwoHosts,
    /// The receiver's address on the first link, the sender's and the
    /// receiver's on the second.
    far1: Ipv4Addr,
    near2: Ipv4Addr,
    far2: Ipv4Addr,
    _subnet: Subnet,
}

impl PmLab {
    fn new() -> Self {
        let hosts = TwoHosts::new(VethConfig::default()).expect("two namespaces");
        let subnet = Subnet::lease().expect("a second subnet");
        let (near, far) = hosts.second_link(&subnet).expect("the second link");
        for ns in [&hosts.sender, &hosts.receiver] {
            enable_mptcp_in(ns).expect("MPTCP on");
            ns.exec("sysctl", ["-qw", "net.ipv4.conf.all.rp_filter=0"])
                .expect("rp_filter off");
        }
        hosts
            .sender
            .run(|| PathManagerKind::Userspace.install())
            .expect("enter the sender's namespace")
            .expect("the userspace path manager");
        let out = hosts
            .sender
            .exec("sysctl", ["-n", "net.mptcp.pm_type"])
            .expect("sysctl");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "pm_type");
        Self {
            far1: hosts.receiver_end.ipv4,
            near2: near.ipv4,
            far2: far.ipv4,
            hosts,
            _subnet: subnet,
        }
    }

    /// The sender's subflows to the server, as its kernel lists them.
    fn subflows(&self) -> Vec<Listed> {
        let filter = format!("( dport = :{PORT} )");
        let out = self
            .hosts
            .sender
            .exec("ss", ["-HtniO", "state", "established", &filter])
            .expect("ss in the sender's namespace");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(Listed::parse)
            .collect()
    }

    /// Waits until the sender's kernel lists `n` subflows.
    fn await_subflows(&self, n: usize) -> Vec<Listed> {
        poll_until(WAIT, Duration::from_millis(50), || {
            let listed = self.subflows();
            if listed.len() >= n {
                ControlFlow::Break(listed)
            } else {
                ControlFlow::Continue(listed)
            }
        })
        .unwrap_or_else(|listed| panic!("{n} subflows within {WAIT:?}: {listed:?}"))
    }

    /// The share of the bytes received in one [`WINDOW`], from
    /// [`SETTLE`] on, that came through the subflow from `via`. A window
    /// that moved nothing has judged nothing and fails.
    fn share_through(&self, via: SocketAddr) -> f64 {
        thread::sleep(SETTLE);
        let before = self.subflows();
        thread::sleep(WINDOW);
        let after = self.subflows();
        let moved = |pick: &dyn Fn(&Listed) -> bool| -> u64 {
            let sum = |list: &[Listed]| {
                list.iter()
                    .filter(|s| pick(s))
                    .map(|s| s.bytes)
                    .sum::<u64>()
            };
            sum(&after).saturating_sub(sum(&before))
        };
        let total = moved(&|_| true);
        let through = moved(&|s| s.local == via);
        assert!(total > 0, "no bytes arrived in the window: {after:?}");
        through as f64 / total as f64
    }
}

/// One subflow as `ss` lists it.
#[derive(Debug)]
struct Listed {
    local: SocketAddr,
    remote: SocketAddr,
    bytes: u64,
}

impl Listed {
    /// `Recv-Q Send-Q LOCAL PEER … bytes_received:N …` (one line, `-O`).
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let local = fields.nth(2)?.parse().ok()?;
        let remote = fields.next()?.parse().ok()?;
        let bytes = fields
            .find_map(|f| f.strip_prefix("bytes_received:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Some(Self {
            local,
            remote,
            bytes,
        })
    }
}

/// Waits for the first event that `wanted` accepts.
fn await_event(events: &PmEvents, wanted: impl Fn(&PmEvent) -> bool) -> PmEvent {
    let mut seen = Vec::new();
    let found = poll_until(WAIT, Duration::ZERO, || {
        match events.next() {
            Ok(batch) => {
                if let Some(hit) = batch.iter().find(|e| wanted(e)) {
                    return ControlFlow::Break(*hit);
                }
                seen.extend(batch);
            }
            Err(srap_host::netlink::NetlinkError::TimedOut(_)) => {}
            Err(err) => panic!("reading the path manager's events: {err}"),
        }
        ControlFlow::Continue(())
    });
    found.unwrap_or_else(|()| panic!("no such event within {WAIT:?}; saw {seen:?}"))
}

/// The server: accepts one MPTCP connection and sends at a steady pace
/// until dropped.
struct Sender {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sender {
    fn start(hosts: &TwoHosts) -> Self {
        let listener = hosts
            .receiver
            .run(|| mptcp_listener(SocketAddr::from(([0, 0, 0, 0], PORT))))
            .expect("enter the receiver's namespace")
            .expect("an MPTCP listener");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let chunk = vec![0x5a; CHUNK];
            while !stopping.load(Ordering::Relaxed) {
                if stream.write_all(&chunk).is_err() {
                    return;
                }
                thread::sleep(PAUSE);
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // The reader's close ends a blocked write.
            let _ = thread.join();
        }
    }
}

/// The client: one MPTCP connection to the server's first address, read
/// and discarded on a thread until dropped.
struct Reader {
    local: SocketAddr,
    stream: TcpStream,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    fn connect(hosts: &TwoHosts, server: Ipv4Addr) -> Self {
        let server = SocketAddr::new(IpAddr::V4(server), PORT);
        let stream = hosts
            .sender
            .run(|| socket_patterns::mptcp(server, WAIT))
            .expect("enter the sender's namespace");
        let local = stream.local_addr().expect("the connection's address");
        let mut reading = stream.try_clone().expect("a second handle");
        let thread = thread::spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            while matches!(reading.read(&mut buf), Ok(n) if n > 0) {}
        });
        Self {
            local,
            stream,
            thread: Some(thread),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
