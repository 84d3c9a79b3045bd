//! The lab end to end: two namespaces, the emulated 32-queue NIC, the binder
//! and the observer come up; the experiment puts every SRAP trial's flows on
//! distinct queues (judged by the observer) while kernel-chosen ports are
//! predicted exactly; and everything is gone afterwards.

use std::{ops::ControlFlow, path::Path};

use srap_harness::{Listener, poll_until};
use srap_lab::{
    Direction,
    binder::LabBinder,
    experiment,
    topology::{LabNet, LabNetConfig, Watch},
};
use srap_tests::require_privileged;

/// The lab tests move this process between cgroups (sockets join their
/// creator's cgroup): one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn experiment_is_collision_free_with_srap_and_leaves_nothing_behind() {
    require_privileged("experiment_is_collision_free_with_srap_and_leaves_nothing_behind");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (pin_dir, cgroup) = {
        let net = LabNet::new(32, srap_lab::topology::Watch::Here).expect("lab network");
        let steering = LabBinder::start(&net.hosts.sender, &net.model, net.receiver_ip())
            .expect("binder in the sender namespace");
        let report = experiment::run(&net, steering.cgroup(), 16, 5, 32).expect("experiment");
        assert_eq!(report.srap.trials, 5);
        assert_eq!(report.srap.collision_free_rate, 1.0, "{report:?}");
        assert_eq!(report.srap.mean_busiest, 1.0, "{report:?}");
        // The emulated NIC follows the model for every flow, steered or not.
        assert_eq!(report.srap.prediction_accuracy, 1.0, "{report:?}");
        assert_eq!(report.kernel.prediction_accuracy, 1.0, "{report:?}");
        assert!(report.kernel.mean_busiest >= 1.0);
        assert!((report.analytic_collision_free - 0.0104).abs() < 1e-3);
        (
            steering.pin_dir().to_path_buf(),
            steering.cgroup().to_path_buf(),
        )
    };
    assert!(!pin_dir.exists(), "{} left behind", pin_dir.display());
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    assert!(Path::new("/proc/self/cgroup").exists());
    let own = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroup");
    assert!(
        !own.contains("srap-lab"),
        "the test process stayed in the lab cgroup: {own}"
    );
}

/// Both agents as a user runs them (receiver with the lab NIC's description,
/// sender with `--peer`): steered flows show up in `srap status --once
/// --json` on the queue the model predicts and on the CPU the sender planned.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn status_shows_steered_flows_on_their_planned_cpus() {
    use srap_lab::{agents::LabAgents, topology::Watch};

    require_privileged("status_shows_steered_flows_on_their_planned_cpus");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = LabNet::new(16, Watch::Agent).expect("lab network");
    let agents = LabAgents::start(&net, &srap_tests::built_binary("srap-agent"), STATUS_PORT)
        .expect("both agents");
    assert_steered_flows_land_as_planned(&net, &agents);
}

/// Least privilege: both agents bounded to exactly the capabilities their
/// systemd units allow (read from `deploy/systemd/`, applied with `setpriv
/// --bounding-set` as `CapabilityBoundingSet` does) hold exactly those, and
/// SRAP's whole path works: the receiver serves and verifies, the sender
/// steers, every flow lands on its predicted queue and planned CPU (judged
/// by the receiver agent's own observer against the emulated NIC).
/// `tests/least_privilege.rs` takes each capability away in turn.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn agents_with_only_their_units_capabilities_steer_and_verify() {
    use srap_lab::{
        agents::{LabAgents, Privileges},
        topology::Watch,
    };
    use srap_tests::caps::{RECEIVER_UNIT, SENDER_UNIT, bounding_set, held};

    require_privileged("agents_with_only_their_units_capabilities_steer_and_verify");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let privileges = Privileges {
        receiver: Some(bounding_set(RECEIVER_UNIT)),
        sender: Some(bounding_set(SENDER_UNIT)),
    };
    let net = LabNet::new(16, Watch::Agent).expect("lab network");
    let agents = LabAgents::start_with(
        &net,
        &srap_tests::built_binary("srap-agent"),
        STATUS_PORT,
        &privileges,
    )
    .expect("both agents, bounded to their units' capabilities");
    for (agent, pid, want) in [
        ("receiver", agents.receiver.pid(), &privileges.receiver),
        ("sender", agents.sender.pid(), &privileges.sender),
    ] {
        let pid = pid.unwrap_or_else(|| panic!("no {agent} agent"));
        let (effective, bounding) = held(pid).expect("the agent's capabilities");
        let want: std::collections::BTreeSet<String> = want.iter().flatten().cloned().collect();
        assert_eq!(
            effective, want,
            "the {agent} agent's effective capabilities"
        );
        assert_eq!(bounding, want, "the {agent} agent's bounding set");
    }
    let status = assert_steered_flows_land_as_planned(&net, &agents);
    assert!(
        status.observer.hook.is_some(),
        "the receiver's observer runs: {:?}",
        status.observer
    );
}

