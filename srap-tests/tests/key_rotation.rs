//! Rotating the pre-shared key with flows running, as docs/deploying.md
//! says to: the new key reaches both hosts as a second file; the receiver
//! restarts accepting both; the sender's key file takes the new key (it
//! reads it at its next connection); the receiver's first file takes it
//! too and `SIGHUP` (`systemctl reload`) drops the old key, which closes
//! the session made with it, and the sender comes back with the new one.
//! A workload under `srap exec` opens flows between every step and keeps
//! them open: all 16, on the receiver's 16 CPUs, land one per CPU, judged
//! from the tuples the receiver accepted: steering never stopped. Subnet
//! 71.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use srap_common::{
    rss::{RssDescription, RssModel, embedded_default},
    wire::Psk,
};
use srap_harness::keyfile::KeyFile;
use srap_tests::{
    TwoHosts, built_binary,
    flows::Server,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts, landings},
    require_privileged,
    test_workload::Workload,
    unique_name,
};

const QUEUES: u32 = 16;
const DPORT: u16 = 5201;
const PEER_PORT: u16 = 7447;
const TIMEOUT: Duration = Duration::from_secs(20);

/// A 16-queue NIC, one CPU per queue.
fn description() -> RssDescription {
    RssDescription {
        indir: (0..128).map(|i| i % QUEUES).collect(),
        queue_cpu: Some((0..QUEUES).collect()),
        ..embedded_default()
    }
}

fn id_of(key: &KeyFile) -> String {
    let text = key.key().expect("the key file");
    Psk::from_file_contents(text.as_bytes())
        .expect("a key")
        .id()
        .to_string()
}

/// The receiver agent on the receiver's end, with these key files.
fn receiver(hosts: &TwoHosts, keys: &[&Path]) -> ReceiverAgent {
    let listen = SocketAddr::new(hosts.receiver_end.ip(false), PEER_PORT);
    let mut opts = ReceiverOpts::new(
        built_binary("srap-agent"),
        &hosts.receiver_end.ifname,
        listen,
    )
    .rss(description())
    .no_verify();
    for key in keys {
        opts = opts.arg("--psk-file").arg(key);
    }
    ReceiverAgent::start(&hosts.receiver, opts).expect("the receiver agent")
}

/// The flows opened so far and the CPUs they landed on.
struct Flows {
    workload: Workload,
    server: Server,
    model: RssModel,
    dst: SocketAddr,
    cpus: Vec<u32>,
}

impl Flows {
    /// `n` more flows under `srap exec`, kept open.
    fn open(&mut self, n: usize) {
        self.workload.open(n);
        let clients = self.server.accept_peers(n);
        let landed = landings(&self.model, &clients, self.dst).expect("v4 tuples");
        self.cpus.extend(landed.iter().map(|l| l.cpu));
    }
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn rotating_the_key_with_flows_running_loses_no_steering() {
    require_privileged("key rotation with flows running");
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let dir = std::env::temp_dir();
    let name = unique_name("kr");
    let key_file = |what: &str| PathBuf::from(&dir).join(format!("srap-test-{name}-{what}"));
    // The receiver's key, the sender's copy of it, and the new key.
    let receiver_key = KeyFile::create(key_file("psk")).expect("a key");
    let sender_key = KeyFile::create(key_file("sender.psk")).expect("a key");
    sender_key
        .write(&receiver_key.key().expect("the key"))
        .expect("the sender's copy");
    let (old, new_key) = (id_of(&receiver_key), KeyFile::create(key_file("psk.new")));
    let new_key = new_key.expect("the new key");
    let new = id_of(&new_key);

    let mut receiving = receiver(&hosts, &[receiver_key.path()]);
    let sender = SenderAgent::start(
        &hosts.sender,
        SenderOpts::new(built_binary("srap-agent"))
            .peer(receiving.peer())
            .arg("--psk-file")
            .arg(sender_key.path())
            .report_port(DPORT),
    )
    .expect("the sender agent steers");
    let dst = hosts.receiver_addr(DPORT, false);
    let mut flows = Flows {
        workload: Workload::spawn(&hosts.sender, Some(sender.cgroup()), dst),
        server: Server::bind(&hosts.receiver, dst, TIMEOUT),
        model: RssModel::from_description(&description()).expect("model"),
        dst,
        cpus: Vec::new(),
    };
    flows.open(4);

    // 1. The receiver restarts accepting both keys; the sender comes back
    //    with the old one.
    receiving.stop();
    let receiving = receiver(&hosts, &[receiver_key.path(), new_key.path()]);
    let authenticated = |id: &str| {
        let needle = format!("(authenticated, key {id})");
        move |l: &str| l.contains(&needle)
    };
    receiving
        .wait_for_log("the sender, on the old key", authenticated(&old))
        .expect("the sender reconnects");
    flows.open(4);

    // 2. The sender's key file takes the new key: used from its next
    //    connection, its session goes on.
    sender_key
        .write(&new_key.key().expect("the new key"))
        .expect("the sender's new key");
    flows.open(4);

    // 3. The receiver's first file takes the new key; SIGHUP drops the old
    //    one, and the sender comes back with the new.
    receiver_key
        .write(&new_key.key().expect("the new key"))
        .expect("the receiver's key");
    hang_up(receiving.pid().expect("the receiver runs"));
    receiving
        .wait_for_log("the old key withdrawn", |l| {
            l.contains(&format!("(id {old}) is no longer accepted"))
        })
        .expect("the old key's session is closed");
    receiving
        .wait_for_log("the sender, on the new key", authenticated(&new))
        .expect("the sender reconnects with the new key");
    let rotated = std::time::SystemTime::now();
    flows.open(4);

    let distinct: BTreeSet<u32> = flows.cpus.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        flows.cpus.len(),
        "16 flows opened across the rotation, one per CPU: {:?}",
        flows.cpus
    );
    let stats = sender.stats().expect("the binder's counters");
    assert_eq!(
        stats.get(srap_common::binder::outcome::STEERED)
            + stats.get(srap_common::binder::outcome::RETRIED),
        16,
        "every flow steered"
    );
    let status = receiving
        .status_after(rotated)
        .expect("the receiver's status");
    assert_eq!(
        status.access.keys,
        std::slice::from_ref(&new),
        "{:?}",
        status.access
    );
    assert_eq!(
        status
            .peers
            .iter()
            .map(|p| p.key.clone())
            .collect::<Vec<_>>(),
        [Some(new)],
        "the sender is on the new key"
    );
    drop(flows);
    drop(sender);
    drop(receiving);
    let _ = (receiver_key, sender_key, new_key);
}

/// SIGHUP to the receiver agent (our own child): `systemctl reload`.
fn hang_up(pid: u32) {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: kill(2) on the PID of an agent this test started and still
    // holds (not reaped), with a signal it handles.
    let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(rc, 0, "SIGHUP to the receiver agent");
}
