//! The Ansible collection (`deploy/ansible`) on booted machines: three
//! Debian machines under `systemd-nspawn` (one receiver, two senders), each
//! in a namespace of its own on a bridge in a hub namespace, reached over
//! SSH by `ansible-playbook` run in the hub from the project's virtual
//! environment. The receiver's link has 32 queues and the lab's RSS
//! emulator on the bridge's end, so the receiver's NIC puts every packet
//! on the queue the description it serves names.
//!
//! One site's life, in order: the site playbook deploys the package the
//! project built; both senders run a workload under `srap exec`, judged by
//! the tuples the receiver's listener (the test's, in the receiver's
//! namespace) accepted, hashed with the model: 16 flows on 16 distinct
//! CPUs, each sender's flows on its own grant, the grants disjoint; the
//! playbook again changes nothing (`changed=0` in its recap); a rolling
//! upgrade (`srap_serial=1`) to a rebuilt package keeps every open flow;
//! the removal playbook leaves nothing of SRAP on any machine (package,
//! units, settings, state, pins, cgroups, source rules).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    net::{IpAddr, SocketAddr},
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use srap_common::rss::{RssDescription, RssModel, embedded_default};
use srap_tests::{
    built_binary,
    harness::{
        Bridge, Listener, TempDir,
        emulator::Emulator,
        in_netns, landings,
        nspawn::{Machine, MachineSpec, ansible_rootfs, rootfs_cache},
        poll_until,
        programs::ChildGuard,
    },
    privilege::require_program,
    require_privileged,
    test_workload::Workload,
    tools::{ansible_collection, install_ansible_collection, tools_dir},
    unique_name,
};

/// Bound on every wait for the machines and the flows.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one playbook run (a first deploy on a loaded 2-core machine
/// takes about a minute).
const PLAYBOOK_TIMEOUT: Duration = Duration::from_secs(600);
/// The receiver NIC's queues (one per receiver CPU the description names).
const QUEUES: u32 = 32;
/// Flows each sender's workload opens.
const FLOWS_PER_SENDER: usize = 8;
/// The workload's server port, on the receiver.
const DPORT: u16 = 5201;
/// The inventory's host names: the receiver, then the senders.
const RECEIVER: &str = "rx-1";
const SENDERS: [&str; 2] = ["tx-1", "tx-2"];
/// The version the rebuilt package says it is.
const UPGRADE_VERSION: &str = "0.1.0+fleet1";
/// The emulated NIC's description, in the controller's directory (the
/// role copies it to the receiver).
const NIC_DESCRIPTION: &str = "emulated-nic.json";
/// The workload's cgroup on each sender (the role's `srap_sender_cgroup`).
const CGROUP: &str = "srap";

#[test]
#[ignore = "nspawn: needs root, netns, bpffs, systemd-nspawn, mmdebstrap, ssh, ansible-core (target/tools/venv) and the .deb of `cargo xtask package`; run as root by `cargo xtask test`"]
fn the_site_playbook_deploys_steers_re_runs_unchanged_upgrades_with_flows_open_and_removes_all() {
    require_privileged("the Ansible collection on booted machines");
    let _alone = crate::ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let tools = Tools::require();
    let started = Instant::now();
    let mut site = Site::boot(&tools);
    println!("the machines booted in {} s", started.elapsed().as_secs());

    let step = Instant::now();
    let recap = site.play("playbooks/site.yml", &[]);
    println!("deploy in {} s: {recap:?}", step.elapsed().as_secs());
    recap.assert_succeeded("the first run of the site playbook");
    site.judge_transfer();

    let step = Instant::now();
    let recap = site.play("playbooks/site.yml", &[]);
    println!("re-run in {} s: {recap:?}", step.elapsed().as_secs());
    recap.assert_succeeded("the second run of the site playbook");
    recap.assert_unchanged("the second run of the site playbook");

    let before = site.agent_pids();
    let rebuilt = site.rebuilt_package();
    let step = Instant::now();
    let package = format!("srap_package_file={}", rebuilt.display());
    let recap = site.play("playbooks/site.yml", &[&package, "srap_serial=1"]);
    println!("upgrade in {} s: {recap:?}", step.elapsed().as_secs());
    recap.assert_succeeded("the upgrade");
    site.judge_upgrade(&before);

    site.judge_deployed();
    site.finish_workloads();
    let step = Instant::now();
    let recap = site.play("playbooks/remove.yml", &[]);
    println!("removal in {} s: {recap:?}", step.elapsed().as_secs());
    recap.assert_succeeded("the removal playbook");
    site.judge_removed();
    println!("the site's life took {} s", started.elapsed().as_secs());
}