/// The port the status tests' flows go to.
const STATUS_PORT: u16 = 5311;

/// Opens steered flows through `agents`' cgroup, keeps them busy across a
/// few of the receiver agent's samples, and checks its status: every flow
/// on the model's queue, on the CPU the sender planned, each on its own.
fn assert_steered_flows_land_as_planned(
    net: &LabNet,
    agents: &srap_lab::agents::LabAgents,
) -> srap_status::Status {
    use std::{
        io::{Read as _, Write as _},
        net::SocketAddr,
        time::{Duration, Instant},
    };

    use srap_status::{ReceiveCpu, Status};

    const FLOWS: usize = 8;
    let server = SocketAddr::new(net.receiver_ip(), STATUS_PORT);
    let (mut clients, mut listener) = open_steered(net, agents, server, FLOWS);
    // Keep every flow active across a few of the agent's 1 s samples, and
    // on until its status has been read with all of them in it and each
    // one's plan (the receiver lists a flow only while packets come: one
    // read after the flows went quiet would judge none).
    let settled = Instant::now() + Duration::from_millis(2500);
    let deadline = Instant::now() + Duration::from_secs(30);
    let chunk = [0x5au8; 16 * 1024];
    let mut sink = [0u8; 64 * 1024];
    for (stream, _) in listener.accepted() {
        stream.set_nonblocking(true).expect("nonblocking");
    }
    let read_status = || {
        let out = std::process::Command::new(srap_tests::built_binary("srap"))
            .args(["status", "--once", "--json", "--control"])
            .arg(agents.receiver.control())
            .output()
            .expect("run srap status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Status>(&out.stdout).expect("status JSON")
    };
    let status = loop {
        for client in &mut clients {
            client.write_all(&chunk).expect("send");
        }
        for (stream, _) in listener.accepted() {
            while stream.read(&mut sink).is_ok_and(|n| n > 0) {}
        }
        if Instant::now() < settled {
            continue;
        }
        let status = read_status();
        let shown = status
            .flows
            .iter()
            .filter(|f| f.dst.port() == STATUS_PORT && f.planned_cpu.is_some())
            .count();
        if shown >= FLOWS || Instant::now() >= deadline {
            break status;
        }
    };
    // A veth has no RSS of its own: the receive CPUs are the description's.
    assert_eq!(status.receive_cpu, ReceiveCpu::Emulated);
    let flows: Vec<_> = status
        .flows
        .iter()
        .filter(|f| f.dst.port() == STATUS_PORT)
        .collect();
    assert_eq!(flows.len(), FLOWS, "{status:#?}");
    let mut queues = std::collections::BTreeSet::new();
    for flow in &flows {
        assert!(flow.queue.is_some(), "{flow:?}");
        assert_eq!(flow.queue, flow.predicted_queue, "{flow:?}");
        assert!(
            flow.planned_cpu.is_some(),
            "the sender reported no plan for {flow:?}"
        );
        assert_eq!(flow.planned_cpu, flow.rss_cpu, "{flow:?}");
        queues.insert(flow.queue);
    }
    assert!(
        status.accuracy.plan.total >= FLOWS
            && status.accuracy.plan.matched == status.accuracy.plan.total,
        "{:?}",
        status.accuracy
    );
    assert_eq!(
        queues.len(),
        FLOWS,
        "steered flows share queues: {flows:#?}"
    );
    drop((clients, listener));
    status
}

/// The closed loop on the lab: the receiver agent serves a description whose
/// key the (emulated) device does not use. Judged by where flows land, the
/// receiver marks it contradicted and tells the sender, which stops steering
/// (new connections get kernel ports); with the true description back, the
/// receiver agrees again and the sender steers again.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn closed_loop_catches_a_lying_description_and_recovers() {
    use std::time::Duration;

    use srap_common::{rss::KeySource, wire::LandingVerdict};
    use srap_lab::{agents::LabAgents, topology::Watch};
    use srap_status::Status;

    require_privileged("closed_loop_catches_a_lying_description_and_recovers");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const PORT: u16 = 5312;
    let net = LabNet::new(16, Watch::Agent).expect("lab network");
    let agents =
        LabAgents::start(&net, &srap_tests::built_binary("srap-agent"), PORT).expect("both agents");
    let truth = net.model.to_description();
    let verdict_after = |burst_ports: &mut Vec<u16>, want: LandingVerdict| -> Status {
        poll_until(Duration::from_secs(30), Duration::ZERO, || {
            burst_ports.extend(burst(&net, &agents, PORT, 6));
            let status = agents.receiver.status().expect("status");
            if status.landings.verdict == want {
                ControlFlow::Break(status)
            } else {
                ControlFlow::Continue(status)
            }
        })
        .unwrap_or_else(|status| {
            panic!(
                "no {want:?} verdict: {:?}; sender log:\n{}",
                status.landings,
                agents.sender.log().text()
            )
        })
    };
    let mut ports = Vec::new();
    verdict_after(&mut ports, LandingVerdict::Agreed);
    assert!(ports.iter().all(|p| *p < 32768), "steered ports: {ports:?}");

    // The description now claims a key the device does not use.
    let mut lie = truth.clone();
    lie.key = truth.key.split(':').rev().collect::<Vec<_>>().join(":");
    assert_ne!(lie.key, truth.key);
    agents.receiver.set_rss(&lie).expect("write the lie");
    let status = verdict_after(&mut Vec::new(), LandingVerdict::Contradicted);
    assert!(status.rss_version >= 2, "{status:?}");
    wait_for_log(&agents, "steering paused");
    // Paused: new connections keep the kernel's ephemeral ports. The pause
    // can be short: the probes and the steered flows' landings (their
    // rotations start at random turns, so they vary many port bits) can
    // teach the receiver the key within a second or two, and the sender
    // then steers with it; a burst that began after that may be steered.
    let kernel = burst(&net, &agents, PORT, 4);
    let learned_meanwhile = agents
        .sender
        .log()
        .text()
        .contains("planning with a key it learned from landings");
    assert!(
        learned_meanwhile || kernel.iter().all(|p| *p >= 32768),
        "paused, yet SRAP's ports: {kernel:?}"
    );

    // The sender's probes teach the receiver the emulated device's key:
    // it serves it as learned, with its model and confidence, the sender
    // says it plans with it, and the flows it steers then land on distinct
    // queues by the emulator's own key.
    let learned = learned_and_agreed(&net, &agents, PORT);
    assert!(learned.learning.revision >= 1, "{:?}", learned.learning);
    let c = learned.learning.confidence;
    assert!(c.complete() && c.rank >= c.known, "{c:?}");
    assert!(c.tested >= 20 && c.agreeing == c.tested, "{c:?}");
    wait_for_log(&agents, "planning with a key it learned from landings");
    let told = agents.sender.status().expect("sender status").receivers[0]
        .key
        .expect("the key's provenance");
    assert_eq!(told.source, KeySource::Learned, "{told:?}");
    assert_eq!(told.revision, learned.learning.revision, "{told:?}");
    assert!(told.confidence.complete(), "{told:?}");

    // The truth again: agreement, and steering again; the learned key is
    // withdrawn (a new candidate: learning starts over).
    agents.receiver.set_rss(&truth).expect("write the truth");
    let mut ports = Vec::new();
    verdict_after(&mut ports, LandingVerdict::Agreed);
    let withdrawn = poll_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let now = agents.receiver.status().expect("status").learning;
        if now.source == KeySource::Reported && now.revision > learned.learning.revision {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(now)
        }
    });
    if let Err(now) = withdrawn {
        panic!("not withdrawn: {now:?}");
    }
    let steered = burst(&net, &agents, PORT, 4);
    assert!(
        steered.iter().all(|p| *p < 32768),
        "steered again: {steered:?}"
    );
}

