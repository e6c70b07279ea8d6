//! Steady state at the physical limit (issue 16): durable steps through the
//! real `flow serve`, side by side with the fsync latency of the same disk
//! measured in the same run — of an append (the figure each ratio is to)
//! and of an overwrite in place (what a commit waits for once the WAL has
//! wrapped: a fresh WAL's first fill, until the first auto-checkpoint
//! about 330 steps in, appends, and its fsync writes the file's new size
//! and blocks too).
//!
//! Every row starts the release `flow serve` as a child process on
//! 127.0.0.1:0 with a fresh `--data` (SQLite, WAL, `synchronous=FULL`: each
//! fact durable before its consequence) and `--tools flow.toml` binding two
//! Tool processes that answer at once: this bench's own executable as a
//! Rust toolkit Tool (`tool.rs`, module `inc.json`) and the Python
//! `benches/tools/inc.py` (module `count.json`). Rows:
//!
//! - The floor of a W1 step (`floor.rs`), in two shapes: a program that
//!   makes only a step's system calls (a Tool round trip over pipes, the
//!   WAL's three frame writes in place, one fsync), with the commit handed
//!   to a writer thread as `flow serve` does and on one thread: µs and CPU
//!   per step that no server of that shape can go under on this machine.
//! - W1: one run of N sequential durable Tool steps (a loop of one
//!   `tool_invoke` node, `POST /v1/runs` with `wait` until it completes),
//!   N = 1,000 and 10,000, plain (the step replaces a counter) and
//!   accumulating (each result also appended to a list in state, reducer
//!   `append`): µs per step, its ratio to the fsync latency and to the
//!   writer-thread floor, the server's CPU per step (user + system of the
//!   `flow serve` process, from `/proc/PID/stat`, and each apart; the Tool
//!   processes apart) and its ratio to the floor's, and the bytes the SQLite
//!   file grew by per step (after `wal_checkpoint(TRUNCATE)`, before and
//!   after).
//! - W2: 50 runs × 100 such steps started at once: steps/s; and 50 runs ×
//!   1,000 (Rust Tool): what a batch's commit costs once each run's facts
//!   index has pages of its own.
//! - replay of the 10,000-step plain run (30,000+ facts): `POST
//!   /v1/runs/{run}/replay` and `flow replay RUN` (a process of its own,
//!   opening the store), facts/s end to end: reading, chain and blob
//!   verification, the engine's re-derivation.
//! - enc (`enc.rs`): W1 with encryption at rest off and on, alternating.
//! - SSE: 0, 1, 100 and 1,000 subscribers in another process
//!   (`subscribers.rs`) follow a run of 1,000 steps from its first fact:
//!   delivery latency of each Reply on each stream, from the moment the
//!   Tool process answered (so it includes the commit and its fsync) to its
//!   arrival; facts missed or repeated; and the run's own µs/step beside the
//!   run without subscribers.
//!
//! With `FLOW_BENCH_POSTGRES=1` the W1 (1,000 plain, Rust) and W2 (50 ×
//! 100, Rust) rows run again on a Postgres store (`FLOW_TEST_POSTGRES` or
//! `postgres://postgres@127.0.0.1:5432/test`, a fresh schema dropped
//! after), each right after the same row on SQLite, with their ratio
//! (issue 42; group `pg`, `FLOW_BENCH_PG_ROUNDS` [1] rounds, the W2 runs
//! `FLOW_BENCH_PG_W2_STEPS` [100] steps long). A Postgres row also gives
//! the database's CPU per step: every `postgres` process on this machine,
//! from `/proc` (nothing when the database runs elsewhere).
//!
//! Run: `cargo build --release --workspace && cargo bench -p flowd --bench
//! steps`. `FLOW_BENCH_ROWS` picks groups (w1, w2, replay, enc, sse);
//! `FLOW_BENCH_SCALE=small` runs smaller sizes; `FLOW_BENCH_SUBSCRIBERS`
//! picks the SSE rows' subscriber counts (e.g. `100`; default 1, 100 and
//! 1,000, or 1 and 10 when small); `FLOW_BENCH_KEEP=1` keeps
//! every row's data directory (printed) for profiling afterwards. Not part of CI: performance
//! is measured here, never by timed assertions in tests.

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

