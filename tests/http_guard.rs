//! The browser guard (issue 17 item 5, docs/http.md "Browsers, Host and
//! Origin") against the real `flow serve`: a web page cannot drive a
//! tokenless local server by CSRF (a cross-origin or `text/plain` POST) or
//! by DNS rebinding (a foreign `Host`), on `/v1` and on `/mcp`; each
//! refusal records nothing; the allowed cases (same origin, `--allow-host`,
//! `--cors-origin` with CORS answers) work.

mod common;

use common::serve;
use reqwest::{Client, Method, Response};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const ATTACKER: &str = "http://attacker.example";

fn client() -> Client {
    Client::builder().no_proxy().build().unwrap()
}

fn review_body() -> String {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    let flow: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    json!({"flow": flow, "input": {"text": "guard"}, "wait": 10}).to_string()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"guard-test","version":"1"}}}"#;

/// A request with the given headers (a `host` entry replaces the Host).
async fn send(
    c: &Client,
    method: Method,
    url: String,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Response {
    let mut r = c.request(method, url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.body(b);
    }
    r.send().await.unwrap()
}

/// Asserts a problem+json refusal of the given status and kind.
async fn refused(r: Response, status: u16, kind: &str, what: &str) {
    assert_eq!(r.status().as_u16(), status, "{what}");
    assert_eq!(
        r.headers()["content-type"],
        "application/problem+json",
        "{what}"
    );
    assert!(
        !r.headers().contains_key("access-control-allow-origin"),
        "{what}"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["type"],
        format!("urn:flowd:problem:{kind}"),
        "{what}: {v}"
    );
    assert_eq!(v["status"], status, "{what}: {v}");
}

/// What, method, URL, headers, body; the status and problem kind expected.
type Case<'a> = (
    &'a str,
    Method,
    String,
    Vec<(&'a str, &'a str)>,
    Option<String>,
    u16,
    &'a str,
);

async fn run_list(c: &Client, base: &str) -> Value {
    common::get_json(c, format!("{base}/v1/runs")).await
}

async fn last_fact(c: &Client, base: &str, run: &str) -> Value {
    let v: Value = common::get_json(c, format!("{base}/v1/runs/{run}")).await;
    v["lastFact"].clone()
}

