//! What attack tests found (issue 36 item 6), each against the real
//! `flow serve`: integers beyond their declared range, bodies on methods a
//! route does not take, and the security headers of every kind of answer.

mod common;

use common::serve;
use reqwest::{Client, Method, Response};
use serde_json::{Value, json};

fn client() -> Client {
    Client::builder().no_proxy().build().unwrap()
}

/// A paused run (the review flow waits on a person): its id.
async fn paused_run(c: &Client, base: &str) -> String {
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": common::review_flow(), "input": {"text": "x"}, "wait": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    v["run"].as_str().unwrap().to_string()
}

/// A problem+json answer of `status` whose detail names every word.
async fn problem(r: Response, status: u16, words: &[&str], what: &str) {
    assert_eq!(r.status().as_u16(), status, "{what}");
    assert_eq!(
        r.headers()["content-type"],
        "application/problem+json",
        "{what}"
    );
    let v: Value = r.json().await.unwrap();
    let detail = v["detail"].as_str().unwrap_or_default();
    for w in words {
        assert!(detail.contains(w), "{what}: {w:?} not in {v}");
    }
}

/// Every integer a request carries (query, path, header, JSON body) is
/// held to the range the OpenAPI document declares for it: one past it is
/// 400 (422 in a body) naming the parameter and the range, and changes
/// nothing; the largest value in range is taken.
#[tokio::test]
async fn integers_past_their_declared_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = &s.base;
    let run = paused_run(&c, base).await;
    const OVER: &str = "9223372036854775808";
    const MAX: &str = "9223372036854775807";
    let cases = [
        (format!("/v1/runs/{run}/events?after={OVER}"), "after"),
        (
            format!("/v1/runs/{run}/events?after=18446744073709551616"),
            "after",
        ),
        (format!("/v1/runs/{run}/events?after=-1"), "after"),
        (format!("/v1/runs/{run}/facts?offset={OVER}"), "offset"),
        (format!("/v1/runs/{run}/facts?fact={OVER}"), "fact"),
        (format!("/v1/runs/{run}/facts?limit=4294967296"), "limit"),
        ("/v1/runs?limit=2147483648".to_string(), "limit"),
        ("/v1/calls?limit=99999999999999999999".to_string(), "limit"),
        (format!("/v1/runs/{run}/checkpoints/{OVER}"), "fact"),
    ];
    for (path, name) in &cases {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        problem(r, 400, &[name, "from 0 to"], path).await;
    }
    let r = c
        .get(format!("{base}/v1/runs/{run}/events"))
        .header("last-event-id", OVER)
        .send()
        .await
        .unwrap();
    problem(r, 400, &["Last-Event-ID", MAX], "Last-Event-ID").await;

    // The largest value in range is taken: the handler answers it.
    let r = c
        .get(format!("{base}/v1/runs/{run}/facts?offset={MAX}"))
        .send()
        .await
        .unwrap();
    problem(r, 400, &["past the"], "offset at the range's end").await;
    let r = c
        .get(format!("{base}/v1/runs/{run}/checkpoints/{MAX}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // JSON bodies: `wait` and `checkpoint`, refused before anything runs.
    let runs_before = common::get_json(&c, format!("{base}/v1/runs")).await;
    let over: u64 = OVER.parse().unwrap();
    for (path, body) in [
        (
            "/v1/runs".to_string(),
            json!({"flow": common::review_flow(), "input": {"text": "x"}, "wait": over}),
        ),
        (format!("/v1/runs/{run}/fork"), json!({"checkpoint": over})),
        (format!("/v1/runs/{run}/resume"), json!({"wait": over})),
    ] {
        let r = c
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        problem(r, 422, &[MAX], &path).await;
    }
    assert_eq!(
        common::get_json(&c, format!("{base}/v1/runs")).await,
        runs_before
    );
}

/// A body sent with a method the route does not take is 405 with `Allow`
/// (the Content-Type rule runs only once a route took the method), whatever
/// its type; the route's own method with a wrong type stays 415.
#[tokio::test]
async fn a_body_on_a_method_the_route_does_not_take_is_405() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = &s.base;
    let run = paused_run(&c, base).await;
    for (method, path, ty, allow) in [
        (Method::POST, format!("/v1/runs/{run}"), "text/plain", "GET"),
        (
            Method::POST,
            format!("/v1/runs/{run}/facts"),
            "application/x-www-form-urlencoded",
            "GET",
        ),
        (Method::PUT, "/v1/runs".to_string(), "text/plain", "POST"),
        (
            Method::PATCH,
            format!("/v1/runs/{run}/halt"),
            "text/plain",
            "POST",
        ),
        (
            Method::DELETE,
            "/v1/runs".to_string(),
            "application/json",
            "GET",
        ),
        (
            Method::PUT,
            "/v1/archives".to_string(),
            "text/plain",
            "POST",
        ),
        (Method::GET, "/v1/check".to_string(), "text/plain", "POST"),
    ] {
        let what = format!("{method} {path} as {ty}");
        let r = c
            .request(method, format!("{base}{path}"))
            .header("content-type", ty)
            .body("{}")
            .send()
            .await
            .unwrap();
        let allowed = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        assert!(allowed.contains(allow), "{what}: Allow {allowed:?}");
        problem(r, 405, &["Allow"], &what).await;
    }
    let r = c
        .post(format!("{base}/v1/runs"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    problem(r, 415, &["application/json"], "POST /v1/runs as text/plain").await;
}

/// Every kind of answer carries a Content-Security-Policy that forbids
/// framing, `nosniff` and `no-referrer`: the dashboard and the API docs
/// each their own policy, every API answer (JSON, problem+json, SSE, a
/// guard's refusal, a 404, a 405) one that lets nothing load.
#[tokio::test]
async fn every_answer_carries_its_kinds_security_headers() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = &s.base;
    let run = paused_run(&c, base).await;
    let csp = |r: &Response| -> String {
        let h = r.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{}", r.url());
        assert_eq!(h["referrer-policy"], "no-referrer", "{}", r.url());
        let p = h["content-security-policy"].to_str().unwrap().to_string();
        assert!(p.contains("frame-ancestors 'none'"), "{}: {p}", r.url());
        assert!(p.starts_with("default-src 'none'"), "{}: {p}", r.url());
        p
    };
    let get = |path: String| c.get(format!("{base}{path}")).send();

    let dashboard = csp(&get("/".into()).await.unwrap());
    assert!(dashboard.contains("script-src 'self'"), "{dashboard}");
    let r = get("/docs/".into()).await.unwrap();
    assert_eq!(r.status(), 200);
    let docs = csp(&r);
    assert!(docs.contains("script-src 'self'"), "{docs}");
    assert!(docs.contains("connect-src 'self'"), "{docs}");
    let r = get("/docs/swagger-ui.css".into()).await.unwrap();
    assert_eq!(csp(&r), docs);

    let api = csp(&get("/v1/runs".into()).await.unwrap());
    assert!(!api.contains("script-src"), "{api}");
    assert_ne!(api, dashboard);
    assert_ne!(api, docs);
    for (what, r) in [
        ("a run", get(format!("/v1/runs/{run}")).await.unwrap()),
        ("health", get("/healthz".into()).await.unwrap()),
        ("openapi", get("/openapi.json".into()).await.unwrap()),
        ("404", get("/v1/nothing".into()).await.unwrap()),
        (
            "405",
            c.delete(format!("{base}/v1/runs")).send().await.unwrap(),
        ),
        (
            "a guard's refusal",
            c.post(format!("{base}/v1/runs/{run}/halt"))
                .header("origin", "http://attacker.example")
                .send()
                .await
                .unwrap(),
        ),
        ("SSE", get(format!("/v1/runs/{run}/events")).await.unwrap()),
    ] {
        assert_eq!(csp(&r), api, "{what}");
    }
}

/// A 2.5 MB flow of 18,000 nodes (the issue's size): a chain of
/// transforms.
fn large_flow() -> Value {
    let mut nodes =
        vec![json!({"id": "start", "type": "input", "output_schema": {"x": {"type": "string"}}})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..17_998 {
        let id = format!("n{i}");
        nodes.push(json!({"id": id, "type": "transform", "mode": "mapping",
            "mapping": [{"from": "$.state.x", "to": "y"}]}));
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    nodes.push(json!({"id": "done", "type": "output"}));
    edges.push(json!({"from": prev, "to": "done"}));
    json!({
        "spec_version": "1.0.0",
        "id": "large",
        "state_schema": {"type": "object",
            "properties": {"x": {"type": "string"}, "y": {"type": "string"}}, "required": ["x"]},
        "nodes": nodes,
        "edges": edges
    })
}

/// Several large `POST /v1/check` at once (issue 36: four held `/healthz`
/// for 15 s): each checks off the async runtime, a bounded number at once,
/// the rest refused 503 `busy` with `Retry-After`; `/healthz` answers
/// within 1 s all the while (a generous bound: it answers in milliseconds).
#[tokio::test]
async fn large_checks_leave_the_server_answering() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = s.base.clone();
    let body = json!({ "flow": large_flow() }).to_string();
    assert!(body.len() > 2_000_000, "{}", body.len());
    let mut checks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (c, url, body) = (c.clone(), format!("{base}/v1/check"), body.clone());
        checks.spawn(async move {
            let r = c
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").cloned();
            let v: Value = r.json().await.unwrap();
            (status, retry, v)
        });
    }
    let (mut probes, mut slowest, mut served) = (0, std::time::Duration::ZERO, 0);
    while !checks.is_empty() {
        let t = std::time::Instant::now();
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            c.get(format!("{base}/healthz")).send(),
        )
        .await
        .unwrap_or_else(|_| panic!("/healthz did not answer within 1 s (probe {probes})"))
        .unwrap();
        assert_eq!(r.status(), 200);
        probes += 1;
        slowest = slowest.max(t.elapsed());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        while let Some(done) = checks.try_join_next() {
            let (status, retry, v) = done.unwrap();
            match status {
                200 => {
                    assert_eq!(v["ok"], true, "{v}");
                    served += 1;
                }
                503 => {
                    assert_eq!(v["type"], "urn:flowd:problem:busy", "{v}");
                    assert!(retry.is_some(), "503 without Retry-After: {v}");
                }
                s => panic!("a large check answered {s}: {v}"),
            }
        }
    }
    eprintln!(
        "{served} of 6 large checks served, the rest busy; /healthz asked {probes} times, slowest {slowest:?}"
    );
    assert!(served >= 1, "no large check was served");
    assert!(probes > 1, "the checks ended before /healthz was asked");
    // Once they are done, a large check is served again.
    let r = c
        .post(format!("{base}/v1/check"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"attack-test","version":"1"}}}"#;

