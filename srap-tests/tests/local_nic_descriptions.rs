//! Each of this host's NICs places its own flows with its own RSS
//! description (the reader rule per NIC), on a real kernel: a
//! sender namespace with two veth links to a receiver namespace, each its
//! own subnet, the receiver's service address reached by link A's route
//! (and by B's at a worse metric), the source rules B needs installed by
//! the binder. The two links are given DIFFERENT descriptions (another
//! key, another indirection table, another queue → CPU map), the binder
//! `--steer local` (then `both`) with `--local-placement reader` and
//! `--local-nics balance`, started in this process as the agent starts it
//! (a veth reports no RSS, so the descriptions are handed over as the
//! agent's discovery would).
//!
//! Each link is a 4-queue veth whose packets toward the sender are queued
//! by the RSS-NIC emulator on the receiver's end, hashing as that link's
//! description says: the queue the sender's socket hook records for each
//! flow's SYN-ACK is the emulated device's own.
//!
//! The workload connects eight times pinned to CPU 1, then eight times pinned
//! to CPU 0. Judged by the tuples the server accepted: the flows split over
//! both links (each source address the one of a link), and every flow's
//! returning tuple, hashed with the description of the NIC whose address
//! it left from, lands on a queue served by the CPU its thread connected
//! on; and the queue the emulated device really put its SYN-ACK on (the
//! socket hook's record) is served by that CPU. (A veth's receive CPU is
//! the sending side's, so the socket's `SO_INCOMING_CPU` says nothing here;
//! the QEMU two-node suite judges that on virtio-net.)
//!
//! Everything lives in the test's namespaces, cgroup and pin directory,
//! removed on drop.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use srap_common::{
    binder::{BinderSizes, event},
    port_range::PortRange,
    rss::{End, FlowTuple, RssDescription, RssModel, embedded_default},
};
use srap_daemon::{
    description::Source,
    sender::{
        self, SenderOptions,
        ends::{LocalNicsPolicy, LocalPlacement, SourceRules},
        landings::LocalLandings,
        local::{
            nic::LocalNic,
            nics::{GivenNic, NicSettings},
        },
        local_end,
    },
};
use srap_harness::{
    emulator::Emulator,
    veth::{VethEnd, link},
};
use srap_tests::{
    TwoHosts, VethConfig, cgroup::CgroupDir, flows::Server, require_privileged, subnet::Subnet,
    test_workload::Workload, unique_name,
};

/// The service port.
const DPORT: u16 = 5201;
/// Upper bound on the server's waits.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Connects per pinned CPU.
const PER_CPU: usize = 8;
/// Queues of each veth (and of each description).
const QUEUES: u32 = 4;

/// Link A's NIC: 4 queues over 128 entries, queue q on CPU q % 2.
fn nic_a() -> RssDescription {
    RssDescription {
        indir: (0..128).map(|i| i % 4).collect(),
        queue_cpu: Some(vec![0, 1, 0, 1]),
        ..embedded_default()
    }
}

/// Link B's NIC: another key, 64 entries in another order, and its
/// queues' CPUs the other way round.
fn nic_b() -> RssDescription {
    let a = nic_a();
    RssDescription {
        key: a.key.chars().rev().collect(),
        indir: (0..64).map(|i| (i * 3 + 1) % 4).collect(),
        queue_cpu: Some(vec![1, 0, 1, 0]),
        ..a
    }
}

fn facing_local(description: &RssDescription) -> RssModel {
    RssModel::from_description(description)
        .expect("model")
        .facing(End::Local)
}

/// The binder attached to a cgroup of its own, and the socket hook
/// recording where its flows land; detached on drop (the hook first).
struct Attached {
    landings: LocalLandings,
    cgroup: CgroupDir,
    pin_dir: PathBuf,
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Err(err) = sender::detach(&self.pin_dir) {
            eprintln!("cleanup: detach {}: {err}", self.pin_dir.display());
        }
    }
}

/// Two links, the service address behind both, each link's NIC emulated.
/// Field order is drop order: the emulators before the namespaces.
struct TwoLinks {
    _emulators: [Emulator; 2],
    hosts: TwoHosts,
    a: (String, IpAddr),
    b: (String, IpAddr),
    service: SocketAddr,
    // Dropped last: held until the namespaces are gone.
    _subnets: [Subnet; 2],
}