/// What the test runs on this host, each checked before anything boots.
struct Tools {
    playbook: PathBuf,
    /// The .deb `cargo xtask package` built (any profile).
    package: PathBuf,
}

impl Tools {
    fn require() -> Self {
        for (program, package) in [
            ("systemd-nspawn", "systemd-container"),
            ("mmdebstrap", "mmdebstrap"),
            ("ssh", "openssh-client"),
            ("ssh-keygen", "openssh-client"),
            ("dpkg-deb", "dpkg"),
        ] {
            require_program(
                program,
                &[],
                &format!("apt-get install {package}, or `cargo xtask setup`"),
            );
        }
        let venv = tools_dir().join("venv/bin");
        let playbook = require_program("ansible-playbook", &[&venv], "`cargo xtask setup`");
        let packages = tools_dir().with_file_name("package");
        let package = fs::read_dir(&packages)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                name.starts_with("srap_") && name.ends_with("_amd64.deb") && !name.contains('+')
            })
            .unwrap_or_else(|| {
                panic!(
                    "no srap_*_amd64.deb in {}: `cargo xtask package --profile dev` builds it \
                     (`cargo xtask test` does, before the tests)",
                    packages.display()
                )
            });
        Self { playbook, package }
    }
}

/// One sender machine and the workload it runs. Field order is drop
/// order: the workload first.
struct SenderMachine {
    workload: Option<Workload>,
    machine: Machine,
    /// Its agent's `--pin-dir`, a directory of the host's bpffs.
    pins: PathBuf,
}

/// The site: the machines, the test's listener in the receiver's
/// namespace, the emulator, the controller's files, the bridge. Field
/// order is drop order: the senders and the receiver (powered off, their
/// pins and cgroups removed), the listener, the emulator, the files, then
/// the namespaces.
struct Site {
    senders: Vec<SenderMachine>,
    receiver: Machine,
    listener: Listener,
    _emulator: Emulator,
    controller: Controller,
    model: RssModel,
    bridge: Bridge,
}

/// The bridge's hosts: the receiver is host 0, sender `i` host `i + 1`.
const RECEIVER_HOST: usize = 0;

