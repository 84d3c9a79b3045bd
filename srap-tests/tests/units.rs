//! The deploy units (`deploy/systemd/`) under a real systemd: a Debian
//! machine booted with `systemd-nspawn` in the sender's namespace runs
//! `srap-sender.service` as shipped, and a workload unit ordered
//! `After=srap-sender.service` is steered from its first connect. Nothing
//! waits for the agent but systemd: the one `systemctl start` of the
//! workload pulls the sender in (`Requires=`), holds the workload until
//! the sender's `READY=1` (`Type=notify`), and `srap exec` finds the hooks
//! attached.
//!
//! Judged by ground truth SRAP did not compute: the source ports the
//! receiver's listener (in the other namespace, the test's own) accepted,
//! hashed with the RSS model of the description the agent was given —
//! 16 connections on 16 distinct receiver CPUs, in every round.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    ops::ControlFlow,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use srap_common::rss::{RssModel, embedded_default};
use srap_tests::{
    TwoHosts, built_binary,
    harness::{
        Listener, landings,
        nspawn::{Machine, MachineSpec, debian_rootfs, rootfs_cache},
        poll_until,
    },
    privilege::require_program,
    require_privileged, unique_name,
};

/// Bound on every wait here (the agent verifying its programs on a loaded
/// 2-core machine, the workload's connects, a unit settling).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The receiver's service port.
const DPORT: u16 = 5201;
/// Connections the workload opens: one per receiver CPU it should reach.
const FLOWS: usize = 16;
/// Cold starts of the pair, each from stopped and detached.
const ROUNDS: usize = 5;
/// Seconds the workload keeps its connections open.
const HOLD_SECONDS: u32 = 5;
/// The workload unit the test installs.
const WORKLOAD: &str = "srap-workload.service";
/// The shipped sender unit.
const SENDER: &str = "srap-sender.service";
/// `CapabilityBoundingSet=` of the sender unit, as `/proc/PID/status`
/// shows it: CAP_DAC_OVERRIDE (1), CAP_NET_ADMIN (12), CAP_PERFMON (38),
/// CAP_BPF (39).
const SENDER_CAPABILITIES: &str = "000000c000001002";

#[test]
#[ignore = "nspawn: needs root, netns, bpffs, systemd-nspawn and mmdebstrap; run as root by `cargo xtask test`"]
fn a_unit_after_the_sender_is_steered_from_its_first_connect() {
    require_privileged("the deploy units under systemd-nspawn");
    // A booted machine is as heavy as a guest: not beside one.
    let _alone = crate::ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    for (program, package) in [
        ("systemd-nspawn", "systemd-container"),
        ("mmdebstrap", "mmdebstrap"),
    ] {
        require_program(
            program,
            &[],
            &format!("apt-get install {package}, or `cargo xtask setup`"),
        );
    }
    let mut lab = UnitsLab::boot();
    for round in 1..=ROUNDS {
        let seen = lab.round();
        println!("{}", seen.describe(round));
        lab.judge(round, &seen);
        lab.reset();
    }
}

/// The receiver's namespace with the test's listener, and the booted
/// machine in the sender's with the units installed.
///
/// Field order is drop order: the machine (powered off, its pins and
/// cgroups removed), the listener, then the namespaces.
struct UnitsLab {
    machine: Machine,
    listener: Listener,
    hosts: TwoHosts,
    model: RssModel,
    /// The agent's `--pin-dir`, a directory of the host's bpffs.
    pins: PathBuf,
    /// Whether the sender's sandbox has been checked (once is enough).
    sandbox_checked: bool,
}

/// What one round saw.
struct Round {
    /// The source addresses the listener accepted, in accept order.
    peers: Vec<SocketAddr>,
    /// The receiver CPU of each, by the RSS model.
    cpus: Vec<u32>,
    /// From `systemctl start` to the first accepted connection.
    to_first: Duration,
    /// From `systemctl start` to the last.
    to_all: Duration,
}

impl Round {
    fn distinct_cpus(&self) -> usize {
        self.cpus.iter().collect::<BTreeSet<_>>().len()
    }

    fn describe(&self, round: usize) -> String {
        let flows: Vec<String> = self
            .peers
            .iter()
            .zip(&self.cpus)
            .map(|(peer, cpu)| format!("{}→{cpu}", peer.port()))
            .collect();
        format!(
            "round {round}: first connect {} ms, all {FLOWS} by {} ms after `systemctl start`; \
             {} distinct CPUs; port→CPU {}",
            self.to_first.as_millis(),
            self.to_all.as_millis(),
            self.distinct_cpus(),
            flows.join(" ")
        )
    }
}

