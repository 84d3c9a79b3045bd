//! The wire format's tests: every message round-trips, a malformed,
//! truncated or oversized frame is refused (an oversized one before
//! anything is allocated for it), the PSK proofs and sealed frames resist
//! replay, reflection and tampering, and the version negotiation tells a
//! downgrade from a real older peer.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::{
    protocol::FlowType,
    rss::{KeyConfidence, KeyProvenance, KeySource, RssDescription, embedded_default},
};

fn nonce(byte: u8) -> Nonce {
    Nonce([byte; NONCE_LEN])
}

/// The embedded description with UDP's fields over IPv4 known (`sd`),
/// over IPv6 not: what discovery gives for many NICs.
fn with_udp() -> RssDescription {
    let mut description = embedded_default();
    description.fields.set(FlowType::UDP4, "sd".into());
    description
}

/// Every message, as this version carries them: descriptions with UDP's
/// fields.
fn every_message() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            agent: "srap-agent 0.1.0".into(),
            nonce: nonce(1),
            key: Some(KeyId([5; KEY_ID_LEN])),
        }),
        Message::Challenge(Challenge {
            nonce: nonce(2),
            proof: Mac([3; MAC_LEN]),
        }),
        Message::Response(Response {
            proof: Mac([4; MAC_LEN]),
        }),
        Message::RssUpdate(RssUpdate {
            version: 7,
            description: (&with_udp()).into(),
            key: learned_key(),
        }),
        Message::PlanReport(PlanReport {
            version: 7,
            tables: vec![PlannedTable {
                receiver: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                source: "fd00::1".parse().expect("address"),
                dst_port: 5201,
                cpus: vec![CpuPorts {
                    cpu: 3,
                    ports: vec![40000, 40017],
                }],
            }],
        }),
        Message::Keepalive,
        Message::Error(ErrorReport::new("authentication failed")),
        Message::Demand(DemandReport {
            applied: 3,
            flows: vec![CpuCount { cpu: 4, count: 2 }],
        }),
        Message::Grant(CpuGrant {
            epoch: 3,
            cpus: vec![CpuCount { cpu: 4, count: 0 }, CpuCount { cpu: 5, count: 1 }],
        }),
        Message::SeenFlows(seen_flows(2)),
        Message::ReceiverNics(receiver_nics(2)),
        Message::NicGrants(nic_grants(2)),
    ]
}

/// `n` flows of one sender toward one receiver, the last with no queue.
fn seen_flows(n: u16) -> SeenFlows {
    SeenFlows {
        flows: (0..n)
            .map(|i| SeenFlow {
                src: SocketAddr::new("10.0.0.1".parse().expect("address"), 40000 + i),
                dst: "[fd00::2]:5201".parse().expect("address"),
                queue: (i + 1 < n).then_some(u32::from(i)),
                cpu: Some(u32::from(i) * 2),
            })
            .collect(),
    }
}

/// A key learned from 30 landings (model 3): every bit planning needs known.
fn learned_key() -> KeyProvenance {
    KeyProvenance {
        source: KeySource::Learned,
        revision: 3,
        confidence: KeyConfidence {
            tested: 30,
            agreeing: 30,
            rank: 34,
            needed: 19,
            known: 19,
        },
    }
}

/// An `RssUpdate` ends with its key's provenance, in bincode's standard
/// encoding: the source's variant, then the revision and the five counts
/// as varints (one byte each below 251), so a sender can read where the
/// key comes from and how far landings back it.
#[test]
fn an_update_carries_its_keys_source_model_and_confidence() {
    let update = Message::RssUpdate(RssUpdate {
        version: 2,
        description: (&embedded_default()).into(),
        key: learned_key(),
    });
    let frame = encode(&update).expect("encodes");
    assert_eq!(frame[frame.len() - 7..], [2, 3, 30, 30, 34, 19, 19]);
    let (decoded, _) = decode_frame(&frame, MAX_FRAME).expect("decodes");
    assert_eq!(decoded, update);
    // Each source has its own variant, in the order the enum lists them.
    for (source, variant) in [
        (KeySource::Reported, 0),
        (KeySource::KernelDefault, 1),
        (KeySource::Learned, 2),
        (KeySource::Unknown, 3),
    ] {
        let key = KeyProvenance {
            source,
            ..KeyProvenance::default()
        };
        let frame = encode(&Message::RssUpdate(RssUpdate {
            version: 1,
            description: (&embedded_default()).into(),
            key,
        }))
        .expect("encodes");
        assert_eq!(frame[frame.len() - 7..], [variant, 0, 0, 0, 0, 0, 0]);
    }
}

/// A receiver resends its key's provenance when it says something new,
/// not on every landing.
#[test]
fn a_keys_provenance_is_resent_only_when_it_says_something_new() {
    let sent = learned_key();
    let with = |f: fn(&mut KeyProvenance)| {
        let mut key = sent;
        f(&mut key);
        key
    };
    assert!(!sent.worth_resending(&sent));
    let agreeing = |n| {
        move |k: &mut KeyProvenance| {
            k.confidence.tested = n;
            k.confidence.agreeing = n;
        }
    };
    let mut more = sent;
    agreeing(40)(&mut more);
    assert!(!more.worth_resending(&sent));
    agreeing(60)(&mut more);
    assert!(more.worth_resending(&sent));
    assert!(with(|k| k.confidence.agreeing = 29).worth_resending(&sent));
    assert!(with(|k| k.confidence.known = 18).worth_resending(&sent));
    assert!(with(|k| k.revision = 4).worth_resending(&sent));
    assert!(with(|k| k.source = KeySource::Reported).worth_resending(&sent));
    assert_eq!(
        sent.to_string(),
        "key learned from landings, model 3: 30 of 30 landings agree, rank 34, \
         19 of 19 bits planning needs"
    );
}

/// A payload with a valid header and `body`.
fn payload(body: &[u8]) -> Vec<u8> {
    let mut p = MAGIC.to_vec();
    p.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    p.extend_from_slice(body);
    p
}

#[test]
fn every_message_round_trips() {
    for message in every_message() {
        let frame = encode(&message).expect("encodes");
        let (decoded, used) = decode_frame(&frame, MAX_FRAME).expect("decodes");
        assert_eq!(decoded, message);
        assert_eq!(used, frame.len());
    }
}

#[test]
fn description_survives_the_wire() {
    let mut description = embedded_default();
    description.queue_cpu = None;
    for d in [embedded_default(), description, with_udp()] {
        let back: RssDescription = WireDescription::from(&d).into();
        assert_eq!(back, d);
    }
}

