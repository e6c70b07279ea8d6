//! The HTTP API against the real server on 127.0.0.1:0 with a real client
//! and a real SQLite store in a temp dir per test.

mod common;

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

/// One server on a store directory; `stop` shuts it down gracefully.
struct TestApp {
    base: String,
    client: reqwest::Client,
    shutdown: CancellationToken,
    handle: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    token: Option<String>,
    /// The store's file: every run in it reads back verified when the
    /// app is dropped (as `common::Server` checks a real server's).
    db: PathBuf,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if !std::thread::panicking() && self.db.exists() {
            common::verify_store(&self.db);
        }
    }
}

fn open_store(dir: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(dir.join("flow.db"), SqliteOptions::default()).unwrap())
}

impl TestApp {
    async fn start(dir: &Path) -> TestApp {
        TestApp::with(dir, ServeOptions::default()).await
    }

    async fn with(dir: &Path, opts: ServeOptions) -> TestApp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let state = AppState::new(open_store(dir), opts, shutdown.clone());
        let handle = tokio::spawn(flowd::http::run(listener, shutdown.clone(), state));
        TestApp {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            shutdown,
            handle: Some(handle),
            token: None,
            db: dir.join("flow.db"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .auth(self.client.get(self.url(path)))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string()).await
    }

    async fn post_raw(&self, path: &str, body: String) -> (u16, Value) {
        let r = self
            .auth(self.client.post(self.url(path)))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = r.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            assert_eq!(ct, "application/problem+json", "{status} {v}");
            assert_eq!(v["status"], status, "{v}");
            assert!(
                v["type"]
                    .as_str()
                    .unwrap()
                    .starts_with("urn:flowd:problem:")
            );
            assert!(v["title"].is_string() && v["detail"].is_string(), "{v}");
        }
        (status, v)
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        let handle = self.handle.take().expect("a running app");
        tokio::time::timeout(Duration::from_secs(20), handle)
            .await
            .expect("the server stops within its drain deadline")
            .unwrap()
            .unwrap();
    }

    /// Polls a run until `pred` holds.
    async fn until(&self, run: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..200 {
            let (s, v) = self.get(&format!("/v1/runs/{run}")).await;
            assert_eq!(s, 200, "{v}");
            if pred(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("run {run} never reached the expected state");
    }

    async fn events(
        &self,
        path: &str,
        last_id: Option<&str>,
        n: usize,
    ) -> Vec<(u64, String, Value)> {
        sse(
            &self.client,
            &self.url(path),
            self.token.as_deref(),
            last_id,
            n,
        )
        .await
    }
}

/// Collects SSE events (id, event, data) until the stream ends or `n`
/// arrived.
async fn sse(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    last_id: Option<&str>,
    n: usize,
) -> Vec<(u64, String, Value)> {
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(id) = last_id {
        req = req.header("Last-Event-ID", id);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut s = r.bytes_stream().eventsource();
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(20), s.next()).await {
            Ok(Some(Ok(e))) => out.push((
                e.id.parse().unwrap(),
                e.event,
                serde_json::from_str(&e.data).unwrap(),
            )),
            Ok(Some(Err(e))) => panic!("SSE error: {e}"),
            Ok(None) => break,
            Err(_) => panic!("SSE stalled after {} events", out.len()),
        }
    }
    out
}

/// Answers a paused review run's call with `decision` (`wait` 10 s): the
/// 202's body.
async fn answer_review(app: &TestApp, run: &str, call: &str, decision: &str) -> Value {
    let (s, r) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": decision}}, "wait": 10}),
        )
        .await;
    assert_eq!(s, 202, "{r}");
    r
}

