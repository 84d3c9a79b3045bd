//! `srap status` against a real receiver agent: two namespaces joined by an
//! 8-queue veth with the RSS-NIC emulator on the sender's end (so each
//! flow's receive queue is the one the RSS model computes), the agent
//! (`srap-agent receiver --rss FILE --iface VETH --control PATH --metrics
//! ADDR`) running in the receiver namespace with its observer, and more
//! flows than queues, so at least one queue must hold two. The status and
//! the metrics must show every flow on its predicted queue and count the
//! collisions the model predicts.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    ops::ControlFlow,
    path::Path,
    process::{Command, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use srap_common::rss::{FlowTuple, RssDescription, RssModel, embedded_default};
use srap_harness::emulator::Emulator;
use srap_status::Status;
use srap_tests::{
    TwoHosts, VethConfig, built_binary,
    harness::{ReceiverAgent, ReceiverOpts, TempDir, poll_until},
    promtool, require_privileged,
};

const QUEUES: u32 = 8;
/// More flows than queues: at least one queue has two.
const FLOWS: usize = 12;
const PORT: u16 = 5401;
const METRICS: &str = "127.0.0.1:9447";
const WAIT: Duration = Duration::from_secs(20);

/// An 8-queue NIC with an uneven 64-entry table (as in tests/emulator.rs).
fn description() -> RssDescription {
    RssDescription {
        indir: (0..64u32).map(|i| (i * 5 + i / 8) % QUEUES).collect(),
        queue_cpu: None,
        ..embedded_default()
    }
}

/// Stops the traffic threads on drop (also when an assertion fails).
struct Stop(Arc<AtomicBool>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn srap_status(control: &Path, extra: &[&str]) -> Output {
    Command::new(built_binary("srap"))
        .args(["status", "--control"])
        .arg(control)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run srap status")
}

fn status_json(control: &Path) -> Option<Status> {
    let out = srap_status(control, &["--once", "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("srap status --json is a Status"))
}

/// Polls `srap status` until `done` holds (bounded).
fn wait_status(control: &Path, what: &str, done: impl Fn(&Status) -> bool) -> Status {
    poll_until(WAIT, Duration::from_millis(200), || {
        match status_json(control) {
            Some(status) if done(&status) => ControlFlow::Break(status),
            last => ControlFlow::Continue(last),
        }
    })
    .unwrap_or_else(|last| panic!("{what}: not seen within {WAIT:?}; last status: {last:#?}"))
}

/// The body of an HTTP reply (after the blank line ending the head).
fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to --metrics");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    reply
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn status_shows_flows_on_their_predicted_queues_and_counts_collisions() {
    require_privileged("status_shows_flows_on_their_predicted_queues_and_counts_collisions");
    let model = RssModel::from_description(&description()).expect("valid description");
    let hosts = TwoHosts::new(VethConfig {
        tx_queues: QUEUES,
        rx_queues: QUEUES,
        ..VethConfig::default()
    })
    .expect("two namespaces joined by a veth");
    let server = SocketAddr::new(hosts.receiver_end.ip(false), PORT);

    let _emulator = hosts
        .sender
        .run(|| Emulator::attach(&hosts.sender_end.ifname, &model, QUEUES))
        .expect("enter sender namespace")
        .expect("attach the emulator");

    let opts = ReceiverOpts::new(
        built_binary("srap-agent"),
        &hosts.receiver_end.ifname,
        SocketAddr::from(([127, 0, 0, 1], 7447)),
    )
    .rss(description())
    .args(["--metrics", METRICS]);
    let mut agent = ReceiverAgent::start(&hosts.receiver, opts).expect("start srap-agent receiver");
    let control = agent.control();

    // The agent is up, its observer attached and its first sample taken
    // (before that the board holds only the observer's state).
    let first = wait_status(&control, "the agent's first sample", |s| {
        s.rss_version > 0 && (s.observer.hook.is_some() || s.observer.error.is_some())
    });
    assert!(
        first.observer.hook.is_some(),
        "observer: {:?}",
        first.observer
    );
    assert_eq!(first.rss_version, 1);
    assert_eq!(first.iface, hosts.receiver_end.ifname);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&control)
            .expect("control socket")
            .permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o600);
    // With no flows yet the metrics are mostly absent series; they must
    // still pass Prometheus's own lint.
    let idle = hosts
        .receiver
        .run(|| http_get(METRICS, "/metrics"))
        .expect("receiver ns");
    promtool::check_metrics("/metrics of an idle receiver", body(&idle));

    // The receiver's server reads everything; the sender's writer keeps
    // every flow busy until told to stop.
    let listener = hosts
        .receiver
        .run(|| TcpListener::bind(server))
        .expect("receiver ns")
        .expect("listen");
    let stop = Stop(Arc::new(AtomicBool::new(false)));
    let readers = {
        let stop = Arc::clone(&stop.0);
        thread::spawn(move || serve(&listener, &stop))
    };
    let clients: Vec<TcpStream> = hosts
        .sender
        .run(|| {
            (0..FLOWS)
                .map(|_| TcpStream::connect_timeout(&server, WAIT).expect("connect"))
                .collect()
        })
        .expect("sender ns");
    let sources: Vec<SocketAddr> = clients
        .iter()
        .map(|c| c.local_addr().expect("getsockname"))
        .collect();
    let writer = {
        let stop = Arc::clone(&stop.0);
        thread::spawn(move || keep_sending(clients, &stop))
    };

    let mut predicted: BTreeMap<u32, usize> = BTreeMap::new();
    for src in &sources {
        let tuple = FlowTuple::from_sockets(*src, server).expect("tuple");
        *predicted.entry(model.landing(&tuple).queue).or_default() += 1;
    }
    let expected_collisions = predicted.values().filter(|&&n| n > 1).count();
    assert!(expected_collisions >= 1, "{FLOWS} flows on {QUEUES} queues");

    // Every flow shows up with a rate (its second sample).
    let status = wait_status(&control, "all flows with a rate", |s| {
        sources.iter().all(|src| {
            s.flows
                .iter()
                .any(|f| f.src == *src && f.dst == server && f.gbps > 0.0)
        })
    });
    for src in &sources {
        let row = status
            .flows
            .iter()
            .find(|f| f.src == *src && f.dst == server)
            .expect("row");
        let landing = model.landing(&FlowTuple::from_sockets(*src, server).expect("tuple"));
        assert_eq!(row.predicted_queue, Some(landing.queue), "{row:?}");
        assert_eq!(row.queue, Some(landing.queue), "observed queue: {row:?}");
        assert_eq!(row.rss_cpu, Some(landing.cpu), "{row:?}");
        assert_eq!(row.planned_cpu, None, "no sender reported a plan");
    }
    assert_eq!(status.active_flows, FLOWS);
    assert_eq!(
        status.collisions.queues, expected_collisions,
        "{predicted:?}"
    );
    // queue_cpu is the identity here: CPU collisions are queue collisions.
    assert_eq!(status.collisions.rss_cpus, expected_collisions);
    assert_eq!(status.accuracy.queue.matched, FLOWS);
    assert_eq!(status.accuracy.queue.total, FLOWS);
    assert_eq!(status.accuracy.plan.total, 0);
    assert_eq!(status.queues.len(), QUEUES as usize);
    for row in &status.queues {
        let want = predicted.get(&row.queue).copied().unwrap_or(0);
        assert_eq!(row.flows, want, "queue {}", row.queue);
        assert_eq!(row.collision, want > 1, "queue {}", row.queue);
        assert_eq!(row.bytes > 0, want > 0, "queue {}", row.queue);
    }
    assert!(status.peers.is_empty());

    // The text view says the same.
    let text = srap_status(&control, &["--once"]);
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("<< collision"), "{text}");
    assert!(
        text.contains(&format!("prediction: queue {FLOWS}/{FLOWS} (100%)")),
        "{text}"
    );

    // The metrics, from inside the receiver's namespace.
    let reply = hosts
        .receiver
        .run(|| http_get(METRICS, "/metrics"))
        .expect("receiver ns");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    let busiest = predicted.iter().max_by_key(|(_, n)| **n).expect("a queue");
    for line in [
        "srap_observer_up 1".to_owned(),
        format!("srap_flows{{queue=\"{}\"}} {}", busiest.0, busiest.1),
        format!("srap_collisions{{kind=\"queue\"}} {expected_collisions}"),
        "srap_prediction_accuracy{kind=\"queue\"} 1".to_owned(),
        // The closed loop: every flow where the description says.
        "srap_description_contradicted 0".to_owned(),
        "srap_rss_version 1".to_owned(),
        "srap_peers 0".to_owned(),
    ] {
        // The metrics are a second or more later than the status above:
        // flows are still running, so the same holds.
        assert!(reply.lines().any(|l| l == line), "{line} in\n{reply}");
    }
    assert!(reply.contains("# TYPE srap_queue_bytes_total counter"));
    promtool::check_metrics("/metrics with flows and collisions", body(&reply));
    // Every receiver panel of the Grafana dashboard finds its series here.
    srap_tests::grafana::check_scrape(srap_tests::grafana::Agent::Receiver, body(&reply));
    let missing = hosts
        .receiver
        .run(|| http_get(METRICS, "/"))
        .expect("receiver ns");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");

    // Stop traffic, then the agent (SIGTERM): it removes its socket.
    drop(stop);
    writer.join().expect("writer");
    readers.join().expect("readers");
    let exit = agent.stop().expect("the agent stops on SIGTERM");
    assert!(exit.success(), "agent exit: {exit}");
    assert!(!control.exists(), "the control socket is removed on exit");
}

/// Accepts `FLOWS` connections (bounded wait) and reads each until EOF or stop.
fn serve(listener: &TcpListener, stop: &AtomicBool) {
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + WAIT;
    let mut readers = Vec::new();
    while readers.len() < FLOWS && !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false).expect("blocking");
                stream
                    .set_read_timeout(Some(Duration::from_millis(200)))
                    .expect("timeout");
                readers.push(thread::spawn(move || {
                    let mut sink = [0u8; 65536];
                    let deadline = Instant::now() + 3 * WAIT;
                    while Instant::now() < deadline {
                        match stream.read(&mut sink) {
                            Ok(0) => return,
                            Ok(_) => {}
                            Err(err)
                                if matches!(
                                    err.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            Err(_) => return,
                        }
                    }
                }));
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(err) => panic!("accept: {err}"),
        }
    }
    for reader in readers {
        let _ = reader.join();
    }
}

/// Writes 16 KiB to every flow every 20 ms until stop (or a bound), then
/// closes them.
fn keep_sending(mut clients: Vec<TcpStream>, stop: &AtomicBool) {
    let chunk = [0xa5u8; 16 * 1024];
    for client in &clients {
        client
            .set_write_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
    }
    let deadline = Instant::now() + 3 * WAIT;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for client in &mut clients {
            let _ = client.write_all(&chunk);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn status_without_an_agent_says_how_to_start_one() {
    let dir = TempDir::new("status").expect("temp dir");
    let control = dir.join("nothing-here.sock");
    for extra in [&["--once", "--json"][..], &["--once"], &[]] {
        let out = srap_status(&control, extra);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&control.display().to_string()) && err.contains("srap-agent receiver"),
            "{extra:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{extra:?}");
    }
}
