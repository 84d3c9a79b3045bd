//! One QEMU guest ([`Guest`]): its NIC ([`GuestNic`]) and shape
//! ([`GuestShape`]), the namespace with its tap(s) that QEMU runs in
//! ([`GuestNet`]), booted from an image and driven over its serial shell.
//! QEMU is killed by PID on drop, before the namespace (and the tap) go.

use std::{
    fs,
    net::Ipv4Addr,
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::Stdio,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};

use crate::{
    exec::in_netns, interrupt::interrupted, names::unique_name, netns::NetNs, programs::ChildGuard,
    subnet::Subnet, support::poll_until,
};

use super::{files::GuestKernel, image::GuestImage, shell::GuestShell};

/// The most members a bonded guest takes (each a PCI NIC of its own).
pub const MOST_MEMBERS: u32 = 8;

/// The guest's NIC, inside the guest.
pub const GUEST_IFACE: &str = "eth0";
/// How long a boot may take: seconds for a few vCPUs, longer for 8 under
/// software emulation, far longer on a loaded CI machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// A guest command that is not a workload answers within this. A busy
/// 2-core host slows the emulated guest several times over: an 8-vCPU
/// guest under software emulation can take over a minute for one
/// `ethtool` (`-S`, `-X`) while CI runs beside it. Waiting past the guest
/// kernel's hung-task report (120 s) also lets a guest that is really stuck
/// say so in the console tail a failure carries.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// How long one poll of [`Guest::poll_until`] is waited for before it is
/// asked again.
const POLL_TIMEOUT: Duration = Duration::from_secs(30);

/// The tap's rate toward the guest. A guest under software emulation
/// drains its receive rings slowly; when a packet QEMU's RSS redirects to
/// another queue finds that queue's ring full, QEMU 7.2 stops reading the tap
/// queue it came from until the guest refills *that* queue, which may never
/// happen: the flows on it stall for good (16 flows on 4 queues are
/// enough). Pacing the wire keeps the rings from filling.
pub const WIRE_RATE: &str = "400mbit";

/// The guest's NIC.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuestNic {
    /// virtio-net with QEMU's RSS (`rss=on,hash=on`), driver `virtio_net`.
    #[default]
    Virtio,
    /// QEMU's Intel 82576 (`igb`), driver `igb`: RSS in the device model,
    /// a key the driver never reports, no IRQ affinity hints.
    Igb,
}

impl GuestNic {
    pub fn driver(self) -> &'static str {
        match self {
            Self::Virtio => "virtio_net",
            Self::Igb => "igb",
        }
    }

    /// The device, as the lab's banner names it.
    pub fn device(self) -> &'static str {
        match self {
            Self::Virtio => "virtio-net NIC",
            Self::Igb => "igb NIC (Intel 82576)",
        }
    }
}

/// What to boot.
#[derive(Debug, Clone, Copy)]
pub struct GuestShape {
    pub nic: GuestNic,
    /// Receive queues: virtio-net queue pairs, or igb's queues (the driver
    /// makes one per vCPU, up to 8).
    pub queues: u32,
    /// vCPUs; at least `queues`, or QEMU folds queue numbers onto fewer.
    pub cpus: u32,
    /// Whether the guest's kernel may load sock_diag for TCP (`inet_diag`,
    /// `tcp_diag`); without it, a kernel that lacks them.
    pub sock_diag: bool,
    /// Whether `net.core.netdev_rss_key` is readable (without it, igb's key
    /// is nowhere to be read, as outside the initial network namespace).
    pub kernel_key: bool,
    /// Bond members: that many single-queue virtio-net NICs, one per tap of
    /// a [`GuestNet::bonded`] (0: the one multi-queue NIC of `nic`).
    pub bond_members: u32,
    /// NUMA nodes, each with its vCPUs, memory and a `queues`-queue
    /// virtio-net NIC behind a PCIe expander of its own, one per tap of a
    /// [`GuestNet::per_node`] ([`super::numa`]); 0: no NUMA layout.
    pub numa_nodes: u32,
}

impl GuestShape {
    /// A virtio guest (see [`GuestShape::with_nic`]).
    pub fn new(queues: u32, cpus: Option<u32>) -> anyhow::Result<Self> {
        Self::with_nic(GuestNic::Virtio, queues, cpus)
    }

