//! The follow loop's transitions, each judged by the state and the actions
//! it leaves (no binder, no sockets).

use std::{net::IpAddr, sync::Arc};

use srap_common::{
    binder::BinderSizes,
    rss::{KeyProvenance, RssDescription, RssModel, embedded_default},
    wire::{CpuGrant, LandingReport, LandingVerdict},
};

use super::{Action, Event, Machine, Peer, Undo, Why};
use crate::{
    receiver_client::{PeerStatus, Update},
    sender::{
        follow::events::{Event as PeerEvent, What},
        options::SenderOptions,
    },
};

const A: &str = "10.0.0.1:7447";
const B: &str = "10.0.0.2:7447";

fn ip(text: &str) -> IpAddr {
    text.parse().expect("a test address")
}

fn options() -> SenderOptions {
    SenderOptions {
        targets: Vec::new(),
        ports: Vec::new(),
        cgroup: None,
        pin_dir: "/nonexistent/srap-test".into(),
        pacing_rate: None,
        port_range: None,
        local: None,
        local_placement: Default::default(),
        bonds: Default::default(),
        sizes: BinderSizes::default(),
        nics: Default::default(),
        receiver_nics: Default::default(),
        mptcp: Default::default(),
        spread: Vec::new(),
    }
}

/// The embedded 32-queue description.
fn first_nic() -> RssDescription {
    embedded_default()
}

/// Another NIC: the same key, every flow on the first 8 queues.
fn second_nic() -> RssDescription {
    let mut description = embedded_default();
    for (n, entry) in description.indir.iter_mut().enumerate() {
        *entry = (n % 8) as u32;
    }
    description
}

/// A description no model can be made of (no indirection table).
fn broken_nic() -> RssDescription {
    let mut description = embedded_default();
    description.indir.clear();
    description
}

fn update(version: u64, description: RssDescription) -> Update {
    Update {
        version,
        description,
        key: KeyProvenance::default(),
    }
}

fn model(description: &RssDescription) -> Arc<RssModel> {
    Arc::new(RssModel::from_description(description).expect("a valid test description"))
}

fn grant(epoch: u64, cpus: &[u32]) -> CpuGrant {
    CpuGrant::uncontended(epoch, cpus.iter().copied())
}

fn landing(version: u64, verdict: LandingVerdict) -> LandingReport {
    LandingReport {
        version,
        verdict,
        matched: 1,
        judged: 10,
    }
}

fn peer(peer: usize, what: What) -> Event {
    Event::Peer(PeerEvent { peer, what })
}

/// Receiver A at rows 1 and 2, receiver B at row 3, nothing heard yet.
fn two_receivers() -> Machine {
    let a = Peer::new(A.into(), vec![(1, ip("10.0.0.1")), (2, ip("10.0.1.1"))]);
    let b = Peer::new(B.into(), vec![(3, ip("10.0.0.2"))]);
    Machine::new(vec![a, b], options())
}

/// [`two_receivers`] started with A's version 1 of [`first_nic`].
fn started() -> Machine {
    let mut machine = two_receivers();
    machine.on(peer(0, What::Update(update(1, first_nic()))));
    assert_eq!(machine.start(), vec![Action::AfterReplan { first: true }]);
    machine
}

fn target_rows(machine: &Machine) -> Vec<u32> {
    machine.options.targets.iter().map(|t| t.index).collect()
}

#[test]
fn before_the_binder_a_description_is_only_kept_and_said() {
    let mut machine = two_receivers();
    let grant = grant(1, &[0, 1]);
    assert!(machine.on(peer(0, What::Grant(grant.clone()))).is_empty());
    let landed = landing(1, LandingVerdict::Contradicted);
    assert!(machine.on(peer(0, What::Landing(landed))).is_empty());
    let actions = machine.on(peer(0, What::Update(update(1, first_nic()))));
    assert_eq!(
        actions,
        vec![Action::Say(format!(
            "receiver description version 1 from {A}"
        ))]
    );
    assert_eq!(target_rows(&machine), vec![1, 2]);
    assert_eq!(machine.peers[0].granted, Some(grant));
    assert!(
        !machine.peers[0].paused,
        "a landing before the plan is moot"
    );
}

