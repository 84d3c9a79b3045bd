//! A Linux bond in the guest: `bond0` over the guest's virtio-net NICs in
//! `balance-xor` or `802.3ad` with `xmit_hash_policy=layer3+4` (or another
//! policy, [`GuestBond::create_with_policy`]), each NIC on
//! its own tap of a [`GuestNet::bonded`] bridge (for `802.3ad`, with
//! [`LacpPartner`] answering on the taps). The host's kernel has no bonding; the
//! guest's Debian kernels ship `bonding.ko`, so this is where the bonding
//! driver's own member choice can be seen.
//!
//! What judges [`srap_common::bond`]'s model is the guest's per-member
//! `tx_packets`: flows go one at a time, each sending [`FLOW_BYTES`], and
//! the member whose counter rose by the flow is the one the driver chose —
//! a count SRAP did not compute. The flow's tuple is the one the host's
//! sink accepted, not one the guest reports.

use std::{
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
    os::fd::OwnedFd,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, bail};
use rustix::net::{
    self, AddressFamily, RecvFlags, SendFlags, SocketType,
    addr::{SocketAddrArg, SocketAddrLen, SocketAddrOpaque},
    eth,
    sockopt::Timeout,
};
use srap_common::{
    bond::{HashPolicy, member_index},
    rss::FlowTuple,
};

use super::{
    qemu::{Guest, GuestNet},
    truth::iperf3_accepted_ports,
};
use crate::{
    programs::iperf3_server_with,
    readers::{DataSource, Transfer},
};

/// The bond, inside the guest.
pub const BOND: &str = "bond0";

/// What each flow sends: with segmentation offloads off on the bond, several
/// hundred packets, far above the odd ARP or neighbour probe a member
/// sends meanwhile, and a fraction of a second even under emulation.
pub const FLOW_BYTES: u64 = 512 * 1024;

/// The least a flow's member must have sent for the counters to name it:
/// most of the flow's packets (a 512 KB flow sends several hundred).
const MIN_FLOW_PACKETS: u64 = 200;

/// The most any other member may send meanwhile (ARP, a stray ACK of an
/// earlier flow): well below a flow.
const MOST_STRAY_PACKETS: u64 = 20;

/// The host's sink for the flows, in the test namespace.
const SINK_PORT: u16 = 7610;

/// The host's `iperf3 -s` for flows from a given source port.
const IPERF_PORT: u16 = 7611;

/// How long one flow may take: a connection and half a megabyte.
const FLOW_TIMEOUT: Duration = Duration::from_secs(60);

/// The bond's mode (both hash with `layer3+4`: the same member choice
/// over their usable members).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BondMode {
    /// `balance-xor`: usable = the slaves whose link is up.
    BalanceXor,
    /// `802.3ad` (LACP, `lacp_rate fast`): usable = the slaves up in the
    /// active aggregator. Several members only with a partner on the taps
    /// ([`LacpPartner`]).
    Lacp,
}

impl BondMode {
    /// As `/sys/class/net/BOND/bonding/mode` takes it.
    pub fn sysfs(self) -> &'static str {
        match self {
            Self::BalanceXor => "balance-xor",
            Self::Lacp => "802.3ad",
        }
    }
}

/// `bond0` in the guest, made by [`GuestBond::create`].
#[derive(Debug)]
pub struct GuestBond {
    /// The guest's NICs, in the order they were enslaved.
    pub enslaved: Vec<String>,
    pub mode: BondMode,
    /// Its `xmit_hash_policy`. A flow's [`BondFlow::by_model`] is the
    /// `layer3+4` model's member whatever the policy: under another one it
    /// is what the counters are compared with, not a prediction.
    pub policy: HashPolicy,
}

