//! How fast grants follow a joining sender: with three idle sender agents
//! holding their grants from one receiver agent (16 CPUs: 6, 5 and 5), the
//! time from a fourth sender agent being started until every sender's
//! pinned `SRAP_GRANTS` row holds the re-balanced split (4 CPUs each,
//! disjoint, all 16). That spans the agent's start (eBPF load and attach),
//! its session with the receiver, the receiver's re-allocation and every
//! sender applying its new grant. Goal: under 1 s.
//!
//! The set-up is the grants test's (`srap_tests::grants`): each
//! iteration starts the fourth agent in its prepared namespace, polls the
//! four pinned maps every 5 ms (bounded by the harness's timeout), then,
//! untimed, stops it, detaches its binder and waits for the three to be
//! re-balanced before the next. Ten or more iterations, 5 to 20 s in all.
//!
//! Needs root (namespaces, cgroups, bpffs) and the built agent binaries:
//! elsewhere it prints SKIP and measures nothing.

use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use srap_tests::{grants::Cluster, privileged_or_skip};

const POLL: Duration = Duration::from_millis(5);

fn fourth_sender_join(c: &mut Criterion) {
    if !privileged_or_skip("grants benchmark") {
        return;
    }
    let mut cluster = Cluster::new();
    for _ in 0..3 {
        let i = cluster.add_host();
        cluster.start_agent(i);
    }
    let three = [0, 1, 2];
    cluster.wait_pinned_balanced(&three, POLL);
    let fourth = cluster.add_host();
    let four = [0, 1, 2, fourth];

    let mut group = c.benchmark_group("grants");
    // Each iteration is a whole agent start: one per sample, ten samples.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("fourth_sender_join", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                cluster.start_agent(fourth);
                cluster.wait_pinned_balanced(&four, POLL);
                total += started.elapsed();
                cluster.senders[fourth].detach();
                cluster.wait_pinned_balanced(&three, POLL);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, fourth_sender_join);
criterion_main!(benches);