#[test]
fn a_status_before_the_binder_is_kept_without_saying_away() {
    let mut machine = two_receivers();
    machine.on(peer(0, What::Status(PeerStatus::Away("refused".into()))));
    assert_eq!(machine.peers[0].status, PeerStatus::Away("refused".into()));
    assert!(!machine.peers[0].away);
}

#[test]
fn the_same_description_again_is_reported_not_planned() {
    let mut machine = started();
    let model = machine.peers[0].model.clone().expect("planned");
    let actions = machine.on(peer(0, What::Update(update(2, first_nic()))));
    assert_eq!(actions, vec![Action::ReportPlan(0)]);
    assert_eq!(
        machine.peers[0].current.as_ref().map(|c| c.version),
        Some(2)
    );
    let now = machine.peers[0].model.clone().expect("planned");
    assert!(Arc::ptr_eq(&model, &now), "the model is kept");
}

#[test]
fn a_new_description_version_is_planned_with_a_new_model() {
    let mut machine = started();
    let old = machine.peers[0].model.clone().expect("planned");
    let actions = machine.on(peer(0, What::Update(update(2, second_nic()))));
    assert_eq!(
        actions,
        vec![
            Action::Replan(Why::Description {
                peer: 0,
                version: 2
            }),
            Action::AfterReplan { first: false },
        ]
    );
    let new = machine.peers[0].model.clone().expect("planned");
    assert!(!Arc::ptr_eq(&old, &new));
    assert!(
        machine
            .options
            .targets
            .iter()
            .all(|t| Arc::ptr_eq(&t.model, &new)),
        "the targets plan with the new model"
    );
}

#[test]
fn a_description_that_makes_no_model_keeps_the_last_plan() {
    let mut machine = started();
    let actions = machine.on(peer(0, What::Update(update(2, broken_nic()))));
    assert_eq!(actions, vec![Action::ReportPlan(0)]);
    assert_eq!(
        machine.peers[0].current.as_ref().map(|c| c.version),
        Some(1)
    );
    assert_eq!(target_rows(&machine), vec![1, 2]);
}

#[test]
fn a_second_receivers_first_description_joins_the_plan() {
    let mut machine = started();
    let actions = machine.on(peer(1, What::Update(update(1, first_nic()))));
    assert_eq!(
        actions,
        vec![
            Action::Say(format!("receiver description version 1 from {B}")),
            Action::Replan(Why::Description {
                peer: 1,
                version: 1
            }),
            Action::AfterReplan { first: false },
        ]
    );
    assert_eq!(target_rows(&machine), vec![1, 2, 3]);
    let (a, b) = (&machine.peers[0].model, &machine.peers[1].model);
    assert!(
        matches!((a, b), (Some(a), Some(b)) if Arc::ptr_eq(a, b)),
        "equal descriptions share one model (and layout)"
    );
}

#[test]
fn a_receiver_away_and_back_keeps_its_plan() {
    let mut machine = started();
    let away = PeerStatus::Away("connection reset".into());
    assert!(machine.on(peer(0, What::Status(away.clone()))).is_empty());
    assert!(machine.peers[0].away);
    assert_eq!(
        machine.peers[0].last_reason.as_deref(),
        Some("connection reset")
    );
    // Reconnection attempts neither end the absence nor touch the plan.
    machine.on(peer(0, What::Status(PeerStatus::Connecting)));
    assert!(machine.peers[0].away);
    let again = PeerStatus::Away("refused".into());
    machine.on(peer(0, What::Status(again.clone())));
    assert_eq!(machine.peers[0].status, again);
    assert_eq!(machine.peers[0].last_reason.as_deref(), Some("refused"));
    assert_eq!(target_rows(&machine), vec![1, 2]);
    assert!(
        machine
            .on(peer(0, What::Status(PeerStatus::Connected)))
            .is_empty()
    );
    assert!(!machine.peers[0].away);
    assert_eq!(machine.peers[0].status, PeerStatus::Connected);
}

