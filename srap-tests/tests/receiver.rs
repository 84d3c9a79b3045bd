//! The receiver agent's server and the sender's client, in process on
//! loopback: a good client gets the description and every new version;
//! hostile clients (garbage, truncated, oversized, wrong version, wrong key,
//! outside the allow-list, hundreds at once) each get a clear error and a
//! closed connection, and the server goes on serving.

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use srap_common::{
    rss::{RssDescription, embedded_default},
    wire::{
        self, CpuCount, CpuPorts, DemandReport, Hello, MAGIC, MAX_FRAME, MIN_PROTOCOL_VERSION,
        Message, Nonce, PROTOCOL_VERSION, PlanReport, PlannedTable, Psk, Response, Role,
    },
};
use srap_daemon::{
    psk::Keys,
    receiver::{AllowList, ServedDescription, Server, ServerConfig, Source, Timeouts, source},
    receiver_client::{
        self, Backoff, PeerConfig, PeerError, PeerHandle, PeerStatus, Session, Update,
    },
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::watch,
    time::timeout,
};

/// Upper bound on every wait here.
const WAIT: Duration = Duration::from_secs(10);

fn timeouts() -> Timeouts {
    Timeouts {
        handshake: Duration::from_millis(800),
        idle: Duration::from_secs(5),
        frame: Duration::from_millis(500),
        write: Duration::from_secs(2),
        keepalive: Duration::from_secs(1),
        linger: Duration::from_millis(300),
    }
}

fn psk(text: &str) -> Psk {
    Psk::new(text.as_bytes()).expect("a long enough key")
}

fn published(version: u64, description: RssDescription) -> ServedDescription {
    ServedDescription::new(version, description)
}

/// A description that differs from the default in its key.
fn changed_description() -> RssDescription {
    let mut d = embedded_default();
    d.key = d.key.replacen("6d", "6e", 1);
    assert_ne!(d, embedded_default());
    d
}

struct Fixture {
    server: Server,
    updates: watch::Sender<ServedDescription>,
}

impl Fixture {
    async fn start(config: ServerConfig) -> Self {
        let (updates, rx) = watch::channel(published(1, embedded_default()));
        let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), config, rx)
            .await
            .expect("bind on loopback");
        Self { server, updates }
    }

    async fn open() -> Self {
        Self::start(ServerConfig {
            timeouts: timeouts(),
            ..ServerConfig::default()
        })
        .await
    }

    fn addr(&self) -> String {
        self.server.local_addr().to_string()
    }

    /// A well-behaved sender connects and gets the current description.
    async fn good_client(&self, key: Option<Psk>) -> Update {
        let session = timeout(WAIT, Session::connect(&client_config(&self.addr(), key)))
            .await
            .expect("in time")
            .expect("a good client is served");
        session.first().clone()
    }

    async fn wait_idle(&self) {
        self.wait_for_peers(0).await;
    }
}

fn client_config(addr: &str, key: Option<Psk>) -> PeerConfig {
    let mut config = PeerConfig::new(addr, key);
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    config.timeouts.keepalive = Duration::from_secs(1);
    config
}

/// Sends `bytes` (then FIN if `finish`), reads until the server closes, and
/// returns the reason of the error frame it sent.
async fn hostile(addr: &str, bytes: &[u8], finish: bool) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("send");
    if finish {
        stream.shutdown().await.expect("FIN");
    }
    error_reason(&mut stream).await
}

/// Everything the server sends until it closes, as one error reason.
async fn error_reason(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut reply))
        .await
        .expect("the server closes the connection")
        .expect("read");
    let mut rest = &reply[..];
    // Skip what came before the error (e.g. a Challenge). An error to a peer
    // of an older version comes under that version's header.
    loop {
        let Some((prefix, after)) = rest.split_first_chunk::<4>() else {
            panic!("no error frame in {reply:?}");
        };
        let len = wire::payload_len(*prefix, MAX_FRAME).expect("a frame length");
        let payload = after.get(..len).expect("a whole frame");
        if let Some(report) = wire::decode_error_any_version(payload) {
            return report.reason;
        }
        rest = &after[len..];
    }
}

fn frame(message: &Message) -> Vec<u8> {
    wire::encode(message).expect("encodes")
}

fn hello() -> Message {
    hello_with(None)
}

