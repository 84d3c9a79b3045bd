//! RSS model benchmarks: the Toeplitz definition against the lookup tables,
//! and the full 65 536-port → CPU table of one destination, hashing every
//! port against the affine port tables. `cargo xtask bench` prints the ratios.

use std::{hint::black_box, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use srap_common::{
    rss::{
        FlowTuple, HashFields, HashInput, InputXfrm, RssModel, ToeplitzTable, embedded_default,
        hash_naive,
    },
    solver::PortSolver,
};

fn tuples() -> [(&'static str, FlowTuple); 2] {
    [
        (
            "ipv4",
            FlowTuple::new(
                "66.9.149.187".parse().unwrap(),
                2794,
                "161.142.100.80".parse().unwrap(),
                1766,
            )
            .unwrap(),
        ),
        (
            "ipv6",
            FlowTuple::new(
                "3ffe:2501:200:1fff::7".parse().unwrap(),
                2794,
                "3ffe:2501:200:3::1".parse().unwrap(),
                1766,
            )
            .unwrap(),
        ),
    ]
}

fn toeplitz(c: &mut Criterion) {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let key = model.key().clone();
    let table = ToeplitzTable::new(key.clone());
    let mut group = c.benchmark_group("toeplitz");
    for (family, tuple) in tuples() {
        let input = HashInput::new(&tuple, HashFields::ALL, InputXfrm::None);
        group.bench_function(BenchmarkId::new(family, "naive"), |b| {
            b.iter(|| hash_naive(black_box(&key), black_box(input.as_bytes())))
        });
        group.bench_function(BenchmarkId::new(family, "table"), |b| {
            b.iter(|| table.hash(black_box(input.as_bytes())))
        });
    }
    group.finish();
}

fn port_table(c: &mut Criterion) {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let template = tuples()[0].1;
    let mut group = c.benchmark_group("port_table");
    // Baseline: build each port's tuple and hash it with the lookup tables.
    group.bench_function(BenchmarkId::new("65536", "scan"), |b| {
        b.iter(|| {
            (0..=u16::MAX)
                .map(|port| model.landing(&black_box(template).with_sport(port)).cpu)
                .collect::<Vec<u32>>()
        })
    });
    // SRAP: per destination, 17 hashes build the affine port tables; then two
    // lookups and an XOR per port.
    group.bench_function(BenchmarkId::new("65536", "linear"), |b| {
        b.iter(|| PortSolver::new(&model, black_box(&template)).cpu_table())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = toeplitz, port_table
}
criterion_main!(benches);
