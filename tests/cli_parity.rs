//! Issue 11, items 6 and 8, through the real `flow` binary: `flow check`
//! prints each diagnostic's JSON Pointer, `--json` refusals carry the
//! structured diagnostics (GAP-DIAG-1), and a harness flow (FS-HN,
//! GAP-HARN-1) and a `prompt_ref` flow (FS-LLM-5, GAP-LLM-2) run end to end
//! with the reference Tools of `examples/` and replay `matched`.

mod common;

use common::{TestApp, flow};

#[path = "fixtures/fixtures.rs"]
mod fixtures;

use serde_json::{Value as Json, json};
use std::path::Path;

/// A flow with two errors: an llm_call with no prompt (FS0102 at
/// `/nodes/1`) and an edge to no node (FS0205 at `/edges/1/to`).
fn bad_flow(dir: &Path) -> std::path::PathBuf {
    let doc = json!({
        "spec_version": "1.0.0", "id": "bad-flow",
        "nodes": [
            {"id": "start", "type": "input"},
            {"id": "ask", "type": "llm_call", "output_key": "answer"},
            {"id": "done", "type": "output"}
        ],
        "edges": [
            {"type": "direct", "from": "start", "to": "ask"},
            {"type": "direct", "from": "ask", "to": "nowhere"},
            {"type": "direct", "from": "ask", "to": "done"}
        ]
    });
    let p = dir.join("bad.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    p
}

/// The diagnostics of a `--json` refusal hold these two, located.
fn assert_located(v: &Json) {
    let ds = v["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics: {v}"));
    for (code, pointer) in [("FS0102", "/nodes/1"), ("FS0205", "/edges/1/to")] {
        assert!(
            ds.iter().any(|d| d["code"] == code
                && d["location"]["pointer"] == pointer
                && d["location"]["module"] == "bad.json"
                && d["severity"] == "error"
                && d["message"].is_string()),
            "{code} at {pointer}: {v}"
        );
    }
}