#[test]
fn a_grant_is_applied_once_and_the_demand_told_each_time() {
    let mut machine = started();
    let first = grant(1, &[0, 1, 2, 3]);
    let actions = machine.on(peer(0, What::Grant(first.clone())));
    assert_eq!(
        actions,
        vec![Action::ApplyGrant(0), Action::ReportDemand(0)]
    );
    let actions = machine.on(peer(0, What::Grant(first)));
    assert_eq!(actions, vec![Action::ReportDemand(0)]);
}

#[test]
fn a_shrunk_grant_replaces_the_last() {
    let mut machine = started();
    machine.on(peer(0, What::Grant(grant(1, &[0, 1, 2, 3]))));
    let shrunk = grant(2, &[0]);
    let actions = machine.on(peer(0, What::Grant(shrunk.clone())));
    assert_eq!(
        actions,
        vec![Action::ApplyGrant(0), Action::ReportDemand(0)]
    );
    assert_eq!(machine.peers[0].granted, Some(shrunk));
}

#[test]
fn a_grant_without_a_plan_is_kept_for_later() {
    let mut machine = started();
    let early = grant(1, &[4]);
    assert!(machine.on(peer(1, What::Grant(early.clone()))).is_empty());
    assert_eq!(machine.peers[1].granted, Some(early));
}

#[test]
fn contradicting_landings_pause_the_receiver_and_probe_it() {
    let mut machine = started();
    let report = landing(1, LandingVerdict::Contradicted);
    let actions = machine.on(peer(0, What::Landing(report)));
    assert_eq!(
        actions,
        vec![
            Action::Dests {
                undo: Undo::Landing {
                    peer: 0,
                    was: false
                }
            },
            Action::SayLanding { peer: 0, report },
            Action::Probe(0),
        ]
    );
    assert!(machine.peers[0].paused);
    assert_eq!(
        machine.paused_rows().into_iter().collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(
        machine.on(peer(0, What::Landing(report))).is_empty(),
        "the same verdict changes nothing"
    );
}

#[test]
fn agreement_resumes_a_paused_receiver_without_a_probe() {
    let mut machine = started();
    machine.on(peer(
        0,
        What::Landing(landing(1, LandingVerdict::Contradicted)),
    ));
    let report = landing(1, LandingVerdict::Agreed);
    let actions = machine.on(peer(0, What::Landing(report)));
    assert_eq!(
        actions,
        vec![
            Action::Dests {
                undo: Undo::Landing { peer: 0, was: true }
            },
            Action::SayLanding { peer: 0, report },
        ]
    );
    assert!(!machine.peers[0].paused);
    assert!(machine.paused_rows().is_empty());
}

#[test]
fn a_rewritten_tuple_pauses_without_a_probe() {
    let mut machine = started();
    let report = landing(1, LandingVerdict::TupleRewritten);
    let actions = machine.on(peer(0, What::Landing(report)));
    assert!(machine.peers[0].paused);
    assert!(!actions.contains(&Action::Probe(0)));
}

#[test]
fn stale_or_unknown_landings_change_nothing() {
    let mut machine = started();
    let stale = landing(7, LandingVerdict::Contradicted);
    assert!(machine.on(peer(0, What::Landing(stale))).is_empty());
    let unknown = landing(1, LandingVerdict::Unknown);
    assert!(machine.on(peer(0, What::Landing(unknown))).is_empty());
    assert!(!machine.peers[0].paused);
}

#[test]
fn a_failed_refill_takes_the_pause_back() {
    let mut machine = started();
    machine.on(peer(
        0,
        What::Landing(landing(1, LandingVerdict::Contradicted)),
    ));
    machine.undo(Undo::Landing {
        peer: 0,
        was: false,
    });
    assert!(!machine.peers[0].paused);
    assert!(machine.paused_rows().is_empty());
}

#[test]
fn a_new_description_resumes_a_paused_receiver() {
    let mut machine = started();
    machine.on(peer(
        0,
        What::Landing(landing(1, LandingVerdict::Contradicted)),
    ));
    let actions = machine.on(peer(0, What::Update(update(2, second_nic()))));
    assert!(
        !machine.peers[0].paused,
        "its new description gets its own verdict"
    );
    let said: Vec<&String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Say(line) => Some(line),
            _ => None,
        })
        .collect();
    assert_eq!(said.len(), 1, "{actions:?}");
    assert!(said[0].starts_with("steering resumed"), "{said:?}");
}