/// One flow sent over the bond, and which member each judge says carried
/// it.
#[derive(Debug, Clone)]
pub struct BondFlow {
    /// The tuple the host's sink accepted (guest address and port to the
    /// sink).
    pub tuple: FlowTuple,
    /// Every slave's `tx_packets` rise over the flow, in enslavement order.
    pub tx_packets: Vec<u64>,
    /// The member the counters name: the one that sent the flow's packets
    /// while every other sent few; `None` when they name none.
    pub by_counters: Option<String>,
    /// The member [`member_index`] picks among the usable members.
    pub by_model: String,
    /// The member it would pick were every slave usable: after a failure,
    /// a flow where this differs from `by_model` but is not the failed
    /// member shows the re-indexing (n − 1), not just the failure.
    pub by_model_all_up: String,
}

impl BondFlow {
    pub fn agrees(&self) -> bool {
        self.by_counters.as_deref() == Some(self.by_model.as_str())
    }
}

impl GuestBond {
    /// Makes `bond0` in `balance-xor` with `xmit_hash_policy=layer3+4`,
    /// enslaves the guest's NICs `eth{order[0]}`, `eth{order[1]}`… in that
    /// order and moves the guest's address from `eth0` to it. Give an order
    /// that is not the names' (`[1, 0]`): the driver indexes its members in
    /// enslavement order, and a model that took name order would then fail.
    pub fn create(
        guest: &mut Guest,
        net: &GuestNet,
        order: &[u32],
        mode: BondMode,
    ) -> anyhow::Result<Self> {
        Self::create_with_policy(guest, net, order, mode, HashPolicy::Layer34)
    }

