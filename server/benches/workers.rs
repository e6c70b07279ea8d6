//! Worker dispatch overhead (issue 12 §5, issue 36 §4): a Tool call
//! through a remote `flow worker` against the same Tool as the server's
//! own child process, on SQLite and on Postgres.
//!
//! Workload: the Rust toolkit's `calc` example (`calc.json#add(a, b)`,
//! answered at once), bound two ways on one `flow serve` each, for each
//! store (SQLite at `synchronous = FULL`; Postgres, a fresh schema each):
//! - **local**: `--tools flow.toml`, `calc` a child process of the server;
//! - **worker**: `--workers calc.json`, `calc` a child of a `flow worker`
//!   on the same machine, long-polling the server over HTTP (loopback).
//!
//! Rows: a run of N sequential `add` nodes (µs per call = the run's wall
//! time / N), and 32 runs of M steps at once, so 32 calls are outstanding
//! (calls/s). An fsync probe in the bench's temp directory runs in the
//! same process, since durable steps wait on it.
//!
//! Run: `cargo build --release -p flow-toolkit --bin flow-example-calc &&
//! cargo bench -p flowd --bench workers`. `FLOW_BENCH_SCALE=small` for a
//! quick look; `FLOW_BENCH_STEPS` (N, default 1000) and
//! `FLOW_BENCH_RUN_STEPS` (M, default 100). Postgres: `FLOW_TEST_POSTGRES`
//! or `postgres://postgres@127.0.0.1:5432/test`; without one, SQLite only.

// Shared with the service bench; this one uses part of it.
#[allow(dead_code)]
mod harness;

#[path = "../../tests/common/mod.rs"]
mod common;

