//! Discovery tells the record as the facts hold it, not as an index or a
//! torn file suggests (issue 41 item 3), through the real `flow` binary on
//! histories a real run wrote, then damaged:
//!
//! - DISC-13: `flow runs` over the SQLite store reads each listed run's
//!   Start and the head fact it reports and checks them against their
//!   recorded hashes: a run whose End (or Start) no longer matches its hash
//!   is `unreadable`, never `complete`.
//! - GAP-HIST-9, DISC-16: over archive directories (`flow runs --runs`), a
//!   torn tail needs a valid prefix: a history whose only line is
//!   newline-terminated junk is `unreadable`, not `not-started, truncated`;
//!   a valid prefix followed by a junk line stays `incomplete, truncated`.
//!
//! These stores are damaged on purpose, so the tests use plain temporary
//! directories, not `TestApp` (which verifies every run it leaves).

mod common;
#[path = "fixtures/fixtures.rs"]
mod fixtures;

use common::flow;
use serde_json::Value as Json;
use std::path::Path;

fn note_flow() -> String {
    fixtures::repo()
        .join("tests/fixtures/flows/typed/note.json")
        .to_string_lossy()
        .into_owned()
}

/// `flow --data DATA --json ARGS`: exit code and JSON.
fn json(data: &Path, args: &[&str]) -> (i32, Json) {
    let out = flow()
        .arg("--data")
        .arg(data)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{args:?}: {e}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// `flow --data DATA ARGS`: the text printed.
fn text(data: &Path, args: &[&str]) -> String {
    let out = flow().arg("--data").arg(data).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run of note.json, paused at its hitl; with `reply`, answered to
/// completion.
fn note_run(data: &Path, reply: Option<&str>) -> String {
    let (code, v) = json(
        data,
        &["run", &note_flow(), "--input", r#"{"topic":"owls"}"#],
    );
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    if let Some(r) = reply {
        let (code, v) = json(data, &["resume", &run, "--call", "c1:root#1", "--reply", r]);
        assert_eq!(code, 0, "{v}");
    }
    run
}

fn row<'a>(page: &'a Json, run: &str) -> &'a Json {
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == run)
        .unwrap_or_else(|| panic!("no {run}: {page}"))
}

/// Rewrites fact `kind` of `run` in the SQLite store, as a damaged disk or
/// a hand edit would: the body changes, its recorded hash does not.
fn damage(db: &Path, run: &str, kind: &str, from: &str, to: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    let n = c
        .execute(
            "UPDATE facts SET body = replace(body, ?1, ?2)
             WHERE kind = ?3 AND run_key = (SELECT key FROM runs WHERE id = ?4)",
            rusqlite::params![from, to, kind, run],
        )
        .unwrap();
    assert_eq!(n, 1, "{run} {kind}");
}

