//! Fork onto a fixed program (FORK-4), from the real `flow` binary and from
//! `flow serve` as a real process: "fix the bug, then fork from the
//! checkpoint before it". A program that fits runs its new node behaviour;
//! one that does not fit is refused (exit 2, HTTP 422) and nothing is
//! recorded; without `--flow` the recorded program re-runs, whatever the
//! file on disk says now.

#[path = "fixtures/fixtures.rs"]
mod fixtures;

mod common;

use common::TestApp;

use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};

impl TestApp {
    /// The fact number of the run's root Checkpoint at `node`.
    fn checkpoint(&self, run: &str, node: &str) -> u64 {
        let (code, v) = self.json(&["history", run, "--kind", "Checkpoint"]);
        assert_eq!(code, 0, "{v}");
        v["facts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["fact"]["node"] == node)
            .unwrap_or_else(|| panic!("no checkpoint at {node}: {v}"))["n"]
            .as_u64()
            .unwrap()
    }

    fn approve(&self, run: &str) -> Json {
        let (code, v) = self.json(&[
            "resume",
            run,
            "--call",
            "c1:root#1",
            "--reply",
            r#"{"Ok":{"decision":"approved"}}"#,
        ]);
        assert_eq!(code, 0, "{v}");
        let (code, r) = self.json(&["replay", run]);
        assert_eq!((code, r["verdict"].as_str()), (0, Some("matched")), "{r}");
        v
    }
}

fn review() -> Json {
    let p = fixtures::repo().join("examples/flows/review/review.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The review flow "fixed": its draft node also writes the text to a new
/// state field `title`, and the state declares a new optional `tag`.
fn fixed() -> Json {
    let mut doc = review();
    doc["state_schema"]["properties"]["title"] = json!({"type": "string"});
    doc["state_schema"]["properties"]["tag"] = json!({"type": "string"});
    doc["nodes"][1]["mapping"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "$.state.text", "to": "title"}));
    doc
}

fn write(dir: &Path, name: &str, doc: &Json) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    p
}

