//! The real `flow` binary driving a real Tool process
//! (tools/tests/fixtures/misbehave.py) that answers with replies past the
//! host's limits: each is BadReply for its call, recorded, and handled by
//! the flow (PRO-13); `flow run` never hangs on one.

#[path = "fixtures/fixtures.rs"]
mod fixtures;

use serde_json::{Value as Json, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A FlowSpec whose node `call` is answered by misbehave.py (flow.toml),
/// which answers by the call's `text` (or `prompt`) argument. Without
/// `llm` it is a tool_invoke of the local tool `echo` (`{text}` → `{y}`);
/// with `llm` an llm_call whose failure routes to node `failed` by its
/// fail_branch.
fn program(dir: &Path, llm: bool) -> std::path::PathBuf {
    let call = if llm {
        json!({"id": "call", "type": "llm_call", "prompt_template": "{{state.text}}",
            "output_key": "out", "fail_branch": {"target": "failed"}})
    } else {
        json!({"id": "call", "type": "tool_invoke", "tool_id": "echo",
            "input_map": {"text": "$.state.text"}, "output_map": {"y": "out"}})
    };
    let doc = json!({
        "spec_version": "1.0.0", "id": "echo", "name": "Echo",
        "state_schema": {"type": "object", "properties": {
            "text": {"type": "string"}, "out": {"type": "string"}}, "required": ["text"]},
        "tools": {"echo": {"tool_ref": "misbehave:echo", "source": "local",
            "input_schema": {"text": {"type": "string"}},
            "output_schema": {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]}}},
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"text": {"type": "string"}}},
            call,
            {"id": "done", "type": "output", "exit_code": "success"},
            {"id": "failed", "type": "output", "exit_code": "error"},
        ],
        "edges": [
            {"type": "direct", "from": "start", "to": "call"},
            {"type": "direct", "from": "call", "to": "done"},
        ],
    });
    let file = dir.join("echo.json");
    std::fs::write(&file, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    // The process answers describe from what `flow tools` lists.
    let out = flow(dir).arg("tools").arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(dir.join("tools.json"), out.stdout).unwrap();
    let script = fixtures::repo().join("tools/tests/fixtures/misbehave.py");
    let command = format!("python3 {} tools.json", script.display());
    std::fs::write(
        dir.join("flow.toml"),
        format!("[tools.\"echo.json\"]\ncommand = \"{command}\"\n\n[tools.\"std/llm\"]\ncommand = \"{command}\"\n"),
    )
    .unwrap();
    file
}

fn flow(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flow"));
    c.env_remove("FLOW_DATA")
        .env("NO_COLOR", "1")
        .arg("--data")
        .arg(data.join("data"));
    c
}

/// `flow --json ARGS`, killed if it takes longer than 60 s.
fn json(data: &Path, args: &[&str]) -> (i32, Json) {
    let mut child = flow(data)
        .arg("--json")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("flow {args:?} did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// The outcome of the run's one Reply fact.
fn reply_outcome(data: &Path, run: &str) -> Json {
    let (code, v) = json(data, &["history", run, "--kind", "Reply"]);
    assert_eq!(code, 0, "{v}");
    let facts = v["facts"].as_array().unwrap();
    assert_eq!(facts.len(), 1, "{v}");
    let f = &facts[0];
    f.get("outcome")
        .or_else(|| f.get("fact").and_then(|x| x.get("outcome")))
        .cloned()
        .unwrap_or_else(|| panic!("no outcome in {f}"))
}

/// PRO-13: a reply whose value is past the strict reader's limits
/// (`{"Ok":{"y":1e5000}}`), one with a duplicate key, one nested too deep,
/// and one with a malformed envelope are each recorded as BadReply for their
/// call; with no fail_branch the run faults (exit 1), and it replays
/// matched.
#[test]
fn replies_past_the_limits_fault_the_run_as_bad_replies() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), false);
    let file = file.to_str().unwrap();
    for raw in ["bignum", "dupkey", "deep", "extra"] {
        let input = json!({"text": format!("raw:{raw}")}).to_string();
        let (code, v) = json(dir.path(), &["run", file, "--allow", "--input", &input]);
        assert_eq!(code, 1, "{raw}: {v}");
        let run = v["run"].as_str().unwrap().to_string();
        let outcome = reply_outcome(dir.path(), &run);
        let why = outcome["BadReply"]
            .as_str()
            .unwrap_or_else(|| panic!("{raw}: {outcome}"));
        assert!(!why.is_empty(), "{raw}");
        let (code, v) = json(dir.path(), &["replay", &run]);
        assert_eq!((code, v["verdict"].as_str()), (0, Some("matched")), "{v}");
    }
}

/// PRO-13: the BadReply is a value the program handles: an llm_call's
/// fail_branch routes it (exit 4, the `error` output), and an over-size
/// reply (17 MiB) takes the same way.
#[test]
fn a_bad_reply_takes_the_fail_branch() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), true);
    let file = file.to_str().unwrap();
    for raw in ["raw:bignum", "huge"] {
        let input = json!({ "text": raw }).to_string();
        let (code, v) = json(dir.path(), &["run", file, "--allow", "--input", &input]);
        assert_eq!(code, 4, "{raw}: {v}");
        let run = v["run"].as_str().unwrap().to_string();
        let outcome = reply_outcome(dir.path(), &run);
        assert!(outcome["BadReply"].is_string(), "{raw}: {outcome}");
    }
}

/// `flow serve --tools flow.toml`, the manifest named by a relative path
/// from the server's working directory, starts its commands there: a run
/// submitted over HTTP calls the Tool and completes.
#[tokio::test]
async fn serve_with_a_relative_tools_path_starts_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), false);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
        .current_dir(dir.path())
        .args([
            "--data",
            "data",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools",
            "flow.toml",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("flowd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let flow: Json = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{base}/v1/runs"))
        .json(
            &json!({"flow": flow, "name": "echo.json", "input": {"text": "obj:hello"}, "wait": 20}),
        )
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Json = r.json().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["output"]["out"], "hello", "{v}");
}