    /// [`GuestBond::create`] with another `xmit_hash_policy`.
    pub fn create_with_policy(
        guest: &mut Guest,
        net: &GuestNet,
        order: &[u32],
        mode: BondMode,
        policy: HashPolicy,
    ) -> anyhow::Result<Self> {
        let members = guest.shape.bond_members;
        if members == 0 {
            bail!("the guest was booted without bond members (GuestShape::bonded)");
        }
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..members).collect::<Vec<_>>() {
            bail!(
                "enslavement order {order:?} must name each of eth0..eth{} once",
                members - 1
            );
        }
        let enslaved: Vec<String> = order.iter().map(|i| format!("eth{i}")).collect();
        let sys = format!("/sys/class/net/{BOND}/bonding");
        // `max_bonds=0`: no bond until asked, then the one made here. The
        // mode and policy are set while the bond has no slaves (the driver
        // refuses a mode change after); miimon makes a member whose link
        // goes down leave the usable set.
        guest.run("modprobe bonding max_bonds=0")?;
        // `lacp_rate fast`: LACPDUs every second, so the aggregator forms
        // (and a failed port leaves it) in seconds.
        let lacp = match mode {
            BondMode::BalanceXor => String::new(),
            BondMode::Lacp => format!(" && echo fast > {sys}/lacp_rate"),
        };
        guest.run(&format!(
            "echo +{BOND} > /sys/class/net/bonding_masters && echo {} > {sys}/mode \
             && echo {} > {sys}/xmit_hash_policy && echo 100 > {sys}/miimon{lacp}",
            mode.sysfs(),
            policy.name()
        ))?;
        guest.run(&format!(
            "ip addr flush dev eth0 && ip link set {BOND} up && ip addr add {}/24 dev {BOND}",
            net.guest_ip
        ))?;
        for member in &enslaved {
            guest.run(&format!(
                "ip link set {member} down && echo +{member} > {sys}/slaves \
                 && ip link set {member} up"
            ))?;
        }
        // Segmentation in the stack, before the bond: each member's
        // tx_packets counts wire packets (a flow's hundreds, not a dozen
        // 64 KB TSO frames), so a flow stands far above stray ARP. The
        // driver hashes each packet's tuple, the same for all of a flow's.
        guest.run(&format!("ethtool -K {BOND} tso off gso off"))?;
        let bond = Self {
            enslaved,
            mode,
            policy,
        };
        let set = guest.read(&format!("cat {sys}/xmit_hash_policy"))?;
        if HashPolicy::parse(&set) != Some(policy) {
            bail!(
                "{sys}/xmit_hash_policy says {:?}, not {}",
                set.trim(),
                policy.name()
            );
        }
        let slaves = bond.slaves(guest)?;
        if slaves != bond.enslaved {
            bail!(
                "{sys}/slaves lists {slaves:?}, not the order they were enslaved in: {:?}",
                bond.enslaved
            );
        }
        let all_up = bond
            .enslaved
            .iter()
            .map(|m| format!("grep -qx up /sys/class/net/{m}/bonding_slave/mii_status"))
            .collect::<Vec<_>>()
            .join(" && ");
        if !guest.poll_until(&all_up, Duration::from_secs(30))? {
            bail!(
                "the bond's members did not all come up:\n{}",
                guest.read_or_why(&format!("/proc/net/bonding/{BOND}"))
            );
        }
        // 802.3ad: until every port is in the active aggregator (with a
        // partner answering, a few seconds), flows would use fewer members.
        if mode == BondMode::Lacp {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while bond.usable(guest)?.len() < bond.enslaved.len() {
                if std::time::Instant::now() >= deadline {
                    bail!(
                        "the 802.3ad ports did not all join the active aggregator:\n{}",
                        guest.read_or_why(&format!("/proc/net/bonding/{BOND}"))
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        Ok(bond)
    }

    /// `bond0`'s slaves as the driver lists them: enslavement order.
    pub fn slaves(&self, guest: &mut Guest) -> anyhow::Result<Vec<String>> {
        let text = guest.read(&format!("cat /sys/class/net/{BOND}/bonding/slaves"))?;
        Ok(text.split_whitespace().map(str::to_owned).collect())
    }

    /// The members that can transmit: the slaves, in enslavement order,
    /// whose MII status is up (`balance-xor`'s usable set) and, for
    /// 802.3ad, that are in the active aggregator and distributing (their
    /// actor state's bit 0x20). A port counts in the aggregator seconds
    /// before it distributes: flows sent meanwhile all left on the first
    /// port here, though sysfs already put four in the aggregator.
    pub fn usable(&self, guest: &mut Guest) -> anyhow::Result<Vec<String>> {
        let slaves = self.slaves(guest)?;
        let at = "/sys/class/net/$m/bonding_slave";
        let status = guest.read(&format!(
            "for m in {}; do echo $m $(cat {at}/mii_status) \
             $(cat {at}/ad_aggregator_id {at}/ad_actor_oper_port_state 2>/dev/null); done",
            slaves.join(" ")
        ))?;
        let active = match self.mode {
            BondMode::BalanceXor => None,
            BondMode::Lacp => Some(
                guest
                    .read(&format!("cat /sys/class/net/{BOND}/bonding/ad_aggregator"))?
                    .trim()
                    .to_owned(),
            ),
        };
        Ok(status
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let (member, state) = (words.next()?, words.next()?);
                let distributing = match &active {
                    None => true,
                    Some(active) => {
                        let aggregator = words.next();
                        let port_state = words.next().and_then(|w| w.parse::<u8>().ok());
                        aggregator == Some(active.as_str())
                            && port_state.is_some_and(|s| s & LACP_DISTRIBUTING != 0)
                    }
                };
                (state == "up" && distributing).then(|| member.to_owned())
            })
            .collect())
    }

    /// Runs one flow's shell line; a failure carries the bond's own account
    /// (a port out of its aggregator, a link down).
    fn run_flow(&self, guest: &mut Guest, line: &str) -> anyhow::Result<String> {
        match guest.run(line) {
            Ok(output) => Ok(output),
            Err(err) => bail!(
                "sending a flow over the bond: {err:#}\n{}",
                guest.read_or_why(&format!("/proc/net/bonding/{BOND}"))
            ),
        }
    }

    /// No TIME_WAIT in the guest (`net.ipv4.tcp_max_tw_buckets=0`: a
    /// closed connection's socket is freed at once), so a flow's 4-tuple
    /// can be sent again from the same source port right after.
    pub fn no_time_wait(guest: &mut Guest) -> anyhow::Result<()> {
        guest.run("echo 0 > /proc/sys/net/ipv4/tcp_max_tw_buckets")?;
        Ok(())
    }

    /// Takes `member`'s link down in the guest (`ip link set … down`) and
    /// waits until the bond counts it out.
    pub fn take_down(&self, guest: &mut Guest, member: &str) -> anyhow::Result<()> {
        if !self.enslaved.iter().any(|m| m == member) {
            bail!("{member} is not a member of {BOND}: {:?}", self.enslaved);
        }
        guest.run(&format!("ip link set {member} down"))?;
        let gone = format!("! grep -qx up /sys/class/net/{member}/bonding_slave/mii_status");
        if !guest.poll_until(&gone, Duration::from_secs(30))? {
            bail!("{BOND} still counts {member} up after its link went down");
        }
        // 802.3ad: the port leaves the aggregator's distribution as the
        // link goes; wait until the usable set says so.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.usable(guest)?.iter().any(|m| m == member) {
            if std::time::Instant::now() >= deadline {
                bail!("{member} is still usable 30 s after its link went down");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }

    /// Sends one flow from the guest to a sink beside the taps: its tuple
    /// as the sink accepted it, the members' `tx_packets` around it, and the
    /// member the model picks among the members usable now.
    pub fn send_flow(&self, guest: &mut Guest, net: &GuestNet) -> anyhow::Result<BondFlow> {
        self.send_flow_from(guest, net, None)
    }

    /// [`GuestBond::send_flow`] from the source port `sport` if given, else
    /// one the kernel picks. Busybox `nc` binds no source port, so a given
    /// port's flow is the guest's `iperf3 -c --cport` to an `iperf3 -s` in
    /// the test namespace (its data connection is the flow; the control
    /// connection's dozen packets are strays). The same port twice is the
    /// same 4-tuple twice: call [`GuestBond::no_time_wait`] first, or the
    /// guest's TIME_WAIT holds the tuple.
    pub fn send_flow_from(
        &self,
        guest: &mut Guest,
        net: &GuestNet,
        sport: Option<u16>,
    ) -> anyhow::Result<BondFlow> {
        let usable = self.usable(guest)?;
        let slaves = self.slaves(guest)?;
        // One shell line: the counters, the flow, the counters — nothing
        // of the host's in between to add packets.
        let counters = counters_line(&slaves, "tx_packets");
        let host = net.host_ip;
        let (output, port, dport) = match sport {
            None => {
                let sink_addr = SocketAddr::new(IpAddr::V4(host), SINK_PORT);
                let sink = DataSource::start_for(&net.ns, sink_addr, 1, 0, None, Transfer::Upload)?;
                let output = self.run_flow(
                    guest,
                    &format!(
                        "{counters}; head -c {FLOW_BYTES} /dev/zero | nc -w 20 {host} {SINK_PORT}; \
                         rc=$?; {counters}; exit $rc"
                    ),
                )?;
                let ports = sink.finish(FLOW_TIMEOUT)?;
                let &[port] = ports.as_slice() else {
                    bail!("the sink accepted {ports:?}, not one flow");
                };
                (output, port, SINK_PORT)
            }
            Some(sport) => {
                let report = std::env::temp_dir()
                    .join(format!("srap-bond-{}.json", crate::names::unique_name("")));
                let _remove = RemoveOnDrop(&report);
                let mut server = iperf3_server_with(
                    &net.ns,
                    IPERF_PORT,
                    &["-J"],
                    Stdio::from(std::fs::File::create(&report)?),
                )?;
                let output = self.run_flow(
                    guest,
                    &format!(
                        "{counters}; iperf3 -c {host} -p {IPERF_PORT} --cport {sport} \
                         -n {FLOW_BYTES} > /dev/null; rc=$?; {counters}; exit $rc"
                    ),
                )?;
                server.wait(FLOW_TIMEOUT).context("the host's iperf3 -s")?;
                let ports = iperf3_accepted_ports(&std::fs::read_to_string(&report)?)?;
                let &[port] = ports.as_slice() else {
                    bail!("iperf3 -s accepted {ports:?}, not one stream");
                };
                if port != sport {
                    bail!("iperf3 -s accepted a stream from port {port}, not {sport}");
                }
                (output, port, IPERF_PORT)
            }
        };
        let tx_packets = counter_rise(&output, slaves.len())?;
        let tuple = FlowTuple::new(IpAddr::V4(net.guest_ip), port, IpAddr::V4(host), dport)?;
        let pick = |members: &[String]| -> anyhow::Result<String> {
            let index = member_index(&tuple, members.len() as u32)
                .context("the bond has no usable member")?;
            members
                .get(index as usize)
                .cloned()
                .context("the model's index is past the members")
        };
        Ok(BondFlow {
            by_counters: carrier(&tx_packets).map(|i| slaves[i].clone()),
            by_model: pick(&usable)?,
            by_model_all_up: pick(&slaves)?,
            tuple,
            tx_packets,
        })
    }
}

/// Removes a file of the test's when dropped.
struct RemoveOnDrop<'a>(&'a std::path::Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// A minimal LACP partner on a bonded guest's taps: to each LACPDU the
/// guest sends it answers with the guest's actor information as its
/// partner's and an actor of its own, one system for all taps (so the ports
/// aggregate together), state 0x3f (active, short timeout, aggregatable,
/// in sync, collecting, distributing). That is all Linux's 802.3ad needs to
/// put every port in one aggregator; a bridge never forwards LACPDUs, so
/// nothing else answers. Stops (threads joined, sockets closed) on drop.
pub struct LacpPartner {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// An LACP port state's "distributing" bit: the port sends.
const LACP_DISTRIBUTING: u8 = 0x20;

/// `ETH_P_SLOW`: LACP's ethertype.
const ETH_P_SLOW: u16 = 0x8809;
/// The partner's system address (locally administered).
const PARTNER_SYSTEM: [u8; 6] = [0x02, 0, 0, 0, 0x5a, 0x01];
/// An LACPDU's length after the Ethernet header.
const LACPDU_LEN: usize = 110;

impl LacpPartner {
    /// Answers on each of `net`'s member taps.
    pub fn start(net: &GuestNet) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut partner = Self {
            stop: Arc::clone(&stop),
            threads: Vec::new(),
        };
        for (index, tap) in net.member_taps.iter().enumerate() {
            let socket = net
                .ns
                .run(|| slow_protocols_socket(tap))?
                .with_context(|| format!("an LACP socket on {tap}"))?;
            let stop = Arc::clone(&stop);
            let port = u16::try_from(index + 1).context("too many taps")?;
            partner.threads.push(std::thread::spawn(move || {
                answer_lacp(&socket, port, &stop);
            }));
        }
        Ok(partner)
    }
}

impl Drop for LacpPartner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A packet socket on `tap` for slow-protocol frames, with a short receive
/// timeout so its thread sees the stop flag. Called inside the namespace
/// (the name is looked up there).
fn slow_protocols_socket(tap: &str) -> anyhow::Result<OwnedFd> {
    let socket = net::socket(AddressFamily::PACKET, SocketType::RAW, Some(eth::SLOW))
        .context("socket(AF_PACKET)")?;
    let ifindex = net::netdevice::name_to_index(&socket, tap)
        .with_context(|| format!("no interface {tap}"))?;
    let link = LinkAddr(libc::sockaddr_ll {
        sll_family: u16::try_from(libc::AF_PACKET)?,
        sll_protocol: ETH_P_SLOW.to_be(),
        sll_ifindex: i32::try_from(ifindex)?,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    });
    net::bind(&socket, &link).with_context(|| format!("binding to {tap}"))?;
    net::sockopt::set_socket_timeout(&socket, Timeout::Recv, Some(Duration::from_millis(200)))
        .context("SO_RCVTIMEO")?;
    Ok(socket)
}

/// A link-layer address (`sockaddr_ll`) to bind a packet socket with:
/// rustix has the packet socket, the interface's index and `bind`, but no
/// address type of this family (nor does socket2, whose `SockAddr` would
/// take two unsafe calls to build one).
struct LinkAddr(libc::sockaddr_ll);

// SAFETY: `with_sockaddr` hands `f` a pointer to the `sockaddr_ll` this
// value owns, alive and unmoved for the whole call, with exactly its size
// as the length; every field was set (no padding is read as an address:
// the kernel takes `sll_family`, `sll_protocol` and `sll_ifindex`, and
// checks the length is at least `sockaddr_ll`'s).
unsafe impl SocketAddrArg for LinkAddr {
    unsafe fn with_sockaddr<R>(
        &self,
        f: impl FnOnce(*const SocketAddrOpaque, SocketAddrLen) -> R,
    ) -> R {
        let len = size_of::<libc::sockaddr_ll>() as SocketAddrLen;
        f(std::ptr::from_ref(&self.0).cast(), len)
    }
}

/// Answers every LACPDU on `socket` until `stop`.
fn answer_lacp(socket: &OwnedFd, port: u16, stop: &AtomicBool) {
    let mut frame = [0u8; 1514];
    while !stop.load(Ordering::Relaxed) {
        let Ok((got, _)) = net::recv(socket, &mut frame[..], RecvFlags::empty()) else {
            continue; // the timeout: look at the stop flag
        };
        let Some(reply) = lacp_reply(&frame[..got], port) else {
            continue;
        };
        if let Err(err) = net::send(socket, &reply, SendFlags::empty()) {
            tracing::warn!(port, "sending an LACPDU: {err}");
        }
    }
}

/// The answer to `frame` if it is an LACPDU (subtype 1): the guest's actor
/// TLV as our partner TLV, our actor `port` of [`PARTNER_SYSTEM`], key 1,
/// state 0x3f (IEEE 802.1AX's layout, Linux's `struct lacpdu`).
fn lacp_reply(frame: &[u8], port: u16) -> Option<Vec<u8>> {
    let payload = frame.get(14..14 + LACPDU_LEN)?;
    let is_lacpdu = frame.get(12..14)? == ETH_P_SLOW.to_be_bytes()
        && payload[0] == 1
        && payload[2] == 1
        && payload[3] == 20;
    if !is_lacpdu {
        return None;
    }
    let mut reply = Vec::with_capacity(14 + LACPDU_LEN);
    reply.extend_from_slice(&frame[0..6]); // 01:80:c2:00:00:02
    reply.extend_from_slice(&PARTNER_SYSTEM);
    reply.extend_from_slice(&ETH_P_SLOW.to_be_bytes());
    let mut pdu = [0u8; LACPDU_LEN];
    pdu[0] = 1; // subtype LACP
    pdu[1] = 1; // version
    pdu[2] = 1; // actor TLV
    pdu[3] = 20;
    pdu[4..6].copy_from_slice(&1u16.to_be_bytes()); // system priority
    pdu[6..12].copy_from_slice(&PARTNER_SYSTEM);
    pdu[12..14].copy_from_slice(&1u16.to_be_bytes()); // key
    pdu[14..16].copy_from_slice(&255u16.to_be_bytes()); // port priority
    pdu[16..18].copy_from_slice(&port.to_be_bytes());
    pdu[18] = 0x3f;
    pdu[22] = 2; // partner TLV: the guest's actor, echoed
    pdu[23] = 20;
    pdu[24..39].copy_from_slice(&payload[4..19]);
    pdu[42] = 3; // collector TLV
    pdu[43] = 16;
    // Terminator (type 0, length 0) and padding: zeros.
    reply.extend_from_slice(&pdu);
    Some(reply)
}

/// A guest shell command printing `counter` (a file of
/// `/sys/class/net/DEV/statistics`) of each of `members` on one line, in
/// their order: run before and after a workload in the same shell line, so
/// nothing the host asks of the guest in between adds to the counts.
pub fn counters_line(members: &[String], counter: &str) -> String {
    format!(
        "for m in {}; do cat /sys/class/net/$m/statistics/{counter}; done | tr '\\n' ' '; echo",
        members.join(" ")
    )
}

/// The rise of each of `members` counters between the two lines of
/// [`counters_line`] the command printed (other lines are passed over).
pub fn counter_rise(output: &str, members: usize) -> anyhow::Result<Vec<u64>> {
    let rows: Vec<Vec<u64>> = output
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<u64>, _>>()
        })
        .filter_map(Result::ok)
        .filter(|row| row.len() == members)
        .collect();
    let [before, after] = rows.as_slice() else {
        bail!("expected two lines of {members} counters, got:\n{output}");
    };
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            a.checked_sub(*b)
                .with_context(|| format!("a member's counter went back: {before:?} → {after:?}"))
        })
        .collect()
}

