//! The replay gate's throughput (issue 39, "Measure"): runs/s and facts/s
//! of `RunService::gate` over stored runs, against the single-run replay
//! rate (`RunService::replay`, one run after another) measured in the same
//! run on the same store.
//!
//! In process, on a SQLite store in a temp dir (WAL; seeded with
//! synchronous=NORMAL to store the runs quickly: the reads measured do not
//! depend on it). The runs are of a flow with no Tool that walks down a
//! nested chain one link a step (a transform and a condition per step:
//! two Checkpoints, each stored as a delta on the one before), so a run of
//! S steps has 2S + 4 facts; the gate reads and re-derives every fact, as
//! it would a Tool's Call and Reply. The candidate is the recorded program
//! (every run matches: the whole history is replayed), then one whose loop
//! condition differs (every run diverges at its first `more` Checkpoint:
//! the cost of an early stop).
//!
//! Run: `cargo bench -p flowd --bench gate` (defaults: 200 runs of 100
//! steps, well under a minute). `FLOW_BENCH_GATE_RUNS`,
//! `FLOW_BENCH_GATE_STEPS` set the sizes (the figure is 1000 runs
//! of 100 steps); `FLOW_BENCH_GATE_INFLIGHT` [32] runs are stored at once.
//! Not part of CI.

use flow_store::{RunId, RunListQuery, SqliteOptions, SqliteStore, Synchronous};
use flowd::service::bind::Bindings;
use flowd::service::{RunService, ServiceOptions};
use flowd::source::Sources;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The loop flow; `until` is the condition's literal (`true` loops down
/// the chain; another value ends at the first check: a changed program).
fn flow(until: &str) -> Sources {
    let doc = json!({
        "spec_version": "1.0.0",
        "id": "gate-bench",
        "name": "Gate bench",
        "description": "Walks down a nested chain one link a step, with no Tool.",
        "state_schema": {"type": "object", "properties": {"chain": {"type": "object"}}, "required": ["chain"]},
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"chain": {"type": "object"}}},
            {"id": "step", "type": "transform", "mode": "mapping",
             "mapping": [{"from": "$.state.chain.next", "to": "chain"}]},
            {"id": "more", "type": "condition",
             "branches": [{"condition": {"type": "expr", "expr": format!("$.state.chain.more == {until}")}, "target": "step"}],
             "default_target": "done"},
            {"id": "done", "type": "output", "exit_code": "success"}
        ],
        "edges": [{"type": "direct", "from": "start", "to": "step"}, {"type": "direct", "from": "step", "to": "more"}]
    });
    let mut texts = BTreeMap::new();
    texts.insert("bench.json".to_string(), doc.to_string());
    Sources {
        dir: None,
        root: "bench.json".into(),
        texts,
    }
}

/// A chain `steps` links deep (serde_json reads at most 128 levels: the
/// input is built as text).
fn input(steps: usize) -> String {
    let mut text = String::from("{\"more\": false}");
    for _ in 0..steps {
        text = format!("{{\"more\": true, \"next\": {text}}}");
    }
    format!("{{\"chain\": {text}}}")
}

fn main() {
    let runs = env_usize("FLOW_BENCH_GATE_RUNS", 200);
    let steps = env_usize("FLOW_BENCH_GATE_STEPS", 100).min(120);
    let inflight = env_usize("FLOW_BENCH_GATE_INFLIGHT", 32).max(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().expect("a temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let store = SqliteStore::open(
            dir.path().join("flow.db"),
            SqliteOptions {
                synchronous: Synchronous::Normal,
                ..SqliteOptions::default()
            },
        )
        .expect("the store");
        let service = RunService::new(
            Arc::new(store),
            ServiceOptions::local(Bindings::local(false, Vec::new())),
            tokio_util::sync::CancellationToken::new(),
        );

        // Seed: `runs` runs, `inflight` at once.
        let t = Instant::now();
        let text = input(steps);
        let mut ids: Vec<RunId> = Vec::new();
        let mut left = runs;
        while left > 0 {
            let batch = left.min(inflight);
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..batch {
                let (s, text) = (service.clone(), text.clone());
                set.spawn(async move {
                    let accepted = s.start(&flow_store::Namespace::default(), flow("true"), &text).await.expect("a start");
                    let run = accepted.run.clone();
                    accepted.finished().await.expect("a finished run");
                    run
                });
            }
            while let Some(r) = set.join_next().await {
                ids.push(r.expect("a seeding task"));
            }
            left -= batch;
        }
        eprintln!(
            "stored {runs} runs of {steps} steps in {:.1} s",
            t.elapsed().as_secs_f64()
        );

        // One run after another through the single-run replay.
        let t = Instant::now();
        for run in &ids {
            let v = service.replay(run).await.expect("a replay");
            assert_eq!(v.to_string(), "matched", "{run}");
        }
        let single = t.elapsed().as_secs_f64();

        // The gate, the recorded program as the candidate: all match.
        let t = Instant::now();
        let report = service
            .gate(flow("true"), RunListQuery::default(), None)
            .await
            .expect("the gate");
        let gated = t.elapsed().as_secs_f64();
        assert_eq!(report.matched as usize, runs, "{:?}", report.groups);
        let facts = report.facts;

        // A changed loop condition: every run diverges early.
        let t = Instant::now();
        let changed = service
            .gate(flow("false"), RunListQuery::default(), None)
            .await
            .expect("the gate");
        let early = t.elapsed().as_secs_f64();
        assert_eq!(changed.diverged as usize, runs, "{:?}", changed.groups);

        let rate = |n: f64, s: f64| n / s.max(1e-9);
        let per_run = facts as f64 / runs as f64;
        println!("| gate bench: {runs} runs of {steps} steps ({per_run:.0} facts each), {cores} cores | runs/s | facts/s | total |");
        println!("|---|---:|---:|---:|");
        println!(
            "| single-run replay, one after another | {:.0} | {:.0} | {:.2} s |",
            rate(runs as f64, single),
            rate(facts as f64, single),
            single
        );
        println!(
            "| gate, candidate = recorded program (all match) | {:.0} | {:.0} | {:.2} s |",
            rate(runs as f64, gated),
            rate(facts as f64, gated),
            gated
        );
        println!(
            "| gate, changed condition (all diverge at fact {}) | {:.0} | {:.0} | {:.2} s |",
            changed.groups.first().and_then(|g| g.fact).unwrap_or(0),
            rate(runs as f64, early),
            rate(changed.facts as f64, early),
            early
        );
        println!("gate speed-up over single-run replay: {:.2}x", single / gated.max(1e-9));
    });
}
