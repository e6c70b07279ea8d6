//! The fixed costs of a run through the real `flow serve` (issue 10, item
//! 5): what it costs to resume, fork or start one, and to store many, before
//! any step of its own runs.
//!
//! Everything goes over HTTP to the release `flow serve` binary, a child
//! process on 127.0.0.1:0 with its own temp `--data` (SQLite, WAL,
//! synchronous=FULL) and `--tools flow.toml` binding two real Tool
//! processes: the Python `benches/tools/inc.py` (`inc(i) -> {i: i + 1}`) and
//! the Rust `calc` example (`add(a, b)`). Rows:
//!
//! 1. resume a run paused after N steps (N `inc` steps in a loop, then a
//!    `hitl_breakpoint`): `POST /v1/runs/{run}/resume` until its 202 without
//!    `wait`, and with `wait` until the run pauses at the breakpoint again
//!    (the last reply ends the run). Each run is resumed several times; every
//!    resume adds 4 facts to its ~3N.
//! 2. fork at the Checkpoint of step N/2 of such a run: until the 201, and
//!    from the request until the fork's first Reply (its first new step is
//!    durable) arrives on its SSE feed; the fork is then halted.
//! 3. a one-step run, `POST /v1/runs` with `wait`, Python and Rust Tool,
//!    after warm-up runs.
//! 4. storing many one-step runs (each `POST /v1/runs` with `wait`, until
//!    completed): runs/s sequentially and with a number in flight.
//!
//! Printed: a markdown table with one figure per row and the fsync latency
//! measured on the store's disk in the same run, and notes (setup times,
//! the server's CPU per operation). Progress goes to stderr.
//!
//! Run: `cargo build --release -p flow-toolkit --bin flow-example-calc &&
//! cargo bench -p flowd --bench service`. Sizes (defaults in brackets):
//! `FLOW_BENCH_SCALE=small` for a quick run; `FLOW_BENCH_RESUME_STEPS`
//! [50,500,5000,10000], `FLOW_BENCH_FORK_STEPS` [50,500,5000],
//! `FLOW_BENCH_RESUME_RUNS` [2], `FLOW_BENCH_RESUMES` [10 per run and mode],
//! `FLOW_BENCH_FORKS` [10], `FLOW_BENCH_ONE_STEP` [200],
//! `FLOW_BENCH_STORE_RUNS` [10000], `FLOW_BENCH_INFLIGHT` [1,32] (runs in
//! flight while storing),
//! `FLOW_BENCH_STORE_TOOL` [python | rust | both]; `FLOW_BENCH_PYTHON` [python3]
//! runs `benches/peers/langgraph_fork.py` beside the fork rows when it has
//! `langgraph` (LangGraph's fork of the same shape, same run); `FLOW_BENCH_ROWS` picks
//! groups (resume, fork, one-step, store); `FLOW_BENCH_KEEP=1` keeps the
//! temp dir (stores, `serve.log`; `FLOW_LOG` sets the server's log filter).
//! Not part of CI.

// The harness serves every bench; this one uses a part of it.
#[allow(dead_code)]
mod harness;

use flowd::client::{self, causes};
use flowd::http::facts::FactsQuery;
use flowd::http::fork::ForkRequest;
use flowd::http::halt::HaltRequest;
use flowd::http::listing::StateName;
use flowd::http::resume::ResumeRequest;
use flowd::http::start::StartRequest;
use futures_util::StreamExt;
use harness::start_request;
use harness::{Server, Stats, Table, env_list, env_usize, flows, fmt_ms, ms_since, selected};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// The sizes of one run of the bench.
struct Config {
    resume_steps: Vec<usize>,
    fork_steps: Vec<usize>,
    resume_runs: usize,
    resumes: usize,
    forks: usize,
    one_step: usize,
    warmup: usize,
    store_runs: usize,
    inflight: Vec<usize>,
    store_tools: Vec<&'static str>,
}