#[path = "../../../tests/common/mod.rs"]
mod common;

mod enc;
mod floor;
mod subscribers;
mod tool;

use flowd::http::listing::StateName;
use flowd::http::resume::ResumeRequest;
use flowd::http::start::StartRequest;
use harness::flows::{Accumulate, steps_loop};
use harness::{Server, Table};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A Tool process a row binds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Rust,
    Python,
}

impl Tool {
    fn module(self) -> &'static str {
        match self {
            Tool::Rust => "inc.json",
            Tool::Python => "count.json",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tool::Rust => "Rust Tool",
            Tool::Python => "Python Tool",
        }
    }
}

/// What every row shares: the temp dir, the Tool documents, the fsync
/// latency, the table.
struct Bench {
    root: PathBuf,
    fsync_us: f64,
    /// The floor of a W1 step in `flow serve`'s shape, this run.
    floor: floor::Floor,
    table: Table,
    /// The Postgres schema the rows run on, when they are on Postgres.
    postgres: Option<common::Schema>,
    rows: usize,
}

impl Bench {
    /// The Tool documents for both modules (from `flow tools`, so their
    /// fingerprints are the declarations' own), and the flow.toml binding
    /// them; with `stamps`, the Rust Tool stamps its answers there.
    fn bindings(&self, stamps: Option<&Path>) -> PathBuf {
        let flow = PathBuf::from(env!("CARGO_BIN_EXE_flow"));
        let mut toml = String::new();
        for t in [Tool::Rust, Tool::Python] {
            let src = self.root.join(t.module());
            let doc = self.root.join(format!("{}-tools.json", t.module()));
            if !doc.exists() {
                // A program that calls both `inc` and `tally` (`flow tools`
                // lists what a program calls).
                let mut flow_src = steps_loop(Accumulate::Yes, false, 10);
                let first = json!({"id": "first", "type": "tool_invoke",
                    "tool_id": "inc", "input_map": {"i": "$.state.i"},
                    "output_map": {"i": "$.state.i"}});
                flow_src["nodes"].as_array_mut().expect("nodes").push(first);
                flow_src["edges"][0]["to"] = json!("first");
                let edges = flow_src["edges"].as_array_mut().expect("edges");
                edges.push(json!({"type": "direct", "from": "first", "to": "step"}));
                if t == Tool::Rust {
                    // The encryption rows' `pad` Tool (`enc`), Rust only.
                    flow_src["tools"]["pad"] = enc::pad_decl();
                    flow_src["nodes"]
                        .as_array_mut()
                        .expect("nodes")
                        .push(json!({
                        "id": "padded", "type": "tool_invoke", "tool_id": "pad",
                        "input_map": {"i": "$.state.i"}, "output_map": {"i": "$.state.i"}}));
                    let edges = flow_src["edges"].as_array_mut().expect("edges");
                    edges.push(json!({"type": "direct", "from": "padded", "to": "step"}));
                }
                std::fs::write(&src, flow_src.to_string()).expect("flow source");
                let out = std::process::Command::new(&flow)
                    .arg("tools")
                    .arg(&src)
                    .output()
                    .expect("flow tools");
                assert!(out.status.success(), "flow tools: {out:?}");
                std::fs::write(&doc, &out.stdout).expect("tools document");
            }
            let command = match t {
                Tool::Rust => format!(
                    "{} {} {}{}",
                    std::env::current_exe().expect("exe").display(),
                    tool::ROLE,
                    doc.display(),
                    stamps
                        .map(|s| format!(" {}", s.display()))
                        .unwrap_or_default()
                ),
                Tool::Python => format!(
                    "{} {} {}",
                    harness::flows::python().display(),
                    harness::repo()
                        .join("server/benches/tools/inc.py")
                        .display(),
                    doc.display()
                ),
            };
            toml.push_str(&format!(
                "[tools.\"{}\"]\ncommand = \"{command}\"\n",
                t.module()
            ));
        }
        let path = self.root.join(match stamps {
            Some(_) => "flow-stamped.toml",
            None => "flow.toml",
        });
        std::fs::write(&path, toml).expect("flow.toml");
        path
    }