impl UnitsLab {
    /// Two namespaces joined by a veth, the listener in the receiver's,
    /// the machine booted in the sender's with the units configured.
    fn boot() -> Self {
        let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
        let listener = Listener::bind(&hosts.receiver, hosts.receiver_addr(DPORT, false), TIMEOUT)
            .expect("a listener in the receiver's namespace");
        let started = Instant::now();
        let machine = Machine::boot(&machine_spec(&hosts))
            .unwrap_or_else(|err| panic!("booting the machine: {err:#}"));
        println!(
            "machine {} booted in {} ms (root cache and boot)",
            machine.name(),
            started.elapsed().as_millis()
        );
        let description = embedded_default();
        let mut lab = Self {
            machine,
            listener,
            hosts,
            model: RssModel::from_description(&description).expect("the embedded model"),
            pins: PathBuf::from(format!("/sys/fs/bpf/srap-units-{}", unique_name("p"))),
            sandbox_checked: false,
        };
        lab.machine.own_pins(lab.pins.clone());
        lab.configure(&description.to_json_pretty());
        lab
    }

    /// The agent's files in `/etc/srap` (offline: the description given,
    /// steering toward the receiver's address, its own pins and cgroup)
    /// and the workload unit.
    fn configure(&self, description: &str) {
        let cgroup = format!("srap-units-{}", unique_name("c"));
        let receiver = self.hosts.receiver_end.ipv4;
        let args = format!(
            "--rss /etc/srap/receiver.json --receiver {receiver} --pin-dir {} --cgroup {cgroup}",
            self.pins.display()
        );
        let files = [
            ("/etc/srap/receiver.json", description.to_owned()),
            // Every setting is a flag: the unit's `--config` file is there, empty.
            ("/etc/srap/sender.toml", String::new()),
            (
                "/etc/srap/sender.conf",
                format!("SRAP_SENDER_ARGS={args}\n"),
            ),
            (
                "/etc/systemd/system/srap-workload.service",
                workload_unit(&cgroup, SocketAddr::new(receiver.into(), DPORT)),
            ),
        ];
        for (path, contents) in files {
            self.machine
                .write(path, contents)
                .expect("a file in the machine");
        }
        self.machine
            .systemctl(&["daemon-reload"])
            .expect("systemctl daemon-reload");
    }

    /// One cold start: `systemctl start` of the workload alone, then the
    /// listener's accepts and the units' states.
    fn round(&mut self) -> Round {
        let started = Instant::now();
        self.machine
            .systemctl(&["start", "--no-block", WORKLOAD])
            .expect("systemctl start the workload");
        let first = self.accept(1);
        let to_first = started.elapsed();
        let rest = self.accept(FLOWS - 1);
        let to_all = started.elapsed();
        let peers: Vec<SocketAddr> = first.into_iter().chain(rest).collect();
        let server = self.hosts.receiver_addr(DPORT, false);
        let cpus = landings(&self.model, &peers, server)
            .expect("same-family tuples")
            .iter()
            .map(|landing| landing.cpu)
            .collect();
        Round {
            peers,
            cpus,
            to_first,
            to_all,
        }
    }

    /// `n` more accepted connections, or a panic with the units' journal.
    fn accept(&mut self, n: usize) -> Vec<SocketAddr> {
        self.listener.accept(n).unwrap_or_else(|err| {
            panic!(
                "the workload's connections: {err:#}\n{}",
                self.machine.journal(&[SENDER, WORKLOAD])
            )
        })
    }

    /// The round's verdict: 16 distinct CPUs, the sender active and saying
    /// it steers, the workload done without error, the sender's sandbox as
    /// its unit asks.
    fn judge(&mut self, round: usize, seen: &Round) {
        let journal = || self.machine.journal(&[SENDER, WORKLOAD]);
        assert_eq!(
            seen.distinct_cpus(),
            FLOWS,
            "round {round}: {FLOWS} connections of a unit ordered after the sender on fewer \
             receiver CPUs\n{}",
            journal()
        );
        let status = self.machine.show(SENDER, "StatusText").expect("StatusText");
        assert!(
            status.contains("steering"),
            "round {round}: the sender's status {status:?}"
        );
        let active = self
            .machine
            .show(SENDER, "ActiveState")
            .expect("ActiveState");
        assert_eq!(
            active,
            "active",
            "round {round}: the sender unit\n{}",
            journal()
        );
        self.await_workload_done(round);
        self.check_no_wait_in_exec(round);
        if !self.sandbox_checked {
            self.check_sandbox();
            self.sandbox_checked = true;
        }
    }

