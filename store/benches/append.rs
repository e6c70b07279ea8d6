//! Append throughput (durable facts/s), sequential and with 8 concurrent
//! runs, at `synchronous=FULL` and `NORMAL`; the same with a 2 KiB value in
//! each fact (a blob and its `blob_refs` row, migration 0012); and verified
//! read throughput.
//! `cargo bench -p flow-store`. The larger measurements of issue 3 (100,000
//! facts, 100 runs, 1,000,000 runs for discovery, bytes on disk) are printed
//! by `cargo run --release -p flow-store --example store_report`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flow_store::conformance::{call_fact, new_run_id, start_fact};
use flow_store::{AppendFacts, ReadHistory, RunId, SqliteOptions, SqliteStore, Synchronous};
use serde_json::json;
use std::time::{Duration, Instant};

fn create(s: &SqliteStore) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({}));
    s.create_run(start.clone(), &sources, Vec::new())
        .expect("create");
    run
}

/// Appends `per_run` small facts to each of `runs` new runs, one thread per
/// run; returns the time taken.
fn append_batch(s: &SqliteStore, runs: usize, per_run: u64) -> Duration {
    let ids: Vec<RunId> = (0..runs).map(|_| create(s)).collect();
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for run in &ids {
            scope.spawn(move || {
                for n in 2..per_run + 2 {
                    s.append(run, call_fact(n, n, json!({"i": n})))
                        .expect("append");
                }
            });
        }
    });
    t0.elapsed()
}

/// Appends `per_run` facts each carrying a 2 KiB value of its own (one
/// blob each) to a new run; returns the time taken.
fn append_blobs(s: &SqliteStore, per_run: u64) -> Duration {
    let run = create(s);
    let pad = "b".repeat(2048);
    let t0 = Instant::now();
    for n in 2..per_run + 2 {
        s.append(&run, call_fact(n, n, json!({"i": n, "doc": pad})))
            .expect("append");
    }
    t0.elapsed()
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (name, sync) in [("full", Synchronous::Full), ("normal", Synchronous::Normal)] {
        let s = SqliteStore::open(
            tmp.path().join(format!("{name}.db")),
            SqliteOptions {
                synchronous: sync,
                ..SqliteOptions::default()
            },
        )
        .expect("open");
        let mut g = c.benchmark_group(format!("append_{name}"));
        g.sample_size(10);
        for runs in [1usize, 8] {
            let per_run = 200u64;
            g.throughput(Throughput::Elements(runs as u64 * per_run));
            g.bench_function(format!("{runs}_runs"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| append_batch(&s, runs, per_run)).sum())
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("append_blobs_{name}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements(200));
        g.bench_function("1_run", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| append_blobs(&s, 200)).sum())
        });
        g.finish();
    }
    let s = SqliteStore::open(
        tmp.path().join("read.db"),
        SqliteOptions {
            synchronous: Synchronous::Normal,
            ..SqliteOptions::default()
        },
    )
    .expect("open");
    let run = create(&s);
    for n in 2..=5000u64 {
        s.append(&run, call_fact(n, n, json!({"i": n})))
            .expect("append");
    }
    let mut g = c.benchmark_group("read");
    g.sample_size(10);
    g.throughput(Throughput::Elements(5000));
    g.bench_function("verified_5000_facts", |b| {
        b.iter(|| s.read_history(&run).expect("read"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
