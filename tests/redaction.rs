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

use common::tokens::{ADMIN, RUNNER, client, tokens};

use common::{Schema, TestApp, review_flow, serve};
use serde_json::{Value, json};

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
    let (_, view) = get(&runner, format!("{base}/v1/runs/{a}")).await;
    assert_eq!(view["holes"].as_array().map(Vec::len), Some(2), "{view}");
    // A checkpoint's state is shown with its hole, not refused.
    let (s, cp) = get(&runner, format!("{base}/v1/runs/{a}/checkpoints/2")).await;
    assert_eq!(s, 200, "{cp}");
    assert!(cp["state"]["text"]["$hole"].is_string(), "{cp}");
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

    // An export of A keeps its holes; imported again, they are holes.
    let tar = archive(&runner, base, &a, "").await;
    assert!(!contains(&tar, &mark_a), "the archive has no redacted byte");
    assert!(contains(&tar, "holes.json"), "it lists the holes");
    let (s, v) = delete_run(&admin, base, &a).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = import(&admin, base, tar).await;
    assert_eq!(s, 201, "{v}");
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{a}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");
    assert!(facts(&runner, base, &a).await.contains("$hole"));
    let (_, r) = post(&runner, format!("{base}/v1/runs/{a}/replay"), json!({})).await;
    assert_eq!(r["reason"], "hole", "{r}");
    assert!(!db.holds(&mark_a));

    // `?redact=`: C's archive leaves its text out and still imports.
    let (s, v) = get(
        &runner,
        format!("{base}/v1/runs/{c}/archive?redact=/input/nope"),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let tar = archive(
        &runner,
        base,
        &c,
        "?redact=/input/text,/calls/c1:root%231/args/prompt",
    )
    .await;
    assert!(
        !contains(&tar, &mark_b),
        "the redacted archive has no marker"
    );
    assert!(
        facts(&runner, base, &c).await.contains(&mark_b),
        "the store keeps it"
    );
    let (s, v) = delete_run(&admin, base, &c).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = import(&admin, base, tar).await;
    assert_eq!(s, 201, "{v}");
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{c}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");
    let shown = facts(&runner, base, &c).await;
    assert!(
        shown.contains("$hole") && !shown.contains(&mark_b),
        "{shown}"
    );
}

