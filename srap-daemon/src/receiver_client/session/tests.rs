//! What the sender's session does with each frame its receiver sends,
//! judged without a socket.

use srap_common::{
    rss::{KeyProvenance, KeySource, RssDescription, embedded_default},
    wire::{
        Challenge, CpuGrant, ErrorReport, LandingReport, LandingVerdict, Mac, Message, Nonce,
        RssUpdate, SeenFlows,
    },
};

use super::{
    Answer, PeerError, Received, answer_to, first_update, nics_at_start, received, seen_at_start,
};
use crate::receiver_client::{NicsReport, SeenReport, Update};

fn rss_update(version: u64, description: &RssDescription) -> Message {
    Message::RssUpdate(RssUpdate {
        version,
        description: description.into(),
        key: KeyProvenance {
            source: KeySource::KernelDefault,
            ..KeyProvenance::default()
        },
    })
}

/// A description no model can be made of (no indirection table).
fn broken() -> RssDescription {
    let mut description = embedded_default();
    description.indir.clear();
    description
}

fn challenge() -> Message {
    Message::Challenge(Challenge {
        nonce: Nonce([1; 32]),
        proof: Mac([2; 32]),
    })
}

fn grant(cpus: &[u32]) -> CpuGrant {
    CpuGrant::uncontended(3, cpus.iter().copied())
}

fn error(reason: &str) -> Message {
    Message::Error(ErrorReport::new(reason))
}

#[test]
fn a_challenge_is_proved_only_with_a_key() {
    assert_eq!(answer_to(&challenge(), true), Answer::Prove);
    assert_eq!(answer_to(&challenge(), false), Answer::NeedPsk);
}

#[test]
fn a_sender_with_a_key_trusts_no_unauthenticated_description() {
    let update = rss_update(1, &embedded_default());
    assert_eq!(answer_to(&update, true), Answer::RefuseUnauthenticated);
    assert_eq!(answer_to(&update, false), Answer::Plain);
    assert_eq!(answer_to(&error("no"), true), Answer::Plain);
}

#[test]
fn the_first_description_must_make_a_model() {
    let first = first_update(rss_update(1, &embedded_default())).expect("valid");
    assert_eq!(
        first,
        Update {
            version: 1,
            description: embedded_default(),
            key: KeyProvenance {
                source: KeySource::KernelDefault,
                ..KeyProvenance::default()
            },
        }
    );
    let invalid = first_update(rss_update(1, &broken()));
    assert!(matches!(
        invalid,
        Err(err @ PeerError::BadFirstDescription(_))
            if err.to_string().starts_with("the receiver refused: invalid first description")
    ));
}

#[test]
fn a_first_error_or_stray_message_ends_the_connection() {
    assert!(matches!(
        first_update(error("pre-shared key required")),
        Err(PeerError::Refused(reason)) if reason == "pre-shared key required"
    ));
    assert!(matches!(
        first_update(Message::Keepalive),
        Err(PeerError::Unexpected {
            expected: "RssUpdate",
            got: "Keepalive"
        })
    ));
}

#[test]
fn a_bad_later_description_is_ignored_not_fatal() {
    assert_eq!(
        received(rss_update(2, &embedded_default())).ok(),
        Some(Received::Update(
            first_update(rss_update(2, &embedded_default())).expect("valid")
        ))
    );
    let ignored = received(rss_update(3, &broken()));
    assert!(matches!(
        ignored,
        Ok(Received::BadUpdate { version: 3, .. })
    ));
}

#[test]
fn landings_flows_grants_and_keepalives_are_taken() {
    assert_eq!(received(Message::Keepalive).ok(), Some(Received::Nothing));
    let landings = LandingReport {
        version: 2,
        verdict: LandingVerdict::Contradicted,
        matched: 1,
        judged: 10,
    };
    assert_eq!(
        received(Message::Landings(landings)).ok(),
        Some(Received::Landings(landings))
    );
    let seen = SeenFlows { flows: Vec::new() };
    assert_eq!(
        received(Message::SeenFlows(seen.clone())).ok(),
        Some(Received::Seen(seen))
    );
    assert_eq!(
        received(Message::Grant(grant(&[0, 1]))).ok(),
        Some(Received::Grant(grant(&[0, 1])))
    );
}