async fn start_review(app: &TestApp, wait: u64) -> Value {
    let (s, v) = app
        .post(
            "/v1/runs",
            &json!({"flow": common::review_flow(), "input": {"text": "hello"}, "wait": wait}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    v
}

#[tokio::test]
async fn quickstart_start_watch_inbox_resume_complete() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    assert_eq!(v["state"], "paused", "{v}");
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();

    // The run view and the inbox show the pause.
    let view = app.until(&run, |v| v["state"] == "paused").await;
    assert_eq!(view["pending"][0]["call"], call.as_str());
    assert_eq!(view["pending"][0]["tool"], "std/human#input");
    let (s, inbox) = app.get("/v1/calls?state=open").await;
    assert_eq!(s, 200);
    let item = inbox["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["run"] == run.as_str())
        .expect("the paused call is in the inbox")
        .clone();
    assert_eq!(item["call"], call.as_str());
    assert!(item["prompt"].as_str().unwrap().contains("hello"));
    assert!(item["schema"].is_object());
    // /metrics counts it among the open calls: the inbox's count.
    let open = inbox["total"].as_u64().unwrap();
    let r = app.client.get(app.url("/metrics")).send().await.unwrap();
    let text = r.text().await.unwrap();
    assert!(
        text.contains(&format!("flowd_open_calls {open}\n")) && open >= 1,
        "{open}: {text}"
    );

    // Watch: backlog first, then live.
    let backlog_len = view["lastFact"]["n"].as_u64().unwrap() as usize;
    let watcher = {
        let client = app.client.clone();
        let url = app.url(&format!("/v1/runs/{run}/events"));
        tokio::spawn(async move { sse(&client, &url, None, None, usize::MAX).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let r = answer_review(&app, &run, &call, "approved").await;
    assert_eq!(r["state"], "completed", "{r}");
    assert_eq!(r["exit"], "success");

    let events = tokio::time::timeout(Duration::from_secs(20), watcher)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<u64> = events.iter().map(|e| e.0).collect();
    let want: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, want, "no gap, no duplicate");
    assert!(ids.len() > backlog_len, "live facts followed the backlog");
    assert_eq!(events[0].1, "Start");
    assert_eq!(events.last().unwrap().1, "End", "the stream ends after End");
    for (n, kind, data) in &events {
        assert_eq!(data["n"], *n);
        assert_eq!(data["fact"], kind.as_str());
    }

    let done = app.until(&run, |v| v["state"] == "completed").await;
    assert_eq!(done["exit"], "success");
    assert_eq!(done["pending"], json!([]));
    assert_eq!(done["ending"], "completed");

    // Facts page, replay, sources, blobs.
    let (s, page) = app.get(&format!("/v1/runs/{run}/facts?limit=2")).await;
    assert_eq!(s, 200);
    assert_eq!(page["facts"].as_array().unwrap().len(), 2);
    assert_eq!(page["page"]["nextOffset"], 2);
    let (s, page) = app.get(&format!("/v1/runs/{run}/facts?kind=Call")).await;
    assert_eq!(s, 200);
    assert_eq!(page["facts"].as_array().unwrap().len(), 1);
    let (s, rep) = app
        .post(&format!("/v1/runs/{run}/replay"), &json!({}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(rep["verdict"], "matched");
    let (s, src) = app.get(&format!("/v1/runs/{run}/sources/flow.json")).await;
    assert_eq!(s, 200);
    assert_eq!(src["id"], "review-flow");
    let (_, start) = app.get(&format!("/v1/runs/{run}/facts?kind=Start")).await;
    let hash = start["facts"][0]["fact"]["sources"][0]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let r = app
        .client
        .get(app.url(&format!("/v1/blobs/{hash}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let blob: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(blob["id"], "review-flow");

    // A second resume of the ended run: 409.
    let (s, _) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}),
        )
        .await;
    assert_eq!(s, 409);

    // Metrics count what happened.
    let r = app.client.get(app.url("/metrics")).send().await.unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("flowd_runs_started_total 1"), "{text}");
    assert!(text.contains("flowd_runs{state=\"completed\"} 1"), "{text}");
    // One reply admitted (the refused second resume is not timed), and
    // every drive commit timed (issue 38 §5).
    assert!(
        text.contains("flowd_resume_duration_seconds_count 1\n"),
        "{text}"
    );
    let commits = text
        .lines()
        .find_map(|l| l.strip_prefix("flowd_step_commit_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        commits >= 2,
        "a start and a resume commit at least once each: {text}"
    );
    assert!(text.contains("flowd_leases_held 0\n"), "{text}");
    assert!(text.contains("flowd_open_calls 0\n"), "answered: {text}");
    app.stop().await;
}

#[tokio::test]
async fn errors_are_problem_json() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::with(
        dir.path(),
        ServeOptions {
            body_limit: 64 * 1024,
            ..ServeOptions::default()
        },
    )
    .await;
    // 404 unknown run; 400 for something that is not a run id.
    let unknown = flow_store::RunId::from_parts(1, [0; 10]).to_string();
    let (s, v) = app.get(&format!("/v1/runs/{unknown}")).await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["status"], 404);
    let (s, v) = app.get("/v1/runs/nope").await;
    assert_eq!(s, 404);
    assert!(v["detail"].as_str().unwrap().contains("ULID"), "{v}");
    let (s, _) = app
        .post(
            &format!("/v1/runs/{unknown}/resume"),
            &json!({"call": "c1:root#1", "reply": {"Ok": {}}}),
        )
        .await;
    assert_eq!(s, 404);
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{unknown}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // 400 malformed JSON, duplicate keys too (strict parser).
    let (s, v) = app.post_raw("/v1/runs", "{\"flow\": ".into()).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("not valid JSON"));
    let (s, _) = app
        .post_raw("/v1/check", "{\"flow\": {}, \"flow\": {}}".into())
        .await;
    assert_eq!(s, 400);
    // 422 wrong shape; 422 a program that does not check, with diagnostics.
    let (s, _) = app.post("/v1/runs", &json!({"flo": {}})).await;
    assert_eq!(s, 422);
    let (s, v) = app
        .post("/v1/runs", &json!({"flow": {"nodes": []}, "input": {}}))
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(!v["diagnostics"].as_array().unwrap().is_empty(), "{v}");
    // 413 oversized.
    let big = json!({"flow": common::review_flow(), "input": {"text": "x".repeat(100 * 1024)}});
    let (s, v) = app.post("/v1/runs", &big).await;
    assert_eq!(s, 413, "{v}");

    // 409 not open; 422 a reply that does not decode, nothing recorded.
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let before = app.until(&run, |_| true).await["lastFact"]["n"].clone();
    let (s, v) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": "c1:root#99", "reply": {"Ok": {"decision": "approved"}}}),
        )
        .await;
    assert_eq!(s, 409, "{v}");
    let (s, v) = app
        .post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": "maybe"}}}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    let after = app.until(&run, |v| v["state"] == "paused").await;
    assert_eq!(
        after["lastFact"]["n"], before,
        "a refused reply records nothing"
    );
    // Unknown endpoint and bad query: our envelope too.
    let (s, v) = app.get("/v1/nothing").await;
    assert_eq!(s, 404);
    assert_eq!(v["status"], 404);
    let (s, v) = app.get("/v1/runs?limit=0").await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = app.get("/v1/runs?limit=abc").await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["status"], 400);
    let (s, _) = app.get("/v1/blobs/nothex").await;
    assert_eq!(s, 404);
    let (s, _) = app.post("/v1/check", &json!({"flow": [1]})).await;
    assert_eq!(s, 422);
    // Module names with control characters (issue 17).
    let (s, v) = app
        .post(
            "/v1/check",
            &json!({"flow": common::review_flow(), "name": "a\u{1b}[2J.json"}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    let (s, v) = app
        .post(
            "/v1/check",
            &json!({"flow": common::review_flow(), "modules": {"b\u{7}.json": common::review_flow()}}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    let (s, _) = app
        .get(&format!("/v1/blobs/blake3:{}", "0".repeat(64)))
        .await;
    assert_eq!(s, 404);
    // A method an endpoint does not take (405, with Allow) and a missing
    // file under /docs/ (404): problem+json as well (issue 17).
    for (method, path, status) in [
        (reqwest::Method::DELETE, "/v1/runs", 405),
        (reqwest::Method::PUT, "/v1/check", 405),
        (reqwest::Method::POST, "/healthz", 405),
        (reqwest::Method::GET, "/docs/no-such-file.js", 404),
        (reqwest::Method::GET, "/docs/nested/nothing", 404),
    ] {
        let r = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        if status == 405 {
            assert!(r.headers().contains_key("allow"), "{method} {path}");
        }
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{method} {path}"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], status, "{method} {path}: {v}");
    }
    let r = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the API docs page is still served");
    app.stop().await;
}

#[tokio::test]
async fn sse_resumes_with_last_event_id_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    answer_review(&app, &run, &call, "rejected").await;
    let all = app
        .events(&format!("/v1/runs/{run}/events"), None, usize::MAX)
        .await;
    let total = all.len() as u64;
    assert!(total >= 4);
    // Reconnect after fact 2: exactly 3..=total.
    let rest = app
        .events(&format!("/v1/runs/{run}/events"), Some("2"), usize::MAX)
        .await;
    assert_eq!(
        rest.iter().map(|e| e.0).collect::<Vec<_>>(),
        (3..=total).collect::<Vec<_>>()
    );
    assert_eq!(rest, all[2..].to_vec());
    let rest = app
        .events(
            &format!("/v1/runs/{run}/events?after={}", total - 1),
            None,
            usize::MAX,
        )
        .await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].1, "End");
    // Bad Last-Event-ID: 400; unknown run: 404 before any stream.
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{run}/events")))
        .header("Last-Event-ID", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    app.stop().await;
}

#[tokio::test]
async fn discovery_pages_and_state_filter() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            start_review(&app, 10).await["run"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let (s, p1) = app.get("/v1/runs?limit=2").await;
    assert_eq!(s, 200, "{p1}");
    assert_eq!(p1["runs"].as_array().unwrap().len(), 2);
    let next = p1["nextAfter"].as_str().unwrap();
    let (_, p2) = app.get(&format!("/v1/runs?limit=2&after={next}")).await;
    assert_eq!(p2["runs"].as_array().unwrap().len(), 1);
    assert!(p2["nextAfter"].is_null());
    let mut seen: Vec<String> = p1["runs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["runs"].as_array().unwrap())
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    seen.sort();
    runs.sort();
    assert_eq!(seen, runs);
    let (_, paused) = app.get("/v1/runs?state=paused").await;
    assert_eq!(paused["runs"].as_array().unwrap().len(), 3);
    let (_, done) = app.get("/v1/runs?state=completed").await;
    assert_eq!(done["runs"].as_array().unwrap().len(), 0);
    let (s, _) = app.get("/v1/runs?state=sleeping").await;
    assert_eq!(s, 400);
    app.stop().await;
}

#[tokio::test]
async fn fork_and_check_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let (s, v) = app
        .post("/v1/check", &json!({"flow": common::review_flow()}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["ok"], true, "{v}");
    let (s, v) = app
        .post(
            "/v1/check",
            &json!({"flow": {"spec_version": "1.0.0", "nodes": []}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["ok"], false, "{v}");

    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let (_, cps) = app
        .get(&format!("/v1/runs/{run}/facts?kind=Checkpoint"))
        .await;
    let cp = cps["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"]["node"] == "review")
        .expect("a checkpoint at review")["n"]
        .as_u64()
        .unwrap();
    let (s, f) = app
        .post(
            &format!("/v1/runs/{run}/fork"),
            &json!({"checkpoint": cp, "set": {"draft": "forked"}, "wait": 10}),
        )
        .await;
    assert_eq!(s, 201, "{f}");
    assert_eq!(f["state"], "paused", "{f}");
    let child = f["run"].as_str().unwrap().to_string();
    assert!(
        f["pending"][0]["args"]["prompt"]
            .as_str()
            .unwrap()
            .contains("forked"),
        "{f}"
    );
    let parent = app.until(&run, |_| true).await;
    assert_eq!(parent["children"][0]["run"], child.as_str(), "{parent}");
    let c = app.until(&child, |_| true).await;
    assert_eq!(c["parent"]["run"], run.as_str());
    // A fork of the fork: its lineage names both steps, nearest first.
    let (_, ccps) = app
        .get(&format!("/v1/runs/{child}/facts?kind=Checkpoint"))
        .await;
    let ccp = ccps["facts"][0]["n"].as_u64().unwrap();
    let (s, g) = app
        .post(
            &format!("/v1/runs/{child}/fork"),
            &json!({"checkpoint": ccp, "wait": 10}),
        )
        .await;
    assert_eq!(s, 201, "{g}");
    let grandchild = g["run"].as_str().unwrap().to_string();
    let (s, l) = app.get(&format!("/v1/runs/{grandchild}/lineage")).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(
        l,
        json!({"run": grandchild, "truncated": false, "ancestors": [
            {"run": grandchild, "from": child, "kind": "fork", "checkpoint": ccp},
            {"run": child, "from": run, "kind": "fork", "checkpoint": cp},
        ]})
    );
    let (s, l) = app.get(&format!("/v1/runs/{run}/lineage")).await;
    assert_eq!((s, &l["ancestors"]), (200, &json!([])), "{l}");
    let (s, _) = app
        .get("/v1/runs/run-00000000000000000000000000/lineage")
        .await;
    assert_eq!(s, 404);
    let (s, _) = app.get("/v1/runs/nope/lineage").await;
    assert_eq!(s, 404);
    // 404 for a checkpoint that is not one; 422 for a set that does not decode.
    let (s, _) = app
        .post(&format!("/v1/runs/{run}/fork"), &json!({"checkpoint": 999}))
        .await;
    assert_eq!(s, 404);
    let (s, _) = app
        .post(
            &format!("/v1/runs/{run}/fork"),
            &json!({"checkpoint": cp, "set": {"text": 5}}),
        )
        .await;
    assert_eq!(s, 422);
    app.stop().await;
}

#[tokio::test]
async fn auth_by_scope() {
    let dir = tempfile::tempdir().unwrap();
    let reader = "read-token-0123456789abcdef";
    let runner = "run-token-0123456789abcdef";
    let tokens = Tokens::parse(&format!("# tokens\n{reader} read\n{runner} read,run\n")).unwrap();
    let mut app = TestApp::with(
        dir.path(),
        ServeOptions {
            tokens: Some(tokens),
            ..ServeOptions::default()
        },
    )
    .await;
    let body = json!({"flow": common::review_flow(), "input": {"text": "hi"}});
    let (s, v) = app.get("/v1/runs").await;
    assert_eq!(s, 401, "{v}");
    let (s, _) = app.post("/v1/runs", &body).await;
    assert_eq!(s, 401);
    app.token = Some("not-a-token-0123456789".into());
    let (s, _) = app.get("/v1/runs").await;
    assert_eq!(s, 401);
    app.token = Some(reader.into());
    let (s, _) = app.get("/v1/runs").await;
    assert_eq!(s, 200);
    let (s, v) = app.post("/v1/runs", &body).await;
    assert_eq!(s, 403, "{v}");
    app.token = Some(runner.into());
    let (s, v) = app.post("/v1/runs", &body).await;
    assert_eq!(s, 201, "{v}");
    // Health and the API document need no token.
    app.token = None;
    let (s, _) = app.get("/healthz").await;
    assert_eq!(s, 200);
    let (s, doc) = app.get("/openapi.json").await;
    assert_eq!(s, 200);
    assert!(doc["paths"]["/v1/runs"].is_object());
    let r = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("swagger"), "{html}");
    assert!(
        !html.contains("cdn."),
        "the docs page loads nothing from a CDN"
    );
    app.stop().await;
}

#[tokio::test]
async fn restart_keeps_runs_and_recovers_running_ones() {
    let dir = tempfile::tempdir().unwrap();
    // A server starts a run that pauses; it stops; another server on the
    // same store resumes it.
    let app = TestApp::start(dir.path()).await;
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    app.stop().await;
    // A run whose drive was cut short right after Start (as by kill -9):
    // recorded, never driven.
    let crashed = {
        let store = open_store(dir.path());
        let sources = flowd::source::Sources {
            dir: None,
            root: "flow.json".into(),
            texts: [("flow.json".to_string(), common::review_flow().to_string())].into(),
        };
        flowd::service::record_start(&*store, &sources, "{\"text\": \"crash\"}")
            .unwrap()
            .to_string()
    };
    let app = TestApp::start(dir.path()).await;
    // Recovery drives the crashed run on to its pause.
    let rec = app.until(&crashed, |v| v["state"] == "paused").await;
    assert_eq!(rec["pending"][0]["tool"], "std/human#input");
    let r = answer_review(&app, &run, &call, "approved").await;
    assert_eq!(r["state"], "completed");
    let (_, rep) = app
        .post(&format!("/v1/runs/{run}/replay"), &json!({}))
        .await;
    assert_eq!(rep["verdict"], "matched");
    app.stop().await;
}

#[tokio::test]
async fn shutdown_ends_open_sse_streams() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let r = app
        .client
        .get(app.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap();
    let r2 = app.client.get(app.url("/v1/events")).send().await.unwrap();
    assert_eq!(r2.status(), 200);
    let mut s = r.bytes_stream().eventsource();
    // Read the backlog up to the pause.
    let mut n = 0;
    while let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_millis(800), s.next()).await {
        n = e.id.parse::<u64>().unwrap();
    }
    assert!(n >= 3);
    // The open stream does not hold shutdown up.
    app.stop().await;
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .unwrap();
    assert!(end.is_none() || end.unwrap().is_err());
}

#[tokio::test]
async fn state_feed_reports_changes() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let r = app.client.get(app.url("/v1/events")).send().await.unwrap();
    let mut s = r.bytes_stream().eventsource();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v = start_review(&app, 0).await;
    let run = v["run"].as_str().unwrap().to_string();
    let mut states = Vec::new();
    while states.last().map(String::as_str) != Some("paused") {
        let e = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(e.event, "state");
        let d: Value = serde_json::from_str(&e.data).unwrap();
        if d["run"] == run.as_str() {
            states.push(d["state"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(states, ["running", "paused"]);
    app.stop().await;
}

#[tokio::test]
async fn halt_then_continue_then_resume() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let v = start_review(&app, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let (s, h) = app.post(&format!("/v1/runs/{run}/halt"), &json!({})).await;
    assert_eq!(s, 200, "{h}");
    let view = app.until(&run, |v| v["state"] == "halted").await;
    assert_eq!(view["pending"][0]["call"], call.as_str());
    // Only one of call and reply: 422.
    let (s, _) = app
        .post(&format!("/v1/runs/{run}/resume"), &json!({"call": call}))
        .await;
    assert_eq!(s, 422);
    // Continue with no reply: the human call stays open, the run pauses.
    let (s, r) = app
        .post(&format!("/v1/runs/{run}/resume"), &json!({"wait": 10}))
        .await;
    assert_eq!(s, 202, "{r}");
    assert_eq!(r["state"], "paused", "{r}");
    let r = answer_review(&app, &run, &call, "approved").await;
    assert_eq!(r["state"], "completed");
    let (s, _) = app.post(&format!("/v1/runs/{run}/halt"), &json!({})).await;
    assert_eq!(s, 409);
    app.stop().await;
}

#[tokio::test]
async fn archive_exported_from_one_server_imports_into_another() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = TestApp::start(a_dir.path()).await;
    let b = TestApp::start(b_dir.path()).await;
    let v = start_review(&a, 10).await;
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    answer_review(&a, &run, &call, "approved").await;
    let r = a
        .client
        .get(a.url(&format!("/v1/runs/{run}/archive")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-tar");
    let tar = r.bytes().await.unwrap().to_vec();
    let import = |bytes: Vec<u8>| {
        let b = &b;
        async move {
            let r = b
                .client
                .post(b.url("/v1/archives"))
                .header("content-type", "application/x-tar")
                .body(bytes)
                .send()
                .await
                .unwrap();
            let s = r.status().as_u16();
            (
                s,
                serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap(),
            )
        }
    };
    let (s, v) = import(tar.clone()).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["run"], run.as_str());
    let (s, v) = import(tar.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["imported"], false);
    let (_, rep) = b.post(&format!("/v1/runs/{run}/replay"), &json!({})).await;
    assert_eq!(rep["verdict"], "matched");
    let view = b.until(&run, |_| true).await;
    assert_eq!(view["state"], "completed");
    // Garbage and a tampered archive change nothing.
    let (s, v) = import(b"not a tar".to_vec()).await;
    assert_eq!(s, 400, "{v}");
    let mut bad = tar.clone();
    let pos = bad.windows(8).position(|w| w == b"approved").unwrap();
    bad[pos] = b'A';
    let c_dir = tempfile::tempdir().unwrap();
    let c = TestApp::start(c_dir.path()).await;
    let r = c
        .client
        .post(c.url("/v1/archives"))
        .header("content-type", "application/x-tar")
        .body(bad)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert!(s == 422 || s == 400, "{s} {text}");
    assert!(!text.contains("flowd-archive-"), "no server path: {text}");
    let (_, runs) = c.get("/v1/runs").await;
    assert_eq!(runs["runs"], json!([]));
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

#[tokio::test]
async fn hitl_deadline_fires_in_the_server_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut flow = common::review_flow();
    for n in flow["nodes"].as_array_mut().unwrap() {
        if n["id"] == "review" {
            n["timeout_seconds"] = json!(1);
            n["on_timeout"] = json!("skip");
        }
    }
    let body = json!({"flow": flow, "input": {"text": "late"}, "wait": 10});
    let app = TestApp::start(dir.path()).await;
    let (s, v) = app.post("/v1/runs", &body).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // Skip: the run goes on without a review and is returned.
    let done = app.until(&run, |v| v["state"] == "completed").await;
    assert_eq!(done["exit"], "returned", "{done}");
    // A deadline that passes while no server runs fires at the next start.
    let (s, v) = app.post("/v1/runs", &body).await;
    assert_eq!(s, 201);
    let run2 = v["run"].as_str().unwrap().to_string();
    app.stop().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let app = TestApp::start(dir.path()).await;
    let done = app.until(&run2, |v| v["state"] == "completed").await;
    assert_eq!(done["exit"], "returned");
    let (_, rep) = app
        .post(&format!("/v1/runs/{run2}/replay"), &json!({}))
        .await;
    assert_eq!(rep["verdict"], "matched");
    app.stop().await;
}

#[tokio::test]
async fn unbound_tools_are_refused_with_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start(dir.path()).await;
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage/triage.json");
    let flow: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let (s, v) = app
        .post("/v1/runs", &json!({"flow": flow, "name": "triage.json", "input": {"ticket": "the site is down", "customer": "c-1"}}))
        .await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["type"], "urn:flowd:problem:unbound", "{v}");
    let listed = v["diagnostics"].to_string();
    assert!(listed.contains("classify"), "{v}");
    let (_, runs) = app.get("/v1/runs").await;
    assert_eq!(runs["runs"], json!([]), "nothing was recorded");
    app.stop().await;
}

#[test]
fn a_public_listen_address_needs_tokens() {
    use clap::Parser;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        serve: flowd::http::cli::ServeArgs,
    }
    let t = T::parse_from(["t", "--listen", "0.0.0.0:8080"]);
    let e = flowd::http::cli::options(&t.serve).unwrap_err();
    assert!(e.to_string().contains("--tokens"), "{e}");
    let t = T::parse_from(["t", "--listen", "0.0.0.0:8080", "--insecure"]);
    assert!(flowd::http::cli::options(&t.serve).is_ok());
    let t = T::parse_from(["t"]);
    assert!(
        flowd::http::cli::options(&t.serve)
            .unwrap()
            .tokens
            .is_none()
    );
    assert!(Tokens::parse("short read\n").is_err());
    assert!(Tokens::parse("0123456789abcdef0123 write\n").is_err());
}

/// `flow serve` and `flow run` serve the built-ins the same way (issue 10):
/// `std/memory` is answered from the store's own database by both, so a
/// note saved over HTTP is read by the CLI on the same store, and the other
/// way round.
#[tokio::test]
async fn memory_is_served_from_the_store_by_the_server_and_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let notes_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/notes/notes.json");
    let notes: Value =
        serde_json::from_str(&std::fs::read_to_string(&notes_path).unwrap()).unwrap();
    let cli = |note: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(["--data", dir.path().to_str().unwrap(), "--json", "run"])
            .arg(&notes_path)
            .args(["--input", &json!({"key": "k", "note": note}).to_string()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let v = cli("from the cli");
    assert_eq!(v["output"]["previous"], Value::Null, "{v}");
    let app = TestApp::start(dir.path()).await;
    let (s, v) = app
        .post(
            "/v1/runs",
            &json!({"flow": notes, "input": {"key": "k", "note": "from the server"}, "wait": 10}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["output"]["previous"], "from the cli", "{v}");
    assert_eq!(
        v["output"]["scratch"],
        Value::Null,
        "thread scope is per run"
    );
    app.stop().await;
    let v = cli("again");
    assert_eq!(v["output"]["previous"], "from the server", "{v}");
}

/// SSE subscribers on 2,000 distinct runs do not starve the store (issue
/// 17, item 4): with a live stream open on every one of them (each past
/// its backlog, waiting), runs still start, pause, resume and complete,
/// `/healthz` answers, and a new subscriber of a driven run gets its
/// facts live. (Before the async heads notifier, each followed run held a
/// blocking-pool thread; at 512 every read and every drive stalled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_subscribers_on_two_thousand_runs() {
    const RUNS: usize = 2000;
    let dir = tempfile::tempdir().unwrap();
    let sources = flowd::source::Sources {
        dir: None,
        root: "flow.json".into(),
        texts: [("flow.json".to_string(), common::review_flow().to_string())].into(),
    };
    let runs: Vec<String> = {
        let store = open_store(dir.path());
        (0..RUNS)
            .map(|i| {
                flowd::service::record_start(
                    &*store,
                    &sources,
                    &json!({"text": format!("run {i}")}).to_string(),
                )
                .unwrap()
                .to_string()
            })
            .collect()
    };
    let app = TestApp::with(
        dir.path(),
        ServeOptions {
            recover: false,
            ..ServeOptions::default()
        },
    )
    .await;
    let mut streams = Vec::with_capacity(RUNS);
    for run in &runs {
        let r = app
            .client
            .get(app.url(&format!("/v1/runs/{run}/events")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    // Every stream delivers its backlog (the Start) and stays open.
    for r in &mut streams {
        let chunk = tokio::time::timeout(Duration::from_secs(30), r.chunk())
            .await
            .expect("a backlog frame within 30 s")
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&chunk).contains("event: Start"));
    }
    let (s, _) = tokio::time::timeout(Duration::from_secs(30), app.get("/healthz"))
        .await
        .expect("/healthz within 30 s");
    assert_eq!(s, 200);
    // Runs keep progressing meanwhile, watched live.
    let v = tokio::time::timeout(Duration::from_secs(30), start_review(&app, 10))
        .await
        .expect("a start within 30 s");
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let live = {
        let (client, url) = (
            app.client.clone(),
            app.url(&format!("/v1/runs/{run}/events")),
        );
        tokio::spawn(async move { sse(&client, &url, None, None, usize::MAX).await })
    };
    let (s, v) = tokio::time::timeout(
        Duration::from_secs(30),
        app.post(
            &format!("/v1/runs/{run}/resume"),
            &json!({"call": call, "reply": {"Ok": {"decision": "approved"}}, "wait": 10}),
        ),
    )
    .await
    .expect("a resume within 30 s");
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["state"], "completed", "{v}");
    let events = tokio::time::timeout(Duration::from_secs(30), live)
        .await
        .expect("the live stream ends after End")
        .unwrap();
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("End"));
    let ns: Vec<u64> = events.iter().map(|e| e.0).collect();
    assert_eq!(ns, (1..=ns.len() as u64).collect::<Vec<_>>(), "no gap");
    drop(streams);
    app.stop().await;
}