fn contains(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn archive(c: &reqwest::Client, base: &str, run: &str, q: &str) -> Vec<u8> {
    let r = c
        .get(format!("{base}/v1/runs/{run}/archive{q}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.bytes().await.unwrap().to_vec()
}

async fn import(c: &reqwest::Client, base: &str, tar: Vec<u8>) -> (u16, Value) {
    let r = c
        .post(format!("{base}/v1/archives"))
        .header("content-type", "application/x-tar")
        .body(tar)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn delete_run(c: &reqwest::Client, base: &str, run: &str) -> (u16, Value) {
    let r = c
        .delete(format!("{base}/v1/runs/{run}"))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
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
    let s = serve(data.path(), &schema.serve_args(&["--tokens", &t]));
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
    let human = String::from_utf8_lossy(&app.cmd(&["history", &run]).stdout).to_string();
    assert!(
        human.contains("fact 1 holds a redacted value") && human.contains("Start  [redacted]"),
        "flow history says redacted, not an error: {human}"
    );
    let (code, v) = app.json(&["replay", &run]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(
        (v["verdict"].as_str(), v["reason"].as_str()),
        (Some("incomplete"), Some("hole"))
    );
    let (code, v) = app.json(&["redact", &run, "--path", "/input/nope", "--yes"]);
    assert_eq!(code, 2, "{v}");

    // A fork from state that holds the hole is refused, naming where,
    // until every hole is supplied with --set.
    let cp = v_checkpoint(&app, &run, "review");
    let (code, v) = app.json(&["fork", &run, "--checkpoint", &cp]);
    assert_eq!(code, 2, "{v}");
    assert!(v.to_string().contains("/state/"), "names the hole: {v}");
    let (code, v) = app.json(&["fork", &run, "--checkpoint", &cp, "--set", "text=\"again\""]);
    assert_eq!(code, 2, "draft and log still hold it: {v}");
    let (code, v) = app.json(&[
        "fork",
        &run,
        "--checkpoint",
        &cp,
        "--set",
        "text=\"again\"",
        "--set",
        "draft=\"again\"",
        "--set",
        "log=[\"again\"]",
    ]);
    assert_eq!(
        code, 3,
        "every hole supplied: the fork runs and pauses: {v}"
    );
    let fork = v["run"].as_str().unwrap().to_string();
    let (code, v) = app.json(&["replay", &fork]);
    assert_eq!(
        (code, v["verdict"].as_str()),
        (1, Some("incomplete")),
        "{v}"
    );
    assert!(v.get("reason").is_none(), "the fork has no hole: {v}");
}

/// The fact number of `run`'s Checkpoint at `node`.
fn v_checkpoint(app: &TestApp, run: &str, node: &str) -> String {
    let (_, h) = app.json(&["history", run]);
    h["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "Checkpoint" && f["fact"]["node"] == node)
        .unwrap_or_else(|| panic!("no {node} checkpoint: {h}"))["n"]
        .to_string()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.join("blobs")).unwrap();
    for f in files_under(from) {
        let rel = f.strip_prefix(from).unwrap();
        std::fs::copy(&f, to.join(rel)).unwrap();
    }
}

/// Archives on local stores: `flow export --redact` writes an archive
/// with holes (holes.json, no redacted byte in any file) that imports and
/// verifies; a hole refilled with other bytes is refused with nothing
/// written; refilled with the original bytes (they hash to the reference)
/// it imports with the value back; a store's own holes stay holes through
/// export and import.
#[test]
fn cli_archives_with_holes() {
    let app = TestApp::new();
    let flow = app.data.path().join("review.json");
    std::fs::write(&flow, review_flow().to_string()).unwrap();
    let mark = marker("arch");
    let input = json!({"text": secret(&mark)}).to_string();
    let (code, v) = app.json(&["run", flow.to_str().unwrap(), "--input", &input]);
    assert_eq!(code, 3, "paused: {v}");
    let run = v["run"].as_str().unwrap().to_string();
    let work = tempfile::tempdir().unwrap();
    let (full, red) = (work.path().join("full"), work.path().join("red"));
    let (code, v) = app.json(&["export", &run, "--out", full.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert!(!full.join("holes.json").exists(), "no holes, no holes.json");
    let (code, v) = app.json(&[
        "export",
        &run,
        "--out",
        red.to_str().unwrap(),
        "--redact",
        "/input/text",
        "--redact",
        "/calls/c1:root#1/args/prompt",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(red.join("holes.json").exists());
    assert!(
        !in_files(&files_under(&red), &mark),
        "no redacted byte is in the archive"
    );
    let holes: Value =
        serde_json::from_str(&std::fs::read_to_string(red.join("holes.json")).unwrap()).unwrap();
    let holes: Vec<String> = holes["holes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            h.as_str()
                .unwrap()
                .trim_start_matches("blake3:")
                .to_string()
        })
        .collect();
    assert_eq!(holes.len(), 2, "{holes:?}");
    let (code, v) = app.json(&[
        "export",
        &run,
        "--out",
        work.path().join("x").to_str().unwrap(),
        "--redact",
        "/input/nope",
    ]);
    assert_eq!(code, 2, "a path that reaches no blob: {v}");

    // Imported: it verifies (TestApp checks on drop), shows the holes,
    // replays incomplete: hole.
    let other = TestApp::new();
    let (code, v) = other.json(&["import", red.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let (_, h) = other.json(&["history", &run]);
    assert!(
        h["facts"][0]["fact"]["input"]["text"]["$hole"].is_string(),
        "{h}"
    );
    let (code, v) = other.json(&["replay", &run]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("hole")), "{v}");
    assert!(!in_files(&files_under(other.data.path()), &mark));

    // Refilled with other bytes: refused, nothing written.
    let bad = work.path().join("bad");
    copy_dir(&red, &bad);
    std::fs::write(
        bad.join("blobs").join(&holes[0]),
        format!("\"{}\"", "forged ".repeat(200)),
    )
    .unwrap();
    let third = TestApp::new();
    let (code, v) = third.json(&["import", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "a refilled hole is refused: {v}");
    assert!(v.to_string().contains(&holes[0]), "names the blob: {v}");
    assert_eq!(third.runs(), 0, "nothing written");

    // Refilled with the original bytes: they hash to the reference.
    let good = work.path().join("good");
    copy_dir(&red, &good);
    for h in &holes {
        std::fs::copy(full.join("blobs").join(h), good.join("blobs").join(h)).unwrap();
    }
    let fourth = TestApp::new();
    let (code, v) = fourth.json(&["import", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let (_, h) = fourth.json(&["history", &run]);
    assert!(h.to_string().contains(&mark), "the value is back");

    // The store's own holes stay holes through export and import.
    let (code, v) = app.json(&["redact", &run, "--path", "/input/text", "--yes"]);
    assert_eq!(code, 0, "{v}");
    let again = work.path().join("again");
    let (code, v) = app.json(&["export", &run, "--out", again.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert!(
        again.join("holes.json").exists(),
        "the store's hole is listed"
    );
    let fifth = TestApp::new();
    let (code, v) = fifth.json(&["import", again.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let (_, h) = fifth.json(&["history", &run]);
    assert!(
        h["facts"][0]["fact"]["input"]["text"]["$hole"].is_string(),
        "{h}"
    );
}

/// Issue 40 item 2: a flow that declares fields in
/// `runtime_hints.sensitive` has them stored as blobs whatever their size
/// (the checker accepts the hint), in the input and in the state
/// (snapshots and deltas, a list's items too), so a small value can be
/// redacted and every stored copy of it in those places becomes the hole.
/// The same value in a flow without the hint is inline: refused, saying
/// what to do.
#[test]
fn cli_sensitive_small_values() {
    let app = TestApp::new();
    let mut flow = review_flow();
    flow["runtime_hints"] =
        json!({"sensitive": ["/input/text", "/state/text", "/state/draft", "/state/log"]});
    let file = app.data.path().join("sensitive.json");
    std::fs::write(&file, flow.to_string()).unwrap();
    let (code, v) = app.json(&["check", file.to_str().unwrap()]);
    assert_eq!((code, v["diagnostics"].clone()), (0, json!([])), "{v}");
    let mark = marker("ssn");
    let input = json!({"text": mark}).to_string();
    let (code, v) = app.json(&["run", file.to_str().unwrap(), "--input", &input]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = app.json(&["redact", &run, "--path", "/input/text", "--yes"]);
    assert_eq!(code, 0, "{v}");
    let (_, h) = app.json(&["history", &run]);
    for f in h["facts"].as_array().unwrap() {
        // The hitl prompt quotes the text in a Tool's args: not a state
        // or input position (docs/custody.md "Sensitive values").
        if f["kind"] != "Call" {
            assert!(!f["fact"].to_string().contains(&mark), "{}", f["fact"]);
        }
    }
    assert!(
        h["facts"][0]["fact"]["input"]["text"]["$hole"].is_string(),
        "{h}"
    );
    let (code, v) = app.json(&["replay", &run]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("hole")), "{v}");

    // Without the hint the same small value is inline.
    let plain = app.data.path().join("plain.json");
    std::fs::write(&plain, review_flow().to_string()).unwrap();
    let (_, v) = app.json(&["run", plain.to_str().unwrap(), "--input", &input]);
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = app.json(&["redact", &run, "--path", "/input/text", "--yes"]);
    assert_eq!(code, 2, "{v}");
    assert!(v.to_string().contains("runtime_hints.sensitive"), "{v}");
}

/// A hole is not a licence to lose blobs: in a run with a hole, a blob
/// that is missing and is not a recorded hole is still a storage failure
/// (exit 5) naming the run and the fact.
#[test]
fn a_missing_blob_that_is_no_hole_is_a_storage_failure() {
    let data = tempfile::tempdir().unwrap();
    let run_flow = |args: &[&str]| {
        let out = common::flow()
            .arg("--json")
            .arg("--data")
            .arg(data.path())
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.code().unwrap_or(-1), text)
    };
    let file = data.path().join("review.json");
    std::fs::write(&file, review_flow().to_string()).unwrap();
    let input = json!({"text": secret(&marker("lost"))}).to_string();
    let (code, text) = run_flow(&["run", file.to_str().unwrap(), "--input", &input]);
    assert_eq!(code, 3, "{text}");
    let run = serde_json::from_str::<Value>(&text).unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, text) = run_flow(&["redact", &run, "--path", "/input/text", "--yes"]);
    assert_eq!(code, 0, "{text}");
    // The prompt's blob (not a hole) goes behind the store's back.
    let db = rusqlite::Connection::open(data.path().join("flow.db")).unwrap();
    let gone = db
        .execute(
            "DELETE FROM blobs WHERE hash NOT IN (SELECT hash FROM holes) AND length(body) > 1024 AND CAST(body AS TEXT) LIKE '\"Approve%'",
            [],
        )
        .unwrap();
    assert_eq!(gone, 1);
    drop(db);
    let (code, text) = run_flow(&["history", &run]);
    assert_eq!(code, 5, "{text}");
    assert!(
        text.contains("storage failure") && text.contains(&run),
        "{text}"
    );
}