impl Site {
    fn boot(tools: &Tools) -> Self {
        let mut bridge = Bridge::new().expect("the hub namespace and its bridge");
        let rx = bridge
            .add_host_with_queues(QUEUES)
            .expect("the receiver's namespace on the bridge");
        for _ in SENDERS {
            bridge
                .add_host()
                .expect("a sender's namespace on the bridge");
        }
        let description = description();
        let model = RssModel::from_description(&description).expect("the emulated NIC's model");
        let emulator = bridge
            .hub
            .run(|| Emulator::attach(&Bridge::port(rx), &model, QUEUES))
            .expect("the hub's namespace")
            .expect("the RSS emulator on the receiver's link");
        let server = SocketAddr::new(bridge.host_ip(rx), DPORT);
        let listener = Listener::bind(bridge.host(rx), server, TIMEOUT)
            .expect("a listener in the receiver's namespace");
        let controller = Controller::new(tools, &bridge, &description);
        let receiver = boot_machine(&bridge, rx, &controller, &[]);
        let senders = SENDERS
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let mut machine = boot_machine(
                    &bridge,
                    i + 1,
                    &controller,
                    &[built_binary("srap-test-workload")],
                );
                let pins = controller.pin_dir(i);
                machine.own_pins(pins.clone());
                SenderMachine {
                    workload: None,
                    machine,
                    pins,
                }
            })
            .collect();
        Self {
            senders,
            receiver,
            listener,
            _emulator: emulator,
            controller,
            model,
            bridge,
        }
    }

    fn play(&self, playbook: &str, extra: &[&str]) -> Recap {
        self.controller.play(&self.bridge, playbook, extra)
    }

    /// Both senders open their flows under `srap exec` (into the role's
    /// cgroup); judged by where the accepted tuples land and by the
    /// receiver's grants.
    fn judge_transfer(&mut self) {
        let grants = self.await_grants();
        let server = SocketAddr::new(self.bridge.host_ip(RECEIVER_HOST), DPORT);
        let mut all = Vec::new();
        for (i, sender) in self.senders.iter_mut().enumerate() {
            let mut command = sender.machine.command("/usr/bin/srap");
            command.args([
                "exec",
                "--cgroup",
                CGROUP,
                "--",
                "/usr/bin/srap-test-workload",
            ]);
            let mut workload = Workload::spawn_command(command, server);
            let opened = workload.open(FLOWS_PER_SENDER);
            sender.workload = Some(workload);
            let accepted = self
                .listener
                .accept(FLOWS_PER_SENDER)
                .unwrap_or_else(|err| panic!("{}'s flows: {err:#}", SENDERS[i]));
            assert_eq!(
                accepted
                    .iter()
                    .map(SocketAddr::port)
                    .collect::<BTreeSet<_>>(),
                opened.iter().copied().collect(),
                "{}'s flows are the ones the receiver accepted",
                SENDERS[i]
            );
            let cpus: Vec<u32> = landings(&self.model, &accepted, server)
                .expect("same-family tuples")
                .iter()
                .map(|landing| landing.cpu)
                .collect();
            let granted = &grants[&self.bridge.host_ip(i + 1)];
            println!(
                "{}: flows on receiver CPUs {cpus:?}, granted {granted:?}",
                SENDERS[i]
            );
            assert!(
                cpus.iter().all(|cpu| granted.contains(cpu)),
                "{}'s flows land on CPUs {cpus:?}, not all in its grant {granted:?}\n{}",
                SENDERS[i],
                sender.machine.journal(&["srap-sender.service"])
            );
            all.extend(cpus);
        }
        let distinct: BTreeSet<u32> = all.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            SENDERS.len() * FLOWS_PER_SENDER,
            "16 flows from two senders on 16 distinct receiver CPUs: {all:?}"
        );
    }

    /// The receiver's grants, once both senders hold one they applied:
    /// each sender's address → its CPUs, checked pairwise disjoint.
    fn await_grants(&self) -> BTreeMap<IpAddr, BTreeSet<u32>> {
        let settled = poll_until(TIMEOUT, Duration::from_millis(200), || {
            let peers = self.receiver_peers();
            let ready = peers.len() == SENDERS.len()
                && peers
                    .iter()
                    .all(|p| p["grant_applied"] == true && p["granted"] != "");
            if ready {
                ControlFlow::Break(peers)
            } else {
                ControlFlow::Continue(peers)
            }
        })
        .unwrap_or_else(|peers| panic!("the receiver's grants did not settle: {peers:#?}"));
        let grants: BTreeMap<IpAddr, BTreeSet<u32>> = settled
            .iter()
            .map(|peer| {
                let addr: SocketAddr = peer["addr"]
                    .as_str()
                    .and_then(|a| a.parse().ok())
                    .unwrap_or_else(|| panic!("a peer's address: {peer}"));
                let cpus = srap_host::cpulist::parse(peer["granted"].as_str().unwrap_or_default())
                    .unwrap_or_else(|err| panic!("a peer's grant: {err}"));
                (addr.ip(), cpus)
            })
            .collect();
        let total: usize = grants.values().map(BTreeSet::len).sum();
        let union: BTreeSet<u32> = grants.values().flatten().copied().collect();
        assert_eq!(total, union.len(), "disjoint grants: {grants:?}");
        assert_eq!(
            grants.len(),
            SENDERS.len(),
            "a grant per sender: {grants:?}"
        );
        grants
    }

    /// The receiver agent's peers (`srap status --once --json` on it).
    fn receiver_peers(&self) -> Vec<serde_json::Value> {
        let Ok(out) = self.receiver.run("srap", ["status", "--once", "--json"]) else {
            return Vec::new();
        };
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|status| status["peers"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Each machine's running agent's PID (machine name → PID).
    fn agent_pids(&self) -> BTreeMap<String, String> {
        self.machines()
            .map(|(machine, unit)| {
                let pid = machine.show(unit, "MainPID").expect("MainPID");
                (machine.name().to_owned(), pid)
            })
            .collect()
    }

    /// Every machine with the agent unit it runs.
    fn machines(&self) -> impl Iterator<Item = (&Machine, &'static str)> {
        std::iter::once((&self.receiver, "srap-receiver.service")).chain(
            self.senders
                .iter()
                .map(|s| (&s.machine, "srap-sender.service")),
        )
    }

    /// The package as a new release: the built one with its version
    /// raised (`dpkg-deb -R`, then `-b`), in the controller's directory.
    fn rebuilt_package(&self) -> PathBuf {
        self.controller.rebuilt_package()
    }

    /// After the rolling upgrade: every machine runs the new version in a
    /// new agent process, the senders steer again, and every flow opened
    /// before it is open at both ends.
    fn judge_upgrade(&mut self, before: &BTreeMap<String, String>) {
        for (machine, unit) in self.machines() {
            let out = machine
                .run("dpkg-query", ["-W", "-f", "${Version}", "srap"])
                .expect("dpkg-query in the machine");
            let version = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(
                version,
                UPGRADE_VERSION,
                "{} after the upgrade",
                machine.name()
            );
            let pid = machine.show(unit, "MainPID").expect("MainPID");
            assert_ne!(
                Some(&pid),
                before.get(machine.name()),
                "{unit} on {} was not restarted onto the new binary",
                machine.name()
            );
        }
        for sender in &self.senders {
            let status = sender
                .machine
                .show("srap-sender.service", "StatusText")
                .expect("StatusText");
            assert!(status.contains("steering"), "after the upgrade: {status:?}");
        }
        for (i, sender) in self.senders.iter_mut().enumerate() {
            let workload = sender.workload.as_mut().expect("the workload");
            let connected = workload.peers_as_asked();
            assert_eq!(
                connected,
                vec![true; FLOWS_PER_SENDER],
                "{}'s flows still connected after the upgrade",
                SENDERS[i]
            );
        }
        let dropped: Vec<SocketAddr> = self
            .listener
            .accepted()
            .iter()
            .filter(|(stream, _)| !open_at_the_receiver(stream))
            .map(|(_, peer)| *peer)
            .collect();
        assert!(
            dropped.is_empty(),
            "flows the receiver saw closed or reset across the upgrade: {dropped:?}"
        );
    }

    /// What the removal must take is there before it: the listing
    /// [`Site::judge_removed`] finds empty can see each kind of thing
    /// (the package's files and settings on every machine, the steered
    /// cgroup on each sender, and its pins).
    fn judge_deployed(&self) {
        for (machine, unit) in self.machines() {
            let found = srap_on(machine);
            let has = |prefix: &str| found.iter().any(|path| path.starts_with(prefix));
            assert!(
                has("/etc/srap")
                    && has("/usr/bin/srap-agent")
                    && has("/usr/lib/systemd/system/srap-"),
                "{}: the deployed files are not where the removal check looks: {found:?}",
                machine.name()
            );
            if unit == "srap-sender.service" {
                assert!(
                    has("/sys/fs/cgroup"),
                    "{}: no steered cgroup where the removal check looks: {found:?}",
                    machine.name()
                );
            }
        }
        for sender in &self.senders {
            assert!(sender.pins.is_dir(), "{}: no pins", sender.pins.display());
        }
    }

    /// Each workload closes its connections and exits.
    fn finish_workloads(&mut self) {
        for sender in &mut self.senders {
            if let Some(workload) = sender.workload.take() {
                workload.finish();
            }
        }
    }

    /// Nothing of SRAP left on any machine: no package, no units, no
    /// settings or state, no pins, no cgroup, no source rule.
    fn judge_removed(&self) {
        for (machine, _) in self.machines() {
            let name = machine.name();
            let status = machine
                .command("dpkg-query")
                .args(["-W", "-f", "${db:Status-Status}", "srap"])
                .output()
                .expect("dpkg-query in the machine");
            let state = String::from_utf8_lossy(&status.stdout).into_owned();
            assert!(
                !status.status.success() || state == "not-installed",
                "{name}: the package is still known to dpkg ({state:?})"
            );
            let left = srap_on(machine);
            assert!(left.is_empty(), "{name}: left behind: {left:?}");
            let rules = machine.run("ip", ["rule", "show"]).expect("ip rule");
            let rules = String::from_utf8_lossy(&rules.stdout).into_owned();
            assert_eq!(
                rules.lines().count(),
                3,
                "{name}: source rules left:\n{rules}"
            );
        }
        for sender in &self.senders {
            assert!(
                !sender.pins.exists(),
                "{}: its pins are left",
                sender.pins.display()
            );
        }
    }
}

/// A connection the receiver accepted is still open: what has arrived
/// (the greeting) read, no FIN or reset behind it.
fn open_at_the_receiver(mut stream: &std::net::TcpStream) -> bool {
    use std::io::Read as _;
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut buf = [0u8; 4096];
    // Bounded: the workload sends its greeting once and nothing after.
    for _ in 0..64 {
        match stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(err) => return err.kind() == std::io::ErrorKind::WouldBlock,
        }
    }
    false
}

