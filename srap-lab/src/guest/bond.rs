//! A Linux bond in the guest: `bond0` over the guest's virtio-net NICs in
//! `balance-xor` with `xmit_hash_policy=layer3+4`, each NIC on its own tap
//! of a [`GuestNet::bonded`] bridge. The host's kernel has no bonding; the
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
    time::Duration,
};

use anyhow::{Context as _, bail};
use srap_common::{bond::member_index, rss::FlowTuple};

use super::{Guest, GuestNet};
use crate::readers::{DataSource, Transfer};

/// The most members a bonded guest takes (each a PCI NIC of its own).
pub const MOST_MEMBERS: u32 = 8;

/// The bond, inside the guest.
pub const BOND: &str = "bond0";

/// What each flow sends: with segmentation offloads off on the bond, several
/// hundred packets (about 480 seen here), far above the odd ARP or neighbour probe a member
/// sends meanwhile, and a fraction of a second even under emulation.
pub const FLOW_BYTES: u64 = 512 * 1024;

/// The least a flow's member must have sent for the counters to name it:
/// most of the flow's packets (a 512 KB flow sent 380 to 520 here).
const MIN_FLOW_PACKETS: u64 = 200;

/// The most any other member may send meanwhile (ARP, a stray ACK of an
/// earlier flow): well below a flow.
const MOST_STRAY_PACKETS: u64 = 20;

/// The host's sink for the flows, in the test namespace.
const SINK_PORT: u16 = 7610;

/// How long one flow may take: a connection and half a megabyte.
const FLOW_TIMEOUT: Duration = Duration::from_secs(60);

/// `bond0` in the guest, made by [`GuestBond::create`].
#[derive(Debug)]
pub struct GuestBond {
    /// The guest's NICs, in the order they were enslaved.
    pub enslaved: Vec<String>,
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
    pub fn create(guest: &mut Guest, net: &GuestNet, order: &[u32]) -> anyhow::Result<Self> {
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
        guest.run(&format!(
            "echo +{BOND} > /sys/class/net/bonding_masters && echo balance-xor > {sys}/mode \
             && echo layer3+4 > {sys}/xmit_hash_policy && echo 100 > {sys}/miimon"
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
        let bond = Self { enslaved };
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
        Ok(bond)
    }

    /// `bond0`'s slaves as the driver lists them: enslavement order.
    pub fn slaves(&self, guest: &mut Guest) -> anyhow::Result<Vec<String>> {
        let text = guest.read(&format!("cat /sys/class/net/{BOND}/bonding/slaves"))?;
        Ok(text.split_whitespace().map(str::to_owned).collect())
    }

    /// The members that can transmit: the slaves, in enslavement order,
    /// whose MII status is up (`balance-xor`'s usable set).
    pub fn usable(&self, guest: &mut Guest) -> anyhow::Result<Vec<String>> {
        let slaves = self.slaves(guest)?;
        let status = guest.read(&format!(
            "for m in {}; do echo $m $(cat /sys/class/net/$m/bonding_slave/mii_status); done",
            slaves.join(" ")
        ))?;
        Ok(status
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, state)| state.trim() == "up")
            .map(|(member, _)| member.to_owned())
            .collect())
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
        Ok(())
    }

    /// Sends one flow from the guest to a sink beside the taps: its tuple
    /// as the sink accepted it, the members' `tx_packets` around it, and the
    /// member the model picks among the members usable now.
    pub fn send_flow(&self, guest: &mut Guest, net: &GuestNet) -> anyhow::Result<BondFlow> {
        let usable = self.usable(guest)?;
        let slaves = self.slaves(guest)?;
        let sink_addr = SocketAddr::new(IpAddr::V4(net.host_ip), SINK_PORT);
        let sink = DataSource::start_for(&net.ns, sink_addr, 1, 0, None, Transfer::Upload)?;
        // One shell line: the counters, the flow, the counters — nothing
        // of the host's in between to add packets.
        let counters = format!(
            "for m in {}; do cat /sys/class/net/$m/statistics/tx_packets; done | tr '\\n' ' '; echo",
            slaves.join(" ")
        );
        let line = format!(
            "{counters}; head -c {FLOW_BYTES} /dev/zero | nc -w 20 {} {SINK_PORT}; rc=$?; \
             {counters}; exit $rc",
            net.host_ip
        );
        let output = guest.run(&line).context("sending a flow over the bond")?;
        let ports = sink.finish(FLOW_TIMEOUT)?;
        let &[port] = ports.as_slice() else {
            bail!("the sink accepted {ports:?}, not one flow");
        };
        let tx_packets = counter_rise(&output, slaves.len())?;
        let tuple = FlowTuple::new(
            IpAddr::V4(net.guest_ip),
            port,
            IpAddr::V4(net.host_ip),
            SINK_PORT,
        )?;
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

/// The rise of each of `members` counters between the two lines the flow's
/// command printed.
fn counter_rise(output: &str, members: usize) -> anyhow::Result<Vec<u64>> {
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
        bail!("expected two lines of {members} tx_packets counters, got:\n{output}");
    };
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            a.checked_sub(*b)
                .with_context(|| format!("a tx_packets counter went back: {before:?} → {after:?}"))
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
}