impl Config {
    fn from_env() -> Config {
        let small = harness::small();
        let pick = |big: usize, little: usize| if small { little } else { big };
        let store_tools = match std::env::var("FLOW_BENCH_STORE_TOOL").as_deref() {
            Ok("rust") => vec!["rust"],
            Ok("both") => vec!["python", "rust"],
            _ => vec!["python"],
        };
        Config {
            resume_steps: env_list(
                "FLOW_BENCH_RESUME_STEPS",
                if small {
                    &[20, 200]
                } else {
                    &[50, 500, 5000, 10_000]
                },
            ),
            fork_steps: env_list(
                "FLOW_BENCH_FORK_STEPS",
                if small { &[20, 200] } else { &[50, 500, 5000] },
            ),
            resume_runs: env_usize("FLOW_BENCH_RESUME_RUNS", pick(2, 1)).max(1),
            resumes: env_usize("FLOW_BENCH_RESUMES", pick(10, 3)).max(1),
            forks: env_usize("FLOW_BENCH_FORKS", pick(10, 3)).max(1),
            one_step: env_usize("FLOW_BENCH_ONE_STEP", pick(200, 20)).max(1),
            warmup: pick(20, 3),
            store_runs: env_usize("FLOW_BENCH_STORE_RUNS", pick(10_000, 100)).max(1),
            inflight: env_list("FLOW_BENCH_INFLIGHT", &[1, 32]),
            store_tools,
        }
    }
}

/// Every figure of a row group comes from one fresh server.
fn server(tmp: &Path, group: &str, tools: &Path) -> Server {
    Server::start(&tmp.join(group), &[tools.to_path_buf()])
}

