//! A sender agent on two hosts joined by a veth: the set-up the binder's
//! tests and the tests of the sender's own NIC (`--steer local|both`)
//! share. The agent is prepared, not started (`launch()`, `once()`), so a
//! test chooses how it runs; the RSS-NIC emulator on either end's egress
//! makes a NIC's receive queues real on the veth.

use anyhow::Context as _;
use srap_common::rss::RssModel;

use crate::{
    agent::{SenderAgent, SenderOpts},
    emulator::Emulator,
    support::TempDir,
    veth::{TwoHosts, VethConfig},
};

/// Field order is drop order: the agent (killed, its binder detached)
/// before the namespaces go, and its files last.
pub struct SenderPair {
    /// The sender agent, in `hosts.sender`.
    pub agent: SenderAgent,
    /// The sender's and the receiver's namespaces and the veth between.
    pub hosts: TwoHosts,
    /// Files the agent is given (`--local-rss`, …), removed last.
    pub files: TempDir,
}

impl SenderPair {
    /// Two hosts on a veth shaped by `shape` (on a leased subnet unless it
    /// names one), a directory for the agent's files, and the sender agent
    /// `opts` makes from them, in the sender's namespace.
    pub fn new(
        shape: VethConfig,
        opts: impl FnOnce(&TwoHosts, &TempDir) -> anyhow::Result<SenderOpts>,
    ) -> anyhow::Result<Self> {
        let hosts = TwoHosts::new(shape).context("two namespaces joined by a veth")?;
        let files = TempDir::new("pair").context("a directory for the agent's files")?;
        let opts = opts(&hosts, &files)?;
        let agent = SenderAgent::new(&hosts.sender, opts).context("a sender agent")?;
        Ok(Self {
            agent,
            hosts,
            files,
        })
    }

    /// The RSS-NIC emulator hashing with `model` on the sender's egress:
    /// the packets toward the receiver reach its receive queues as the
    /// receiver's NIC would put them. Attached while it is held.
    pub fn emulate_receiver_nic(&self, model: &RssModel) -> anyhow::Result<Emulator> {
        let (ns, end) = (&self.hosts.sender, &self.hosts.sender_end);
        let queues = self.hosts.config.tx_queues;
        ns.run(|| Emulator::attach(&end.ifname, model, queues))?
            .context("the receiver's NIC emulated on the sender's egress")
    }

    /// The same on the receiver's egress: the packets coming back reach
    /// the sender's queues as the sender's own NIC would put them.
    pub fn emulate_sender_nic(&self, model: &RssModel) -> anyhow::Result<Emulator> {
        let (ns, end) = (&self.hosts.receiver, &self.hosts.receiver_end);
        let queues = self.hosts.config.tx_queues;
        ns.run(|| Emulator::attach(&end.ifname, model, queues))?
            .context("the sender's NIC emulated on the receiver's egress")
    }

    /// Sets a sysctl in the sender's namespace (`net.ipv4.tcp_tw_reuse`, …).
    pub fn sender_sysctl(&self, name: &str, value: &str) -> anyhow::Result<()> {
        let out = self
            .hosts
            .sender
            .exec("sysctl", ["-qw", &format!("{name}={value}")])?;
        anyhow::ensure!(out.status.success(), "sysctl {name}={value}: {out:?}");
        Ok(())
    }
}
