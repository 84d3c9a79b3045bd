//! What this host's closed loop changes in the plan without a receiver
//! agent (`--rss`, `--steer local|both`), judged without a binder.

use std::{collections::BTreeSet, sync::Arc};

use srap_common::{
    binder::{BinderSizes, LOCAL_ROW},
    rss::{RssModel, embedded_default},
};

use super::{LocalPlan, Toggle};
use crate::sender::{options::SenderOptions, target::Target};

fn model(queues: u32) -> Arc<RssModel> {
    let mut description = embedded_default();
    for (n, entry) in description.indir.iter_mut().enumerate() {
        *entry = n as u32 % queues;
    }
    Arc::new(RssModel::from_description(&description).expect("a valid test description"))
}

/// Two receiver addresses on `remote`; this host's NIC `both` when given.
fn plan(remote: &Arc<RssModel>, both: Option<Arc<RssModel>>) -> LocalPlan {
    let receivers = ["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
    LocalPlan {
        options: SenderOptions {
            targets: Target::all(remote, &receivers),
            ports: Vec::new(),
            cgroup: None,
            pin_dir: "/nonexistent/srap-test".into(),
            pacing_rate: None,
            port_range: None,
            local: both.clone(),
            local_placement: Default::default(),
            bonds: Default::default(),
            sizes: BinderSizes::default(),
            nics: Default::default(),
            receiver_nics: Default::default(),
            mptcp: Default::default(),
            spread: Vec::new(),
        },
        both,
    }
}

fn is(model: Option<&Arc<RssModel>>, want: &Arc<RssModel>) -> bool {
    model.is_some_and(|m| Arc::ptr_eq(m, want))
}

#[test]
fn steer_local_plans_every_target_with_the_learned_key() {
    let discovered = model(32);
    let mut plan = plan(&discovered, None);
    let learned = model(8);
    plan.learned(learned.clone());
    assert!(
        plan.options
            .targets
            .iter()
            .all(|t| is(Some(&t.model), &learned))
    );
    assert!(plan.options.local.is_none());
    assert!(plan.both.is_none());
}

#[test]
fn steer_local_pauses_in_the_destinations() {
    let mut plan = plan(&model(32), None);
    let out: BTreeSet<u32> = [LOCAL_ROW].into_iter().collect();
    assert_eq!(plan.pause(true), Toggle::Dests(out));
    assert_eq!(plan.pause(false), Toggle::Dests(BTreeSet::new()));
    assert!(plan.repause(true), "a re-plan refilled the destinations");
    assert!(!plan.repause(false));
}

#[test]
fn steer_both_takes_a_learned_key_for_this_nic_only() {
    let mut plan = plan(&model(32), Some(model(16)));
    let remote = plan.options.targets[0].model.clone();
    let learned = model(8);
    plan.learned(learned.clone());
    assert!(is(plan.options.local.as_ref(), &learned));
    assert!(is(plan.both.as_ref(), &learned));
    assert!(
        plan.options
            .targets
            .iter()
            .all(|t| is(Some(&t.model), &remote))
    );
}

#[test]
fn steer_both_pauses_by_planning_without_this_nic() {
    let local = model(16);
    let mut plan = plan(&model(32), Some(local.clone()));
    assert_eq!(plan.pause(true), Toggle::Replan);
    assert!(plan.options.local.is_none());
    assert!(!plan.repause(true), "the plan itself holds the pause");
    assert_eq!(plan.pause(false), Toggle::Replan);
    assert!(is(plan.options.local.as_ref(), &local));
}

#[test]
fn a_key_learned_while_paused_is_planned_on_resuming() {
    let mut plan = plan(&model(32), Some(model(16)));
    plan.pause(true);
    let learned = model(8);
    plan.learned(learned.clone());
    assert!(plan.options.local.is_none(), "still paused");
    plan.pause(false);
    assert!(is(plan.options.local.as_ref(), &learned));
}

#[test]
fn a_failed_toggle_leaves_the_plan_as_it_was() {
    let local = model(16);
    let mut plan = plan(&model(32), Some(local.clone()));
    plan.pause(true);
    plan.failed(true);
    assert!(is(plan.options.local.as_ref(), &local));
    plan.pause(true);
    plan.pause(false);
    plan.failed(false);
    assert!(plan.options.local.is_none());
}
