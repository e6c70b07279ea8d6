//! The sweep rate (issue 40 "Measure"): runs deleted a second, with blob
//! GC, as the retention sweeper deletes them — `expired_runs` a batch of
//! 256 at a time, then `delete_runs` on the batch (SQLite with
//! `synchronous = FULL`: one writer transaction, one fsync, for the batch;
//! Postgres: one transaction for the batch). `FLOW_BENCH_ONE_BY_ONE=1` deletes
//! with `delete_run`, one transaction each, instead.
//!
//! The store is filled with N completed runs through the store's own API:
//! every run has a Start whose root source is one of 5 flows (shared source
//! blobs), a 2 KiB reply shared by every tenth run (shared value blobs), a
//! 2 KiB reply of its own (its own blob, removed with it), and an End. A
//! tenth of the runs are kept (a flow with its own, longer rule), so the
//! shared blobs they reference survive the sweep.
//!
//! `cargo run --release -p flow-store --example sweep_bench -- N` (default
//! 100000). `FLOW_BENCH_POSTGRES` names the server (default
//! `postgres://postgres@127.0.0.1:5432/test`, `skip` to skip; a schema of
//! its own, dropped after), `FLOW_BENCH_SQLITE=skip` skips SQLite.
//! Results: docs/custody.md.

use flow_store::conformance::{end_fact, new_run_id, reply_fact, start_with_source};
use flow_store::{
    Appending, Backend, Deletion, ExpiredQuery, PostgresOptions, PostgresStore, RunState,
    SqliteOptions, SqliteStore, Synchronous,
};
use serde_json::json;
use std::time::Instant;

const FLOWS: [&str; 5] = ["orders", "billing", "support", "onboarding", "kept"];

fn fill(s: &(dyn Backend + Sync), n: u64) {
    let threads = 8;
    std::thread::scope(|t| {
        for w in 0..threads {
            t.spawn(move || {
                let mut i = w;
                while i < n {
                    let flow = FLOWS[(i % 5) as usize];
                    let run = new_run_id();
                    let (start, src) = start_with_source(
                        &run,
                        &format!("{flow}.json"),
                        "main",
                        json!({"id": flow, "nodes": []}).to_string(),
                        json!({"i": i}),
                    );
                    s.create_run(start, &src, Vec::new()).unwrap();
                    let shared = json!({"doc": format!("{}{}", i / 10, "s".repeat(2048))});
                    let own = json!({"doc": format!("{i}{}", "o".repeat(2048))});
                    let facts: Vec<Appending> = vec![
                        reply_fact(2, 1, shared).into(),
                        reply_fact(3, 2, own).into(),
                        end_fact(4, json!("done")).into(),
                    ];
                    s.append_all(&run, facts).unwrap();
                    i += threads;
                }
            });
        }
    });
}

fn sweep(s: &(dyn Backend + Sync), what: &str, n: u64, blobs_before: u64, blobs: &dyn Fn() -> u64) {
    let who = Deletion::by("sweeper");
    let started = Instant::now();
    let (mut runs, mut removed) = (0u64, 0u64);
    loop {
        let q = ExpiredQuery {
            state: RunState::Completed,
            before_ms: i64::MAX,
            flow: None,
            except_flows: vec!["kept".into()],
            limit: 256,
        };
        let batch = s.expired_runs(&q).unwrap();
        if batch.is_empty() {
            break;
        }
        if std::env::var("FLOW_BENCH_ONE_BY_ONE").as_deref() == Ok("1") {
            for run in batch {
                removed += s.delete_run(&run, &who).unwrap().blobs_removed;
                runs += 1;
            }
            continue;
        }
        for d in s.delete_runs(&batch, &who) {
            removed += d.unwrap().blobs_removed;
            runs += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{what}: {n} runs stored, {blobs_before} blobs; swept {runs} runs and {removed} blobs in {secs:.1} s: {:.0} runs/s, {:.0} blobs/s; {} blobs left",
        runs as f64 / secs,
        removed as f64 / secs,
        blobs()
    );
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    if std::env::var("FLOW_BENCH_SQLITE").as_deref() != Ok("skip") {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("flow.db");
        let t = Instant::now();
        {
            let opts = SqliteOptions {
                synchronous: Synchronous::Normal,
                ..SqliteOptions::default()
            };
            let s = SqliteStore::open(&path, opts).unwrap();
            fill(&s, n);
        }
        println!(
            "sqlite: filled {n} runs in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let before = s.blob_count().unwrap();
        sweep(&s, "sqlite (synchronous=FULL)", n, before, &|| {
            s.blob_count().unwrap()
        });
    }
    let url = std::env::var("FLOW_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if url != "skip" {
        let schema = format!("flow_sweep_bench_{}", std::process::id());
        let opts = PostgresOptions {
            url: url.clone(),
            schema: schema.clone(),
            keys: None,
        };
        let s = PostgresStore::open(opts).unwrap();
        let t = Instant::now();
        fill(&s, n);
        println!(
            "postgres: filled {n} runs in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let before = s.blob_count().unwrap();
        sweep(&s, "postgres", n, before, &|| s.blob_count().unwrap());
        drop(s);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            c.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
                .unwrap();
        });
    }
}
