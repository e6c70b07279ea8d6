//! The run query's numbers (issue 38 item 1, "Measure"): a store of N runs
//! generated through the store's own API (a realistic mix: 5 flows, 60 %
//! completed, 15 % faulted, 10 % paused, 5 % halted, 10 % running; a tenth
//! of them forks; a `customer` search attribute from each input), then
//! p50/p99 of the first page and a deep page (newest first, 50 rows) for
//! (a) no filter, (b) one state, (c) flow + a started range, (d) a search
//! attribute equality, and (e) counts by state and flow — on SQLite and on
//! Postgres, beside one fsync measured in the same run.
//!
//! `cargo run --release -p flow-store --example run_query_bench -- N`
//! (default 100000). `FLOW_BENCH_POSTGRES` names the server (default
//! `postgres://postgres@127.0.0.1:5432/test`, `skip` to skip; the section
//! uses a schema of its own and drops it; it is `VACUUM ANALYZE`d once
//! filled, as autovacuum would, unless `FLOW_BENCH_VACUUM=no`),
//! `FLOW_BENCH_SQLITE=skip` skips SQLite, `FLOW_BENCH_REPEAT` the samples
//! per measurement (default 200), `FLOW_BENCH_DIR` a directory to keep the
//! SQLite store in (made once, measured again by the next run: a
//! 1,000,000-run store takes minutes to make), `FLOW_BENCH_PG_SCHEMA` a
//! Postgres schema to keep the same way (made once, kept, measured again;
//! the deep page's cursor is kept in its table `bench_deep`). Beside the pages: the
//! counts `/metrics` reads (`count_runs` with no filter) and the bytes on
//! disk per run. Results: docs/store.md, "The run query" and "Run counts".

use flow_store::conformance::{call_fact, end_fact, new_run_id, start_with_source};
use flow_store::{
    Backend, Fact, HostDetails, HostRecord, HostRecordKind, PostgresOptions, PostgresStore,
    RunListQuery, RunOrder, RunState, SqliteOptions, SqliteStore, Synchronous, TimeRange,
};
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

const FLOWS: [&str; 5] = ["orders", "billing", "support", "onboarding", "reports"];

fn doc(flow: &str) -> String {
    json!({"id": flow, "nodes": [], "runtime_hints": {"search_attributes": {"customer": "/input/customer"}}})
        .to_string()
}

fn pause() -> HostRecord {
    HostRecord {
        at_ms: None,
        details: HostDetails::Other {
            kind: HostRecordKind::Pause,
            details: json!({}),
        },
    }
}

fn halt() -> HostRecord {
    HostRecord {
        at_ms: None,
        details: HostDetails::Other {
            kind: HostRecordKind::Halt,
            details: json!({}),
        },
    }
}

/// Run `i` of the mix: its flow, input and outcome follow from `i`.
fn make(s: &dyn Backend, i: u64, parent: Option<flow_abi::fact::RunId>) -> flow_abi::fact::RunId {
    let run = new_run_id();
    let flow = FLOWS[(i % 5) as usize];
    let (mut start, sources) = start_with_source(
        &run,
        &format!("{flow}.json"),
        "main",
        doc(flow),
        json!({"customer": format!("c-{}", i % 1000), "n": i}),
    );
    if let (Fact::Start { parent: p, .. }, Some(parent)) = (&mut start, parent) {
        *p = Some(flow_abi::fact::Parent {
            run: parent,
            checkpoint: 2,
        });
    }
    s.create_run(start, &sources, Vec::new()).expect("create");
    match i % 20 {
        0..12 => {
            s.append(&run, end_fact(2, json!(i))).expect("end");
        }
        12..15 => {
            s.append(
                &run,
                Fact::End {
                    n: 2,
                    ending: flow_abi::fact::Ending::Faulted(format!(
                        "tool failed: error {}",
                        i % 7
                    )),
                },
            )
            .expect("fault");
        }
        15..17 => {
            s.record_host(&run, pause()).expect("pause");
        }
        17 => {
            s.record_host(&run, halt()).expect("halt");
        }
        _ => {
            s.append(&run, call_fact(2, 1, json!({}))).expect("call");
        }
    }
    run
}

