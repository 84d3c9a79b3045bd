//! Both agents in the lab, as a user runs them on two real hosts: the
//! receiver agent in the receiver namespace (serving the lab NIC's
//! description from a file, with its verifier and control socket) and the
//! sender agent in the sender namespace, following it with `--peer`. Both
//! are the harness's agents ([`crate::harness`]). The receiver listens on
//! the lab's address, beyond loopback, so both agents get a key of the
//! lab's own (`--psk-file`, a random key), as two real hosts would.

use std::{net::SocketAddr, path::Path};

use anyhow::Context as _;

use crate::{
    LAB_PORT_RANGE,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts},
    keyfile::KeyFile,
    topology::LabNet,
    unique_name,
};

/// The receiver agent's port, on the receiver's lab address only.
pub const PEER_PORT: u16 = 7447;

/// The capabilities each agent is bounded to, as a systemd unit's
/// `CapabilityBoundingSet` bounds it (names as setpriv spells them: `bpf`,
/// `net_admin`); `None`: every capability root has.
#[derive(Debug, Clone, Default)]
pub struct Privileges {
    pub receiver: Option<Vec<String>>,
    pub sender: Option<Vec<String>>,
}

/// Field order is drop order: the sender (and its binder) first, the key
/// file last.
pub struct LabAgents {
    pub sender: SenderAgent,
    pub receiver: ReceiverAgent,
    pub key: KeyFile,
}

impl LabAgents {
    /// Starts both agents (`exe` is the `srap-agent` binary); the sender
    /// reports its plan for `report_port`.
    pub fn start(net: &LabNet, exe: &Path, report_port: u16) -> anyhow::Result<Self> {
        Self::start_with(net, exe, report_port, &Privileges::default())
    }

    /// [`LabAgents::start`] with each agent bounded to `privileges`.
    pub fn start_with(
        net: &LabNet,
        exe: &Path,
        report_port: u16,
        privileges: &Privileges,
    ) -> anyhow::Result<Self> {
        let key =
            KeyFile::create(std::env::temp_dir().join(format!("srap-lab-{}.psk", unique_name(""))))
                .context("writing the lab's key")?;
        let listen = SocketAddr::new(net.receiver_ip(), PEER_PORT);
        let mut receiver = ReceiverOpts::new(exe, &net.hosts.receiver_end.ifname, listen)
            .rss(net.model.to_description())
            .arg("--psk-file")
            .arg(key.path());
        if let Some(caps) = &privileges.receiver {
            receiver = receiver.capabilities(caps.clone());
        }
        let receiver = ReceiverAgent::start(&net.hosts.receiver, receiver)?;
        let mut sender = SenderOpts::new(exe)
            .peer(receiver.peer())
            .arg("--psk-file")
            .arg(key.path())
            .port_range(LAB_PORT_RANGE)
            .report_port(report_port);
        if let Some(caps) = &privileges.sender {
            sender = sender.capabilities(caps.clone());
        }
        let sender = SenderAgent::start(&net.hosts.sender, sender)?;
        Ok(Self {
            sender,
            receiver,
            key,
        })
    }
}
