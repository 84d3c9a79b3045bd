//! Both agents in the lab, as a user runs them on two real hosts: the
//! receiver agent in the receiver namespace (serving the lab NIC's
//! description from a file, with its verifier and control socket) and the
//! sender agent in the sender namespace, following it with `--peer`. Both
//! are the harness's agents ([`crate::harness`]).

use std::{net::SocketAddr, path::Path};

use crate::{
    LAB_PORT_RANGE,
    harness::{ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts},
    topology::LabNet,
};

/// The receiver agent's port, on the receiver's lab address only.
pub const PEER_PORT: u16 = 7447;

/// Field order is drop order: the sender (and its binder) first.
pub struct LabAgents {
    pub sender: SenderAgent,
    pub receiver: ReceiverAgent,
}

impl LabAgents {
    /// Starts both agents (`exe` is the `srap-agent` binary); the sender
    /// reports its plan for `report_port`.
    pub fn start(net: &LabNet, exe: &Path, report_port: u16) -> anyhow::Result<Self> {
        let listen = SocketAddr::new(net.receiver_ip(), PEER_PORT);
        let receiver = ReceiverAgent::start(
            &net.hosts.receiver,
            ReceiverOpts::new(exe, &net.hosts.receiver_end.ifname, listen)
                .rss(net.model.to_description()),
        )?;
        let sender = SenderAgent::start(
            &net.hosts.sender,
            SenderOpts::new(exe)
                .peer(receiver.peer())
                .port_range(LAB_PORT_RANGE)
                .report_port(report_port),
        )?;
        Ok(Self { sender, receiver })
    }
}