/// Makes `n` runs with 8 threads (the writer commits them in groups).
fn fill(s: &(dyn Backend + Sync), n: u64) -> Vec<flow_abi::fact::RunId> {
    let t0 = Instant::now();
    let threads = 8;
    let mut ids: Vec<(u64, flow_abi::fact::RunId)> = Vec::new();
    std::thread::scope(|scope| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    let mut last = None;
                    for i in (t..n).step_by(threads as usize) {
                        let parent = if i % 10 == 9 { last.clone() } else { None };
                        let r = make(s, i, parent);
                        last = Some(r.clone());
                        out.push((i, r));
                        if t == 0 && i % 20_000 < threads {
                            eprint!("\r  {i} runs, {:.0} s", t0.elapsed().as_secs_f64());
                        }
                    }
                    out
                })
            })
            .collect();
        for h in hs {
            ids.extend(h.join().expect("thread"));
        }
    });
    eprintln!("\r  {n} runs made in {:.1} s", t0.elapsed().as_secs_f64());
    ids.sort_by(|a, b| a.1.as_str().cmp(b.1.as_str()));
    ids.into_iter().map(|(_, r)| r).collect()
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(v[v.len() / 2]),
        ms(v[(v.len() * 99 / 100).min(v.len() - 1)]),
    )
}

