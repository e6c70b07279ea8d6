//! Interpreter overhead per node and replay speed (issue 4, Benchmark).
//!
//! Two 10,000-node sequential flows with instant replies: a chain of
//! transform `mapping` nodes (no calls: pure interpreter work plus one
//! Checkpoint per node) and a chain of `tool_invoke` nodes (a Call, a Reply
//! fed back, and a Checkpoint per node). Replay re-derives the tool chain's
//! recorded history (three facts per node). Targets: at most 5 µs per
//! node; at least 500,000 facts/s replayed.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flow_abi::fact::{Entry, Fact, RunId};
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_engine::replay::{Verdict, replay};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const NODES: usize = 10_000;

fn flow(kind: &str) -> Json {
    let mut nodes =
        vec![json!({"id": "start", "type": "input", "output_schema": {"x": {"type": "string"}}})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..NODES {
        let id = format!("n{i}");
        nodes.push(match kind {
            "transform" => json!({"id": id, "type": "transform", "mode": "mapping",
                "mapping": [{"from": if i % 2 == 0 { "$.state.x" } else { "$.state.y" },
                             "to": if i % 2 == 0 { "y" } else { "x" }}]}),
            _ => json!({"id": id, "type": "tool_invoke", "tool_id": "step",
                "input_map": {"x": "$.state.x"}, "output_map": {"x": "x"}}),
        });
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    nodes.push(json!({"id": "done", "type": "output"}));
    edges.push(json!({"from": prev, "to": "done"}));
    json!({
        "spec_version": "1.0.0",
        "id": format!("bench-{kind}"),
        "harness_meta": {"enabled": false, "max_steps": 100_000},
        "state_schema": {"type": "object", "properties": {
            "x": {"type": "string"}, "y": {"type": "string"}}, "required": ["x"]},
        "tools": {"step": {"tool_ref": "local:bench:step",
            "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
            "output_schema": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}},
        "nodes": nodes,
        "edges": edges,
    })
}

fn program(kind: &str) -> Arc<Program> {
    let mut files = BTreeMap::new();
    files.insert("bench.json".to_string(), flow(kind));
    match Program::load(&files, "bench.json") {
        Ok(p) => Arc::new(p),
        Err(e) => panic!("{:?}", e.diagnostics),
    }
}

/// Runs the tool chain with instant replies; returns the recorded facts.
fn run_tools(p: &Arc<Program>, record: bool) -> Vec<Fact> {
    let input = json!({"x": "v"});
    let mut facts = Vec::new();
    if record {
        facts.push(Fact::Start {
            n: 1,
            run: RunId::from_parts(0, [0; 10]),
            data: "1.0".into(),
            entry: Entry {
                module: "bench.json".into(),
                function: "main".into(),
            },
            program: "sha256:0".into(),
            sources: Vec::new(),
            input: input.clone(),
            parent: None,
            outer: None,
        });
    }
    let (mut m, mut effects) = Machine::start(p.clone(), "bench.json", &input).unwrap();
    let reply = Outcome::Ok(json!({"x": "v"}));
    loop {
        let mut next = None;
        for e in &effects {
            if record && let Some(f) = e.fact() {
                let n = facts.len() as u64 + 1;
                facts.push(f.numbered(n));
            }
            if let Effect::Call { call, .. } = e {
                next = Some(call.clone());
            }
        }
        let Some(call) = next else { break };
        if record {
            facts.push(Fact::Reply {
                n: facts.len() as u64 + 1,
                call: call.clone(),
                outcome: reply.clone(),
            });
        }
        effects = m.feed(call.as_str(), &reply).unwrap();
    }
    assert!(m.ending().is_some());
    facts
}

fn bench(c: &mut Criterion) {
    let transforms = program("transform");
    let tools = program("tool");
    let mut g = c.benchmark_group("interp");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(NODES as u64));
    g.bench_function("transform_chain_10k_nodes", |b| {
        b.iter(|| {
            let (m, effects) =
                Machine::start(transforms.clone(), "bench.json", &json!({"x": "v"})).unwrap();
            assert!(m.ending().is_some());
            black_box(effects.len())
        })
    });
    g.bench_function("tool_chain_10k_nodes", |b| {
        b.iter(|| black_box(run_tools(&tools, false).len()))
    });
    let facts = run_tools(&tools, true);
    assert_eq!(replay(tools.clone(), &facts).verdict, Verdict::Matched);
    g.throughput(Throughput::Elements(facts.len() as u64));
    g.bench_function("replay_tool_chain_facts", |b| {
        b.iter(|| {
            let r = replay(tools.clone(), black_box(&facts));
            assert_eq!(r.verdict, Verdict::Matched);
        })
    });
    g.finish();
    cpu_report(&transforms, &tools, &facts);
}

/// On-CPU nanoseconds of this thread (Linux schedstat), so the figures
/// below do not count time the thread spent waiting for a core on a busy
/// machine.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Best of five, in on-CPU time: µs per node and facts/s.
fn cpu_report(transforms: &Arc<Program>, tools: &Arc<Program>, facts: &[Fact]) {
    let best = |f: &mut dyn FnMut()| -> Option<f64> {
        let mut best = u64::MAX;
        for _ in 0..5 {
            let t0 = cpu_ns()?;
            f();
            best = best.min(cpu_ns()? - t0);
        }
        Some(best as f64)
    };
    let t = best(&mut || {
        let (m, _) = Machine::start(transforms.clone(), "bench.json", &json!({"x": "v"})).unwrap();
        assert!(m.ending().is_some());
    });
    let u = best(&mut || {
        black_box(run_tools(tools, false));
    });
    let r = best(&mut || {
        assert_eq!(replay(tools.clone(), facts).verdict, Verdict::Matched);
    });
    if let (Some(t), Some(u), Some(r)) = (t, u, r) {
        println!(
            "on-CPU, best of 5: transform chain {:.2} µs/node; tool chain {:.2} µs/node; \
             replay {:.0} facts/s ({} facts)",
            t / 1e3 / NODES as f64,
            u / 1e3 / NODES as f64,
            facts.len() as f64 / (r / 1e9),
            facts.len()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
