//! Calls through one Tool process: round-trip latency (p50, p99) of one
//! call at a time, and throughput with 1, 32 and 64 calls outstanding.
//!
//! The process is examples/tools/calc (the Rust toolkit), so the numbers
//! measure the host client, the pipes and the toolkit, not a tool's work.
//! Run: `cargo bench -p flow-toolkit --bench calls`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flow_abi::fact::{CallId, RunId};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn start(rt: &tokio::runtime::Runtime) -> ProcessHandle {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tools/calc");
    let text = std::fs::read_to_string(dir.join("tools.json")).expect("calc tools.json");
    let doc = flow_abi::json::parse(&text).expect("a JSON document");
    let (listed, types) = flow_toolkit::document::read(&doc).expect("a flow tools document");
    let decls = Declarations::new(Arc::new(types), listed.into_iter().map(|l| l.decl));
    let binding = Binding {
        launch: Launch::Command(vec![
            env!("CARGO_BIN_EXE_flow-example-calc").into(),
            "tools.json".into(),
        ]),
        dir,
        resend: false,
    };
    rt.block_on(ProcessHandle::start(
        &binding,
        decls,
        ProcessOptions::default(),
        CancellationToken::new(),
    ))
    .expect("calc starts")
}

fn add(n: u64) -> CallRequest {
    let mut args = serde_json::Map::new();
    args.insert("a".into(), serde_json::Value::from(n));
    args.insert("b".into(), serde_json::Value::from(1u64));
    CallRequest {
        run: RunId::parse("run-00000000000000000000000001").unwrap(),
        call: CallId::new("root", n).unwrap(),
        tool: "calc.json#add".into(),
        args,
    }
}

/// `iters` calls, `outstanding` at a time; the time they all took.
async fn run(p: &ProcessHandle, iters: u64, outstanding: u64, next: &Arc<AtomicU64>) -> Duration {
    let end = next.load(Ordering::Relaxed) + iters;
    let t0 = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..outstanding {
        let p = p.clone();
        let next = next.clone();
        workers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= end {
                    break;
                }
                let out = p.call(add(n)).await;
                assert!(matches!(out, CallOutcome::Ok(_)), "{out:?}");
            }
        });
    }
    while workers.join_next().await.is_some() {}
    // Leave the counter at `end` so call ids stay unique across batches.
    next.store(end, Ordering::Relaxed);
    t0.elapsed()
}

fn calls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let p = start(&rt);
    let next = Arc::new(AtomicU64::new(0));

    // Latency percentiles of one call at a time.
    let mut lat: Vec<Duration> = rt.block_on(async {
        let mut v = Vec::with_capacity(5000);
        for _ in 0..5000 {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let t = Instant::now();
            let out = p.call(add(n)).await;
            v.push(t.elapsed());
            assert!(matches!(out, CallOutcome::Ok(_)));
        }
        v
    });
    lat.sort();
    let pct = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    eprintln!(
        "round trip, one call at a time: p50 {:?}, p99 {:?} (n = {})",
        pct(0.50),
        pct(0.99),
        lat.len()
    );

    let mut g = c.benchmark_group("process_calls");
    g.throughput(Throughput::Elements(1));
    for k in [1u64, 32, 64] {
        g.bench_function(format!("outstanding_{k}"), |b| {
            b.iter_custom(|iters| rt.block_on(run(&p, iters, k, &next)))
        });
    }
    g.finish();
    rt.block_on(p.shutdown());
}

criterion_group!(benches, calls);
criterion_main!(benches);