    /// A fresh `flow serve` on its own data directory.
    fn server(&mut self, stamps: Option<&Path>) -> (Server, PathBuf) {
        self.rows += 1;
        let data = self.root.join(format!("row-{}", self.rows));
        let tools = self.bindings(stamps);
        let s = match &self.postgres {
            None => Server::start(&data, &[tools]),
            Some(db) => Server::start_with(
                &data,
                &[tools],
                &[
                    "--postgres",
                    db.url.as_str(),
                    "--postgres-schema",
                    db.name.as_str(),
                ],
            ),
        };
        (s, data)
    }

    /// The database's CPU so far, on a Postgres row (see
    /// [`harness::postgres_cpu_ms`]).
    fn database_cpu_ms(&self) -> Option<f64> {
        self.postgres.as_ref().map(|_| harness::postgres_cpu_ms())
    }

    /// ", database CPU N µs/step" since `before`, on a Postgres row.
    fn database_cpu(&self, before: Option<f64>, steps: usize) -> String {
        match (before, self.database_cpu_ms()) {
            (Some(a), Some(z)) => {
                format!(", database CPU {:.0} µs/step", (z - a) * 1e3 / steps as f64)
            }
            _ => String::new(),
        }
    }

    fn backend(&self) -> &'static str {
        if self.postgres.is_some() {
            "Postgres"
        } else {
            "SQLite"
        }
    }
}

/// The SQLite file's size once its WAL is folded in (None on Postgres).
fn db_bytes(data: &Path) -> Option<u64> {
    let path = data.join("flow.db");
    let conn = rusqlite::Connection::open(&path).ok()?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .ok()?;
    drop(conn);
    std::fs::metadata(&path).ok().map(|m| m.len())
}

/// Starts `body` and waits until its run is no longer running: its run
/// and the state it settled in.
async fn run_to_end(s: &Server, body: &StartRequest) -> (String, StateName) {
    let (a, _) = s.start_run(body).await;
    if a.state != StateName::Running {
        return (a.run, a.state);
    }
    let state = s.settled(&a.run, Duration::from_millis(2)).await.state;
    (a.run, state)
}

fn start_body(tool: Tool, acc: Accumulate, gate: bool, steps: usize) -> StartRequest {
    harness::start_request(
        steps_loop(acc, gate, steps + 10),
        tool.module(),
        json!({"i": 0, "n": steps}),
        Some(30),
    )
}

/// What a W1 row leaves: the server, its data directory and the run (for
/// the replay rows), and its µs per step.
struct W1 {
    server: Server,
    data: PathBuf,
    run: String,
    per_step: f64,
}

/// W1: one run of `steps` sequential steps.
async fn w1(b: &mut Bench, tool: Tool, acc: Accumulate, steps: usize) -> W1 {
    let (s, data) = b.server(None);
    let before = db_bytes(&data);
    let body = start_body(tool, acc, false, steps);
    let (cpu, db, t) = (s.cpu(), b.database_cpu_ms(), Instant::now());
    let (run, state) = run_to_end(&s, &body).await;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), s.cpu() - cpu);
    let db = b.database_cpu(db, steps);
    assert_eq!(state, StateName::Completed, "W1 run {run}");
    let per_step = secs * 1e6 / steps as f64;
    let cpu_per_step = cpu.us_per_op(steps);
    let bytes = match (before, db_bytes(&data)) {
        (Some(a), Some(z)) => format!(", {} bytes/step on disk", (z - a) / steps as u64),
        _ => String::new(),
    };
    let what = match acc {
        Accumulate::No => "plain",
        Accumulate::Yes => "accumulating",
    };
    let target = match (acc, tool) {
        (Accumulate::No, Tool::Rust) => "≤ 400 µs/step (≤ 1.4× fsync), CPU ≤ 150, ≤ 600 B",
        (Accumulate::No, Tool::Python) => "Rust + ≤ 100 µs",
        (Accumulate::Yes, _) => "≤ 500 µs/step flat, ≤ 1,000 B",
    };
    b.table.row(
        format!("{}: W1 {what}, {steps} steps, {}", b.backend(), tool.name()),
        format!(
            "{per_step:.0} µs/step = {:.2}× fsync, {:.2}× the floor; server CPU {}, {:.2}× the floor's{db}{bytes}",
            per_step / b.fsync_us,
            per_step / b.floor.us_per_step,
            cpu.per_op(steps),
            cpu_per_step / b.floor.cpu_us_per_step(),
        ),
        target,
    );
    W1 {
        server: s,
        data,
        run,
        per_step,
    }
}

