//! Bytes on disk before and after redacting one field of N runs (issue 40
//! "Measure", docs/custody.md "Holes"), SQLite.
//!
//! The store is filled with N completed runs through the store's own API:
//! each has a Start whose input holds a field of its own over 1 KiB
//! (`document`, 2 KiB: a blob) and a small one, a Checkpoint whose state
//! holds the same document (the same blob), a 2 KiB reply of its own, and
//! an End. Then `/input/document` of every run is redacted, one
//! redaction (one writer command, one WAL truncation) each. Printed: the
//! file's bytes (page_count × page_size after the WAL is folded in), its
//! free pages, and the file after a `VACUUM`, before and after; the
//! redactions a second.
//!
//! `cargo run --release -p flow-store --example redact_bench -- N`
//! (default 10000). Results: docs/custody.md.

use flow_store::conformance::{checkpoint_fact, end_fact, new_run_id, reply_fact, start_fact};
use flow_store::redact::ValuePath;
use flow_store::{
    Appending, Backend, Redact, Redaction, RunId, SqliteOptions, SqliteStore, Synchronous,
};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

fn fill(s: &(dyn Backend + Sync), n: u64) -> Vec<RunId> {
    let threads = 8;
    let runs = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|t| {
        for w in 0..threads {
            let runs = &runs;
            t.spawn(move || {
                let mut i = w;
                while i < n {
                    let run = new_run_id();
                    let doc = format!("{i}:{}", "d".repeat(2048));
                    let (start, src) = start_fact(&run, json!({"document": doc, "q": i}));
                    s.create_run(start, &src, Vec::new()).unwrap();
                    let facts: Vec<Appending> = vec![
                        checkpoint_fact(2, json!({"document": doc, "k": 1})).into(),
                        reply_fact(3, 1, json!({"text": format!("{i}{}", "r".repeat(2048))}))
                            .into(),
                        end_fact(4, json!("done")).into(),
                    ];
                    s.append_all(&run, facts).unwrap();
                    runs.lock().unwrap().push(run);
                    i += threads;
                }
            });
        }
    });
    runs.into_inner().unwrap()
}

/// (file bytes, free bytes) of the database at `path`, the WAL folded in.
fn sizes(s: &SqliteStore, path: &Path) -> (u64, u64) {
    let bytes = s.bytes_on_disk().unwrap();
    let c = rusqlite::Connection::open(path).unwrap();
    let free: i64 = c
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .unwrap();
    let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    (bytes, (free * page) as u64)
}

fn vacuumed(path: &Path) -> u64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("VACUUM").unwrap();
    std::fs::metadata(path).unwrap().len()
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("flow.db");
    let t = Instant::now();
    let runs = {
        let opts = SqliteOptions {
            synchronous: Synchronous::Normal,
            ..SqliteOptions::default()
        };
        let s = SqliteStore::open(&path, opts).unwrap();
        fill(&s, n)
    };
    println!("filled {n} runs in {:.1} s", t.elapsed().as_secs_f64());
    let before_copy = tmp.path().join("before.db");
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let (bytes, free) = sizes(&s, &path);
    let blobs = s.blob_count().unwrap();
    std::fs::copy(&path, &before_copy).unwrap();
    println!(
        "before: {bytes} bytes ({:.1} MB), {free} bytes free, {blobs} blobs; vacuumed {} bytes",
        bytes as f64 / 1e6,
        vacuumed(&before_copy)
    );
    let how = Redaction {
        who: "bench".into(),
        targets: vec![ValuePath::parse("/input/document").unwrap()],
    };
    let t = Instant::now();
    let mut removed = 0;
    for run in &runs {
        removed += s.redact(run, &how).unwrap().blobs_removed;
    }
    let secs = t.elapsed().as_secs_f64();
    let (bytes, free) = sizes(&s, &path);
    let blobs = s.blob_count().unwrap();
    drop(s);
    println!(
        "after: redacted {n} runs ({removed} blobs removed) in {secs:.1} s, {:.0} a second (synchronous=FULL); {bytes} bytes ({:.1} MB), {free} bytes free, {blobs} blobs; vacuumed {} bytes",
        n as f64 / secs,
        bytes as f64 / 1e6,
        vacuumed(&path)
    );
}