    pub fn with_nic(nic: GuestNic, queues: u32, cpus: Option<u32>) -> anyhow::Result<Self> {
        let cpus = cpus.unwrap_or(queues);
        let most = match nic {
            GuestNic::Virtio => 16,
            GuestNic::Igb => 8,
        };
        if !(2..=most).contains(&queues) {
            bail!("--queues {queues}: the {nic:?} guest takes 2 to {most} queues");
        }
        if cpus < queues || cpus > 32 {
            bail!("--smp {cpus}: give at least one vCPU per queue ({queues}) and at most 32");
        }
        if nic == GuestNic::Igb && cpus != queues {
            bail!("--smp {cpus}: igb makes one queue per vCPU, so give --smp {queues}");
        }
        Ok(Self {
            nic,
            queues,
            cpus,
            sock_diag: true,
            kernel_key: true,
            bond_members: 0,
            numa_nodes: 0,
        })
    }

    /// A guest with `members` single-queue virtio-net NICs (`eth0`…), for a
    /// bond over them ([`super::bond::GuestBond`]) on a [`GuestNet::bonded`] with
    /// as many taps. Two vCPUs: no RSS is asked of these NICs, and the
    /// bond's member choice does not depend on the CPU that sends.
    pub fn bonded(members: u32) -> anyhow::Result<Self> {
        if !(2..=MOST_MEMBERS).contains(&members) {
            bail!(
                "a bonded guest takes 2 to {} members, not {members}",
                MOST_MEMBERS
            );
        }
        Ok(Self {
            nic: GuestNic::Virtio,
            queues: 1,
            cpus: 2,
            sock_diag: true,
            kernel_key: true,
            bond_members: members,
            numa_nodes: 0,
        })
    }

    /// A guest with `nodes` NUMA nodes of `cpus_per_node` vCPUs each, and
    /// on each node a virtio-net NIC with RSS and `queues` queues (see
    /// [`super::numa`]), on a [`GuestNet::per_node`] with as many taps.
    pub fn numa(nodes: u32, cpus_per_node: u32, queues: u32) -> anyhow::Result<Self> {
        if !(2..=4).contains(&nodes) || !(1..=8).contains(&cpus_per_node) {
            bail!(
                "a NUMA guest takes 2 to 4 nodes of 1 to 8 vCPUs, not {nodes} of {cpus_per_node}"
            );
        }
        if !(2..=8).contains(&queues) {
            bail!("a NUMA guest's NICs take 2 to 8 queues, not {queues}");
        }
        Ok(Self {
            nic: GuestNic::Virtio,
            queues,
            cpus: nodes * cpus_per_node,
            sock_diag: true,
            kernel_key: true,
            bond_members: 0,
            numa_nodes: nodes,
        })
    }

    /// The same guest on a kernel without sock_diag for TCP.
    pub fn without_sock_diag(self) -> Self {
        Self {
            sock_diag: false,
            ..self
        }
    }

    /// The same guest with `net.core.netdev_rss_key` unreadable.
    pub fn without_kernel_key(self) -> Self {
        Self {
            kernel_key: false,
            ..self
        }
    }
}

/// A namespace holding a multi-queue tap: the host side of the guest's NIC.
/// Or, [`GuestNet::bonded`], a bridge with one tap per bond member.
pub struct GuestNet {
    pub ns: NetNs,
    /// The tap with the host's address; for a bonded guest, the bridge that
    /// holds the address and the members' taps.
    pub tap: String,
    /// A bonded guest's taps, one per NIC in PCI order (`eth0` first);
    /// empty for the one-NIC guest.
    pub member_taps: Vec<String>,
    pub host_ip: Ipv4Addr,
    pub guest_ip: Ipv4Addr,
    /// A NUMA guest's links, one per node in node order (NIC 0's is also
    /// `tap`, `host_ip` and `guest_ip`); empty for the other guests.
    pub node_links: Vec<NodeLink>,
    /// A NUMA guest's namespace address on its loopback, `10.199.<n>.1`
    /// of a subnet of its own: reached from the guest only by a route
    /// through one of its NICs ([`super::numa`] adds one per NIC), so a
    /// flow to it may leave by either.
    pub routed_ip: Option<Ipv4Addr>,
    /// Held until the namespace is gone ([`Subnet`]): the host's cgroup
    /// hooks see the guest's flows by address, as they see any test's.
    _subnets: Vec<Subnet>,
}

/// The host side of one NIC of a NUMA guest ([`GuestNet::per_node`]): its
/// own multi-queue tap on its own subnet, and the MAC QEMU gives the NIC,
/// by which the guest finds it (NIC names follow PCI order, not nodes).
#[derive(Debug, Clone)]
pub struct NodeLink {
    /// The NUMA node QEMU puts the NIC's PCIe expander on.
    pub node: u32,
    pub tap: String,
    pub mac: String,
    /// `10.199.<n>.1/24` on the tap.
    pub host_ip: Ipv4Addr,
    /// `10.199.<n>.2/24`, the NIC's address in the guest.
    pub guest_ip: Ipv4Addr,
}

