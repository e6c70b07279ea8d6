//! Durable steps per second through the real driver, store and Tool
//! processes.
//!
//! Workload (set beside LangGraph + SQLite checkpointer and DBOS on SQLite
//! running the same thing):
//! - a FlowSpec flow of 1,000 sequential `tool_invoke` nodes (input → 1,000
//!   tool nodes → output), each one Tool call with two small arguments,
//!   answered at once by a long-lived Tool process: the Rust toolkit example
//!   (`flow-example-calc`, `calc.json#add(a, b)`) and the Python toolkit one
//!   (`kv.py`, `kv.json#put(key, value)`);
//! - every fact durable before its consequence, SQLite at
//!   `synchronous=FULL` (WAL): per step a Checkpoint, a Call, then the Reply,
//!   with the Reply, the next Checkpoint and the next Call in one commit;
//! - the same with 10,000 steps (µs/step should stay flat), whose ~30,000
//!   facts are then replayed through the run service (reading, chain and
//!   blob verification, the engine's re-derivation): facts/s end to end;
//! - 50 runs of 100 such steps at once against each Tool, sharing one
//!   store (group commit) and one Tool process;
//! - the server's CPU per step (user + system time of this process, which
//!   holds the run service, the engine and the store's writer; the Tool
//!   processes are apart), beside the wall time;
//! - an fsync probe in the same run: median of 200 × (write 4 KiB, fsync) in
//!   the data directory, so µs per step is reported as a ratio to it.
//!
//! With `FLOW_BENCH_POSTGRES=1` the sequential Rust-Tool run and both
//! concurrent ones are measured again on a Postgres store (`FLOW_TEST_POSTGRES`
//! or `postgres://postgres@127.0.0.1:5432/test`; a fresh schema, dropped
//! after; `synchronous_commit = on`), beside SQLite (issue 12 §5).
//!
//! Run: `cargo build --release --workspace && cargo bench -p flowd --bench steps`.
//! Targets (issue 16): sequential ≤ 400 µs/step (≤ 1.4 × fsync), CPU
//! ≤ 150 µs per step; 50 concurrent runs ≥ 10,000 steps/s; replay ≥ 500,000
//! facts/s.

use flowd::service::bind::Bindings;
#[path = "../../tests/common/mod.rs"]
mod common;

use flowd::service::store::StoreRef;
use flowd::service::{RunResult, RunService, ServiceOptions};
use flowd::source::Sources;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fsync_probe(dir: &Path) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let block = vec![7u8; 4096];
    let mut times = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&block).expect("write");
        f.sync_all().expect("fsync");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Writes a flow of `n` sequential tool nodes and its flow.toml into `dir`.
fn write_flow(dir: &Path, kind: &str, n: usize) -> PathBuf {
    let (module, tool, schema, args, command) = match kind {
        "rust" => {
            let exe = repo().join("target/release/flow-example-calc");
            (
                "calc.json",
                "add",
                json!({"input_schema": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "output_schema": {"type": "integer"}}),
                json!({"a": "$.state.x", "b": "$.state.x"}),
                format!(
                    "{} {}",
                    exe.display(),
                    repo().join("examples/tools/calc/tools.json").display()
                ),
            )
        }
        _ => (
            "kv.json",
            "put",
            json!({"input_schema": {"key": {"type": "string"}, "value": {"type": "string"}},
                   "output_schema": {"type": "null"}}),
            json!({"key": "$.state.k", "value": "$.state.k"}),
            format!(
                "python3 {} {}",
                repo().join("examples/tools/kv/kv.py").display(),
                repo().join("examples/tools/kv/tools.json").display()
            ),
        ),
    };
    let mut nodes = vec![json!({"id": "start", "type": "input",
        "output_schema": {"x": {"type": "integer"}, "k": {"type": "string"}}})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..n {
        let id = format!("step-{i}");
        nodes.push(json!({"id": id, "type": "tool_invoke", "tool_id": tool, "input_map": args}));
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    nodes.push(json!({"id": "done", "type": "output"}));
    edges.push(json!({"from": prev, "to": "done"}));
    let mut tools = serde_json::Map::new();
    let mut def = schema.as_object().cloned().unwrap_or_default();
    def.insert("tool_ref".into(), json!(format!("bench:{tool}")));
    tools.insert(tool.to_string(), serde_json::Value::Object(def));
    let flow = json!({"spec_version": "1.0.0", "id": "bench-flow",
        "harness_meta": {"enabled": false, "max_steps": n + 10},
        "state_schema": {"type": "object", "properties": {"x": {"type": "integer"}, "k": {"type": "string"}}},
        "tools": tools, "nodes": nodes, "edges": edges});
    let path = dir.join(module);
    std::fs::write(&path, serde_json::to_string(&flow).expect("json")).expect("flow");
    std::fs::write(
        dir.join("flow.toml"),
        format!("[tools.\"{module}\"]\ncommand = \"{command}\"\n"),
    )
    .expect("flow.toml");
    path
}

/// Store options: the defaults, or `FLOW_BENCH_PAGE_SIZE` to compare page
/// sizes.
fn options() -> flow_store::SqliteOptions {
    let mut o = flow_store::SqliteOptions::default();
    if let Some(p) = std::env::var("FLOW_BENCH_PAGE_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        o.page_size = p;
    }
    o
}

fn disk(dir: &Path) -> u64 {
    ["flow.db", "flow.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// CPU time (user + system) of this process so far, in µs.
fn cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are
    // the 12th and 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map(|r| r.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) * 10_000.0
}

/// Where a bench's store lives.
#[derive(Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "Postgres",
        }
    }

    /// A new store: a file in `data`, or a fresh schema (dropped with the
    /// returned guard).
    fn open(self, data: &Path) -> (StoreRef, Option<common::Schema>) {
        match self {
            Backend::Sqlite => (
                Arc::new(
                    flow_store::SqliteStore::open(data.join("flow.db"), options()).expect("store"),
                ),
                None,
            ),
            Backend::Postgres => {
                let db = common::Schema::new().expect("a Postgres to measure on");
                let store = flow_store::PostgresStore::open(flow_store::PostgresOptions {
                    url: db.url.clone(),
                    schema: db.name.clone(),
                })
                .expect("postgres store");
                (Arc::new(store), Some(db))
            }
        }
    }
}