/// A Hello naming the key `key` (a client that has none says so).
fn hello_with(key: Option<&Psk>) -> Message {
    Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        agent: "test".into(),
        nonce: Nonce::random().expect("random"),
        key: key.map(Psk::id),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_gets_the_description_and_every_new_version() {
    let fx = Fixture::open().await;
    let handle = receiver_client::watch(client_config(&fx.addr(), None));
    let first = next_update(&handle, |u| u.version == 1).await;
    assert_eq!(first.description, embedded_default());

    // A plan report reaches the receiver.
    let report = PlanReport {
        version: 1,
        tables: vec![PlannedTable {
            receiver: "10.0.0.2".parse().expect("ip"),
            source: "10.0.0.1".parse().expect("ip"),
            dst_port: 5201,
            cpus: vec![CpuPorts {
                cpu: 5,
                ports: vec![41000, 41003],
            }],
        }],
    };
    handle.report_plan(report.clone());
    wait_for(|| fx.server.plans().iter().any(|(_, p)| *p == report)).await;

    // A new version arrives within a second.
    let pushed = Instant::now();
    fx.updates.send_replace(published(2, changed_description()));
    let second = next_update(&handle, |u| u.version == 2).await;
    assert!(pushed.elapsed() < Duration::from_secs(1));
    assert_eq!(second.description, changed_description());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_an_error_and_the_server_keeps_serving() {
    let fx = Fixture::open().await;
    let reason = hostile(&fx.addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true).await;
    assert_eq!(
        reason,
        "not an SRAP peer: it sent \"GET \" where \"SRAP\" belongs"
    );
    let reason = hostile(
        &fx.addr(),
        &[0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4],
        true,
    )
    .await;
    assert!(reason.starts_with("not an SRAP peer"), "{reason}");
    fx.good_client(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_messages_are_named_and_stalls_time_out() {
    let fx = Fixture::open().await;
    let hello = frame(&hello());
    let reason = hostile(&fx.addr(), &hello[..hello.len() - 5], true).await;
    assert_eq!(
        reason,
        format!(
            "truncated message: expected {} bytes, got {}",
            hello.len(),
            hello.len() - 5
        )
    );
    // The same without FIN: the sender just stops.
    let started = Instant::now();
    let reason = hostile(&fx.addr(), &hello[..hello.len() - 5], false).await;
    assert_eq!(reason, "the rest of a message did not arrive within 800ms");
    assert!(started.elapsed() < Duration::from_secs(3));
    // And one that says nothing at all.
    let reason = hostile(&fx.addr(), b"", false).await;
    assert_eq!(reason, "no message within 800ms");
    fx.good_client(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_length_prefix_is_refused_before_reading_on() {
    let fx = Fixture::open().await;
    let reason = hostile(&fx.addr(), &u32::MAX.to_be_bytes(), false).await;
    assert_eq!(
        reason,
        "message of 4294967295 bytes exceeds the 4096-byte limit"
    );
    // Before authentication even a legal post-handshake size is too large.
    let reason = hostile(&fx.addr(), &100_000u32.to_be_bytes(), false).await;
    assert_eq!(
        reason,
        "message of 100000 bytes exceeds the 4096-byte limit"
    );
    fx.good_client(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_version_is_refused() {
    let fx = Fixture::open().await;
    let mut bytes = frame(&hello());
    // Version 1: a sender of the release before `Landings`.
    bytes[4 + MAGIC.len()..4 + MAGIC.len() + 2].copy_from_slice(&1u16.to_be_bytes());
    let reason = hostile(&fx.addr(), &bytes, false).await;
    assert_eq!(
        reason,
        format!(
            "protocol version 1 is not supported (this agent speaks versions \
             {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}); run the same SRAP release on both hosts"
        )
    );
    // A well-formed message of the wrong kind for the moment.
    let reason = hostile(&fx.addr(), &frame(&Message::Keepalive), false).await;
    assert_eq!(reason, "expected Hello, got Keepalive");
    fx.good_client(None).await;
}

fn psk_config(key: &str) -> ServerConfig {
    ServerConfig {
        keys: Keys::from(psk(key)),
        timeouts: timeouts(),
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_key_is_served() {
    let fx = Fixture::start(psk_config("right key, 16+ bytes")).await;
    let update = fx.good_client(Some(psk("right key, 16+ bytes"))).await;
    assert_eq!(update.description, embedded_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_refused_by_both_sides() {
    let right = psk("right key, 16+ bytes");
    let wrong = psk("wrong key, 16+ bytes");
    let fx = Fixture::start(psk_config("right key, 16+ bytes")).await;
    // A sender with another key is told its key is not the receiver's.
    let err = Session::connect(&client_config(&fx.addr(), Some(wrong.clone())))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "the receiver refused: the sender's pre-shared key (id {}) is not one this \
             receiver accepts: give both hosts the same key file",
            wrong.id()
        )
    );
    // A receiver that cannot prove the sender's key is not trusted.
    let rogue = rogue_receiver().await;
    let err = Session::connect(&client_config(&rogue, Some(right.clone())))
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, PeerError::WrongKey), "{err}");
    // A client that names the right key but answers the challenge with a
    // made-up proof is told so.
    let mut stream = TcpStream::connect(fx.addr()).await.expect("connect");
    stream
        .write_all(&frame(&hello_with(Some(&right))))
        .await
        .expect("hello");
    let bogus = Message::Response(Response {
        proof: wire::Mac([7; wire::MAC_LEN]),
    });
    stream.write_all(&frame(&bogus)).await.expect("response");
    assert_eq!(
        error_reason(&mut stream).await,
        "authentication failed: wrong pre-shared key"
    );
    fx.good_client(Some(psk("right key, 16+ bytes"))).await;
}

/// A receiver without the key: it answers every Hello with a challenge
/// whose proof is made up. Returns its address.
async fn rogue_receiver() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut prefix = [0u8; 4];
            if stream.read_exact(&mut prefix).await.is_err() {
                continue;
            }
            let len = wire::payload_len(prefix, MAX_FRAME).unwrap_or(0);
            let mut hello = vec![0u8; len];
            let _ = stream.read_exact(&mut hello).await;
            let challenge = Message::Challenge(wire::Challenge {
                nonce: Nonce::random().expect("random"),
                proof: wire::Mac([9; wire::MAC_LEN]),
            });
            let _ = stream.write_all(&frame(&challenge)).await;
            let mut rest = Vec::new();
            let _ = timeout(WAIT, stream.read_to_end(&mut rest)).await;
        }
    });
    addr
}

/// A client that knows the key and completes the handshake by hand, so it
/// can then send what no agent would: the session's two directions after
/// the first (sealed) description.
async fn raw_sealed_session(addr: &str, key: &Psk) -> (TcpStream, wire::Sealer, wire::Opener) {
    raw_sealed_session_of(addr, key, PROTOCOL_VERSION).await
}

/// [`raw_sealed_session`] as a sender of protocol `version` makes it: its
/// Hello under that header and naming it; the receiver's challenge must
/// come under it too, with a proof for it.
async fn raw_sealed_session_of(
    addr: &str,
    key: &Psk,
    version: u16,
) -> (TcpStream, wire::Sealer, wire::Opener) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let nonce = Nonce::random().expect("random");
    let hello = Message::Hello(Hello {
        version,
        agent: "test".into(),
        nonce,
        key: Some(key.id()),
    });
    let hello = wire::encode_for(&hello, version).expect("encodes");
    stream.write_all(&hello).await.expect("hello");
    let (header, challenge) = read_versioned(&mut stream, None).await;
    assert_eq!(header, version, "the challenge's header");
    let Message::Challenge(challenge) = challenge else {
        panic!("no challenge: {challenge:?}");
    };
    let v = version;
    assert!(key.verify_receiver(v, &nonce, &challenge.nonce, &challenge.proof));
    // Below its own version the receiver marks its nonce (a sender that
    // offered more would refuse: a downgrade); a sender of 6 ignores it.
    assert_eq!(
        wire::downgrade::marked_version(&challenge.nonce),
        (version < PROTOCOL_VERSION).then_some(PROTOCOL_VERSION)
    );
    let response = Message::Response(Response {
        proof: key.sender_proof(v, &nonce, &challenge.nonce),
    });
    let response = wire::encode_for(&response, version).expect("encodes");
    stream.write_all(&response).await.expect("response");
    let (sealer, mut opener) = wire::seal::session(key, Role::Sender, v, &nonce, &challenge.nonce);
    let (header, first) = read_versioned(&mut stream, Some(&mut opener)).await;
    assert_eq!(header, version, "the first description's header");
    let Message::RssUpdate(update) = first else {
        panic!("no description first: {first:?}");
    };
    // UDP's hashed fields from protocol 10 on; an older sender reads the
    // description in its own layout, without them.
    let carried = update.description.udp.is_some();
    assert_eq!(
        carried,
        version >= wire::UDP_FIELDS_SINCE,
        "protocol {version}"
    );
    (stream, sealer, opener)
}

/// One frame from `stream` and the protocol version in its header.
async fn read_versioned(
    stream: &mut TcpStream,
    opener: Option<&mut wire::Opener>,
) -> (u16, Message) {
    let mut prefix = [0u8; 4];
    timeout(WAIT, stream.read_exact(&mut prefix))
        .await
        .expect("in time")
        .expect("a frame");
    let len = wire::payload_len(prefix, MAX_FRAME).expect("length");
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.expect("payload");
    let version = wire::version_of(&payload).expect("a header");
    let message = match opener {
        Some(opener) => opener.open(&payload).expect("a genuine sealed frame"),
        None => wire::decode_payload(&payload).expect("a plain frame"),
    };
    (version, message)
}

/// A sender of protocol 6 (the release before `SeenFlows`) is served in
/// protocol 6 — header, proofs and sealed frames; the challenge's nonce
/// marked as run below 7, which such a sender takes as random bytes like
/// any other — and is never sent a
/// `SeenFlows`, which it could not decode; a sender of this release is
/// sent one (empty here: no observer) right after its first description.
/// Likewise a sender of 6 or 7 is never sent a `ReceiverNics`, one of
/// 8 or older never a `NicGrants` (its grant covers the first NIC only),
/// even from a receiver that serves two NICs, and one of 9 or older gets
/// its descriptions without UDP's hashed fields, in the layout it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_of_protocol_6_is_served_in_protocol_6() {
    let key = psk("right key, 16+ bytes");
    let fx = Fixture::start(psk_config("right key, 16+ bytes")).await;
    fx.server
        .offer_nics("eth0", vec![("eth1".to_owned(), vec![vec![40, 41]])]);
    for version in [6, 7, 8, 9, PROTOCOL_VERSION] {
        let (mut stream, _, mut opener) = raw_sealed_session_of(&fx.addr(), &key, version).await;
        // The grant, then keepalives (one a second): two keepalives mean
        // everything sent on connecting has come.
        let mut kinds = Vec::new();
        while kinds.iter().filter(|k| **k == "Keepalive").count() < 2 {
            let (header, message) = read_versioned(&mut stream, Some(&mut opener)).await;
            assert_eq!(header, version, "{message:?}");
            kinds.push(message.kind());
        }
        assert_eq!(
            kinds.contains(&"SeenFlows"),
            version >= 7,
            "protocol {version}: {kinds:?}"
        );
        // The NIC list from protocol 8 on; a peer of 7 or older knows the
        // first NIC only, from its description.
        assert_eq!(
            kinds.contains(&"ReceiverNics"),
            version >= 8,
            "protocol {version}: {kinds:?}"
        );
        // The grant of every NIC from protocol 9 on, right after the
        // first NIC's.
        assert_eq!(
            kinds.contains(&"NicGrants"),
            version >= 9,
            "protocol {version}: {kinds:?}"
        );
        assert!(kinds.contains(&"Grant"), "protocol {version}: {kinds:?}");
    }
}

/// This release's sender toward a receiver of protocol 6, without and
/// with a key: its Hello comes under header 6 (what such a receiver reads),
/// the session runs in 6 (the old receiver's proof is for 6 and its nonce
/// is plain random bytes: not a downgrade), and the sender knows the
/// receiver will say nothing of its flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_of_protocol_6_is_spoken_to_in_protocol_6() {
    for key in [None, Some(psk("right key, 16+ bytes"))] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let old = tokio::spawn(old_receiver(listener, key.clone()));
        let handle = receiver_client::watch(client_config(&addr, key.clone()));
        let mut seen = handle.seen();
        timeout(
            WAIT,
            seen.wait_for(|s| *s == receiver_client::SeenReport::Unsupported(6)),
        )
        .await
        .expect("in time")
        .expect("the client runs");
        // An older receiver describes no NIC list.
        timeout(
            WAIT,
            handle
                .nics()
                .wait_for(|n| *n == receiver_client::NicsReport::Unsupported(6)),
        )
        .await
        .expect("in time")
        .expect("the client runs");
        drop(handle);
        let (header, hello) = old.await.expect("join");
        assert_eq!(header, MIN_PROTOCOL_VERSION);
        assert!(
            matches!(
                hello,
                Message::Hello(Hello {
                    version: PROTOCOL_VERSION,
                    ..
                })
            ),
            "{hello:?}"
        );
    }
}