use flowd::http::listing::StateName;
use harness::{Server, Table, env_usize, start_request};
use serde_json::{Value as Json, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs at once in the concurrent row: the outstanding calls.
const OUTSTANDING: usize = 32;

/// A flow of `n` sequential `add` nodes (module `calc.json`).
fn calc_flow(n: usize) -> Json {
    let mut nodes = vec![json!({"id": "start", "type": "input",
        "output_schema": {"x": {"type": "integer"}}})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..n {
        let id = format!("step-{i}");
        nodes.push(json!({"id": id, "type": "tool_invoke", "tool_id": "add",
            "input_map": {"a": "$.state.x", "b": "$.state.x"}}));
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    nodes.push(json!({"id": "done", "type": "output"}));
    edges.push(json!({"from": prev, "to": "done"}));
    json!({"spec_version": "1.0.0", "id": "bench-calc",
        "harness_meta": {"enabled": false, "max_steps": n + 10},
        "state_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "tools": {"add": {"tool_ref": "bench:add",
            "input_schema": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "output_schema": {"type": "integer"}}},
        "nodes": nodes, "edges": edges})
}

/// flow.toml binding `calc.json` to the release `flow-example-calc`,
/// beside a `calc.json` flow (a worker reads its declarations from it).
fn bindings(dir: &Path) -> PathBuf {
    let calc = harness::release_dir().join("flow-example-calc");
    assert!(
        calc.exists(),
        "{} is missing: cargo build --release -p flow-toolkit --bin flow-example-calc",
        calc.display()
    );
    std::fs::write(dir.join("calc.json"), calc_flow(1).to_string()).expect("calc.json");
    let toml = dir.join("flow.toml");
    std::fs::write(
        &toml,
        format!(
            "[tools.\"calc.json\"]\ncommand = \"{} {}\"\n",
            calc.display(),
            harness::repo()
                .join("examples/tools/calc/tools.json")
                .display()
        ),
    )
    .expect("flow.toml");
    toml
}

/// A `flow worker` (release) serving `tools` to `server`, stopped by pid.
struct Worker(Child);

impl Worker {
    fn start(server: &str, tools: &Path, log: &Path) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(["worker", "--server", server, "--tools"])
            .arg(tools)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("worker.log"))
            .spawn()
            .expect("flow worker");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        assert!(
            line.starts_with("flow worker "),
            "flow worker did not start: {line:?}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts one run and waits until it completes; its wall time in s.
async fn one_run(s: &Server, flow: &Json) -> f64 {
    let t = Instant::now();
    let body = start_request(flow.clone(), "calc.json", json!({"x": 1}), Some(30));
    let (a, _) = s.start_run(&body).await;
    let state = match a.state {
        StateName::Running => s.settled(&a.run, Duration::from_millis(5)).await.state,
        state => state,
    };
    assert_eq!(state, StateName::Completed, "{}", a.run);
    t.elapsed().as_secs_f64()
}

async fn rows(s: &Server, how: &str, n: usize, m: usize, table: &mut Table) -> (f64, f64) {
    // Warm up: the Tool's process is started and described at the first
    // bind; the worker's poll is under way.
    one_run(s, &calc_flow(2)).await;
    let secs = one_run(s, &calc_flow(n)).await;
    let per_call = secs * 1e6 / n as f64;
    table.row(
        format!("{how}: 1 run × {n} sequential calls"),
        format!("{per_call:.0} µs per call ({:.0} calls/s)", n as f64 / secs),
        "",
    );
    let flow = calc_flow(m);
    let (t, cpu) = (Instant::now(), s.cpu_ms());
    let runs = (0..OUTSTANDING).map(|_| one_run(s, &flow));
    futures_util::future::join_all(runs).await;
    let secs = t.elapsed().as_secs_f64();
    let calls = (OUTSTANDING * m) as f64;
    let rate = calls / secs;
    table.row(
        format!("{how}: {OUTSTANDING} runs × {m} calls at once ({OUTSTANDING} outstanding)"),
        format!(
            "{rate:.0} calls/s ({:.0} µs per call; the server's CPU {:.0} µs per call)",
            1e6 / rate,
            (s.cpu_ms() - cpu) * 1e3 / calls
        ),
        "",
    );
    (per_call, rate)
}

/// One store's four rows; `(local µs per call, local calls/s, remote µs
/// per call, remote calls/s)`.
fn store_rows(
    rt: &tokio::runtime::Runtime,
    store: &str,
    root: &Path,
    tools: &Path,
    pg: Option<(&common::Schema, &common::Schema)>,
    (n, m): (usize, usize),
    table: &mut Table,
) -> [f64; 4] {
    let args = |db: Option<&common::Schema>| -> Vec<String> {
        db.map(|d| {
            vec![
                "--postgres".into(),
                d.url.clone(),
                "--postgres-schema".into(),
                d.name.clone(),
            ]
        })
        .unwrap_or_default()
    };
    let local_args = args(pg.map(|p| p.0));
    let local_args: Vec<&str> = local_args.iter().map(String::as_str).collect();
    let local = Server::start_with(
        &root.join(format!("{store}-local")),
        &[tools.to_path_buf()],
        &local_args,
    );
    let (local_seq, local_rate) = rt.block_on(rows(
        &local,
        &format!("{store}, local child process"),
        n,
        m,
        table,
    ));
    drop(local);

    let mut remote_args = args(pg.map(|p| p.1));
    remote_args.extend(["--workers".into(), "calc.json".into()]);
    let remote_args: Vec<&str> = remote_args.iter().map(String::as_str).collect();
    let remote = Server::start_with(&root.join(format!("{store}-remote")), &[], &remote_args);
    let worker = Worker::start(
        &remote.base,
        tools,
        &root.join(format!("{store}-worker.log")),
    );
    let (remote_seq, remote_rate) = rt.block_on(rows(
        &remote,
        &format!("{store}, remote flow worker"),
        n,
        m,
        table,
    ));
    drop(worker);
    drop(remote);
    table.row(
        format!("{store}: worker overhead, sequential"),
        format!(
            "+{:.0} µs per call ({:.2}× the local call)",
            remote_seq - local_seq,
            remote_seq / local_seq
        ),
        "",
    );
    table.row(
        format!("{store}: worker throughput at {OUTSTANDING} outstanding"),
        format!("{:.2}× the local child's", remote_rate / local_rate),
        "",
    );
    [local_seq, local_rate, remote_seq, remote_rate]
}

fn main() {
    let small = harness::small();
    let n = env_usize("FLOW_BENCH_STEPS", if small { 200 } else { 1000 });
    let m = env_usize("FLOW_BENCH_RUN_STEPS", if small { 20 } else { 100 });
    let tmp = tempfile::tempdir().expect("tmp");
    let tools = bindings(tmp.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut table = Table::default();
    table.note(format!("load average at the start: {}", harness::load()));
    let fsync_us = harness::fsync_probe(tmp.path());

    let sqlite = store_rows(&rt, "SQLite", tmp.path(), &tools, None, (n, m), &mut table);
    let schemas = (common::Schema::new(), common::Schema::new());
    if let (Some(a), Some(b)) = (&schemas.0, &schemas.1) {
        let pg = store_rows(
            &rt,
            "Postgres",
            tmp.path(),
            &tools,
            Some((a, b)),
            (n, m),
            &mut table,
        );
        table.row(
            "remote dispatch, Postgres against SQLite, sequential",
            format!(
                "{:.2}× ({:.0} against {:.0} µs per call)",
                pg[2] / sqlite[2],
                pg[2],
                sqlite[2]
            ),
            "≤ 2×",
        );
        table.row(
            format!("remote dispatch, Postgres against SQLite, {OUTSTANDING} outstanding"),
            format!(
                "{:.2}× the cost ({:.0} against {:.0} calls/s)",
                sqlite[3] / pg[3],
                pg[3],
                sqlite[3]
            ),
            "≤ 2×",
        );
    } else {
        table.note("no Postgres (FLOW_TEST_POSTGRES): SQLite rows only");
    }
    table.note(format!(
        "fsync probe: median {fsync_us:.0} µs (4 KiB write + fsync) in the bench's temp directory"
    ));
    table.note(format!("load average at the end: {}", harness::load()));
    table.print();
}