    /// Waits (bounded) until the workload unit has run to its end, and
    /// checks it ended well (`srap exec` ran the client: it found the
    /// hooks attached).
    fn await_workload_done(&self, round: usize) {
        let done = poll_until(TIMEOUT, Duration::from_millis(100), || {
            match self.machine.show(WORKLOAD, "ActiveState").as_deref() {
                Ok("inactive" | "failed") => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        });
        assert!(
            done.is_ok(),
            "round {round}: the workload unit still runs after {TIMEOUT:?}"
        );
        let result = self.machine.show(WORKLOAD, "Result").expect("Result");
        assert_eq!(
            result,
            "success",
            "round {round}: the workload unit\n{}",
            self.machine.journal(&[SENDER, WORKLOAD])
        );
    }

    /// `srap exec` found the hooks attached at once: systemd held the
    /// workload until the sender's `READY=1`, so the steering is the
    /// units' ordering, not `srap exec`'s own wait (which says `srap exec:
    /// waiting` on its stderr, the unit's journal, when it has to).
    fn check_no_wait_in_exec(&self, round: usize) {
        let out = self
            .machine
            .run("journalctl", ["--no-pager", "-o", "cat", "-u", WORKLOAD])
            .expect("the workload unit's journal");
        let log = String::from_utf8_lossy(&out.stdout);
        assert!(
            !log.contains("srap exec: waiting"),
            "round {round}: `srap exec` had to wait for the hooks, so systemd started the \
             workload before the sender was steering:\n{log}"
        );
    }

    /// The sender runs inside its unit's sandbox, not beside it: the
    /// bounding set is the unit's, no new privileges, a seccomp filter,
    /// and `/` read-only (`ProtectSystem=strict`) while its pins are
    /// writable (`ReadWritePaths=`).
    fn check_sandbox(&self) {
        let pid = self.machine.show(SENDER, "MainPID").expect("MainPID");
        let status = self.read_inside(&format!("/proc/{pid}/status"));
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(field("CapBnd:"), SENDER_CAPABILITIES, "{status}");
        assert_eq!(field("NoNewPrivs:"), "1", "{status}");
        assert_eq!(field("Seccomp:"), "2", "{status}");
        let mounts = self.read_inside(&format!("/proc/{pid}/mountinfo"));
        let options = |point: &str| {
            mounts
                .lines()
                .map(|line| line.split_whitespace().collect::<Vec<_>>())
                .filter(|fields| fields.get(4) == Some(&point))
                .filter_map(|fields| fields.get(5).map(|o| o.to_string()))
                .next_back()
                .unwrap_or_default()
        };
        assert!(options("/").starts_with("ro"), "/ in\n{mounts}");
        assert!(
            options("/sys/fs/bpf").starts_with("rw"),
            "/sys/fs/bpf in\n{mounts}"
        );
    }

    /// A file of the machine's `/proc` (its PID namespace's).
    fn read_inside(&self, path: &str) -> String {
        let out = self.machine.run("cat", [path]).expect("cat in the machine");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Both units stopped, the binder detached (its pins and cgroup gone)
    /// and the round's connections closed on the receiver's side: the next
    /// round starts cold.
    fn reset(&mut self) {
        self.machine
            .systemctl(&["stop", WORKLOAD, SENDER])
            .expect("systemctl stop");
        let pins = self.pins.display().to_string();
        self.machine
            .run("srap-agent", ["detach", "--pin-dir", &pins])
            .expect("srap-agent detach in the machine");
        for (stream, _) in self.listener.accepted() {
            // Already closed by the workload: nothing left to close.
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The machine: the cached Debian root, in the sender's namespace, with
/// the built agent, `srap` and the test workload, and the shipped units.
fn machine_spec(hosts: &TwoHosts) -> MachineSpec {
    let agent = built_binary("srap-agent");
    let binary_dir = agent.parent().unwrap_or(Path::new("."));
    let rootfs = debian_rootfs(&rootfs_cache(binary_dir))
        .unwrap_or_else(|err| panic!("the machines' Debian root: {err:#}"));
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd");
    MachineSpec {
        rootfs,
        netns: hosts.sender.clone(),
        binaries: vec![
            agent.clone(),
            built_binary("srap"),
            built_binary("srap-test-workload"),
        ],
        units: vec![deploy.join(SENDER), deploy.join("srap-receiver.service")],
    }
}

/// A workload unit as a user writes one for a steered application:
/// ordered after the sender and pulling it in, run through `srap exec`.
/// The client is the test workload told `open 16` on a stdin a shell
/// holds open [`HOLD_SECONDS`] (minbase has no Python), so its 16
/// connections stay up while the receiver accepts them.
fn workload_unit(cgroup: &str, receiver: SocketAddr) -> String {
    format!(
        "[Unit]\n\
         Description=A steered workload: {FLOWS} connections to {receiver}\n\
         After={SENDER}\n\
         Requires={SENDER}\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart=/usr/bin/srap exec --cgroup {cgroup} -- /bin/sh -c \
         '{{ echo open {FLOWS}; sleep {HOLD_SECONDS}; }} | /usr/bin/srap-test-workload {receiver}'\n"
    )
}
