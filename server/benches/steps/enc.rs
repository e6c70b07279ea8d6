//! Encryption at rest against none (issue 40 "Measure": the W1 step cost
//! with encryption on against off in the same run, target ≤ 1.15×;
//! docs/custody.md "What it costs"). Rounds alternate the two so that a
//! shared machine's swings fall on both: W1 plain with the Rust Tool, and
//! the same loop whose Tool answers carry a 1,200-byte text (a blob each
//! step: the blob body is sealed too), each with and without `--key-file`.

use super::harness::flows::{Accumulate, steps_loop};
use super::harness::{self, Server};
use super::{Bench, Tool, db_bytes, run_to_end};
use flowd::http::listing::StateName;
use serde_json::json;
use std::time::Instant;

/// The loop with the `pad` Tool (`{i} -> {i, pad}`, `pad` 1,200 bytes).
pub fn pad_loop(steps: usize) -> serde_json::Value {
    let mut flow = steps_loop(Accumulate::No, false, steps + 10);
    flow["tools"]["pad"] = pad_decl();
    flow["nodes"][1]["tool_id"] = json!("pad");
    flow
}

pub fn pad_decl() -> serde_json::Value {
    json!({"tool_ref": "bench:pad",
        "input_schema": {"i": {"type": "integer"}},
        "output_schema": {"type": "object",
            "properties": {"i": {"type": "integer"}, "pad": {"type": "string"}},
            "required": ["i", "pad"]}})
}

/// One W1 run of `steps` on a fresh server: (µs/step, server CPU µs/step,
/// bytes the SQLite file grew by a step).
async fn once(
    b: &mut Bench,
    keys: Option<&std::path::Path>,
    pad: bool,
    steps: usize,
) -> (f64, f64, f64) {
    b.rows += 1;
    let data = b.root.join(format!("row-{}", b.rows));
    let tools = b.bindings(None);
    let extra: Vec<&str> = match keys {
        Some(k) => vec!["--key-file", k.to_str().expect("utf-8 path")],
        None => Vec::new(),
    };
    let s = Server::start_with(&data, &[tools], &extra);
    let flow = if pad {
        pad_loop(steps)
    } else {
        steps_loop(Accumulate::No, false, steps + 10)
    };
    let before = db_bytes(&data).unwrap_or(0);
    let body = harness::start_request(
        flow,
        Tool::Rust.module(),
        json!({"i": 0, "n": steps}),
        Some(30),
    );
    let (cpu, t) = (s.cpu(), Instant::now());
    let (run, state) = run_to_end(&s, &body).await;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), s.cpu() - cpu);
    assert_eq!(state, StateName::Completed, "run {run}");
    let grew = db_bytes(&data).unwrap_or(0).saturating_sub(before) as f64 / steps as f64;
    (secs * 1e6 / steps as f64, cpu.us_per_op(steps), grew)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub async fn rows(b: &mut Bench, steps: usize) {
    let keys = b.root.join("bench-keys");
    let ring = flow_store::Keyring::generate("bench").expect("a key");
    std::fs::write(&keys, ring.to_text()).expect("key file");
    let rounds = harness::env_list("FLOW_BENCH_ENC_ROUNDS", &[5])[0];
    for pad in [false, true] {
        let (mut off, mut on, mut off_cpu, mut on_cpu) = (vec![], vec![], vec![], vec![]);
        let (mut off_bytes, mut on_bytes) = (vec![], vec![]);
        for _ in 0..rounds {
            let (t, c, d) = once(b, None, pad, steps).await;
            off.push(t);
            off_cpu.push(c);
            off_bytes.push(d);
            let (t, c, d) = once(b, Some(&keys), pad, steps).await;
            on.push(t);
            on_cpu.push(c);
            on_bytes.push(d);
        }
        let (off_bytes, on_bytes) = (median(off_bytes), median(on_bytes));
        let what = if pad {
            ", a 1,200-byte Tool answer (a blob) each step"
        } else {
            ""
        };
        let (off, on, off_cpu, on_cpu) = (median(off), median(on), median(off_cpu), median(on_cpu));
        b.table.row(
            format!("SQLite: W1 plain{what}, {steps} steps, Rust Tool, encryption off / on (median of {rounds} alternating rounds)"),
            format!(
                "{off:.0} / {on:.0} µs/step = {:.2}× ({:.2}× / {:.2}× fsync); server CPU {off_cpu:.0} / {on_cpu:.0} µs/step = {:.2}×; {off_bytes:.0} / {on_bytes:.0} bytes/step on disk",
                on / off,
                off / b.fsync_us,
                on / b.fsync_us,
                on_cpu / off_cpu
            ),
            "on ≤ 1.15× off",
        );
    }
}
