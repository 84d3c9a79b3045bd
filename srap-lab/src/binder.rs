//! SRAP's sender side in the lab: the binder started in the sender namespace
//! (on a pin directory and cgroup of the lab's own, so a real agent on the
//! machine is untouched) and detached when the guard drops.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use srap_daemon::sender::{self, SenderOptions};
use srap_harness::{LAB_PORT_RANGE, names::unique_name, netns::NetNs};
use srap_host::cgroup;

use crate::{direction::Direction, topology::LabNet};

pub struct LabBinder<'a> {
    ns: &'a NetNs,
    pin_dir: PathBuf,
    cgroup: PathBuf,
}

impl<'a> LabBinder<'a> {
    /// Starts the binder in `ns` for flows toward `receiver`.
    pub fn start(
        ns: &'a NetNs,
        model: &srap_common::rss::RssModel,
        receiver: std::net::IpAddr,
    ) -> anyhow::Result<Self> {
        Self::start_both(ns, model, None, receiver)
    }

    /// [`LabBinder::start`], with this host's own NIC planned too when
    /// `local` (a model facing the local end) is given: one port for both.
    pub fn start_both(
        ns: &'a NetNs,
        model: &srap_common::rss::RssModel,
        local: Option<&srap_common::rss::RssModel>,
        receiver: std::net::IpAddr,
    ) -> anyhow::Result<Self> {
        let name = format!("srap-lab-{}", unique_name(""));
        let mount = cgroup::cgroup2_mount()?;
        let guard = Self {
            ns,
            pin_dir: Path::new("/sys/fs/bpf").join(&name),
            cgroup: mount.join(&name),
        };
        let options = SenderOptions {
            targets: sender::Target::all(model, &[receiver]),
            ports: Vec::new(),
            cgroup: Some(guard.cgroup.clone()),
            pin_dir: guard.pin_dir.clone(),
            pacing_rate: None,
            // Leaves the namespace's ephemeral range to the kernel's own flows.
            port_range: Some(LAB_PORT_RANGE.parse().map_err(anyhow::Error::msg)?),
            local: local.map(|l| std::sync::Arc::new(l.clone())),
            local_placement: Default::default(),
            bonds: Default::default(),
            sizes: srap_common::binder::BinderSizes::DEFAULT,
            nics: Default::default(),
            receiver_nics: Default::default(),
            mptcp: Default::default(),
            spread: Vec::new(),
        };
        ns.run(|| sender::start(&options, srap_daemon::ebpf_object()))?
            .context("starting the binder in the sender namespace")?;
        Ok(guard)
    }

    /// The binder for the lab's direction: the receiver's NIC for push,
    /// the sender's own (a model facing the local end) for pull.
    pub fn for_direction(net: &'a LabNet) -> anyhow::Result<Self> {
        use srap_common::rss::End;
        match (net.direction(), net.sender_model()) {
            (Direction::Push, _) => Self::start(&net.hosts.sender, &net.model, net.receiver_ip()),
            (Direction::Pull, Some(model)) => Self::start(
                &net.hosts.sender,
                &model.clone().facing(End::Local),
                net.receiver_ip(),
            ),
            (Direction::Both, Some(model)) => Self::start_both(
                &net.hosts.sender,
                &net.model,
                Some(&model.clone().facing(End::Local)),
                net.receiver_ip(),
            ),
            (direction, None) => {
                anyhow::bail!("--direction {direction:?}: this lab has no sender NIC")
            }
        }
    }

    /// The steered cgroup: `srap exec --cgroup` this.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }
}

impl Drop for LabBinder<'_> {
    fn drop(&mut self) {
        match self.ns.run(|| sender::detach(&self.pin_dir)) {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => eprintln!("lab cleanup: detaching the binder: {err}"),
            Err(err) => eprintln!("lab cleanup: entering the sender namespace: {err:#}"),
        }
    }
}
