//! Wall-clock timings as host records, failures pinpointed (issue 38 §3,
//! §4): a run whose `parallel_fork` sends two calls of a slow Tool at once
//! shows both calls side by side with durations at least the Tool's sleep,
//! in `flow history`, `GET /v1/runs/{run}/timeline` and `flow --server …
//! history` alike; a Tool process that crashes mid-call leaves the end of
//! its stderr beside the run (a `stderr` host record), shown by `flow
//! run`'s fault, `flow history` and the timeline. History bytes do not
//! move: the facts carry no clock and keep their fields (GAP-HIST-2,
//! GAP-CLOCK-1: the engine reads no wall clock; the golden archives in
//! store/tests guard the bytes); times and stderr are host records
//! outside the chain (GAP-HOST-1, GAP-PRO-4: stderr stays host-side),
//! shown apart from the computed view (HIST-20).
//!
//! Real parts: the `flow` binary, a real `flow serve` on an ephemeral
//! port, real SQLite, a real Python Tool process (the Python toolkit). No
//! timed assertion beyond sanity: durations ≥ the Tool's sleep, ordering.

mod common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The Tool's sleep per call.
const SLEEP_MS: i64 = 300;

/// `count.json` with a `parallel_fork` of two branches, each calling the
/// slow `step` Tool, joined before the end; its Tool process sleeps
/// `SLEEP_MS` per call, and ends the process (after a traceback on
/// stderr) for a call with count 99.
fn parallel_flow(dir: &Path) -> PathBuf {
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flows/rolling");
    std::fs::copy(fixtures.join("tools.json"), dir.join("tools.json")).unwrap();
    std::fs::copy(fixtures.join("flow.toml"), dir.join("flow.toml")).unwrap();
    let toolkit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../toolkits/python");
    std::fs::write(
        dir.join("count_tools.py"),
        format!(
            r#"import asyncio, os, sys
sys.path.insert(0, {toolkit:?})
from flowd_toolkit import Call, Toolkit
HERE = os.path.dirname(os.path.abspath(__file__))
tk = Toolkit.from_file(os.path.join(HERE, "tools.json"))

@tk.tool("count.json#step")
async def step(count: int, call: Call) -> dict:
    if count == 99:
        print("Traceback (most recent call last):", file=sys.stderr)
        print("RuntimeError: the counter overflowed at 99", file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)
    await asyncio.sleep({sleep} / 1000)
    return {{"count": count + 1}}

tk.run()
"#,
            toolkit = toolkit.to_string_lossy(),
            sleep = SLEEP_MS
        ),
    )
    .unwrap();
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("count.json")).unwrap())
            .unwrap();
    doc["state_schema"] = json!({
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "a": {"type": "integer"},
            "b": {"type": "integer"},
            "joined": {"type": "object"}
        },
        "required": ["count"]
    });
    let branch = |id: &str| {
        json!({"id": id, "type": "tool_invoke", "tool_id": "step",
            "input_map": {"count": "$.state.count"}, "output_map": {"count": id}})
    };
    doc["nodes"] = json!([
        {"id": "start", "type": "input", "output_schema": {"count": {"type": "integer"}}},
        {"id": "fork", "type": "parallel_fork", "targets": ["a", "b"]},
        branch("a"),
        branch("b"),
        {"id": "join", "type": "parallel_join", "wait_for": "all", "join_reducer": "merge", "output_key": "joined"},
        {"id": "done", "type": "output", "exit_code": "success"}
    ]);
    doc["edges"] = json!([
        {"type": "direct", "from": "start", "to": "fork"},
        {"type": "direct", "from": "a", "to": "join"},
        {"type": "direct", "from": "b", "to": "join"},
        {"type": "direct", "from": "join", "to": "done"}
    ]);
    let flow = dir.join("count.json");
    std::fs::write(&flow, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    flow
}

fn run_flow(app: &common::TestApp, flow: &Path, count: i64) -> (std::process::Output, String) {
    let out = app.cmd(&[
        "run",
        "--allow",
        flow.to_str().unwrap(),
        "--input",
        &json!({ "count": count }).to_string(),
    ]);
    let (_, runs) = app.json(&["runs"]);
    let run = runs["runs"][0]["run"]
        .as_str()
        .or_else(|| runs[0]["run"].as_str())
        .unwrap_or_else(|| panic!("one run: {runs}"))
        .to_string();
    (out, run)
}

