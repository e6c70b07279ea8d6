//! The MCP server driven by a client nobody here wrote: the official
//! Python `mcp` SDK (PyPI, pinned below and in .ci/run) runs the scripts in
//! tests/mcp/ against the real `flow mcp` over stdio and `/mcp` on a real
//! `flow serve`. Each script checks what the tools answer and exits
//! non-zero naming a failed check. Every child is bounded in time and
//! killed by its PID.
//!
//! The SDK lives in the venv `.ci/venv` (as .ci/run makes it); a test
//! makes it when it is missing. `FLOW_MCP_PYTHON` names another Python
//! that has the SDK.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The SDK version the tests speak to (the same pin as .ci/run).
const MCP_SDK: &str = "mcp==2.3.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn flow_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flow"))
}

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp")
}

/// Waits for `child` at most `limit`; kills it (by its PID) after that.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} took longer than {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Python with the SDK: `FLOW_MCP_PYTHON`, or `.ci/venv`, made (once per
/// test binary) when it lacks the SDK.
fn python() -> PathBuf {
    static READY: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = ready.as_ref() {
        return p.clone();
    }
    let py = match std::env::var_os("FLOW_MCP_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = repo().join(".ci/venv");
            let py = venv.join("bin/python");
            if !has_sdk(&py) {
                if !py.exists() {
                    let mut c = Command::new("python3")
                        .args(["-m", "venv"])
                        .arg(&venv)
                        .spawn()
                        .unwrap();
                    assert!(
                        wait_bounded(&mut c, Duration::from_secs(120), "python3 -m venv").success()
                    );
                }
                let mut c = Command::new(venv.join("bin/pip"))
                    .args(["install", "-q", "--disable-pip-version-check", MCP_SDK])
                    .spawn()
                    .unwrap();
                assert!(
                    wait_bounded(&mut c, Duration::from_secs(600), "pip install mcp").success(),
                    "cannot install {MCP_SDK} into {}",
                    venv.display()
                );
            }
            py
        }
    };
    assert!(has_sdk(&py), "{} has no `mcp` package", py.display());
    *ready = Some(py.clone());
    py
}