impl GuestNet {
    /// The namespace and tap on a leased subnet: `10.199.<n>.1/24` on the
    /// tap; the guest takes `.2`.
    pub fn new() -> anyhow::Result<Self> {
        Self::on(Subnet::lease()?)
    }

    /// The same on `subnet` (a fixed one, for a documented address).
    pub fn on(subnet: Subnet) -> anyhow::Result<Self> {
        let ns = NetNs::new()?;
        let tap = unique_name("t");
        let host_ip = subnet.ipv4(1);
        add_paced_tap(&ns, &tap, host_ip)?;
        Ok(Self {
            ns,
            tap,
            member_taps: Vec::new(),
            host_ip,
            guest_ip: subnet.ipv4(2),
            node_links: Vec::new(),
            routed_ip: None,
            _subnets: vec![subnet],
        })
    }

    /// The host side of a bonded guest with `members` NICs, on a leased
    /// subnet: a bridge with `10.199.<n>.1/24` and one tap per member in it.
    /// A bond sends each flow on one member with the bond's one MAC, so
    /// the host must take a packet from whichever tap it came: a bridge
    /// does (its learning follows the last member heard, and the guest's
    /// bond accepts replies on any member); an address on one tap of
    /// several would not (the guest's ARP answers leave on any member).
    /// No pacing: the test sends from the guest, and only ACKs go to it.
    pub fn bonded(members: u32) -> anyhow::Result<Self> {
        let subnet = Subnet::lease()?;
        let ns = NetNs::new()?;
        let bridge = unique_name("b");
        ns.ip(["link", "add", &bridge, "type", "bridge"])?;
        let host_ip = subnet.ipv4(1);
        ns.ip(["addr", "add", &format!("{host_ip}/24"), "dev", &bridge])?;
        ns.ip(["link", "set", &bridge, "up"])?;
        let mut member_taps = Vec::new();
        for _ in 0..members {
            let tap = unique_name("t");
            ns.ip(["tuntap", "add", "dev", &tap, "mode", "tap"])?;
            ns.ip(["link", "set", &tap, "master", &bridge])?;
            ns.ip(["link", "set", &tap, "up"])?;
            member_taps.push(tap);
        }
        Ok(Self {
            ns,
            tap: bridge,
            member_taps,
            host_ip,
            guest_ip: subnet.ipv4(2),
            node_links: Vec::new(),
            routed_ip: None,
            _subnets: vec![subnet],
        })
    }

    /// The host side of a NUMA guest with `nodes` nodes: in one namespace,
    /// a multi-queue tap per node's NIC, each on a leased subnet of its own
    /// (`10.199.<n>.1/24`, the guest's NIC `.2`) and paced as
    /// [`GuestNet::new`]'s, and [`GuestNet::routed_ip`] on the loopback.
    pub fn per_node(nodes: u32) -> anyhow::Result<Self> {
        let ns = NetNs::new()?;
        let routed = Subnet::lease()?;
        let routed_ip = routed.ipv4(1);
        ns.ip(["link", "set", "lo", "up"])?;
        ns.ip(["addr", "add", &format!("{routed_ip}/32"), "dev", "lo"])?;
        let mut subnets = vec![routed];
        let mut node_links = Vec::new();
        for node in 0..nodes {
            let subnet = Subnet::lease()?;
            let tap = unique_name("t");
            add_paced_tap(&ns, &tap, subnet.ipv4(1))?;
            node_links.push(NodeLink {
                node,
                tap,
                mac: format!("52:54:00:5a:d0:{node:02x}"),
                host_ip: subnet.ipv4(1),
                guest_ip: subnet.ipv4(2),
            });
            subnets.push(subnet);
        }
        let first = node_links
            .first()
            .context("a NUMA guest has nodes")?
            .clone();
        Ok(Self {
            ns,
            tap: first.tap,
            member_taps: Vec::new(),
            host_ip: first.host_ip,
            guest_ip: first.guest_ip,
            node_links,
            routed_ip: Some(routed_ip),
            _subnets: subnets,
        })
    }
}