/// The member the counters name: it sent at least [`MIN_FLOW_PACKETS`],
/// every other at most [`MOST_STRAY_PACKETS`].
fn carrier(rise: &[u64]) -> Option<usize> {
    let (index, &most) = rise.iter().enumerate().max_by_key(|&(_, n)| *n)?;
    let others_quiet = rise
        .iter()
        .enumerate()
        .all(|(i, &n)| i == index || n <= MOST_STRAY_PACKETS);
    (most >= MIN_FLOW_PACKETS && others_quiet).then_some(index)
}

/// The flows as a table: each flow's source port, the member by the
/// counters and by the model, and every member's packets; then the flows
/// per member (by the counters) and how many the model got right.
pub fn render(title: &str, members: &[String], flows: &[BondFlow]) -> String {
    let mut out = format!(
        "{title}\n  flow  source                 counters  model   all up  tx_packets ({})\n",
        members.join(" ")
    );
    for (i, flow) in flows.iter().enumerate() {
        let packets: Vec<String> = flow.tx_packets.iter().map(u64::to_string).collect();
        let _ = writeln!(
            out,
            "  {:>4}  {:<21}  {:<8}  {:<6}  {:<6}  {}{}",
            i + 1,
            format!("{}:{}", flow.tuple.src(), flow.tuple.sport),
            flow.by_counters.as_deref().unwrap_or("unclear"),
            flow.by_model,
            flow.by_model_all_up,
            packets.join(" "),
            if flow.agrees() { "" } else { "  << differs" }
        );
    }
    let counts: Vec<String> = members
        .iter()
        .map(|m| {
            flows
                .iter()
                .filter(|f| f.by_counters.as_deref() == Some(m.as_str()))
                .count()
                .to_string()
        })
        .collect();
    let agree = flows.iter().filter(|f| f.agrees()).count();
    let _ = writeln!(
        out,
        "  {} flows on {} members ({}): {}; {agree} of {} on the model's member",
        flows.len(),
        members.len(),
        members.join(", "),
        counts.join("/"),
        flows.len()
    );
    let moved = flows
        .iter()
        .filter(|f| f.by_model != f.by_model_all_up)
        .count();
    if moved > 0 {
        let _ = writeln!(
            out,
            "  {moved} of {} on another member than with all {} up",
            flows.len(),
            members.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_name_the_member_that_sent_the_flow() {
        let rise = counter_rise("12 40\n390 43\n", 2).expect("two rows");
        assert_eq!(rise, [378, 3]);
        assert_eq!(carrier(&rise), Some(0));
        // Two members busy, or too little sent: no verdict.
        assert_eq!(carrier(&[300, 250]), None);
        assert_eq!(carrier(&[50, 0]), None);
        assert!(counter_rise("12 40\n", 2).is_err());
        assert!(counter_rise("12 40\n11 40\n", 2).is_err());
    }

    /// A guest's LACPDU as the bond sends it (to the slow-protocols group,
    /// from its MAC), and the PDU alone.
    fn lacpdu_frame() -> (Vec<u8>, [u8; LACPDU_LEN]) {
        let mut frame = vec![0x01, 0x80, 0xc2, 0, 0, 2, 0x52, 0x54, 0, 0x5a, 0xb0, 0];
        frame.extend_from_slice(&ETH_P_SLOW.to_be_bytes());
        let mut pdu = [0u8; LACPDU_LEN];
        pdu[..4].copy_from_slice(&[1, 1, 1, 20]);
        pdu[4..19].copy_from_slice(&[
            0xff, 0xff, 0x52, 0x54, 0, 0x5a, 0xb0, 0, 0, 9, 0, 0xff, 0, 1, 0x4d,
        ]);
        frame.extend_from_slice(&pdu);
        (frame, pdu)
    }

    #[test]
    fn lacp_reply_echoes_the_actor_as_partner() {
        let (mut frame, pdu) = lacpdu_frame();
        let reply = lacp_reply(&frame, 3).expect("an LACPDU");
        assert_eq!(reply.len(), 14 + LACPDU_LEN);
        assert_eq!(&reply[..6], &frame[..6]);
        assert_eq!(&reply[14 + 24..14 + 39], &pdu[4..19]);
        assert_eq!(&reply[14 + 16..14 + 19], &[0, 3, 0x3f]);
        // Another slow protocol (a marker, subtype 2) is not answered.
        frame[14] = 2;
        assert!(lacp_reply(&frame, 3).is_none());
    }

    /// The partner's packet sockets on a real wire: an LACPDU sent from one
    /// end of a veth (in a namespace of its own) is answered on the other
    /// end's socket, and the answer arrives back, echoing the actor.
    #[test]
    #[ignore = "kernel: needs root and netns; run as root by `cargo xtask test`"]
    fn the_partner_answers_an_lacpdu_on_a_packet_socket() {
        crate::privilege::require_privileged("the_partner_answers_an_lacpdu_on_a_packet_socket");
        let ns = crate::netns::NetNs::new().expect("a namespace");
        ns.ip([
            "link", "add", "name", "lacpa", "type", "veth", "peer", "name", "lacpb",
        ])
        .expect("a veth");
        for end in ["lacpa", "lacpb"] {
            ns.ip(["link", "set", end, "up"]).expect("up");
        }
        let (partner, guest) = ns
            .run(|| {
                (
                    slow_protocols_socket("lacpa"),
                    slow_protocols_socket("lacpb"),
                )
            })
            .expect("inside the namespace");
        let (partner, guest) = (
            partner.expect("socket on lacpa"),
            guest.expect("socket on lacpb"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let answering = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || answer_lacp(&partner, 7, &stop))
        };
        let (frame, pdu) = lacpdu_frame();
        let mut reply = [0u8; 1514];
        let mut got = None;
        for _ in 0..25 {
            net::send(&guest, &frame, SendFlags::empty()).expect("send an LACPDU");
            if let Ok((len, _)) = net::recv(&guest, &mut reply[..], RecvFlags::empty()) {
                got = Some(len);
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        answering.join().expect("the answering thread");
        let len = got.expect("an answer within 5 s (25 tries of 200 ms)");
        assert_eq!(len, 14 + LACPDU_LEN);
        assert_eq!(&reply[6..12], &PARTNER_SYSTEM, "from the partner");
        assert_eq!(
            &reply[14 + 16..14 + 19],
            &[0, 7, 0x3f],
            "its port and state"
        );
        assert_eq!(&reply[14 + 24..14 + 39], &pdu[4..19], "the actor echoed");
    }
}