#[test]
fn flow_runs_checks_start_and_the_head_fact_against_their_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let good = note_run(data, Some(r#"{"Ok":"hoot"}"#));
    let bad_end = note_run(data, Some(r#"{"Ok":"hoot"}"#));
    let bad_start = note_run(data, Some(r#"{"Ok":"hoot"}"#));
    let paused = note_run(data, None);
    let (_, before) = json(data, &["runs"]);
    for r in [&good, &bad_end, &bad_start] {
        assert_eq!(row(&before, r)["record"], "complete", "{before}");
    }
    let db = data.join("flow.db");
    damage(&db, &bad_end, "End", "hoot", "HOOT");
    damage(&db, &bad_start, "Start", "owls", "OWLS");

    let (code, page) = json(data, &["runs"]);
    assert_eq!(code, 0, "{page}");
    let g = row(&page, &good);
    assert_eq!(
        (g["record"].as_str(), g["ending"].as_str()),
        (Some("complete"), Some("completed")),
        "{g}"
    );
    assert_eq!(g["lastFact"]["n"], 7, "{g}");
    assert_eq!(row(&page, &paused)["record"], "incomplete", "{page}");
    // The End no longer matches its hash: unreadable, naming the fact, and
    // nothing read from it is reported.
    let e = row(&page, &bad_end);
    assert_eq!(e["record"], "unreadable", "{e}");
    assert_eq!(e["ending"], Json::Null, "{e}");
    assert_eq!(e["lastFact"], Json::Null, "{e}");
    assert_eq!(e["entry"]["module"], "note.json", "Start verified: {e}");
    let why = e["problem"]["detail"].as_str().unwrap();
    assert!(why.contains("at fact 7") && why.contains("hash"), "{why}");
    assert_eq!(e["problem"]["status"], "unreadable", "{e}");
    // The Start no longer matches: unreadable, without its entry either.
    let s = row(&page, &bad_start);
    assert_eq!(s["record"], "unreadable", "{s}");
    assert_eq!((&s["entry"], &s["program"]), (&Json::Null, &Json::Null));
    assert!(
        s["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("at fact 1"),
        "{s}"
    );
    // The text view says so too.
    let t = text(data, &["runs"]);
    let line = |run: &str| t.lines().find(|l| l.starts_with(run)).unwrap().to_string();
    assert!(line(&good).contains("(complete)"), "{t}");
    assert!(line(&bad_end).contains("(unreadable)"), "{t}");
    assert!(line(&bad_start).contains("(unreadable)"), "{t}");
    // And `--state completed`, answered from the index, still checks.
    let (_, done) = json(data, &["runs", "--state", "completed"]);
    assert_eq!(row(&done, &bad_end)["record"], "unreadable", "{done}");
}

#[test]
fn a_history_whose_only_line_is_junk_is_unreadable_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root = dir.path().join("archives");
    let runs: Vec<String> = (0..4).map(|_| note_run(&data, None)).collect();
    for r in &runs {
        let out = root.join(r);
        let (code, v) = json(&data, &["export", r, "--out", out.to_str().unwrap()]);
        assert_eq!(code, 0, "{v}");
    }
    let history = |r: &str| root.join(r).join("history.jsonl");
    let lines = std::fs::read_to_string(history(&runs[0])).unwrap();
    assert!(lines.lines().count() >= 3, "{lines}");
    // 1: the only line is newline-terminated junk.
    std::fs::write(history(&runs[1]), "junk\n").unwrap();
    // 2: a valid prefix, then a newline-terminated junk line: a torn tail.
    let own = std::fs::read_to_string(history(&runs[2])).unwrap();
    let prefix: String = own.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(history(&runs[2]), format!("{prefix}junk\n")).unwrap();
    // 3: the only line is junk with no newline: an unfinished tail, no Start.
    std::fs::write(history(&runs[3]), "junk").unwrap();

    let (code, page) = json(&data, &["runs", "--runs", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{page}");
    let rec = |r: &str| {
        let x = row(&page, r);
        (
            x["record"].as_str().unwrap().to_string(),
            x["truncated"].as_bool().unwrap(),
        )
    };
    assert_eq!(rec(&runs[0]), ("incomplete".into(), false), "{page}");
    assert_eq!(rec(&runs[1]), ("unreadable".into(), false), "{page}");
    let junk = row(&page, &runs[1]);
    assert_eq!(junk["problem"]["component"], "history.jsonl", "{junk}");
    assert!(
        junk["problem"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("fact 1:"),
        "{junk}"
    );
    assert_eq!(rec(&runs[2]), ("incomplete".into(), true), "{page}");
    assert_eq!(row(&page, &runs[2])["lastFact"]["n"], 2, "{page}");
    assert_eq!(rec(&runs[3]), ("not-started".into(), true), "{page}");
    let t = text(&data, &["runs", "--runs", root.to_str().unwrap()]);
    let line = t.lines().find(|l| l.starts_with(&runs[1])).unwrap();
    assert!(
        line.contains("(unreadable)") && !line.contains("truncated"),
        "{t}"
    );
}