fn time(repeat: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    percentiles(
        (0..repeat)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

/// One fsync of a small file in the same directory's filesystem.
fn fsync_ms(dir: &std::path::Path, repeat: usize) -> (f64, f64) {
    let path = dir.join("fsync.probe");
    let mut f = std::fs::File::create(&path).expect("probe");
    time(repeat, || {
        f.write_all(b"x").expect("write");
        f.sync_all().expect("fsync");
    })
}

/// What a measurement needs of the store beside the store itself.
struct Bench<'a> {
    name: &'a str,
    n: u64,
    repeat: usize,
    /// Where the fsync probe is written (the temporary directory's disk).
    dir: &'a std::path::Path,
    /// The deep page's cursor: the run a tenth of the way from the oldest.
    deep: String,
    /// The store's bytes on disk.
    bytes: u64,
}

/// Makes the runs; returns the deep page's cursor.
fn make_runs(name: &str, s: &(dyn Backend + Sync), n: u64) -> String {
    eprintln!("{name}: making {n} runs");
    let ids = fill(s, n);
    ids[ids.len() / 10].to_string()
}

fn measure(s: &(dyn Backend + Sync), b: &Bench) {
    let Bench {
        name,
        n,
        repeat,
        dir,
        ..
    } = *b;
    let all = s
        .list_runs(&RunListQuery {
            limit: Some(200),
            order: RunOrder::Newest,
            ..Default::default()
        })
        .expect("list");
    let newest_ms = all.runs[0].created_ms;
    let oldest = s
        .list_runs(&RunListQuery {
            limit: Some(1),
            ..Default::default()
        })
        .expect("list");
    let oldest_ms = oldest.runs[0].created_ms;
    let mid_ms = oldest_ms + (newest_ms - oldest_ms) / 2;
    // A deep page: newest first after a run a tenth of the way from the
    // oldest (nine tenths of the matches are before it in the order).
    let deep = b.deep.clone();
    let queries: Vec<(&str, RunListQuery)> = vec![
        ("(a) no filter", RunListQuery::default()),
        (
            "(b) state=paused",
            RunListQuery {
                states: vec![RunState::Paused],
                ..Default::default()
            },
        ),
        (
            "(b') state=paused,faulted",
            RunListQuery {
                states: vec![RunState::Paused, RunState::Faulted],
                ..Default::default()
            },
        ),
        (
            "(c) flow + started range",
            RunListQuery {
                flow: Some("orders".into()),
                started: TimeRange {
                    from: Some(oldest_ms),
                    to: Some(mid_ms.max(oldest_ms + 1)),
                },
                ..Default::default()
            },
        ),
        (
            "(d) attribute customer=c-17",
            RunListQuery {
                attrs: vec![("customer".into(), json!("c-17"))],
                ..Default::default()
            },
        ),
    ];
    let (f50, f99) = fsync_ms(dir, repeat);
    println!(
        "\n{name}, {n} runs (fsync of one small write under {}: p50 {f50:.2} ms, p99 {f99:.2} ms)",
        dir.display()
    );
    // What `/metrics` asks for `flowd_runs{state}` (server/src/http/metrics.rs).
    let metrics = time(repeat, || {
        s.count_runs(&RunListQuery::default()).expect("counts");
    });
    println!(
        "/metrics counts p50 {:.2} ms, p99 {:.2} ms; {} bytes on disk, {:.0} per run",
        metrics.0,
        metrics.1,
        b.bytes,
        b.bytes as f64 / n as f64
    );
    println!("| query | first page p50 / p99 ms | deep page p50 / p99 ms | counts p50 / p99 ms |");
    println!("|---|---|---|---|");
    for (what, q) in queries {
        let q = RunListQuery {
            limit: Some(50),
            order: RunOrder::Newest,
            ..q
        };
        let first = time(repeat, || {
            let p = s.list_runs(&q).expect("page");
            assert!(!p.runs.is_empty(), "{what}");
        });
        let deep_q = RunListQuery {
            cursor: Some(deep.clone()),
            ..q.clone()
        };
        let deep = time(repeat, || {
            s.list_runs(&deep_q).expect("deep page");
        });
        let counts = time(repeat.min(50), || {
            s.count_runs(&q).expect("counts");
        });
        println!(
            "| {what} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} |",
            first.0, first.1, deep.0, deep.1, counts.0, counts.1
        );
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let repeat: usize = std::env::var("FLOW_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::var("FLOW_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_path_buf());
    if std::env::var("FLOW_BENCH_SQLITE").as_deref() != Ok("skip") {
        std::fs::create_dir_all(&dir).expect("bench directory");
        let s = SqliteStore::open(
            dir.join("bench.db"),
            SqliteOptions {
                synchronous: Synchronous::Full,
                ..SqliteOptions::default()
            },
        )
        .expect("open");
        // A kept store is measured again as it is.
        let kept = dir.join("deep.txt");
        let deep = match std::fs::read_to_string(&kept) {
            Ok(d) => d,
            Err(_) => {
                let d = make_runs("SQLite", &s, n);
                std::fs::write(&kept, &d).expect("keep");
                d
            }
        };
        let bytes = ["bench.db", "bench.db-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
            .map(|m| m.len())
            .sum();
        let b = Bench {
            name: "SQLite",
            n,
            repeat,
            // The disk's fsync, wherever the store is (/dev/shm has none).
            dir: tmp.path(),
            deep,
            bytes,
        };
        measure(&s, &b);
    }
    let url = std::env::var("FLOW_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if url == "skip" {
        return;
    }
    let kept = std::env::var("FLOW_BENCH_PG_SCHEMA").ok();
    let schema = kept
        .clone()
        .unwrap_or_else(|| format!("flow_bench_{}", std::process::id()));
    let s = PostgresStore::open(PostgresOptions {
        url: url.clone(),
        schema: schema.clone(),
        keys: None,
    })
    .expect("open postgres");
    // What autovacuum does to a table that stopped growing: statistics and
    // the visibility map (so counts are index-only scans). Said in the
    // output; a store still being written to may be measured without.
    let vacuum = || {
        if std::env::var("FLOW_BENCH_VACUUM").as_deref() != Ok("no") {
            // One statement per call: VACUUM runs outside a transaction.
            for t in ["runs", "run_attrs"] {
                sql(&url, &format!("VACUUM ANALYZE {schema}.{t}"));
            }
            eprintln!("  VACUUM ANALYZE done");
        }
    };
    let deep = match kept
        .as_ref()
        .and_then(|_| query_one(&url, &format!("SELECT deep FROM {schema}.bench_deep")))
    {
        Some(d) => d,
        None => {
            let d = make_runs("Postgres", &s, n);
            if kept.is_some() {
                sql(
                    &url,
                    &format!(
                        "CREATE TABLE {schema}.bench_deep (deep TEXT); INSERT INTO {schema}.bench_deep VALUES ('{d}')"
                    ),
                );
            }
            d
        }
    };
    vacuum();
    let b = Bench {
        name: "Postgres",
        n,
        repeat,
        dir: tmp.path(),
        deep,
        bytes: pg_bytes(&url, &schema),
    };
    measure(&s, &b);
    drop(s);
    if kept.is_none() {
        sql(&url, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    }
}

/// The first column of the first row `text` answers, as text; none when
/// it fails (a kept schema not made yet).
fn query_one(url: &str, text: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        let driver = tokio::spawn(conn);
        let row = client.query_opt(text, &[]).await.ok().flatten();
        drop(client);
        let _ = driver.await;
        row.map(|r| r.get::<_, String>(0))
    })
}

/// The bytes of every table of `schema`, its indexes and TOAST included.
fn pg_bytes(url: &str, schema: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let driver = tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
                 JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1 AND c.relkind = 'r'",
                &[&schema],
            )
            .await
            .expect("sizes");
        drop(client);
        let _ = driver.await;
        row.get::<_, i64>(0) as u64
    })
}

/// Runs SQL on a connection of its own.
fn sql(url: &str, text: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            let driver = tokio::spawn(conn);
            if let Err(e) = client.batch_execute(text).await {
                eprintln!("{text}: {e}");
            }
            drop(client);
            let _ = driver.await;
        }
    });
}
