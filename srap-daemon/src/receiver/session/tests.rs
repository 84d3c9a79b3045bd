//! What a receiver's session does with each frame a sender sends, judged
//! without a socket.

use std::net::IpAddr;

use srap_common::wire::{
    self, CpuCount, DecodeError, DemandReport, ErrorReport, Hello, KeyId, LandingReport,
    LandingVerdict, MIN_PROTOCOL_VERSION, Message, Nonce, PROTOCOL_VERSION, PlanReport,
    PlannedTable, Psk, SeenFlow, SeenFlows,
};

use super::{
    Received, RewrittenPlan, SessionError, answered, greeted, key_for, overridden, received,
    rewritten_plan, seen_news, tell_at_once, withdrawn,
};
use crate::{
    framed::{FrameError, Outbound},
    psk::Keys,
};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("a test address")
}

fn psk(text: &[u8]) -> Psk {
    Psk::new(text).expect("a test key")
}

fn hello(version: u16, key: Option<KeyId>) -> Hello {
    Hello {
        version,
        agent: "srap-agent test".into(),
        nonce: Nonce([7; 32]),
        key,
    }
}

fn demand(cpus: &[u32]) -> DemandReport {
    DemandReport {
        applied: 1,
        flows: cpus
            .iter()
            .map(|cpu| CpuCount {
                cpu: *cpu,
                count: 2,
            })
            .collect(),
    }
}

fn plan_from(source: &str, toward: &str) -> PlanReport {
    PlanReport {
        version: 4,
        tables: vec![PlannedTable {
            receiver: ip(toward),
            source: ip(source),
            dst_port: 5201,
            cpus: Vec::new(),
        }],
    }
}

fn error(reason: &str) -> Message {
    Message::Error(ErrorReport::new(reason))
}

#[test]
fn a_hello_settles_the_lower_version() {
    let (_, version) = greeted(Message::Hello(hello(PROTOCOL_VERSION + 3, None))).expect("hello");
    assert_eq!(version, PROTOCOL_VERSION);
    let (_, version) = greeted(Message::Hello(hello(MIN_PROTOCOL_VERSION, None))).expect("hello");
    assert_eq!(version, MIN_PROTOCOL_VERSION);
}

#[test]
fn a_sender_too_old_or_not_saying_hello_is_refused() {
    let old = greeted(Message::Hello(hello(MIN_PROTOCOL_VERSION - 1, None)));
    assert!(matches!(old, Err(SessionError::OldSender(v)) if v == MIN_PROTOCOL_VERSION - 1));
    let rude = greeted(Message::Keepalive);
    assert!(matches!(
        rude,
        Err(SessionError::Unexpected {
            expected: "Hello",
            ..
        })
    ));
}

#[test]
fn without_keys_the_session_stays_plain() {
    let keys = Keys::default();
    let found = key_for(&keys, &hello(PROTOCOL_VERSION, None)).expect("no keys");
    assert!(found.is_none());
}

#[test]
fn with_keys_the_hello_must_name_one_of_them() {
    let ours = psk(b"0123456789abcdef");
    let keys = Keys::from(ours.clone());
    let none = key_for(&keys, &hello(PROTOCOL_VERSION, None));
    assert!(matches!(none, Err(SessionError::NoKey)));
    let other = psk(b"fedcba9876543210").id();
    let unknown = key_for(&keys, &hello(PROTOCOL_VERSION, Some(other)));
    assert!(matches!(unknown, Err(SessionError::UnknownKey { id, .. }) if id == other));
    let found = key_for(&keys, &hello(PROTOCOL_VERSION, Some(ours.id()))).expect("our key");
    assert!(matches!(found, Some((id, _)) if id == ours.id()));
}

#[test]
fn a_refused_challenge_carries_the_senders_reason() {
    let refused = answered(error("a downgrade on the path"));
    assert!(
        matches!(refused, Err(SessionError::PeerError(reason)) if reason == "a downgrade on the path")
    );
    assert!(matches!(
        answered(Message::Keepalive),
        Err(SessionError::Unexpected {
            expected: "Response",
            ..
        })
    ));
}

#[test]
fn plans_demands_and_keepalives_are_taken() {
    assert_eq!(received(Message::Keepalive).ok(), Some(Received::Nothing));
    let plan = plan_from("10.0.0.1", "10.0.0.2");
    assert_eq!(
        received(Message::PlanReport(plan.clone())).ok(),
        Some(Received::Plan(plan))
    );
    let report = demand(&[1, 2]);
    assert_eq!(
        received(Message::Demand(report.clone())).ok(),
        Some(Received::Demand(report))
    );
}

