//! The receiver's status loop: the receive observer on `--iface`, sampled
//! every interval into a [`Status`] (by the pure [`Tracker`]) together with
//! what the server knows (peers, their plans, the version served), and
//! published on a watch channel for the control socket and `/metrics`.
//!
//! Every sample also closes the loop ([`agreement`]): do flows land where
//! the served description says? The verdict is logged when it changes, put
//! in the status and sent to the senders.
//!
//! The observer is optional: `--no-verify` leaves it off, and a failed
//! attach is a warning (the status says why) — serving descriptions to
//! senders matters more than verifying them.

use std::{sync::Arc, time::Duration};

use srap_common::rss::{End, FlowTuple, RssModel};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{
    downstream::unix_ms,
    server::Server,
    source::{LearnedKey, ServedDescription},
};
use srap_status::{FlowRow, Landings, ObserverLimit, ObserverState, ReceiveCpu, Status};

use crate::{
    observer::{FlowRecord, HookChoice, Observer, monotonic_ns},
    tracker::{
        Observation, PlanIndex, Tracker, TrackerConfig,
        agreement::{self, AgreementJudge, Change, LandingVerdict},
        learning::{Landed, Learning},
    },
};

/// Samples the observer and publishes the status.
#[derive(Debug)]
pub struct Monitor {
    iface: String,
    /// The interface's driver, for the contradiction warning.
    driver: Option<String>,
    interval: Duration,
    observer: Option<Observer>,
    state: ObserverState,
    /// The last map-read error, logged once until it changes.
    read_error: Option<String>,
    tracker: Tracker,
    /// The model of the version last seen, rebuilt when the version changes.
    model: Option<(u64, Option<RssModel>)>,
    judge: AgreementJudge,
    /// Which CPU is a flow's receive CPU ([`receive_cpu_of`]).
    receive_cpu: ReceiveCpu,
    learning: Learning,
    /// What the NIC's own hash said, logged once ([`NicHashNotes`]).
    nic_hash: NicHashNotes,
    board: watch::Sender<Arc<Status>>,
}

/// The NIC-hash warnings already given: a differing hash once per
/// description version, a missing one once.
#[derive(Debug, Default)]
struct NicHashNotes {
    differ_version: Option<u64>,
    none_said: bool,
}

/// The receive CPU of `iface`'s flows: the CPU the observer runs on,
/// unless the description comes from a file (`described`) for a device
/// without RSS of its own (a veth, as in the lab), whose queue CPUs are
/// then the description's emulated ones.
pub fn receive_cpu_of(iface: &str, described: bool) -> ReceiveCpu {
    if !described {
        return ReceiveCpu::Observed;
    }
    match srap_host::discovery::discover(iface) {
        Err(srap_host::discovery::DiscoveryError::NoRss { .. }) => {
            info!(
                "{iface} has no RSS of its own: its flows' CPUs are the description's \
                 (emulated, one per queue), not the CPUs the observer runs on"
            );
            ReceiveCpu::Emulated
        }
        _ => ReceiveCpu::Observed,
    }
}

impl Monitor {
    /// Attaches the observer to `iface` on a hook of `verify` (`None`: no
    /// observer) and returns the monitor and the channel its statuses go to.
    /// What the landings teach of the key is served through `learned`.
    pub fn start(
        iface: &str,
        verify: Option<HookChoice>,
        cgroup: Option<&std::path::Path>,
        interval: Duration,
        learned: LearnedKey,
    ) -> (Self, watch::Receiver<Arc<Status>>) {
        let tracking = TrackerConfig::default();
        let (observer, state) = if let Some(hook) = verify {
            match Observer::attach_in(iface, hook, cgroup) {
                Ok(mut observer) => {
                    // Idle flows leave every view after `idle_after`; their
                    // records only cost the walk from then on.
                    observer.forget_after(tracking.idle_after * 2);
                    let hook = observer.hook().to_string();
                    info!(iface, %hook, "verifying where flows land");
                    let limits = observer
                        .limits()
                        .iter()
                        .map(|limit| ObserverLimit {
                            missing: limit.missing.to_owned(),
                            detail: limit.detail.clone(),
                        })
                        .collect();
                    (
                        Some(observer),
                        ObserverState {
                            hook: Some(hook),
                            error: None,
                            limits,
                        },
                    )
                }
                Err(err) => {
                    warn!(
                        "the receive observer is off: {err}; serving senders anyway \
                         (`srap status` will show no flows)"
                    );
                    (
                        None,
                        ObserverState {
                            hook: None,
                            error: Some(err.to_string()),
                            limits: Vec::new(),
                        },
                    )
                }
            }
        } else {
            info!("--no-verify: the receive observer is off");
            (
                None,
                ObserverState {
                    hook: None,
                    error: Some("--no-verify".into()),
                    limits: Vec::new(),
                },
            )
        };
        let initial = Status {
            iface: iface.to_owned(),
            observer: state.clone(),
            interval_ms: millis(interval),
            unix_ms: unix_ms(std::time::SystemTime::now()),
            ..Status::default()
        };
        let (board, rx) = watch::channel(Arc::new(initial));
        (
            Self {
                iface: iface.to_owned(),
                driver: crate::observer::driver(iface),
                interval,
                observer,
                state,
                read_error: None,
                tracker: Tracker::new(tracking),
                model: None,
                judge: AgreementJudge::default(),
                receive_cpu: ReceiveCpu::Observed,
                learning: Learning::new(learned, End::Remote, ""),
                nic_hash: NicHashNotes::default(),
                board,
            },
            rx,
        )
    }