#[test]
fn decode_frame_reads_only_the_first_frame() {
    let mut bytes = encode(&Message::Keepalive).expect("encodes");
    let first = bytes.len();
    bytes.extend(encode(&Message::Error(ErrorReport::new("x"))).expect("encodes"));
    let (message, used) = decode_frame(&bytes, MAX_FRAME).expect("decodes");
    assert_eq!((message, used), (Message::Keepalive, first));
}

#[test]
fn oversized_length_is_refused_before_allocating() {
    let err = payload_len(u32::MAX.to_be_bytes(), MAX_FRAME).unwrap_err();
    assert_eq!(
        err,
        DecodeError::TooLarge {
            len: u32::MAX as usize,
            max: MAX_FRAME
        }
    );
    assert_eq!(
        err.to_string(),
        "message of 4294967295 bytes exceeds the 1048576-byte limit"
    );
    // The handshake limit is smaller, and no caller can raise the maximum.
    assert!(payload_len(5000u32.to_be_bytes(), MAX_HANDSHAKE_FRAME).is_err());
    assert!(payload_len(((MAX_FRAME + 1) as u32).to_be_bytes(), usize::MAX).is_err());
    assert_eq!(payload_len(100u32.to_be_bytes(), MAX_FRAME), Ok(100));
}

#[test]
fn undersized_length_is_refused() {
    assert_eq!(
        payload_len(2u32.to_be_bytes(), MAX_FRAME),
        Err(DecodeError::TooShort {
            len: 2,
            min: HEADER_LEN
        })
    );
    assert!(matches!(
        decode_payload(b"SR"),
        Err(DecodeError::TooShort { len: 2, .. })
    ));
}

#[test]
fn truncated_frames_are_named() {
    let frame = encode(&every_message()[3]).expect("encodes");
    assert_eq!(
        decode_frame(&frame[..2], MAX_FRAME),
        Err(DecodeError::Truncated {
            expected: PREFIX_LEN,
            got: 2
        })
    );
    let cut = frame.len() - 10;
    assert_eq!(
        decode_frame(&frame[..cut], MAX_FRAME),
        Err(DecodeError::Truncated {
            expected: frame.len(),
            got: cut
        })
    );
    // A payload cut short inside the body (with a matching prefix).
    let body_cut = &frame[PREFIX_LEN..cut];
    let err = decode_payload(body_cut).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("malformed message: it ends early ("),
        "{err}"
    );
}

#[test]
fn garbage_is_not_srap() {
    let err = decode_payload(b"GET / HTTP/1.1\r\n").unwrap_err();
    assert_eq!(err, DecodeError::NotSrap { found: *b"GET " });
    assert_eq!(
        err.to_string(),
        "not an SRAP peer: it sent \"GET \" where \"SRAP\" belongs"
    );
    // Seen as a length prefix, text is refused as text, not as a huge frame.
    assert_eq!(
        payload_len(*b"GET ", MAX_FRAME),
        Err(DecodeError::NotSrap { found: *b"GET " })
    );
}

#[test]
fn wrong_version_is_refused_before_the_body() {
    let mut p = MAGIC.to_vec();
    p.extend_from_slice(&99u16.to_be_bytes());
    p.extend_from_slice(&[0xff; 40]);
    let err = decode_payload(&p).unwrap_err();
    assert_eq!(
        err,
        DecodeError::WrongVersion {
            got: 99,
            supported: PROTOCOL_VERSION
        }
    );
    assert!(err.to_string().contains("version 99 is not supported"));
}

#[test]
fn unknown_message_kind_is_malformed() {
    let err = decode_payload(&payload(&[200])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "malformed message: unknown Message kind 200"
    );
}

#[test]
fn trailing_bytes_are_refused() {
    let frame = encode(&Message::Keepalive).expect("encodes");
    let mut p = frame[PREFIX_LEN..].to_vec();
    p.extend_from_slice(&[0, 0, 0]);
    assert_eq!(
        decode_payload(&p),
        Err(DecodeError::TrailingBytes { extra: 3 })
    );
}

#[test]
fn a_huge_collection_claim_hits_the_limit_not_the_allocator() {
    // RssUpdate { version: 1, description: { hfunc: "", key: "", indir: <2^32-1 u32s> … } }
    let mut body = vec![3, 1, 0, 0];
    body.push(252); // bincode varint: u32 follows
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    let err = decode_payload(&payload(&body)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "malformed message: a field claims more than the message size limit"
    );
}

#[test]
fn oversized_messages_are_not_encoded() {
    let message = Message::PlanReport(PlanReport {
        version: 1,
        tables: vec![PlannedTable {
            receiver: IpAddr::V4(Ipv4Addr::LOCALHOST),
            source: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst_port: 5201,
            cpus: vec![CpuPorts {
                cpu: 0,
                ports: vec![u16::MAX; MAX_FRAME / 2],
            }],
        }],
    });
    assert!(matches!(
        encode(&message),
        Err(EncodeError::TooLarge { .. })
    ));
}

#[test]
fn error_reasons_are_cut_on_a_character_boundary() {
    let report = ErrorReport::new("é".repeat(MAX_REASON_LEN));
    assert!(report.reason.len() <= MAX_REASON_LEN);
    assert!(report.reason.chars().all(|c| c == 'é'));
}

#[test]
fn both_proofs_verify_with_the_same_key() {
    let psk = Psk::new(b"0123456789abcdef").expect("psk");
    let (s, r) = (nonce(1), nonce(2));
    assert!(psk.verify_receiver(
        PROTOCOL_VERSION,
        &s,
        &r,
        &psk.receiver_proof(PROTOCOL_VERSION, &s, &r)
    ));
    assert!(psk.verify_sender(
        PROTOCOL_VERSION,
        &s,
        &r,
        &psk.sender_proof(PROTOCOL_VERSION, &s, &r)
    ));
}

#[test]
fn a_wrong_key_fails() {
    let psk = Psk::new(b"0123456789abcdef").expect("psk");
    let other = Psk::new(b"0123456789abcdeF").expect("psk");
    let (s, r) = (nonce(1), nonce(2));
    assert!(!psk.verify_sender(
        PROTOCOL_VERSION,
        &s,
        &r,
        &other.sender_proof(PROTOCOL_VERSION, &s, &r)
    ));
    assert!(!psk.verify_receiver(
        PROTOCOL_VERSION,
        &s,
        &r,
        &other.receiver_proof(PROTOCOL_VERSION, &s, &r)
    ));
}

