//! Holes: redacting values of stored runs (issue 40 item 2 and item 5's
//! `--redact`, docs/custody.md "Holes"; REQUIREMENTS HOST-2, GAP-HIST-3,
//! GAP-RPL-1) on a real `flow serve` (SQLite and Postgres) and the real
//! `flow` binary: after a redaction the chain verifies, the facts show
//! `$hole`, replay answers incomplete with reason hole, the redacted
//! content is gone from the SQLite file and WAL (their bytes are searched
//! for a marker) and from Postgres's `blobs`; a blob another run shares
//! stays readable for it; `redact` needs scope `admin` (403) and an
//! existing run (404), and a value stored inline is refused (400) with
//! what to do.

mod common;

use common::{Schema, TestApp, review_flow, serve};
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-0123456789";
const RUNNER: &str = "run-token-0123456789ab";

fn client(token: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .no_proxy()
        .default_headers(h)
        .build()
        .unwrap()
}

fn tokens(dir: &std::path::Path) -> String {
    let p = dir.join("tokens");
    std::fs::write(&p, format!("{ADMIN} admin\n{RUNNER} run\n")).unwrap();
    p.to_str().unwrap().to_string()
}

/// A text over 1 KiB (so a blob) that carries `marker`.
fn secret(marker: &str) -> String {
    format!("{marker} {}", "confidential ".repeat(100))
}

/// A fresh marker: no other byte of the store can hold it by chance.
fn marker(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("MARK-{tag}-{nanos}-{}", std::process::id())
}

async fn start(c: &reqwest::Client, base: &str, text: &str) -> String {
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": review_flow(), "input": {"text": text}, "wait": 20}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert!(status.is_success(), "{status} {v}");
    assert_eq!(v["state"], "paused", "{v}");
    v["run"].as_str().unwrap().to_string()
}

