//! `flow history` as the seed describes it, from the real `flow` binary:
//! the re-run's verdict (HIST-1), rounds (HIST-2), the footer (HIST-4),
//! `--summary` (HIST-5), the pending-call view (HIST-9) and the Tool list
//! (CLI-20), the same data in `--json` (CLI-26).

#[path = "fixtures/fixtures.rs"]
mod fixtures;

use serde_json::Value as Json;
use std::process::Output;

mod common;

use common::TestApp;

impl TestApp {
    /// `flow ARGS`, which must exit 0 or 3 (paused).
    fn ok(&self, args: &[&str]) -> Output {
        let out = self.cmd(args);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn text(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.ok(args).stdout).to_string()
    }

    /// `flow --json ARGS`, which must exit 0 or 3.
    fn ok_json(&self, args: &[&str]) -> Json {
        let (code, v) = self.json(args);
        assert!(matches!(code, 0 | 3), "{args:?}: {v}");
        v
    }
}

#[test]
fn history_shows_pending_calls_rounds_tools_and_what_it_hides() {
    let f = TestApp::new();
    let review = fixtures::repo()
        .join("examples/flows/review/review.json")
        .display()
        .to_string();
    let v = f.ok_json(&["run", &review, "--input", r#"{"text":"one"}"#]);
    let run = v["run"].as_str().unwrap().to_string();

    let v = f.ok_json(&["history", &run]);
    // HIST-1: re-run as replay does.
    assert_eq!(v["verdict"]["verdict"], "incomplete", "{v}");
    // HIST-9: the pending calls from the re-run's state.
    assert_eq!(v["pending"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["pending"][0]["call"], "c1:root#1");
    assert_eq!(v["pending"][0]["node"], "review");
    // HIST-2: each round with its fact number, node and state.
    let rounds: Vec<(&str, u64)> = v["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["node"].as_str().unwrap(), r["fact"].as_u64().unwrap()))
        .collect();
    assert_eq!(rounds, [("start", 2), ("draft", 3), ("review", 4)], "{v}");
    assert_eq!(v["rounds"][2]["state"]["draft"], "one", "{v}");
    // CLI-20: the Tool list of the recorded entry.
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{v}");
    assert_eq!(tools[0]["tool"], "std/human#input");
    assert!(
        tools[0]["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(
        (v["record"].as_str(), v["state"].as_str()),
        (Some("incomplete"), Some("paused"))
    );

    // HIST-4: the footer says how many facts the selection hides.
    let text = f.text(&["history", &run, "--kind", "Call"]);
    assert!(
        text.contains("1 of 5 facts shown; the selection hides 4"),
        "{text}"
    );
    assert!(
        text.contains("c1:root#1  std/human#input  at node review"),
        "{text}"
    );
    assert!(text.contains("fact    3  task root  at draft"), "{text}");
    // HIST-5: --summary is the state, the pending calls and what to run next.
    let text = f.text(&["history", &run, "--summary"]);
    assert!(
        text.contains("pending calls:") && text.contains("next:"),
        "{text}"
    );
    assert!(
        !text.contains("facts:") && !text.contains("rounds"),
        "{text}"
    );
    assert!(text.contains(&format!(" resume {run} --call")), "{text}");

    // Ended: nothing pending, the re-run matches.
    f.ok(&[
        "resume",
        &run,
        "--call",
        "c1:root#1",
        "--reply",
        r#"{"Ok":{"decision":"approved"}}"#,
    ]);
    let v = f.ok_json(&["history", &run]);
    assert_eq!(v["verdict"]["verdict"], "matched", "{v}");
    assert_eq!(v["pending"], serde_json::json!([]), "{v}");
    let text = f.text(&["history", &run, "--summary"]);
    assert!(text.contains("completed  (complete)"), "{text}");
    assert!(
        text.contains(&format!(" fork {run} --checkpoint ")),
        "{text}"
    );
}