/// What of SRAP is on `machine`: its settings, state and cache, its
/// binaries, its units and their enablement, and a cgroup named
/// [`CGROUP`] in whichever cgroup2 layout the machine has.
fn srap_on(machine: &Machine) -> Vec<String> {
    let script = format!(
        "ls -d /etc/srap /run/srap /var/cache/srap /usr/bin/srap /usr/bin/srap-agent \
         /usr/lib/systemd/system/srap-* /etc/systemd/system/*/srap-* 2>/dev/null; \
         find /sys/fs/cgroup -maxdepth 2 -type d -name {CGROUP}; true"
    );
    let out = machine
        .run("sh", ["-c", &script])
        .expect("listing SRAP's files in the machine");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The emulated NIC: [`QUEUES`] queues, one per CPU, the lab's key.
fn description() -> RssDescription {
    RssDescription {
        indir: (0..128).map(|i| i % QUEUES).collect(),
        queue_cpu: Some((0..QUEUES).collect()),
        ..embedded_default()
    }
}

/// Bridge host `host`'s machine from the Ansible root, reachable by the
/// controller's key over SSH, with `binaries` bound in.
fn boot_machine(
    bridge: &Bridge,
    host: usize,
    controller: &Controller,
    binaries: &[PathBuf],
) -> Machine {
    let binary_dir = built_binary("srap").parent().map(Path::to_path_buf);
    let cache = rootfs_cache(binary_dir.as_deref().unwrap_or(Path::new(".")));
    let rootfs =
        ansible_rootfs(&cache).unwrap_or_else(|err| panic!("the machines' Ansible root: {err:#}"));
    let spec = MachineSpec {
        rootfs,
        netns: bridge.host(host).clone(),
        binaries: binaries.to_vec(),
        units: Vec::new(),
    };
    let machine = Machine::boot(&spec).unwrap_or_else(|err| panic!("booting a machine: {err:#}"));
    machine
        .write("/root/.ssh/authorized_keys", controller.public_key())
        .expect("the controller's key in the machine");
    machine
        .run("chmod", ["-R", "go-rwx", "/root/.ssh"])
        .expect("chmod in the machine");
    machine
        .systemctl(&["start", "ssh.service"])
        .unwrap_or_else(|err| panic!("sshd in the machine: {err:#}"));
    machine
}

/// The controller's side: the collection installed where Ansible finds
/// it, the inventory, the SSH key, the fleet's key file, and the
/// rebuilt package, all in one scratch directory.
struct Controller {
    playbook: PathBuf,
    package: PathBuf,
    dir: TempDir,
    /// A name of this run's own, for the pins in the host's shared bpffs.
    run: String,
}

impl Controller {
    /// The controller's directory for the site on `bridge`, whose
    /// receiver's NIC is `nic`: the role copies its description to the
    /// receiver (`srap_receiver_rss_src`), as for a NIC whose RSS cannot
    /// be read (a veth has none).
    fn new(tools: &Tools, bridge: &Bridge, nic: &RssDescription) -> Self {
        let dir = TempDir::new("fleet").expect("the controller's directory");
        install_ansible_collection(dir.path()).expect("the collections path");
        let key = dir.join("id_ed25519");
        let out = Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "srap-fleet-test",
                "-f",
            ])
            .arg(&key)
            .output()
            .expect("ssh-keygen");
        assert!(out.status.success(), "ssh-keygen: {out:?}");
        let controller = Self {
            playbook: tools.playbook.clone(),
            package: tools.package.clone(),
            dir,
            run: unique_name("f"),
        };
        controller
            .dir
            .write(NIC_DESCRIPTION, nic.to_json_pretty())
            .expect("the NIC's description");
        controller
            .dir
            .write("inventory.yml", controller.inventory(bridge))
            .expect("the inventory");
        controller
    }

    fn public_key(&self) -> Vec<u8> {
        fs::read(self.dir.join("id_ed25519.pub")).expect("the controller's public key")
    }

    /// Sender `i`'s pin directory: the machines share this host's bpffs.
    fn pin_dir(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("/sys/fs/bpf/srap-{}-{i}", self.run))
    }

    /// The site as an inventory, in the example's shape.
    fn inventory(&self, bridge: &Bridge) -> String {
        let key = self.dir.join("id_ed25519");
        let mut text = format!(
            "all:\n  vars:\n    ansible_user: root\n    ansible_python_interpreter: /usr/bin/python3\n    \
             ansible_ssh_private_key_file: {}\n    \
             ansible_ssh_common_args: \"-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\"\n    \
             srap_package_file: {}\n  children:\n    srap_receivers:\n      hosts:\n        \
             {RECEIVER}:\n          ansible_host: {}\n          srap_receiver_ifaces: [eth0]\n          \
             srap_receiver_rss_src: {}\n    srap_senders:\n      hosts:\n",
            key.display(),
            self.package.display(),
            bridge.host_ip(RECEIVER_HOST),
            self.dir.join(NIC_DESCRIPTION).display(),
        );
        for (i, name) in SENDERS.iter().enumerate() {
            text.push_str(&format!(
                "        {name}:\n          ansible_host: {}\n          srap_sender_pin_dir: {}\n          \
                 srap_sender_cgroup: {CGROUP}\n",
                bridge.host_ip(i + 1),
                self.pin_dir(i).display()
            ));
        }
        text
    }

    /// Runs `playbook` of the collection on the site, from the hub's
    /// namespace (the only one with a route to every machine), bounded by
    /// [`PLAYBOOK_TIMEOUT`]: its recap, or a panic with its output.
    fn play(&self, bridge: &Bridge, playbook: &str, extra: &[&str]) -> Recap {
        let log = self.dir.join(format!("{}.log", unique_name("play")));
        let file = fs::File::create(&log).expect("the playbook's log");
        let mut command = in_netns(&bridge.hub, &self.playbook);
        command
            .current_dir(ansible_collection())
            .arg("-i")
            .arg(self.dir.join("inventory.yml"))
            .arg(playbook)
            .args(extra.iter().flat_map(|e| ["-e", e]))
            .env("ANSIBLE_COLLECTIONS_PATH", self.dir.path())
            .env("ANSIBLE_LOCAL_TEMP", self.dir.join("tmp"))
            .env("ANSIBLE_HOME", self.dir.join("home"))
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_PIPELINING", "1")
            .env("ANSIBLE_FORKS", "3")
            // No SSH master left behind: each task connects afresh.
            .env("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("the log"))
            .stderr(file);
        let mut child = ChildGuard::spawn(&mut command).expect("ansible-playbook");
        let status = child.wait(PLAYBOOK_TIMEOUT);
        let output = fs::read_to_string(&log).unwrap_or_default();
        match status {
            Ok(status) if status.success() => Recap::parse(&output),
            Ok(status) => panic!("ansible-playbook {playbook} failed ({status}):\n{output}"),
            Err(err) => panic!("ansible-playbook {playbook}: {err:#}\n{output}"),
        }
    }

    /// The built package as version [`UPGRADE_VERSION`].
    fn rebuilt_package(&self) -> PathBuf {
        let tree = self.dir.join("rebuilt");
        dpkg_deb(&["-R".as_ref(), self.package.as_os_str(), tree.as_os_str()]);
        let control = tree.join("DEBIAN/control");
        let text = fs::read_to_string(&control).expect("the package's control file");
        let text: String = text
            .lines()
            .map(|line| {
                if line.starts_with("Version:") {
                    format!("Version: {UPGRADE_VERSION}\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        fs::write(&control, text).expect("the rebuilt control file");
        let deb = self.dir.join(format!("srap_{UPGRADE_VERSION}_amd64.deb"));
        dpkg_deb(&[
            "--root-owner-group".as_ref(),
            "-b".as_ref(),
            tree.as_os_str(),
            deb.as_os_str(),
        ]);
        deb
    }
}

fn dpkg_deb(args: &[&std::ffi::OsStr]) {
    let out = Command::new("dpkg-deb")
        .args(args)
        .output()
        .expect("dpkg-deb");
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A playbook run's `PLAY RECAP`: host → counter → value.
#[derive(Debug)]
struct Recap(BTreeMap<String, BTreeMap<String, u64>>);

impl Recap {
    fn parse(output: &str) -> Self {
        let hosts = output
            .lines()
            .skip_while(|line| !line.starts_with("PLAY RECAP"))
            .skip(1)
            .filter_map(|line| {
                let (host, counters) = line.split_once(" : ")?;
                let counters = counters
                    .split_whitespace()
                    .filter_map(|field| {
                        let (name, value) = field.split_once('=')?;
                        Some((name.to_owned(), value.parse().ok()?))
                    })
                    .collect();
                Some((host.trim().to_owned(), counters))
            })
            .collect();
        Self(hosts)
    }

    fn count(&self, host: &str, counter: &str) -> u64 {
        self.0
            .get(host)
            .and_then(|c| c.get(counter))
            .copied()
            .unwrap_or(0)
    }

    /// Every host of the site ran, none failed or was unreachable.
    fn assert_succeeded(&self, what: &str) {
        for host in std::iter::once(RECEIVER).chain(SENDERS) {
            assert!(
                self.0.contains_key(host),
                "{what}: {host} is not in the recap {self:?}"
            );
            for counter in ["failed", "unreachable"] {
                assert_eq!(self.count(host, counter), 0, "{what}: {host} {self:?}");
            }
        }
    }

    /// No host changed.
    fn assert_unchanged(&self, what: &str) {
        for (host, counters) in &self.0 {
            assert_eq!(
                counters.get("changed").copied().unwrap_or(0),
                0,
                "{what} changed {host}: {self:?}"
            );
        }
    }
}
