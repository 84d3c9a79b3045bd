//! Both agents in the lab, as a user runs them on two real hosts: the
//! receiver agent in the receiver namespace (serving the lab NIC's
//! description from a file, with its observer and control socket) and the
//! sender agent in the sender namespace, following it with `--peer`. Both
//! are the harness's agents ([`srap_harness`]). The receiver listens on
//! the lab's address, beyond loopback, so both agents get a key of the
//! lab's own (`--psk-file`, a random key), as two real hosts would.
//! With `--direction pull` the sender plans for its own NIC (`--steer
//! local --local-rss`, the receiver agent's address only naming the
//! destination); with `both`, for both NICs.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use srap_harness::{
    LAB_PORT_RANGE, PEER_PORT, ReceiverAgent, ReceiverOpts, SenderAgent, SenderOpts,
    keyfile::KeyFile, names::unique_name,
};

use crate::{direction::Direction, topology::LabNet};

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
    _local_rss: Option<DescriptionFile>,
}

impl LabAgents {
    /// Starts both agents (`exe` is the `srap-agent` binary); the sender
    /// reports its plan for `report_port`.
    pub fn start(net: &LabNet, exe: &Path, report_port: u16) -> anyhow::Result<Self> {
        Self::launch(
            net,
            exe,
            report_port,
            &Privileges::default(),
            Direction::Push,
            &[],
        )
    }

    /// [`LabAgents::start`] with each agent bounded to `privileges`.
    pub fn start_with(
        net: &LabNet,
        exe: &Path,
        report_port: u16,
        privileges: &Privileges,
    ) -> anyhow::Result<Self> {
        Self::launch(net, exe, report_port, privileges, Direction::Push, &[])
    }

    /// [`LabAgents::start`], the sender steering for `direction` (with a
    /// sender NIC in `net` for pull and both).
    pub fn start_for(
        net: &LabNet,
        exe: &Path,
        report_port: u16,
        direction: Direction,
    ) -> anyhow::Result<Self> {
        Self::launch(
            net,
            exe,
            report_port,
            &Privileges::default(),
            direction,
            &[],
        )
    }

    /// [`LabAgents::start_for`] with `sender_args` added to the sender's
    /// command line (`--local-placement reader`, say).
    pub fn start_for_with(
        net: &LabNet,
        exe: &Path,
        report_port: u16,
        direction: Direction,
        sender_args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::launch(
            net,
            exe,
            report_port,
            &Privileges::default(),
            direction,
            sender_args,
        )
    }

    fn launch(
        net: &LabNet,
        exe: &Path,
        report_port: u16,
        privileges: &Privileges,
        direction: Direction,
        sender_args: &[&str],
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
            .port_range(LAB_PORT_RANGE);
        if direction != Direction::Pull {
            sender = sender.report_port(report_port);
        }
        if let Some(caps) = &privileges.sender {
            sender = sender.capabilities(caps.clone());
        }
        let local_rss = match net.sender_model() {
            Some(model) => {
                let file = DescriptionFile::write(&model.to_description())?;
                sender = sender
                    .args(["--steer", direction.steer(), "--local-rss"])
                    .arg(file.path());
                Some(file)
            }
            None => None,
        };
        let sender = SenderAgent::start(&net.hosts.sender, sender.args(sender_args))?;
        Ok(Self {
            sender,
            receiver,
            key,
            _local_rss: local_rss,
        })
    }
}

/// A description written to a file of its own, removed on drop.
pub struct DescriptionFile {
    path: PathBuf,
}

impl DescriptionFile {
    pub fn write(description: &srap_common::rss::RssDescription) -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("srap-lab-{}.json", unique_name("")));
        std::fs::write(&path, description.to_json_pretty())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DescriptionFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