/// A NAT between sender and receiver (SNAT to a second sender address in
/// the sender namespace) leaves the receiver's view consistent — the NIC
/// hashes the rewritten tuple — but every port the sender planned lands by a
/// tuple it never computed. The receiver sees the agent's connection arrive
/// from another address than its plan's source, tells the sender its plan
/// is contradicted (its tuples are rewritten), and the sender stops
/// steering: new connections get kernel ports.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_nat_rewriting_the_tuple_stops_steering() {
    use srap_lab::{agents::LabAgents, topology::Watch};

    require_privileged("a_nat_rewriting_the_tuple_stops_steering");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const PORT: u16 = 5313;
    let net = LabNet::new(16, Watch::Agent).expect("lab network");
    let sender = &net.hosts.sender;
    let nat_ip = "10.199.250.3";
    sender
        .ip([
            "addr",
            "add",
            &format!("{nat_ip}/24"),
            "dev",
            &net.hosts.sender_end.ifname,
        ])
        .expect("a second sender address");
    let receiver = net.receiver_ip().to_string();
    for rule in [
        "add table ip srap_lab_nat".to_owned(),
        "add chain ip srap_lab_nat post { type nat hook postrouting priority 100 ; }".to_owned(),
        format!("add rule ip srap_lab_nat post ip daddr {receiver} snat to {nat_ip}"),
    ] {
        sender
            .exec("nft", rule.split_whitespace())
            .expect("nft (`cargo xtask setup` installs nftables)");
    }
    let agents =
        LabAgents::start(&net, &srap_tests::built_binary("srap-agent"), PORT).expect("both agents");
    wait_for_log(&agents, "steering paused: a NAT or proxy rewrites");
    let server = std::net::SocketAddr::new(net.receiver_ip(), PORT);
    let (_clients, mut listener) = open_steered(&net, &agents, server, 4);
    for (_, peer) in listener.accepted() {
        assert_eq!(peer.ip().to_string(), nat_ip, "the NAT rewrote the source");
        assert!(peer.port() >= 32768, "a kernel port while paused: {peer}");
    }
}

