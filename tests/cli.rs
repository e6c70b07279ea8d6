//! End-to-end tests of the real `flow` binary on real SQLite stores in
//! temporary directories: run, pause, resume, replay, fork, history, runs,
//! check, tools, export and import, with the exit codes of DESIGN §6.

mod common;

use common::{TestApp, flow};
#[path = "fixtures/fixtures.rs"]
mod fixtures;
#[path = "fixtures/refused.rs"]
mod refused;

use serde_json::{Value as Json, json};
use std::process::Command;

fn review_flow() -> String {
    fixtures::repo()
        .join("examples/flows/review/review.json")
        .display()
        .to_string()
}

/// DESIGN §6 exit codes: 3 paused, 0 completed success, 4 other exit code,
/// 2 refused; a refused resume records nothing (DESIGN §4).
#[test]
fn run_pause_resume_replay() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &review_flow(), "--input", r#"{"text":"hello"}"#]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["state"], "paused");
    let run = v["run"].as_str().unwrap().to_string();
    assert_eq!(v["pending"][0]["call"], "c1:root#1");
    assert_eq!(v["pending"][0]["tool"], "std/human#input");
    let before = f.facts(&run);

    // A reply that does not fit the resume_schema is refused, nothing recorded.
    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"maybe"}}"#,
    ]);
    assert_eq!(code, 2, "{v}");
    assert!(v["error"].as_str().unwrap().contains("$.decision"), "{v}");
    assert_eq!(f.facts(&run), before);
    // Malformed JSON, an unknown call, and a BadReply outcome: refused too.
    for (call, reply) in [
        ("c1:root#1", "{not json"),
        ("c1:root#9", r#"{"Ok":{"decision":"approved"}}"#),
        ("c1:root#1", r#"{"BadReply":"x"}"#),
    ] {
        let (code, v) = f.json(&["resume", &run, "--call", call, "--reply", reply]);
        assert_eq!(code, 2, "{call} {reply}: {v}");
        assert_eq!(f.facts(&run), before);
    }
    // A paused run replays incomplete (exit 1).
    let (code, v) = f.json(&["replay", &run]);
    assert_eq!((code, v["verdict"].as_str()), (1, Some("incomplete")));

    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved","notes":"LGTM"}}"#,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["output"],
        json!({"draft": "hello", "log": ["hello"], "review": {"decision": "approved", "notes": "LGTM"}, "text": "hello"})
    );
    f.assert_matched(&run);
    // A reply to a closed call is refused.
    let (code, _) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 2);

    // Discovery lists it, complete and completed.
    let (code, v) = f.json(&["runs"]);
    assert_eq!(code, 0);
    let row = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == run.as_str())
        .unwrap();
    assert_eq!(row["record"], "complete", "{row}");
    assert_eq!(row["ending"], "completed", "{row}");
}

#[test]
fn rejected_review_completes_with_its_exit_code() {
    let f = TestApp::new();
    let (_, v) = f.json(&["run", &review_flow(), "--input", r#"{"text":"x"}"#]);
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"rejected"}}"#,
    ]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["exit"], "returned");
}

