//! Errors that say what to do (issue 41 §8), each through the real `flow`
//! binary or a real `flow serve`: a stale worker's fingerprint names the
//! command that regenerates the Tool document; an HTTP start whose Tools
//! are unbound because of its module name says which `name` to send;
//! `--server` without a scheme asks for a URL; `no run` names the store it
//! looked in, and a read on a missing store creates nothing; a reply of
//! the wrong shape shows the `{"Ok": …}` wrapper and the open calls (CLI
//! and HTTP 422); `flow check` offers "did you mean" for a misspelt node
//! or tool.

mod common;

use common::{TestApp, post_json};
use serde_json::{Value, json};
use std::path::PathBuf;

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows")
        .join(path)
}

fn doc(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(example(path)).unwrap()).unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A run id no store holds.
const NO_SUCH_RUN: &str = "run-01m94b6p9xy95wkxdrqsxh69wv";

/// A worker serving a stale Tool document (its fingerprint is not the
/// declaration's) refuses the HTTP start naming the command that
/// regenerates the document (GAP-WORK-*; issue 41 §8).
#[tokio::test]
async fn a_workers_stale_fingerprint_names_the_command_that_regenerates_it() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("server.toml");
    std::fs::write(
        &tools,
        "[tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let s = common::serve_bound(data.path(), Some(&tools), &["--workers", "triage.json"]);
    let c = client();
    let stale = format!("sha256:{}", "0".repeat(64));
    let (status, v) = post_json(
        &c,
        format!("{}/v1/workers", s.base),
        &json!({"name": "stale", "tools": [{"tool": "triage.json#classify", "fingerprint": stale}]}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = post_json(
        &c,
        format!("{}/v1/runs", s.base),
        &json!({"flow": doc("triage/triage.json"), "name": "triage.json",
            "input": {"ticket": "refund", "customer": "Bo"}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v.to_string()
            .contains("`flow --json tools triage.json > tools.json`, and restart `flow worker`"),
        "{v}"
    );
}

/// An HTTP start of a flow with Tools and no `name` (so the module is
/// `flow.json`) on a server whose `--tools` binds them as `triage.json`:
/// the 422 says the module name is what binds, and which `name` to send.
#[tokio::test]
async fn an_http_start_without_its_name_says_which_name_binds() {
    let data = tempfile::tempdir().unwrap();
    let s = common::serve_bound(data.path(), Some(&example("triage/flow.toml")), &[]);
    let c = client();
    let body = json!({"flow": doc("triage/triage.json"),
        "input": {"ticket": "refund", "customer": "Bo"}});
    let (status, v) = post_json(&c, format!("{}/v1/runs", s.base), &body).await;
    assert_eq!(status, 422, "{v}");
    let messages: Vec<&str> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("flow.json#classify is unbound")),
        "{v}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("this flow's module is named \"flow.json\"")
                && m.contains("send \"name\": \"triage.json\"")),
        "{v}"
    );
    // Sent with that name, it starts.
    let mut named = body.clone();
    named["name"] = json!("triage.json");
    let (status, v) = post_json(&c, format!("{}/v1/runs", s.base), &named).await;
    assert_eq!(status, 201, "{v}");
}

/// `--server 127.0.0.1:8080` (no scheme) is refused with the form it
/// needs, not the HTTP client's "builder error"; the same from
/// FLOW_SERVER.
#[test]
fn a_server_without_a_scheme_is_asked_for_a_url() {
    let app = TestApp::new();
    for via_env in [false, true] {
        let mut cmd = common::flow();
        cmd.arg("--data").arg(app.data.path());
        if via_env {
            cmd.env("FLOW_SERVER", "127.0.0.1:8080");
        } else {
            cmd.args(["--server", "127.0.0.1:8080"]);
        }
        let o = cmd.arg("runs").output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--server needs a URL like http://127.0.0.1:8080"),
            "{err}"
        );
        assert!(!err.contains("builder error"), "{err}");
    }
}

