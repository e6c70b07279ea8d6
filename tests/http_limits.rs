//! One request cannot take the server down (issue 17, item 3): a flow's
//! step limit is bounded by the server's `--max-steps`, and a long loop
//! without calls runs off the async runtime in bounded slices, each
//! recorded before the next, while the server keeps answering others.

mod common;

use common::serve_args;
use serde_json::{Value, json};
use std::time::Duration;

/// A loop of `transform` nodes that never calls anything, stopped only by
/// `harness_meta.max_steps` (`steps` executions).
fn spin(steps: u64) -> Value {
    json!({
        "spec_version": "1.0.0",
        "id": "spin",
        "harness_meta": {"enabled": false, "max_steps": steps},
        "state_schema": {"type": "object",
            "properties": {"x": {"type": "string"}, "y": {"type": "string"}}, "required": ["x"]},
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"x": {"type": "string"}}},
            {"id": "spin", "type": "transform", "mode": "mapping",
             "mapping": [{"from": "$.state.x", "to": "y"}]},
            {"id": "done", "type": "output"}
        ],
        "edges": [
            {"from": "start", "to": "spin"},
            {"type": "conditional", "from": "spin",
             "branches": [{"condition": {"type": "expr", "expr": "$.state.y == $.state.x"}, "to": "spin"}],
             "default_target": "done"}
        ]
    })
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    let r = tokio::time::timeout(Duration::from_secs(20), client.get(url).send())
        .await
        .expect("an answer while a long run computes")
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn step_limit_above_the_servers_ceiling_is_refused_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_args(dir.path(), None, &[], &["--max-steps", "50000"]);
    let r = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": spin(1_000_000_000_000), "input": {"x": "a"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let p: Value = r.json().await.unwrap();
    let detail = p["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("max_steps") && detail.contains("50000"),
        "{p}"
    );
    let (_, runs) = get(&client, format!("{base}/v1/runs")).await;
    assert_eq!(runs["runs"], json!([]), "nothing recorded: {runs}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn a_long_loop_without_calls_leaves_the_server_answering() {
    const STEPS: u64 = 8_000;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_args(dir.path(), None, &[], &[]);
    // Two at once: each is computed in slices on the blocking pool.
    let mut runs = Vec::new();
    for _ in 0..2 {
        let r = client
            .post(format!("{base}/v1/runs"))
            .json(&json!({"flow": spin(STEPS), "input": {"x": "a"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        runs.push(v["run"].as_str().unwrap().to_string());
    }
    // While they compute, the server answers: health, a listing, and a
    // third run that ends at once.
    let (s, h) = get(&client, format!("{base}/healthz")).await;
    assert_eq!((s, &h["status"]), (200, &json!("ok")), "{h}");
    let (s, _) = get(&client, format!("{base}/v1/runs")).await;
    assert_eq!(s, 200);
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        client
            .post(format!("{base}/v1/runs"))
            .json(&json!({"flow": spin(1), "input": {"x": "a"}, "wait": 10}))
            .send(),
    )
    .await
    .expect("a short run is served beside the long ones")
    .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "faulted", "{v}");
    // Each long run ends at its limit with every step recorded: Start,
    // one Checkpoint per node execution, End.
    for run in &runs {
        let mut view = Value::Null;
        for _ in 0..1200 {
            let (_, v) = get(&client, format!("{base}/v1/runs/{run}")).await;
            if v["state"] != "running" {
                view = v;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(view["state"], "faulted", "{view}");
        assert_eq!(view["lastFact"]["n"], STEPS + 2, "{view}");
        let r = client
            .post(format!("{base}/v1/runs/{run}/replay"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["verdict"], "matched", "{v}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