impl TwoLinks {
    fn new() -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let service_net = Subnet::lease().expect("the service subnet");
        let shape = VethConfig {
            tx_queues: QUEUES,
            rx_queues: QUEUES,
            ..VethConfig::default()
        };
        let hosts = TwoHosts::new(shape).expect("two namespaces joined by a veth");
        let (near, far) = (
            VethEnd::on_subnet(&second, 1, "t"),
            VethEnd::on_subnet(&second, 2, "r"),
        );
        link(&hosts.sender, &near, &hosts.receiver, &far, shape, false)
            .expect("a second veth link");
        let emulate = |iface: &str, description: RssDescription| {
            let model = RssModel::from_description(&description).expect("model");
            hosts
                .receiver
                .run(|| Emulator::attach(iface, &model, QUEUES))
                .expect("receiver netns")
                .expect("the link's NIC emulated on the receiver's egress")
        };
        let emulators = [
            emulate(&hosts.receiver_end.ifname, nic_a()),
            emulate(&far.ifname, nic_b()),
        ];
        let service = service_net.ipv4(1);
        hosts
            .receiver
            .ip(["addr", "add", &format!("{service}/32"), "dev", "lo"])
            .expect("the service address");
        let via_a = hosts.receiver_end.ipv4.to_string();
        let via_b = far.ipv4.to_string();
        let a_name = hosts.sender_end.ifname.clone();
        for (via, dev, metric) in [(&via_a, &a_name, "10"), (&via_b, &near.ifname, "200")] {
            hosts
                .sender
                .ip([
                    "route",
                    "add",
                    &format!("{service}/32"),
                    "via",
                    via,
                    "dev",
                    dev,
                    "metric",
                    metric,
                ])
                .expect("a route to the service address");
        }
        Self {
            _emulators: emulators,
            a: (a_name, hosts.sender_end.ipv4.into()),
            b: (near.ifname.clone(), near.ipv4.into()),
            hosts,
            service: SocketAddr::new(service.into(), DPORT),
            _subnets: [second, service_net],
        }
    }

    /// The binder for `--steer local` (or `both`, toward a receiver
    /// described by the embedded description), `--local-placement reader`,
    /// `--local-nics balance` over both links, each with its own
    /// description, A first; this host's offer and reader rows written as
    /// the agent writes them. Returns it with what each source address was
    /// placed with.
    fn attach(&self, both: bool) -> (Attached, Vec<(IpAddr, Option<String>, bool)>) {
        let cgroup = CgroupDir::unique().expect("cgroup path");
        cgroup.create().expect("create cgroup");
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/srap-test-{}", unique_name("n")));
        let file = Source::File("nic-a.json".into());
        let local = LocalNic::new(file, nic_a(), None).expect("link A's NIC");
        let remote = RssModel::from_description(&embedded_default()).expect("model");
        let (targets, twins) = if both {
            (
                sender::target::Target::all(&remote, &[self.service.ip()]),
                Some(local.model.clone()),
            )
        } else {
            (
                sender::target::Target::all(&local.model, &[self.service.ip()]),
                None,
            )
        };
        let given = [(&self.a.0, nic_a()), (&self.b.0, nic_b())]
            .into_iter()
            .map(|(name, d)| GivenNic {
                name: name.clone(),
                description: Some(Arc::new(d)),
            })
            .collect();
        let options = SenderOptions {
            targets,
            ports: Vec::new(),
            cgroup: Some(cgroup.path().to_path_buf()),
            pin_dir: pin_dir.clone(),
            pacing_rate: None,
            // The whole range: under `both`, in the kernel's half of it a
            // joint pair's members are more often all outside it, and the
            // hook keeps the receiver's placement alone (`local_missed`, a
            // counted fallback of its own, whichever NIC).
            port_range: Some(PortRange::new(1024, 65535).expect("a port range")),
            local: twins,
            local_placement: LocalPlacement::Reader,
            bonds: Default::default(),
            sizes: BinderSizes::DEFAULT,
            nics: NicSettings {
                policy: LocalNicsPolicy::Balance,
                given,
                source_rules: SourceRules::Install,
            },
            receiver_nics: Default::default(),
            mptcp: Default::default(),
            spread: Vec::new(),
        };
        let landings = self
            .hosts
            .sender
            .run(|| LocalLandings::attach(cgroup.path(), Some(&self.a.0)))
            .expect("sender netns")
            .expect("the socket hook on the cgroup");
        let attached = Attached {
            landings,
            cgroup,
            pin_dir,
        };
        let placed = self
            .hosts
            .sender
            .run(|| {
                let mut binder =
                    sender::start(&options, srap_daemon::ebpf_object()).expect("the binder");
                local_end::apply_local_grant(&mut binder, &local).expect("this host's offer");
                assert_eq!(
                    binder.plan.local_fallbacks(),
                    0,
                    "{:?}",
                    binder.plan.local_sources
                );
                binder
                    .plan
                    .local_sources
                    .iter()
                    .map(|c| (c.source, c.described_by.clone(), c.fallback.is_some()))
                    .collect::<Vec<_>>()
            })
            .expect("sender netns");
        (attached, placed)
    }
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn each_nic_places_its_flows_with_its_own_description() {
    require_privileged("two veth links with different RSS descriptions, --local-nics balance");
    let lab = TwoLinks::new();
    let models = [
        (lab.a.1, facing_local(&nic_a())),
        (lab.b.1, facing_local(&nic_b())),
    ];
    for both in [false, true] {
        let (attached, placed) = lab.attach(both);
        for (ip, name) in [(lab.a.1, &lab.a.0), (lab.b.1, &lab.b.0)] {
            assert!(
                placed.contains(&(ip, Some(name.clone()), false)),
                "{ip} placed with {name}'s description: {placed:?}"
            );
        }
        // A port of its own per round: no tuple of the last round's (in
        // TIME_WAIT) is in the way of this one's ports.
        let service = SocketAddr::new(lab.service.ip(), DPORT + u16::from(both));
        let mut listener = Server::bind(&lab.hosts.receiver, service, TIMEOUT);
        let mut workload =
            Workload::spawn(&lab.hosts.sender, Some(attached.cgroup.path()), service);
        let mut by_port = BTreeMap::new();
        for cpu in [1, 0] {
            workload.pin(cpu);
            for port in workload.open(PER_CPU) {
                by_port.insert(port, cpu);
            }
        }
        let clients = listener.accept_peers(2 * PER_CPU);
        let opened = attached.landings.read().expect("the socket hook's records");
        workload.finish();
        let descriptions = [nic_a(), nic_b()];
        let stats = sender::read_stats(&sender::PinLayout::new(&attached.pin_dir))
            .expect("the binder's counters");
        eprintln!("both: {both}: {stats}");
        assert_eq!(stats.get(event::LOCAL_MISSED), 0, "both: {both}: {stats}");
        let mut per_nic = [0usize; 2];
        let mut by_the_other = 0;
        for client in &clients {
            let nic = models
                .iter()
                .position(|(ip, _)| *ip == client.ip().to_canonical())
                .unwrap_or_else(|| panic!("{client} from neither link: {clients:?}"));
            per_nic[nic] += 1;
            let cpu = by_port[&client.port()];
            let tuple = FlowTuple::from_sockets(*client, service).expect("tuple");
            let landed = models[nic].1.landing(&tuple).cpu;
            assert_eq!(
                landed, cpu,
                "both: {both}; {client} (NIC {nic}) connected on CPU {cpu}, its NIC's hash \
                 puts it on {landed}; every flow: {clients:?}"
            );
            by_the_other += usize::from(models[1 - nic].1.landing(&tuple).cpu == cpu);
            // The emulated device's own queue for the SYN-ACK.
            let queue = opened
                .iter()
                .find(|o| {
                    o.src.ip().to_canonical() == client.ip().to_canonical()
                        && o.src.port() == client.port()
                })
                .and_then(|o| o.queue)
                .unwrap_or_else(|| panic!("{client}: no queue recorded: {opened:?}"));
            let served = descriptions[nic].queue_cpu.as_ref().expect("queue → CPU")[queue as usize];
            assert_eq!(
                served, cpu,
                "both: {both}; {client} (NIC {nic}) connected on CPU {cpu}, the device put it on \
                 queue {queue} (CPU {served})"
            );
        }
        assert!(
            per_nic.iter().all(|n| *n >= PER_CPU / 2),
            "both: {both}; balance over both links: {per_nic:?}"
        );
        eprintln!(
            "both: {both}: flows per NIC {per_nic:?}, all {} on their thread's CPU by their own \
             NIC's description; {by_the_other} would be by the other's",
            clients.len()
        );
        drop(attached);
    }
}