#[test]
fn proofs_neither_replay_nor_reflect() {
    let psk = Psk::new(b"0123456789abcdef").expect("psk");
    let (s, r) = (nonce(1), nonce(2));
    let recorded = psk.sender_proof(PROTOCOL_VERSION, &s, &r);
    // Replayed against a fresh receiver nonce.
    assert!(!psk.verify_sender(PROTOCOL_VERSION, &s, &nonce(3), &recorded));
    // The receiver's own proof reflected back as the sender's.
    assert!(!psk.verify_sender(
        PROTOCOL_VERSION,
        &s,
        &r,
        &psk.receiver_proof(PROTOCOL_VERSION, &s, &r)
    ));
}

#[test]
fn a_key_id_is_its_hmac_of_a_label_and_tells_keys_apart() {
    let psk = Psk::new(b"0123456789abcdef").expect("psk");
    // HMAC-SHA256(key, "srap key id"), first 8 bytes, computed with
    // Python's hmac module.
    assert_eq!(psk.id().to_string(), "4998e76a915e5ab5");
    let other = Psk::new(b"0123456789abcdeF").expect("psk");
    assert_ne!(psk.id(), other.id());
    assert!(format!("{psk:?}").contains(&psk.id().to_string()));
}

#[test]
fn psk_files_are_trimmed_and_checked() {
    assert!(Psk::from_file_contents(b"  0123456789abcdef\n").is_ok());
    assert_eq!(
        Psk::from_file_contents(b"short\n").unwrap_err(),
        PskError::TooShort { len: 5 }
    );
    assert!(matches!(
        Psk::new(&[b'a'; 5000]),
        Err(PskError::TooLong { len: 5000 })
    ));
    let psk = Psk::new(b"secret-secret-secret").expect("psk");
    assert!(!format!("{psk:?}").contains("secret"));
}

#[test]
fn nonces_are_random() {
    let a = Nonce::random().expect("OS randomness");
    let b = Nonce::random().expect("OS randomness");
    assert_ne!(a, b);
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_frame(&bytes, MAX_FRAME);
        let _ = decode_payload(&payload(&bytes));
    }

    #[test]
    fn flipping_a_byte_never_panics(index in 0usize..4096, value in any::<u8>()) {
        let mut frame = encode(&every_message()[3]).expect("encodes");
        let i = index % frame.len();
        frame[i] = value;
        let _ = decode_frame(&frame, MAX_FRAME);
    }
}

// ---------------------------------------------------------------------------
// Authenticated frames (protocol 4, `seal`).

fn key() -> Psk {
    Psk::new(b"session test key, 16+ bytes").expect("psk")
}

/// Both ends of one session: (sender's sealer, sender's opener, receiver's
/// sealer, receiver's opener).
fn sessions(psk: &Psk, s: Nonce, r: Nonce) -> (Sealer, Opener, Sealer, Opener) {
    let (s_seal, s_open) = seal::session(psk, Role::Sender, PROTOCOL_VERSION, &s, &r);
    let (r_seal, r_open) = seal::session(psk, Role::Receiver, PROTOCOL_VERSION, &s, &r);
    (s_seal, s_open, r_seal, r_open)
}

/// What a reader of the byte stream does with `frame`: the length from the
/// prefix, then that many bytes (a prefix claiming more than there is reads
/// into the next frame or waits: here, truncation).
fn open_frame(opener: &mut Opener, frame: &[u8]) -> Result<Message, DecodeError> {
    let Some((prefix, rest)) = frame.split_first_chunk::<PREFIX_LEN>() else {
        return Err(DecodeError::Truncated {
            expected: PREFIX_LEN,
            got: frame.len(),
        });
    };
    let len = payload_len(*prefix, MAX_FRAME)?;
    let payload = rest.get(..len).ok_or(DecodeError::Truncated {
        expected: PREFIX_LEN + len,
        got: frame.len(),
    })?;
    opener.open(payload)
}

#[test]
fn sealed_frames_round_trip_both_ways_in_order() {
    let (mut s_seal, mut s_open, mut r_seal, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    for message in every_message() {
        let frame = s_seal.seal(&message).expect("seals");
        assert_eq!(open_frame(&mut r_open, &frame), Ok(message.clone()));
        let frame = r_seal.seal(&message).expect("seals");
        assert_eq!(open_frame(&mut s_open, &frame), Ok(message));
    }
    // The frame format: header, sequence number, body, tag.
    let frame = s_seal.seal(&Message::Keepalive).expect("seals");
    let plain = encode(&Message::Keepalive).expect("encodes");
    assert_eq!(frame.len(), plain.len() + SEAL_OVERHEAD);
    assert_eq!(
        &frame[PREFIX_LEN..PREFIX_LEN + HEADER_LEN],
        &plain[PREFIX_LEN..PREFIX_LEN + HEADER_LEN]
    );
    let seq = &frame[PREFIX_LEN + HEADER_LEN..PREFIX_LEN + HEADER_LEN + 8];
    assert_eq!(seq, (every_message().len() as u64).to_be_bytes());
}

#[test]
fn flipping_any_bit_of_a_sealed_frame_is_refused() {
    let psk = key();
    for message in [Message::Keepalive, every_message()[4].clone()] {
        let (mut seal_side, _, _, _) = sessions(&psk, nonce(1), nonce(2));
        let frame = seal_side.seal(&message).expect("seals");
        for i in 0..frame.len() {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[i] ^= 1 << bit;
                let (_, _, _, mut r_open) = sessions(&psk, nonce(1), nonce(2));
                let outcome = open_frame(&mut r_open, &bad);
                assert!(outcome.is_err(), "byte {i} bit {bit}: {outcome:?}");
                // Refused without consuming a number: the genuine frame
                // still opens.
                assert_eq!(open_frame(&mut r_open, &frame), Ok(message.clone()));
            }
        }
    }
}

#[test]
fn an_altered_description_names_authentication() {
    let (_, mut s_open, mut r_seal, _) = sessions(&key(), nonce(1), nonce(2));
    let mut frame = r_seal.seal(&every_message()[3]).expect("seals");
    let middle = frame.len() / 2;
    frame[middle] ^= 0x40;
    let err = open_frame(&mut s_open, &frame).unwrap_err();
    assert_eq!(err, DecodeError::BadTag { expected: 0 });
    assert_eq!(
        err.to_string(),
        "frame 0 failed authentication: it was altered on the way, injected, \
         or belongs to another session"
    );
}