#[test]
fn refusals_record_nothing() {
    let f = TestApp::new();
    for input in [r#"{"text":1}"#, r#"{"text":"x","extra":1}"#, "{", "[]"] {
        let (code, v) = f.json(&["run", &review_flow(), "--input", input]);
        assert_eq!(code, 2, "{input}: {v}");
    }
    let (code, v) = f.json(&["runs"]);
    assert_eq!(code, 0);
    assert_eq!(v["runs"], json!([]), "nothing was recorded");
    // Unknown runs and malformed ids.
    let out = f.cmd(&["replay", "run-0000000000000000000000000a"]);
    assert_eq!(out.status.code(), Some(2));
    let out = f.cmd(&["history", "not-a-run"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn fork_from_a_checkpoint_with_a_field_replaced() {
    let f = TestApp::new();
    let (_, v) = f.json(&["run", &review_flow(), "--input", r#"{"text":"one"}"#]);
    let run = v["run"].as_str().unwrap().to_string();
    // Fact 3 is the Checkpoint at node draft.
    let (code, v) = f.json(&["fork", &run, "--checkpoint", "3", "--set", r#"text="two""#]);
    assert_eq!(code, 3, "{v}");
    let forked = v["run"].as_str().unwrap().to_string();
    assert_ne!(forked, run);
    let (code, v) = f.json(&[
        "resume",
        &forked,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"]["draft"], "two");
    f.assert_matched(&forked);
    // Refused: a field that does not decode, an unknown field, no such
    // checkpoint.
    for args in [
        vec!["fork", &run, "--checkpoint", "3", "--set", "text=5"],
        vec!["fork", &run, "--checkpoint", "3", "--set", "nope=1"],
        vec!["fork", &run, "--checkpoint", "99"],
        vec!["fork", &run, "--checkpoint", "1"],
    ] {
        let (code, v) = f.json(&args);
        assert_eq!(code, 2, "{args:?}: {v}");
    }
}

#[test]
fn export_import_round_trip() {
    let f = TestApp::new();
    let (_, v) = f.json(&["run", &review_flow(), "--input", r#"{"text":"x"}"#]);
    let run = v["run"].as_str().unwrap().to_string();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join(&run);
    let (code, v) = f.json(&["export", &run, "--out", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let other = TestApp::new();
    let (code, v) = other.json(&["import", dir.to_str().unwrap()]);
    assert_eq!((code, v["imported"].as_bool()), (0, Some(true)), "{v}");
    let (code, v) = other.json(&["import", dir.to_str().unwrap()]);
    assert_eq!(
        (code, v["imported"].as_bool()),
        (0, Some(false)),
        "idempotent: {v}"
    );
    // The imported run resumes and replays in the other store.
    let (code, v) = other.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 0, "{v}");
    // Discovery over the archive directory.
    let (code, v) = f.json(&["runs", "--runs", out.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["runs"][0]["run"], run.as_str());
    // A tampered archive is refused.
    let hist = dir.join("history.jsonl");
    let text = std::fs::read_to_string(&hist)
        .unwrap()
        .replace("\"x\"", "\"y\"");
    std::fs::write(&hist, text).unwrap();
    let third = TestApp::new();
    let (code, _) = third.json(&["import", dir.to_str().unwrap()]);
    assert_eq!(code, 2);
}

/// `flow check` and `flow tools` on every FlowSpec file of `dir`: no error,
/// and a tools document whose every fingerprint is a SHA-256. Returns how
/// many files there were.
fn check_and_tools(
    f: &TestApp,
    dir: &std::path::Path,
    files: std::collections::BTreeMap<String, serde_json::Value>,
) -> usize {
    let mut n = 0;
    for name in files.keys() {
        let p = dir.join(name);
        n += 1;
        let (code, v) = f.json(&["check", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {v}");
        assert_eq!(v["errors"], 0);
        let out = f.cmd(&["tools", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{name}");
        let doc: Json = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["data"], "1.0");
        for t in doc["programs"][0]["tools"].as_array().unwrap() {
            assert!(t["fingerprint"].as_str().unwrap().starts_with("sha256:"));
        }
    }
    n
}

#[test]
#[ignore = "shared conformance: run by .ci/run when ../shared exists"]
fn shared_corpus_check_and_tools() {
    let Some(dir) = fixtures::shared("flowspec-corpus") else {
        return;
    };
    let files = refused::without_refused(fixtures::flowspec_files(&dir));
    assert_eq!(check_and_tools(&TestApp::new(), &dir, files), 10);
}

#[test]
fn check_and_tools_on_the_corpus() {
    let f = TestApp::new();
    let dir = fixtures::flowspec_corpus();
    assert!(check_and_tools(&f, &dir, fixtures::flowspec_files(&dir)) >= 10);
    // A broken flow: exit 2 with a located diagnostic.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"spec_version":"1.0.0","id":"bad-flow","nodes":[{"id":"a","type":"input"}],"edges":[]}"#).unwrap();
    let (code, v) = f.json(&["check", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert!(
        v["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["code"] == "FS0203"),
        "{v}"
    );
}

/// `flow test`: fixtures against fakes, saved histories against the
/// current program; exit 0 / 1 / 2 as running-a-program.txt "Testing" says.
#[test]
fn flow_test_fixtures_and_histories() {
    let f = TestApp::new();
    let examples = fixtures::repo().join("examples/flows");
    let (code, v) = f.json(&["test", examples.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert!(v["passed"].as_u64().unwrap() >= 4, "{v}");

    // A copy of the review flow with a failing expectation and one with a
    // missing fake.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::copy(
        fixtures::repo().join("examples/flows/review/review.json"),
        dir.join("review.json"),
    )
    .unwrap();
    std::fs::write(
        dir.join("wrong.test.json"),
        r#"{"flow":"review.json","input":{"text":"x"},"fakes":{"std/human#input":{"Ok":{"decision":"rejected"}}},"expect":{"ending":"completed","exit_code":"success"}}"#,
    )
    .unwrap();
    let (code, v) = f.json(&["test", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["tests"][0]["failure"]
            .as_str()
            .unwrap()
            .contains("exit code"),
        "{v}"
    );
    std::fs::write(
        dir.join("unfaked.test.json"),
        r#"{"flow":"review.json","input":{"text":"x"},"fakes":{}}"#,
    )
    .unwrap();
    let (code, v) = f.json(&["test", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    std::fs::remove_file(dir.join("unfaked.test.json")).unwrap();
    std::fs::remove_file(dir.join("wrong.test.json")).unwrap();

    // A saved history beside its program replays matched ...
    let (_, v) = f.json(&[
        "run",
        dir.join("review.json").to_str().unwrap(),
        "--input",
        r#"{"text":"x"}"#,
    ]);
    let run = v["run"].as_str().unwrap().to_string();
    let (code, _) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 0);
    let saved = dir.join("histories").join(&run);
    let (code, _) = f.json(&["export", &run, "--out", saved.to_str().unwrap()]);
    assert_eq!(code, 0);
    let (code, v) = f.json(&["test", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    // ... and fails once the program changes what it does.
    let text = std::fs::read_to_string(dir.join("review.json"))
        .unwrap()
        .replace("Approve this draft?", "Approve?");
    std::fs::write(dir.join("review.json"), text).unwrap();
    let (code, v) = f.json(&["test", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["tests"][0]["failure"]
            .as_str()
            .unwrap()
            .contains("diverged"),
        "{v}"
    );
}

/// A flow whose one hitl has `timeout_seconds` and `on_timeout: skip`.
fn timed_flow(dir: &std::path::Path, seconds: u64) -> std::path::PathBuf {
    let doc = json!({"spec_version":"1.0.0","id":"timed-flow",
      "state_schema":{"type":"object","properties":{"q":{"type":"string"},"a":{"type":"object"}}},
      "nodes":[{"id":"start","type":"input","output_schema":{"q":{"type":"string"}}},
        {"id":"ask","type":"hitl_breakpoint","prompt":"{{state.q}}","output_key":"a","timeout_seconds":seconds,"on_timeout":"skip"},
        {"id":"done","type":"output"}],
      "edges":[{"from":"start","to":"ask"},{"from":"ask","to":"done"}]});
    let file = dir.join("timed.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    file
}

/// A hitl `timeout_seconds` is a durable deadline: it outlives the process
/// that recorded the Call, and the next resume closes the call (`timeout`)
/// and goes on as `on_timeout` says (DESIGN §4).
#[test]
fn hitl_deadline_survives_the_process() {
    let f = TestApp::new();
    let tmp = tempfile::tempdir().unwrap();
    let flow_file = timed_flow(tmp.path(), 0);
    let (code, v) = f.json(&[
        "run",
        flow_file.to_str().unwrap(),
        "--input",
        r#"{"q":"?"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // The deadline passed: a resume with a reply finds the call closed.
    let (code, v) = f.json(&["resume", &run]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"], json!({"q": "?"}));
    let (_, h) = f.json(&["history", &run, "--kind", "Close"]);
    assert_eq!(h["facts"][0]["fact"]["reason"], "timeout", "{h}");
    f.assert_matched(&run);
}

/// Issue 17 (should fix): a `timeout_seconds` far beyond any clock
/// (10^16 s) saturates to "never" instead of overflowing into the past and
/// timing the call out at once.
#[test]
fn a_huge_hitl_timeout_is_never_a_deadline_in_the_past() {
    let f = TestApp::new();
    let tmp = tempfile::tempdir().unwrap();
    let flow_file = timed_flow(tmp.path(), 10_000_000_000_000_000);
    let (code, v) = f.json(&[
        "run",
        flow_file.to_str().unwrap(),
        "--input",
        r#"{"q":"?"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // A resume without a reply finds the call still open: no timeout.
    let (code, v) = f.json(&["resume", &run]);
    assert_eq!(code, 3, "still paused: {v}");
    let (_, h) = f.json(&["history", &run, "--kind", "Close"]);
    assert_eq!(h["facts"], json!([]), "{h}");
}

/// std/memory is served from the store's own database (DESIGN §4): a
/// global store outlives the run, a thread-scoped one is per run.
#[test]
fn memory_nodes_use_the_store() {
    let f = TestApp::new();
    let notes = fixtures::repo().join("examples/flows/notes/notes.json");
    let notes = notes.to_str().unwrap();
    let (code, v) = f.json(&["run", notes, "--input", r#"{"key":"k","note":"first"}"#]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"]["previous"], Json::Null);
    let (code, v) = f.json(&["run", notes, "--input", r#"{"key":"k","note":"second"}"#]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"]["previous"], "first");
    assert_eq!(
        v["output"]["scratch"],
        Json::Null,
        "thread scope is per run"
    );
    let run = v["run"].as_str().unwrap().to_string();
    // The reply is history: replay needs no store lookup.
    f.assert_matched(&run);
}

/// A subgraph is a nested run with its own history, linked both ways: its
/// Start names the outer run and call; the outer run's host records name
/// the nested run (DESIGN §4).
#[test]
fn subgraph_runs_as_a_linked_nested_run() {
    let f = TestApp::new();
    let outer = fixtures::repo().join("examples/flows/subgraph/outer.json");
    let (code, v) = f.json(&[
        "run",
        outer.to_str().unwrap(),
        "--input",
        r#"{"text":"hi"}"#,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"], json!({"shout": "hi", "text": "hi"}));
    let run = v["run"].as_str().unwrap().to_string();
    let (_, runs) = f.json(&["runs"]);
    let rows = runs["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{runs}");
    let nested = rows.iter().find(|r| r["run"] != run.as_str()).unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, start) = f.json(&["history", &nested, "--fact", "1"]);
    assert_eq!(
        start["outer"],
        json!({"run": run, "call": "c1:root#1"}),
        "{start}"
    );
    assert_eq!(start["entry"]["module"], "inner.json");
    let (_, call) = f.json(&["history", &run, "--fact", "4"]);
    assert_eq!(call["tool"], "inner.json#main", "{call}");
    // The outer run's host record names the nested run.
    let store =
        flow_store::SqliteStore::open(f.data.path().join("flow.db"), Default::default()).unwrap();
    let records =
        flow_store::HostRecords::host_records(&store, &flow_store::RunId::parse(&run).unwrap())
            .unwrap();
    assert!(
        records
            .iter()
            .any(|r| matches!(&r.details, flow_store::HostDetails::NestedRun { nested_run, .. } if nested_run.as_str() == nested)),
        "{records:?}"
    );
    for r in [&run, &nested] {
        let (code, v) = f.json(&["replay", r]);
        assert_eq!(
            (code, v["verdict"].as_str()),
            (0, Some("matched")),
            "{r}: {v}"
        );
    }
}

/// Issue 17, item 6: host records are outside the hash chain, so an
/// archive whose `binding` record names another directory imports cleanly
/// — and then must not choose whose commands run. An imported run binds
/// only from the importer's own configuration (`flow resume --tools`);
/// without it the resume is refused, nothing is recorded, and no command
/// of the named directory starts.
#[test]
fn an_imported_run_never_binds_from_a_directory_its_archive_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    let triage = fixtures::repo().join("examples/flows/triage");
    for f in ["triage.json", "flow.toml", "tools.json", "triage_tools.py"] {
        std::fs::copy(triage.join(f), mine.join(f)).unwrap();
    }
    // The directory the tampered archive names: its commands leave a mark.
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(
        theirs.join("flow.toml"),
        "[tools.\"triage.json\"]\ncommand = \"touch PWNED\"\n\n[tools.\"std/llm\"]\ncommand = \"touch PWNED\"\n",
    )
    .unwrap();
    let run_in = |data: &std::path::Path, args: &[&str]| -> (i32, Json) {
        let out = with_tools(flow())
            .arg("--data")
            .arg(data)
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v = serde_json::from_str(text.trim()).unwrap_or(Json::String(format!(
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        )));
        (out.status.code().unwrap_or(-1), v)
    };
    let first = TestApp::new();
    let (code, v) = run_in(
        first.data.path(),
        &[
            "run",
            mine.join("triage.json").to_str().unwrap(),
            "--allow",
            "--input",
            r#"{"ticket":"The site is down!","customer":"Acme"}"#,
        ],
    );
    assert_eq!(code, 3, "paused at the review: {v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let archive = tmp.path().join("archive").join(&run);
    let (code, v) = first.json(&["export", &run, "--out", archive.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let host = archive.join("host.jsonl");
    let text = std::fs::read_to_string(&host).unwrap();
    let recorded = std::fs::canonicalize(&mine).unwrap();
    assert!(text.contains(recorded.to_str().unwrap()), "{text}");
    std::fs::write(
        &host,
        text.replace(recorded.to_str().unwrap(), theirs.to_str().unwrap()),
    )
    .unwrap();

    let other = TestApp::new();
    let (code, v) = other.json(&["import", archive.to_str().unwrap()]);
    assert_eq!(code, 0, "host records are outside the chain: {v}");
    let before = other.facts(&run);
    let reply = r#"{"Ok":{"decision":"send"}}"#;
    let (code, v) = run_in(
        other.data.path(),
        &["resume", &run, "--call", &call, "--reply", reply, "--allow"],
    );
    assert_eq!(code, 2, "refused: {v}");
    assert!(v.to_string().contains("imported from an archive"), "{v}");
    assert!(!theirs.join("PWNED").exists(), "no command of theirs ran");
    assert_eq!(other.facts(&run), before, "nothing recorded");
    // Bound from the importer's own configuration, it goes on.
    let (code, v) = run_in(
        other.data.path(),
        &[
            "resume",
            &run,
            "--call",
            &call,
            "--reply",
            reply,
            "--tools",
            mine.join("flow.toml").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert!(!theirs.join("PWNED").exists());
    other.assert_matched(&run);
}

/// Issue 15, part 4: `flow watch RUN` follows a run live — here the facts
/// another `flow` process appends — and ends when the run ends or pauses,
/// printing the next command; exit codes as `flow run`.
#[test]
fn watch_follows_a_run_until_it_pauses_or_ends() {
    let f = TestApp::new();
    let (code, v) = f.json(&["run", &review_flow(), "--input", r#"{"text":"w"}"#]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // Paused: every fact, then how to answer.
    let out = f.cmd(&["watch", &run]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("Start") && text.contains("std/human#input"),
        "{text}"
    );
    assert!(text.contains(&format!(" resume {run} --call")), "{text}");
    // Ended: the whole history, then the ending; exit code as `flow run`.
    let (code, _) = f.json(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"rejected"}}"#,
    ]);
    assert_eq!(code, 4, "exit_code returned");
    let (code, last) = {
        let out = f.cmd(&["--json", "watch", &run]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let last: Json = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        (out.status.code(), last)
    };
    assert_eq!(
        (code, &last["state"]),
        (Some(4), &json!("completed")),
        "{last}"
    );
    // Live: a watcher started while another process drives the run sees
    // the facts that process appends, and ends at the pause.
    let triage = fixtures::repo().join("examples/flows/triage/triage.json");
    let g = TestApp::new();
    let mut runner = with_tools(flow())
        .env("TRIAGE_DELAY_MS", "1500")
        .arg("--data")
        .arg(g.data.path())
        .args([
            "--json",
            "run",
            triage.to_str().unwrap(),
            "--allow",
            "--input",
        ])
        .arg(r#"{"ticket":"The site is down!","customer":"Acme"}"#)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(g.data.path().with_extension("err")).unwrap())
        .spawn()
        .unwrap();
    // Start is recorded once the Tools are bound (their processes started
    // and described), which takes a while on a loaded machine.
    let mut run = None;
    for _ in 0..600 {
        let (_, v) = g.json(&["runs"]);
        if let Some(r) = v["runs"][0]["run"].as_str() {
            run = Some(r.to_string());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run = run.unwrap_or_else(|| {
        let pid = runner.id();
        panic!(
            "the run started: {:?} {:?} exited {:?} wchan {:?} children {:?} stat {:?}",
            std::fs::read_to_string(g.data.path().with_extension("err")),
            g.json(&["runs"]),
            runner.try_wait(),
            std::fs::read_to_string(format!("/proc/{pid}/wchan")),
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")),
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
        )
    });
    let out = flow()
        .arg("--data")
        .arg(g.data.path())
        .args(["--json", "watch", &run])
        .output()
        .unwrap();
    assert_eq!(runner.wait().unwrap().code(), Some(3));
    assert_eq!(out.status.code(), Some(3));
    let lines: Vec<Json> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["fact"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"Start"), "{lines:?}");
    assert!(
        kinds.contains(&"Reply"),
        "the classifier's reply, appended live: {lines:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["state"], "paused", "{last}");
    assert_eq!(last["pending"][0]["tool"], "std/human#input", "{last}");
}

/// `cmd` able to start the triage example's Tools: flow-llm beside `flow`,
/// the Python toolkit on PYTHONPATH.
fn with_tools(mut cmd: Command) -> Command {
    let bin_dir = std::path::PathBuf::from(env!("CARGO_BIN_EXE_flow"))
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        bin_dir.join("flow-llm").is_file(),
        "flow-llm is built beside flow (cargo build --workspace)"
    );
    cmd.env(
        "PATH",
        format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .env("PYTHONPATH", fixtures::repo().join("toolkits/python"));
    cmd
}

/// Issue 15, part 4 (DESIGN §6 `--server URL`): the same commands, output
/// and exit codes against a running flowd instead of the embedded store.
#[test]
fn the_cli_talks_to_a_server_with_the_same_commands() {
    let served = tempfile::tempdir().unwrap();
    let (mut server, base) = common::serve_with(served.path(), None, &[]);
    let f = TestApp::new();
    let remote = |args: &[&str]| -> (i32, String) {
        let out = flow()
            .arg("--data")
            .arg(f.data.path())
            .args(["--server", &base])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, text) = remote(&[
        "--json",
        "run",
        &review_flow(),
        "--input",
        r#"{"text":"r"}"#,
    ]);
    assert_eq!(code, 3, "{text}");
    let v: Json = serde_json::from_str(text.trim()).unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    assert_eq!(v["pending"][0]["call"], "c1:root#1");
    // `watch` follows the feed: the facts so far, then the pause (exit 3).
    let (code, text) = remote(&["watch", &run]);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("Start") && text.contains("std/human#input") && text.contains("paused"),
        "{text}"
    );
    let (code, text) = remote(&["--json", "runs", "--state", "paused"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&run), "{text}");
    let (code, text) = remote(&["history", &run, "--kind", "Call"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("std/human#input"), "{text}");
    let (code, text) = remote(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("\"text\":\"r\""), "the output: {text}");
    let (code, text) = remote(&["replay", &run]);
    assert_eq!((code, text.trim()), (0, "matched"));
    // Refusals keep their exit codes and the server's explanation.
    let (code, text) = remote(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("ended"), "{text}");
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"spec_version":"1.0.0","id":"x","nodes":[],"edges":[]}"#,
    )
    .unwrap();
    let (code, _) = remote(&["check", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    // An ended run's feed: every fact to End, and the run's exit code.
    let (code, text) = remote(&["watch", &run]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("End"), "{text}");
    // Export over HTTP, import into another server over HTTP, replay there.
    let archive = tmp.path().join("archive");
    let (code, text) = remote(&["export", &run, "--out", archive.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("exported"), "{text}");
    assert!(archive.join("history.jsonl").is_file());
    let other = tempfile::tempdir().unwrap();
    let (mut second, base2) = common::serve_with(other.path(), None, &[]);
    let at_second = |args: &[&str]| {
        let out = flow()
            .arg("--data")
            .arg(f.data.path())
            .args(["--server", &base2])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = at_second(&["import", archive.to_str().unwrap()]);
    assert_eq!((code, text.trim()), (0, format!("imported {run}").as_str()));
    let (code, text) = at_second(&["import", archive.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("already stored"), "{text}");
    let (code, text) = at_second(&["replay", &run]);
    assert_eq!((code, text.trim()), (0, "matched"));
    second.kill().unwrap();
    second.wait().unwrap();
    // Nothing went into the local store.
    let (_, v) = f.json(&["runs"]);
    assert_eq!(v["runs"], json!([]), "{v}");
    server.kill().unwrap();
    server.wait().unwrap();
    let (code, text) = remote(&["runs"]);
    assert_eq!(code, 2);
    assert!(text.contains("cannot reach"), "{text}");
}

/// Module names are printed (`flow check`, `flow history`): a file name
/// with a control or bidirectional-formatting character could rewrite the
/// terminal. `flow check` refuses such a module (exit 2) and names it
/// escaped; `flow run` records nothing (issue 17).
#[test]
fn module_names_with_control_characters_are_refused_at_check() {
    let src = fixtures::repo().join("examples/flows/subgraph");
    for bad in [
        "in\u{1b}[2Jner.json",
        "in\u{7}ner.json",
        "in\u{202e}ner.json",
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(src.join("outer.json"), dir.path().join("outer.json")).unwrap();
        std::fs::copy(src.join("inner.json"), dir.path().join(bad)).unwrap();
        let f = TestApp::new();
        let outer = dir.path().join("outer.json");
        let out = f.cmd(&["check", outer.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let all = [out.stdout, out.stderr].concat();
        assert!(
            !all.iter().any(|b| *b == 0x1b || *b == 0x07)
                && !String::from_utf8_lossy(&all).contains('\u{202e}'),
            "{bad:?}: printed raw: {}",
            String::from_utf8_lossy(&all)
        );
        assert!(
            String::from_utf8_lossy(&all).contains("cannot be a module"),
            "{}",
            String::from_utf8_lossy(&all)
        );
        // The root itself.
        let root = dir.path().join(bad);
        let out = f.cmd(&["check", root.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "root {bad:?}");
        let out = f.cmd(&[
            "run",
            outer.to_str().unwrap(),
            "--input",
            r#"{"text":"hi"}"#,
        ]);
        assert_eq!(out.status.code(), Some(2), "run {bad:?}");
        let (_, runs) = f.json(&["runs"]);
        assert_eq!(runs["runs"], json!([]), "{runs}");
    }
}