/// An MCP `initialize` on `/mcp`, with a token or none: the status, the
/// session id (when one opened), `Retry-After` and the problem document
/// (when refused).
async fn initialize(c: &Client, base: &str, token: Option<&str>) -> (u16, Option<String>, Value) {
    let mut r = c
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.body(INITIALIZE).send().await.unwrap();
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let retry = r.headers().get("retry-after").is_some();
    let problem = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/problem+json");
    let text = r.text().await.unwrap();
    let v = if problem {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["retryAfterHeader"] = json!(retry);
        v
    } else {
        Value::Null
    };
    (status, session, v)
}

/// The resident set of a process (`VmRSS`), in kB.
fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Issue 36: 26,000 `initialize` took a server to 2.7 GB. Now 3,000 of
/// them (16 at a time) on a tokenless server — one token's worth — open
/// its 32 sessions and are refused 429 problem+json with `Retry-After`
/// past that; the server's RSS grows by far less than 3,000 sessions would
/// hold (~100 kB each: 300 MB).
#[tokio::test]
async fn idle_mcp_sessions_are_capped_and_memory_stays_bounded() {
    const N: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let pid = s.child.id();
    // Warm up (the first session loads what every session shares).
    let (status, _, _) = initialize(&c, &s.base, None).await;
    assert_eq!(status, 200);
    let before = rss_kb(pid);
    let mut opened = 1;
    let mut refused = 0;
    let mut left = N - 1;
    while left > 0 {
        let batch = left.min(16);
        left -= batch;
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let (c, base) = (c.clone(), s.base.clone());
            set.spawn(async move { initialize(&c, &base, None).await });
        }
        while let Some(r) = set.join_next().await {
            let (status, session, v) = r.unwrap();
            match status {
                200 => {
                    assert!(session.is_some());
                    opened += 1;
                }
                429 => {
                    assert_eq!(v["type"], "urn:flowd:problem:too-many-sessions", "{v}");
                    assert_eq!(v["retryAfterHeader"], true, "{v}");
                    refused += 1;
                }
                s => panic!("initialize answered {s}: {v}"),
            }
        }
    }
    let after = rss_kb(pid);
    eprintln!("{N} initialize: {opened} opened, {refused} refused; RSS {before} kB -> {after} kB");
    assert_eq!(opened, 32, "the per-token cap");
    assert_eq!(refused, N - 32);
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "RSS grew from {before} kB to {after} kB"
    );
}

