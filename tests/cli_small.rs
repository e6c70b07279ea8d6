//! Smaller user-visible answers of the real `flow` binary: `flow runs
//! --runs ROOT` exit codes (DISC-25), the printed `flow resume …` line
//! runnable as printed, and one state vocabulary between `flow runs` and
//! `flow history`.

#[path = "fixtures/fixtures.rs"]
mod fixtures;

use serde_json::{Value as Json, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `flow` run in `cwd`, FLOW_DATA unset.
fn flow(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flow"));
    c.env_remove("FLOW_DATA")
        .env("NO_COLOR", "1")
        .current_dir(cwd);
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn review() -> String {
    fixtures::repo()
        .join("examples/flows/review/review.json")
        .display()
        .to_string()
}

/// DISC-25: "The CLI exits 0 for an inspected page or missing root and 2
/// for another root problem": a file, and a root with more than 10,000
/// entries (inspection-limited), are 2 with the problem reported; a missing
/// root and an inspected page are 0.
#[test]
fn runs_root_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let json = |root: &Path| {
        let out = flow(d)
            .args(["--json", "runs", "--runs"])
            .arg(root)
            .output()
            .unwrap();
        let v: Json = serde_json::from_slice(&out.stdout).unwrap_or(Json::Null);
        (out.status.code(), v)
    };
    let file = d.join("file");
    std::fs::write(&file, "x").unwrap();
    let (code, v) = json(&file);
    assert_eq!(code, Some(2), "{v}");
    assert_eq!(v["problems"][0]["status"], "unreadable", "{v}");

    let (code, v) = json(&d.join("missing"));
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["problems"][0]["status"], "not-created", "{v}");

    let many = d.join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..10_001 {
        std::fs::write(many.join(format!("e{i}")), "").unwrap();
    }
    let (code, v) = json(&many);
    assert_eq!(code, Some(2), "{v}");
    assert_eq!(v["problems"][0]["status"], "inspection-limited", "{v}");
    // Human text exits the same way.
    let out = flow(d)
        .args(["runs", "--runs"])
        .arg(&many)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // An inspected page: one exported run.
    let data = d.join("data");
    let out = flow(d)
        .arg("--data")
        .arg(&data)
        .args(["--json", "run", &review(), "--input", r#"{"text":"x"}"#])
        .output()
        .unwrap();
    let run: Json = serde_json::from_slice(&out.stdout).unwrap();
    let run = run["run"].as_str().unwrap();
    let archives = d.join("archives");
    let out = flow(d)
        .arg("--data")
        .arg(&data)
        .args(["export", run, "--out"])
        .arg(archives.join(run))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let (code, v) = json(&archives);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["runs"][0]["run"], run, "{v}");
}

/// The indented `flow …` line a paused run prints for a human call.
fn printed_resume(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("flow ") && l.contains(" resume "))
        .unwrap_or_else(|| panic!("no resume line in {stdout}"))
        .to_string()
}

