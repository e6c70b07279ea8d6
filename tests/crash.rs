//! Crash recovery for real (DESIGN §7: "a crash at any point loses no
//! accepted fact and the run resumes"): `flow run` is killed with SIGKILL
//! while a Tool call is out; every fact it acknowledged is still there, the
//! chain verifies, and `flow resume` settles the open call as
//! `Unknown("host restarted")` with a host record, then drives on.

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flow"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn flow(data: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flow"));
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.env("PATH", path)
        .env("NO_COLOR", "1")
        .arg("--data")
        .arg(data);
    c
}

fn json(c: &mut Command) -> (i32, Json) {
    let out = c.output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Json::Null);
    (out.status.code().unwrap_or(-1), v)
}

/// `flow-llm` is built by the flow-llm package and the triage flow binds
/// it; without it (a partial build) these tests say so and pass over.
fn have_flow_llm() -> bool {
    let built = bin_dir().join("flow-llm").is_file();
    if !built {
        eprintln!(
            "flow-llm is not built in {}; build the workspace",
            bin_dir().display()
        );
    }
    built
}

/// Waits until the one run in `data` has recorded its first Call (durable,
/// so a crash from now on leaves it open), and returns the run id.
fn first_call_recorded(data: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the run never recorded its Call");
        std::thread::sleep(Duration::from_millis(100));
        let (_, v) = json(flow(data).args(["--json", "runs"]));
        let Some(run) = v["runs"][0]["run"].as_str().map(str::to_string) else {
            continue;
        };
        let (_, h) = json(flow(data).args(["--json", "history", &run, "--kind", "Call"]));
        if h["page"]["total"].as_u64() == Some(1) {
            return run;
        }
    }
}

#[test]
fn kill_9_while_a_call_is_out_then_resume() {
    if !have_flow_llm() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let flow_file = repo().join("examples/flows/triage/triage.json");
    let mut child = flow(data.path())
        .env("TRIAGE_DELAY_MS", "30000")
        .args(["run", flow_file.to_str().unwrap(), "--allow", "--input"])
        .arg(r#"{"ticket":"The site is down","customer":"Acme"}"#)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the Call to lookup is durable.
    let run = first_call_recorded(data.path());
    child.kill().unwrap(); // SIGKILL: no destructor, no flush, no goodbye.
    child.wait().unwrap();

    // Everything acknowledged is there and verifies; the run is incomplete.
    let (code, h) = json(flow(data.path()).args(["--json", "history", &run]));
    assert_eq!(code, 0, "{h}");
    let kinds: Vec<&str> = h["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Start", "Checkpoint", "Checkpoint", "Call"]);
    let (code, v) = json(flow(data.path()).args(["--json", "replay", &run]));
    assert_eq!(
        (code, v["verdict"].as_str()),
        (1, Some("incomplete")),
        "{v}"
    );

    // Resume settles the open call and drives on: Unknown at a tool_invoke
    // with no fail_branch faults the run, naming the node and the call.
    let (code, v) = json(flow(data.path()).args(["--json", "resume", &run, "--allow"]));
    assert_eq!(code, 1, "{v}");
    let fault = v["fault"].as_str().unwrap();
    assert!(
        fault.contains("node classify")
            && fault.contains("c1:root#1")
            && fault.contains("host restarted"),
        "{fault}"
    );
    let (_, f) = json(flow(data.path()).args(["--json", "history", &run, "--fact", "5"]));
    assert_eq!(f["fact"], "Reply", "{f}");
    assert_eq!(f["outcome"]["Unknown"], "host restarted");
    let (code, v) = json(flow(data.path()).args(["--json", "replay", &run]));
    assert_eq!((code, v["verdict"].as_str()), (0, Some("matched")), "{v}");
}