#[test]
fn a_bad_demand_an_error_or_a_stray_message_ends_the_session() {
    let twice = received(Message::Demand(demand(&[3, 3])));
    assert!(
        matches!(twice, Err(SessionError::BadDemand(reason)) if reason.to_string().contains("twice"))
    );
    assert!(matches!(
        received(error("bye")),
        Err(SessionError::PeerError(reason)) if reason == "bye"
    ));
    assert!(matches!(
        received(Message::Hello(hello(PROTOCOL_VERSION, None))),
        Err(SessionError::Unexpected { .. })
    ));
}

#[test]
fn a_plan_from_another_source_is_a_rewritten_tuple() {
    let plan = plan_from("10.0.0.9", "10.0.0.2");
    let rewritten = rewritten_plan(ip("10.0.0.1"), Some(ip("10.0.0.2")), &plan);
    assert_eq!(
        rewritten,
        Some(RewrittenPlan {
            source: ip("10.0.0.9"),
            version: 4
        })
    );
    assert_eq!(
        rewritten_plan(ip("10.0.0.9"), Some(ip("10.0.0.2")), &plan),
        None
    );
    // The connection's own end unknown: nothing to compare with.
    let toward_peer = plan_from("10.0.0.9", "10.0.0.1");
    assert_eq!(rewritten_plan(ip("10.0.0.1"), None, &toward_peer), None);
}

#[test]
fn a_rewritten_tuple_overrides_the_landings() {
    let landings = LandingReport {
        version: 4,
        verdict: LandingVerdict::Agreed,
        matched: 9,
        judged: 10,
    };
    assert_eq!(overridden(landings, None), landings);
    let plan = RewrittenPlan {
        source: ip("10.0.0.9"),
        version: 5,
    };
    let told = overridden(landings, Some(plan));
    assert_eq!(told.verdict, LandingVerdict::TupleRewritten);
    assert_eq!(told.version, 5);
}

#[test]
fn only_a_verdict_already_made_goes_out_at_once() {
    let mut report = LandingReport::default();
    assert!(!tell_at_once(&report));
    report.verdict = LandingVerdict::Contradicted;
    assert!(tell_at_once(&report));
}

#[test]
fn the_peers_flows_go_out_only_when_they_changed() {
    let one = SeenFlows {
        flows: vec![SeenFlow {
            src: "10.0.0.1:40000".parse().expect("addr"),
            dst: "10.0.0.2:5201".parse().expect("addr"),
            queue: Some(3),
            cpu: Some(3),
        }],
    };
    let mut told = None;
    assert_eq!(seen_news(&mut told, one.clone()), Some(one.clone()));
    assert_eq!(seen_news(&mut told, one.clone()), None);
    let none = SeenFlows { flows: Vec::new() };
    assert_eq!(seen_news(&mut told, none.clone()), Some(none));
}

#[test]
fn a_withdrawn_key_ends_its_sessions_only() {
    let old = psk(b"0123456789abcdef");
    let new = psk(b"fedcba9876543210");
    let keys = Keys::from(new.clone());
    assert!(matches!(
        withdrawn(Some(old.id()), &keys),
        Some(SessionError::KeyWithdrawn(id)) if id == old.id()
    ));
    assert!(withdrawn(Some(new.id()), &keys).is_none());
    assert!(
        withdrawn(None, &keys).is_none(),
        "a plain session has no key"
    );
}

#[test]
fn the_peer_is_told_why_unless_it_left_or_said_why() {
    let closed = SessionError::Frame(FrameError::Closed);
    assert_eq!(closed.report(), None);
    assert_eq!(SessionError::PeerError("bye".into()).report(), None);
    let unknown = SessionError::UnknownKey {
        id: psk(b"0123456789abcdef").id(),
        ours: "SECRET-ID-LIST".into(),
    };
    let told = unknown.report().expect("told");
    assert!(
        !told.contains("SECRET-ID-LIST"),
        "our key ids stay in our log"
    );
    assert_eq!(
        SessionError::NoKey.report(),
        Some(SessionError::NoKey.to_string())
    );
}

#[test]
fn an_older_peer_is_refused_under_its_own_header() {
    let older = MIN_PROTOCOL_VERSION - 1;
    let err = SessionError::Frame(FrameError::Decode(DecodeError::WrongVersion {
        got: older,
        supported: PROTOCOL_VERSION,
    }));
    let reason = ErrorReport::new(err.report().expect("worth telling"));
    let frame = err.report_frame(&mut Outbound::default());
    assert_eq!(frame, wire::encode_error_for(older, &reason).ok());
    let current = wire::encode_error_for(PROTOCOL_VERSION, &reason).ok();
    assert_ne!(frame, current);
}
