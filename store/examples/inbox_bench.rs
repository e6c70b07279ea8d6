//! The inbox's numbers (issue 38 §2, "Measure"): a SQLite store of N
//! paused runs (default 10,000), each with one open call, generated
//! through the store's own API; then the inbox's first page (200 calls)
//! and its exact count read two ways:
//!
//! * **scan** — what `GET /v1/calls` did before migration 0013: every
//!   paused run by discovery, its whole history read and verified, its
//!   open calls expanded, its host records read for deadlines;
//! * **index** — what it does now: one page of `waiting_calls` and its
//!   count, then each listed call's history up to its Call (checked
//!   against the chain) and run row (the prompt, the schema and the
//!   outer run the answer shows).
//!
//! `cargo run --release -p flow-store --example inbox_bench -- N`; one
//! fsync of the same filesystem is printed beside them. The index is then
//! measured on Postgres too (`FLOW_BENCH_POSTGRES` names the server,
//! default `postgres://postgres@127.0.0.1:5432/test`, `skip` to skip; a
//! schema of its own, dropped after).

use flow_store::conformance::{call_fact, root_call, seed_run};
use flow_store::{
    Backend, Discover, DiscoveryQuery, Fact, HostDetails, HostRecord, HostRecords, PostgresOptions,
    PostgresStore, ReadHistory, RunId, RunState, SqliteOptions, SqliteStore, Synchronous,
    WaitingQuery,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Instant;

/// Median and worst of `repeat` timings of `f`, in ms.
fn time(repeat: usize, mut f: impl FnMut() -> usize) -> (f64, f64, usize) {
    let mut v = Vec::with_capacity(repeat);
    let mut out = 0;
    for _ in 0..repeat {
        let t = Instant::now();
        out = f();
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1], out)
}

/// The inbox as it was: every paused run's history.
fn scan(s: &SqliteStore) -> usize {
    let mut calls = 0;
    let mut after = None;
    loop {
        let q = DiscoveryQuery {
            limit: Some(DiscoveryQuery::MAX_LIMIT),
            after: after.clone(),
            state: Some(RunState::Paused),
        };
        let page = s.discover(&q).expect("discover");
        for r in &page.runs {
            let run = RunId::parse(&r.run).expect("run id");
            let _info = s.run_info(&run).expect("run info");
            let h = s.read_history(&run).expect("history");
            let settled: BTreeSet<_> = h
                .facts
                .iter()
                .filter_map(|f| match &f.fact {
                    Fact::Reply { call, .. } | Fact::Close { call, .. } => Some(call.clone()),
                    _ => None,
                })
                .collect();
            for f in &h.facts {
                if let Fact::Call { call, .. } = &f.fact
                    && !settled.contains(call)
                {
                    s.expand_fact(&run, f).expect("expand");
                    calls += 1;
                }
            }
            s.host_records(&run).expect("host records");
        }
        match page.next_after {
            Some(n) => after = Some(n),
            None => return calls,
        }
    }
}

/// The inbox as it is (`RunService::inbox`): the index, then the listed
/// calls' Call facts (each checked against its predecessor's recorded
/// hash) and runs rows in one read.
fn index(s: &(dyn Backend + Sync)) -> usize {
    let page = s
        .waiting_calls(&WaitingQuery {
            limit: 200,
            ..WaitingQuery::default()
        })
        .expect("waiting calls");
    let at: Vec<(RunId, u64)> = page.calls.iter().map(|c| (c.run.clone(), c.fact)).collect();
    for read in s.calls_at(&at).expect("the calls") {
        read.expect("a call");
    }
    page.total as usize
}

/// `n` paused runs, each with one open call.
fn fill(s: &dyn Backend, n: usize) {
    let t = Instant::now();
    for i in 0..n {
        let (run, last) = seed_run(s, 1).expect("seed");
        s.append(
            &run,
            call_fact(last + 1, 9, json!({"prompt": format!("review {i}")})),
        )
        .expect("call");
        s.record_host(
            &run,
            HostRecord::now(HostDetails::Pause {
                open: vec![root_call(9)],
            }),
        )
        .expect("pause");
    }
    eprintln!(
        "filled {n} paused runs in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("flow.db");
    let opts = SqliteOptions {
        synchronous: Synchronous::Normal,
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open(&db, opts).expect("open");
    fill(&s, n);
    let probe = dir.path().join("fsync.probe");
    let mut f = std::fs::File::create(&probe).expect("probe");
    let (fsync, _, _) = time(20, || {
        f.write_all(b"x").expect("write");
        f.sync_all().expect("fsync");
        0
    });
    let (scan_p50, scan_max, scanned) = time(5, || scan(&s));
    let (idx_p50, idx_max, total) = time(50, || index(&s));
    assert_eq!(scanned, n);
    assert_eq!(total, n);
    println!("paused runs: {n}; one fsync: {fsync:.2} ms");
    println!("SQLite scan  (before): p50 {scan_p50:.1} ms, max {scan_max:.1} ms (5 runs)");
    println!(
        "SQLite index (after):  p50 {idx_p50:.1} ms, max {idx_max:.1} ms (50 runs; first page of 200 + exact count)"
    );
    let url = std::env::var("FLOW_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if url == "skip" {
        return;
    }
    let schema = format!("flow_inbox_bench_{}", std::process::id());
    let pg = PostgresStore::open(PostgresOptions {
        url: url.clone(),
        schema: schema.clone(),
        keys: None,
    })
    .expect("open postgres");
    fill(&pg, n);
    let (p50, max, total) = time(50, || index(&pg));
    assert_eq!(total, n);
    println!(
        "Postgres index:        p50 {p50:.1} ms, max {max:.1} ms (50 runs; first page of 200 + exact count)"
    );
    drop(pg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
            let driver = tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .await;
            drop(client);
            let _ = driver.await;
        }
    });
}