/// `flow serve` with two tokens, two MCP sessions per token, three on the
/// server, closed after `idle` seconds unused.
fn capped_server(dir: &std::path::Path, idle: &str) -> common::Server {
    std::fs::write(
        dir.join("tokens"),
        format!("{TOKEN_A} read\n{TOKEN_B} read\n"),
    )
    .unwrap();
    serve(
        &dir.join("data"),
        &[
            "--tokens",
            dir.join("tokens").to_str().unwrap(),
            "--mcp-sessions",
            "3",
            "--mcp-sessions-per-token",
            "2",
            "--mcp-idle-seconds",
            idle,
        ],
    )
}

const TOKEN_A: &str = "aaaaaaaaaaaaaaaaaaaa";
const TOKEN_B: &str = "bbbbbbbbbbbbbbbbbbbb";

/// Caps per token (429) and for the server (503), and a closed session's
/// place given back: two per token, three on the server.
#[tokio::test]
async fn mcp_sessions_are_capped_per_token_and_globally() {
    let dir = tempfile::tempdir().unwrap();
    let s = capped_server(dir.path(), "600");
    let (a, b) = (TOKEN_A, TOKEN_B);
    let c = client();
    let base = &s.base;
    let (s1, a1, _) = initialize(&c, base, Some(a)).await;
    let (s2, _, _) = initialize(&c, base, Some(a)).await;
    let (s3, _, per_token) = initialize(&c, base, Some(a)).await;
    let (s4, _, _) = initialize(&c, base, Some(b)).await;
    let (s5, _, global) = initialize(&c, base, Some(b)).await;
    assert_eq!((s1, s2, s3, s4, s5), (200, 200, 429, 200, 503));
    assert_eq!(per_token["type"], "urn:flowd:problem:too-many-sessions");
    assert_eq!(global["type"], "urn:flowd:problem:busy");
    assert_eq!(global["retryAfterHeader"], true);
    // A client's DELETE gives its place back at once.
    let r = c
        .delete(format!("{base}/mcp"))
        .bearer_auth(a)
        .header("mcp-session-id", a1.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (s6, _, v) = initialize(&c, base, Some(b)).await;
    assert_eq!(s6, 200, "{v}");
}

/// Sessions left unused are closed, and their places come back: three
/// sessions (the server's cap) left idle, one second of idleness.
#[tokio::test]
async fn idle_mcp_sessions_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = capped_server(dir.path(), "1");
    let (a, b) = (TOKEN_A, TOKEN_B);
    let c = client();
    let base = &s.base;
    for token in [a, a, b] {
        assert_eq!(initialize(&c, base, Some(token)).await.0, 200);
    }
    // Idle sessions are closed: every place comes back (the wait is a
    // bound, not a measurement). A probe's own sessions are closed at once
    // when not all three open, so only the idle ones hold places.
    let mut freed = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut opened = Vec::new();
        for token in [a, a, b] {
            if let (200, Some(id), _) = initialize(&c, base, Some(token)).await {
                opened.push((token, id));
            }
        }
        if opened.len() == 3 {
            freed = true;
            break;
        }
        for (token, id) in opened {
            c.delete(format!("{base}/mcp"))
                .bearer_auth(token)
                .header("mcp-session-id", id)
                .send()
                .await
                .unwrap();
        }
    }
    assert!(freed, "idle sessions were not closed");
}