/// A receiver of protocol 6 serving one sender: with `key`, the challenge
/// as protocol 6 makes it (an unmarked random nonce, a proof for 6), then
/// its first description (sealed with a key). Returns the header and the
/// message of the sender's Hello.
async fn old_receiver(listener: tokio::net::TcpListener, key: Option<Psk>) -> (u16, Message) {
    let (mut stream, _) = listener.accept().await.expect("accept");
    let (header, hello) = read_versioned(&mut stream, None).await;
    let update = Message::RssUpdate(wire::RssUpdate {
        version: 1,
        description: (&embedded_default()).into(),
        key: srap_common::rss::KeyProvenance::default(),
    });
    let reply = match (&key, &hello) {
        (Some(key), Message::Hello(hello)) => {
            let nonce = Nonce::random().expect("random");
            let challenge = Message::Challenge(wire::Challenge {
                nonce,
                proof: key.receiver_proof(6, &hello.nonce, &nonce),
            });
            let challenge = wire::encode_for(&challenge, 6).expect("encodes");
            stream.write_all(&challenge).await.expect("challenge");
            let Message::Response(response) = read_payload(&mut stream, None).await else {
                panic!("no response");
            };
            assert!(key.verify_sender(6, &hello.nonce, &nonce, &response.proof));
            let (mut sealer, _) = wire::seal::session(key, Role::Receiver, 6, &hello.nonce, &nonce);
            sealer.seal(&update).expect("seals")
        }
        _ => wire::encode_for(&update, 6).expect("encodes"),
    };
    stream.write_all(&reply).await.expect("reply");
    // Held open until the sender has read the description.
    let mut rest = Vec::new();
    let _ = timeout(WAIT, stream.read_to_end(&mut rest)).await;
    (header, hello)
}