/// `no run …` says where it looked: the `--data` store (and that there is
/// none there), or the `--server`. A read on a missing store — history,
/// replay, watch, export, runs, resume, fork — creates nothing (`./.flow`
/// was created as a side effect).
#[test]
fn no_run_names_the_store_and_a_read_creates_nothing() {
    let cwd = tempfile::tempdir().unwrap();
    let out = cwd.path().join("out");
    let out = out.to_str().unwrap();
    let reads: Vec<Vec<&str>> = vec![
        vec!["history", NO_SUCH_RUN],
        vec!["history", NO_SUCH_RUN, "--summary"],
        vec!["replay", NO_SUCH_RUN],
        vec!["watch", NO_SUCH_RUN],
        vec!["export", NO_SUCH_RUN, "--out", out],
        vec!["fork", NO_SUCH_RUN, "--checkpoint", "2"],
        vec![
            "resume",
            NO_SUCH_RUN,
            "--call",
            "c1:root#1",
            "--reply",
            r#"{"Ok":{}}"#,
        ],
    ];
    for args in &reads {
        let o = common::flow()
            .current_dir(cwd.path())
            .args(args)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "no run {NO_SUCH_RUN} in the store at .flow (--data): there is no store there"
            )),
            "{args:?}: {err}"
        );
    }
    let o = common::flow()
        .current_dir(cwd.path())
        .arg("runs")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no runs");
    let left: Vec<_> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "a read created {left:?}");

    // A store that exists, and a server.
    let app = TestApp::new();
    let review = example("review/review.json");
    let (code, _) = app.json(&[
        "run",
        review.to_str().unwrap(),
        "--input",
        r#"{"text":"hi"}"#,
    ]);
    assert_eq!(code, 3);
    let o = app.cmd(&["history", NO_SUCH_RUN]);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "no run {NO_SUCH_RUN} in the store at {} (--data)",
            app.data.path().display()
        )) && !err.contains("there is no store there"),
        "{err}"
    );
    let data = tempfile::tempdir().unwrap();
    let s = common::serve(data.path(), &[]);
    let o = common::flow()
        .args(["--server", &s.base, "history", NO_SUCH_RUN])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("on the server at {}", s.base)),
        "{err}"
    );
}

/// A reply that is the value itself (`{"decision": …}`), not an outcome
/// (`{"Ok": …}`), is refused showing the wrapper around that very value
/// and the run's open calls with their ids — by `flow resume` and by
/// `POST /v1/runs/{run}/resume` (422); a call id that is not open lists
/// them too. Nothing is recorded.
#[tokio::test]
async fn a_reply_of_the_wrong_shape_shows_the_wrapper_and_the_open_calls() {
    let open = "c1:root#1 (std/human#input at node review)";
    let wrapped = r#"{"Ok":{"decision":"approved"}}"#;
    let app = TestApp::new();
    let review = example("review/review.json");
    let (code, v) = app.json(&[
        "run",
        review.to_str().unwrap(),
        "--input",
        r#"{"text":"hi"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let facts = app.facts(&run);
    let o = app.cmd(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"decision":"approved"}"#,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(r#"{"Ok": value}"#), "{err}");
    assert!(err.contains(&format!("for this value, {wrapped}")), "{err}");
    assert!(err.contains(&format!("its open calls: {open}")), "{err}");
    let o = app.cmd(&["resume", &run, "--call", "c1:root#7", "--reply", wrapped]);
    let err = stderr(&o);
    assert!(err.contains(&format!("its open calls: {open}")), "{err}");
    assert_eq!(app.facts(&run), facts, "nothing recorded");

    let data = tempfile::tempdir().unwrap();
    let s = common::serve(data.path(), &[]);
    let c = client();
    let (status, v) = post_json(
        &c,
        format!("{}/v1/runs", s.base),
        &json!({"flow": common::review_flow(), "name": "review.json",
            "input": {"text": "hi"}, "wait": 10}),
    )
    .await;
    assert_eq!((status, v["state"].as_str()), (201, Some("paused")), "{v}");
    let run = v["run"].as_str().unwrap();
    let (status, v) = post_json(
        &c,
        format!("{}/v1/runs/{run}/resume", s.base),
        &json!({"call": "c1:root#1", "reply": {"decision": "approved"}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("for this value, {wrapped}")),
        "{v}"
    );
    assert!(detail.contains(&format!("its open calls: {open}")), "{v}");
}

/// `flow check` offers the nearest node id for an edge to a misspelt
/// node, and the nearest registry entry for a misspelt `tool_id`.
#[test]
fn check_offers_did_you_mean_for_a_misspelt_node_or_tool() {
    let mut flow = doc("triage/triage.json");
    for n in flow["nodes"].as_array_mut().unwrap() {
        if n["id"] == "classify" {
            n["tool_id"] = json!("clasify");
        }
    }
    let edge = flow["edges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["to"] == "review")
        .expect("an edge to review");
    edge["to"] = json!("reveiw");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("triage.json");
    std::fs::write(&file, serde_json::to_string_pretty(&flow).unwrap()).unwrap();
    let app = TestApp::new();
    let o = app.cmd(&["check", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("error[FS0205]")
            && l.ends_with("`reveiw` is not a node of this flow (did you mean `review`?)")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("error[FS0302]")
            && l.ends_with(
                "tool `clasify` is not in the flow's `tools` registry (did you mean `classify`?)"
            )),
        "{text}"
    );
}