/// Waits (bounded, bursts of kernel-port flows meanwhile) until the
/// receiver serves a key learned from landings and its landings agree with
/// it; then checks that 4 steered flows land on 4 distinct queues by the
/// emulated device's own key. Returns the receiver's status then.
fn learned_and_agreed(
    net: &LabNet,
    agents: &srap_lab::agents::LabAgents,
    port: u16,
) -> srap_status::Status {
    use std::{collections::BTreeSet, time::Duration};

    use srap_common::{
        rss::{FlowTuple, KeySource},
        wire::LandingVerdict,
    };

    let status = poll_until(Duration::from_secs(60), Duration::ZERO, || {
        let status = agents.receiver.status().expect("status");
        if status.learning.source == KeySource::Learned
            && status.landings.verdict == LandingVerdict::Agreed
        {
            return ControlFlow::Break(status);
        }
        burst(net, agents, port, 4);
        ControlFlow::Continue(status)
    })
    .unwrap_or_else(|status| {
        panic!(
            "no learned key agreed with: {:?} {:?}; sender log:\n{}",
            status.learning,
            status.landings,
            agents.sender.log().text()
        )
    });
    let steered = burst(net, agents, port, 4);
    let sender = net.hosts.sender_end.ip(false);
    let queues: BTreeSet<u32> = steered
        .iter()
        .map(|&sport| {
            let tuple = FlowTuple::new(sender, sport, net.receiver_ip(), port).expect("tuple");
            net.model.landing(&tuple).queue
        })
        .collect();
    assert!(
        steered.iter().all(|p| *p < 32768) && queues.len() == steered.len(),
        "steered ports {steered:?} on device queues {queues:?}"
    );
    status
}

/// Waits (bounded) until the sender agent's output contains `text`.
fn wait_for_log(agents: &srap_lab::agents::LabAgents, text: &str) {
    agents
        .sender
        .wait_for_log(&format!("`{text}`"), |l| l.contains(text))
        .expect("the sender's log line");
}

/// `flows` connections from the steered cgroup to `port` on the receiver,
/// each carrying data for a little over one of the agent's 1 s samples;
/// returns the source ports the receiver accepted.
fn burst(net: &LabNet, agents: &srap_lab::agents::LabAgents, port: u16, flows: usize) -> Vec<u16> {
    use std::{
        io::{Read as _, Write as _},
        net::SocketAddr,
        time::{Duration, Instant},
    };

    let server = SocketAddr::new(net.receiver_ip(), port);
    let (mut clients, mut listener) = open_steered(net, agents, server, flows);
    for (stream, _) in listener.accepted() {
        stream.set_nonblocking(true).expect("nonblocking");
    }
    let until = Instant::now() + Duration::from_millis(1500);
    let chunk = [0x5au8; 16 * 1024];
    let mut sink = [0u8; 64 * 1024];
    while Instant::now() < until {
        for client in &mut clients {
            client.write_all(&chunk).expect("send");
        }
        for (stream, _) in listener.accepted() {
            while stream.read(&mut sink).is_ok_and(|n| n > 0) {}
        }
    }
    listener
        .accepted()
        .iter()
        .map(|(_, peer)| peer.port())
        .collect()
}