#[test]
fn parallel_calls_are_timed_side_by_side_locally_and_over_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let flow = parallel_flow(dir.path());
    let app = common::TestApp::new();
    let (out, run) = run_flow(&app, &flow, 1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The timeline through `flow history --json` (the inspect view).
    let (code, v) = app.json(&["history", &run]);
    assert_eq!(code, 0, "{v}");
    let t = &v["timeline"];
    let calls = t["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2, "{t}");
    for c in calls {
        assert_eq!(c["tool"], "count.json#step", "{c}");
        assert_eq!(c["route"], "process", "{c}");
        assert_eq!(c["attempt"], 1, "{c}");
        assert_eq!(c["outcome"], "Ok", "{c}");
        let (sent, replied) = (
            c["sentMs"].as_i64().unwrap(),
            c["repliedMs"].as_i64().unwrap(),
        );
        assert!(replied >= sent, "{c}");
        assert!(c["durationMs"].as_i64().unwrap() >= SLEEP_MS, "{c}");
        assert!(c["replyFact"].as_u64().unwrap() > c["fact"].as_u64().unwrap());
    }
    let nodes: Vec<&str> = calls.iter().map(|c| c["node"].as_str().unwrap()).collect();
    assert!(nodes.contains(&"a") && nodes.contains(&"b"), "{nodes:?}");
    // Side by side: each went before the other came back.
    let ms = |c: &Value, k: &str| c[k].as_i64().unwrap();
    assert!(
        ms(&calls[0], "sentMs") <= ms(&calls[1], "repliedMs")
            && ms(&calls[1], "sentMs") <= ms(&calls[0], "repliedMs"),
        "the branches' calls overlap: {t}"
    );
    let (started, ended) = (ms(t, "startedMs"), ms(t, "endedMs"));
    assert!(
        started <= ms(&calls[0], "sentMs") && ms(&calls[1], "repliedMs") <= ended,
        "{t}"
    );
    assert!(ms(t, "durationMs") >= SLEEP_MS, "{t}");
    assert!(t["fault"].is_null(), "{t}");

    // The human text: each call's duration and the run's total.
    let text = String::from_utf8(app.cmd(&["history", &run]).stdout).unwrap();
    assert!(text.contains("\ntook "), "{text}");
    assert!(text.contains("calls:\n"), "{text}");
    let timed = text
        .lines()
        .filter(|l| l.contains("count.json#step") && l.contains("process  Ok  "))
        .count();
    assert_eq!(timed, 2, "{text}");

    // The same over a server on the same store.
    let s = common::serve(app.data.path(), &[]);
    let local = common::flow()
        .arg("--data")
        .arg(app.data.path())
        .args(["history", &run])
        .output()
        .unwrap();
    let remote = common::flow()
        .args(["--server", &s.base, "history", &run])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&local.stdout),
        String::from_utf8_lossy(&remote.stdout)
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http: Value = rt.block_on(async {
        let c = reqwest::Client::builder().no_proxy().build().unwrap();
        common::get_json(&c, format!("{}/v1/runs/{run}/timeline", s.base)).await
    });
    assert_eq!(&http, t, "the endpoint and the history view agree");
}

#[test]
fn a_tool_that_crashes_mid_call_leaves_its_stderr_pinpointed() {
    let dir = tempfile::tempdir().unwrap();
    let flow = parallel_flow(dir.path());
    let app = common::TestApp::new();
    let (out, run) = run_flow(&app, &flow, 99);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("faulted"), "{err}");
    assert!(err.contains("failed at node "), "{err}");
    assert!(err.contains("to count.json#step answered "), "{err}");
    assert!(err.contains("the end of its stderr:"), "{err}");
    assert!(
        err.contains("RuntimeError: the counter overflowed at 99"),
        "{err}"
    );

    let (_, v) = app.json(&["history", &run]);
    let t = &v["timeline"];
    let fault = &t["fault"];
    assert!(fault["why"].is_string(), "{t}");
    let c = &fault["call"];
    assert_eq!(c["tool"], "count.json#step", "{t}");
    assert!(matches!(c["node"].as_str(), Some("a" | "b")), "{t}");
    assert!(
        matches!(c["outcome"].as_str(), Some("Unknown" | "NotRun")),
        "{t}"
    );
    assert!(
        c["stderr"]
            .as_str()
            .is_some_and(|s| s.contains("RuntimeError: the counter overflowed at 99")),
        "{t}"
    );
    let text = String::from_utf8(app.cmd(&["history", &run]).stdout).unwrap();
    assert!(text.contains("the end of its stderr:"), "{text}");
    assert!(
        text.contains("RuntimeError: the counter overflowed at 99"),
        "{text}"
    );
}