/// W2: 50 runs × `steps` steps at once (the target is for 100; longer
/// runs show what a batch's commit costs once each run's part of the
/// facts index has pages of its own); returns steps per second.
async fn w2(b: &mut Bench, tool: Tool, steps: usize) -> f64 {
    let (s, _data) = b.server(None);
    let body = start_body(tool, Accumulate::No, false, steps);
    let (cpu, db) = (s.cpu_ms(), b.database_cpu_ms());
    let rate = harness::concurrent_runs(&[&s], &body, 50, steps, StateName::Completed).await;
    let cpu = s.cpu_ms() - cpu;
    let db = b.database_cpu(db, 50 * steps);
    b.table.row(
        format!(
            "{}: W2 50 runs × {steps} steps at once, {}",
            b.backend(),
            tool.name()
        ),
        format!(
            "{rate:.0} steps/s, server CPU {:.0} µs/step{db}",
            cpu * 1e3 / (50 * steps) as f64
        ),
        if steps == 100 {
            "≥ 10,000 steps/s"
        } else {
            "—"
        },
    );
    rate
}

/// Replay of the W1 run just made, over HTTP and through `flow replay`;
/// the target is for the plain history, the accumulating one shows what a
/// growing state costs a replay.
async fn replay(b: &mut Bench, s: &Server, data: &Path, run: &str, acc: Accumulate) {
    let what = match acc {
        Accumulate::No => "",
        Accumulate::Yes => " (accumulating)",
    };
    let facts = s.get_run(run).await.last_fact.n as f64;
    let mut times = Vec::new();
    for _ in 0..REPLAYS {
        let t = Instant::now();
        s.client
            .replay_run(run)
            .await
            .unwrap_or_else(|e| panic!("replay {run}: {e}"));
        times.push(harness::ms_since(t));
    }
    b.table.row(
        format!("replay of {facts} facts{what}, POST /v1/runs/{{run}}/replay"),
        replay_rate(facts, &times),
        "≥ 500,000 facts/s",
    );
    let mut times = Vec::new();
    for _ in 0..REPLAYS {
        let t = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flow"))
            .arg("--data")
            .arg(data)
            .args(["replay", run])
            .output()
            .expect("flow replay");
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(out.status.success(), "flow replay: {out:?}");
    }
    b.table.row(
        format!("replay of {facts} facts{what}, `flow replay RUN` (its own process)"),
        replay_rate(facts, &times),
        "≥ 500,000 facts/s",
    );
}

/// Replays timed per row: a replay takes tens of milliseconds, and on a
/// shared VM single runs move by ±30 %, so the median of many.
const REPLAYS: usize = 15;

/// The median replay's rate, with the fastest beside it.
fn replay_rate(facts: f64, ms: &[f64]) -> String {
    let median = harness::Stats::of(ms).p50;
    let fastest = ms.iter().copied().fold(f64::INFINITY, f64::min);
    format!(
        "{:.0} facts/s ({median:.1} ms, median of {}; fastest {fastest:.1} ms)",
        facts / median * 1e3,
        ms.len(),
    )
}