#[test]
fn a_new_description_of_a_steered_receiver_says_no_resume() {
    let mut machine = started();
    let actions = machine.on(peer(0, What::Update(update(2, second_nic()))));
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Say(_))),
        "{actions:?}"
    );
}

/// [`started`] with this host's NIC in the plan (`--steer both`).
fn started_both() -> (Machine, Arc<RssModel>) {
    let local = model(&first_nic());
    let mut options = options();
    options.local = Some(local.clone());
    let a = Peer::new(A.into(), vec![(1, ip("10.0.0.1"))]);
    let mut machine = Machine::new(vec![a], options);
    machine.on(peer(0, What::Update(update(1, first_nic()))));
    machine.start();
    (machine, local)
}

#[test]
fn a_learned_local_key_is_planned_with_when_in_force() {
    let (mut machine, _) = started_both();
    let learned = model(&second_nic());
    let actions = machine.on(Event::LocalKey(learned.clone()));
    assert_eq!(
        actions,
        vec![
            Action::Replan(Why::LocalKey),
            Action::AfterReplan { first: false }
        ]
    );
    assert!(matches!(&machine.options.local, Some(m) if Arc::ptr_eq(m, &learned)));
    assert!(matches!(&machine.both, Some(m) if Arc::ptr_eq(m, &learned)));
}

#[test]
fn local_landings_that_contradict_plan_without_this_nic() {
    let (mut machine, local) = started_both();
    let actions = machine.on(Event::LocalVerdict(true));
    assert_eq!(
        actions,
        vec![
            Action::PlanLocal { pause: true },
            Action::SetLocalPaused(true),
            Action::AfterReplan { first: false },
        ]
    );
    assert!(machine.options.local.is_none());
    let actions = machine.on(Event::LocalVerdict(false));
    assert_eq!(actions[0], Action::PlanLocal { pause: false });
    assert!(matches!(&machine.options.local, Some(m) if Arc::ptr_eq(m, &local)));
}

#[test]
fn a_key_learned_while_paused_waits_for_the_resume() {
    let (mut machine, _) = started_both();
    machine.on(Event::LocalVerdict(true));
    let learned = model(&second_nic());
    assert!(machine.on(Event::LocalKey(learned.clone())).is_empty());
    assert!(machine.options.local.is_none(), "still paused");
    machine.on(Event::LocalVerdict(false));
    assert!(matches!(&machine.options.local, Some(m) if Arc::ptr_eq(m, &learned)));
}

#[test]
fn a_failed_local_plan_takes_the_verdict_back() {
    let (mut machine, local) = started_both();
    machine.on(Event::LocalVerdict(true));
    machine.undo(Undo::LocalPause { pause: true });
    assert!(matches!(&machine.options.local, Some(m) if Arc::ptr_eq(m, &local)));
    machine.on(Event::LocalVerdict(false));
    machine.undo(Undo::LocalPause { pause: false });
    assert!(machine.options.local.is_none());
}

#[test]
fn without_this_nic_planned_its_verdict_is_ignored() {
    let mut machine = started();
    assert!(machine.on(Event::LocalVerdict(true)).is_empty());
    assert!(machine.on(Event::LocalKey(model(&first_nic()))).is_empty());
    assert!(machine.options.local.is_none());
}

#[test]
fn a_name_that_resolves_elsewhere_is_planned_for() {
    let mut machine = started();
    machine.peers[0].follows_name = true;
    let now = vec![ip("10.0.1.1"), ip("10.0.2.1")];
    let actions = machine.on(Event::Resolved(vec![(0, now)]));
    assert_eq!(
        actions,
        vec![
            Action::Say(format!("{A} now resolves to 10.0.2.1 10.0.1.1")),
            Action::Replan(Why::Addresses),
            Action::AfterReplan { first: false },
        ]
    );
    // The kept address keeps row 2; the new one takes row 1 (B holds 3).
    assert_eq!(
        machine.peers[0].rows,
        vec![(1, ip("10.0.2.1")), (2, ip("10.0.1.1"))]
    );
    let targets: Vec<(u32, IpAddr)> = machine
        .options
        .targets
        .iter()
        .map(|t| (t.index, t.addr))
        .collect();
    assert_eq!(targets, machine.peers[0].rows, "the plan follows the name");
}