/// One frame from `stream`, opened with `opener` when given.
async fn read_payload(stream: &mut TcpStream, opener: Option<&mut wire::Opener>) -> Message {
    read_versioned(stream, opener).await.1
}

/// The reason of the sealed error the receiver sends before closing.
async fn sealed_error(stream: &mut TcpStream, opener: &mut wire::Opener) -> String {
    for _ in 0..16 {
        if let Message::Error(report) = read_payload(stream, Some(opener)).await {
            return report.reason;
        }
    }
    panic!("no error within 16 frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_handshake_only_sealed_frames_in_sequence_are_taken() {
    let key = psk("right key, 16+ bytes");
    let fx = Fixture::start(psk_config("right key, 16+ bytes")).await;
    let plan = Message::PlanReport(PlanReport::default());

    // A plain (unauthenticated) plan injected after the handshake.
    let (mut stream, _, mut opener) = raw_sealed_session(&fx.addr(), &key).await;
    stream.write_all(&frame(&plan)).await.expect("send");
    assert_eq!(
        sealed_error(&mut stream, &mut opener).await,
        "frame 0 failed authentication: it was altered on the way, injected, \
         or belongs to another session"
    );

    // A genuine frame, then the same frame again.
    let (mut stream, mut sealer, mut opener) = raw_sealed_session(&fx.addr(), &key).await;
    let genuine = sealer.seal(&plan).expect("seals");
    stream.write_all(&genuine).await.expect("send");
    stream.write_all(&genuine).await.expect("replay");
    assert_eq!(
        sealed_error(&mut stream, &mut opener).await,
        "frame 0 arrived where frame 1 was due: a replay of an earlier frame"
    );

    // One byte flipped in the middle of a frame.
    let (mut stream, mut sealer, mut opener) = raw_sealed_session(&fx.addr(), &key).await;
    let mut flipped = sealer.seal(&plan).expect("seals");
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    stream.write_all(&flipped).await.expect("send");
    assert!(
        sealed_error(&mut stream, &mut opener)
            .await
            .starts_with("frame 0 failed authentication"),
    );
    fx.wait_idle().await;
    fx.good_client(Some(key)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_must_be_on_both_sides_or_neither() {
    let with_key = Fixture::start(psk_config("right key, 16+ bytes")).await;
    let err = Session::connect(&client_config(&with_key.addr(), None))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "the receiver refused: this receiver requires a pre-shared key: give the sender \
         --psk-file FILE (`psk-file` in its TOML) with the receiver's key"
    );

    let open = Fixture::open().await;
    let err = Session::connect(&client_config(
        &open.addr(),
        Some(psk("right key, 16+ bytes")),
    ))
    .await
    .err()
    .expect("refused");
    assert!(matches!(err, PeerError::Unauthenticated), "{err}");
}

/// During a key rollover the receiver accepts either key, proving to each
/// sender the one it names; withdrawing a key closes the sessions that
/// authenticated with it (the others go on), and a sender whose key file
/// now holds the new key comes back with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_key_serves_a_rollover_and_a_withdrawn_key_closes_its_sessions() {
    let (old, new) = (psk("old key, 16+ bytes"), psk("new key, 16+ bytes"));
    let fx = Fixture::start(ServerConfig {
        keys: Keys::new([old.clone(), new.clone()]),
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    assert_eq!(
        fx.server.access().keys,
        [old.id().to_string(), new.id().to_string()]
    );
    let dir = tempdir();
    let key_file = dir.join("rollover.psk");
    std::fs::write(&key_file, "old key, 16+ bytes\n").expect("write key");
    let moving = receiver_client::watch(
        client_config(&fx.addr(), None).with_psk_file(key_file.clone(), old.clone()),
    );
    let staying = receiver_client::watch(client_config(&fx.addr(), Some(new.clone())));
    next_update(&moving, |_| true).await;
    next_update(&staying, |_| true).await;
    let keys_of_peers = || {
        let mut keys: Vec<Option<String>> = fx.server.peers().into_iter().map(|p| p.key).collect();
        keys.sort();
        keys
    };
    wait_for(|| fx.server.peers().len() == 2).await;
    let mut both = vec![Some(old.id().to_string()), Some(new.id().to_string())];
    both.sort();
    assert_eq!(keys_of_peers(), both);

    // The sender moves to the new key in its file; the receiver then drops
    // the old one.
    std::fs::write(&key_file, "new key, 16+ bytes\n").expect("write key");
    let mut staying_status = staying.status();
    staying_status.mark_unchanged();
    fx.server.set_keys(Keys::from(new.clone()));
    let mut status = moving.status();
    timeout(WAIT, status.wait_for(|s| matches!(s, PeerStatus::Away(_))))
        .await
        .expect("the old key's session is closed")
        .expect("client alive");
    let new_id = Some(new.id().to_string());
    wait_for(|| keys_of_peers() == [new_id.clone(), new_id.clone()]).await;
    assert!(
        !staying_status.has_changed().expect("client alive"),
        "the new key's session went on: {:?}",
        *staying_status.borrow()
    );
    let _ = std::fs::remove_file(&key_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_outside_the_allow_list_is_refused_unread() {
    let fx = Fixture::start(ServerConfig {
        allow: AllowList::new(vec!["10.0.0.0/8".parse().expect("cidr")]),
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    let reason = hostile(&fx.addr(), &frame(&hello()), false).await;
    assert_eq!(reason, "peer 127.0.0.1 is not allowed (--allow)");
    let err = Session::connect(&client_config(&fx.addr(), None))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "the receiver refused: peer 127.0.0.1 is not allowed (--allow)"
    );

    let allowed = Fixture::start(ServerConfig {
        allow: AllowList::new(vec!["127.0.0.0/8".parse().expect("cidr")]),
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    allowed.good_client(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_beyond_the_cap_are_refused_until_one_leaves() {
    let fx = Fixture::start(ServerConfig {
        max_peers: 2,
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    let a = receiver_client::watch(client_config(&fx.addr(), None));
    let b = receiver_client::watch(client_config(&fx.addr(), None));
    next_update(&a, |_| true).await;
    next_update(&b, |_| true).await;
    let err = Session::connect(&client_config(&fx.addr(), None))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "the receiver refused: too many peers (at most 2); try again later"
    );
    drop(a);
    fx.wait_for_peers(1).await;
    fx.good_client(None).await;
}

impl Fixture {
    async fn wait_for_peers(&self, n: usize) {
        wait_until("sessions did not end", || self.server.active_peers() <= n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_peers_at_once_leave_nothing_behind() {
    let fx = Fixture::start(ServerConfig {
        max_peers: 64,
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    fx.good_client(None).await;
    let rss_before = rss_kib();
    let mut peers = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let addr = fx.addr();
        peers.spawn(async move {
            let Ok(mut stream) = TcpStream::connect(&addr).await else {
                return;
            };
            match i % 4 {
                // Connect and leave.
                0 => {}
                // Say hello, take the description, leave.
                1 => {
                    let _ = stream.write_all(&frame(&hello())).await;
                    let mut buf = [0u8; 256];
                    let _ = timeout(Duration::from_secs(2), stream.read(&mut buf)).await;
                }
                // Claim a huge frame.
                2 => {
                    let _ = stream.write_all(&u32::MAX.to_be_bytes()).await;
                }
                // Garbage.
                _ => {
                    let _ = stream.write_all(&[0x55; 300]).await;
                }
            }
        });
    }
    let all_done = timeout(WAIT, async { while peers.join_next().await.is_some() {} }).await;
    assert!(all_done.is_ok(), "200 peers did not finish in time");
    fx.wait_idle().await;
    let update = fx.good_client(None).await;
    assert_eq!(update.description, embedded_default());
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 32 * 1024, "resident memory grew by {grown} KiB");
}

/// 200 senders hold grants at once: each is answered with a grant, and once
/// each has reported one flow the grants are the oversubscribed kind (every
/// offered CPU, the others' flows as base, 199 of them in all); memory stays
/// bounded, and leaving releases every grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_senders_hold_grants_at_once() {
    const SENDERS: u32 = 200;
    let fx = Fixture::start(ServerConfig {
        max_peers: 256,
        timeouts: timeouts(),
        ..ServerConfig::default()
    })
    .await;
    let offered = fx.server.offered().concat();
    assert_eq!(offered.len(), 32, "the embedded receiver's 32 CPUs");
    let rss_before = rss_kib();
    let handles: Vec<PeerHandle> = (0..SENDERS)
        .map(|_| receiver_client::watch(client_config(&fx.addr(), None)))
        .collect();
    for handle in &handles {
        let mut grants = handle.grants();
        timeout(
            WAIT,
            grants.wait_for(|g| g.as_ref().is_some_and(|g| !g.cpus.is_empty())),
        )
        .await
        .expect("every sender is granted in time")
        .expect("client alive");
    }
    for (i, handle) in handles.iter().enumerate() {
        let applied = handle.grants().borrow().as_ref().map_or(0, |g| g.epoch);
        handle.report_demand(DemandReport {
            applied,
            flows: vec![CpuCount {
                cpu: offered[i % offered.len()],
                count: 1,
            }],
        });
    }
    for (i, handle) in handles.iter().enumerate() {
        let mut grants = handle.grants();
        let settled = timeout(
            WAIT,
            grants.wait_for(|g| {
                g.as_ref().is_some_and(|g| {
                    g.cpus.len() == offered.len()
                        && g.cpus.iter().map(|c| c.count).sum::<u32>() == SENDERS - 1
                })
            }),
        )
        .await;
        assert!(
            settled.is_ok(),
            "sender {i}: {:?}",
            handle.grants().borrow()
        );
    }
    assert_eq!(fx.server.grants().len(), SENDERS as usize);
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 64 * 1024, "resident memory grew by {grown} KiB");
    drop(handles);
    wait_for(|| fx.server.grants().is_empty()).await;
}

/// A demand report naming more CPUs than a receiver has slots is refused
/// with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_demand_is_refused_by_name() {
    let fx = Fixture::open().await;
    let mut stream = TcpStream::connect(fx.addr()).await.expect("connect");
    stream.write_all(&frame(&hello())).await.expect("hello");
    let demand = Message::Demand(DemandReport {
        applied: 0,
        flows: (0..600).map(|cpu| CpuCount { cpu, count: 1 }).collect(),
    });
    stream.write_all(&frame(&demand)).await.expect("demand");
    let reason = error_reason(&mut stream).await;
    assert!(
        reason.contains("600 CPUs") && reason.contains("512"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_keeps_the_last_description_while_the_receiver_is_away() {
    let fx = Fixture::open().await;
    let addr = fx.server.local_addr();
    let handle = receiver_client::watch(client_config(&fx.addr(), None));
    next_update(&handle, |u| u.version == 1).await;
    drop(fx);

    let mut status = handle.status();
    timeout(WAIT, status.wait_for(|s| matches!(s, PeerStatus::Away(_))))
        .await
        .expect("notices the receiver left")
        .expect("status channel");
    assert_eq!(
        handle.updates().borrow().as_ref().map(|u| u.version),
        Some(1),
        "the last good description stays"
    );

    // The receiver comes back on the same port with a new description.
    let (updates, rx) = watch::channel(published(1, changed_description()));
    let _back = Server::bind(
        addr,
        ServerConfig {
            timeouts: timeouts(),
            ..ServerConfig::default()
        },
        rx,
    )
    .await
    .expect("rebind the same port");
    let update = next_update(&handle, |u| u.description == changed_description()).await;
    assert_eq!(update.version, 1);
    drop(updates);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_rss_file_is_a_new_version_and_a_broken_one_is_not() {
    let dir = tempdir();
    let path = dir.join("rss.json");
    write_json(&path, &embedded_default());
    let (mut rx, task) =
        source::watch(Source::File(path.clone()), Duration::from_millis(100)).expect("readable");
    assert_eq!(rx.borrow_and_update().version, 1);

    // Within WAIT, not a timed bound: the poll interval's promptness is
    // not a property worth a flaky assertion on a loaded CI machine.
    write_json(&path, &changed_description());
    timeout(WAIT, rx.changed())
        .await
        .expect("in time")
        .expect("watcher alive");
    assert_eq!(*rx.borrow_and_update(), published(2, changed_description()));

    // Rewritten unchanged, then broken: no new version either time.
    write_json(&path, &changed_description());
    std::fs::write(&path, "{ not json").expect("write");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!rx.has_changed().expect("watcher alive"));
    assert_eq!(rx.borrow().version, 2);
    task.abort();
}

#[test]
fn a_missing_or_invalid_file_is_a_clear_startup_error() {
    let dir = tempdir();
    let missing = dir.join("none.json");
    let err = Source::File(missing).read().unwrap_err();
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"key": "zz", "indir": [0]}"#).expect("write");
    let err = Source::File(bad).read().unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
}

async fn next_update(handle: &PeerHandle, pred: impl Fn(&Update) -> bool) -> Update {
    let mut updates = handle.updates();
    let found = timeout(WAIT, updates.wait_for(|u| u.as_ref().is_some_and(&pred)))
        .await
        .expect("the update arrives in time")
        .expect("client alive")
        .clone();
    found.expect("checked above")
}

async fn wait_for(cond: impl Fn() -> bool) {
    wait_until("condition not met in time", cond).await;
}

/// The one wait of these async tests (the harness's `poll_until` would
/// block a runtime thread the server under test runs on): `cond` checked
/// every 20 ms for up to [`WAIT`], failing with `what`.
async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This process's resident memory.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn tempdir() -> srap_tests::harness::TempDir {
    srap_tests::harness::TempDir::new("rcv").expect("temp dir")
}

fn write_json(path: &Path, description: &RssDescription) {
    // Write then rename, so the watcher never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, description.to_json_pretty()).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_names_a_receiver_of_an_older_release() {
    // What a receiver of a release this one no longer speaks with answers
    // our Hello: an error under its own header.
    const OLDER: u16 = MIN_PROTOCOL_VERSION - 1;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let old = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut hello = [0u8; 64];
        let _ = stream.read(&mut hello).await;
        let report = wire::ErrorReport::new(format!(
            "protocol version {PROTOCOL_VERSION} is not supported (this agent speaks version \
             {OLDER}); run the same SRAP release on both hosts",
        ));
        let reply = wire::encode_error_for(OLDER, &report).expect("encodes");
        stream.write_all(&reply).await.expect("reply");
    });
    let err = timeout(WAIT, Session::connect(&client_config(&addr, None)))
        .await
        .expect("in time")
        .err()
        .expect("refused");
    assert!(
        matches!(err, PeerError::OtherVersion { version: OLDER, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "the receiver speaks protocol version {OLDER} and this agent versions \
             {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}; run a newer SRAP release on the receiver"
        )),
        "{err}"
    );
    old.await.expect("join");
}