async fn sequential(kind: &str, steps: usize, fsync_us: f64, backend: Backend) {
    let tmp = tempfile::tempdir().expect("tmp");
    let flow = write_flow(tmp.path(), kind, steps);
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("data");
    let (store, schema) = backend.open(&data);
    let sources = Sources::read(&flow).expect("sources");
    let service = service(store, &flow);
    let before = disk(&data);
    let (t, cpu) = (Instant::now(), cpu_us());
    let accepted = match service.start(sources, r#"{"x": 1, "k": "key"}"#).await {
        Ok(a) => a,
        Err(e) => {
            println!("{kind}: cannot start ({e}); build with `cargo build --release --workspace`");
            return;
        }
    };
    let run = accepted.run.clone();
    let r = accepted.finished().await.expect("run");
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu);
    assert!(matches!(r, RunResult::Completed { .. }), "{r:?}");
    let n = steps as f64;
    let per_step = secs * 1e6 / n;
    println!(
        "{}: sequential, {kind} tool: {steps} steps in {secs:.3} s: {:.0} steps/s, {per_step:.0} µs/step = {:.2}× fsync, server CPU {:.0} µs/step, {} bytes on disk/step",
        backend.name(),
        n / secs,
        per_step / fsync_us,
        cpu / n,
        (disk(&data) - before) / steps as u64
    );
    if steps >= 10_000 {
        let (t, cpu) = (Instant::now(), cpu_us());
        let verdict = service.replay(&run).await.expect("replay");
        let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu);
        let facts = (3 * steps + 3) as f64;
        println!(
            "replay of that run ({facts} facts): {verdict} in {:.1} ms: {:.0} facts/s, CPU {:.2} µs/fact",
            secs * 1e3,
            facts / secs,
            cpu / facts
        );
    }
    service.shutdown(std::time::Duration::from_secs(5)).await;
    drop(schema);
}

async fn concurrent(kind: &str, fsync_us: f64, backend: Backend) {
    let tmp = tempfile::tempdir().expect("tmp");
    let flow = write_flow(tmp.path(), kind, 100);
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("data");
    let (store, schema) = backend.open(&data);
    let sources = Sources::read(&flow).expect("sources");
    let service = service(store, &flow);
    let (t, cpu) = (Instant::now(), cpu_us());
    let runs = (0..50).map(|_| {
        let (service, sources) = (service.clone(), sources.clone());
        async move {
            service
                .start(sources, r#"{"x": 1, "k": "key"}"#)
                .await?
                .finished()
                .await
        }
    });
    let results = futures_util::future::join_all(runs).await;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu);
    let ok = results
        .iter()
        .filter(|r| matches!(r, Ok(RunResult::Completed { .. })))
        .count();
    println!(
        "{}: concurrent, {kind} tool: 50 runs × 100 steps ({ok} completed) in {secs:.3} s: {:.0} steps/s ({:.0} µs/step, fsync {fsync_us:.0} µs), server CPU {:.0} µs/step",
        backend.name(),
        5000.0 / secs,
        secs * 1e6 / 5000.0,
        cpu / 5000.0
    );
    service.shutdown(std::time::Duration::from_secs(5)).await;
    drop(schema);
}

/// The run service as `flow serve` sets it up: the flow's flow.toml as the
/// server's `--tools`, its Tool processes pooled across runs.
fn service(store: StoreRef, flow: &Path) -> RunService {
    let toml = flow.parent().expect("flow dir").join("flow.toml");
    let manifest = flow_tools::manifest::Manifest::read(&toml).expect("flow.toml");
    RunService::new(
        store,
        ServiceOptions {
            bindings: Bindings::configured(vec![manifest]),
            progress: None,
            max_steps: None,
            lease: None,
        },
        tokio_util::sync::CancellationToken::new(),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tmp");
    let fsync_us = fsync_probe(tmp.path());
    println!("fsync probe: median {fsync_us:.0} µs (4 KiB write + fsync)");
    rt.block_on(async {
        let sqlite = Backend::Sqlite;
        sequential("rust", 1000, fsync_us, sqlite).await;
        sequential("rust", 10_000, fsync_us, sqlite).await;
        sequential("python", 1000, fsync_us, sqlite).await;
        concurrent("rust", fsync_us, sqlite).await;
        concurrent("python", fsync_us, sqlite).await;
        if std::env::var_os("FLOW_BENCH_POSTGRES").is_some() {
            let pg = Backend::Postgres;
            sequential("rust", 1000, fsync_us, pg).await;
            concurrent("rust", fsync_us, pg).await;
            concurrent("python", fsync_us, pg).await;
        }
    });
}