#[test]
fn unchanged_empty_or_unfollowed_answers_change_nothing() {
    let mut machine = started();
    let same = vec![ip("10.0.0.1"), ip("10.0.1.1")];
    assert!(
        machine
            .on(Event::Resolved(vec![(0, vec![ip("10.0.9.9")])]))
            .is_empty(),
        "an address given as one is not followed"
    );
    machine.peers[0].follows_name = true;
    assert!(machine.on(Event::Resolved(vec![(0, same)])).is_empty());
    assert!(
        machine
            .on(Event::Resolved(vec![(0, Vec::new())]))
            .is_empty()
    );
    assert_eq!(target_rows(&machine), vec![1, 2]);
}

#[test]
fn the_demand_goes_to_planned_receivers_only() {
    let mut machine = started();
    assert_eq!(machine.on(Event::DemandTick), vec![Action::ReportDemand(0)]);
    machine.on(peer(1, What::Update(update(1, second_nic()))));
    assert_eq!(
        machine.on(Event::DemandTick),
        vec![Action::ReportDemand(0), Action::ReportDemand(1)]
    );
}

#[test]
fn the_wait_names_each_receiver_and_its_link() {
    let mut machine = two_receivers();
    machine.on(peer(1, What::Status(PeerStatus::Away("refused".into()))));
    assert_eq!(machine.names(), format!("{A}, {B}"));
    assert_eq!(
        machine.statuses(),
        format!("receiver {A}: connecting; receiver {B}: last attempt: refused")
    );
}

/// Receiver B's report: NIC eth0 holds 10.0.0.2 (asked), eth1 holds
/// 10.0.9.2 with the [`second_nic`] description and `link`; port 5201 is
/// accepted on both.
fn b_nics(link: srap_common::wire::NicLink) -> srap_common::wire::ReceiverNics {
    use srap_common::wire::{NicInfo, NicLink, PortAcceptance, ReceiverNics};
    let nic = |name: &str, addr: &str, link, description: Option<RssDescription>| NicInfo {
        name: name.into(),
        addrs: vec![ip(addr)],
        numa_node: None,
        link,
        speed_mbps: None,
        description: description.as_ref().map(Into::into),
        verifier: None,
        cpus: vec![0, 1],
    };
    ReceiverNics {
        nics: vec![
            nic("eth0", "10.0.0.2", NicLink::Up, None),
            nic("eth1", "10.0.9.2", link, Some(second_nic())),
        ],
        ports: vec![PortAcceptance {
            port: 5201,
            addrs: vec![ip("10.0.0.2"), ip("10.0.9.2")],
        }],
    }
}

/// [`started`] under `--receiver-nics spread`, B described too.
fn spreading() -> Machine {
    let mut machine = two_receivers();
    machine.options.receiver_nics = crate::sender::spread::ReceiverNicsMode::Spread;
    machine.on(peer(0, What::Update(update(1, first_nic()))));
    machine.on(peer(1, What::Update(update(1, first_nic()))));
    machine.start();
    machine
}

#[test]
fn under_spread_each_accepting_address_is_planned_on_its_own_row_with_its_nics_model() {
    use srap_common::wire::NicLink;
    let mut machine = spreading();
    let actions = machine.on(peer(1, What::Nics(b_nics(NicLink::Up))));
    assert_eq!(
        actions,
        vec![
            Action::Replan(Why::Nics { peer: 1 }),
            Action::AfterReplan { first: false },
        ]
    );
    assert_eq!(
        machine.peers[1].extra,
        vec![(4, ip("10.0.9.2"))],
        "a free row"
    );
    let second = machine
        .options
        .targets
        .iter()
        .find(|t| t.addr == ip("10.0.9.2"))
        .expect("the second address is a target");
    assert_eq!(second.index, 4);
    assert_eq!(second.model.indir(), model(&second_nic()).indir(), "eth1's");
    assert_eq!(machine.options.spread.len(), 1);
    assert_eq!(machine.options.spread[0].asked, [ip("10.0.0.2")]);

    // A new verdict or CPU list plans nothing; a NIC gone down does.
    let mut verdict = b_nics(NicLink::Up);
    verdict.nics[1].cpus = vec![1];
    assert!(machine.on(peer(1, What::Nics(verdict))).is_empty());
    let down = machine.on(peer(1, What::Nics(b_nics(NicLink::Down))));
    assert_eq!(down.first(), Some(&Action::Replan(Why::Nics { peer: 1 })));
}

