//! Routine operations lose nothing (issue 36, items 1 and 2): a halt waits
//! for the calls out unless forced, a continue after a forced halt decides
//! the calls that were out as the user chooses (CRASH-2, END-8, GAP-OPEN-1),
//! and SIGTERM drains a server — the calls out finish and their Replies
//! are recorded, nothing new is sent — so the run continues after a
//! restart with no call settled `Unknown`.
//!
//! Real parts: the `flow` binary serving a SQLite store, the triage
//! example's Python Tool (its classify call held by `TRIAGE_DELAY_MS`) and
//! `flow-llm`, real SIGTERM by pid.

mod common;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

fn triage() -> (PathBuf, Value) {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage");
    let flow =
        serde_json::from_str(&std::fs::read_to_string(examples.join("triage.json")).unwrap())
            .unwrap();
    (examples, flow)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// `flow serve` on `data` with the triage Tools, classify delayed `delay_ms`
/// and noted in [`seen`] as it comes in.
fn serve(data: &std::path::Path, delay_ms: u64) -> (Child, String) {
    let (examples, _) = triage();
    let seen = seen(data);
    common::serve_args(
        data,
        Some(&examples.join("flow.toml")),
        &[
            ("TRIAGE_DELAY_MS", &delay_ms.to_string()),
            ("TRIAGE_SEEN", seen.to_str().unwrap()),
        ],
        &["--drain-seconds", "30"],
    )
}

/// The file the triage Tool adds a line to as each classify call comes in.
fn seen(data: &std::path::Path) -> PathBuf {
    data.join("classify-seen")
}

/// Starts a triage run and waits until its classify call is out: its Call
/// durable and the call at the Tool. (The answer to the start comes once
/// the Call is durable, a moment before the call is sent; a halt in that
/// moment rightly withholds it, which is not what these tests are about.)
async fn start_and_wait_for_call(
    c: &reqwest::Client,
    base: &str,
    data: &std::path::Path,
) -> String {
    let calls_seen = |data| std::fs::read_to_string(seen(data)).map_or(0, |s| s.lines().count());
    let before = calls_seen(data);
    let (_, flow) = triage();
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "triage.json",
            "input": {"ticket": "The site is down!", "customer": "Acme"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let run = r.json::<Value>().await.unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..400 {
        let page = common::get_json(c, format!("{base}/v1/runs/{run}/facts?kind=Call")).await;
        if page["page"]["total"] == 1 && calls_seen(data) > before {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the classify call was never recorded and sent");
}

/// Every fact of `run`, in order.
async fn facts(c: &reqwest::Client, base: &str, run: &str) -> Vec<Value> {
    let v = common::get_json(c, format!("{base}/v1/runs/{run}/facts?limit=200")).await;
    v["facts"].as_array().cloned().unwrap_or_default()
}

fn replies_of(facts: &[Value]) -> Vec<String> {
    facts
        .iter()
        .filter(|f| f["kind"] == "Reply")
        .map(|f| f.to_string())
        .collect()
}

/// The open-call decisions recorded for `run`: (call, decision, reason).
fn decisions(data: &std::path::Path, run: &str) -> Vec<(String, String, String)> {
    let db = rusqlite::Connection::open(data.join("flow.db")).unwrap();
    let mut st = db
        .prepare(
            "SELECT h.details FROM host_records h JOIN runs r ON r.key = h.run_key
             WHERE r.id = ?1 AND h.kind = 'open-call-decision' ORDER BY h.seq",
        )
        .unwrap();
    st.query_map([run], |row| row.get::<_, String>(0))
        .unwrap()
        .map(|d| {
            let d: Value = serde_json::from_str(&d.unwrap()).unwrap();
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (s("call"), s("decision"), s("reason"))
        })
        .collect()
}

async fn state(c: &reqwest::Client, base: &str, run: &str) -> Value {
    common::get_json(c, format!("{base}/v1/runs/{run}")).await
}

/// Answers the review `run` is paused at (`view` is the run's answer or
/// view, with its pending calls); the run completes and replays matched.
async fn approve(c: &reqwest::Client, base: &str, run: &str, view: &Value) {
    let call = view["pending"][0]["call"].as_str().unwrap();
    let body = json!({"call": call, "reply": {"Ok": {"decision": "send"}}, "wait": 20});
    let v = post(c, base, run, "resume", body).await.1;
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(common::verdict(c, base, run).await, "matched");
}

/// `POST /v1/runs/{run}/{action}` (halt, resume) with `body`.
async fn post(
    c: &reqwest::Client,
    base: &str,
    run: &str,
    action: &str,
    body: Value,
) -> (u16, Value) {
    common::post_json(c, format!("{base}/v1/runs/{run}/{action}"), &body).await
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A halt without `force` waits for the call out: its Reply is recorded
/// (Ok), the call the program makes next is recorded and never sent, and
/// the run halts with no call out. `POST …/resume {}` sends the withheld
/// call and the run goes on to its review; nothing is `Unknown`.
#[tokio::test]
async fn a_halt_waits_for_the_call_out_and_a_continue_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let (child, base) = serve(dir.path(), 1500);
    let run = start_and_wait_for_call(&c, &base, dir.path()).await;
    let (status, h) = post(&c, &base, &run, "halt", json!({})).await;
    assert_eq!(status, 200, "{h}");
    let v = state(&c, &base, &run).await;
    assert_eq!(v["state"], "halted", "{v}");
    let f = facts(&c, &base, &run).await;
    let replies = replies_of(&f);
    assert_eq!(replies.len(), 1, "classify answered before the halt: {f:?}");
    assert!(replies[0].contains("\"Ok\""), "{}", replies[0]);
    let calls: Vec<&Value> = f.iter().filter(|f| f["kind"] == "Call").collect();
    assert_eq!(calls.len(), 2, "the draft call recorded, never sent");
    let draft = calls[1]["call"].as_str().unwrap().to_string();
    assert_eq!(
        decisions(dir.path(), &run),
        vec![(draft.clone(), "unsent".into(), "draining".into())]
    );

    let (status, v) = post(&c, &base, &run, "resume", json!({"wait": 20})).await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["state"], "paused", "the run reached its review: {v}");
    let f = facts(&c, &base, &run).await;
    assert!(
        !f.iter().any(|f| f.to_string().contains("Unknown")),
        "no call settled Unknown: {f:?}"
    );
    assert_eq!(
        decisions(dir.path(), &run).last().unwrap(),
        &(draft, "send".into(), "never sent".into())
    );
    approve(&c, &base, &run, &v).await;
    stop(child);
}

/// A forced halt leaves the call out open; the continue decides it as the
/// user chooses — `unknown` settles it `Unknown("halted")` (never "host
/// restarted": no host restarted), `resend` sends it again under the same
/// call id. A choice sent with a reply, or a choice that is not one, is
/// refused and changes nothing.
#[tokio::test]
async fn a_forced_halt_leaves_the_call_open_for_the_continue_to_decide() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let (child, base) = serve(dir.path(), 1500);

    let run = start_and_wait_for_call(&c, &base, dir.path()).await;
    let (status, _) = post(&c, &base, &run, "halt", json!({"force": true})).await;
    assert_eq!(status, 200);
    let head = state(&c, &base, &run).await["lastFact"].clone();
    for bad in [
        json!({"open": "maybe"}),
        json!({"call": "c1:root#1", "reply": {"Ok": {}}, "open": "resend"}),
    ] {
        let (status, _) = post(&c, &base, &run, "resume", bad.clone()).await;
        assert_eq!(status, 422, "{bad}");
        assert_eq!(state(&c, &base, &run).await["lastFact"], head, "{bad}");
    }
    let v = post(
        &c,
        &base,
        &run,
        "resume",
        json!({"open": "unknown", "wait": 20}),
    )
    .await
    .1;
    assert_eq!(v["state"], "faulted", "classify has no fail branch: {v}");
    let replies = replies_of(&facts(&c, &base, &run).await);
    assert_eq!(replies.len(), 1);
    assert!(
        replies[0].contains("\"Unknown\":\"halted\""),
        "{}",
        replies[0]
    );
    let d = decisions(dir.path(), &run);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].1.as_str(), d[0].2.as_str()), ("unknown", "halted"));
    assert_eq!(common::verdict(&c, &base, &run).await, "matched");

    let run = start_and_wait_for_call(&c, &base, dir.path()).await;
    let (status, _) = post(&c, &base, &run, "halt", json!({"force": true})).await;
    assert_eq!(status, 200);
    let v = post(
        &c,
        &base,
        &run,
        "resume",
        json!({"open": "resend", "wait": 20}),
    )
    .await
    .1;
    assert_eq!(v["state"], "paused", "{v}");
    let f = facts(&c, &base, &run).await;
    let replies = replies_of(&f);
    assert_eq!(replies.len(), 2, "classify and the draft: {f:?}");
    assert!(replies.iter().all(|r| r.contains("\"Ok\"")), "{replies:?}");
    let classify: Vec<&Value> = f
        .iter()
        .filter(|f| f["kind"] == "Call" && f.to_string().contains("classify"))
        .collect();
    assert_eq!(classify.len(), 1, "sent again under the same call id");
    let d = decisions(dir.path(), &run);
    assert_eq!((d[0].1.as_str(), d[0].2.as_str()), ("resend", "halted"));
    approve(&c, &base, &run, &v).await;
    stop(child);
}