/// The README quickstart: the triage flow with a real Python Tool process
/// and flow-llm offline pauses at review; the printed resume line completes
/// it; it replays matched.
#[test]
fn quickstart_triage_with_real_tool_processes() {
    if !have_flow_llm() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let flow_file = repo().join("examples/flows/triage/triage.json");
    let flow_file = flow_file.to_str().unwrap();
    // Without --allow and without a terminal, the run is refused (DESIGN §5).
    let (code, _) = json(
        flow(data.path())
            .args([
                "--json",
                "run",
                flow_file,
                "--input",
                r#"{"ticket":"x","customer":"y"}"#,
            ])
            .stdin(Stdio::null()),
    );
    assert_eq!(code, 2);
    let (_, v) = json(flow(data.path()).args(["--json", "runs"]));
    assert_eq!(
        v["runs"],
        serde_json::json!([]),
        "a refused run records nothing"
    );
    // The human text prints the exact resume line.
    let out = flow(data.path())
        .args([
            "run",
            flow_file,
            "--allow",
            "--input",
            r#"{"ticket":"The site is down!","customer":"Acme"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("flow --data "))
        .unwrap_or_else(|| panic!("no resume line in {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(3), Some(&"resume"), "{line}");
    let run = words[4].to_string();
    assert!(
        line.contains("--call 'c1:root#3' --allow --reply '{\"Ok\":{\"decision\":\"send\""),
        "{line}"
    );
    let (code, v) = json(flow(data.path()).args([
        "--json",
        "resume",
        &run,
        "--call",
        "c1:root#3",
        "--reply",
        r#"{"Ok":{"decision":"send"}}"#,
        "--allow",
    ]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"]["severity"], "high");
    assert!(
        v["output"]["draft"].as_str().unwrap().contains("URGENT"),
        "{v}"
    );
    let (code, v) = json(flow(data.path()).args(["--json", "replay", &run]));
    assert_eq!((code, v["verdict"].as_str()), (0, Some("matched")), "{v}");
}

/// An interrupt halts the run: exit 130, a halt host record, no End; the
/// run resumes like a crashed one (running-a-program.txt, "How a run ends").
/// The first Ctrl-C waits for the call out (issue 36: a halt is a decision
/// the user makes knowingly); a second halts at once, and the resume then
/// settles the call that was out `Unknown("halted")`, not "host restarted".
#[test]
fn interrupt_halts_with_exit_130() {
    if !have_flow_llm() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let (child, run) = triage_with_a_call_out(data.path(), "30000");
    let interrupt = || {
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    interrupt();
    std::thread::sleep(std::time::Duration::from_millis(500));
    interrupt();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "halted");
    assert_eq!(v["run"], run.as_str());
    // No End was recorded; resume settles the call and goes on.
    let (_, h) = json(flow(data.path()).args(["--json", "history", &run, "--kind", "End"]));
    assert_eq!(h["page"]["total"], 0);
    let (code, v) = json(flow(data.path()).args(["--json", "resume", &run, "--allow"]));
    assert_eq!(code, 1, "{v}");
    let (_, h) = json(flow(data.path()).args(["--json", "history", &run, "--kind", "Reply"]));
    let text = h.to_string();
    assert!(
        text.contains("halted") && !text.contains("host restarted"),
        "{text}"
    );
}

/// `flow --json run` of the triage quickstart on `data`, its classify call
/// answered after `delay_ms`, once that call is recorded: the process and
/// the run.
fn triage_with_a_call_out(data: &Path, delay_ms: &str) -> (std::process::Child, String) {
    let flow_file = repo().join("examples/flows/triage/triage.json");
    let child = flow(data)
        .env("TRIAGE_DELAY_MS", delay_ms)
        .args([
            "--json",
            "run",
            flow_file.to_str().unwrap(),
            "--allow",
            "--input",
        ])
        .arg(r#"{"ticket":"refund please","customer":"Bo"}"#)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, first_call_recorded(data))
}

/// One Ctrl-C waits for the call out: its Reply is recorded, the next call
/// is recorded and never sent, exit 130; `flow resume` sends it and the
/// run goes on to its review (exit 3), nothing `Unknown`.
#[test]
fn an_interrupt_waits_for_the_call_out() {
    if !have_flow_llm() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let (child, run) = triage_with_a_call_out(data.path(), "1500");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let (_, h) = json(flow(data.path()).args(["--json", "history", &run, "--kind", "Reply"]));
    assert_eq!(h["page"]["total"], 1, "{h}");
    let (code, v) = json(flow(data.path()).args(["--json", "resume", &run, "--allow"]));
    assert_eq!((code, v["state"].as_str()), (3, Some("paused")), "{v}");
    let (_, h) = json(flow(data.path()).args(["--json", "history", &run]));
    assert!(!h.to_string().contains("Unknown"), "{h}");
}

/// Refused runs record nothing: an unbound Tool, and a Tool process whose
/// fingerprint does not fit the declaration (host-boundary.txt, "Binding").
#[test]
fn unbound_and_unfitting_tools_refuse_the_run() {
    if !have_flow_llm() {
        return;
    }
    let src = repo().join("examples/flows/triage");
    let input = r#"{"ticket":"x","customer":"y"}"#;
    // No flow.toml: every Tool is unbound.
    let bare = tempfile::tempdir().unwrap();
    std::fs::copy(src.join("triage.json"), bare.path().join("triage.json")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (code, v) = json(flow(data.path()).args([
        "--json",
        "run",
        bare.path().join("triage.json").to_str().unwrap(),
        "--allow",
        "--input",
        input,
    ]));
    assert_eq!(code, 2, "{v}");
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("triage.json#classify") && err.contains("unbound"),
        "{err}"
    );
    // The declaration changed, the process still describes the old one.
    let moved = tempfile::tempdir().unwrap();
    for f in ["flow.toml", "triage_tools.py", "tools.json"] {
        std::fs::copy(src.join(f), moved.path().join(f)).unwrap();
    }
    let text = std::fs::read_to_string(src.join("triage.json"))
        .unwrap()
        .replace(
            r#""category": {"type": "string"}
        },"#,
            r#""category": {"type": "string"}, "confidence": {"type": "number"}
        },"#,
        );
    assert!(text.contains("confidence"));
    std::fs::write(moved.path().join("triage.json"), text).unwrap();
    // The copied script finds the Python toolkit on PYTHONPATH, as any Tool
    // moved out of the repository would.
    let (code, v) = json(
        flow(data.path())
            .env("PYTHONPATH", repo().join("toolkits/python"))
            .args([
                "--json",
                "run",
                moved.path().join("triage.json").to_str().unwrap(),
                "--allow",
                "--input",
                input,
            ]),
    );
    assert_eq!(code, 2, "{v}");
    assert!(v["error"].as_str().unwrap().contains("fingerprint"), "{v}");
    let (_, runs) = json(flow(data.path()).args(["--json", "runs"]));
    assert_eq!(runs["runs"], serde_json::json!([]), "nothing was recorded");
}