/// A multi-queue tap in `ns` with `host_ip/24`, up, its wire toward the
/// guest paced to [`WIRE_RATE`].
fn add_paced_tap(ns: &NetNs, tap: &str, host_ip: Ipv4Addr) -> anyhow::Result<()> {
    ns.ip(["tuntap", "add", "dev", tap, "mode", "tap", "multi_queue"])?;
    ns.ip(["addr", "add", &format!("{host_ip}/24"), "dev", tap])?;
    ns.ip(["link", "set", tap, "up"])?;
    // The wire runs no faster than the emulated guest drains its rings
    // (see WIRE_RATE).
    ns.exec(
        "tc",
        ["qdisc", "add", "dev", tap, "root", "tbf", "rate", WIRE_RATE]
            .into_iter()
            .chain(["burst", "256kb", "latency", "100ms"]),
    )?;
    Ok(())
}

/// A running guest. QEMU is killed by PID when this drops; its directory
/// (console log, serial socket) is removed unless [`Guest::keep_dir`] said
/// otherwise.
pub struct Guest {
    qemu: Option<ChildGuard>,
    shell: GuestShell,
    dir: PathBuf,
    keep_dir: bool,
    pub shape: GuestShape,
    /// The kernel it runs.
    pub kernel: GuestKernel,
}

impl Guest {
    /// Boots `image` on `net`'s tap and waits until its `/init` is ready.
    pub fn boot(net: &GuestNet, image: &GuestImage, shape: GuestShape) -> anyhow::Result<Self> {
        if net.member_taps.len() != shape.bond_members as usize {
            bail!(
                "a guest with {} bond members needs as many taps (GuestNet::bonded), not {}",
                shape.bond_members,
                net.member_taps.len()
            );
        }
        if net.node_links.len() != shape.numa_nodes as usize {
            bail!(
                "a guest with {} NUMA nodes needs a link per node (GuestNet::per_node), not {}",
                shape.numa_nodes,
                net.node_links.len()
            );
        }
        let dir = std::env::temp_dir().join(format!("srap-guest-{}", unique_name("")));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = fs::File::create(dir.join("qemu.log"))?;
        let mut command = in_netns(&net.ns, &image.qemu.binary);
        image.qemu.configure(&mut command);
        command
            .args(qemu_args(net, image, shape, &dir))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let qemu = ChildGuard::spawn(&mut command)
            .context("starting QEMU (`cargo xtask setup` fetches it)")?;
        let console = dir.join("console.log");
        let mut pending = Pending {
            qemu: Some(qemu),
            dir: dir.clone(),
        };
        wait_for_ready(&console, &dir, &mut pending)?;
        let shell = GuestShell::connect(&dir.join("serial.sock"))?;
        Ok(Self {
            qemu: pending.qemu.take(),
            shell,
            dir,
            keep_dir: false,
            shape,
            kernel: image.series,
        })
    }

    pub fn shell(&mut self) -> &mut GuestShell {
        &mut self.shell
    }

    /// Runs `line` in the guest (see [`GuestShell::run`]).
    /// A failure carries the console's last lines: a guest that stopped
    /// answering (an oops, a hung driver, a storm of messages) says why
    /// there, and its directory is gone once the test drops it.
    pub fn run(&mut self, line: &str) -> anyhow::Result<String> {
        self.shell
            .run(line, COMMAND_TIMEOUT)
            .map_err(|err| anyhow::anyhow!("{err:#}\n{}", self.console_tail()))
    }

    /// Runs `line`, a command without effects (a read of the guest's
    /// counters, tables or files): its output, or an error when it exits
    /// non-zero. An exchange the guest does not answer within
    /// `POLL_TIMEOUT` is asked again until `COMMAND_TIMEOUT`, as a poll
    /// is ([`Guest::poll_until`]): a serial line lost under emulation on a
    /// busy host costs a retry, not the run; a late answer to the lost
    /// line is this line's (it has no effects, so either answer is good).
    /// Each read is tagged with a shell comment of its own, so a late
    /// answer is never taken for a later read of the same command (the
    /// counters before a run for those after it).
    pub fn read(&mut self, line: &str) -> anyhow::Result<String> {
        static READS: AtomicU64 = AtomicU64::new(0);
        let tagged = format!("{line} # read {}", READS.fetch_add(1, Ordering::Relaxed));
        let shell = &mut self.shell;
        let answer = poll_until(COMMAND_TIMEOUT, Duration::ZERO, || {
            match shell.status(&tagged, POLL_TIMEOUT) {
                Ok(answer) => ControlFlow::Break(answer),
                Err(err) if interrupted() => ControlFlow::Break((-1, format!("{err:#}"))),
                Err(err) => {
                    tracing::warn!(line, "the guest did not answer, asking again: {err:#}");
                    ControlFlow::Continue(err)
                }
            }
        });
        match answer {
            Ok((0, output)) => Ok(output),
            Ok((code, output)) => bail!(
                "in the guest, `{line}` exited with {code}: {}",
                output.trim()
            ),
            Err(err) => bail!("{err:#}\n{}", self.console_tail()),
        }
    }