/// Every CSRF and rebinding attempt is refused before a handler runs:
/// nothing is started, halted, imported or admitted, on `/v1` or `/mcp`.
#[tokio::test]
async fn csrf_and_dns_rebinding_are_refused_and_record_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = &s.base;
    // One paused run, started the way the dashboard does (same origin).
    let r = send(
        &c,
        Method::POST,
        format!("{base}/v1/runs"),
        &[("content-type", "application/json"), ("origin", base)],
        Some(review_body()),
    )
    .await;
    assert_eq!(r.status(), 201, "a same-origin start is served");
    assert_eq!(r.headers()["vary"], "origin");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "paused", "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let runs_before = run_list(&c, base).await;
    let facts_before = last_fact(&c, base, &run).await;
    let reply = json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}).to_string();
    let rebound = format!("attacker.example:{}", s.port);
    let tar = c
        .get(format!("{base}/v1/runs/{run}/archive"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(!tar.is_empty());

    let cases: Vec<Case> = vec![
        // The issue's reproduction: a form-like text/plain POST from
        // another origin.
        (
            "text/plain start from another origin",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![("content-type", "text/plain"), ("origin", ATTACKER)],
            Some(review_body()),
            403,
            "origin-not-allowed",
        ),
        (
            "JSON start from another origin",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![("content-type", "application/json"), ("origin", ATTACKER)],
            Some(review_body()),
            403,
            "origin-not-allowed",
        ),
        (
            "text/plain start without Origin",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![("content-type", "text/plain")],
            Some(review_body()),
            415,
            "unsupported-media-type",
        ),
        (
            "form-encoded start",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![("content-type", "application/x-www-form-urlencoded")],
            Some(review_body()),
            415,
            "unsupported-media-type",
        ),
        (
            "start with a body and no Content-Type",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![],
            Some(review_body()),
            415,
            "unsupported-media-type",
        ),
        (
            "resume from another origin",
            Method::POST,
            format!("{base}/v1/runs/{run}/resume"),
            vec![("content-type", "application/json"), ("origin", ATTACKER)],
            Some(reply.clone()),
            403,
            "origin-not-allowed",
        ),
        (
            "text/plain resume",
            Method::POST,
            format!("{base}/v1/runs/{run}/resume"),
            vec![("content-type", "text/plain")],
            Some(reply.clone()),
            415,
            "unsupported-media-type",
        ),
        (
            "bodiless halt from another origin",
            Method::POST,
            format!("{base}/v1/runs/{run}/halt"),
            vec![("origin", ATTACKER)],
            None,
            403,
            "origin-not-allowed",
        ),
        (
            "halt from the null origin (a sandboxed page)",
            Method::POST,
            format!("{base}/v1/runs/{run}/halt"),
            vec![("origin", "null")],
            None,
            403,
            "origin-not-allowed",
        ),
        (
            "CORS preflight from another origin",
            Method::OPTIONS,
            format!("{base}/v1/runs"),
            vec![
                ("origin", ATTACKER),
                ("access-control-request-method", "POST"),
            ],
            None,
            403,
            "origin-not-allowed",
        ),
        (
            "a read from another origin",
            Method::GET,
            format!("{base}/v1/runs"),
            vec![("origin", ATTACKER)],
            None,
            403,
            "origin-not-allowed",
        ),
        // DNS rebinding: attacker.example now resolves to 127.0.0.1.
        (
            "run list under a rebound name",
            Method::GET,
            format!("{base}/v1/runs"),
            vec![("host", &rebound)],
            None,
            403,
            "host-not-allowed",
        ),
        (
            "run list under a rebound name without a port",
            Method::GET,
            format!("{base}/v1/runs"),
            vec![("host", "attacker.example")],
            None,
            403,
            "host-not-allowed",
        ),
        (
            "a run's history under a rebound name",
            Method::GET,
            format!("{base}/v1/runs/{run}/facts"),
            vec![("host", &rebound)],
            None,
            403,
            "host-not-allowed",
        ),
        (
            "start under a rebound name, same-origin to it",
            Method::POST,
            format!("{base}/v1/runs"),
            vec![
                ("host", &rebound),
                ("origin", "http://attacker.example"),
                ("content-type", "application/json"),
            ],
            Some(review_body()),
            403,
            "host-not-allowed",
        ),
        (
            "import as text/plain",
            Method::POST,
            format!("{base}/v1/archives"),
            vec![("content-type", "text/plain")],
            None,
            415,
            "unsupported-media-type",
        ),
        (
            "import as JSON",
            Method::POST,
            format!("{base}/v1/archives"),
            vec![("content-type", "application/json")],
            None,
            415,
            "unsupported-media-type",
        ),
        // MCP (Streamable HTTP requires Origin validation).
        (
            "MCP initialize from another origin",
            Method::POST,
            format!("{base}/mcp"),
            vec![
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("origin", ATTACKER),
            ],
            Some(INITIALIZE.to_string()),
            403,
            "origin-not-allowed",
        ),
        (
            "MCP initialize under a rebound name",
            Method::POST,
            format!("{base}/mcp"),
            vec![
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("host", &rebound),
            ],
            Some(INITIALIZE.to_string()),
            403,
            "host-not-allowed",
        ),
    ];
    for (what, method, url, headers, body, status, kind) in cases {
        let r = send(&c, method, url, &headers, body).await;
        refused(r, status, kind, what).await;
    }
    // The archive import, a real tar, from another origin.
    let r = c
        .post(format!("{base}/v1/archives"))
        .header("content-type", "application/x-tar")
        .header("origin", ATTACKER)
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    refused(r, 403, "origin-not-allowed", "import from another origin").await;

    // Nothing was recorded: the same runs, the same facts, still paused.
    assert_eq!(run_list(&c, base).await, runs_before);
    assert_eq!(last_fact(&c, base, &run).await, facts_before);

    // The names of this server are served.
    // Any port: a port forward (ssh -L, docker -p) changes only the port.
    for host in [
        format!("127.0.0.1:{}", s.port),
        format!("localhost:{}", s.port),
        format!("[::1]:{}", s.port),
        "127.0.0.1:1".to_string(),
        "localhost".to_string(),
    ] {
        let r = send(
            &c,
            Method::GET,
            format!("{base}/v1/runs"),
            &[("host", &host)],
            None,
        )
        .await;
        assert_eq!(r.status(), 200, "Host {host}");
    }
    // Same origin under another of its names; MCP same-origin and without
    // Origin (a non-browser client).
    let r = send(
        &c,
        Method::GET,
        format!("{base}/v1/runs"),
        &[
            ("host", &format!("localhost:{}", s.port)),
            ("origin", &format!("http://localhost:{}", s.port)),
        ],
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    for origin in [Some(base.as_str()), None] {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        if let Some(o) = origin {
            h.push(("origin", o));
        }
        let r = send(
            &c,
            Method::POST,
            format!("{base}/mcp"),
            &h,
            Some(INITIALIZE.to_string()),
        )
        .await;
        assert_eq!(r.status(), 200, "MCP initialize, Origin {origin:?}");
    }
    // A bodiless halt from a non-browser client still works.
    let r = send(
        &c,
        Method::POST,
        format!("{base}/v1/runs/{run}/halt"),
        &[],
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
}

/// `--allow-host` names and `--cors-origin` origins are served, with CORS
/// answers; origins and names not given stay refused.
#[tokio::test]
async fn allowed_hosts_and_cors_origins() {
    let dir = tempfile::tempdir().unwrap();
    let app = "http://app.example:3000";
    let s = serve(
        dir.path(),
        &[
            "--allow-host",
            "flow.internal",
            "--cors-origin",
            app,
            "--cors-origin",
            "https://other.example",
        ],
    );
    let c = client();
    let base = &s.base;
    for host in ["flow.internal", "flow.internal:8443", "FLOW.internal"] {
        let r = send(
            &c,
            Method::GET,
            format!("{base}/v1/runs"),
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(r.status(), 200, "Host {host}");
    }
    let r = send(
        &c,
        Method::GET,
        format!("{base}/v1/runs"),
        &[("host", "other.internal")],
        None,
    )
    .await;
    refused(r, 403, "host-not-allowed", "a name not given").await;

    // Preflight from an allowed origin.
    let r = send(
        &c,
        Method::OPTIONS,
        format!("{base}/v1/runs"),
        &[
            ("origin", app),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type, authorization",
            ),
        ],
        None,
    )
    .await;
    assert_eq!(r.status(), 204);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], app);
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    assert!(
        allowed.contains("content-type") && allowed.contains("authorization"),
        "{allowed}"
    );
    assert_eq!(h["vary"], "origin");
    // The request itself.
    let r = send(
        &c,
        Method::POST,
        format!("{base}/v1/runs"),
        &[("content-type", "application/json"), ("origin", app)],
        Some(review_body()),
    )
    .await;
    assert_eq!(r.status(), 201);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], app);
    assert_eq!(h["vary"], "origin");
    assert!(
        h["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("location")
    );
    // https with its default port, written either way.
    let r = send(
        &c,
        Method::GET,
        format!("{base}/v1/runs"),
        &[("origin", "https://other.example:443")],
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://other.example"
    );
    // MCP from the allowed origin.
    let r = send(
        &c,
        Method::POST,
        format!("{base}/mcp"),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("origin", app),
        ],
        Some(INITIALIZE.to_string()),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], app);
    // Not the same origin: another port, another scheme.
    for o in [
        "http://app.example:3001",
        "https://app.example:3000",
        ATTACKER,
    ] {
        let r = send(
            &c,
            Method::POST,
            format!("{base}/v1/runs"),
            &[("content-type", "application/json"), ("origin", o)],
            Some(review_body()),
        )
        .await;
        refused(r, 403, "origin-not-allowed", o).await;
    }
    let runs = run_list(&c, base).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
}