/// FORK-4: a fork onto a fixed program that fits runs the new node
/// behaviour and replays matched; without --flow the recorded program
/// re-runs, though the file it was read from was edited since; `--set`
/// is decoded against the program forked onto.
#[test]
fn fork_onto_a_fixed_program() {
    let f = TestApp::new();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "review.json", &review());
    let file = file.to_str().unwrap();
    let (code, v) = f.json(&["run", file, "--input", r#"{"text":"one"}"#]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let cp = f.checkpoint(&run, "draft");
    // The bug is fixed in place.
    write(dir.path(), "review.json", &fixed());

    let cps = cp.to_string();
    let (code, v) = f.json(&["fork", &run, "--checkpoint", &cps]);
    assert_eq!(code, 3, "{v}");
    let out = f.approve(v["run"].as_str().unwrap());
    assert!(
        out["output"].get("title").is_none(),
        "recorded program: {out}"
    );

    let (code, v) = f.json(&[
        "fork",
        &run,
        "--checkpoint",
        &cps,
        "--flow",
        file,
        "--set",
        r#"tag="v2""#,
    ]);
    assert_eq!(code, 3, "{v}");
    let forked = v["run"].as_str().unwrap().to_string();
    let out = f.approve(&forked);
    assert_eq!(
        out["output"]["title"], "one",
        "the fixed draft node ran: {out}"
    );
    assert_eq!(out["output"]["tag"], "v2", "{out}");
    // The fork's Start names its parent and records the fixed source.
    let (_, start) = f.json(&["history", &forked, "--fact", "1"]);
    assert_eq!(start["parent"]["run"], run.as_str(), "{start}");
    let (_, parent) = f.json(&["history", &run, "--fact", "1"]);
    assert_ne!(start["program"], parent["program"], "{start}");
    // The same --set against the recorded program is refused.
    let (code, v) = f.json(&["fork", &run, "--checkpoint", &cps, "--set", r#"tag="v2""#]);
    assert_eq!(code, 2, "{v}");
}

/// FORK-4: "Otherwise the fork is refused, with exit code 2 at the CLI":
/// another flow id, no node of the checkpoint's id, a state that does not
/// fit the new state_schema, and a program that does not check; nothing is
/// recorded for any of them.
#[test]
fn fork_onto_a_program_that_does_not_fit_is_refused() {
    let f = TestApp::new();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "review.json", &review());
    let (code, v) = f.json(&[
        "run",
        file.to_str().unwrap(),
        "--input",
        r#"{"text":"one"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let cps = f.checkpoint(&run, "draft").to_string();
    let mut other_id = fixed();
    other_id["id"] = json!("another-flow");
    let mut no_node = fixed();
    no_node["nodes"][1]["id"] = json!("draft2");
    no_node["edges"][0]["to"] = json!("draft2");
    no_node["edges"][1]["from"] = json!("draft2");
    let mut retyped = fixed();
    // Retyped throughout (the fields `text` is copied to as well, so the
    // program still checks: FS0901), the checkpoint's state does not fit.
    for field in ["text", "draft", "title"] {
        retyped["state_schema"]["properties"][field] = json!({"type": "integer"});
    }
    retyped["nodes"][0]["output_schema"]["text"] = json!({"type": "integer"});
    let mut required = fixed();
    required["state_schema"]["required"] = json!(["text", "tag"]);
    let mut broken = fixed();
    broken["edges"][0]["to"] = json!("nowhere");
    let before = f.runs();
    for (name, doc, needle) in [
        ("other-id.json", other_id, "flow id"),
        ("no-node.json", no_node, "no node"),
        ("retyped.json", retyped, "state_schema"),
        ("required.json", required, "state_schema"),
        ("broken.json", broken, "does not check"),
    ] {
        let p = write(dir.path(), name, &doc);
        let (code, v) = f.json(&[
            "fork",
            &run,
            "--checkpoint",
            &cps,
            "--flow",
            p.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{name}: {v}");
        assert!(v["error"].to_string().contains(needle), "{name}: {v}");
        assert_eq!(f.runs(), before, "{name}: nothing recorded");
    }
    // A file that is not there.
    let missing = dir.path().join("missing.json");
    let (code, _) = f.json(&[
        "fork",
        &run,
        "--checkpoint",
        &cps,
        "--flow",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert_eq!(f.runs(), before);
}

#[test]
fn fork_help_says_checkpoint_is_a_fact_number() {
    let out = TestApp::new().cmd(&["fork", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("fact number"), "{text}");
    assert!(text.contains("--flow"), "{text}");
}

/// FORK-4 over HTTP: `flow` in the fork body (the start body's shape) forks
/// onto the fixed program; one that does not fit is 422 with nothing
/// recorded; `modules` without `flow` is 422. Then a what-if fork.
#[tokio::test]
async fn fork_onto_a_fixed_program_over_http() {
    let dir = tempfile::tempdir().unwrap();
    forks_over_http(dir.path(), &[]).await;
}

/// The same on Postgres (issue 39: both store backends).
#[tokio::test]
async fn fork_onto_a_fixed_program_and_what_if_over_http_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    forks_over_http(
        dir.path(),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    )
    .await;
}

async fn forks_over_http(dir: &std::path::Path, store: &[&str]) {
    let (mut child, base) = common::serve_args(dir, None, &[], store);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |path: String, body: Json| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Json>().await.unwrap())
        }
    };
    let (s, v) = post(
        "/v1/runs".into(),
        json!({"flow": review(), "input": {"text": "one"}, "wait": 10}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let facts: Json = common::get_json(
        &client,
        format!("{base}/v1/runs/{run}/facts?kind=Checkpoint"),
    )
    .await;
    let cp = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"]["node"] == "draft")
        .unwrap()["n"]
        .as_u64()
        .unwrap();
    let count = || async {
        let v: Json = common::get_json(&client, format!("{base}/v1/runs")).await;
        v["runs"].as_array().unwrap().len()
    };
    let before = count().await;
    let mut other = fixed();
    other["id"] = json!("another-flow");
    for body in [
        json!({"checkpoint": cp, "flow": other}),
        json!({"checkpoint": cp, "flow": {"spec_version": "1.0.0", "nodes": []}}),
        json!({"checkpoint": cp, "modules": {"x.json": review()}}),
    ] {
        let (s, v) = post(format!("/v1/runs/{run}/fork"), body.clone()).await;
        assert_eq!(s, 422, "{body}: {v}");
        assert_eq!(count().await, before, "nothing recorded: {v}");
    }
    let (s, v) = post(
        format!("/v1/runs/{run}/fork"),
        json!({"checkpoint": cp, "flow": fixed(), "name": "review.json", "wait": 10}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let forked = v["run"].as_str().unwrap().to_string();
    let (s, v) = post(
        format!("/v1/runs/{forked}/resume"),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["output"]["title"], "one", "the fixed node ran: {v}");
    let (s, v) = post(format!("/v1/runs/{forked}/replay"), json!({})).await;
    assert_eq!((s, v["verdict"].as_str()), (200, Some("matched")), "{v}");

    // A what-if fork (issue 39 §3): the review's reply replaced.
    let before = count().await;
    for body in [
        json!({"call": "c1:root#1"}),
        json!({"reply": {"Ok": {"decision": "rejected"}}}),
        json!({"checkpoint": cp, "call": "c1:root#1", "reply": {"Ok": {"decision": "rejected"}}}),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "maybe"}}}),
    ] {
        let (s, v) = post(format!("/v1/runs/{run}/fork"), body.clone()).await;
        assert_eq!(s, 422, "{body}: {v}");
        assert_eq!(count().await, before, "nothing recorded: {v}");
    }
    let (s, v) = post(
        format!("/v1/runs/{run}/fork"),
        json!({"call": "c9:root#9", "reply": {"Ok": {"decision": "rejected"}}}),
    )
    .await;
    assert_eq!(s, 404, "{v}");
    let (s, v) = post(
        format!("/v1/runs/{run}/fork"),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "rejected"}}, "wait": 10}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(
        v["parent"]["checkpoint"],
        cp + 1,
        "the Checkpoint entering review: {v}"
    );
    let what_if = v["run"].as_str().unwrap().to_string();
    let (s, v) = post(format!("/v1/runs/{what_if}/replay"), json!({})).await;
    assert_eq!((s, v["verdict"].as_str()), (200, Some("matched")), "{v}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Issue 39 §3, what-if forks: "Fork from the checkpoint before a recorded
/// Call, replacing that call's Reply with a given outcome (decoded against
/// the call's declared type like any reply)". The review's reply is
/// replaced: the fork starts at the Checkpoint before the call, records
/// the Call and the given Reply (never asking anyone), goes the other way
/// and replays matched; a reply that does not decode, an unknown call and
/// a fork that names both a checkpoint and a call are refused, nothing
/// recorded.
#[test]
fn a_what_if_fork_replaces_a_recorded_reply() {
    let f = TestApp::new();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "review.json", &review());
    let (code, v) = f.json(&[
        "run",
        file.to_str().unwrap(),
        "--input",
        r#"{"text":"one"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    f.approve(&run);
    // The Checkpoint as the review node is entered, just before its Call.
    let cp = f.checkpoint(&run, "review");

    let (code, v) = f.json(&[
        "fork",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"rejected","notes":"what if"}}"#,
    ]);
    // The other branch: the `returned` output (exit 4), no pause.
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["output"]["review"]["decision"], "rejected", "{v}");
    let forked = v["run"].as_str().unwrap().to_string();
    let (_, start) = f.json(&["history", &forked, "--fact", "1"]);
    assert_eq!(start["parent"]["run"], run.as_str(), "{start}");
    assert_eq!(start["parent"]["checkpoint"], cp, "{start}");
    let (code, r) = f.json(&["replay", &forked]);
    assert_eq!((code, r["verdict"].as_str()), (0, Some("matched")), "{r}");
    // Its diff against the parent: exactly that call, and what followed.
    let out = f.cmd(&["diff", &run, &forked]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("call 1: A c1:root#1")
            && text.contains(r#"$.outcome.Ok.decision: "approved" → "rejected""#)
            && text.contains(r#"$.node: "publish" → "returned""#),
        "{text}"
    );
    let (_, replies) = f.json(&["history", &forked, "--kind", "Reply"]);
    let replies = replies["facts"].as_array().unwrap().clone();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        replies[0]["fact"]["outcome"]["Ok"]["decision"], "rejected",
        "{replies:?}"
    );

    let before = f.runs();
    for (args, needle) in [
        (
            vec![
                "--call",
                "c1:root#1",
                "--reply",
                r#"{"Ok":{"decision":"maybe"}}"#,
            ],
            "does not fit",
        ),
        (
            vec![
                "--call",
                "c1:root#1",
                "--reply",
                r#"{"decision":"rejected"}"#,
            ],
            "wrapping the value",
        ),
        (
            vec![
                "--call",
                "c9:root#9",
                "--reply",
                r#"{"Ok":{"decision":"rejected"}}"#,
            ],
            "recorded no call",
        ),
    ] {
        let mut all = vec!["fork", run.as_str()];
        all.extend(args.iter().copied());
        let (code, v) = f.json(&all);
        assert_eq!(code, 2, "{args:?}: {v}");
        assert!(v["error"].to_string().contains(needle), "{args:?}: {v}");
        assert_eq!(f.runs(), before, "{args:?}: nothing recorded");
    }
    // Both a checkpoint and a call, or a call without its reply: clap
    // refuses them before anything is opened.
    let cps = cp.to_string();
    for args in [
        vec![
            "--checkpoint",
            cps.as_str(),
            "--call",
            "c1:root#1",
            "--reply",
            "{}",
        ],
        vec!["--call", "c1:root#1"],
    ] {
        let mut all = vec!["fork", run.as_str()];
        all.extend(args.iter().copied());
        let out = f.cmd(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--call"), "{args:?}: {err}");
        assert_eq!(f.runs(), before, "{args:?}: nothing recorded");
    }
}

/// A fork a crash cut short right after its Start (durable, acknowledged)
/// and before its first Checkpoint: nothing of the fork happened yet, so
/// `flow resume` starts it as the fork would have — at the Checkpoint's
/// node with the Start's state — and it goes on, replaying matched.
#[test]
fn a_fork_cut_short_after_its_start_is_continued() {
    use flow_store::{
        AppendFacts, Fact, GenerateRunId, ReadHistory, RunId, SourceText, SqliteStore,
    };
    let f = TestApp::new();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "review.json", &review());
    let (code, v) = f.json(&[
        "run",
        file.to_str().unwrap(),
        "--input",
        r#"{"text":"one"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let cp = f.checkpoint(&run, "review");
    // The fork's Start as `flow fork --checkpoint` records it, and nothing
    // after it: what a kill between the two commits leaves.
    let fork = {
        let store = SqliteStore::open(f.data.path().join("flow.db"), Default::default()).unwrap();
        let parent = RunId::parse(&run).unwrap();
        let h = store.read_history(&parent).unwrap();
        let Fact::Start {
            data,
            entry,
            program,
            sources,
            ..
        } = store.expand_fact(&parent, &h.facts[0]).unwrap()
        else {
            panic!("fact 1 is a Start");
        };
        let texts: Vec<SourceText> = sources
            .iter()
            .map(|s| SourceText {
                module: s.module.clone(),
                text: String::from_utf8(store.blob(&s.hash).unwrap()).unwrap(),
            })
            .collect();
        let id = RunId::generate();
        let start = Fact::Start {
            n: 1,
            run: id.clone(),
            data,
            entry,
            program,
            sources,
            input: store.checkpoint_state(&parent, cp).unwrap(),
            parent: Some(flow_abi::fact::Parent {
                run: parent,
                checkpoint: cp,
            }),
            outer: None,
        };
        store.create_run(start, &texts, Vec::new()).unwrap();
        id.to_string()
    };
    let (code, v) = f.json(&["resume", &fork]);
    assert_eq!(code, 3, "paused at the review again: {v}");
    assert_eq!(v["pending"][0]["call"], "c1:root#1", "{v}");
    let out = f.approve(&fork);
    assert_eq!(out["state"], "completed", "{out}");
    let (_, start) = f.json(&["history", &fork, "--fact", "2"]);
    assert_eq!(start["fact"], "Checkpoint", "{start}");
    assert_eq!(start["node"], "review", "{start}");
}