/// `flows` connections from the steered cgroup to `server` in the receiver
/// namespace: the clients, and the listener holding the accepted streams.
fn open_steered(
    net: &LabNet,
    agents: &srap_lab::agents::LabAgents,
    server: std::net::SocketAddr,
    flows: usize,
) -> (Vec<std::net::TcpStream>, Listener) {
    use std::{net::TcpStream, time::Duration};

    use srap_harness::InCgroup;

    let mut listener =
        Listener::bind(&net.hosts.receiver, server, Duration::from_secs(5)).expect("listen");
    let clients = {
        let _steered = InCgroup::enter(agents.sender.cgroup()).expect("join the steered cgroup");
        net.hosts
            .sender
            .run(|| {
                (0..flows)
                    .map(|_| {
                        TcpStream::connect_timeout(&server, Duration::from_secs(5))
                            .expect("connect")
                    })
                    .collect::<Vec<_>>()
            })
            .expect("sender ns")
    };
    listener.accept(flows).expect("accept");
    (clients, listener)
}

/// `--direction pull`: the sender's own NIC emulated on the receiver's
/// veth, the binder planning for it; every SRAP trial is collision-free at
/// the sender's NIC, by the observer there, and the emulated NIC follows
/// the sender's description for kernel ports too.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_pull_experiment_is_collision_free_at_the_senders_own_nic() {
    require_privileged("a_pull_experiment_is_collision_free_at_the_senders_own_nic");
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let net = LabNet::with_config(LabNetConfig {
        direction: Direction::Pull,
        subnet: None,
        ..LabNetConfig::new(32, Watch::Here)
    })
    .expect("lab network with the sender's NIC");
    let steering = LabBinder::for_direction(&net).expect("binder for the sender's NIC");
    let report = experiment::run(&net, steering.cgroup(), 16, 5, 32).expect("experiment");
    assert!(report.sender.is_none(), "pull judges one end");
    assert_eq!(report.srap.collision_free_rate, 1.0, "{report:?}");
    assert_eq!(report.srap.prediction_accuracy, 1.0, "{report:?}");
    assert_eq!(report.kernel.prediction_accuracy, 1.0, "{report:?}");
}

/// Issue 36's lab: pinned threads (16, round-robin over this machine's
/// CPUs, connecting off round-robin order) under the sender agent's
/// `--local-placement reader`. Each thread's own `SO_INCOMING_CPU` after
/// its transfer must be its CPU: for a download the CPU that processed its
/// data; for an upload (`both`) the one that processed its ACKs, while the
/// receiver still gets every flow on a queue (CPU) of its own.
fn readers_land_on_their_threads_cpus(direction: Direction) {
    use srap_lab::{
        topology::rps_cores,
        veth_readers::{Binaries, Mode, VethReadersLab},
    };

    let cores = rps_cores() as usize;
    // With one CPU every flow lands on its thread's: the test would prove
    // nothing, so it fails rather than pass.
    assert!(
        cores >= 2,
        "reader placement needs 2 CPUs to tell, not {cores}"
    );
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let agent = srap_tests::built_binary("srap-agent");
    let binaries = Binaries::in_dir(agent.parent().expect("the binaries' directory"))
        .expect("srap-agent, srap and srap-readers built (`cargo build --bins`)");
    let threads = cores * (16 / cores).max(1);
    let cgroup = {
        let lab = VethReadersLab::start(
            LabNetConfig {
                direction,
                subnet: None,
                ..LabNetConfig::new(32, Watch::Agent)
            },
            binaries,
        )
        .expect("the lab with the sender agent's reader placement");
        let run = lab
            .run(Mode::SrapReader, threads, 2)
            .expect("the pinned threads under srap exec");
        let flows = format!("{run:#?}");
        assert_eq!(run.flows.len(), threads, "{flows}");
        for flow in &run.flows {
            assert_eq!(flow.report.ran_on, flow.report.cpu, "pinned: {flows}");
            assert!(flow.report.bytes > 0, "{flows}");
        }
        assert_eq!(run.on_reader_by_queue(), threads, "planned: {flows}");
        assert_eq!(run.on_reader_by_incoming_cpu(), threads, "landed: {flows}");
        if direction == Direction::Both {
            assert_eq!(run.receiver_cpus(), threads, "receiver CPUs: {flows}");
        }
        lab.agents.sender.cgroup().to_path_buf()
    };
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn reader_placement_puts_each_downloads_data_on_its_threads_cpu() {
    require_privileged("reader_placement_puts_each_downloads_data_on_its_threads_cpu");
    readers_land_on_their_threads_cpus(Direction::Pull);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn reader_placement_puts_each_uploads_acks_on_its_threads_cpu_and_data_on_distinct_receiver_cpus() {
    require_privileged(
        "reader_placement_puts_each_uploads_acks_on_its_threads_cpu_and_data_on_distinct_receiver_cpus",
    );
    readers_land_on_their_threads_cpus(Direction::Both);
}