#[test]
fn under_asked_a_nic_report_is_only_kept() {
    use srap_common::wire::NicLink;
    let mut machine = started();
    machine.on(peer(1, What::Update(update(1, first_nic()))));
    assert!(
        machine
            .on(peer(1, What::Nics(b_nics(NicLink::Up))))
            .is_empty()
    );
    assert!(machine.peers[1].nics.is_some());
    assert!(machine.peers[1].extra.is_empty());
    assert!(
        machine
            .options
            .targets
            .iter()
            .all(|t| t.addr != ip("10.0.9.2"))
    );
}

/// B's grant on eth0 (CPUs 0-1) and on eth1 (CPUs 6-7), epoch 9.
fn b_nic_grants() -> srap_common::wire::NicGrants {
    use srap_common::wire::{CpuCount, NicGrant, NicGrants};
    let cpus = |list: &[u32]| -> Vec<CpuCount> {
        list.iter()
            .map(|cpu| CpuCount {
                cpu: *cpu,
                count: 0,
            })
            .collect()
    };
    NicGrants {
        epoch: 9,
        nics: vec![
            NicGrant {
                name: "eth0".into(),
                cpus: cpus(&[0, 1]),
            },
            NicGrant {
                name: "eth1".into(),
                cpus: cpus(&[6, 7]),
            },
        ],
    }
}

fn granted_cpus(grant: Option<&CpuGrant>) -> Vec<u32> {
    grant.map_or_else(Vec::new, |g| g.cpus.iter().map(|c| c.cpu).collect())
}

#[test]
fn each_row_takes_the_grant_of_the_nic_its_address_is_on() {
    use srap_common::wire::NicLink;
    let mut machine = spreading();
    machine.on(peer(1, What::Nics(b_nics(NicLink::Up))));
    machine.on(peer(1, What::Grant(grant(8, &[0, 1]))));
    // Before grants per NIC: the one grant on both of B's rows.
    let one = machine.peers[1].row_grants();
    assert_eq!(granted_cpus(one[&3].as_ref()), [0, 1]);
    assert_eq!(granted_cpus(one[&4].as_ref()), [0, 1]);

    let actions = machine.on(peer(1, What::NicGrants(Some(b_nic_grants()))));
    assert_eq!(
        actions,
        vec![Action::ApplyGrant(1), Action::ReportDemand(1)]
    );
    let rows = machine.peers[1].row_grants();
    assert_eq!(
        granted_cpus(rows[&3].as_ref()),
        [0, 1],
        "10.0.0.2 is eth0's"
    );
    assert_eq!(
        granted_cpus(rows[&4].as_ref()),
        [6, 7],
        "10.0.9.2 is eth1's"
    );
    assert_eq!(rows[&4].as_ref().map(|g| g.epoch), Some(9));
    // The same grants again change nothing.
    assert!(
        machine
            .on(peer(1, What::NicGrants(Some(b_nic_grants()))))
            .is_empty()
    );
    // A new session (grants per NIC not told yet, or an older receiver):
    // the one grant on every row again.
    assert_eq!(
        machine.on(peer(1, What::NicGrants(None))),
        vec![Action::ApplyGrant(1), Action::ReportDemand(1)]
    );
    let back = machine.peers[1].row_grants();
    assert_eq!(granted_cpus(back[&4].as_ref()), [0, 1]);
}

#[test]
fn grants_per_nic_before_the_binder_are_kept_for_its_first_plan() {
    let mut machine = two_receivers();
    assert!(
        machine
            .on(peer(1, What::NicGrants(Some(b_nic_grants()))))
            .is_empty()
    );
    assert_eq!(machine.peers[1].nic_granted, Some(b_nic_grants()));
    // Without its NIC report no address is known to be eth1's: the one
    // grant (none yet) stands.
    assert_eq!(machine.peers[1].grant_for(ip("10.0.0.2")), None);
}