    /// Sets which CPU is a flow's receive CPU (default: observed).
    pub fn set_receive_cpu(&mut self, receive_cpu: ReceiveCpu) {
        self.receive_cpu = receive_cpu;
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Changes the latest status in place (the per-NIC rows added after a
    /// sample).
    pub fn amend(&self, change: impl FnOnce(&mut Status)) {
        self.board
            .send_modify(|status| change(Arc::make_mut(status)));
    }

    /// Takes one sample, publishes it and tells senders its verdict and
    /// their flows.
    pub fn sample(&mut self, server: &Server, published: &ServedDescription) {
        let (report, status) = self.observe(server, published);
        server.publish_landings(report);
        server.publish_seen(&status);
        self.board.send_replace(Arc::new(status));
    }

    /// Takes one sample and publishes it, telling senders nothing: a
    /// further NIC's verifier, whose description no sender plans by.
    pub fn sample_quietly(&mut self, server: &Server, published: &ServedDescription) {
        let (_, status) = self.observe(server, published);
        self.board.send_replace(Arc::new(status));
    }

    /// One sample: the status and the closed loop's report. The sample is
    /// as of the observer's read: its flows are judged active against that
    /// instant and its `unix_ms` names it, however long the rest of the
    /// tick takes (on a loaded host, long enough to call a flow that just
    /// read as active idle, or to stamp data older than the stamp says).
    fn observe(
        &mut self,
        server: &Server,
        published: &ServedDescription,
    ) -> (srap_common::wire::LandingReport, Status) {
        let (read_ns, read_at) = (monotonic_ns(), std::time::SystemTime::now());
        let records = match &mut self.observer {
            Some(observer) => match tokio::task::block_in_place(|| observer.sample()) {
                Ok(records) => {
                    if self.read_error.take().is_some() {
                        info!("reading the observer's flows works again");
                    }
                    records
                }
                Err(err) => {
                    let text = err.to_string();
                    if self.read_error.as_deref() != Some(&text) {
                        warn!("{text}");
                        self.read_error = Some(text);
                    }
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        if self
            .model
            .as_ref()
            .is_none_or(|(v, _)| *v != published.version)
        {
            let model = match RssModel::from_description(&published.description) {
                // Version 0: a NIC with no description, nothing to model.
                Ok(_) if published.version == 0 => None,
                Ok(model) => Some(model),
                Err(err) => {
                    warn!("description version {}: {err}", published.version);
                    None
                }
            };
            self.model = Some((published.version, model));
        }
        let model = self.model.as_ref().and_then(|(_, m)| m.as_ref());
        let plans = server.plans();
        let plans = PlanIndex::new(plans.iter().map(|(_, report)| report));
        let peers = server.peers();
        let agent_links = peers.iter().filter_map(|p| p.addr.parse().ok()).collect();
        let mut status = self.tracker.sample(&Observation {
            now_ns: read_ns,
            records: &records,
            model,
            plans: &plans,
            receive_cpu: self.receive_cpu,
            agent_links: &agent_links,
        });
        status.iface.clone_from(&self.iface);
        // The NIC rows stay until amended: a reader never sees them gone.
        {
            let last = self.board.borrow();
            status.nics.clone_from(&last.nics);
            status.listeners.clone_from(&last.listeners);
        }
        status.observer = ObserverState {
            hook: self.state.hook.clone(),
            error: self.read_error.clone().or_else(|| self.state.error.clone()),
            limits: self.state.limits.clone(),
        };
        status.rss_version = published.version;
        status.unix_ms = unix_ms(read_at);
        status.interval_ms = millis(self.interval);
        status.peers = peers;
        status.access = server.access();
        status.learning = self
            .learning
            .observe(&published.served(), model, &landed(&records));
        status.nic_hash.read = self
            .observer
            .as_ref()
            .is_some_and(|v| v.hook().reads_nic_hash());
        self.nic_hash.say(
            &self.iface,
            self.driver.as_deref(),
            (published.version, model),
            &status,
        );
        status.landings = self.judge_landings(published.version, &status.flows);
        let mut report = self.judge.report();
        if published.key_unknown() {
            // A placeholder key: no sender steers by it until it is learned.
            report.verdict = LandingVerdict::Contradicted;
            status.landings.verdict = LandingVerdict::Contradicted;
        }
        (report, status)
    }
}

/// The records whose receive queue the observer saw, as the learner
/// takes them.
fn landed(records: &[FlowRecord]) -> Vec<Landed> {
    records
        .iter()
        .filter_map(|r| {
            Some(Landed {
                src: r.src,
                dst: r.dst,
                queue: r.stats.rx_queue()?,
            })
        })
        .collect()
}

impl Monitor {
    /// The closed loop: judges the sample's flows against the served
    /// description and says so when the verdict changes.
    fn judge_landings(&mut self, version: u64, flows: &[FlowRow]) -> Landings {
        let change = self.judge.observe(version, flows);
        let report = self.judge.report();
        let counts = format!(
            "{} of the last {} flows on the queue it computes",
            report.matched, report.judged
        );
        match change {
            Change::To(LandingVerdict::Contradicted) => warn!(
                "where flows land contradicts RSS description version {version} ({counts}); \
                 telling senders to stop steering; {}",
                agreement::likely_causes(&self.iface, self.driver.as_deref())
            ),
            Change::To(LandingVerdict::Agreed) => {
                info!("flows land where RSS description version {version} says ({counts})");
            }
            // The judge never says TupleRewritten: sessions do, per peer.
            Change::To(LandingVerdict::Unknown | LandingVerdict::TupleRewritten) | Change::None => {
            }
        }
        Landings {
            verdict: report.verdict,
            matched: report.matched,
            judged: report.judged,
        }
    }
}

impl NicHashNotes {
    /// Says once what the NIC's own hash shows: a flow whose hash differs
    /// from the model's (the key or the hashed fields are not the device's),
    /// or a tc hook that gets no hash at all (the driver hands none over).
    fn say(
        &mut self,
        iface: &str,
        driver: Option<&str>,
        (version, model): (u64, Option<&RssModel>),
        status: &Status,
    ) {
        let counts = status.nic_hash;
        if counts.read && counts.agree + counts.differ == 0 && counts.none > 0 {
            if !std::mem::replace(&mut self.none_said, true) {
                warn!(
                    "no hash from the NIC: {iface} hands the observer skb->hash 0, so the \
                     NIC's own hash cannot check the key; `ethtool -K {iface} rxhash on` \
                     hands it over (SRAP observes and does not change the device)"
                );
            }
            return;
        }
        let differing = status
            .flows
            .iter()
            .find(|f| f.nic_hash_agrees == Some(false));
        let (Some(flow), Some(model)) = (differing, model) else {
            return;
        };
        if self.differ_version.replace(version) == Some(version) {
            return;
        }
        let ours = FlowTuple::from_sockets(flow.src, flow.dst)
            .map(|tuple| format!("{:#010x}", model.hash(&tuple)))
            .unwrap_or_else(|_| "-".to_owned());
        let why = match driver.filter(|d| agreement::NO_RSS_DRIVERS.contains(d)) {
            Some(driver) => format!(
                "{iface} is a {driver} device, which does no RSS: the hash it carries was set \
                 by the sending side (its socket's tx hash, or the lab's emulator), not by a NIC"
            ),
            None => format!(
                "the key (or the hashed fields) of description version {version} is not what \
                 {iface} hashes with"
            ),
        };
        warn!(
            "the NIC's own hash contradicts the RSS description: {} of {} flows differ; \
             {} -> {}: NIC {:#010x}, the key gives {ours}; {why}",
            counts.differ,
            counts.agree + counts.differ,
            flow.src,
            flow.dst,
            flow.nic_hash.unwrap_or_default(),
        );
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