/// The runs the view of `run` lists as its children.
async fn children_of(c: &Client, base: &str, run: &str) -> Vec<Value> {
    let v = common::get_json(c, format!("{base}/v1/runs/{run}")).await;
    v["children"].as_array().cloned().unwrap_or_default()
}

/// A paused review run and a fork of it, on the server at `base`: their
/// ids.
async fn run_and_fork(c: &Client, base: &str) -> (String, String) {
    let run = paused_run(c, base).await;
    let cps = common::get_json(c, format!("{base}/v1/runs/{run}/facts?kind=Checkpoint")).await;
    let cp = cps["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"]["node"] == "review")
        .expect("a checkpoint at review")["n"]
        .as_u64()
        .unwrap();
    let r = c
        .post(format!("{base}/v1/runs/{run}/fork"))
        .json(&json!({ "checkpoint": cp }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let f: Value = r.json().await.unwrap();
    (run, f["run"].as_str().unwrap().to_string())
}

/// Issue 36: `GET /v1/runs/{run}` took 0.5-0.8 s on Postgres at 2,200
/// runs — the run's children were found by reading every run after it.
/// At 10,000 runs (inserted into the runs index by SQL, 100 of them forks
/// of one another run, the index analysed as autovacuum would) the view
/// lists the real fork, and the children's query plan reads no part of the
/// runs table but by index (no `Seq Scan on runs`); the answer comes
/// within 1 s (a generous bound: milliseconds).
#[tokio::test]
async fn run_view_on_postgres_reads_children_by_index() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        dir.path(),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    );
    let c = client();
    let (run, fork) = run_and_fork(&c, &s.base).await;
    // Ids after the real runs' (the old scan read from the run on), in the
    // run id form (`run-` and 26 base-32 digits).
    db.query(
        "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run,
                           parent_checkpoint, last_n, last_hash, created_ms, updated_ms)
         SELECT 'run-7' || lpad(g::text, 25, '0'), 'completed', 'flow.json', 'main', 'sha256:0',
                CASE WHEN g % 100 = 0 THEN 'run-7' || lpad('1', 25, '0') END,
                CASE WHEN g % 100 = 0 THEN 2 END,
                3, '\\x00'::bytea, 0, 0
         FROM generate_series(1, 10000) AS g;
         ANALYZE runs;",
    );
    let n = db.query("SELECT count(*) FROM runs");
    assert_eq!(n[0][0].as_deref(), Some("10002"));

    let t = std::time::Instant::now();
    let children = children_of(&c, &s.base, &run).await;
    let took = t.elapsed();
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0]["run"], fork.as_str());
    assert_eq!(children[0]["kind"], "fork");
    let fake = format!("run-7{:0>25}", 1);
    assert_eq!(children_of(&c, &s.base, &fake).await.len(), 0, "not a run");
    eprintln!("GET /v1/runs/{{run}} at 10,002 runs: {took:?}");
    assert!(took < std::time::Duration::from_secs(1), "{took:?}");

    // The plans the server's prepared statement may run: the generic one
    // (the run a parameter) and a custom one. Each reads the runs table
    // by the two indexes only: no sequential scan, and no walk of the id
    // index filtering every row.
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let plan = db.query(&format!(
            "PREPARE children(text, bigint) AS {q};
             SET plan_cache_mode = {mode};
             EXPLAIN EXECUTE children('{run}', 2001);",
            q = flow_store::postgres::CHILDREN_QUERY
        ));
        let text = plan
            .into_iter()
            .filter_map(|r| r[0].clone())
            .collect::<Vec<_>>()
            .join("\n");
        for bad in ["Seq Scan", "runs_id_key", "runs_pkey", "Filter"] {
            assert!(!text.contains(bad), "{mode}: {bad}\n{text}");
        }
        assert!(text.contains("runs_by_parent"), "{mode}\n{text}");
        assert!(text.contains("runs_by_outer"), "{mode}\n{text}");
    }
}

/// The same query on SQLite reads the runs table by its two indexes.
#[tokio::test]
async fn run_view_on_sqlite_reads_children_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let (run, fork) = run_and_fork(&c, &s.base).await;
    let children = children_of(&c, &s.base, &run).await;
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0]["run"], fork.as_str());
    let db = rusqlite::Connection::open(dir.path().join("flow.db")).unwrap();
    let mut st = db
        .prepare(&format!(
            "EXPLAIN QUERY PLAN {}",
            flow_store::sqlite::CHILDREN_QUERY
        ))
        .unwrap();
    let plan: Vec<String> = st
        .query_map(rusqlite::params![run, 2001], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let text = plan.join("\n");
    assert!(!text.contains("SCAN runs"), "{text}");
    assert!(text.contains("runs_by_parent"), "{text}");
    assert!(text.contains("runs_by_outer"), "{text}");
}