#[test]
fn a_bad_grant_an_error_or_a_stray_message_ends_the_session() {
    assert!(matches!(
        received(Message::Grant(grant(&[2, 2]))),
        Err(err @ PeerError::BadGrant(_))
            if err.to_string().starts_with("the receiver refused: the receiver sent a bad grant")
    ));
    assert!(matches!(
        received(error("shutting down")),
        Err(PeerError::Refused(reason)) if reason == "shutting down"
    ));
    assert!(matches!(
        received(challenge()),
        Err(PeerError::Unexpected {
            got: "Challenge",
            ..
        })
    ));
}

#[test]
fn flows_are_awaited_from_protocol_7_on() {
    assert_eq!(seen_at_start(7), SeenReport::Waiting);
    assert_eq!(seen_at_start(8), SeenReport::Waiting);
    assert_eq!(seen_at_start(6), SeenReport::Unsupported(6));
}

/// A NIC list of one NIC holding `addr`, whose port 5201 accepts on
/// `accepted`.
fn nics(addr: &str, accepted: &str) -> srap_common::wire::ReceiverNics {
    use srap_common::wire::{NicInfo, NicLink, PortAcceptance, ReceiverNics};
    ReceiverNics {
        nics: vec![NicInfo {
            name: "eth0".into(),
            addrs: vec![addr.parse().expect("address")],
            numa_node: Some(0),
            link: NicLink::Up,
            speed_mbps: None,
            description: None,
            verifier: None,
            cpus: vec![0, 1],
        }],
        ports: vec![PortAcceptance {
            port: 5201,
            addrs: vec![accepted.parse().expect("address")],
        }],
    }
}

#[test]
fn a_nic_list_is_taken_and_a_lying_one_ends_the_session() {
    let honest = nics("10.0.0.2", "10.0.0.2");
    assert_eq!(
        received(Message::ReceiverNics(honest.clone())).ok(),
        Some(Received::Nics(honest))
    );
    assert!(matches!(
        received(Message::ReceiverNics(nics("10.0.0.2", "192.0.2.9"))),
        Err(err @ PeerError::BadNics(_))
            if err.to_string() == "the receiver refused: the receiver sent a bad NIC list: \
                port 5201 is said to accept on 192.0.2.9, which no NIC listed holds"
    ));
}

#[test]
fn nics_are_awaited_from_protocol_8_on() {
    assert_eq!(nics_at_start(8), NicsReport::Waiting);
    assert_eq!(nics_at_start(7), NicsReport::Unsupported(7));
    assert_eq!(nics_at_start(6), NicsReport::Unsupported(6));
}

#[test]
fn grants_per_nic_are_taken_and_a_lying_one_ends_the_session() {
    use srap_common::wire::{CpuCount, NicGrant, NicGrants};
    let nic = |name: &str, cpus: &[u32]| NicGrant {
        name: name.into(),
        cpus: cpus
            .iter()
            .map(|cpu| CpuCount {
                cpu: *cpu,
                count: 0,
            })
            .collect(),
    };
    let honest = NicGrants {
        epoch: 4,
        nics: vec![nic("eth0", &[0, 1]), nic("eth1", &[4, 5])],
    };
    assert_eq!(
        received(Message::NicGrants(honest.clone())).ok(),
        Some(Received::NicGrants(honest))
    );
    let twice = NicGrants {
        epoch: 5,
        nics: vec![nic("eth0", &[0]), nic("eth0", &[1])],
    };
    assert!(matches!(
        received(Message::NicGrants(twice)),
        Err(err @ PeerError::BadNicGrants(_))
            if err.to_string()
                == "the receiver refused: the receiver sent bad NIC grants: NIC eth0 is granted twice"
    ));
}