/// With `--tokens` every request that reads or writes is authenticated (a
/// rebinding page has no token), so `Host` is not checked; `Origin` is.
#[tokio::test]
async fn a_token_server_checks_origin_not_host() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "0123456789abcdef0123 admin\n").unwrap();
    let s = serve(
        &dir.path().join("data"),
        &["--tokens", tokens.to_str().unwrap()],
    );
    let c = client();
    let auth = "Bearer 0123456789abcdef0123";
    let r = send(
        &c,
        Method::GET,
        format!("{}/v1/runs", s.base),
        &[("host", "runs.example.com"), ("authorization", auth)],
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = send(
        &c,
        Method::GET,
        format!("{}/v1/runs", s.base),
        &[("host", "runs.example.com")],
        None,
    )
    .await;
    refused(r, 401, "unauthorized", "no token").await;
    let r = send(
        &c,
        Method::POST,
        format!("{}/v1/runs", s.base),
        &[
            ("authorization", auth),
            ("origin", ATTACKER),
            ("content-type", "application/json"),
        ],
        Some(review_body()),
    )
    .await;
    refused(r, 403, "origin-not-allowed", "token, another origin").await;
}

/// Bad flag values stop the start with exit 2 and a message naming the
/// flag.
#[test]
fn bad_guard_flags_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--cors-origin", "app.example"),
        ("--cors-origin", "http://app.example/path"),
        ("--cors-origin", "*"),
        ("--allow-host", "flow.internal:8080"),
        ("--allow-host", "http://flow.internal"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
            .arg("--data")
            .arg(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", flag, value])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut status = None;
        for _ in 0..100 {
            if let Some(s) = child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{flag} {value}: the server started");
        };
        assert_eq!(status.code(), Some(2), "{flag} {value}");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

/// Issue 36 item 6: the same origin is the same scheme, host and port.
/// Every other spelling of the server's origin — another scheme (the
/// reported `https://127.0.0.1:PORT` on this plain-HTTP server), another
/// port, the default port, another of its names, a trailing dot, userinfo,
/// `null`, upper case over another scheme — is refused on every class of
/// state-changing route (start, check, drive a run, import, workers, MCP),
/// and nothing is recorded; the true origin (and `https` through a TLS
/// proxy that says so in `X-Forwarded-Proto`) still passes.
#[tokio::test]
async fn every_cross_origin_spelling_is_refused_on_every_state_changing_route() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let c = client();
    let base = &s.base;
    let port = s.port;
    let json_type = ("content-type", "application/json");
    let r = send(
        &c,
        Method::POST,
        format!("{base}/v1/runs"),
        &[json_type, ("origin", base)],
        Some(review_body()),
    )
    .await;
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let run = v["run"].as_str().unwrap().to_string();
    let call = v["pending"][0]["call"].as_str().unwrap().to_string();
    let tar = c
        .get(format!("{base}/v1/runs/{run}/archive"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let runs_before = run_list(&c, base).await;
    let facts_before = last_fact(&c, base, &run).await;
    let workers_before = common::get_json(&c, format!("{base}/v1/workers")).await;

    let flow = common::review_flow();
    let reply = json!({"call": call, "reply": {"Ok": {"decision": "approved"}}}).to_string();
    let worker = json!({"name": "guard", "tools": []}).to_string();
    // Method, path, Content-Type, body: one of each class of route that
    // records or drives something.
    let routes: Vec<(Method, String, &str, Vec<u8>)> = vec![
        (
            Method::POST,
            "/v1/runs".into(),
            "application/json",
            review_body().into_bytes(),
        ),
        (
            Method::POST,
            "/v1/check".into(),
            "application/json",
            json!({ "flow": flow }).to_string().into_bytes(),
        ),
        (
            Method::POST,
            format!("/v1/runs/{run}/resume"),
            "application/json",
            reply.into_bytes(),
        ),
        (Method::POST, format!("/v1/runs/{run}/halt"), "", vec![]),
        (Method::POST, format!("/v1/runs/{run}/fork"), "", vec![]),
        (Method::POST, format!("/v1/runs/{run}/replay"), "", vec![]),
        (
            Method::POST,
            "/v1/archives".into(),
            "application/x-tar",
            tar,
        ),
        (
            Method::POST,
            "/v1/workers".into(),
            "application/json",
            worker.into_bytes(),
        ),
        (Method::DELETE, "/v1/workers/w-guard".into(), "", vec![]),
        (
            Method::POST,
            "/v1/workers/w-guard/poll".into(),
            "application/json",
            b"{}".to_vec(),
        ),
        (
            Method::POST,
            "/mcp".into(),
            "application/json",
            INITIALIZE.as_bytes().to_vec(),
        ),
    ];
    let spellings = [
        format!("https://127.0.0.1:{port}"),
        format!("HTTPS://127.0.0.1:{port}"),
        format!("ws://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        "http://127.0.0.1".to_string(),
        "https://127.0.0.1".to_string(),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
        format!("http://127.0.0.1.:{port}"),
        format!("http://user@127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}@attacker.example"),
        format!("http://attacker.example:{port}"),
        format!("http://127.0.0.1:{port}.attacker.example"),
        "null".to_string(),
        String::new(),
    ];
    for (method, path, ty, body) in &routes {
        for origin in &spellings {
            let mut r = c
                .request(method.clone(), format!("{base}{path}"))
                .header("origin", origin)
                .header("accept", "application/json, text/event-stream")
                .body(body.clone());
            if !ty.is_empty() {
                r = r.header("content-type", *ty);
            }
            let what = format!("{method} {path} from Origin {origin:?}");
            refused(r.send().await.unwrap(), 403, "origin-not-allowed", &what).await;
        }
    }
    assert_eq!(run_list(&c, base).await, runs_before);
    assert_eq!(last_fact(&c, base, &run).await, facts_before);
    assert_eq!(
        common::get_json(&c, format!("{base}/v1/workers")).await,
        workers_before
    );

    // The true origin passes; so does https when a TLS proxy in front says
    // so (a page cannot set X-Forwarded-Proto without a preflight, which
    // is refused above as cross-origin).
    for (origin, proto) in [
        (base.clone(), None),
        (format!("https://127.0.0.1:{port}"), Some("https")),
    ] {
        let mut h = vec![json_type, ("origin", origin.as_str())];
        if let Some(p) = proto {
            h.push(("x-forwarded-proto", p));
        }
        let r = send(
            &c,
            Method::POST,
            format!("{base}/v1/check"),
            &h,
            Some(json!({ "flow": flow }).to_string()),
        )
        .await;
        assert_eq!(r.status(), 200, "Origin {origin}, proto {proto:?}");
    }
    // A proxy saying http does not make an https page same-origin.
    let r = send(
        &c,
        Method::POST,
        format!("{base}/v1/check"),
        &[
            json_type,
            ("origin", &format!("https://127.0.0.1:{port}")),
            ("x-forwarded-proto", "http"),
        ],
        Some(json!({ "flow": flow }).to_string()),
    )
    .await;
    refused(r, 403, "origin-not-allowed", "https page, http proxy").await;
}
