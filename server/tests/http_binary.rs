//! `flow serve` as a real process: killed with SIGKILL while a run is
//! paused, started again on the same store, the run goes on with no
//! accepted fact lost.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn review_flow() -> Value {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Starts `flow serve` and reads the address it prints.
fn serve(data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args([
            "--data",
            data.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
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
    (child, base)
}

#[tokio::test]
async fn kill_9_then_restart_loses_no_fact() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve(dir.path());
    let r = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": review_flow(), "input": {"text": "kill"}, "wait": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let before: Value = client
        .get(format!("{base}/v1/runs/{run}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (mut child, base) = serve(dir.path());
    let after: Value = client
        .get(format!("{base}/v1/runs/{run}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        after["lastFact"], before["lastFact"],
        "no accepted fact lost"
    );
    assert_eq!(after["state"], "paused");
    let r = client
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "completed", "{v}");
    let v: Value = client
        .post(format!("{base}/v1/runs/{run}/replay"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["verdict"], "matched");
    // SIGTERM: a graceful stop.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    for _ in 0..100 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    panic!("flow serve did not stop on SIGTERM");
}
