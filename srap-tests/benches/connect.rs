//! What the binder costs a connection: one TCP connect() + accept() + close
//! over a veth between two namespaces, without the binder and then with it
//! attached toward a 4-CPU and a 512-CPU receiver (same run, same sockets,
//! same veth). Goals: under 1 µs added per connect, ≤ 1.10× baseline, and
//! no growth with the slot count (the slot choice reads one bitmap word per
//! 64 slots, never every slot). Then the baseline and the 4-slot binder
//! again with every other core kept busy by a spinning thread (report-only:
//! what a connect costs on a loaded host).
//!
//! Needs root (namespaces, cgroups, bpffs): elsewhere it prints SKIP and
//! measures nothing. The bench process itself joins a fresh cgroup for the
//! run (connect hooks act on the connecting process's cgroup) and goes back
//! to its own cgroup at the end.

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    time::Duration,
};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use srap_common::{
    binder::{CONNECT4_PROGRAM, RELEASE_PROGRAM},
    rss::{RssDescription, RssModel, embedded_default},
};
use srap_daemon::sender::{self, SenderOptions};
use srap_lab::binder::InCgroup;
use srap_tests::{TwoHosts, cgroup::CgroupDir, require_privileged, unique_name};

/// Closes with RST (SO_LINGER 0): no TIME_WAIT, so steered ports are free
/// again at once and every iteration measures the same path.
fn close_now(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
}

fn round_trip(listener: &TcpListener, server: SocketAddr) {
    let client = TcpStream::connect(server).expect("connect");
    let (accepted, _) = listener.accept().expect("accept");
    close_now(client);
    drop(accepted);
}

fn connect_accept(c: &mut Criterion) {
    if !require_privileged("connect benchmark") {
        return;
    }
    let hosts = TwoHosts::pair(50).expect("two namespaces joined by a veth");
    let (listener, server) = hosts.listen(5201).expect("listen");
    let cgroup = CgroupDir::unique().expect("cgroup path");
    cgroup.create().expect("create cgroup");
    let joined = InCgroup::enter(cgroup.path()).expect("join the bench cgroup");

    // The client side runs on this thread, in the sender's namespace.
    let inside = hosts.sender.enter().expect("enter sender netns");
    let mut group = c.benchmark_group("connect_accept");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("baseline", |b| b.iter(|| round_trip(&listener, server)));

    for cpus in [4u32, 512] {
        bench_binder(&mut group, &cgroup, cpus, "", &listener, server);
    }
    group.finish();

    let spinning = Spinners::start();
    let mut group = c.benchmark_group("connect_accept_busy");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("baseline", |b| b.iter(|| round_trip(&listener, server)));
    bench_binder(&mut group, &cgroup, 4, " busy", &listener, server);
    group.finish();
    drop(spinning);
    drop(inside);
    // Back to this process's own cgroup, so the bench's can go.
    drop(joined);
    drop(cgroup);
}

/// Threads that keep every core but one busy while they live.
struct Spinners {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    fn start() -> Self {
        use std::sync::{Arc, atomic::AtomicBool};
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (1..cores.max(2))
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Mean run time per call of the connect and release hooks, from the
/// kernel's `BPF_STATS_RUN_TIME` accounting.
fn print_hook_times(layout: &sender::PinLayout, label: &str) {
    for name in [CONNECT4_PROGRAM, RELEASE_PROGRAM] {
        match aya::programs::ProgramInfo::from_pin(layout.program(name)) {
            Ok(info) if info.run_count() > 0 => eprintln!(
                "hook time ({label}): {name} {:.0} ns per call over {} calls",
                info.run_time().as_nanos() as f64 / info.run_count() as f64,
                info.run_count()
            ),
            Ok(_) => eprintln!("hook time ({label}): {name} never ran"),
            Err(err) => eprintln!("hook time ({label}): {name}: {err}"),
        }
    }
}

/// A receiver description with `cpus` CPUs (one queue each).
fn receiver_with(cpus: u32) -> RssDescription {
    let mut description = embedded_default();
    description.indir = (0..1024).map(|i| i % cpus).collect();
    description.queue_cpu = Some((0..cpus).collect());
    description
}

/// Attaches the binder for a `cpus`-CPU receiver, measures, detaches.
fn bench_binder(
    group: &mut BenchmarkGroup<'_, WallTime>,
    cgroup: &CgroupDir,
    cpus: u32,
    note: &str,
    listener: &TcpListener,
    server: SocketAddr,
) {
    let label = format!("{cpus} slots{note}");
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/srap-bench-{}", unique_name("p")));
    let options = SenderOptions {
        targets: sender::Target::all(
            &RssModel::from_description(&receiver_with(cpus)).expect("model"),
            &[server.ip()],
        ),
        ports: Vec::new(),
        cgroup: Some(cgroup.path().to_path_buf()),
        pin_dir: pin_dir.clone(),
        pacing_rate: None,
        port_range: None,
    };
    // The kernel's own accounting of each program's run time, on while the
    // binder runs: the hooks' cost alone, apart from the noisy wall clock.
    let stats_on = aya::sys::enable_stats(aya::sys::Stats::RunTime);
    match sender::start(&options, srap_daemon::ebpf_object()) {
        Ok(steering) => {
            group.bench_function(format!("binder_{cpus}_slots"), |b| {
                b.iter(|| round_trip(listener, server))
            });
            if stats_on.is_ok() {
                print_hook_times(&steering.layout, &label);
            }
            let stats = sender::read_stats(&steering.layout);
            eprintln!(
                "binder counters ({label}): {}",
                stats.map_or_else(|e| e.to_string(), |s| s.to_string())
            );
        }
        Err(err) => eprintln!("attaching the binder failed: {err}"),
    }
    if let Err(err) = sender::detach(&pin_dir) {
        eprintln!("cleanup: detach {}: {err}", pin_dir.display());
    }
}

criterion_group!(benches, connect_accept);
criterion_main!(benches);