/// SSE: `count` subscribers in another process on a run of `steps`; the
/// run's µs/step.
async fn sse(b: &mut Bench, count: usize, steps: usize, alone: Option<f64>) -> f64 {
    let stamps = b.root.join(format!("stamps-{count}"));
    let (s, _data) = b.server(Some(&stamps));
    let body = start_body(Tool::Rust, Accumulate::No, true, steps);
    let (a, _) = s.start_run(&body).await;
    assert_eq!(a.state, StateName::Paused, "start: {a:?}");
    let run = a.run;
    let call = a
        .pending
        .as_deref()
        .and_then(<[_]>::first)
        .expect("gate")
        .call
        .clone();
    let subs = (count > 0).then(|| subscribers::Subscribers::start(&s.base, &run, count, &stamps));
    let (cpu, t) = (s.cpu_ms(), Instant::now());
    let resume = ResumeRequest {
        call: Some(call),
        reply: Some(json!({"Ok": {}})),
        open: None,
        wait: Some(30),
    };
    let (a, _) = s.resume_run(&run, &resume).await;
    let state = match a.state {
        StateName::Completed => a.state,
        _ => s.settled(&run, Duration::from_millis(2)).await.state,
    };
    let (secs, cpu) = (t.elapsed().as_secs_f64(), s.cpu_ms() - cpu);
    assert_eq!(state, StateName::Completed, "SSE run {run}");
    let per_step = secs * 1e6 / steps as f64;
    let moved = alone
        .map(|a| format!(" ({:+.0}% beside none)", (per_step / a - 1.0) * 100.0))
        .unwrap_or_default();
    let run_figure = format!(
        "run {per_step:.0} µs/step{moved}, server CPU {:.0} µs/step",
        cpu * 1e3 / steps as f64
    );
    match subs {
        None => b.table.row(
            format!("SSE: a run of {steps} steps, no subscriber"),
            run_figure,
            "—",
        ),
        Some(subs) => {
            let r = tokio::task::spawn_blocking(move || subs.finish())
                .await
                .expect("subscribers");
            let target = match count {
                1 => "p50 ≤ 1 ms; run ≤ +10%",
                100 => "p99 ≤ 20 ms; run ≤ +10%",
                _ => "p99 ≤ 50 ms at 1,000; run ≤ +10%",
            };
            b.table.row(
                format!("SSE: {count} subscriber(s) in another process, a run of {steps} steps"),
                format!(
                    "Tool answer → Reply delivered p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms over {} deliveries ({} missed, {} repeated, {}/{count} streams to End; the subscribers' CPU {:.0} µs/step); {run_figure}",
                    r["p50_us"].as_f64().unwrap_or(f64::NAN) / 1e3,
                    r["p99_us"].as_f64().unwrap_or(f64::NAN) / 1e3,
                    r["max_us"].as_f64().unwrap_or(f64::NAN) / 1e3,
                    r["stamped"],
                    r["missed"],
                    r["repeated"],
                    r["ended"],
                    r["cpu_ms"].as_f64().unwrap_or(f64::NAN) * 1e3 / steps as f64,
                ),
                target,
            );
        }
    }
    per_step
}

async fn bench(b: &mut Bench) {
    let small = harness::small();
    let (n1, n2) = if small { (200, 2000) } else { (1000, 10_000) };
    if harness::selected("w1") || harness::selected("replay") {
        for tool in [Tool::Rust, Tool::Python] {
            for acc in [Accumulate::No, Accumulate::Yes] {
                for steps in [n1, n2] {
                    let w = w1(b, tool, acc, steps).await;
                    if tool == Tool::Rust && steps == n2 && harness::selected("replay") {
                        replay(b, &w.server, &w.data, &w.run, acc).await;
                    }
                }
            }
        }
    }
    if harness::selected("enc") {
        enc::rows(b, n1).await;
    }
    if harness::selected("w2") {
        w2(b, Tool::Rust, 100).await;
        w2(b, Tool::Python, 100).await;
        w2(b, Tool::Rust, n1).await;
    }
    if harness::selected("sse") {
        let default: &[usize] = if small { &[1, 10] } else { &[1, 100, 1000] };
        let counts = harness::env_list("FLOW_BENCH_SUBSCRIBERS", default);
        let alone = sse(b, 0, n1, None).await;
        for &c in &counts {
            sse(b, c, n1, Some(alone)).await;
        }
    }
    if std::env::var_os("FLOW_BENCH_POSTGRES").is_some() && harness::selected("pg") {
        postgres(b, n1).await;
    }
}

