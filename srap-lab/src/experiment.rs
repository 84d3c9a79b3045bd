//! The paper's experiment: many trials of N concurrent flows, with SRAP and
//! with kernel-chosen ports, judged only by the receive queues the observer
//! observed — at the receiver's NIC, and with `--direction pull|both` at
//! the sender's own NIC (where the packets coming back land).

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    ops::ControlFlow,
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;

use srap_harness::{InCgroup, interrupt::interrupted, poll_until};

use crate::{direction::Direction, report::RunReport, topology::LabNet};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Outcome of many trials of one kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub trials: usize,
    pub collision_free_rate: f64,
    pub mean_busiest: f64,
    /// Flows that landed on the queue the model predicted, of all flows.
    pub prediction_accuracy: f64,
    #[serde(skip)]
    collision_free: usize,
    #[serde(skip)]
    busiest_total: usize,
    #[serde(skip)]
    flows: usize,
    #[serde(skip)]
    predicted_right: usize,
}

impl Tally {
    fn add(&mut self, run: &RunReport) {
        self.trials += 1;
        self.collision_free += usize::from(run.collision_free);
        self.busiest_total += run.busiest;
        self.flows += run.flows.len();
        self.predicted_right += run.predicted_right;
        self.collision_free_rate = self.collision_free as f64 / self.trials as f64;
        self.mean_busiest = self.busiest_total as f64 / self.trials as f64;
        self.prediction_accuracy = self.predicted_right as f64 / self.flows.max(1) as f64;
    }
}

/// One trial judged at each NIC the lab's direction reaches.
#[derive(Debug, Clone)]
pub struct TrialReport {
    /// At the receiver's NIC (push and both).
    pub receiver: Option<RunReport>,
    /// At the sender's own NIC (pull and both).
    pub sender: Option<RunReport>,
}

/// One trial: `flows` connections to a fresh port, opened from the steered
/// cgroup when `cgroup` is given, judged by the observers.
pub fn trial(
    net: &LabNet,
    port: u16,
    flows: usize,
    cgroup: Option<&std::path::Path>,
) -> anyhow::Result<TrialReport> {
    let server = SocketAddr::new(net.receiver_ip(), port);
    let listener = net
        .hosts
        .receiver
        .run(|| TcpListener::bind(server))?
        .with_context(|| format!("listening on {server}"))?;
    let clients = {
        // Sockets join the cgroup their creator is in at creation time.
        let _steered = cgroup.map(InCgroup::enter).transpose()?;
        net.hosts.sender.run(|| connect_all(server, flows))??
    };
    accept_all(&listener, flows)?;
    drop(clients);
    let direction = net.direction();
    let receiver = if direction.reaches_receiver() {
        let records = net.flows_to(port)?;
        check_count("receiver", records.len(), flows, port)?;
        let run = RunReport::judge(&net.model, &records, 0);
        run.require_all(&format!("the receiver's observer, port {port}"), flows)?;
        Some(run)
    } else {
        None
    };
    let sender = match net.sender_model() {
        Some(model) => {
            let records = net.flows_back_from(port)?;
            check_count("sender", records.len(), flows, port)?;
            let run = RunReport::judge_back(model, &records, 0);
            run.require_all(&format!("the sender's observer, port {port}"), flows)?;
            Some(run)
        }
        None => None,
    };
    Ok(TrialReport { receiver, sender })
}

fn check_count(end: &str, seen: usize, flows: usize, port: u16) -> anyhow::Result<()> {
    if seen != flows {
        bail!("the {end}'s observer saw {seen} flows of port {port}, expected {flows}");
    }
    Ok(())
}

fn connect_all(server: SocketAddr, flows: usize) -> anyhow::Result<Vec<TcpStream>> {
    (0..flows)
        .map(|_| {
            let mut stream = TcpStream::connect_timeout(&server, TIMEOUT)
                .with_context(|| format!("connecting to {server}"))?;
            stream.write_all(b"srap lab trial")?;
            Ok(stream)
        })
        .collect()
}

/// Accepts `flows` connections, reads what each sent, and closes it first
/// (the TIME_WAIT lands here, not on the sender's steered ports).
fn accept_all(listener: &TcpListener, flows: usize) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let mut accepted = 0;
    let all = poll_until(TIMEOUT, Duration::from_millis(2), || {
        while accepted < flows {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let read = stream
                        .set_nonblocking(false)
                        .and_then(|()| stream.set_read_timeout(Some(TIMEOUT)))
                        .and_then(|()| stream.read(&mut [0u8; 64]));
                    if let Err(err) = read {
                        return ControlFlow::Break(Err(err.into()));
                    }
                    accepted += 1;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    if interrupted() {
                        return ControlFlow::Break(Err(anyhow!("interrupted")));
                    }
                    return ControlFlow::Continue(());
                }
                Err(err) => return ControlFlow::Break(Err(err).context("accepting")),
            }
        }
        ControlFlow::Break(Ok(()))
    });
    all.unwrap_or_else(|()| {
        Err(anyhow!(
            "only {accepted} of {flows} connections arrived within {TIMEOUT:?}"
        ))
    })
}

/// The experiment's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentReport {
    pub flows: usize,
    pub queues: u32,
    /// At the receiver's NIC (with `--direction pull`, at the sender's).
    pub srap: Tally,
    pub kernel: Tally,
    /// With `--direction both`: the same trials at the sender's own NIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<EndTallies>,
    pub analytic_collision_free: f64,
}

/// Both kinds of trials at one NIC.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EndTallies {
    pub srap: Tally,
    pub kernel: Tally,
}

pub fn run(
    net: &LabNet,
    cgroup: &std::path::Path,
    flows: usize,
    trials: usize,
    queues: u32,
) -> anyhow::Result<ExperimentReport> {
    // The first end judged: the receiver's, or the sender's alone for pull.
    let (mut first, mut second) = (EndTallies::default(), EndTallies::default());
    let add = |tallies: &mut [&mut EndTallies; 2], steered: bool, report: TrialReport| {
        let ends = [report.receiver, report.sender].into_iter().flatten();
        for (tally, run) in tallies.iter_mut().zip(ends) {
            if steered {
                tally.srap.add(&run);
            } else {
                tally.kernel.add(&run);
            }
        }
    };
    for t in 0..trials {
        let port = 20_000 + 2 * t as u16;
        add(
            &mut [&mut first, &mut second],
            true,
            trial(net, port, flows, Some(cgroup))?,
        );
        add(
            &mut [&mut first, &mut second],
            false,
            trial(net, port + 1, flows, None)?,
        );
        tracing::debug!(trial = t, "done");
    }
    Ok(ExperimentReport {
        flows,
        queues,
        srap: first.srap,
        kernel: first.kernel,
        sender: (net.direction() == Direction::Both).then_some(second),
        analytic_collision_free: srap_common::odds::collision_free(flows as u32, queues)?,
    })
}