    /// Runs `check` (a command without effects) every 200 ms until it
    /// exits 0 (true) or `within` has passed (false). A poll the guest does
    /// not answer within `POLL_TIMEOUT` (30 s) is asked again until then: under
    /// emulation on a busy host a `test -e` can go unanswered for minutes
    /// while the guest goes on, and one lost exchange should cost a poll,
    /// not the run. A late answer to it is passed over as an earlier line's
    /// ([`GuestShell::status`]), or taken for the next identical poll.
    pub fn poll_until(&mut self, check: &str, within: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + within;
        let shell = &mut self.shell;
        let waited = poll_until(within, Duration::from_millis(200), || {
            if interrupted() {
                return ControlFlow::Break(Ok(false));
            }
            match shell.status(check, POLL_TIMEOUT) {
                Ok((0, _)) => ControlFlow::Break(Ok(true)),
                Ok(_) => ControlFlow::Continue(()),
                Err(err) if Instant::now() < deadline => {
                    tracing::warn!(
                        check,
                        "the guest did not answer a poll, asking again: {err:#}"
                    );
                    ControlFlow::Continue(())
                }
                Err(err) => ControlFlow::Break(Err(err)),
            }
        });
        match waited {
            Ok(Ok(passed)) => Ok(passed),
            Ok(Err(err)) => bail!("{err:#}\n{}", self.console_tail()),
            Err(()) => Ok(false),
        }
    }

    /// The console log's last lines, for failure reports.
    fn console_tail(&self) -> String {
        const LINES: usize = 30;
        let path = self.dir.join("console.log");
        let text = fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
        format!(
            "the guest console's last {LINES} lines ({}):\n{tail}",
            path.display()
        )
    }

    /// A file of the guest (an agent's log), or why it could not be read:
    /// for failure reports, so never an error.
    pub fn read_or_why(&mut self, path: &str) -> String {
        self.read(&format!("cat {path}"))
            .unwrap_or_else(|err| format!("(unreadable: {err:#})"))
    }

    /// An agent's status in the guest: `srap status ARGS --once --json`,
    /// parsed.
    pub fn srap_status<T: serde::de::DeserializeOwned>(&mut self, args: &str) -> anyhow::Result<T> {
        let json = self.read(&format!("srap status {args} --once --json"))?;
        serde_json::from_str(&json)
            .with_context(|| format!("the guest's srap status {args} --json"))
    }

    /// Starts sampling an agent's status inside the guest, beside the
    /// flows it is to show: `srap status ARGS --once --json` in a loop in
    /// the guest's background, every 500 ms, each answer kept in a file
    /// of its own, until [`StatusSamples::stop`]. A read over the
    /// serial line can take longer than a flow lives on a busy host (one
    /// lost exchange costs 30 s, and the agents list only open or recently
    /// active flows); a sample the guest takes itself does not cross the
    /// line, and its file outlives the flows, so the run is judged after
    /// they have closed.
    pub fn sample_status(&mut self, args: &str) -> anyhow::Result<StatusSamples> {
        static SAMPLERS: AtomicU64 = AtomicU64::new(0);
        let dir = format!(
            "/tmp/srap-samples-{}",
            SAMPLERS.fetch_add(1, Ordering::Relaxed)
        );
        // Bounded: at most StatusSamples::MAX samples, whatever happens
        // to the host's stop.
        self.run(&format!(
            "rm -rf {dir}; mkdir -p {dir}; (i=0; while [ $i -lt {max} ] && ! test -e {dir}/stop; \
             do if srap status {args} --once --json > {dir}/next 2> {dir}/error; then mv {dir}/next {dir}/$i; \
             else mv {dir}/error {dir}/failed-$i; fi; \
             i=$((i+1)); sleep 0.5; done; echo $i > {dir}/count) > /dev/null 2>&1 &",
            max = StatusSamples::MAX
        ))?;
        Ok(StatusSamples { dir })
    }

    /// Keeps the console log and QEMU's output after the guest is gone.
    pub fn keep_dir(&mut self) -> &Path {
        self.keep_dir = true;
        &self.dir
    }