/// Issue 42: W1 (`n1` plain steps, Rust Tool) and W2 (50 runs ×
/// `FLOW_BENCH_PG_W2_STEPS` [100] steps) on a Postgres store, each right
/// after the same row on SQLite, in `FLOW_BENCH_PG_ROUNDS` [1] rounds, with
/// the ratio of each pair.
async fn postgres(b: &mut Bench, n1: usize) {
    let n2 = harness::env_usize("FLOW_BENCH_PG_W2_STEPS", 100);
    for _ in 0..harness::env_usize("FLOW_BENCH_PG_ROUNDS", 1).max(1) {
        let lite = w1(b, Tool::Rust, Accumulate::No, n1).await.per_step;
        b.postgres = Some(common::Schema::new().expect("a Postgres to measure on"));
        let pg = w1(b, Tool::Rust, Accumulate::No, n1).await.per_step;
        b.postgres = None;
        b.table.row(
            format!("Postgres / SQLite: W1 plain, {n1} steps, Rust Tool, µs/step, same run"),
            format!("{:.2}× ({pg:.0} / {lite:.0} µs)", pg / lite),
            "≤ 2×",
        );
        let lite = w2(b, Tool::Rust, n2).await;
        b.postgres = Some(common::Schema::new().expect("a Postgres to measure on"));
        let pg = w2(b, Tool::Rust, n2).await;
        b.postgres = None;
        b.table.row(
            format!("Postgres / SQLite: W2 50 runs × {n2} steps, Rust Tool, steps/s, same run"),
            format!("{:.2}× ({pg:.0} / {lite:.0} steps/s)", pg / lite),
            "≥ 0.6×",
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(tool::ROLE) => return tool::serve(&args[2..]),
        Some(subscribers::ROLE) => return subscribers::serve(&args[2..]),
        Some(floor::ROLE) => return floor::serve(),
        _ => {}
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let fsync_dir = tmp.path().join("fsync");
    std::fs::create_dir_all(&fsync_dir).expect("fsync dir");
    let fsync_us = harness::fsync_probe(&fsync_dir);
    let overwrite_us = harness::fsync_overwrite_probe(&fsync_dir);
    let floor_steps = if harness::small() { 500 } else { 2000 };
    let floors = [
        (
            floor::Shape::WriterThread,
            "a handoff to a writer thread and back",
        ),
        (floor::Shape::OneThread, "on one thread"),
    ]
    .map(|(shape, what)| (floor::measure(&fsync_dir, shape, floor_steps), what));
    let mut b = Bench {
        root: tmp.path().to_path_buf(),
        fsync_us,
        floor: floors[0].0,
        table: Table::default(),
        postgres: None,
        rows: 0,
    };
    b.table.row(
        "fsync latency (4 KiB write + fsync, median of 200, the data disk)",
        format!("{fsync_us:.0} µs"),
        "—",
    );
    b.table.row(
        "fsync latency of an overwrite (48 KiB in place + fsync, median of 200: a wrapped WAL's commit)",
        format!("{overwrite_us:.0} µs"),
        "—",
    );
    for (f, what) in floors {
        b.table.row(
            format!(
                "floor of a W1 step, {what} (a Tool round trip over pipes, 3 WAL frames written in place, fsync; nothing else)"
            ),
            format!(
                "{:.0} µs/step = {:.2}× fsync, CPU {}",
                f.us_per_step,
                f.us_per_step / fsync_us,
                f.cpu.per_op(f.steps)
            ),
            "—",
        );
    }
    b.table
        .note(format!("load average at the start: {}", harness::load()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(bench(&mut b));
    b.table
        .note(format!("load average at the end: {}", harness::load()));
    b.table.print();
    if std::env::var_os("FLOW_BENCH_KEEP").is_some() {
        eprintln!("kept the rows' data under {}", tmp.keep().display());
    }
}