fn main() {
    let cfg = Config::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tmp");
    // With FLOW_BENCH_KEEP the directory outlives the bench (even a failed
    // one); otherwise the guard removes it.
    let (_guard, root) = if std::env::var_os("FLOW_BENCH_KEEP").is_some() {
        let root = tmp.keep();
        eprintln!("keeping {}", root.display());
        (None, root)
    } else {
        let root = tmp.path().to_path_buf();
        (Some(tmp), root)
    };
    let tools = flows::write_bindings(&root, &harness::release_dir());
    let mut table = Table::default();
    table.note(format!(
        "Python Tool interpreter: {}",
        flows::python().display()
    ));
    table.note(format!(
        "load average at the start: {} ({} cores)",
        harness::load(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    let fsync_dir = root.join("fsync");
    std::fs::create_dir_all(&fsync_dir).expect("fsync dir");
    let fsync_us = harness::fsync_probe(&fsync_dir);
    table.row(
        "fsync latency (4 KiB write + fsync, median of 200, the store's disk)",
        format!("{fsync_us:.0} µs"),
        "—",
    );
    rt.block_on(async {
        if selected("resume") || selected("fork") {
            let s = server(&root, "resume", &tools);
            resume_and_fork(&s, &cfg, &mut table).await;
        }
        if selected("one-step") {
            let s = server(&root, "one-step", &tools);
            one_step(&s, &cfg, fsync_us, &mut table).await;
        }
        if selected("store") {
            for tool in &cfg.store_tools {
                let s = server(&root, &format!("store-{tool}"), &tools);
                store(&s, &cfg, tool, &mut table).await;
            }
        }
    });
    table.note(format!("load average at the end: {}", harness::load()));
    println!();
    table.print();
}

// ------------------------------------------------------------ rows 1 and 2

/// Runs paused after `n` steps: started at once, each waited for until it
/// pauses at the gate; their ids and open call ids.
async fn paused_runs(
    s: &Server,
    n: usize,
    count: usize,
    max_steps: usize,
) -> Vec<(String, String)> {
    let body = start_request(
        flows::counter_loop(max_steps),
        flows::PY_MODULE,
        json!({"i": 0, "n": n}),
        None,
    );
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(s.start_run(&body).await.0.run);
    }
    let mut out = Vec::new();
    for run in runs {
        let v = s.settled(&run, Duration::from_millis(100)).await;
        out.push((run, view_gate_call(&v)));
    }
    out
}

/// Waits (not timed) until `run` pauses at the gate again with a call other
/// than `answered`; returns that call. A run view reads `pending` before
/// `driving`, each at its own time (the history read in between takes long
/// on a long run), so `driving: false` can come with the pending calls from
/// before the drive: only a new call id shows the pause after the resume.
async fn paused_again(s: &Server, run: &str, answered: &str) -> String {
    loop {
        let v = s.settled(run, Duration::from_millis(20)).await;
        let call = view_gate_call(&v);
        if call != answered {
            return call;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The open call at the gate of a paused run: its state and first
/// pending call's `(node, call)`.
fn gate_call(run: &str, state: StateName, first: Option<(&str, &str)>) -> String {
    assert_eq!(state, StateName::Paused, "{run} is not paused at the gate");
    let (node, call) = first.unwrap_or_else(|| panic!("{run} has no pending call"));
    assert_eq!(node, "gate", "{run} is not paused at the gate");
    call.to_string()
}

/// [`gate_call`] of a run view.
fn view_gate_call(v: &flowd::http::answers::RunView) -> String {
    let first = v
        .pending
        .first()
        .map(|p| (p.node.as_str(), p.call.as_str()));
    gate_call(&v.run, v.state, first)
}

/// [`gate_call`] of a resume answer.
fn answer_gate_call(a: &flowd::http::answers::RunAnswer) -> String {
    let first = a.pending.as_deref().and_then(<[_]>::first);
    gate_call(
        &a.run,
        a.state,
        first.map(|p| (p.node.as_str(), p.call.as_str())),
    )
}

async fn resume_and_fork(s: &Server, cfg: &Config, table: &mut Table) {
    let mut ns: Vec<usize> = Vec::new();
    if selected("resume") {
        ns.extend(&cfg.resume_steps);
    }
    if selected("fork") {
        ns.extend(&cfg.fork_steps);
    }
    ns.sort_unstable();
    ns.dedup();
    let max_steps = ns.iter().max().copied().unwrap_or(0) + 4 * cfg.resumes + 100;
    for n in ns {
        let resume = selected("resume") && cfg.resume_steps.contains(&n);
        let fork = selected("fork") && cfg.fork_steps.contains(&n);
        let count = if resume { cfg.resume_runs } else { 1 };
        let t = Instant::now();
        let runs = paused_runs(s, n, count, max_steps).await;
        let facts = s.get_run(&runs[0].0).await.last_fact.n;
        table.note(format!(
            "setup: {count} run(s) of {n} steps started together, all paused after {:.1} s ({facts} facts each)",
            t.elapsed().as_secs_f64()
        ));
        // Forks first: the parent's history is then exactly N steps.
        if fork {
            fork_rows(s, cfg, n, &runs[0].0, table).await;
        }
        if resume {
            resume_rows(s, cfg, n, runs, table).await;
        }
    }
}

async fn resume_rows(
    s: &Server,
    cfg: &Config,
    n: usize,
    runs: Vec<(String, String)>,
    table: &mut Table,
) {
    let reply = |call: &str, more: bool, wait: Option<u64>| ResumeRequest {
        call: Some(call.to_string()),
        reply: Some(json!({"Ok": {"more": more}})),
        open: None,
        wait,
    };
    let (mut no_wait, mut wait) = (Vec::new(), Vec::new());
    let mut cpu_wait = 0.0;
    for (run, mut call) in runs {
        for _ in 0..cfg.resumes {
            let (_, ms) = s.resume_run(&run, &reply(&call, true, None)).await;
            no_wait.push(ms);
            call = paused_again(s, &run, &call).await;
        }
        for k in 0..cfg.resumes {
            let last = k + 1 == cfg.resumes;
            let cpu = s.cpu_ms();
            let (a, ms) = s.resume_run(&run, &reply(&call, !last, Some(30))).await;
            cpu_wait += s.cpu_ms() - cpu;
            wait.push(ms);
            if last {
                assert_eq!(a.state, StateName::Completed, "the last resume ends {run}");
            } else {
                call = answer_gate_call(&a);
            }
        }
    }
    let target = "≤ 5 ms";
    table.row(
        format!("resume a run paused after {n} steps, until the 202 (no `wait`)"),
        Stats::of(&no_wait).ms(),
        target,
    );
    table.row(
        format!(
            "resume a run paused after {n} steps, `wait` until it pauses again (the last: ends)"
        ),
        Stats::of(&wait).ms(),
        target,
    );
    table.note(format!(
        "resume after {n} steps: server CPU {} ms per resume with `wait`",
        fmt_ms(cpu_wait / wait.len() as f64)
    ));
}

/// The fact number of the root Checkpoint entering step `k` (0-based: `i`
/// is `k` there): Checkpoints go input, then one per step.
async fn step_checkpoint(s: &Server, run: &str, k: usize) -> u64 {
    let q = FactsQuery {
        kind: Some("Checkpoint".into()),
        offset: Some(k as u64 + 1),
        limit: Some(1),
        ..FactsQuery::default()
    };
    let page = s
        .client
        .list_facts(run, &q)
        .await
        .unwrap_or_else(|e| panic!("the facts of {run}: {}", causes(&e)));
    let f = &page.facts[0];
    assert_eq!(f.fact["node"], "step", "not a step checkpoint: {f:?}");
    f.n
}

async fn fork_rows(s: &Server, cfg: &Config, n: usize, parent: &str, table: &mut Table) {
    let cp = step_checkpoint(s, parent, n / 2).await;
    let body = ForkRequest {
        checkpoint: Some(cp),
        call: None,
        reply: None,
        set: None,
        flow: None,
        modules: None,
        name: None,
        wait: None,
    };
    let (mut created, mut first) = (Vec::new(), Vec::new());
    let mut cpu = 0.0;
    for _ in 0..cfg.forks {
        let c0 = s.cpu_ms();
        let t = Instant::now();
        let (fork, ms) = s.fork_run(parent, &body).await;
        created.push(ms);
        let child = fork.run.as_str();
        let arrived = s.first_event(child, "Reply").await;
        first.push((arrived - t).as_secs_f64() * 1e3);
        cpu += s.cpu_ms() - c0;
        // Halted, or it ended first (409).
        match s.client.halt_run(child, &HaltRequest::default()).await {
            Err(client::Error::Refused { status, .. }) if status == 409 => {}
            r => {
                r.unwrap_or_else(|e| panic!("halt {child}: {}", causes(&e)));
            }
        }
        s.settled(child, Duration::from_millis(5)).await;
    }
    table.row(
        format!(
            "fork at step {} of {n}: until the fork is created (201)",
            n / 2
        ),
        Stats::of(&created).ms(),
        "≤ 1 ms",
    );
    table.row(
        format!(
            "fork at step {} of {n}: request → the fork's first Reply durable (SSE)",
            n / 2
        ),
        Stats::of(&first).ms(),
        "≤ 5 ms",
    );
    table.note(format!(
        "fork at step {} of {n} (Checkpoint fact {cp}): server CPU {} ms per fork until its first Reply",
        n / 2,
        fmt_ms(cpu / first.len().max(1) as f64),
    ));
    langgraph_fork(
        cfg,
        n,
        Stats::of(&created).p50,
        Stats::of(&first).p50,
        table,
    );
}

/// LangGraph's fork of the same shape in the same run (issue 42, W4), when
/// `FLOW_BENCH_PYTHON` (default `python3`) has `langgraph` and
/// `langgraph-checkpoint-sqlite`: `benches/peers/langgraph_fork.py`, and
/// flowd's p50 as a ratio of LangGraph's. Skipped with a note otherwise.
fn langgraph_fork(cfg: &Config, n: usize, created: f64, first: f64, table: &mut Table) {
    let python = std::env::var("FLOW_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/langgraph_fork.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(n.to_string())
        .arg(cfg.forks.max(3).to_string())
        .arg(dir.path())
        .output();
    let v: Option<serde_json::Value> = match &out {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).ok(),
        _ => None,
    };
    let Some(v) = v else {
        let why = match &out {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        table.note(format!(
            "LangGraph fork rows skipped ({python}: {why}); pip install langgraph langgraph-checkpoint-sqlite, or set FLOW_BENCH_PYTHON"
        ));
        return;
    };
    let samples = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default()
    };
    let (lg_created, lg_first) = (
        Stats::of(&samples("create_ms")),
        Stats::of(&samples("first_ms")),
    );
    let version = v["langgraph"].as_str().unwrap_or("?");
    table.row(
        format!("LangGraph {version} (SqliteSaver, FULL), same run: fork at step {} of {n}, `update_state` on that checkpoint", n / 2),
        lg_created.ms(),
        "—",
    );
    table.row(
        format!(
            "LangGraph {version}, same run: fork at step {} of {n} → its first new step durable",
            n / 2
        ),
        lg_first.ms(),
        "—",
    );
    table.note(format!(
        "fork at step {} of {n}, flowd p50 / LangGraph p50: created {:.2}×, first step durable {:.2}× (target ≤ 0.7×)",
        n / 2,
        created / lg_created.p50,
        first / lg_first.p50,
    ));
}

// ------------------------------------------------------------ rows 3 and 4

/// The `POST /v1/runs` body of a one-step run through `tool`.
fn one_step_body(tool: &str) -> StartRequest {
    match tool {
        "rust" => start_request(
            flows::one_step_rust(),
            flows::RUST_MODULE,
            json!({"a": 1, "b": 2}),
            Some(30),
        ),
        _ => start_request(
            flows::one_step_python(),
            flows::PY_MODULE,
            json!({"i": 0}),
            Some(30),
        ),
    }
}

fn tool_name(tool: &str) -> &'static str {
    if tool == "rust" {
        "Rust Tool (calc)"
    } else {
        "Python Tool"
    }
}

/// One run to its end: the ms until it was seen completed.
async fn one_run(s: &Server, body: &StartRequest) -> f64 {
    try_one_run(s, body).await.unwrap_or_else(|e| panic!("{e}"))
}

/// [`one_run`], with a run that could not be started or did not complete
/// as an error that says why.
async fn try_one_run(s: &Server, body: &StartRequest) -> Result<f64, String> {
    let t = Instant::now();
    let (a, ms) = s.try_start_run(body).await?;
    if a.state == StateName::Completed {
        return Ok(ms);
    }
    // `wait` ran out (at most 30 s): the run goes on in the server.
    let run = a.run;
    loop {
        let v = s.try_get_run(&run).await?;
        if v.state == StateName::Completed {
            return Ok(ms_since(t));
        }
        if v.state != StateName::Running || !v.driving {
            return Err(format!("{run} did not complete: {v:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Row 3: the p50 against the fsync latency measured in the same run
/// (issue 42: ≤ 6 fsyncs' worth), with the server's CPU and sleeps per run.
async fn one_step(s: &Server, cfg: &Config, fsync_us: f64, table: &mut Table) {
    for tool in ["python", "rust"] {
        let body = one_step_body(tool);
        for _ in 0..cfg.warmup {
            one_run(s, &body).await;
        }
        let (cpu, sleeps) = (s.cpu_ms(), s.sleeps());
        let mut lat = Vec::new();
        for _ in 0..cfg.one_step {
            lat.push(one_run(s, &body).await);
        }
        let runs = lat.len() as f64;
        let stats = Stats::of(&lat);
        table.row(
            format!(
                "a one-step run over HTTP (`POST /v1/runs` with `wait`), {}",
                tool_name(tool)
            ),
            format!(
                "{} = {:.1} fsyncs' worth (p50)",
                stats.ms(),
                stats.p50 * 1e3 / fsync_us
            ),
            "≤ 6 fsyncs' worth",
        );
        let slept = match (sleeps, s.sleeps()) {
            (Some(a), Some(z)) => format!(
                ", its threads slept {:.1} times per run",
                (z - a) as f64 / runs
            ),
            _ => String::new(),
        };
        table.note(format!(
            "one-step run, {}: server CPU {} ms per run{slept}",
            tool_name(tool),
            fmt_ms((s.cpu_ms() - cpu) / runs)
        ));
    }
}

async fn store(s: &Server, cfg: &Config, tool: &str, table: &mut Table) {
    let body = one_step_body(tool);
    for _ in 0..cfg.warmup {
        one_run(s, &body).await;
    }
    let m = cfg.store_runs;
    for &inflight in &cfg.inflight {
        let inflight = inflight.max(1);
        let cpu = s.cpu_ms();
        let t = Instant::now();
        // A failed run is counted and named in the notes, not fatal: how
        // many the server drops under load is part of the figure.
        let failed: Vec<String> = futures_util::stream::iter(0..m)
            .map(|_| try_one_run(s, &body))
            .buffer_unordered(inflight)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await;
        let secs = t.elapsed().as_secs_f64();
        let how = if inflight == 1 {
            "sequential".to_string()
        } else {
            format!("{inflight} in flight")
        };
        let stored = m - failed.len();
        table.row(
            format!("storing {m} one-step runs, {how}, {}", tool_name(tool)),
            format!("{:.0} runs/s", stored as f64 / secs),
            "≥ 1,000 runs/s",
        );
        if let Some(first) = failed.first() {
            table.note(format!(
                "storing {m} runs {how}: {} did not complete; the first: {first}",
                failed.len()
            ));
        }
        table.note(format!(
            "storing {m} runs {how}, {}: {secs:.1} s, server CPU {} ms per run",
            tool_name(tool),
            fmt_ms((s.cpu_ms() - cpu) / m as f64)
        ));
    }
}