/// Runs a printed command line through `sh` in `cwd`, `flow` being the
/// binary under test, with `stdin`.
fn run_printed(cwd: &Path, line: &str, stdin: &str) -> Output {
    let bin = env!("CARGO_BIN_EXE_flow");
    let script = format!("'{bin}'{}", line.strip_prefix("flow").unwrap());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(cwd)
        .env_remove("FLOW_DATA")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The printed `flow resume …` line runs as printed: with the default
/// store, with `--data` kept when it was given, and with a reply that fits
/// the resume_schema.
#[test]
fn printed_resume_line_runs_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The default store (.flow in the working directory): no --data.
    let out = flow(d)
        .args(["run", &review(), "--input", r#"{"text":"a"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let line = printed_resume(&out);
    assert!(!line.contains("--data") && !line.contains('…'), "{line}");
    let done = run_printed(d, &line, "");
    assert_eq!(done.status.code(), Some(0), "{line}: {}", text(&done));

    // --data given: kept, quoted for the shell.
    let data = d.join("my data");
    let out = flow(d)
        .arg("--data")
        .arg(&data)
        .args(["run", &review(), "--input", r#"{"text":"b"}"#, "--allow"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let line = printed_resume(&out);
    assert!(
        line.contains("--data") && line.contains("--allow"),
        "{line}"
    );
    let done = run_printed(d, &line, "");
    assert_eq!(done.status.code(), Some(0), "{line}: {}", text(&done));
}

/// When no fitting reply can be built (a pattern is not searched for a
/// match), the line reads the reply from standard input and the schema is
/// shown.
#[test]
fn printed_resume_line_reads_the_reply_when_no_example_fits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let doc = json!({
        "spec_version": "1.0.0", "id": "code-gate", "name": "Code gate",
        "state_schema": {"type": "object", "properties": {
            "text": {"type": "string"}, "code": {"type": "string"}}, "required": ["text"]},
        "nodes": [
            {"id": "start", "type": "input", "output_schema": {"text": {"type": "string"}}},
            {"id": "ask", "type": "hitl_breakpoint", "prompt": "Code?",
             "resume_schema": {"type": "string", "pattern": "^[0-9]{3}$"}, "output_key": "code"},
            {"id": "done", "type": "output", "exit_code": "success"}
        ],
        "edges": [
            {"type": "direct", "from": "start", "to": "ask"},
            {"type": "direct", "from": "ask", "to": "done"}
        ]
    });
    let file = d.join("gate.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = flow(d)
        .arg("run")
        .arg(&file)
        .args(["--input", r#"{"text":"x"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let line = printed_resume(&out);
    assert!(line.ends_with("--reply -"), "{line}");
    assert!(
        text(&out).contains("^[0-9]{3}$"),
        "the schema is shown: {}",
        text(&out)
    );
    let done = run_printed(d, &line, r#"{"Ok":"123"}"#);
    assert_eq!(done.status.code(), Some(0), "{line}: {}", text(&done));
}

/// One vocabulary: `flow runs` and `flow history` both say the run's state
/// (paused, completed) and discovery's record (incomplete, complete).
#[test]
fn runs_and_history_share_one_state_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = flow(d)
        .args(["--json", "run", &review(), "--input", r#"{"text":"a"}"#])
        .output()
        .unwrap();
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    let said = |args: &[&str]| {
        let out = flow(d).args(args).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with(&run))
            .unwrap_or_else(|| panic!("no line for {run}: {}", text(&out)))
            .split_whitespace()
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(said(&["runs"]), "paused (incomplete)");
    assert_eq!(said(&["history", &run]), "paused (incomplete)");
    let out = flow(d)
        .args(["resume", &run, "--call", "c1:root#1", "--reply"])
        .arg(r#"{"Ok":{"decision":"approved"}}"#)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(said(&["runs"]), "completed (complete)");
    assert_eq!(said(&["history", &run]), "completed (complete)");
}

/// A reader that closed the pipe (`flow history RUN | head`) ends every
/// command quietly: no panic, exit 0, nothing on stderr.
#[test]
fn a_closed_output_pipe_ends_every_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = flow(d)
        .args(["--json", "run", &review(), "--input", r#"{"text":"a"}"#])
        .output()
        .unwrap();
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    let review = review();
    let commands: Vec<Vec<&str>> = vec![
        vec!["history", &run],
        vec!["--json", "history", &run],
        vec!["history", &run, "--fact", "1"],
        vec!["history", &run, "--source", "review.json"],
        vec!["runs"],
        vec!["--json", "runs"],
        vec!["replay", &run],
        vec!["check", &review],
        vec!["tools", &review],
        vec!["run", &review, "--input", r#"{"text":"b"}"#],
        vec!["--json", "run", &review, "--input", r#"{"text":"c"}"#],
        vec![
            "resume",
            &run,
            "--call",
            "c1:root#1",
            "--reply",
            r#"{"Ok":{"decision":"approved"}}"#,
        ],
        vec!["fork", &run, "--checkpoint", "3"],
        vec!["--help"],
        vec!["history", "--help"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = flow(d)
            .args(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}

/// Issue 15, part 4: every command's help describes every argument and
/// flag, and ends with an example and its exit codes.
#[test]
fn every_command_explains_itself() {
    for cmd in [
        "run",
        "resume",
        "replay",
        "fork",
        "history",
        "watch",
        "runs",
        "check",
        "tools",
        "export",
        "import",
        "test",
        "serve",
        "mcp",
        "worker",
        "gate",
        "diff",
        "recover",
        "recoveries",
        "keys new",
        "keys rotate",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(cmd.split(' ').chain(["--help"]))
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd} --help");
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(help.contains("Example"), "{cmd}: no example:\n{help}");
        assert!(help.contains("Exit codes"), "{cmd}: no exit codes:\n{help}");
        // Each argument and option has a description: after its name on
        // the same line, or on the lines below it, indented further.
        let lines: Vec<&str> = help.lines().collect();
        let mut section = "";
        for (i, line) in lines.iter().enumerate() {
            if line.ends_with(':') && !line.starts_with(' ') {
                section = line;
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if (section == "Arguments:" || section == "Options:") && (1..=6).contains(&indent) {
                let t = line.trim();
                let same_line = t.split("  ").filter(|p| !p.trim().is_empty()).count() > 1;
                let below = lines.get(i + 1).is_some_and(|n| {
                    n.len() - n.trim_start().len() > indent + 2 && !n.trim().is_empty()
                });
                assert!(same_line || below, "{cmd}: `{t}` has no description");
            }
        }
    }
}