#[test]
fn a_history_with_no_timing_records_shows_no_durations() {
    // An archive export carries the host records; an import of one whose
    // host.jsonl has none (a run from before timings) shows calls with no
    // times, never made-up ones.
    let dir = tempfile::tempdir().unwrap();
    let flow = parallel_flow(dir.path());
    let app = common::TestApp::new();
    let (out, run) = run_flow(&app, &flow, 1);
    assert!(out.status.success());
    let archive = dir.path().join("archive");
    let o = app.cmd(&["export", &run, "--out", archive.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let host = std::fs::read_dir(&archive)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find_map(|p| {
            let h = p.join("host.jsonl");
            h.exists().then_some(h)
        })
        .or_else(|| {
            let h = archive.join("host.jsonl");
            h.exists().then_some(h)
        })
        .expect("the archive's host.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&host)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"timing\""))
        .map(str::to_string)
        .collect();
    std::fs::write(
        &host,
        kept.join("\n") + if kept.is_empty() { "" } else { "\n" },
    )
    .unwrap();
    let other = common::TestApp::new();
    let o = other.cmd(&["import", archive.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (_, v) = other.json(&["history", &run]);
    let t = &v["timeline"];
    assert_eq!(t["calls"].as_array().map(Vec::len), Some(2), "{t}");
    for c in t["calls"].as_array().unwrap() {
        assert!(c["durationMs"].is_null() && c["sentMs"].is_null(), "{c}");
    }
    assert!(
        t["durationMs"].is_null(),
        "an imported run has no times of this store's: {t}"
    );
    let text = String::from_utf8(other.cmd(&["history", &run]).stdout).unwrap();
    assert!(!text.contains("\ntook "), "{text}");
}

/// The same timings on Postgres: the step's records ride in the facts'
/// commit there too (`append_all_with_then`), and the endpoint answers the
/// same shape.
#[tokio::test]
async fn parallel_calls_are_timed_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flow = parallel_flow(dir.path());
    let data = tempfile::tempdir().unwrap();
    let s = common::serve_bound(
        data.path(),
        Some(&dir.path().join("flow.toml")),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    );
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(flow).unwrap()).unwrap();
    let (status, v) = common::post_json(
        &c,
        format!("{}/v1/runs", s.base),
        &json!({"flow": doc, "name": "count.json", "input": {"count": 1}, "wait": 30}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    let run = v["run"].as_str().unwrap();
    let t = common::get_json(&c, format!("{}/v1/runs/{run}/timeline", s.base)).await;
    let calls = t["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2, "{t}");
    for c in calls {
        assert_eq!(c["route"], "process", "{c}");
        assert!(c["durationMs"].as_i64().unwrap() >= SLEEP_MS, "{c}");
    }
    assert!(t["durationMs"].as_i64().unwrap() >= SLEEP_MS, "{t}");
    // The answered calls' times are one record (the drive gathers them),
    // written in a commit of facts: its head is at or after both Replies.
    let rows = db.query("SELECT head_n FROM host_records WHERE kind = 'timing' ORDER BY seq");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let head: u64 = rows[0][0].as_deref().unwrap().parse().unwrap();
    for c in calls {
        assert!(head >= c["replyFact"].as_u64().unwrap(), "{head} {c}");
    }
    // /metrics has the same two calls' latency, by Tool and route (issue
    // 38 §5), each at least the Tool's sleep.
    let text = c
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let tool = calls[0]["tool"].as_str().unwrap();
    let count = format!("flowd_call_duration_seconds_count{{tool=\"{tool}\",route=\"process\"}} 2");
    assert!(text.lines().any(|l| l == count), "{count} in\n{text}");
    let sum: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "flowd_call_duration_seconds_sum{{tool=\"{tool}\",route=\"process\"}} "
            ))
        })
        .and_then(|v| v.parse().ok())
        .expect("a latency sum");
    assert!(sum * 1000.0 >= 2.0 * SLEEP_MS as f64, "{sum}");
}

/// A pause, answered by a person over HTTP with a token: the call is out
/// from its Call to the answer (`route` person), the Reply's timing says
/// `via` person and `by` the token's name (its line's `name=`), and the
/// pause says when it was answered and by whom.
#[tokio::test]
async fn a_pause_answered_by_a_token_says_when_and_by_whom() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "0123456789abcdef0123 admin name=ann\n").unwrap();
    let s = common::serve(
        &dir.path().join("data"),
        &["--tokens", tokens.to_str().unwrap()],
    );
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let auth = "Bearer 0123456789abcdef0123";
    let post = |path: String, body: Value| {
        let c = c.clone();
        async move {
            let r = c
                .post(path)
                .header("authorization", auth)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, v) = post(
        format!("{}/v1/runs", s.base),
        json!({"flow": common::review_flow(), "input": {"text": "hello"}, "wait": 10}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, v) = post(
        format!("{}/v1/runs/{run}/resume", s.base),
        json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert!(status < 300, "{v}");
    let t: Value = c
        .get(format!("{}/v1/runs/{run}/timeline", s.base))
        .header("authorization", auth)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let person = t["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == call.as_str())
        .unwrap_or_else(|| panic!("{t}"));
    assert_eq!(person["route"], "person", "{t}");
    assert_eq!(person["via"], "person", "{t}");
    assert_eq!(person["by"], "ann", "{t}");
    assert!(person["durationMs"].as_i64().unwrap() >= 200, "{t}");
    let pause = &t["pauses"][0];
    assert_eq!(pause["open"][0], call.as_str(), "{t}");
    assert_eq!(pause["answeredMs"], person["repliedMs"], "{t}");
    assert_eq!(pause["by"], person["by"], "{t}");
    assert!(pause["pausedMs"].as_i64().unwrap() <= pause["answeredMs"].as_i64().unwrap());
}
