//! Several `flow serve --postgres` processes on one database and schema
//! act as one service (issue 12 §2, docs/deploy.md): any server answers
//! for any run, each run is driven by the holder of its lease, a server
//! killed with SIGKILL has its runs taken over within the lease time, the
//! live feed crosses servers, and a hitl deadline fires once.
//!
//! Real parts: the `flow` binary, PostgreSQL at 127.0.0.1:5432 (database
//! `test`, or `FLOW_TEST_POSTGRES`; `skip` skips) with a fresh schema per
//! test, dropped after, and the triage example's Python Tool.

mod common;

use common::Schema;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const LEASE_SECONDS: u64 = 2;

/// A `flow serve --postgres` process, killed with the guard.
struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Server {
    fn start(db: &Schema, tools: Option<&Path>, env: &[(&str, &str)]) -> Server {
        let data = tempfile::tempdir().unwrap();
        let lease = LEASE_SECONDS.to_string();
        let (child, base) = common::serve_args(
            data.path(),
            tools,
            env,
            &[
                "--postgres",
                &db.url,
                "--postgres-schema",
                &db.name,
                "--lease-seconds",
                &lease,
            ],
        );
        Server {
            child,
            base,
            _data: data,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL, and waits for the process to be gone.
    fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn get(c: &reqwest::Client, url: String) -> Value {
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    r.json().await.unwrap()
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = c.post(&url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows")
        .join(path)
}

fn review_flow() -> Value {
    serde_json::from_str(&std::fs::read_to_string(example("review/review.json")).unwrap()).unwrap()
}

/// Every fact of `run` as `(n, kind, hash)`, read through `server`.
async fn facts(c: &reqwest::Client, server: &Server, run: &str) -> Vec<(u64, String, String)> {
    let page = get(c, server.url(&format!("/v1/runs/{run}/facts?limit=200"))).await;
    page["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["n"].as_u64().unwrap(),
                f["kind"].as_str().unwrap().to_string(),
                f["hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Issue 12 §2 "any server answers any request for any run" and "live
/// feed across servers": the review flow started on server 1 is listed,
/// read and streamed on server 2; resumed through server 1, its facts
/// reach server 2's subscriber live (LISTEN/NOTIFY, not the follower's
/// 2 s back-off); a second run is resumed through server 2, and
/// `Last-Event-ID` resumes a stream on either server.
#[tokio::test]
async fn two_servers_on_one_schema_serve_every_run() {
    let Some(db) = Schema::new() else { return };
    let (s1, s2) = (Server::start(&db, None, &[]), Server::start(&db, None, &[]));
    let c = client();

    let start = json!({"flow": review_flow(), "input": {"text": "shared"}, "wait": 10});
    let (status, v) = post(&c, s1.url("/v1/runs"), start.clone()).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();

    // Listed, read and replayed on server 2.
    let listed = get(&c, s2.url("/v1/runs?state=paused")).await;
    assert!(
        listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run"] == run.as_str()),
        "{listed}"
    );
    let on2 = get(&c, s2.url(&format!("/v1/runs/{run}"))).await;
    assert_eq!(on2["state"], "paused");
    assert_eq!(on2["pending"][0]["call"], call.as_str());
    let paused_facts = facts(&c, &s2, &run).await;
    let head = paused_facts.last().unwrap().0;
    assert_eq!(paused_facts, facts(&c, &s1, &run).await);

    // Server 2's stream, resumed after fact head - 1: the backlog is fact
    // `head`, then it waits.
    let r = c
        .get(s2.url(&format!("/v1/runs/{run}/events")))
        .header("Last-Event-ID", (head - 1).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream().eventsource();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("backlog")
        .unwrap()
        .unwrap();
    assert_eq!(first.id, head.to_string());
    // Long enough for the follower's own polling to back off to its 2 s
    // ceiling: what arrives sooner came by notification.
    tokio::time::sleep(Duration::from_millis(3500)).await;

    let resumed = Instant::now();
    let (status, v) = post(
        &c,
        s1.url(&format!("/v1/runs/{run}/resume")),
        json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("a live fact on server 2")
        .unwrap()
        .unwrap();
    let latency = resumed.elapsed();
    assert_eq!(next.id, (head + 1).to_string());
    assert!(
        latency < Duration::from_millis(1500),
        "server 2 saw server 1's fact after {latency:?}: not by notification"
    );
    let mut seen = vec![next.id.parse::<u64>().unwrap()];
    while let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        seen.push(e.id.parse().unwrap());
        if e.event == "End" {
            break;
        }
    }
    let all = facts(&c, &s2, &run).await;
    assert_eq!(all.last().unwrap().1, "End");
    assert_eq!(
        seen,
        ((head + 1)..=all.last().unwrap().0).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    assert_eq!(all[..paused_facts.len()], paused_facts[..]);
    assert_eq!(
        get(&c, s2.url(&format!("/v1/runs/{run}"))).await["state"],
        "completed"
    );

    // A second run: started on server 1, resumed through server 2.
    let (status, v) = post(&c, s1.url("/v1/runs"), start).await;
    assert_eq!(status, 201, "{v}");
    let run2 = v["run"].as_str().unwrap().to_string();
    let call2 = v["pending"][0]["call"].as_str().unwrap().to_string();
    let (status, v) = post(
        &c,
        s2.url(&format!("/v1/runs/{run2}/resume")),
        json!({"call": call2, "reply": {"Ok": {"decision": "rejected"}}, "wait": 10}),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["exit"], "returned", "{v}");
    let on1 = get(&c, s1.url(&format!("/v1/runs/{run2}"))).await;
    assert_eq!(on1["state"], "completed");
    let (_, verdict) = post(&c, s1.url(&format!("/v1/runs/{run2}/replay")), json!({})).await;
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
    // Last-Event-ID on server 1 for a run server 2 finished.
    let r = c
        .get(s1.url(&format!("/v1/runs/{run2}/events")))
        .header("Last-Event-ID", "2")
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream().eventsource();
    let e = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.id, "3");
    // Nothing drives either run: no lease is left behind.
    assert!(db.query("SELECT run FROM leases").is_empty());
}

/// flow.toml binding the triage example's Tools by absolute path, with
/// `resend = true` for the Python Tool, in `dir`; `None` when flow-llm is
/// not built beside `flow`.
fn triage_tools(dir: &Path) -> Option<(PathBuf, Value)> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_flow"));
    if !bin.parent().unwrap().join("flow-llm").is_file() {
        eprintln!("flow-llm is not built beside flow; build the workspace");
        return None;
    }
    let triage = example("triage");
    let toml = dir.join("flow.toml");
    std::fs::write(
        &toml,
        format!(
            "[tools.\"triage.json\"]\ncommand = \"python3 {}\"\nresend = true\n\n[tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
            triage.join("triage_tools.py").display()
        ),
    )
    .unwrap();
    let flow = serde_json::from_str(&std::fs::read_to_string(triage.join("triage.json")).unwrap())
        .unwrap();
    Some((toml, flow))
}

/// Issue 12 §2 "each run is driven by one server at a time" and
/// "failover": while server 1 has the run's Tool call out, server 2
/// refuses to resume it (409 naming server 1); server 1 is killed with
/// SIGKILL mid-call; server 2 takes the run over once the lease expires,
/// resends the call (`resend = true`, DESIGN §5) and drives the run on to
/// its review, which server 2 then finishes. Every fact acknowledged
/// before the kill is kept, byte for byte.
#[tokio::test]
async fn kill_9_of_the_driving_server_hands_its_run_to_another() {
    let Some(db) = Schema::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some((toml, flow)) = triage_tools(dir.path()) else {
        return;
    };
    let mut s1 = Server::start(&db, Some(&toml), &[("TRIAGE_DELAY_MS", "30000")]);
    let s2 = Server::start(&db, Some(&toml), &[]);
    let c = client();
    let (status, v) = post(
        &c,
        s1.url("/v1/runs"),
        json!({"flow": flow, "name": "triage.json", "input": {"ticket": "site down!", "customer": "Acme"}}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();

    // The Call to classify is durable (seen through server 2).
    let mut before = Vec::new();
    for _ in 0..200 {
        before = facts(&c, &s2, &run).await;
        if before.iter().any(|f| f.1 == "Call") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        before.len(),
        4,
        "Start, two Checkpoints and the Call: {before:?}"
    );

    // Driven by server 1: server 2 refuses to drive it too.
    let r = c
        .post(s2.url(&format!("/v1/runs/{run}/resume")))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["type"], "urn:flowd:problem:leased", "{problem}");
    assert_eq!(problem["holder"], s1.base.as_str(), "{problem}");
    assert_eq!(
        facts(&c, &s2, &run).await,
        before,
        "the refusal recorded nothing"
    );

    s1.kill_9();
    let killed = Instant::now();
    let mut taken_over = None;
    let mut state = Value::Null;
    for _ in 0..600 {
        let now = facts(&c, &s2, &run).await;
        if taken_over.is_none() && now.len() > before.len() {
            taken_over = Some(killed.elapsed());
        }
        state = get(&c, s2.url(&format!("/v1/runs/{run}"))).await["state"].clone();
        if state != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let taken_over = taken_over.expect("server 2 took the run over");
    assert_eq!(
        state, "paused",
        "the resent call answered; the review waits"
    );
    // Lease time, one scan, the resume and the Tool's reply, on a loaded
    // machine.
    assert!(
        taken_over < Duration::from_secs(LEASE_SECONDS + 6),
        "taken over after {taken_over:?}"
    );
    assert!(
        taken_over >= Duration::from_millis(LEASE_SECONDS * 1000 / 2),
        "taken over after {taken_over:?}, before the lease could have expired"
    );
    let after = facts(&c, &s2, &run).await;
    assert_eq!(
        after[..before.len()],
        before[..],
        "nothing acknowledged lost"
    );
    assert_eq!(after[before.len()].1, "Reply", "{after:?}");
    let pending = get(&c, s2.url(&format!("/v1/runs/{run}"))).await["pending"][0]["call"].clone();
    let (status, v) = post(
        &c,
        s2.url(&format!("/v1/runs/{run}/resume")),
        json!({"call": pending, "reply": {"Ok": {"decision": "send"}}, "wait": 10}),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    let done = facts(&c, &s2, &run).await;
    assert_eq!(done[..after.len()], after[..]);
    let (_, verdict) = post(&c, s2.url(&format!("/v1/runs/{run}/replay")), json!({})).await;
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
    assert!(db.query("SELECT run FROM leases").is_empty());
}

/// Issue 12 §2 "deadlines fire exactly once across the cluster": both
/// servers know a paused run's hitl deadline; when it passes, the call is
/// closed once (one Close "timeout") and the run goes on once.
#[tokio::test]
async fn a_hitl_deadline_fires_once_across_servers() {
    let Some(db) = Schema::new() else { return };
    let mut flow = review_flow();
    for n in flow["nodes"].as_array_mut().unwrap() {
        if n["id"] == "review" {
            n["timeout_seconds"] = json!(3);
            n["on_timeout"] = json!("skip");
        }
    }
    let s1 = Server::start(&db, None, &[]);
    let c = client();
    let (status, v) = post(
        &c,
        s1.url("/v1/runs"),
        json!({"flow": flow, "input": {"text": "late"}, "wait": 10}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // Started after the pause, server 2 arms the same deadline.
    let s2 = Server::start(&db, None, &[]);
    let mut state = Value::Null;
    for _ in 0..300 {
        state = get(&c, s2.url(&format!("/v1/runs/{run}"))).await["state"].clone();
        if state == "completed" || state == "faulted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "completed");
    // Both servers had their moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = facts(&c, &s1, &run).await;
    let closes = all.iter().filter(|f| f.1 == "Close").count();
    let ends = all.iter().filter(|f| f.1 == "End").count();
    assert_eq!((closes, ends), (1, 1), "{all:?}");
    let (_, verdict) = post(&c, s2.url(&format!("/v1/runs/{run}/replay")), json!({})).await;
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
}

/// Issue 12 §2 fencing: a server whose lease was taken (here by hand, as
/// a server that stalled past its lease would find it) stops driving the
/// run at its next renewal and appends nothing more — the Tool's late
/// reply is dropped; once the lease expires the run is taken over and
/// goes on.
#[tokio::test]
async fn a_server_whose_lease_was_taken_stops_driving() {
    let Some(db) = Schema::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some((toml, flow)) = triage_tools(dir.path()) else {
        return;
    };
    let s1 = Server::start(&db, Some(&toml), &[("TRIAGE_DELAY_MS", "4000")]);
    let c = client();
    let (status, v) = post(
        &c,
        s1.url("/v1/runs"),
        json!({"flow": flow, "name": "triage.json", "input": {"ticket": "site down!", "customer": "Acme"}}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let started = Instant::now();
    let run = v["run"].as_str().unwrap().to_string();
    let mut before = Vec::new();
    for _ in 0..200 {
        before = facts(&c, &s1, &run).await;
        if before.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(before.len(), 4, "{before:?}");
    assert_eq!(
        get(&c, s1.url(&format!("/v1/runs/{run}"))).await["driving"],
        true
    );
    db.query(&format!(
        "UPDATE leases SET holder = 'http://intruder#1', epoch = epoch + 1, expires_ms = expires_ms + 3600000 WHERE run = '{run}'"
    ));
    let mut driving = Value::Bool(true);
    for _ in 0..100 {
        driving = get(&c, s1.url(&format!("/v1/runs/{run}"))).await["driving"].clone();
        if driving == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(driving, false, "the fenced drive stopped");
    // Past the Tool's answer: nothing appended by the fenced server.
    let answer = Duration::from_millis(5500).saturating_sub(started.elapsed());
    tokio::time::sleep(answer).await;
    assert_eq!(
        facts(&c, &s1, &run).await,
        before,
        "no fact after the fence"
    );
    let r = c
        .post(s1.url(&format!("/v1/runs/{run}/resume")))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["holder"], "http://intruder", "{problem}");
    // The intruder "dies": its lease expires, the run is taken over.
    db.query(&format!(
        "UPDATE leases SET expires_ms = 0 WHERE run = '{run}'"
    ));
    let mut state = Value::Null;
    for _ in 0..400 {
        state = get(&c, s1.url(&format!("/v1/runs/{run}"))).await["state"].clone();
        if state != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "paused", "taken over, the call resent and answered");
    let after = facts(&c, &s1, &run).await;
    assert_eq!(after[..4], before[..]);
    assert_eq!(after[4].1, "Reply");
}