async fn approve(c: &reqwest::Client, base: &str, run: &str) {
    let r = c
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved"}}, "wait": 20}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "completed", "{v}");
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn redact(c: &reqwest::Client, base: &str, run: &str, paths: &[&str]) -> (u16, Value) {
    post(
        c,
        format!("{base}/v1/runs/{run}/redact"),
        json!({ "paths": paths }),
    )
    .await
}

/// The run's verified facts, as the facts page serves them.
async fn facts(c: &reqwest::Client, base: &str, run: &str) -> String {
    let (s, v) = get(c, format!("{base}/v1/runs/{run}/facts?limit=200")).await;
    assert_eq!(s, 200, "{v}");
    v["facts"].to_string()
}

/// Whether the bytes of any file named hold `needle`.
fn in_files(files: &[std::path::PathBuf], needle: &str) -> bool {
    files.iter().any(|f| {
        std::fs::read(f)
            .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .unwrap_or(false)
    })
}

/// What the database holds, seen from outside the store.
enum Db<'a> {
    Sqlite(&'a std::path::Path),
    Postgres(&'a Schema),
}

impl Db<'_> {
    /// Whether any stored byte holds `needle`: on SQLite the file, its WAL
    /// and shm; on Postgres the live rows of `blobs` and `facts`.
    fn holds(&self, needle: &str) -> bool {
        match self {
            Db::Sqlite(dir) => in_files(
                &["flow.db", "flow.db-wal", "flow.db-shm"].map(|f| dir.join(f)),
                needle,
            ),
            Db::Postgres(schema) => {
                let q = |sql: &str| schema.query(sql)[0][0].clone().unwrap_or_default();
                q(&format!(
                    "SELECT count(*) FROM blobs WHERE position('{needle}'::bytea in body) > 0"
                )) != "0"
                    || q(&format!(
                        "SELECT count(*) FROM facts WHERE position('{needle}' in body) > 0"
                    )) != "0"
            }
        }
    }
}

/// The whole story on one server.
async fn redaction_on(base: &str, db: Db<'_>) {
    let (admin, runner) = (client(ADMIN), client(RUNNER));

    // Run A: its input (and the hitl prompt quoting it) carry a marker.
    let mark_a = marker("a");
    let a = start(&runner, base, &secret(&mark_a)).await;
    approve(&runner, base, &a).await;
    assert!(db.holds(&mark_a), "the marker is stored before");
    let paths = ["/input/text", "/calls/c1:root#1/args/prompt"];

    // Scope, run and path checks change nothing.
    let (s, v) = redact(&runner, base, &a, &paths).await;
    assert_eq!(s, 403, "a run token may not redact: {v}");
    let (s, v) = redact(&admin, base, "run-01arz3ndektsv4rrffq69g5fav", &paths).await;
    assert_eq!(s, 404, "{v}");
    let (s, v) = redact(&admin, base, &a, &["/calls/c1:root#1/reply/decision"]).await;
    assert_eq!(s, 400, "an inline value: {v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("runtime_hints.sensitive"),
        "says what to do: {v}"
    );
    let (s, v) = redact(&admin, base, &a, &["input/text"]).await;
    assert_eq!(s, 400, "a malformed path: {v}");
    assert!(db.holds(&mark_a), "refusals change nothing");

    let (s, v) = redact(&admin, base, &a, &paths).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["hashes"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["blobsRemoved"], 2, "{v}");
    assert!(v["who"].as_str().unwrap().starts_with("token:"), "{v}");
    let hole = v["hashes"][0].as_str().unwrap().to_string();

    // The chain verifies; the facts show holes; replay: incomplete, hole.
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{a}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");
    let shown = facts(&runner, base, &a).await;
    assert!(
        shown.contains("$hole") && !shown.contains(&mark_a),
        "{shown}"
    );
    let (s, r) = post(&runner, format!("{base}/v1/runs/{a}/replay"), json!({})).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (
            r["verdict"].as_str(),
            r["reason"].as_str(),
            r["fact"].as_u64()
        ),
        (Some("incomplete"), Some("hole"), Some(1)),
        "{r}"
    );
    let (s, _) = get(&runner, format!("{base}/v1/blobs/{hole}")).await;
    assert_eq!(s, 404, "the blob is gone");
    assert!(
        !db.holds(&mark_a),
        "the redacted content is gone from the database"
    );

    // Runs B and C share a text: redacting B's keeps C's.
    let mark_b = marker("b");
    let b = start(&runner, base, &secret(&mark_b)).await;
    let c = start(&runner, base, &secret(&mark_b)).await;
    let (s, v) = redact(&admin, base, &b, &paths).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["blobsRemoved"], 0, "C still references them: {v}");
    assert!(!facts(&runner, base, &b).await.contains(&mark_b));
    assert!(
        facts(&runner, base, &c).await.contains(&mark_b),
        "C reads it"
    );
    assert_eq!(common::verdict(&runner, base, &c).await, "incomplete");
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{c}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");
    // B cannot go on from state that holds the hole.
    let (s, v) = post(
        &runner,
        format!("{base}/v1/runs/{b}/resume"),
        json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved"}}}),
    )
    .await;
    assert_eq!(s, 409, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("hole"), "{v}");
    // C goes on to its end and replays matched.
    approve(&runner, base, &c).await;
    assert_eq!(common::verdict(&runner, base, &c).await, "matched");
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_redaction() {
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(data.path(), &["--tokens", &t]);
    redaction_on(&s.base, Db::Sqlite(data.path())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_redaction() {
    let Some(schema) = Schema::new() else { return };
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(
        data.path(),
        &[
            "--tokens",
            &t,
            "--postgres",
            &schema.url,
            "--postgres-schema",
            &schema.name,
        ],
    );
    redaction_on(&s.base, Db::Postgres(&schema)).await;
}

/// `flow redact` on a local store: the history verifies (TestApp checks
/// every run when it drops), `flow history` shows the hole, `flow replay`
/// says incomplete with reason hole (exit 1); without --yes nothing
/// changes.
#[test]
fn cli_redact_locally() {
    let app = TestApp::new();
    let flow = app.data.path().join("review.json");
    std::fs::write(&flow, review_flow().to_string()).unwrap();
    let mark = marker("cli");
    let input = json!({"text": secret(&mark)}).to_string();
    let (code, v) = app.json(&["run", flow.to_str().unwrap(), "--input", &input]);
    assert_eq!(code, 3, "paused: {v}");
    let run = v["run"].as_str().unwrap().to_string();
    let out = app.cmd(&["redact", &run, "--path", "/input/text"]);
    assert_eq!(out.status.code(), Some(2), "no --yes, no terminal");
    let (code, v) = app.json(&["history", &run]);
    assert_eq!(code, 0, "{v}");
    assert!(v.to_string().contains(&mark), "nothing changed");
    let (code, v) = app.json(&["redact", &run, "--path", "/input/text", "--yes"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["who"], "cli", "{v}");
    let (code, v) = app.json(&["history", &run]);
    assert_eq!(code, 0, "{v}");
    let start = &v["facts"][0]["fact"];
    assert!(start["input"]["text"]["$hole"].is_string(), "{start}");
    assert!(!start.to_string().contains(&mark), "{start}");
    assert_eq!(v["verdict"]["reason"], "hole", "{v}");
    let (code, v) = app.json(&["replay", &run]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(
        (v["verdict"].as_str(), v["reason"].as_str()),
        (Some("incomplete"), Some("hole"))
    );
    let (code, v) = app.json(&["redact", &run, "--path", "/input/nope", "--yes"]);
    assert_eq!(code, 2, "{v}");
}
