//! Namespaces (issue 40 item 4; REQUIREMENTS HOST-2: who can read a
//! history belongs to the host), on the real `flow serve` with a SQLite
//! file and on the real Postgres: "A token of namespace A gets 404 for
//! every route on a run of namespace B, and sees none of B's runs in any
//! listing or feed." Every route is taken from the server's own API
//! document, so a route added later is covered without touching this
//! file; a hidden run's answer must equal a missing run's.

mod common;

use common::{Schema, review_flow, serve};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

const A: &str = "team-a-token-0123456789";
const B: &str = "team-b-token-0123456789";
const ROOT: &str = "root-token-0123456789ab";
/// A run id no store holds.
const MISSING: &str = "run-01hf7yat040005yy8000000107";

fn tokens(dir: &std::path::Path) -> String {
    let p = dir.join("tokens");
    std::fs::write(
        &p,
        format!("{A} admin ns=team-a\n{B} admin ns=team-b\n{ROOT} admin ns=*\n"),
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

/// A server on SQLite (or on `schema`) with the namespaced tokens, and
/// its data directory.
fn with_tokens(schema: Option<&Schema>) -> (tempfile::TempDir, common::Server) {
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let args = ["--tokens", t.as_str()];
    let s = match schema {
        Some(schema) => serve(data.path(), &schema.serve_args(&args)),
        None => serve(data.path(), &args),
    };
    (data, s)
}

fn client() -> Client {
    Client::builder().no_proxy().build().unwrap()
}

async fn call(
    c: &Client,
    token: &str,
    m: Method,
    url: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut r = c.request(m, url).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A review run (it pauses at its person's call) started by `token` in
/// `namespace`.
async fn paused(c: &Client, base: &str, token: &str, namespace: &str) -> String {
    paused_with(c, base, token, namespace, review_flow()).await
}

/// [`paused`] with a flow of its own (a review flow, its text changed so
/// its source is a blob of its own).
async fn paused_with(c: &Client, base: &str, token: &str, namespace: &str, flow: Value) -> String {
    let (s, v) = call(
        c,
        token,
        Method::POST,
        &format!("{base}/v1/runs"),
        Some(json!({"flow": flow, "input": {"text": "hi"}, "wait": 10, "namespace": namespace})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    v["run"].as_str().unwrap().to_string()
}

/// Every operation on a run the API document lists: (method, path).
async fn run_routes(c: &Client, base: &str) -> Vec<(Method, String)> {
    let doc: Value = c
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.contains("{run}") {
            continue;
        }
        for m in ops.as_object().unwrap().keys() {
            out.push((m.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    assert!(
        out.len() >= 15,
        "the document lists the run routes: {out:?}"
    );
    out
}

fn fill(path: &str, run: &str, other: &str) -> String {
    path.replace("{run}", run)
        .replace("{other}", other)
        .replace("{fact}", "2")
        .replace("{module}", "review.json")
}

async fn scenario(base: &str) {
    let c = client();
    let b1 = paused(&c, base, B, "team-b").await;
    let a1 = paused(&c, base, A, "team-a").await;

    // Every route on B's run, as A: 404, the same answer as for a run
    // that does not exist (the id aside), whatever the body.
    for (m, path) in run_routes(&c, base).await {
        for (run, other) in [(b1.as_str(), a1.as_str()), (a1.as_str(), b1.as_str())] {
            if run == a1 && !path.contains("{other}") {
                continue;
            }
            for body in [None, Some(json!({})), Some(json!({"bad": true}))] {
                let url = format!("{base}{}", fill(&path, run, other));
                let (s, v) = call(&c, A, m.clone(), &url, body.clone()).await;
                assert_eq!(s, StatusCode::NOT_FOUND, "{m} {path} on B's run: {v}");
                let hidden = if run == b1 { run } else { other };
                let url = format!("{base}{}", fill(&path, run, other).replace(hidden, MISSING));
                let (s2, v2) = call(&c, A, m.clone(), &url, body).await;
                assert_eq!(s2, s, "{m} {path}: a missing run");
                assert_eq!(
                    v.to_string().replace(hidden, MISSING),
                    v2.to_string(),
                    "{m} {path}: indistinguishable from a missing run"
                );
            }
        }
    }
    // Not a blanket refusal: A reads its own run, B its own.
    let (s, _) = call(&c, A, Method::GET, &format!("{base}/v1/runs/{a1}"), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        &c,
        B,
        Method::GET,
        &format!("{base}/v1/runs/{b1}/facts"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    // Blobs by hash: a blob only B's runs reference is the missing
    // blob's 404 to A; one A's runs reference too (the same source) is
    // A's to read.
    let mut own = review_flow();
    own["description"] = json!("team-b's own review");
    let b_own = paused_with(&c, base, B, "team-b", own).await;
    let source = |token: &'static str, run: String| {
        let c = c.clone();
        async move {
            let (_, v) = call(
                &c,
                token,
                Method::GET,
                &format!("{base}/v1/runs/{run}/facts?kind=Start"),
                None,
            )
            .await;
            v["facts"][0]["fact"]["sources"][0]["hash"]
                .as_str()
                .unwrap_or_else(|| panic!("a source hash: {v}"))
                .to_string()
        }
    };
    let (hidden, shared) = (source(B, b_own.clone()).await, source(A, a1.clone()).await);
    assert_ne!(hidden, shared);
    let blob = |token: &'static str, hash: String| {
        let c = c.clone();
        async move {
            call(
                &c,
                token,
                Method::GET,
                &format!("{base}/v1/blobs/{hash}"),
                None,
            )
            .await
        }
    };
    let (s, v) = blob(A, hidden.clone()).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "B's blob to A: {v}");
    let missing = format!("blake3:{}", "0".repeat(64));
    let (s2, v2) = blob(A, missing.clone()).await;
    assert_eq!(
        (s2, v.to_string().replace(&hidden, &missing)),
        (s, v2.to_string()),
        "indistinguishable from a missing blob"
    );
    for (token, hash) in [(B, &hidden), (ROOT, &hidden), (A, &shared), (B, &shared)] {
        let (s, v) = blob(token, hash.clone()).await;
        assert_eq!(s, StatusCode::OK, "{hash}: {v}");
    }

    // The metrics are every namespace's: for an `ns=*` token only.
    let (s, v) = call(&c, A, Method::GET, &format!("{base}/metrics"), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("ns=*"), "{v}");
    let (s, _) = call(&c, ROOT, Method::GET, &format!("{base}/metrics"), None).await;
    assert_eq!(s, StatusCode::OK);

    // Listings and counts.
    let (_, v) = call(
        &c,
        A,
        Method::GET,
        &format!("{base}/v1/runs?counts=true"),
        None,
    )
    .await;
    let listed: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [a1.as_str()], "{v}");
    assert_eq!(v["runs"][0]["namespace"], "team-a");
    assert_eq!(v["counts"]["total"], 1, "{v}");
    assert_eq!(v["counts"]["byState"]["paused"], 1, "{v}");
    let (_, v) = call(
        &c,
        A,
        Method::GET,
        &format!("{base}/v1/runs?namespace=team-b"),
        None,
    )
    .await;
    assert!(v["runs"].as_array().unwrap().is_empty(), "{v}");
    let (_, v) = call(
        &c,
        ROOT,
        Method::GET,
        &format!("{base}/v1/runs?counts=true"),
        None,
    )
    .await;
    assert_eq!(v["counts"]["total"], 3, "an ns=* admin sees every one: {v}");

    // The inbox.
    let (_, v) = call(&c, A, Method::GET, &format!("{base}/v1/calls"), None).await;
    let runs: Vec<&str> = v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(runs, [a1.as_str()], "{v}");
    assert_eq!(v["total"], 1, "{v}");
    let (_, v) = call(
        &c,
        A,
        Method::GET,
        &format!("{base}/v1/calls?run={b1}"),
        None,
    )
    .await;
    assert!(v["calls"].as_array().unwrap().is_empty(), "{v}");

    // Starting and importing elsewhere is refused, and a bad name says
    // the form.
    let (s, v) = call(
        &c,
        A,
        Method::POST,
        &format!("{base}/v1/runs"),
        Some(json!({"flow": review_flow(), "input": {"text": "x"}, "namespace": "team-b"})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = call(
        &c,
        A,
        Method::POST,
        &format!("{base}/v1/runs"),
        Some(json!({"flow": review_flow(), "input": {"text": "x"}, "namespace": "Team"})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("a-z, 0-9"), "{v}");

    // A fork lives beside its parent.
    let (_, facts) = call(
        &c,
        A,
        Method::GET,
        &format!("{base}/v1/runs/{a1}/facts"),
        None,
    )
    .await;
    let checkpoint = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "Checkpoint")
        .map(|f| f["n"].clone())
        .unwrap_or_else(|| panic!("a checkpoint: {facts}"));
    let (s, v) = call(
        &c,
        A,
        Method::POST,
        &format!("{base}/v1/runs/{a1}/fork"),
        Some(json!({"checkpoint": checkpoint})),
    )
    .await;
    assert!(s.is_success(), "{v}");
    let fork = v["run"].as_str().unwrap().to_string();
    let (_, v) = call(
        &c,
        A,
        Method::GET,
        &format!("{base}/v1/runs?fork_of={a1}"),
        None,
    )
    .await;
    assert_eq!(v["runs"][0]["namespace"], "team-a", "{v}");

    // An import into a namespace: B's archive, exported by B, imported by
    // the root token into `archive`, is no run of A's or B's.
    let tar = c
        .get(format!("{base}/v1/runs/{b1}/archive"))
        .bearer_auth(B)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let fresh = serve(
        tempfile::tempdir().unwrap().keep().as_path(),
        &["--tokens", &tokens(&tempfile::tempdir().unwrap().keep())],
    );
    let r = c
        .post(format!("{}/v1/archives?namespace=team-a", fresh.base))
        .bearer_auth(A)
        .header("content-type", "application/x-tar")
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().await.unwrap()
    );
    let (_, v) = call(&c, B, Method::GET, &format!("{}/v1/runs", fresh.base), None).await;
    assert!(
        v["runs"].as_array().unwrap().is_empty(),
        "imported into team-a: {v}"
    );
    let (_, v) = call(&c, A, Method::GET, &format!("{}/v1/runs", fresh.base), None).await;
    assert_eq!(v["runs"][0]["run"], b1.as_str(), "{v}");
    let r = c
        .post(format!("{}/v1/archives?namespace=team-b", fresh.base))
        .bearer_auth(A)
        .header("content-type", "application/x-tar")
        .body(tar)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // A fork imported into another namespace than its parent's: each
    // side's tokens see no trace of the other's run — not among the
    // parent's children, and the fork's parent reads as a deleted one.
    for (run, ns) in [(&a1, "team-a"), (&fork, "team-b")] {
        let tar = c
            .get(format!("{base}/v1/runs/{run}/archive"))
            .bearer_auth(A)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let r = c
            .post(format!("{}/v1/archives?namespace={ns}", fresh.base))
            .bearer_auth(ROOT)
            .header("content-type", "application/x-tar")
            .body(tar)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::CREATED,
            "{}",
            r.text().await.unwrap()
        );
    }
    let view = |token: &'static str, path: String| {
        let (c, url) = (c.clone(), format!("{}{path}", fresh.base));
        async move {
            let (s, v) = call(&c, token, Method::GET, &url, None).await;
            assert_eq!(s, StatusCode::OK, "{url}: {v}");
            v
        }
    };
    let children = |v: &Value| -> Vec<String> {
        v["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["run"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(children(&view(A, format!("/v1/runs/{a1}")).await).is_empty());
    assert_eq!(
        children(&view(ROOT, format!("/v1/runs/{a1}")).await),
        [fork.as_str()]
    );
    let v = view(B, format!("/v1/runs/{fork}")).await;
    assert_eq!(v["parent"]["deleted"], true, "{v}");
    let v = view(B, format!("/v1/runs/{fork}/lineage")).await;
    assert_eq!(v["ancestors"][0]["deleted"], true, "{v}");
    let v = view(ROOT, format!("/v1/runs/{fork}")).await;
    assert!(v["parent"]["deleted"].is_null(), "{v}");

    // The feed: A is told of its own runs' changes, never of B's.
    let mut feed = c
        .get(format!("{base}/v1/events"))
        .bearer_auth(A)
        .send()
        .await
        .unwrap();
    assert_eq!(feed.status(), StatusCode::OK);
    let b2 = paused(&c, base, B, "team-b").await;
    let a2 = paused(&c, base, A, "team-a").await;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !text.contains(&a2) {
            let chunk = feed.chunk().await.unwrap().expect("the feed goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("A's run reported");
    assert!(
        !text.contains(&b2) && !text.contains(&b1),
        "B's runs in A's feed: {text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_a_token_sees_only_its_namespaces() {
    let (_data, s) = with_tokens(None);
    scenario(&s.base).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_a_token_sees_only_its_namespaces() {
    let Some(schema) = Schema::new() else { return };
    let (_data, s) = with_tokens(Some(&schema));
    scenario(&s.base).await;
}

/// `flow` with `args`: (exit code, stdout, stderr).
fn flow(args: &[&str]) -> (i32, String, String) {
    let out = common::flow().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The run ids `flow … runs --json` lists, with their namespaces.
fn listed(prefix: &[&str], more: &[&str]) -> Vec<(String, String)> {
    let args: Vec<&str> = prefix
        .iter()
        .chain(&["--json", "runs"])
        .chain(more)
        .copied()
        .collect();
    let (code, out, err) = flow(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_string(),
                r["namespace"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The CLI: `flow runs --namespace` narrows the listing, locally and over
/// `--server`; the human rows show the namespace once one is not
/// `default`; `flow import --namespace` places the runs, locally and over
/// `--server`; a bad name is refused with the form, changing nothing.
#[test]
fn the_cli_lists_and_imports_by_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let local = ["--data", data.to_str().unwrap()];
    let review = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    let review = review.to_str().unwrap();
    let start = |more: &[&str]| {
        let args: Vec<&str> = local
            .iter()
            .chain(&["--json", "run", review, "--input", r#"{"text": "hi"}"#])
            .chain(more)
            .copied()
            .collect();
        let (_, out, err) = flow(&args);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out} {err}"));
        v["run"].as_str().unwrap().to_string()
    };
    let plain = start(&[]);
    let (code, out, _) = flow(&[&local[..], &["runs"]].concat());
    assert_eq!(code, 0);
    assert!(!out.contains("NAMESPACE"), "default's alone: {out}");
    let team = start(&["--namespace", "team-a"]);

    assert_eq!(
        listed(&local, &["--namespace", "team-a"]),
        [(team.clone(), "team-a".to_string())]
    );
    assert_eq!(
        listed(&local, &["--namespace", "default"]),
        [(plain.clone(), "default".to_string())]
    );
    let (code, out, _) = flow(&[&local[..], &["runs"]].concat());
    assert_eq!(code, 0);
    let header = out.lines().next().unwrap();
    assert!(header.contains("NAMESPACE"), "{out}");
    for (run, ns) in [(&team, "team-a"), (&plain, "default")] {
        let row = out.lines().find(|l| l.starts_with(run.as_str())).unwrap();
        assert_eq!(row.split_whitespace().nth(1), Some(ns), "{out}");
    }
    let (code, _, err) = flow(&[&local[..], &["runs", "--namespace", "Team"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a-z, 0-9"), "{err}");

    // Import into a namespace, locally.
    let archive = dir.path().join("archive");
    let (code, _, err) = flow(
        &[
            &local[..],
            &["export", &team, "--out", archive.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let other = dir.path().join("other");
    let there = ["--data", other.to_str().unwrap()];
    let (code, _, err) = flow(
        &[
            &there[..],
            &["import", archive.to_str().unwrap(), "--namespace", "Bad"],
        ]
        .concat(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(!other.join("flow.db").exists(), "nothing written");
    let (code, _, err) = flow(
        &[
            &there[..],
            &["import", archive.to_str().unwrap(), "--namespace", "team-b"],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed(&there, &[]), [(team.clone(), "team-b".to_string())]);

    // Over --server: the same flags.
    let served = dir.path().join("served");
    let s = serve(&served, &[]);
    let remote = ["--server", s.base.as_str()];
    let (code, _, err) = flow(
        &[
            &remote[..],
            &["import", archive.to_str().unwrap(), "--namespace", "team-c"],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        listed(&remote, &["--namespace", "team-c"]),
        [(team.clone(), "team-c".to_string())]
    );
    assert!(listed(&remote, &["--namespace", "default"]).is_empty());
}

/// An MCP session over `/mcp` with `token` (streamable HTTP, driven by
/// hand: each request's answer is the `data:` line with its id).
struct Mcp {
    c: Client,
    url: String,
    token: &'static str,
    session: String,
}

impl Mcp {
    async fn post(
        c: &Client,
        url: &str,
        token: &str,
        session: Option<&str>,
        msg: Value,
    ) -> reqwest::Response {
        let mut r = c
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&msg);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send().await.unwrap()
    }

    /// The JSON-RPC answer with `id` in a response's text.
    async fn answer(r: reqwest::Response, id: u64) -> Value {
        let text = tokio::time::timeout(Duration::from_secs(30), r.text())
            .await
            .expect("answered in time")
            .unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .chain(std::iter::once(text.as_str()))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id} in {text}"))
    }

    async fn open(base: &str, token: &'static str) -> Mcp {
        let (c, url) = (client(), format!("{base}/mcp"));
        let r = Mcp::post(
            &c,
            &url,
            token,
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "namespaces", "version": "1"}}}),
        )
        .await;
        assert!(r.status().is_success(), "{}", r.status());
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let init = Mcp::answer(r, 1).await;
        assert!(init.get("result").is_some(), "{init}");
        let r = Mcp::post(
            &c,
            &url,
            token,
            Some(&session),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
        assert!(r.status().is_success(), "{}", r.status());
        Mcp {
            c,
            url,
            token,
            session,
        }
    }

    /// A tool's answer (the JSON-RPC message, error or result).
    async fn tool(&self, name: &str, args: Value) -> Value {
        let r = Mcp::post(
            &self.c,
            &self.url,
            self.token,
            Some(&self.session),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": name, "arguments": args}}),
        )
        .await;
        Mcp::answer(r, 7).await
    }
}

/// MCP with a namespace-A token: `runs` lists none of B's runs, and
/// `history`, `replay` and `resume` answer for B's run exactly as for a
/// run that does not exist.
async fn mcp_scenario(base: &str) {
    let c = client();
    let b1 = paused(&c, base, B, "team-b").await;
    let a1 = paused(&c, base, A, "team-a").await;
    let mcp = Mcp::open(base, A).await;
    let v = mcp.tool("runs", json!({})).await;
    let text = v.to_string();
    assert!(text.contains(&a1), "A's run listed: {text}");
    assert!(!text.contains(&b1), "B's run listed to A: {text}");
    for (tool, args) in [
        ("history", json!({"run": "RUN"})),
        ("replay", json!({"run": "RUN"})),
        (
            "resume",
            json!({"run": "RUN", "call": "c1:root#1", "reply": {"Ok": {}}}),
        ),
    ] {
        let ask = |run: &str| serde_json::from_str(&args.to_string().replace("RUN", run)).unwrap();
        let hidden = mcp.tool(tool, ask(&b1)).await;
        let missing = mcp.tool(tool, ask(MISSING)).await;
        assert_eq!(
            hidden.to_string().replace(&b1, MISSING),
            missing.to_string(),
            "{tool}: B's run to A is a run that does not exist"
        );
        assert_eq!(
            hidden["result"]["structuredContent"]["error"], "not-found",
            "{tool}: {hidden}"
        );
    }
    // Not a blanket refusal: A's own run reads.
    let v = mcp.tool("history", json!({"run": a1})).await;
    assert!(
        v["result"]["isError"] != true && v.get("error").is_none(),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_mcp_sees_only_its_namespaces() {
    let (_data, s) = with_tokens(None);
    mcp_scenario(&s.base).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_mcp_sees_only_its_namespaces() {
    let Some(schema) = Schema::new() else { return };
    let (_data, s) = with_tokens(Some(&schema));
    mcp_scenario(&s.base).await;
}