/// GAP-DIAG-1: `{severity, code, message, location: {module, pointer}}`.
#[test]
fn check_prints_locations_and_json_refusals_carry_diagnostics() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = bad_flow(tmp.path());
    let bad = bad.to_str().unwrap();
    let f = TestApp::new();
    // Human output: `severity[CODE] module#pointer: message`.
    let out = f.cmd(&["check", bad]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("error[FS0102] bad.json#/nodes/1: ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("error[FS0205] bad.json#/edges/1/to: ")),
        "{text}"
    );
    assert!(!text.contains("bad.json#:"), "no empty location: {text}");
    // `flow check --json`, and the refusal of run.
    let (code, v) = f.json(&["check", bad]);
    assert_eq!(code, 2);
    assert_located(&v);
    let (code, v) = f.json(&["run", bad, "--input", "{}"]);
    assert_eq!(code, 2, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("the program does not check"),
        "{v}"
    );
    assert_located(&v);
    // fork onto a program that does not check.
    let review = fixtures::repo().join("examples/flows/review/review.json");
    let (code, v) = f.json(&[
        "run",
        review.to_str().unwrap(),
        "--input",
        r#"{"text":"hi"}"#,
    ]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap();
    let (code, v) = f.json(&["fork", run, "--checkpoint", "2", "--flow", bad]);
    assert_eq!(code, 2, "{v}");
    assert_located(&v);
    assert_eq!(f.runs(), 1, "nothing recorded");
    // The same refusal from a server keeps its diagnostics.
    let served = tempfile::tempdir().unwrap();
    let (mut server, base) = common::serve_with(served.path(), None, &[]);
    let out = flow()
        .arg("--data")
        .arg(f.data.path())
        .args(["--server", &base, "--json", "run", bad, "--input", "{}"])
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_located(&v);
}

/// The checked-in declaration documents of the reference Tools are what
/// `flow tools` prints today (a stale one would refuse every run).
#[test]
fn reference_tool_documents_are_current() {
    let f = TestApp::new();
    for (flow_file, doc) in [
        (
            "examples/tools/harness/tour.json",
            "examples/tools/harness/tools.json",
        ),
        (
            "examples/flows/harness/harness.json",
            "examples/flows/harness/tools.json",
        ),
        (
            "examples/flows/prompts/summary.json",
            "examples/flows/prompts/tools.json",
        ),
    ] {
        let out = f.cmd(&["tools", fixtures::repo().join(flow_file).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{flow_file}");
        let printed: Json = serde_json::from_slice(&out.stdout).unwrap();
        let kept: Json =
            serde_json::from_str(&std::fs::read_to_string(fixtures::repo().join(doc)).unwrap())
                .unwrap();
        assert_eq!(
            printed, kept,
            "{doc} is stale: flow tools {flow_file} > {doc}"
        );
    }
}

/// `flow run … --allow` of `file` with `input`; the run id and its output.
fn run_allowed(f: &TestApp, file: &Path, input: &str) -> (String, Json) {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_flow")).parent().unwrap();
    let out = flow()
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .arg("--data")
        .arg(f.data.path())
        .args(["--json", "run"])
        .arg(file)
        .args(["--allow", "--input", input])
        .output()
        .unwrap();
    let v: Json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    (v["run"].as_str().unwrap().to_string(), v["output"].clone())
}

/// The Calls of a run, as (node, tool).
fn calls(f: &TestApp, run: &str) -> Vec<(String, String)> {
    let (code, v) = f.json(&["history", run, "--kind", "Call"]);
    assert_eq!(code, 0, "{v}");
    v["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["fact"]["node"].as_str().unwrap().to_string(),
                c["fact"]["tool"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// FS-HN, GAP-HARN-1: every harness node is a Call to the reference
/// harness bound in flow.toml (`[tools."std/harness"]`); gather_evidence
/// calls its source tool and the reply becomes evidence in state.
#[test]
fn harness_flows_run_end_to_end_with_the_reference_harness() {
    let f = TestApp::new();
    let (run, out) = run_allowed(
        &f,
        &fixtures::repo().join("examples/flows/harness/harness.json"),
        r#"{"question":"Is rust fast?"}"#,
    );
    assert_eq!(
        out["evidence"],
        json!([{"evidence_type": "OBSERVATION", "node": "gather", "reliability": "HIGH",
            "source_tool": "lookup", "value": {"facts": ["Rust has no garbage collector."]}}]),
        "{out}"
    );
    assert_eq!(
        out["world_model"],
        json!({"beliefs": [{"facts": ["Rust has no garbage collector."]}]})
    );
    assert_eq!(out["verification"]["passed"], true, "{out}");
    assert_eq!(
        calls(&f, &run),
        [
            ("show", "std/harness#world_model"),
            ("gather", "harness.json#lookup"),
            ("integrate", "std/harness#update_world_model"),
            ("verify", "std/harness#verification_gate"),
            ("review", "std/harness#reviewer_pass"),
        ]
        .map(|(n, t)| (n.to_string(), t.to_string()))
    );
    f.assert_matched(&run);
    // All 13 harness types in a row; display nodes pass the state through.
    let (run, out) = run_allowed(
        &f,
        &fixtures::repo().join("examples/tools/harness/tour.json"),
        r#"{"goal":"fix the test"}"#,
    );
    assert_eq!(calls(&f, &run).len(), 13);
    assert_eq!(out["goal"], "fix the test");
    assert_eq!(out["recovery"], json!({"strategy": "MINIMAL_FIX"}));
    assert_eq!(out["process_concept"], "debug_test_failure");
    assert_eq!(
        out["verification"]["passed"], false,
        "evidence_sufficiency with no evidence: {out}"
    );
    f.assert_matched(&run);
}

/// FS-LLM-5, GAP-LLM-2: `prompt_ref` is a Call to `std/prompts#get` whose
/// Text reply is the template; the model (flow-llm offline, which echoes
/// its prompt) gets it rendered; replay reads the recorded reply.
#[test]
fn a_prompt_ref_flow_runs_end_to_end_and_replays() {
    let f = TestApp::new();
    let (run, out) = run_allowed(
        &f,
        &fixtures::repo().join("examples/flows/prompts/summary.json"),
        r#"{"topic":"rust"}"#,
    );
    assert_eq!(
        out,
        json!({"summary": "Summarise rust in one sentence for a newcomer."})
    );
    assert_eq!(
        calls(&f, &run),
        [
            ("summarise", "std/prompts#get"),
            ("summarise", "std/llm#chat")
        ]
        .map(|(n, t)| (n.to_string(), t.to_string()))
    );
    let (code, v) = f.json(&["history", &run, "--kind", "Call"]);
    assert_eq!(code, 0);
    assert_eq!(
        v["facts"][0]["fact"]["args"],
        json!({"label": "production", "name": "summary"})
    );
    f.assert_matched(&run);
}

/// CLI-21, CLI-25 (issue 41 §4): `flow tools` prints its document for a
/// program that does not check — the module with its declarations and
/// its diagnostics in `programs[].diagnostics`, located — and exits 2;
/// with and without `--json` alike.
#[test]
fn tools_prints_the_document_with_diagnostics_for_a_program_that_does_not_check() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = bad_flow(tmp.path());
    let bad = bad.to_str().unwrap();
    let f = TestApp::new();
    for json in [true, false] {
        let out = if json {
            f.cmd(&["--json", "tools", bad])
        } else {
            f.cmd(&["tools", bad])
        };
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let doc: Json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no document ({e}): {out:?}"));
        assert_eq!(
            doc["data"].as_str().map(|d| !d.is_empty()),
            Some(true),
            "{doc}"
        );
        let programs = doc["programs"].as_array().unwrap();
        assert_eq!(programs.len(), 1, "{doc}");
        let p = &programs[0];
        assert_eq!(p["root"], "bad.json");
        // The llm_call with no prompt is still a declaration of std/llm.
        assert!(
            p["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tool"] == "std/llm#chat" && t["fingerprint"].is_string()),
            "{doc}"
        );
        assert!(p["types"].is_object(), "{doc}");
        for (code, pointer) in [("FS0102", "/nodes/1"), ("FS0205", "/edges/1/to")] {
            assert!(
                p["diagnostics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| d["code"] == code
                        && d["location"]["pointer"] == pointer
                        && d["severity"] == "error"),
                "{code} at {pointer}: {doc}"
            );
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not check"), "{err}");
    }
    // A module that is not JSON is a program of its one diagnostic.
    let broken = tmp.path().join("broken.json");
    std::fs::write(&broken, "{ not json").unwrap();
    let out = f.cmd(&["tools", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let doc: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["programs"][0]["root"], "broken.json", "{doc}");
    assert_eq!(
        doc["programs"][0]["diagnostics"][0]["code"], "FS0000",
        "{doc}"
    );
    // A program that checks: exit 0, no diagnostics of errors.
    let review = fixtures::repo().join("examples/flows/review/review.json");
    let out = f.cmd(&["tools", review.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