/// SIGTERM drains the server: while the call out finishes, `/healthz`
/// says `draining` (503) and a new run is refused (503); the process exits
/// once the Reply is recorded. Started again on the same store, the server
/// continues the run (the withheld call sent) to its review; nothing is
/// `Unknown`, and the replay matches.
#[tokio::test]
async fn sigterm_drains_and_a_restart_goes_on_with_nothing_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let (mut child, base) = serve(dir.path(), 2500);
    let run = start_and_wait_for_call(&c, &base, dir.path()).await;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let mut saw_draining = false;
    for _ in 0..40 {
        let r = c.get(format!("{base}/healthz")).send().await;
        let Ok(r) = r else { break };
        if r.status() == 503 {
            let h: Value = r.json().await.unwrap();
            if h["status"] == "draining" {
                saw_draining = true;
                let (_, flow) = triage();
                let r = c
                    .post(format!("{base}/v1/runs"))
                    .json(&json!({"flow": flow, "name": "triage.json",
                        "input": {"ticket": "x", "customer": "y"}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 503, "no new run while draining");
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        saw_draining,
        "/healthz said draining while the call was out"
    );
    let mut exited = None;
    for _ in 0..300 {
        if let Some(s) = child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = exited.expect("flow serve exited once drained");
    assert!(status.success(), "{status}");

    let (child, base) = serve(dir.path(), 0);
    let mut v = Value::Null;
    for _ in 0..400 {
        v = state(&c, &base, &run).await;
        if v["state"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(v["state"], "paused", "continued to its review: {v}");
    let f = facts(&c, &base, &run).await;
    let replies = replies_of(&f);
    assert_eq!(replies.len(), 2, "{f:?}");
    assert!(replies.iter().all(|r| r.contains("\"Ok\"")), "{replies:?}");
    let d = decisions(dir.path(), &run);
    assert_eq!(
        d.iter().map(|d| d.1.as_str()).collect::<Vec<_>>(),
        ["unsent", "send"]
    );
    approve(&c, &base, &run, &v).await;
    stop(child);
}
