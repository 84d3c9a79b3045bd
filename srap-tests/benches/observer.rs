//! What the receive observer costs, against a bare program of the same hook,
//! in the same run:
//!
//! * tc and XDP, per packet: `BPF_PROG_TEST_RUN` with `repeat` on a 1500-
//!   and a 9000-byte TCP packet (the kernel times the repeats; criterion
//!   gets that time). A size the kernel's test runner refuses for a hook
//!   (XDP without frags above a page) is reported and skipped.
//! * the socket hook, per connection: the kernel's `run_time_ns` for real
//!   connections between two namespaces. Per packet it does no work: the
//!   bench prints its run count before and after a bulk transfer.
//!
//! Needs root; elsewhere it prints SKIP and measures nothing.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::{AsFd as _, AsRawFd as _},
    time::Duration,
};

use aya::{
    Ebpf,
    programs::{CgroupAttachMode, SchedClassifier, SockOps, Xdp},
};
use criterion::{Criterion, criterion_group, criterion_main};
use srap_common::observer::{
    BARE_SOCK_PROGRAM, BARE_TC_PROGRAM, BARE_XDP_PROGRAM, OBSERVE_SOCK_PROGRAM, OBSERVE_TC_PROGRAM,
    OBSERVE_XDP_PROGRAM,
};
use srap_tests::{TwoHosts, privileged_or_skip};

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr` (the kernel zero-fills the rest).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

/// Runs `fd` on `packet` `repeat` times; the kernel's mean ns per run.
fn test_run(fd: i32, packet: &[u8], repeat: u32) -> std::io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: fd as u32,
        data_size_in: packet.len() as u32,
        data_in: packet.as_ptr() as u64,
        repeat,
        ..TestRunAttr::default()
    };
    // SAFETY: bpf(2) with an attr of the size given, pointing at `packet`,
    // which outlives the call; no output buffers. Ours: aya 0.14 keeps its
    // BPF_PROG_TEST_RUN to itself and no other crate has it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &raw mut attr,
            size_of::<TestRunAttr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr.duration)
}

/// An Ethernet + IPv4 + TCP packet of `len` bytes, 10.199.65.1:40000 →
/// 10.199.65.2:5201.
fn tcp_packet(len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    p[14] = 0x45;
    p[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    p[22] = 64;
    p[23] = 6;
    p[26..30].copy_from_slice(&[10, 199, 65, 1]);
    p[30..34].copy_from_slice(&[10, 199, 65, 2]);
    p[34..36].copy_from_slice(&40000u16.to_be_bytes());
    p[36..38].copy_from_slice(&5201u16.to_be_bytes());
    p[46] = 0x50;
    p[47] = 0x10;
    p
}

fn program_fd(ebpf: &mut Ebpf, name: &str) -> Option<i32> {
    let program = ebpf.program_mut(name)?;
    let fd = match program {
        aya::programs::Program::Xdp(p) => {
            let p: &mut Xdp = p;
            if p.fd().is_err() {
                p.load().ok()?;
            }
            p.fd().ok()?.as_fd().as_raw_fd()
        }
        aya::programs::Program::SchedClassifier(p) => {
            let p: &mut SchedClassifier = p;
            if p.fd().is_err() {
                p.load().ok()?;
            }
            p.fd().ok()?.as_fd().as_raw_fd()
        }
        _ => return None,
    };
    Some(fd)
}

/// The agents' object (the observer's programs) and the lab's (the bare
/// programs each is measured beside).
struct Objects {
    agent: Ebpf,
    lab: Ebpf,
}

impl Objects {
    fn load() -> Self {
        Self {
            agent: Ebpf::load(srap_daemon::ebpf_object()).expect("load the SRAP object"),
            lab: Ebpf::load(srap_harness::lab_ebpf_object()).expect("load the lab's object"),
        }
    }

    /// The object that holds program `name`.
    fn holding(&mut self, name: &str) -> &mut Ebpf {
        if self.agent.program(name).is_some() {
            &mut self.agent
        } else {
            &mut self.lab
        }
    }
}

fn per_packet(c: &mut Criterion) {
    if !privileged_or_skip("observer benchmark") {
        return;
    }
    let mut objects = Objects::load();
    let mut group = c.benchmark_group("observer_packet");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for (hook, bare, verify) in [
        ("tc", BARE_TC_PROGRAM, OBSERVE_TC_PROGRAM),
        ("xdp", BARE_XDP_PROGRAM, OBSERVE_XDP_PROGRAM),
    ] {
        for len in [1500usize, 9000] {
            let packet = tcp_packet(len);
            for (kind, name) in [("bare", bare), ("observer", verify)] {
                let Some(fd) = program_fd(objects.holding(name), name) else {
                    eprintln!("{name}: not loadable");
                    continue;
                };
                if let Err(err) = test_run(fd, &packet, 1) {
                    eprintln!("{hook} {kind} at {len} bytes: the kernel's test run refuses: {err}");
                    continue;
                }
                group.bench_function(format!("{hook}_{kind}_{len}"), |b| {
                    b.iter_custom(|iters| {
                        let repeat = u32::try_from(iters).unwrap_or(u32::MAX).max(1);
                        let mean = test_run(fd, &packet, repeat).unwrap_or(0);
                        Duration::from_nanos(u64::from(mean) * iters)
                    })
                });
            }
        }
    }
    group.finish();
}

/// One connection: connect, send `bytes`, close; the server reads it all.
fn connection(listener: &TcpListener, server: SocketAddr, bytes: usize) {
    let mut client = TcpStream::connect(server).expect("connect");
    let (mut accepted, _) = listener.accept().expect("accept");
    let chunk = vec![0x5au8; 64 * 1024];
    let mut left = bytes;
    let mut sink = vec![0u8; 64 * 1024];
    while left > 0 {
        let n = left.min(chunk.len());
        client.write_all(&chunk[..n]).expect("send");
        let mut got = 0;
        while got < n {
            got += accepted.read(&mut sink).expect("receive");
        }
        left -= n;
    }
    // RST instead of FIN (SO_LINGER 0): no TIME_WAIT, so thousands of
    // iterations never run out of ports. The close callback still runs.
    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
    drop(client);
    let _ = accepted.read(&mut sink);
}

fn run_stats(ebpf: &Ebpf, name: &str) -> (u64, u64) {
    let Some(program) = ebpf.program(name) else {
        return (0, 0);
    };
    let info = match program {
        aya::programs::Program::SockOps(p) => p.info(),
        _ => return (0, 0),
    };
    info.map_or((0, 0), |i| {
        (
            i.run_count(),
            u64::try_from(i.run_time().as_nanos()).unwrap_or(0),
        )
    })
}

fn per_connection(c: &mut Criterion) {
    if !privileged_or_skip("observer benchmark") {
        return;
    }
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let (listener, server) = hosts.listen(5201).expect("listen");
    let mut objects = Objects::load();
    let stats_on = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF run-time stats");
    for name in [OBSERVE_SOCK_PROGRAM, BARE_SOCK_PROGRAM] {
        let program: &mut SockOps = objects
            .holding(name)
            .program_mut(name)
            .expect("program")
            .try_into()
            .expect("sock_ops");
        program.load().expect("load sock_ops");
        // The listener was made in this process's cgroup: attach there by
        // attaching to the root (every cgroup) — the agent's default.
        let root = srap_tests::cgroup::cgroup2_mount().expect("cgroup2");
        let file = std::fs::File::open(root).expect("open cgroup2 root");
        program
            .attach(file, CgroupAttachMode::Single)
            .expect("attach sock_ops");
    }
    let inside = hosts.sender.enter().expect("enter sender netns");
    let mut group = c.benchmark_group("observer_connection");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for (kind, name) in [
        ("bare", BARE_SOCK_PROGRAM),
        ("observer", OBSERVE_SOCK_PROGRAM),
    ] {
        group.bench_function(format!("sock_{kind}"), |b| {
            b.iter_custom(|iters| {
                let (_, before) = run_stats(objects.holding(name), name);
                for _ in 0..iters {
                    connection(&listener, server, 0);
                }
                let (_, after) = run_stats(objects.holding(name), name);
                // Other hosts' connections on the root cgroup add runs too:
                // the mean stays a per-connection cost.
                Duration::from_nanos(after.saturating_sub(before))
            })
        });
    }
    group.finish();
    // Per packet: a 64 MiB transfer must add only the connection's own runs.
    let (runs_before, _) = run_stats(objects.holding(OBSERVE_SOCK_PROGRAM), OBSERVE_SOCK_PROGRAM);
    connection(&listener, server, 64 << 20);
    let (runs_after, _) = run_stats(objects.holding(OBSERVE_SOCK_PROGRAM), OBSERVE_SOCK_PROGRAM);
    eprintln!(
        "socket observer: {} runs (both ends, per-connection callbacks) for one connection carrying 64 MiB (~46000 \
         1448-byte segments): no per-packet work",
        runs_after - runs_before
    );
    drop(inside);
    drop(stats_on);
    drop(objects);
}

criterion_group!(benches, per_packet, per_connection);
criterion_main!(benches);
