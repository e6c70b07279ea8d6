//! `flow serve` as a real process: killed with SIGKILL while a run is
//! paused, started again on the same store, the run goes on with no
//! accepted fact lost.

mod common;

use common::{review_flow, serve_with};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// Starts `flow serve` and reads the address it prints.
fn serve(data: &Path) -> (Child, String) {
    serve_with(data, None, &[])
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
    let before: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (mut child, base) = serve(dir.path());
    let after: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
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

/// The triage example's directory and flow, or `None` (said on stderr)
/// when flow-llm, which its flow.toml starts, is not built beside `flow`.
fn triage() -> Option<(std::path::PathBuf, Value)> {
    let bin_dir = std::path::PathBuf::from(env!("CARGO_BIN_EXE_flow"))
        .parent()
        .unwrap()
        .to_path_buf();
    if !bin_dir.join("flow-llm").is_file() {
        eprintln!(
            "flow-llm is not built in {}; build the workspace",
            bin_dir.display()
        );
        return None;
    }
    let examples =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage");
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(examples.join("triage.json")).unwrap())
            .unwrap();
    Some((examples, flow))
}

/// kill -9 of the server while a Tool call is out: after the restart the
/// server continues the run, the open call is settled Unknown("host
/// restarted") (DESIGN §5), and no accepted fact is lost.
#[tokio::test]
async fn kill_9_with_a_tool_call_in_flight() {
    let Some((examples, flow)) = triage() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_with(
        dir.path(),
        Some(&examples.join("flow.toml")),
        &[("TRIAGE_DELAY_MS", "60000")],
    );
    let r = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "triage.json", "input": {"ticket": "down!", "customer": "Acme"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    // Wait until the Call to classify is durable.
    let mut facts = 0;
    for _ in 0..200 {
        let page: Value =
            common::get_json(&client, format!("{base}/v1/runs/{run}/facts?kind=Call")).await;
        if page["page"]["total"] == 1 {
            let all: Value = common::get_json(&client, format!("{base}/v1/runs/{run}/facts")).await;
            facts = all["page"]["total"].as_u64().unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(facts, 4, "Start, two Checkpoints and the Call");
    child.kill().unwrap(); // SIGKILL while the call is out
    child.wait().unwrap();

    let (mut child, base) = serve_with(dir.path(), Some(&examples.join("flow.toml")), &[]);
    let mut state = Value::Null;
    for _ in 0..200 {
        let v: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
        state = v["state"].clone();
        if state == "faulted" || state == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "faulted", "classify settled Unknown, no fail_branch");
    let reply: Value =
        common::get_json(&client, format!("{base}/v1/runs/{run}/facts?fact=5")).await;
    let text = reply.to_string();
    assert!(text.contains("host restarted"), "{text}");
    let verdict: Value = client
        .post(format!("{base}/v1/runs/{run}/replay"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Refusals are refusals, `wait` or not (issue 17, item 2): on a run whose
/// flow has Tools (the triage quickstart), a reply that does not fit
/// `resume_schema`, a malformed outcome and a call that is not open are
/// refused before anything is recorded; a fork from a missing checkpoint or
/// with a bad `set` is refused, and an accepted fork always names its run.
#[tokio::test]
async fn refusals_without_wait_record_nothing() {
    let Some((examples, flow)) = triage() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_with(dir.path(), Some(&examples.join("flow.toml")), &[]);
    let r = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "triage.json", "wait": 20,
            "input": {"ticket": "The site is down!", "customer": "Acme"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let head = |client: reqwest::Client, base: String, run: String| async move {
        let v: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
        v["lastFact"].clone()
    };
    let before = head(client.clone(), base.clone(), run.clone()).await;
    let cases = [
        (
            json!({"call": call, "reply": {"Ok": {"decision": "maybe"}}}),
            422,
        ),
        (
            json!({"call": call, "reply": {"Ok": {"decision": "send"}, "Failed": 1}}),
            422,
        ),
        (json!({"call": call, "reply": {"Perhaps": 1}}), 422),
        (
            json!({"call": "c1:root#99", "reply": {"Ok": {"decision": "send"}}}),
            409,
        ),
    ];
    for (body, want) in cases {
        let r = client
            .post(format!("{base}/v1/runs/{run}/resume"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, want, "{body}: {text}");
        assert!(text.contains("\"detail\""), "problem+json: {text}");
    }
    assert_eq!(
        head(client.clone(), base.clone(), run.clone()).await,
        before,
        "nothing recorded"
    );
    // Forks: a missing checkpoint, a bad set, then a good one without wait.
    for (body, want) in [
        (json!({"checkpoint": 999}), 404),
        (json!({"checkpoint": 2, "set": {"ticket": 5}}), 422),
    ] {
        let r = client
            .post(format!("{base}/v1/runs/{run}/fork"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status().as_u16(),
            want,
            "{body}: {}",
            r.text().await.unwrap()
        );
    }
    let r = client
        .post(format!("{base}/v1/runs/{run}/fork"))
        .json(&json!({"checkpoint": 2, "set": {"ticket": "How do I export?"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let fork = v["run"].as_str().expect("a fork's answer names its run");
    let page: Value =
        common::get_json(&client, format!("{base}/v1/runs/{fork}/facts?limit=1")).await;
    assert_eq!(
        page["facts"][0]["kind"], "Start",
        "the fork's Start is durable: {page}"
    );
    // The good reply is admitted (202) and durable before the answer.
    let r = client
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": call, "reply": {"Ok": {"decision": "send"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let page: Value =
        common::get_json(&client, format!("{base}/v1/runs/{run}/facts?kind=Reply")).await;
    let replies = page["facts"].as_array().unwrap();
    assert!(
        replies.iter().any(|f| f["call"] == call.as_str()),
        "the admitted Reply is durable when the 202 arrives: {page}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// An answer is a consequence (issue 17, item 1; DESIGN §3): kill -9 the
/// real server the moment a 201 (start) or a 202 (resume, without `wait`)
/// arrives, restart it on the same store, and find what was acknowledged:
/// the run's Start, the admitted Reply. Twenty kills per run of the test.
#[tokio::test]
async fn kill_9_at_the_acknowledgement_loses_nothing_acknowledged() {
    const ROUNDS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |client: &reqwest::Client, url: String| {
        let c = client.clone();
        async move {
            let r = c.get(url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (mut child, mut base) = serve(dir.path());
    // The first paused run.
    let v: Value = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": review_flow(), "input": {"text": "ack 0"}, "wait": 10}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    let mut paused = (
        v["run"].as_str().unwrap().to_string(),
        v["pending"][0]["call"].as_str().unwrap().to_string(),
    );
    let mut kills = 0;
    for i in 0..ROUNDS {
        // A resume without wait: 202, then kill -9 at once.
        let (run, call) = paused.clone();
        let r = client
            .post(format!("{base}/v1/runs/{run}/resume"))
            .json(&json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(
            status,
            202,
            "round {i}: {}",
            r.text().await.unwrap_or_default()
        );
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        (child, base) = serve(dir.path());
        let (s, page) = get(&client, format!("{base}/v1/runs/{run}/facts?kind=Reply")).await;
        assert_eq!(s, 200, "{page}");
        assert!(
            page["facts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["call"] == call.as_str()),
            "round {i}: the acknowledged Reply of {run} is durable: {page}"
        );
        // A start without wait: 201, then kill -9 at once.
        let r = client
            .post(format!("{base}/v1/runs"))
            .json(&json!({"flow": review_flow(), "input": {"text": format!("ack {}", i + 1)}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        let started = v["run"].as_str().unwrap().to_string();
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        (child, base) = serve(dir.path());
        // Recovery drives it on to its pause.
        let mut view = Value::Null;
        for _ in 0..200 {
            let (s, v) = get(&client, format!("{base}/v1/runs/{started}")).await;
            assert_eq!(
                s, 200,
                "round {i}: the acknowledged start of {started} is stored"
            );
            if v["state"] == "paused" && !v["pending"].as_array().unwrap().is_empty() {
                view = v;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(view["state"], "paused", "round {i}: {view}");
        paused = (
            started,
            view["pending"][0]["call"].as_str().unwrap().to_string(),
        );
    }
    assert_eq!(kills, 2 * ROUNDS);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The server's child processes (every thread's `children` list).
fn children(pid: u32) -> std::collections::BTreeSet<u32> {
    let mut out = std::collections::BTreeSet::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let p = t.unwrap().path().join("children");
        for c in std::fs::read_to_string(p)
            .unwrap_or_default()
            .split_whitespace()
        {
            out.insert(c.parse().unwrap());
        }
    }
    out
}

/// Issue 17 (should fix): 200 concurrent starts of one flow once made 344
/// Tool processes. Bound Tools are pooled by program: the starts queue on
/// one binding, and the server ends up with one process per bound
/// command, however many runs use them.
#[tokio::test]
async fn concurrent_starts_share_one_set_of_tool_processes() {
    let Some((examples, flow)) = triage() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut child, base) = serve_with(dir.path(), Some(&examples.join("flow.toml")), &[]);
    let mut starts = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (client, base, flow) = (client.clone(), base.clone(), flow.clone());
        starts.spawn(async move {
            client
                .post(format!("{base}/v1/runs"))
                .json(&json!({"flow": flow, "name": "triage.json",
                    "input": {"ticket": format!("ticket {i}"), "customer": "Acme"}}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        });
    }
    let mut most = 0;
    while let Some(s) = starts.join_next().await {
        assert_eq!(s.unwrap(), 201);
        most = most.max(children(child.id()).len());
    }
    // Two commands in flow.toml: the triage Tool and flow-llm.
    assert!(most <= 2, "{most} Tool processes for 200 runs of one flow");
    child.kill().unwrap();
    child.wait().unwrap();
}