fn has_sdk(py: &Path) -> bool {
    py.exists()
        && Command::new(py)
            .args(["-c", "import mcp.client.stdio, mcp.client.streamable_http"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// Runs a script to its end (at most 180 s) and fails the test with its
/// output when it fails.
fn script(py: &Path, args: &[&str]) {
    let mut child = Command::new(py)
        .args(args)
        .current_dir(repo())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let status = wait_bounded(&mut child, Duration::from_secs(180), &args.join(" "));
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.success(),
        "{} failed ({status}):\n--- stdout\n{out}\n--- stderr\n{err}",
        args.join(" ")
    );
    assert!(out.contains(": ok"), "no ok line:\n{out}\n{err}");
}

/// A scenario of client.py against `flow mcp` on a fresh store.
fn stdio(scenario: &str, mcp_args: &[&str]) {
    let py = python();
    let data = tempfile::tempdir().unwrap();
    let client = scripts().join("client.py");
    let bin = flow_bin();
    let mut args: Vec<String> = vec![
        client.display().to_string(),
        scenario.to_string(),
        "--flow".into(),
        bin.display().to_string(),
        "--data".into(),
        data.path().display().to_string(),
    ];
    // `--mcp-arg=--allow`: argparse takes a value that starts with `-`
    // only in this form.
    args.extend(mcp_args.iter().map(|a| format!("--mcp-arg={a}")));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    script(&py, &refs);
}

/// A real `flow serve` on a store of its own (the harness's server: killed
/// by its PID when dropped, its store then read back verified).
struct Serve {
    _server: common::Server,
    url: String,
    _data: tempfile::TempDir,
}

fn serve(extra: &[&str]) -> Serve {
    let data = tempfile::tempdir().unwrap();
    let server = common::serve(data.path(), extra);
    Serve {
        url: format!("{}/mcp", server.base),
        _server: server,
        _data: data,
    }
}

fn http(scenario: &str, server: &Serve, extra: &[&str]) {
    let py = python();
    let client = scripts().join("client.py");
    let mut args = vec![client.to_str().unwrap(), scenario, "--url", &server.url];
    args.extend_from_slice(extra);
    script(&py, &args);
}

fn slow_tools() -> String {
    scripts().join("slow/flow.toml").display().to_string()
}

/// MCPS-1: the six tools with the CLI's meaning over stdio, programs given
/// by path; a paused run resumed through MCP (RES-1).
#[test]
fn stdio_every_tool_and_a_paused_run_resumed() {
    stdio("every_tool", &[]);
}

/// MCPS-1 over `/mcp`: programs given as documents.
#[test]
fn http_every_tool_and_a_paused_run_resumed() {
    let s = serve(&[]);
    http("every_tool", &s, &[]);
}

/// HIST-12..18, HIST-21, DISC-4, DISC-5: 1025-code-point fact text, a
/// 4097-byte value, limit 0 and 201, bad kinds, offsets and source names.
#[test]
fn stdio_history_and_runs_bounds() {
    stdio("bounds", &[]);
}

#[test]
fn http_history_and_runs_bounds() {
    let s = serve(&[]);
    http("bounds", &s, &[]);
}

/// MCPS-5..7, MCPS-12: the accepted-Start notification's exact `_meta`,
/// and none for resume, replay, history, runs or a run without a token.
#[test]
fn stdio_accepted_start_progress_notification() {
    stdio("progress", &[]);
}

#[test]
fn http_accepted_start_progress_notification() {
    let s = serve(&[]);
    http("progress", &s, &[]);
}

/// MCPS-2, MCPS-3: other requests are answered while a long run drives;
/// cancelling its request halts it (no End), and it resumes like a crashed
/// run.
#[test]
fn stdio_cancel_halts_the_run_it_drives() {
    stdio("cancel", &["--allow"]);
}

#[test]
fn http_cancel_halts_the_run_it_drives() {
    let tools = slow_tools();
    let s = serve(&["--tools", &tools]);
    http("cancel", &s, &[]);
}

/// MCPS-3, MCPS-7 on the wire: a cancelled request gets no answer at all;
/// a string request id stays a string in `ng.flowla/request`.
#[test]
fn stdio_cancelled_request_is_answered_by_nothing() {
    let data = tempfile::tempdir().unwrap();
    let wire = scripts().join("wire.py");
    let bin = flow_bin();
    script(
        Path::new("python3"),
        &[
            wire.to_str().unwrap(),
            bin.to_str().unwrap(),
            data.path().to_str().unwrap(),
        ],
    );
}

/// APR-6: `flow mcp` never asks; it runs only what `--allow` or `--tools`
/// approved, and refuses the rest, recording nothing.
#[test]
fn stdio_runs_only_approved_implementations() {
    stdio("approval", &[]);
}

/// `/mcp` is behind the server's tokens: read scope for check, history,
/// runs and replay; run scope for run and resume; no token, 401.
#[test]
fn http_tools_check_the_tokens_scope() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let (read, run) = ("read-token-0123456789", "run-token-0123456789ab");
    std::fs::write(&tokens, format!("{read} read\n{run} run\n")).unwrap();
    let s = serve(&["--tokens", tokens.to_str().unwrap()]);
    http("scopes", &s, &["--read-token", read, "--run-token", run]);
}

/// Issue 41 §5 (HIST-14, DISC-4): `history` and `runs` state their
/// `limit`'s range in the input schema `tools/list` gives — `minimum` 1,
/// `maximum` 200 — not only in prose. Plain JSON-RPC lines to `flow mcp`
/// (no SDK between), bounded in time; the server is killed by its PID.
#[test]
fn history_and_runs_schemas_bound_limit() {
    use std::io::{BufRead, BufReader, Write};
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(flow_bin())
        .arg("--data")
        .arg(data.path())
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let answer = |stdin: &mut std::process::ChildStdin, msg: serde_json::Value| {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        let id = msg["id"].clone();
        loop {
            let m = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("flow mcp answered in time");
            if m["id"] == id && m.get("method").is_none() {
                return m;
            }
        }
    };
    let init = answer(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "schema", "version": "1"}}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let list = answer(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    drop(stdin);
    let tools = list["result"]["tools"].as_array().unwrap().clone();
    for name in ["history", "runs"] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} tool: {list}"));
        let limit = &t["inputSchema"]["properties"]["limit"];
        assert_eq!(limit["minimum"], 1, "{name}: {limit}");
        assert_eq!(limit["maximum"], 200, "{name}: {limit}");
    }
    wait_bounded(&mut child, Duration::from_secs(20), "flow mcp");
}