    /// Sends the guest's RSS configuration to the device: QEMU's virtio-net
    /// computes no RSS until the driver has configured it once (igb's driver
    /// configures it when the interface comes up).
    pub fn enable_rss(&mut self) -> anyhow::Result<()> {
        if self.shape.nic == GuestNic::Virtio {
            let queues = self.shape.queues;
            self.run(&format!("ethtool -X {GUEST_IFACE} equal {queues}"))?;
        }
        Ok(())
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // QEMU first (by the PID we started), then its files.
        drop(self.qemu.take());
        if !self.keep_dir {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// An agent's status sampled inside the guest ([`Guest::sample_status`]):
/// the samples' directory there.
#[derive(Debug)]
pub struct StatusSamples {
    dir: String,
}

impl StatusSamples {
    /// Samples one loop takes at most (500 ms apart: over two minutes).
    const MAX: usize = 240;

    /// Stops the loop (it ends after its current sample), then reads the
    /// samples that contain `marker` (a flow's port as the JSON writes it,
    /// `:5202"`), newest first, parsed, until `enough` says those read so
    /// far suffice: a flow that has closed is judged from the last samples
    /// that still held it. When they never suffice, every sample's time and
    /// flows toward the marker are kept too ([`Sampled::timeline`]), for
    /// the report of a view short of flows. The samples are removed from
    /// the guest.
    pub fn stop<T: serde::de::DeserializeOwned>(
        self,
        guest: &mut Guest,
        marker: &str,
        mut enough: impl FnMut(&[T]) -> bool,
    ) -> anyhow::Result<Sampled<T>> {
        let dir = &self.dir;
        guest.run(&format!("touch {dir}/stop"))?;
        if !guest.poll_until(&format!("test -e {dir}/count"), COMMAND_TIMEOUT)? {
            bail!("the guest's status sampler in {dir} did not stop");
        }
        let taken = guest.read(&format!("cat {dir}/count"))?;
        let taken = taken.trim().parse().unwrap_or(0);
        let listed = guest.read(&format!(
            "(cd {dir} && grep -l -F '{marker}' [0-9]*) 2>/dev/null || true"
        ))?;
        let mut numbers: Vec<u32> = listed
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        numbers.sort_unstable_by(|a, b| b.cmp(a));
        let mut sampled = Sampled {
            samples: Vec::new(),
            taken,
            holding: numbers.len(),
            failed: self.failures(guest)?,
            timeline: Vec::new(),
        };
        for n in numbers {
            let text = guest.read(&format!("cat {dir}/{n}"))?;
            match serde_json::from_str(&text) {
                Ok(sample) => sampled.samples.push(sample),
                Err(err) => tracing::warn!("the guest's status sample {dir}/{n}: {err}"),
            }
            if enough(&sampled.samples) {
                let _ = guest.run(&format!("rm -rf {dir}"));
                return Ok(sampled);
            }
        }
        sampled.timeline = self.timeline(guest, taken, marker)?;
        let _ = guest.run(&format!("rm -rf {dir}"));
        Ok(sampled)
    }

    /// How many samples' `srap status` failed, and what the last said.
    fn failures(&self, guest: &mut Guest) -> anyhow::Result<(u32, String)> {
        let dir = &self.dir;
        let text = guest.read(&format!(
            "(cd {dir} && ls failed-* | wc -l; cat $(ls failed-* | tail -n 1)) 2>/dev/null || true"
        ))?;
        let mut lines = text.lines();
        let count = lines
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        Ok((count, lines.collect::<Vec<_>>().join(" ")))
    }

    /// Each sample's time and its flows toward `marker`, one line each.
    fn timeline(&self, guest: &mut Guest, taken: u32, marker: &str) -> anyhow::Result<Vec<String>> {
        let dir = &self.dir;
        let mut lines = Vec::new();
        for n in 0..taken {
            let text = guest.read(&format!("cat {dir}/{n} 2>/dev/null || true"))?;
            let Ok(sample) = serde_json::from_str::<serde_json::Value>(&text) else {
                lines.push(format!("sample {n}: none"));
                continue;
            };
            let rows: Vec<String> = sample["flows"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|flow| flow.to_string().contains(marker))
                .map(|flow| {
                    format!(
                        "{} {} bytes {} packets",
                        flow["src"], flow["bytes"], flow["packets"]
                    )
                })
                .collect();
            lines.push(format!(
                "sample {n} at unix ms {}: {} active flows; toward the port: [{}]",
                sample["unix_ms"],
                sample["active_flows"],
                rows.join(", ")
            ));
        }
        Ok(lines)
    }
}

/// What [`StatusSamples::stop`] read: the samples parsed, how many the
/// guest took and held the marker, and for a view never enough, every
/// sample's flows toward it.
#[derive(Debug)]
pub struct Sampled<T> {
    /// Those holding the marker, newest first, until enough.
    pub samples: Vec<T>,
    /// Samples the guest took in all.
    pub taken: u32,
    /// Samples holding the marker.
    pub holding: usize,
    /// Samples whose `srap status` failed, and what the last one said.
    pub failed: (u32, String),
    /// Empty when the samples sufficed; else per sample taken, its time
    /// and flows toward the marker.
    pub timeline: Vec<String>,
}

/// QEMU and its directory until the guest is up: a failed boot kills QEMU
/// and keeps the logs, which the error names.
struct Pending {
    qemu: Option<ChildGuard>,
    dir: PathBuf,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.qemu.take().is_some() {
            eprintln!("guest boot failed; logs kept in {}", self.dir.display());
        }
    }
}

fn qemu_args(net: &GuestNet, image: &GuestImage, shape: GuestShape, dir: &Path) -> Vec<String> {
    let GuestShape { cpus, .. } = shape;
    let memory_mib = 768 + 64 * cpus;
    let nodiag = if shape.sock_diag { "" } else { " srap.nodiag" };
    let nokey = if shape.kernel_key { "" } else { " srap.nokey" };
    // A NUMA guest's NICs are addressed by MAC once it is up
    // (super::numa): /init configures no address then.
    let ip = if shape.numa_nodes > 0 {
        String::new()
    } else {
        format!(" srap.ip={}/24", net.guest_ip)
    };
    // no_timer_check: on a busy host the emulated timer can look broken to
    // the boot-time IO-APIC check ("IO-APIC + timer doesn't work!", a
    // panic, under load); the check proves nothing about RSS.
    [
        "-nographic",
        "-no-reboot",
        "-display",
        "none",
        "-monitor",
        "none",
        // /dev/kvm on these machines cannot boot a stock kernel; and
        // multi-threaded TCG stalls virtio-net receive for seconds at a
        // time, single-threaded TCG does not.
        "-accel",
        "tcg,thread=single",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(machine_args(shape, memory_mib))
    .chain([
        "-kernel".into(),
        image.kernel.display().to_string(),
        "-initrd".into(),
        image.initramfs.display().to_string(),
        "-append".into(),
        format!("console=ttyS0 panic=-1 quiet no_timer_check{ip}{nodiag}{nokey}"),
    ])
    .chain(nic_args(net, shape))
    .chain([
        "-serial".into(),
        format!("file:{}", dir.join("console.log").display()),
        "-chardev".into(),
        format!(
            "socket,id=ctl,path={},server=on,wait=off",
            dir.join("serial.sock").display()
        ),
        "-serial".into(),
        "chardev:ctl".into(),
    ])
    .collect()
}

/// Memory and vCPUs; for a NUMA guest, as the design notes checked them
/// ("Several NICs"): q35, a socket per node, the memory split evenly over
/// one backend per node, each node its own vCPUs.
fn machine_args(shape: GuestShape, memory_mib: u32) -> Vec<String> {
    let GuestShape {
        cpus, numa_nodes, ..
    } = shape;
    if numa_nodes == 0 {
        return vec![
            "-m".into(),
            memory_mib.to_string(),
            "-smp".into(),
            cpus.to_string(),
        ];
    }
    let per_node_cpus = cpus / numa_nodes;
    let per_node_mib = memory_mib.div_ceil(numa_nodes);
    let mut args: Vec<String> = vec![
        "-machine".into(),
        "q35".into(),
        "-m".into(),
        (per_node_mib * numa_nodes).to_string(),
        "-smp".into(),
        format!("{cpus},sockets={numa_nodes},cores={per_node_cpus},threads=1"),
    ];
    for node in 0..numa_nodes {
        let first = node * per_node_cpus;
        let last = first + per_node_cpus - 1;
        args.extend([
            "-object".into(),
            format!("memory-backend-ram,id=mem{node},size={per_node_mib}M"),
            "-numa".into(),
            format!("node,nodeid={node},cpus={first}-{last},memdev=mem{node}"),
        ]);
    }
    args
}

/// A NUMA guest's NICs: per node a PCIe expander bridge on that node
/// (QEMU's `_PXM`, which the guest reads as the NIC's `numa_node`; without
/// an expander every NIC reads -1) with a root port behind it, and on it a
/// virtio-net NIC with RSS on the node's tap, with the link's MAC.
fn numa_nic_args(net: &GuestNet, queues: u32) -> Vec<String> {
    net.node_links
        .iter()
        .flat_map(|link| {
            let NodeLink { node, tap, mac, .. } = link;
            let bus = 0x20 * (node + 1);
            [
                "-device".into(),
                format!("pxb-pcie,id=pxb{node},bus_nr={bus},numa_node={node},bus=pcie.0"),
                "-device".into(),
                format!(
                    "pcie-root-port,id=rp{node},bus=pxb{node},chassis={},slot=0",
                    node + 1
                ),
                "-netdev".into(),
                format!(
                    "tap,id=n{node},ifname={tap},script=no,downscript=no,queues={queues},vhost=off"
                ),
                "-device".into(),
                format!(
                    "virtio-net-pci,bus=rp{node},netdev=n{node},mac={mac},mq=on,vectors={},\
                     rss=on,hash=on,rx_queue_size=1024,romfile=",
                    2 * queues + 2
                ),
            ]
        })
        .collect()
}

/// The NIC on the namespace's tap; a bonded guest's NICs on theirs; a
/// NUMA guest's, one per node.
fn nic_args(net: &GuestNet, shape: GuestShape) -> Vec<String> {
    let queues = shape.queues;
    if shape.numa_nodes > 0 {
        return numa_nic_args(net, queues);
    }
    if shape.bond_members > 0 {
        // One plain virtio-net NIC per member tap, each with a MAC of its
        // own (the bond gives them all its own while enslaved), in PCI
        // order: the guest names them eth0, eth1… in this order. A speed
        // and duplex of their own: 802.3ad counts a port whose speed is
        // unknown (virtio-net's default) as down.
        return net
            .member_taps
            .iter()
            .enumerate()
            .flat_map(|(i, tap)| {
                [
                    "-netdev".into(),
                    format!("tap,id=n{i},ifname={tap},script=no,downscript=no,vhost=off"),
                    "-device".into(),
                    format!(
                        "virtio-net-pci,netdev=n{i},mac=52:54:00:5a:b0:{i:02x},\
                         speed=10000,duplex=full,romfile="
                    ),
                ]
            })
            .collect();
    }
    match shape.nic {
        // rss=on: QEMU computes Toeplitz and the indirection itself, and
        // hash=on hands the hash to the driver (`rxhash on`). With the
        // default 256-entry rx rings, receive stalls for seconds once
        // several flows are in flight; 1024 does not.
        GuestNic::Virtio => [
            "-netdev".into(),
            format!(
                "tap,id=n0,ifname={},script=no,downscript=no,queues={queues},vhost=off",
                net.tap
            ),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=n0,mq=on,vectors={},rss=on,hash=on,rx_queue_size=1024,romfile=",
                2 * queues + 2
            ),
        ]
        .into(),
        // igb hashes and picks the ring in the device model, whatever tap
        // queue a packet came from; its transmit queues map onto the tap's.
        GuestNic::Igb => [
            "-netdev".into(),
            format!(
                "tap,id=n0,ifname={},script=no,downscript=no,queues={queues},vhost=off",
                net.tap
            ),
            "-device".into(),
            "igb,netdev=n0,romfile=".into(),
        ]
        .into(),
    }
}

fn wait_for_ready(console: &Path, dir: &Path, pending: &mut Pending) -> anyhow::Result<()> {
    // What went wrong, with QEMU's own log.
    let failed = |what: &str| {
        let qemu = fs::read_to_string(dir.join("qemu.log")).unwrap_or_default();
        anyhow!("{what}; logs in {}\n{}", dir.display(), qemu.trim())
    };
    let booted = poll_until(BOOT_TIMEOUT, Duration::from_millis(200), || {
        let text = fs::read_to_string(console).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("SRAP-GUEST-ERROR")) {
            return ControlFlow::Break(Err(anyhow!(
                "the guest could not start: {line}; logs in {}",
                dir.display()
            )));
        }
        if text.contains("SRAP-GUEST-READY") {
            return ControlFlow::Break(Ok(()));
        }
        if interrupted() {
            return ControlFlow::Break(Err(anyhow!("interrupted")));
        }
        if pending.qemu.as_mut().is_none_or(ChildGuard::exited) {
            return ControlFlow::Break(Err(failed("QEMU exited")));
        }
        ControlFlow::Continue(())
    });
    booted.unwrap_or_else(|()| Err(failed("the guest did not boot in time")))
}
