//! RSS model benchmarks: the Toeplitz definition against the lookup tables,
//! the full 65 536-port → CPU table of one destination, hashing every port
//! against the affine port tables, and the binder's layout of a receiver
//! alone and over a bond's members (what a member going down re-plans).
//! `cargo xtask bench` prints the ratios.

use std::{hint::black_box, time::Duration};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use srap_common::{
    bond::MemberPlan,
    port_range::PortRange,
    port_tables::{LayoutPlan, TablePlan},
    protocol::Protocol,
    rss::{
        FlowTuple, HashFields, HashInput, InputXfrm, RssModel, ToeplitzTable, embedded_default,
        hash_naive,
    },
    solver::PortSolver,
};

/// The protocol the binder's layouts are built for, as SRAP steers it.
const TCP: Protocol = Protocol::Tcp;

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

/// Tuples per measured batch: distinct inputs, so neither path is flattered
/// by a branch predictor or cache that has learnt one input.
const BATCH: usize = 256;

fn batch(family: &str) -> Vec<HashInput> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..BATCH)
        .map(|_| {
            let (a, b) = (next().to_be_bytes(), next().to_be_bytes());
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) = if family == "ipv4" {
                (
                    [a[0], a[1], a[2], a[3]].into(),
                    [b[0], b[1], b[2], b[3]].into(),
                )
            } else {
                let wide = |x: [u8; 8], y: u64| -> [u8; 16] {
                    let mut out = [0u8; 16];
                    out[..8].copy_from_slice(&x);
                    out[8..].copy_from_slice(&y.to_be_bytes());
                    out
                };
                (wide(a, next()).into(), wide(b, next()).into())
            };
            let ports = next();
            let tuple = FlowTuple::new(src, ports as u16, dst, (ports >> 16) as u16).unwrap();
            HashInput::new(&tuple, HashFields::ALL, InputXfrm::None)
        })
        .collect()
}

fn toeplitz(c: &mut Criterion) {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let key = model.key().clone();
    let table = ToeplitzTable::new(key.clone());
    let mut group = c.benchmark_group("toeplitz");
    group.throughput(Throughput::Elements(BATCH as u64));
    for family in ["ipv4", "ipv6"] {
        let inputs = batch(family);
        group.bench_function(BenchmarkId::new(family, "naive"), |b| {
            b.iter(|| {
                black_box(&inputs)
                    .iter()
                    .fold(0, |acc, input| acc ^ hash_naive(&key, input.as_bytes()))
            })
        });
        group.bench_function(BenchmarkId::new(family, "table"), |b| {
            b.iter(|| {
                black_box(&inputs)
                    .iter()
                    .fold(0, |acc, input| acc ^ table.hash(input.as_bytes()))
            })
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

/// The receiver's any-port layout alone, over 4 bond members (the member
/// bits stacked above the entry's: 4 times the cosets), and a named port's
/// listed table over 3 members (the driver's modulo per port).
fn member_layout(c: &mut Criterion) {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let template = tuples()[0].1;
    let (src, dst) = (template.src(), template.dst());
    let range = PortRange::DEFAULT;
    let mut group = c.benchmark_group("member_layout");
    for (name, members) in [("plain", None), ("bond4", MemberPlan::new(4))] {
        group.bench_function(BenchmarkId::new("any_port", name), |b| {
            b.iter(|| LayoutPlan::any_port_over(&model, TCP, black_box(dst), range, members))
        });
    }
    group.bench_function(BenchmarkId::new("named_port", "bond3"), |b| {
        b.iter(|| {
            let ends = (src, black_box(dst));
            TablePlan::one_port_over(&model, TCP, ends, 5201, range, MemberPlan::new(3))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = toeplitz, port_table, member_layout
}
criterion_main!(benches);