#[test]
fn replayed_and_reordered_frames_are_refused() {
    let (mut s_seal, _, _, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    let first = s_seal.seal(&every_message()[4]).expect("seals");
    let second = s_seal.seal(&Message::Keepalive).expect("seals");
    let third = s_seal.seal(&Message::Keepalive).expect("seals");
    // Reordered: the second before the first.
    let err = open_frame(&mut r_open, &second).unwrap_err();
    assert_eq!(
        err,
        DecodeError::OutOfSequence {
            got: 1,
            expected: 0
        }
    );
    assert!(err.to_string().contains("dropped or reordered"), "{err}");
    open_frame(&mut r_open, &first).expect("in order");
    open_frame(&mut r_open, &second).expect("in order");
    // Replayed: the first again.
    let err = open_frame(&mut r_open, &first).unwrap_err();
    assert_eq!(
        err,
        DecodeError::OutOfSequence {
            got: 0,
            expected: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "frame 0 arrived where frame 2 was due: a replay of an earlier frame"
    );
    // A skipped frame is as bad as a reordered one.
    let fourth = s_seal.seal(&Message::Keepalive).expect("seals");
    assert!(open_frame(&mut r_open, &fourth).is_err());
    open_frame(&mut r_open, &third).expect("in order");
}

#[test]
fn a_frame_reflected_to_its_sender_is_refused() {
    let (mut s_seal, mut s_open, mut r_seal, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    let from_sender = s_seal.seal(&every_message()[4]).expect("seals");
    assert_eq!(
        open_frame(&mut s_open, &from_sender),
        Err(DecodeError::Reflected)
    );
    let from_receiver = r_seal.seal(&every_message()[3]).expect("seals");
    let err = open_frame(&mut r_open, &from_receiver).unwrap_err();
    assert_eq!(err, DecodeError::Reflected);
    assert!(err.to_string().contains("reflected"), "{err}");
}

#[test]
fn a_frame_of_another_session_is_refused() {
    let psk = key();
    let (mut old_seal, _, _, _) = sessions(&psk, nonce(1), nonce(2));
    let recorded = old_seal.seal(&every_message()[4]).expect("seals");
    // Same key, one fresh nonce on either side: other session keys.
    for (s, r) in [(nonce(1), nonce(3)), (nonce(3), nonce(2))] {
        let (_, _, _, mut r_open) = sessions(&psk, s, r);
        assert_eq!(
            open_frame(&mut r_open, &recorded),
            Err(DecodeError::BadTag { expected: 0 })
        );
    }
    // Same nonces, another key.
    let other = Psk::new(b"another key, 16+ bytes").expect("psk");
    let (_, _, _, mut r_open) = sessions(&other, nonce(1), nonce(2));
    assert!(open_frame(&mut r_open, &recorded).is_err());
}

#[test]
fn plain_frames_are_refused_in_a_sealed_session() {
    let (_, _, _, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    let short = encode(&Message::Keepalive).expect("encodes");
    assert_eq!(
        open_frame(&mut r_open, &short),
        Err(DecodeError::BadTag { expected: 0 })
    );
    let long = encode(&every_message()[3]).expect("encodes");
    assert_eq!(
        open_frame(&mut r_open, &long),
        Err(DecodeError::BadTag { expected: 0 })
    );
}

#[test]
fn a_sealed_frame_of_another_version_is_named_as_such() {
    let (mut s_seal, _, _, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    let mut frame = s_seal.seal(&Message::Keepalive).expect("seals");
    frame[PREFIX_LEN + MAGIC.len() + 1] = 3;
    assert_eq!(
        open_frame(&mut r_open, &frame),
        Err(DecodeError::WrongVersion {
            got: 3,
            supported: PROTOCOL_VERSION
        })
    );
}

#[test]
fn an_old_peer_can_read_why_it_is_refused() {
    let report = ErrorReport::new("protocol version 3 is not supported");
    let frame = encode_error_for(3, &report).expect("encodes");
    assert_eq!(
        &frame[PREFIX_LEN + MAGIC.len()..PREFIX_LEN + HEADER_LEN],
        &[0, 3]
    );
    // What a version 3 agent decodes: the same body under its header.
    let mut as_ours = frame.clone();
    as_ours[PREFIX_LEN + MAGIC.len() + 1] = PROTOCOL_VERSION as u8;
    assert_eq!(
        decode_frame(&as_ours, MAX_FRAME).map(|(m, _)| m),
        Ok(Message::Error(report))
    );
}

proptest! {
    #[test]
    fn opening_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (_, _, _, mut r_open) = sessions(&key(), nonce(1), nonce(2));
        let _ = r_open.open(&payload(&bytes));
        let _ = r_open.open(&bytes);
    }
}

#[test]
fn grants_and_demands_are_size_limited_and_name_the_problem() {
    let many: Vec<CpuCount> = (0..=MAX_GRANT_CPUS as u32)
        .map(|cpu| CpuCount { cpu, count: 0 })
        .collect();
    let grant = CpuGrant {
        epoch: 1,
        cpus: many.clone(),
    };
    let err = grant.check().expect_err("too many CPUs").to_string();
    assert!(err.contains("513 CPUs") && err.contains("512"), "{err}");
    let demand = DemandReport {
        applied: 1,
        flows: vec![CpuCount { cpu: 3, count: 1 }, CpuCount { cpu: 3, count: 2 }],
    };
    assert_eq!(
        demand.check().expect_err("repeated").to_string(),
        "a Demand report names CPU 3 twice"
    );
    assert!(
        CpuGrant {
            epoch: 1,
            cpus: many[..MAX_GRANT_CPUS].to_vec()
        }
        .check()
        .is_ok()
    );
    // The largest legal grant fits a frame.
    let frame = encode(&Message::Grant(CpuGrant {
        epoch: u64::MAX,
        cpus: many[..MAX_GRANT_CPUS].to_vec(),
    }))
    .expect("encodes");
    assert!(frame.len() < MAX_FRAME);
}

/// Frames sealed by protocol 4's first key derivation (HKDF written with
/// `hmac` calls, before the `hkdf` crate), captured from that code with
/// `key()`, sender nonce `nonce(1)` and receiver nonce `nonce(2)`: the
/// sender's frames 0 (`every_message()[4]`) and 1 (`Keepalive`), and the
/// receiver's frame 0 (`every_message()[8]`; the messages of protocol 4).
const SEALED_BEFORE_HKDF: [&str; 3] = [
    "000000535352415000040000000000000000040701000a00000201fd000000000000000000000000000001fb51\
     14010302fb409cfb519c140dad4743bf2d3f8e2c5fb1942249ca8da5ba1a220f7b6090598fcdcbf7f4e2",
    "0000002f5352415000040000000000000001050ebd79189334e8d25716c9ab20ad9e1ff9898b0c69a444d516\
     82026524f78206",
    "000000355352415000040000000000000000090302040005011769a9908bc2cc3f328ffd897a1722e9ca9abb\
     a1b277d3fd58fd95151f607b81",
];

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The frame keys do not depend on the HKDF implementation: the tags of
/// frames a hand-written derivation sealed ([`SEALED_BEFORE_HKDF`]) verify
/// under the keys `seal::hkdf_sha256` derives, as `seal::session` derives
/// them. Those frames carry version 4 in their header, which the tag
/// covers: this agent refuses them by their version, and seals the same
/// messages under its own.
#[test]
fn frames_sealed_before_the_hkdf_crate_verify_under_todays_keys() {
    use hmac::{Hmac, Mac as _};
    use sha2::Sha256;

    let [s0, s1, r0] = SEALED_BEFORE_HKDF.map(unhex);
    let mut salt = nonce(1).0.to_vec();
    salt.extend_from_slice(&nonce(2).0);
    for (frame, label, dir) in [
        (&s0, &b"sender->receiver"[..], 1u8),
        (&s1, &b"sender->receiver"[..], 1),
        (&r0, &b"receiver->sender"[..], 2),
    ] {
        let key: [u8; MAC_LEN] =
            seal::hkdf_sha256(&salt, key().bytes(), &[b"srap v4 frames ", label]);
        let (covered, tag) = frame.split_at(frame.len() - MAC_LEN);
        let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(&key).expect("any key length");
        mac.update(&[dir]);
        mac.update(covered);
        assert_eq!(mac.finalize().into_bytes().as_slice(), tag);
    }
    let (mut s_seal, _, _, mut r_open) = sessions(&key(), nonce(1), nonce(2));
    assert!(matches!(
        open_frame(&mut r_open, &s0),
        Err(DecodeError::WrongVersion { got: 4, .. })
    ));
    let today = s_seal.seal(&Message::Keepalive).expect("seals");
    assert_eq!(
        u16::from_be_bytes([
            today[PREFIX_LEN + MAGIC.len()],
            today[PREFIX_LEN + MAGIC.len() + 1]
        ]),
        PROTOCOL_VERSION
    );
}

/// RFC 5869 appendix A, test cases 1 to 3 (the SHA-256 ones): the key
/// derivation the frame keys come from.
#[test]
fn hkdf_sha256_gives_the_rfc_5869_vectors() {
    let range = |from: u8, to: u8| (from..=to).collect::<Vec<u8>>();
    // Case 1: basic.
    let okm: [u8; 42] = seal::hkdf_sha256(&range(0x00, 0x0c), &[0x0b; 22], &[&range(0xf0, 0xf9)]);
    assert_eq!(
        okm.to_vec(),
        unhex(
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf\
             34007208d5b887185865"
        )
    );
    // Case 2: longer inputs and outputs; the info given in two parts.
    let info = range(0xb0, 0xff);
    let (info_a, info_b) = info.split_at(17);
    let okm: [u8; 82] =
        seal::hkdf_sha256(&range(0x60, 0xaf), &range(0x00, 0x4f), &[info_a, info_b]);
    assert_eq!(
        okm.to_vec(),
        unhex(
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c\
             59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71\
             cc30c58179ec3e87c14c01d5c1f3434f1d87"
        )
    );
    // Case 3: empty salt and info.
    let okm: [u8; 42] = seal::hkdf_sha256(&[], &[0x0b; 22], &[]);
    assert_eq!(
        okm.to_vec(),
        unhex(
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d\
             9d201395faa4b61a96c8"
        )
    );
}

#[test]
fn seen_flows_round_trip_up_to_the_cap() {
    for n in [0, 1, MAX_SEEN_FLOWS as u16] {
        let message = Message::SeenFlows(seen_flows(n));
        let frame = encode(&message).expect("encodes");
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((message, frame.len())));
    }
}

/// The variant index of [`Message::SeenFlows`] (the tenth).
const SEEN_FLOWS_KIND: u8 = 10;

#[test]
fn a_hostile_seen_flows_count_is_an_error_not_an_allocation() {
    // One more than the cap, and a count near u64::MAX (bincode varint:
    // 0xfd = a u64 follows), with no flows behind either.
    let over = u16::try_from(MAX_SEEN_FLOWS + 1).expect("fits");
    let mut body = vec![SEEN_FLOWS_KIND, 0xfb];
    body.extend_from_slice(&over.to_le_bytes());
    let err = decode_payload(&payload(&body)).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("claims {over} flows; at most {MAX_SEEN_FLOWS}")),
        "{err}"
    );
    let mut body = vec![SEEN_FLOWS_KIND, 0xfd];
    body.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
    assert!(matches!(
        decode_payload(&payload(&body)),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn truncated_seen_flows_are_refused() {
    let frame = encode(&Message::SeenFlows(seen_flows(3))).expect("encodes");
    let payload = &frame[PREFIX_LEN..];
    for cut in HEADER_LEN..payload.len() {
        assert!(
            matches!(
                decode_payload(&payload[..cut]),
                Err(DecodeError::Malformed { .. })
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn a_version_6_peer_is_spoken_to_in_version_6() {
    assert_eq!(session_version(6), Some(6));
    assert_eq!(session_version(PROTOCOL_VERSION), Some(PROTOCOL_VERSION));
    assert_eq!(
        session_version(PROTOCOL_VERSION + 1),
        Some(PROTOCOL_VERSION)
    );
    assert_eq!(session_version(MIN_PROTOCOL_VERSION - 1), None);
    // A version-6 frame decodes (its messages are this version's), and one
    // encoded for version 6 carries its header.
    let message = Message::Keepalive;
    let frame = encode_for(&message, 6).expect("encodes");
    assert_eq!(version_of(&frame[PREFIX_LEN..]), Some(6));
    assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((message, frame.len())));
    // Proofs are made for the version of the session.
    let (s, r) = (nonce(1), nonce(2));
    let psk = key();
    assert!(!psk.verify_receiver(6, &s, &r, &psk.receiver_proof(PROTOCOL_VERSION, &s, &r)));
    assert!(psk.verify_receiver(6, &s, &r, &psk.receiver_proof(6, &s, &r)));
}

/// A receiver's challenge for a session of `session` when it speaks
/// `own`: the nonce marked as [`downgrade::receiver_nonce`] marks it, the
/// proof for `session`.
fn challenge_of(psk: &Psk, s: &Nonce, session: u16, own: u16) -> Challenge {
    let nonce = downgrade::mark(nonce(2), session, own);
    Challenge {
        nonce,
        proof: psk.receiver_proof(session, s, &nonce),
    }
}

#[test]
fn a_receiver_below_its_version_marks_its_nonce_and_only_then() {
    let marked = downgrade::mark(nonce(2), 6, 7);
    assert_eq!(downgrade::marked_version(&marked), Some(7));
    // The first 24 bytes stay the random ones.
    assert_eq!(marked.0[..24], nonce(2).0[..24]);
    assert_eq!(&marked.0[24..30], b"SRAPDG");
    assert_eq!(downgrade::mark(nonce(2), 7, 7), nonce(2));
    assert_eq!(downgrade::marked_version(&nonce(2)), None);
    let at_6 = downgrade::receiver_nonce(6).expect("OS randomness");
    let at_own = downgrade::receiver_nonce(PROTOCOL_VERSION).expect("OS randomness");
    assert_eq!(downgrade::marked_version(&at_6), Some(PROTOCOL_VERSION));
    assert_eq!(downgrade::marked_version(&at_own), None);
}

#[test]
fn a_rewritten_version_is_a_downgrade_and_a_real_older_peer_is_not() {
    use downgrade::check_challenge;
    let psk = key();
    let s = nonce(1);
    // 7 and 7, untouched.
    let honest = challenge_of(&psk, &s, 7, 7);
    assert_eq!(check_challenge(&psk, 7, 7, &s, &honest), Ok(()));
    // The sender's Hello rewritten from 7 to 6: the receiver runs at 6 and
    // marks its nonce, which its proof covers.
    let rewritten = challenge_of(&psk, &s, 6, 7);
    let err = check_challenge(&psk, 7, 6, &s, &rewritten).expect_err("a downgrade");
    assert_eq!(
        err,
        ChallengeError::Downgrade(Downgrade::HelloRewritten {
            offered: 7,
            receiver: 7,
            session: 6
        })
    );
    // A version-6 receiver marks nothing: the session runs at 6.
    let old_receiver = challenge_of(&psk, &s, 6, 6);
    assert_eq!(check_challenge(&psk, 7, 6, &s, &old_receiver), Ok(()));
    // A version-6 sender offered 6: the mark is just nonce bytes to it, and
    // its old check of the proof passes.
    assert_eq!(check_challenge(&psk, 6, 6, &s, &rewritten), Ok(()));
    assert!(psk.verify_receiver(6, &s, &rewritten.nonce, &rewritten.proof));
    // The receiver's answer put under header 6 when it proved 7.
    assert_eq!(
        check_challenge(&psk, 7, 6, &s, &honest),
        Err(ChallengeError::Downgrade(Downgrade::HeaderRewritten {
            header: 6,
            proved: 7
        }))
    );
    // A newer receiver (8) runs at 7 with this sender: no downgrade.
    assert_eq!(
        check_challenge(&psk, 7, 7, &s, &challenge_of(&psk, &s, 7, 8)),
        Ok(())
    );
    // Another key proves no version at all.
    let other = Psk::new(b"another key, 16+ bytes").expect("psk");
    assert_eq!(
        check_challenge(&other, 7, 7, &s, &honest),
        Err(ChallengeError::WrongKey)
    );
    // The latest bump alike: a Hello of 10 rewritten to 9 (which would
    // strip UDP's fields from every description) is a downgrade, and a
    // real receiver of 9 runs the session at 9.
    let ours = PROTOCOL_VERSION;
    let rewritten = challenge_of(&psk, &s, ours - 1, ours);
    assert_eq!(
        check_challenge(&psk, ours, ours - 1, &s, &rewritten),
        Err(ChallengeError::Downgrade(Downgrade::HelloRewritten {
            offered: ours,
            receiver: ours,
            session: ours - 1
        }))
    );
    let old_receiver = challenge_of(&psk, &s, ours - 1, ours - 1);
    assert_eq!(
        check_challenge(&psk, ours, ours - 1, &s, &old_receiver),
        Ok(())
    );
}

#[test]
fn a_downgrade_names_what_happened_and_what_to_do() {
    let text = Downgrade::HelloRewritten {
        offered: 7,
        receiver: 7,
        session: 6,
    }
    .to_string();
    assert!(
        text.starts_with("protocol downgrade by something on the path"),
        "{text}"
    );
    assert!(text.contains("(WireGuard, IPsec)"), "{text}");
    let header = Downgrade::HeaderRewritten {
        header: 6,
        proved: 7,
    }
    .to_string();
    assert!(
        header.contains("rewritten by something on the path"),
        "{header}"
    );
    // Whole in the receiver's log, which keeps 200 characters of a peer's
    // error, even with versions of five digits.
    let longest = Downgrade::HelloRewritten {
        offered: u16::MAX,
        receiver: u16::MAX,
        session: u16::MAX,
    };
    assert!(longest.to_string().chars().count() <= 200, "{longest}");
}

/// A receiver of two NICs (the second without a description or an
/// observer) and `ports` listening ports accepted on every address.
fn receiver_nics(ports: u16) -> ReceiverNics {
    let a: IpAddr = "10.0.0.2".parse().expect("address");
    let b: IpAddr = "10.0.1.2".parse().expect("address");
    let v6: IpAddr = "fd00::2".parse().expect("address");
    ReceiverNics {
        nics: vec![
            NicInfo {
                name: "eth0".into(),
                addrs: vec![a, v6],
                numa_node: Some(0),
                link: NicLink::Up,
                speed_mbps: Some(200_000),
                description: Some((&with_udp()).into()),
                verifier: Some(LandingReport {
                    version: 3,
                    verdict: LandingVerdict::Agreed,
                    matched: 8,
                    judged: 8,
                }),
                cpus: vec![0, 1, 2, 3],
            },
            NicInfo {
                name: "eth1".into(),
                addrs: vec![b],
                numa_node: None,
                link: NicLink::Down,
                speed_mbps: None,
                description: None,
                verifier: None,
                cpus: Vec::new(),
            },
        ],
        ports: (0..ports)
            .map(|i| PortAcceptance {
                port: 5201 + i,
                addrs: vec![a, b, v6],
            })
            .collect(),
    }
}

/// The variant index of [`Message::ReceiverNics`] (the eleventh).
const RECEIVER_NICS_KIND: u8 = 11;

#[test]
fn receiver_nics_round_trip_up_to_the_cap() {
    for ports in [0, 1, MAX_LISTEN_PORTS as u16] {
        let nics = receiver_nics(ports);
        assert_eq!(nics.check(), Ok(()));
        let message = Message::ReceiverNics(nics);
        let frame = encode(&message).expect("encodes");
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((message, frame.len())));
    }
}

#[test]
fn a_hostile_nic_count_is_an_error_not_an_allocation() {
    // One NIC more than the cap, then a count near u64::MAX, with nothing
    // behind either.
    let over = u8::try_from(MAX_NICS + 1).expect("fits");
    let err = decode_payload(&payload(&[RECEIVER_NICS_KIND, over])).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "a NIC list claims {over} entries; at most {MAX_NICS}"
        )),
        "{err}"
    );
    let mut body = vec![RECEIVER_NICS_KIND, 0xfd];
    body.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
    assert!(matches!(
        decode_payload(&payload(&body)),
        Err(DecodeError::Malformed { .. })
    ));
    // No NIC, then a listener list one longer than allowed.
    let ports = u16::try_from(MAX_LISTEN_PORTS + 1).expect("fits");
    let mut body = vec![RECEIVER_NICS_KIND, 0, 0xfb];
    body.extend_from_slice(&ports.to_le_bytes());
    let err = decode_payload(&payload(&body)).unwrap_err();
    assert!(err.to_string().contains("a listener list claims"), "{err}");
}

#[test]
fn a_nic_claiming_too_many_addresses_is_refused() {
    // One NIC named "x" (length 1, "x") whose address list claims 65.
    let body = [
        RECEIVER_NICS_KIND,
        1,
        1,
        b'x',
        u8::try_from(MAX_NIC_ADDRS + 1).expect("fits"),
    ];
    let err = decode_payload(&payload(&body)).unwrap_err();
    assert!(
        err.to_string()
            .contains("a NIC's address list claims 65 entries"),
        "{err}"
    );
}

#[test]
fn truncated_receiver_nics_are_refused() {
    let frame = encode(&Message::ReceiverNics(receiver_nics(2))).expect("encodes");
    let payload = &frame[PREFIX_LEN..];
    for cut in HEADER_LEN..payload.len() {
        assert!(
            matches!(
                decode_payload(&payload[..cut]),
                Err(DecodeError::Malformed { .. })
            ),
            "cut at {cut}"
        );
    }
}

/// A check's outcome with its error as the words a peer's operator reads.
fn message<E: std::fmt::Display>(checked: Result<(), E>) -> Result<(), String> {
    checked.map_err(|err| err.to_string())
}

#[test]
fn a_lying_nic_list_is_named() {
    let mut twice = receiver_nics(1);
    twice.nics[1].name = "eth0".into();
    assert_eq!(
        message(twice.check()),
        Err("NIC eth0 is listed twice".into())
    );
    let mut shared = receiver_nics(1);
    shared.nics[1].addrs = vec!["10.0.0.2".parse().expect("address")];
    assert_eq!(
        message(shared.check()),
        Err("address 10.0.0.2 is listed twice (NIC eth1)".into())
    );
    let mut stranger = receiver_nics(1);
    stranger.ports[0]
        .addrs
        .push("192.0.2.9".parse().expect("address"));
    assert_eq!(
        message(stranger.check()),
        Err("port 5201 is said to accept on 192.0.2.9, which no NIC listed holds".into())
    );
    let mut port_twice = receiver_nics(2);
    port_twice.ports[1].port = 5201;
    assert_eq!(
        message(port_twice.check()),
        Err("port 5201 is listed twice".into())
    );
    let mut long = receiver_nics(0);
    long.nics[0].name = "x".repeat(MAX_NIC_NAME + 1);
    assert!(
        long.check()
            .expect_err("too long")
            .to_string()
            .contains("not an interface name")
    );
    let mut empty = receiver_nics(0);
    empty.nics[0].name.clear();
    assert!(empty.check().is_err());
}

#[test]
fn a_version_7_peer_decodes_every_older_message_unchanged() {
    // ReceiverNics is the last variant: every message a peer of 7 sends or
    // reads keeps its index and layout, and a frame under header 7 decodes.
    let older = every_message()
        .into_iter()
        .filter(|m| !matches!(m, Message::ReceiverNics(_) | Message::NicGrants(_)));
    for message in older {
        let frame = encode_for(&message, 7).expect("encodes");
        assert_eq!(version_of(&frame[PREFIX_LEN..]), Some(7));
        let carried = message.at_version(7).into_owned();
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((carried, frame.len())));
    }
    assert_eq!(session_version(7), Some(7));
}

/// A grant on each of `nics` NICs (`eth0`, `eth1`, …), the second CPU of
/// each with a flow of another sender.
fn nic_grants(nics: u32) -> NicGrants {
    NicGrants {
        epoch: 5,
        nics: (0..nics)
            .map(|i| NicGrant {
                name: format!("eth{i}"),
                cpus: vec![
                    CpuCount {
                        cpu: 2 * i,
                        count: 0,
                    },
                    CpuCount {
                        cpu: 2 * i + 1,
                        count: 1,
                    },
                ],
            })
            .collect(),
    }
}

/// The variant index of [`Message::NicGrants`] (the twelfth).
const NIC_GRANTS_KIND: u8 = 12;

#[test]
fn nic_grants_round_trip_up_to_the_cap() {
    for nics in [0, 1, MAX_NICS as u32] {
        let grants = nic_grants(nics);
        assert_eq!(grants.check(), Ok(()));
        let message = Message::NicGrants(grants);
        let frame = encode(&message).expect("encodes");
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((message, frame.len())));
    }
    // The largest legal one (every NIC granted every slot) fits a frame.
    let mut largest = nic_grants(MAX_NICS as u32);
    for nic in &mut largest.nics {
        nic.cpus = (0..MAX_NIC_CPUS as u32)
            .map(|cpu| CpuCount { cpu, count: 0 })
            .collect();
    }
    assert_eq!(largest.check(), Ok(()));
    let frame = encode(&Message::NicGrants(largest)).expect("encodes");
    assert!(frame.len() < MAX_FRAME, "{} bytes", frame.len());
}

#[test]
fn a_hostile_nic_grant_count_is_an_error_not_an_allocation() {
    // Epoch 0, then one NIC more than the cap with nothing behind it.
    let over = u8::try_from(MAX_NICS + 1).expect("fits");
    let err = decode_payload(&payload(&[NIC_GRANTS_KIND, 0, over])).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "a NIC grant list claims {over} entries; at most {MAX_NICS}"
        )),
        "{err}"
    );
    // One NIC named "x" whose CPU list claims one more than the slots.
    let mut body = vec![NIC_GRANTS_KIND, 0, 1, 1, b'x', 0xfb];
    body.extend_from_slice(&u16::try_from(MAX_NIC_CPUS + 1).expect("fits").to_le_bytes());
    let err = decode_payload(&payload(&body)).unwrap_err();
    assert!(
        err.to_string().contains("a NIC's granted CPU list claims"),
        "{err}"
    );
    let frame = encode(&Message::NicGrants(nic_grants(2))).expect("encodes");
    let payload = &frame[PREFIX_LEN..];
    for cut in HEADER_LEN..payload.len() {
        assert!(
            matches!(
                decode_payload(&payload[..cut]),
                Err(DecodeError::Malformed { .. })
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn lying_nic_grants_are_named() {
    let mut twice = nic_grants(2);
    twice.nics[1].name = "eth0".into();
    assert_eq!(
        message(twice.check()),
        Err("NIC eth0 is granted twice".into())
    );
    let mut cpu_twice = nic_grants(1);
    cpu_twice.nics[0].cpus[1].cpu = 0;
    assert_eq!(
        message(cpu_twice.check()),
        Err("NIC eth0: a Grant names CPU 0 twice".into())
    );
    let mut unnamed = nic_grants(1);
    unnamed.nics[0].name.clear();
    assert!(
        unnamed
            .check()
            .expect_err("no name")
            .to_string()
            .contains("not an interface name")
    );
}

#[test]
fn a_nic_grant_is_found_by_its_nics_name() {
    let grants = nic_grants(2);
    let second = grants.of("eth1").expect("granted");
    assert_eq!(second.epoch, 5);
    assert_eq!(
        second.cpus.iter().map(|c| c.cpu).collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(grants.of("eth9"), None);
}

#[test]
fn a_version_8_peer_decodes_every_older_message_unchanged() {
    // NicGrants is the last variant: every message a peer of 8 sends or
    // reads keeps its index and layout, and a frame under header 8 decodes.
    let older = every_message()
        .into_iter()
        .filter(|m| !matches!(m, Message::NicGrants(_)));
    for message in older {
        let frame = encode_for(&message, 8).expect("encodes");
        assert_eq!(version_of(&frame[PREFIX_LEN..]), Some(8));
        let carried = message.at_version(8).into_owned();
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((carried, frame.len())));
    }
    assert_eq!(session_version(8), Some(8));
}

/// The version-9 layout of [`WireDescription`], as a peer of 9 derives
/// it: what a session of 9 must send, byte for byte.
#[derive(bincode::Encode)]
struct Version9Description {
    hfunc: String,
    key: String,
    indir: Vec<u32>,
    input_xfrm: String,
    fields_tcp4: String,
    fields_tcp6: String,
    queue_cpu: Option<Vec<u32>>,
}

impl From<WireDescription> for Version9Description {
    fn from(w: WireDescription) -> Self {
        Self {
            hfunc: w.hfunc,
            key: w.key,
            indir: w.indir,
            input_xfrm: w.input_xfrm,
            fields_tcp4: w.fields_tcp4,
            fields_tcp6: w.fields_tcp6,
            queue_cpu: w.queue_cpu,
        }
    }
}

/// The body a peer of 9 encodes for `update`: `RssUpdate`'s variant index
/// (3), then its fields in its layout.
fn version_9_body(update: &RssUpdate) -> Vec<u8> {
    let description = Version9Description::from(update.description.clone());
    let fields = (3u32, update.version, description, update.key);
    bincode::encode_to_vec(fields, bincode::config::standard()).expect("encodes")
}

#[test]
fn a_version_9_peer_gets_and_sends_descriptions_in_its_own_layout() {
    let Some(Message::RssUpdate(update)) = every_message().into_iter().nth(3) else {
        panic!("the fourth message is an RssUpdate");
    };
    let tcp_only = |d: &WireDescription| WireDescription {
        udp: None,
        ..d.clone()
    };
    // Under 9: the version-9 bytes, which decode without UDP's fields
    // (and so does what a peer of 9 sends).
    let frame = encode_for(&Message::RssUpdate(update.clone()), 9).expect("encodes");
    assert_eq!(frame[PREFIX_LEN + HEADER_LEN..], version_9_body(&update));
    let Ok((Message::RssUpdate(got), _)) = decode_frame(&frame, MAX_FRAME) else {
        panic!("a version-9 frame decodes");
    };
    assert_eq!(got.description, tcp_only(&update.description));
    let planned = RssDescription::from(got.description);
    assert_eq!(planned.fields.of(FlowType::UDP4), None);
    assert_eq!(planned.fields.of(FlowType::TCP4), Some("sdfn"));
    // Under 10: UDP's fields arrive, the unknown ones unknown.
    let frame = encode_for(&Message::RssUpdate(update.clone()), 10).expect("encodes");
    let Ok((Message::RssUpdate(got), _)) = decode_frame(&frame, MAX_FRAME) else {
        panic!("a version-10 frame decodes");
    };
    assert_eq!(RssDescription::from(got.description), with_udp());
    // Each NIC's description likewise.
    let nics = Message::ReceiverNics(receiver_nics(1));
    let frame = encode_for(&nics, 9).expect("encodes");
    let Ok((Message::ReceiverNics(got), _)) = decode_frame(&frame, MAX_FRAME) else {
        panic!("a version-9 NIC list decodes");
    };
    let first = got.nics[0].description.as_ref().expect("a description");
    assert_eq!(first.udp, None);
}

#[test]
fn a_version_9_peer_decodes_every_older_message_unchanged() {
    // Every message of 9 keeps its index and layout but the descriptions,
    // which it is sent without UDP's fields, as it reads them.
    for message in every_message() {
        let frame = encode_for(&message, 9).expect("encodes");
        assert_eq!(version_of(&frame[PREFIX_LEN..]), Some(9));
        let carried = message.at_version(9).into_owned();
        assert_eq!(decode_frame(&frame, MAX_FRAME), Ok((carried, frame.len())));
    }
    assert_eq!(session_version(9), Some(9));
    assert_eq!(PROTOCOL_VERSION, 10);
}
