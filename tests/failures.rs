//! Failures pinpointed (issue 38 §4): when a Tool process ends before
//! answering describe, the refusal carries the end of what it wrote to
//! stderr (a Python traceback at startup, say), through `flow run` and
//! through the HTTP API; a process serving a stale Tool document is
//! refused with the command that regenerates it.
//!
//! Real parts: the `flow` binary, a real `flow serve`, real Python Tool
//! processes (copies of the triage quickstart's).

mod common;

use serde_json::json;
use std::path::{Path, PathBuf};

fn triage_copy(dir: &Path) -> PathBuf {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage");
    for f in ["triage.json", "triage_tools.py", "tools.json", "flow.toml"] {
        std::fs::copy(example.join(f), dir.join(f)).unwrap();
    }
    dir.join("triage.json")
}

/// The copy's classifier starts with a program that dies at import.
fn crashing_classifier(dir: &Path) {
    std::fs::write(
        dir.join("broken.py"),
        "import sys\nprint('loading the classifier model', file=sys.stderr)\n\
         raise RuntimeError('the model file models/classify.bin is missing')\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("flow.toml"),
        "[tools.\"triage.json\"]\ncommand = \"python3 broken.py\"\n\n\
         [tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
    )
    .unwrap();
}

#[test]
fn flow_run_shows_the_stderr_of_a_tool_that_dies_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let flow = triage_copy(dir.path());
    crashing_classifier(dir.path());
    let app = common::TestApp::new();
    let out = app.cmd(&[
        "run",
        "--allow",
        flow.to_str().unwrap(),
        "--input",
        r#"{"ticket": "The site is down", "customer": "Ada"}"#,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ended before answering describe; the end of its stderr:"),
        "{err}"
    );
    assert!(err.contains("loading the classifier model"), "{err}");
    assert!(
        err.contains("RuntimeError: the model file models/classify.bin is missing"),
        "{err}"
    );
    assert_eq!(app.runs(), 0, "nothing was recorded");
}

#[tokio::test]
async fn an_http_start_is_refused_with_the_tools_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let flow = triage_copy(dir.path());
    crashing_classifier(dir.path());
    let data = tempfile::tempdir().unwrap();
    let s = common::serve_bound(data.path(), Some(&dir.path().join("flow.toml")), &[]);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(flow).unwrap()).unwrap();
    let (status, v) = common::post_json(
        &c,
        format!("{}/v1/runs", s.base),
        &json!({"flow": doc, "name": "triage.json", "input": {"ticket": "refund", "customer": "Bo"}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let detail = v["diagnostics"][0]["message"].as_str().unwrap_or_default();
    assert!(
        detail.contains("RuntimeError: the model file models/classify.bin is missing"),
        "{v}"
    );
    let runs = common::get_json(&c, format!("{}/v1/runs", s.base)).await;
    assert_eq!(runs["runs"], json!([]), "nothing was recorded: {runs}");
}

#[test]
fn a_stale_tool_document_is_refused_with_the_command_that_regenerates_it() {
    let dir = tempfile::tempdir().unwrap();
    let flow = triage_copy(dir.path());
    // The flow changed after its Tool document was written: the classifier
    // now declares one more field, so the fingerprints differ.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&flow).unwrap()).unwrap();
    let props = doc["tools"]["classify"]["output_schema"]["properties"]
        .as_object_mut()
        .expect("the classifier's output properties");
    props.insert("confidence".into(), json!({"type": "number"}));
    std::fs::write(&flow, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    // The copy finds the repository's Python toolkit on PYTHONPATH.
    let toolkit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../toolkits/python");
    let data = tempfile::tempdir().unwrap();
    let out = common::flow()
        .env("PYTHONPATH", toolkit)
        .arg("--data")
        .arg(data.path())
        .args(["run", "--allow"])
        .arg(&flow)
        .args([
            "--input",
            r#"{"ticket": "The site is down", "customer": "Ada"}"#,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("regenerate the document the Tool serves from, in the flow's directory: `flow --json tools triage.json > tools.json`"),
        "{err}"
    );
}
