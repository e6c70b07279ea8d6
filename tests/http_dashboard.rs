//! What the dashboard (issue 13) needs from the server, against the real
//! server on 127.0.0.1:0 with a real SQLite store per test: its page and
//! files (types, caching, CSP, 404s, no token needed), the runs list
//! (newest first, keyset paging, filters, flow, parent, times), the inbox's
//! deadlines, checkpoint states, chain verification, the state feed (ids,
//! `Last-Event-ID`, changes made by the `flow` CLI on the same store) and
//! the per-run stream's `state` frames.

mod common;

use common::review_flow;
use eventsource_stream::Eventsource;
use flow_store::{SqliteOptions, SqliteStore};
use flowd::http::auth::Tokens;
use flowd::http::{AppState, ServeOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct TestApp {
    base: String,
    client: reqwest::Client,
    shutdown: CancellationToken,
    handle: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The store's file: every run in it reads back verified when the
    /// app is dropped (as `common::TestApp` and a real server's check).
    db: std::path::PathBuf,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if !std::thread::panicking() && self.db.exists() {
            common::verify_store(&self.db);
        }
    }
}

impl TestApp {
    async fn start(dir: &Path, opts: ServeOptions) -> TestApp {
        let store =
            Arc::new(SqliteStore::open(dir.join("flow.db"), SqliteOptions::default()).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let state = AppState::new(store, opts, shutdown.clone());
        let handle = tokio::spawn(flowd::http::run(listener, shutdown.clone(), state));
        TestApp {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            shutdown,
            handle: Some(handle),
            db: dir.join("flow.db"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        if status >= 400 {
            assert_eq!(r.headers()["content-type"], "application/problem+json");
        }
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// Starts a review run and waits for its pause.
    async fn paused_review(&self, text: &str) -> (String, String) {
        let (s, v) = self
            .post(
                "/v1/runs",
                &json!({"flow": review_flow(), "name": "review.json", "input": {"text": text}, "wait": 10}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["state"], "paused", "{v}");
        (
            v["run"].as_str().unwrap().to_string(),
            v["pending"][0]["call"].as_str().unwrap().to_string(),
        )
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        let handle = self.handle.take().unwrap();
        tokio::time::timeout(Duration::from_secs(20), handle)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn dashboard_page_and_files_are_served_typed_cached_and_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ServeOptions {
        tokens: Some(Tokens::parse("reader-token-0123456789 read\n").unwrap()),
        ..ServeOptions::default()
    };
    let app = TestApp::start(dir.path(), opts).await;
    let r = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the page needs no token");
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&r, "cache-control"), "no-cache");
    assert!(header(&r, "content-security-policy").contains("script-src 'self'"));
    assert_eq!(header(&r, "x-content-type-options"), "nosniff");
    let etag = header(&r, "etag").to_string();
    let html = r.text().await.unwrap();
    let end = html.find("/app.js\"").expect("the page loads its module") + "/app.js".len();
    let start = html[..end].rfind("/assets/").unwrap();
    let module = &html[start..end];
    let version = module.split('/').nth(2).unwrap().to_string();
    assert_eq!(version.len(), 12, "{module}");

    let r = app
        .client
        .get(app.url("/"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);

    for (file, ct) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("app.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let r = app
            .client
            .get(app.url(&format!("/assets/{version}/{file}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{file}");
        assert_eq!(header(&r, "content-type"), ct);
        assert_eq!(
            header(&r, "cache-control"),
            "public, max-age=31536000, immutable"
        );
        assert!(!r.bytes().await.unwrap().is_empty(), "{file} is embedded");
    }
    for bad in [
        format!("/assets/{version}/nope.js"),
        "/assets/000000000000/app.js".to_string(),
        "/assets/app.js".to_string(),
        format!("/assets/{version}/../index.html"),
    ] {
        let r = app.client.get(app.url(&bad)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{bad}");
        assert_eq!(header(&r, "content-type"), "application/problem+json");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], 404);
    }
    // The API behind it still needs the token.
    let r = app.client.get(app.url("/v1/runs")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = app
        .client
        .get(app.url("/v1/runs"))
        .bearer_auth("reader-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    app.stop().await;
}

#[tokio::test]
async fn runs_list_newest_first_with_flow_parent_times_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let mut runs = Vec::new();
    for i in 0..3 {
        runs.push(app.paused_review(&format!("draft {i}")).await.0);
    }
    // A fork of the first run from its first checkpoint.
    let (s, page) = app
        .get(&format!("/v1/runs/{}/facts?kind=Checkpoint", runs[0]))
        .await;
    assert_eq!(s, 200);
    let cp = page["facts"][0]["n"].as_u64().unwrap();
    let (s, f) = app
        .post(
            &format!("/v1/runs/{}/fork", runs[0]),
            &json!({"checkpoint": cp, "wait": 10}),
        )
        .await;
    assert_eq!(s, 201, "{f}");
    let fork = f["run"].as_str().unwrap().to_string();

    let (s, v) = app.get("/v1/runs?order=newest&limit=2").await;
    assert_eq!(s, 200, "{v}");
    let ids: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [fork.as_str(), runs[2].as_str()]);
    let top = &v["runs"][0];
    assert_eq!(top["parent"], json!({"run": runs[0], "checkpoint": cp}));
    assert_eq!(top["state"], "paused");
    assert_eq!(
        top["flow"],
        json!({"id": "review-flow", "name": "Human review"})
    );
    assert!(top["createdMs"].as_i64().unwrap() > 1_600_000_000_000);
    assert!(top["updatedMs"].as_i64() >= top["createdMs"].as_i64());
    assert_eq!(top["entry"]["module"], "review.json");
    assert_eq!(top["hostDecision"]["kind"], "pause");
    assert_eq!(v["nextAfter"], Value::Null);
    let before = v["nextBefore"].as_str().unwrap();
    let (_, v2) = app
        .get(&format!("/v1/runs?order=newest&limit=2&before={before}"))
        .await;
    let ids2: Vec<&str> = v2["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(ids2, [runs[1].as_str(), runs[0].as_str()]);
    assert_eq!(v2["nextBefore"], Value::Null);

    // Discovery order stays the default, with the same extra fields.
    let (_, v) = app.get("/v1/runs").await;
    assert_eq!(v["runs"][0]["run"], runs[0].as_str());
    assert_eq!(v["runs"][0]["record"], "incomplete");
    assert_eq!(v["runs"][3]["parent"]["run"], runs[0].as_str());

    // Filters: flow id, id prefix (a whole id names one run), state.
    let (_, v) = app.get("/v1/runs?flow=review-flow&order=newest").await;
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    let (_, v) = app.get("/v1/runs?flow=other-flow").await;
    assert_eq!(v["runs"], json!([]));
    // An index lookup (issue 38): no row is looked at that is not listed.
    assert_eq!(v["scanned"], 0);
    let (_, v) = app.get(&format!("/v1/runs?prefix={}", runs[1])).await;
    assert_eq!(v["runs"].as_array().unwrap().len(), 1);
    assert_eq!(v["runs"][0]["run"], runs[1].as_str());
    let (_, v) = app.get("/v1/runs?state=completed").await;
    assert_eq!(v["runs"], json!([]));
    // A flow filter with a page smaller than the matches pages on.
    let (_, v) = app.get("/v1/runs?flow=review-flow&limit=3").await;
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    let after = v["nextAfter"].as_str().unwrap();
    let (_, v) = app
        .get(&format!("/v1/runs?flow=review-flow&limit=3&after={after}"))
        .await;
    assert_eq!(v["runs"][0]["run"], fork.as_str());
    assert_eq!(v["nextAfter"], Value::Null);

    for bad in [
        "/v1/runs?order=sideways",
        "/v1/runs?before=run-00000000000000000000000000",
        "/v1/runs?order=newest&after=run-00000000000000000000000000",
        "/v1/runs?prefix=RUN",
        "/v1/runs?prefix=",
        "/v1/runs?flow=",
        "/v1/runs?limit=0",
        "/v1/runs?order=newest&before=nope",
    ] {
        let (s, v) = app.get(bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
    }
    app.stop().await;
}

#[tokio::test]
async fn inbox_lists_typed_calls_with_their_deadlines() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let mut flow = review_flow();
    for n in flow["nodes"].as_array_mut().unwrap() {
        if n["id"] == "review" {
            n["timeout_seconds"] = json!(3600);
        }
    }
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (s, v) = app
        .post(
            "/v1/runs",
            &json!({"flow": flow, "input": {"text": "due soon"}, "wait": 10}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let run = v["run"].as_str().unwrap();
    let (plain, _) = app.paused_review("no deadline").await;
    let (s, inbox) = app.get("/v1/calls?state=open").await;
    assert_eq!(s, 200);
    let calls = inbox["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let c = calls.iter().find(|c| c["run"] == run).unwrap();
    let due = c["dueMs"].as_i64().expect("a deadline");
    assert!(
        due >= before + 3_600_000 && due < before + 3_700_000,
        "{due}"
    );
    assert!(c["prompt"].as_str().unwrap().contains("due soon"));
    assert_eq!(c["tool"], "std/human#input");
    assert!(c["schema"].is_object());
    assert!(c["sinceMs"].as_i64().unwrap() >= before);
    let p = calls.iter().find(|c| c["run"] == plain.as_str()).unwrap();
    assert_eq!(p["dueMs"], Value::Null);
    let (s, _) = app.get("/v1/calls?state=closed").await;
    assert_eq!(s, 400);
    app.stop().await;
}

#[tokio::test]
async fn checkpoint_states_and_chain_verification() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let (run, _) = app.paused_review("check me").await;
    let (_, page) = app
        .get(&format!("/v1/runs/{run}/facts?kind=Checkpoint"))
        .await;
    let cps: Vec<u64> = page["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["n"].as_u64().unwrap())
        .collect();
    assert!(cps.len() >= 2, "{page}");
    let (s, first) = app
        .get(&format!("/v1/runs/{run}/checkpoints/{}", cps[0]))
        .await;
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["state"]["text"], "check me");
    assert_eq!(first["fact"], cps[0]);
    assert_eq!(first["task"], "root");
    // A later checkpoint, stored as a delta, comes back whole.
    let (_, last) = app
        .get(&format!(
            "/v1/runs/{run}/checkpoints/{}",
            cps[cps.len() - 1]
        ))
        .await;
    assert_eq!(last["state"]["text"], "check me");
    assert_eq!(last["state"]["draft"], "check me");
    for bad in [
        format!("/v1/runs/{run}/checkpoints/1"),
        format!("/v1/runs/{run}/checkpoints/0"),
        format!("/v1/runs/{run}/checkpoints/9999"),
    ] {
        let (s, v) = app.get(&bad).await;
        assert_eq!(s, 404, "{bad}: {v}");
    }
    let (s, _) = app.get(&format!("/v1/runs/{run}/checkpoints/x")).await;
    assert_eq!(s, 400);

    let (s, v) = app.get(&format!("/v1/runs/{run}/verify")).await;
    assert_eq!(s, 200);
    assert_eq!(v["verified"], true);
    let (_, view) = app.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(v["head"], view["lastFact"]);
    assert_eq!(v["facts"], view["lastFact"]["n"]);
    let (s, _) = app
        .get("/v1/runs/run-00000000000000000000000000/verify")
        .await;
    assert_eq!(s, 404);
    app.stop().await;
}

/// Reads SSE events (event, id, data) until `pred` holds for the last one.
async fn read_until(
    s: &mut (
             impl futures_util::Stream<
        Item = Result<
            eventsource_stream::Event,
            eventsource_stream::EventStreamError<reqwest::Error>,
        >,
    > + Unpin
         ),
    pred: impl Fn(&eventsource_stream::Event) -> bool,
) -> Vec<eventsource_stream::Event> {
    let mut out = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(15), s.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .unwrap();
        let done = pred(&e);
        out.push(e);
        if done {
            return out;
        }
    }
}

#[tokio::test]
async fn state_feed_has_ids_and_resumes_after_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let r = app.client.get(app.url("/v1/events")).send().await.unwrap();
    let mut s = r.bytes_stream().eventsource();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (run, call) = app.paused_review("feed").await;
    let got = read_until(&mut s, |e| e.data.contains("\"paused\"")).await;
    let mine: Vec<&eventsource_stream::Event> = got
        .iter()
        .filter(|e| e.data.contains(run.as_str()))
        .collect();
    let states: Vec<String> = mine
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(states, ["running", "paused"]);
    let first: Value = serde_json::from_str(&mine[0].data).unwrap();
    assert_eq!(first["source"], "server");
    assert_eq!(first["started"], true);
    let paused: Value = serde_json::from_str(&mine[1].data).unwrap();
    assert!(paused["lastFact"]["n"].as_u64().unwrap() > 1);
    assert!(mine[0].id.contains('-') && mine[0].id != mine[1].id);

    // Reconnect after the first: exactly the ones after it.
    let (st, v) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
        )
        .await;
    assert_eq!(st, 202, "{v}");
    let r = app
        .client
        .get(app.url("/v1/events"))
        .header("Last-Event-ID", &mine[0].id)
        .send()
        .await
        .unwrap();
    let mut again = r.bytes_stream().eventsource();
    let replay = read_until(&mut again, |e| e.data.contains("\"completed\"")).await;
    assert_eq!(replay[0].id, mine[1].id, "the next one after the id");
    assert!(replay.iter().all(|e| e.event == "state"));

    // An id of another server: resync first, then live.
    let r = app
        .client
        .get(app.url("/v1/events"))
        .header("Last-Event-ID", "1-5")
        .send()
        .await
        .unwrap();
    let mut other = r.bytes_stream().eventsource();
    let e = read_until(&mut other, |_| true).await;
    assert_eq!(e[0].event, "resync");
    let r = app
        .client
        .get(app.url("/v1/events"))
        .header("Last-Event-ID", "nonsense")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    app.stop().await;
}

/// Issue 13: the feed includes runs started by the CLI on the same store
/// (another process: the real `flow` binary).
#[tokio::test]
async fn state_feed_reports_runs_the_cli_started_on_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let r = app.client.get(app.url("/v1/events")).send().await.unwrap();
    let mut s = r.bytes_stream().eventsource();
    let flow =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/review/review.json");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .arg("--data")
        .arg(dir.path())
        .args(["--json", "run"])
        .arg(&flow)
        .args(["--input", r#"{"text":"from the CLI"}"#])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "paused: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    let got = read_until(&mut s, |e| e.data.contains(run.as_str())).await;
    let d: Value = serde_json::from_str(&got.last().unwrap().data).unwrap();
    assert_eq!(d["state"], "paused");
    assert_eq!(d["source"], "store");
    assert!(d["lastFact"]["n"].as_u64().unwrap() > 1);
    // The CLI answers it; the feed says completed, once.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .arg("--data")
        .arg(dir.path())
        .args([
            "resume",
            &run,
            "--call",
            v["pending"][0]["call"].as_str().unwrap(),
        ])
        .args(["--reply", r#"{"Ok":{"decision":"approved"}}"#])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let got = read_until(&mut s, |e| e.data.contains("\"completed\"")).await;
    let d: Value = serde_json::from_str(&got.last().unwrap().data).unwrap();
    assert_eq!(d["run"], run.as_str());
    // Nothing more about it within two polls.
    let more = tokio::time::timeout(Duration::from_millis(1200), s.next()).await;
    assert!(more.is_err(), "no duplicate: {more:?}");
    app.stop().await;
}

#[tokio::test]
async fn run_stream_says_paused_after_the_facts_that_led_there() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path(), ServeOptions::default()).await;
    let (run, call) = app.paused_review("watch").await;
    let (_, view) = app.get(&format!("/v1/runs/{run}")).await;
    let head = view["lastFact"]["n"].as_u64().unwrap();
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{run}/events?states=true")))
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream().eventsource();
    let got = read_until(&mut s, |e| e.event == "state").await;
    assert_eq!(got.len() as u64, head + 1, "every fact, then the pause");
    let d: Value = serde_json::from_str(&got.last().unwrap().data).unwrap();
    assert_eq!(d["state"], "paused");
    assert_eq!(d["lastFact"]["n"], head);
    assert_eq!(got.last().unwrap().id, head.to_string(), "no id of its own");
    // A client that already has every fact hears of the pause at once.
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{run}/events?states=true")))
        .header("Last-Event-ID", head.to_string())
        .send()
        .await
        .unwrap();
    let mut caught_up = r.bytes_stream().eventsource();
    let first = tokio::time::timeout(Duration::from_secs(3), caught_up.next())
        .await
        .expect("the pause without waiting for a keep-alive")
        .unwrap()
        .unwrap();
    assert_eq!(first.event, "state");
    assert!(first.data.contains("\"paused\""));
    drop(caught_up);
    let (st, _) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}),
        )
        .await;
    assert_eq!(st, 202);
    let rest = read_until(&mut s, |e| e.event == "End").await;
    // Whether "running" is said depends on whether the drive ended in its
    // first step; any state frame comes after the fact it names.
    let mut sent = head;
    for e in &rest {
        if e.event == "state" {
            let d: Value = serde_json::from_str(&e.data).unwrap();
            assert!(d["lastFact"]["n"].as_u64().unwrap() <= sent, "{rest:?}");
            assert_ne!(d["state"], "paused", "{rest:?}");
        } else {
            sent = e.id.parse().unwrap();
        }
    }
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .unwrap();
    assert!(end.is_none(), "the stream ends after End");

    // Without `states`, only facts.
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap();
    let all: Vec<_> = r.bytes_stream().eventsource().collect().await;
    assert!(all.iter().all(|e| e.as_ref().unwrap().event != "state"));
    app.stop().await;
}

/// A reply that does not decode is refused with 422 and nothing recorded,
/// also for a run whose Tools are processes (stopping them awaits: the
/// refusal must not become a 202). The dashboard shows this refusal at
/// the field it names.
#[tokio::test]
async fn a_bad_reply_to_a_run_with_tool_processes_is_422() {
    let dir = tempfile::tempdir().unwrap();
    let tools =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage/flow.toml");
    let (mut child, base) = common::serve_with(dir.path(), Some(&tools), &[]);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let flow: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage/triage.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v: Value = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "triage.json", "input": {"ticket": "The site is down", "customer": "Acme"}, "wait": 20}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap();
    let call = v["pending"][0]["call"].as_str().unwrap();
    let before: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
    let r = client
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": call, "reply": {"Ok": {"decision": "maybe"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("$.decision"), "{p}");
    let after: Value = common::get_json(&client, format!("{base}/v1/runs/{run}")).await;
    assert_eq!(after["lastFact"], before["lastFact"], "nothing recorded");
    assert_eq!(after["state"], "paused");
    // The run is not left claimed: a good reply goes through.
    let r = client
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": call, "reply": {"Ok": {"decision": "send"}}, "wait": 20}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "completed", "{v}");
    child.kill().unwrap();
    child.wait().unwrap();
}
