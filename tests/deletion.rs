//! Deleting runs and retention (issue 40 item 1, docs/custody.md;
//! REQUIREMENTS HOST-2: "retention and deletion ... belong to the host")
//! on a real `flow serve`, on SQLite and on Postgres: a parent deleted
//! while its fork goes on (the fork verifies, completes and replays
//! matched; a blob the fork shares survives, the parent's own is gone from
//! the database; the audit row is there); `DELETE` needs scope `admin`
//! (403) and an existing run (404); the sweeper deletes old completed runs and keeps young and paused ones.

mod common;

use common::tokens::{ADMIN, RUNNER, client, tokens};

use common::{Schema, review_flow, serve};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The database, as the test reads it: one row of one column per query.
trait Db {
    fn rows(&self, sql: &str) -> Vec<String>;
}

struct Sqlite(std::path::PathBuf);

impl Db for Sqlite {
    fn rows(&self, sql: &str) -> Vec<String> {
        let c = rusqlite::Connection::open(&self.0).unwrap();
        c.prepare(sql)
            .unwrap()
            .query_map([], |r| {
                Ok(match r.get_ref(0)? {
                    rusqlite::types::ValueRef::Integer(i) => i.to_string(),
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                    v => format!("{v:?}"),
                })
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}

impl Db for Schema {
    fn rows(&self, sql: &str) -> Vec<String> {
        self.query(sql)
            .into_iter()
            .map(|r| r[0].clone().unwrap_or_default())
            .collect()
    }
}

/// Lowercase hex of each blob `run` references (the store's own table).
fn blobs_of(db: &dyn Db, run: &str, hex: &str) -> BTreeSet<String> {
    db.rows(&format!(
        "SELECT lower({hex}) FROM blob_refs b JOIN runs r ON r.key = b.run_key WHERE r.id = '{run}'"
    ))
    .into_iter()
    .collect()
}

async fn start(c: &reqwest::Client, base: &str, flow: &Value, text: &str) -> String {
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "input": {"text": text}, "wait": 20}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert!(status.is_success(), "{status} {v}");
    assert_eq!(v["state"], "paused", "{v}");
    v["run"].as_str().unwrap().to_string()
}

async fn approve(c: &reqwest::Client, base: &str, run: &str, notes: &str) {
    let r = c
        .post(format!("{base}/v1/runs/{run}/resume"))
        .json(&json!({"call": "c1:root#1", "reply": {"Ok": {"decision": "approved", "notes": notes}}, "wait": 20}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert!(status == 200 || status == 202, "{status} {v}");
    assert_eq!(v["state"], "completed", "{v}");
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn delete(c: &reqwest::Client, base: &str, run: &str, q: &str) -> (u16, Value) {
    let r = c
        .delete(format!("{base}/v1/runs/{run}{q}"))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// A parent deleted while its fork goes on.
async fn parent_deleted_under_its_fork(base: &str, db: &dyn Db, hex: &str) {
    let (admin, runner) = (client(ADMIN), client(RUNNER));
    let flow = review_flow();
    // The input (over 1 KiB) is a blob the fork shares.
    let parent = start(&runner, base, &flow, &"shared ".repeat(300)).await;
    let (_, facts) = get(
        &runner,
        format!("{base}/v1/runs/{parent}/facts?kind=Checkpoint"),
    )
    .await;
    let cp = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"]["node"] == "draft")
        .unwrap_or_else(|| panic!("no draft checkpoint: {facts}"))["n"]
        .as_u64()
        .unwrap();
    let r = runner
        .post(format!("{base}/v1/runs/{parent}/fork"))
        .json(&json!({"checkpoint": cp, "wait": 20}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let fork = r.json::<Value>().await.unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string();
    // The parent's own reply (over 1 KiB) is a blob only it references.
    approve(&runner, base, &parent, &"parent only ".repeat(200)).await;
    let (p_blobs, f_blobs) = (blobs_of(db, &parent, hex), blobs_of(db, &fork, hex));
    let shared: Vec<_> = p_blobs.intersection(&f_blobs).cloned().collect();
    let own: Vec<_> = p_blobs.difference(&f_blobs).cloned().collect();
    assert!(
        !shared.is_empty() && !own.is_empty(),
        "{p_blobs:?} {f_blobs:?}"
    );
    let (_, view) = get(&runner, format!("{base}/v1/runs/{parent}")).await;
    let head_n = view["lastFact"]["n"].as_u64().unwrap();

    // A run token may not delete; an unknown run is 404; a running one 409.
    let (s, v) = delete(&runner, base, &parent, "").await;
    assert_eq!(s, 403, "{v}");
    let (s, v) = delete(&admin, base, "run-01arz3ndektsv4rrffq69g5fav", "").await;
    assert_eq!(s, 404, "{v}");

    let (s, v) = delete(&admin, base, &parent, "").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["run"], parent.as_str());
    assert_eq!(v["head"]["n"].as_u64(), Some(head_n));
    assert!(v["who"].as_str().unwrap().starts_with("token:"), "{v}");
    assert_eq!(v["blobsRemoved"].as_u64(), Some(own.len() as u64), "{v}");
    let (s, _) = get(&runner, format!("{base}/v1/runs/{parent}")).await;
    assert_eq!(s, 404);
    let (s, _) = delete(&admin, base, &parent, "").await;
    assert_eq!(s, 404, "a second deletion finds nothing");

    // The database: the shared blobs are there, the parent's own are not,
    // nothing of the parent is left, the audit row names its head.
    let count = |table: &str, h: &str| {
        db.rows(&format!(
            "SELECT count(*) FROM {table} WHERE lower({hex}) = '{h}'"
        ))[0]
            .clone()
    };
    for h in &shared {
        assert_eq!(count("blobs", h), "1", "shared blob {h} kept");
    }
    for h in &own {
        assert_eq!(count("blobs", h), "0", "the parent's own blob {h} gone");
    }
    assert_eq!(
        db.rows(&format!("SELECT count(*) FROM runs WHERE id = '{parent}'"))[0],
        "0"
    );
    let audit = db.rows(&format!(
        "SELECT head_n || ' ' || state || ' ' || who FROM deletions WHERE run = '{parent}'"
    ));
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert!(
        audit[0].starts_with(&format!("{head_n} completed token:")),
        "{audit:?}"
    );

    // The fork: lineage says its parent is deleted; it verifies, goes on
    // to its end and replays matched.
    let (_, fv) = get(&runner, format!("{base}/v1/runs/{fork}")).await;
    assert_eq!(fv["parent"]["run"], parent.as_str(), "{fv}");
    assert_eq!(fv["parent"]["deleted"], true, "{fv}");
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{fork}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");
    approve(&runner, base, &fork, "fork goes on").await;
    assert_eq!(common::verdict(&runner, base, &fork).await, "matched");
    let (_, ver) = get(&runner, format!("{base}/v1/runs/{fork}/verify")).await;
    assert_eq!(ver["verified"], true, "{ver}");

    // A paused run may go (a running one is refused without force: the
    // store's conformance case "deletion").
    let paused = start(&runner, base, &flow, "x").await;
    let (s, v) = delete(&admin, base, &paused, "").await;
    assert_eq!(s, 200, "a paused run may go: {v}");
    assert_eq!(v["state"], "paused");
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_a_parent_deleted_under_its_fork() {
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(data.path(), &["--tokens", &t]);
    let db = Sqlite(data.path().join("flow.db"));
    parent_deleted_under_its_fork(&s.base, &db, "hex(hash)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_a_parent_deleted_under_its_fork() {
    let Some(schema) = Schema::new() else { return };
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(data.path(), &schema.serve_args(&["--tokens", &t]));
    parent_deleted_under_its_fork(&s.base, &schema, "encode(hash, 'hex')").await;
}

/// Waits (a condition, polled; the deadline only ends a hung test) until
/// `run` is gone.
async fn until_gone(c: &reqwest::Client, base: &str, run: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (s, _) = get(c, format!("{base}/v1/runs/{run}")).await;
        if s == 404 {
            return;
        }
        assert!(Instant::now() < deadline, "{run} was never swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `--retain completed=1s,flow:keep:completed=1d`: an old completed run is
/// swept and the audit log says `sweeper`; a completed run of flow `keep`
/// (young for its own rule) and a paused run stay.
async fn sweeper_keeps_young_and_paused(base: &str, db: &dyn Db) {
    let c = client(ADMIN);
    let mut keep = review_flow();
    keep["id"] = json!("keep");
    let kept = start(&c, base, &keep, "young").await;
    approve(&c, base, &kept, "kept").await;
    let paused = start(&c, base, &review_flow(), "waits").await;
    let old = start(&c, base, &review_flow(), "old").await;
    approve(&c, base, &old, "swept").await;
    until_gone(&c, base, &old).await;
    for run in [&kept, &paused] {
        let (s, v) = get(&c, format!("{base}/v1/runs/{run}")).await;
        assert_eq!(s, 200, "{run} kept: {v}");
    }
    let who = db.rows(&format!("SELECT who FROM deletions WHERE run = '{old}'"));
    assert_eq!(who, vec!["sweeper".to_string()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_the_sweeper_deletes_old_completed_runs() {
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(
        data.path(),
        &[
            "--tokens",
            &t,
            "--retain",
            "completed=1s,flow:keep:completed=1d",
        ],
    );
    sweeper_keeps_young_and_paused(&s.base, &Sqlite(data.path().join("flow.db"))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_the_sweeper_deletes_old_completed_runs() {
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
            "--retain",
            "completed=1s",
            "--retain",
            "flow:keep:completed=1d",
        ],
    );
    sweeper_keeps_young_and_paused(&s.base, &schema).await;
}

/// `flow delete` locally and with `--server`: `--yes` is needed off a
/// terminal; the run is gone after.
#[tokio::test(flavor = "multi_thread")]
async fn flow_delete_locally_and_with_server() {
    let data = tempfile::tempdir().unwrap();
    let t = tokens(data.path());
    let s = serve(data.path(), &["--tokens", &t]);
    let c = client(ADMIN);
    let a = start(&c, &s.base, &review_flow(), "a").await;
    let out = common::flow()
        .args(["--server", &s.base, "--token", ADMIN, "delete", &a])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no --yes off a terminal");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    let out = common::flow()
        .args([
            "--server", &s.base, "--token", RUNNER, "delete", &a, "--yes",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a run token is refused");
    let out = common::flow()
        .args([
            "--server", &s.base, "--token", ADMIN, "--json", "delete", &a, "--yes",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["run"], a.as_str());
    let (st, _) = get(&c, format!("{}/v1/runs/{a}", s.base)).await;
    assert_eq!(st, 404);
    drop(s);

    // Locally, on the same store (the server is stopped).
    let f = common::TestApp::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("review.json");
    std::fs::write(&file, review_flow().to_string()).unwrap();
    let (code, v) = f.json(&["run", file.to_str().unwrap(), "--input", r#"{"text":"x"}"#]);
    assert_eq!(code, 3, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let (code, v) = f.json(&["delete", &run, "--yes"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["who"], "cli");
    let (code, _) = f.json(&["delete", &run, "--yes"]);
    assert_eq!(code, 2, "a second deletion finds no run");
    assert_eq!(f.runs(), 0);
}
