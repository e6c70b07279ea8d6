//! The numbers asked for by issue 3's benchmark section, printed as a table:
//! `cargo run --release -p flow-store --example store_report`.
//!
//! Environment: `FLOW_REPORT_DIR` (default: a temp dir), `FLOW_REPORT_FACTS`
//! (default 100000), `FLOW_REPORT_RUNS` (discovery runs, default 1000000),
//! `FLOW_REPORT_SECONDS` (time cap per append measurement, default 30),
//! `FLOW_REPORT_POSTGRES` (server for the `postgres` section, default
//! `postgres://postgres@127.0.0.1:5432/test`; the section uses a schema of
//! its own and drops it).

use flow_store::conformance::{call_fact, checkpoint_fact, new_run_id, start_fact};
use flow_store::{
    AppendFacts, Discover, DiscoveryQuery, PostgresOptions, PostgresStore, ReadHistory, RunId,
    RunState, SourceText, SqliteOptions, SqliteStore, Synchronous,
};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(path: &Path, sync: Synchronous) -> SqliteStore {
    SqliteStore::open(
        path,
        SqliteOptions {
            synchronous: sync,
            page_size: env("FLOW_REPORT_PAGE", 16384) as u32,
            ..SqliteOptions::default()
        },
    )
    .expect("open store")
}

fn create<S: AppendFacts>(s: &S) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "hello"}));
    s.create_run(start.clone(), &sources, Vec::new())
        .expect("create");
    run
}

/// A small fact: a Call with a tiny argument object.
fn small(n: u64) -> flow_store::Fact {
    call_fact(n, n, json!({"i": n}))
}

/// Appends on `runs` concurrent runs (one thread each) until `total` facts
/// or the time cap; returns (facts, elapsed).
fn append_concurrent<S: AppendFacts + Sync>(
    s: &S,
    runs: u64,
    total: u64,
    cap: Duration,
) -> (u64, Duration) {
    let ids: Vec<RunId> = (0..runs).map(|_| create(s)).collect();
    let per = total / runs;
    let t0 = Instant::now();
    let done: u64 = std::thread::scope(|scope| {
        let hs: Vec<_> = ids
            .iter()
            .map(|run| {
                scope.spawn(move || {
                    let mut k = 0;
                    for n in 2..per + 2 {
                        s.append(run, small(n)).expect("append");
                        k += 1;
                        if k % 64 == 0 && t0.elapsed() > cap {
                            break;
                        }
                    }
                    k
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    (done, t0.elapsed())
}

fn rate(facts: u64, d: Duration) -> String {
    let s = d.as_secs_f64();
    format!(
        "{:>10.0} facts/s {:>8.1} µs/fact ({} facts in {:.2} s)",
        facts as f64 / s,
        s * 1e6 / facts as f64,
        facts,
        s
    )
}

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::var("FLOW_REPORT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("dir");
    let facts = env("FLOW_REPORT_FACTS", 100_000);
    let runs_1m = env("FLOW_REPORT_RUNS", 1_000_000);
    let cap = Duration::from_secs(env("FLOW_REPORT_SECONDS", 30));
    println!(
        "flow-store report ({} facts, {} discovery runs, {:?} cap per append run)",
        facts, runs_1m, cap
    );

    // (a) append throughput, (b) verified reads, (d) bytes per small fact.
    // FLOW_REPORT_SECTIONS: any of "append", "postgres", "dedup", "accumulate", "discovery".
    let sections = std::env::var("FLOW_REPORT_SECTIONS")
        .unwrap_or_else(|_| "append,postgres,dedup,accumulate,discovery".into());
    let want = |name: &str| sections.split(',').any(|s| s.trim() == name);
    for (name, sync) in [("FULL", Synchronous::Full), ("NORMAL", Synchronous::Normal)] {
        if !want("append") {
            break;
        }
        let path = dir.join(format!("append-{name}.db"));
        let s = open(&path, sync);
        let before = s.bytes_on_disk().expect("bytes");
        let (n1, d1) = append_concurrent(&s, 1, facts, cap);
        println!("(a) {name:6} 1 run      {}", rate(n1, d1));
        let after = s.bytes_on_disk().expect("bytes");
        if name == "FULL" {
            println!(
                "(d) bytes on disk per small fact: {:.0}",
                (after - before) as f64 / n1 as f64
            );
        }
        for runs in [8, 100] {
            let (n, d) = append_concurrent(&s, runs, facts, cap);
            println!("(a) {name:6} {runs:3} runs  {}", rate(n, d));
        }
        if name == "FULL" {
            let run = s
                .discover(&DiscoveryQuery {
                    limit: Some(1),
                    ..Default::default()
                })
                .expect("discover")
                .runs[0]
                .run
                .clone();
            let run = RunId::parse(&run).expect("id");
            let t0 = Instant::now();
            let h = s.read_history(&run).expect("read");
            println!(
                "(b) verified read    {}",
                rate(h.facts.len() as u64, t0.elapsed())
            );
        }
        drop(s);
        if std::env::var("FLOW_REPORT_DIR").is_err() {
            let _ = std::fs::remove_file(&path);
        }
    }

    // (e) Postgres next to SQLite FULL, with the disk's fsync latency
    // measured in the same run.
    if want("postgres") {
        postgres_section(&dir, facts, cap);
    }

    // (d) dedup: 1,000 runs share one 100 KiB value.
    if want("dedup") {
        let path = dir.join("dedup.db");
        let s = open(&path, Synchronous::Normal);
        let shared = json!({"doc": "v".repeat(100 * 1024)});
        let base = s.bytes_on_disk().expect("bytes");
        for _ in 0..1000 {
            let run = create(&s);
            s.append(&run, call_fact(2, 1, shared.clone()))
                .expect("append");
        }
        let used = s.bytes_on_disk().expect("bytes") - base;
        let naive = 1000 * 100 * 1024;
        println!(
            "(d) 1,000 runs sharing a 100 KiB value: {:.1} MiB on disk ({} blob rows) vs {:.1} MiB for the value copies alone: saving {:.1}%",
            used as f64 / 1048576.0,
            s.blob_count().expect("count"),
            naive as f64 / 1048576.0,
            100.0 * (1.0 - used as f64 / naive as f64)
        );
        drop(s);
        if std::env::var("FLOW_REPORT_DIR").is_err() {
            let _ = std::fs::remove_file(&path);
        }
    }

    // (d) the accumulating run: one 2 KiB text per step, a checkpoint per step.
    if want("accumulate") {
        let path = dir.join("accumulate.db");
        let s = open(&path, Synchronous::Normal);
        let run = create(&s);
        let base = s.bytes_on_disk().expect("bytes");
        let mut msgs: Vec<serde_json::Value> = Vec::new();
        let mut n = 1;
        let t0 = Instant::now();
        for step in 0..1000u64 {
            msgs.push(json!(format!("{step:05}{}", "a".repeat(2043))));
            n += 1;
            s.append(
                &run,
                checkpoint_fact(n, json!({"messages": msgs, "step": step})),
            )
            .expect("append");
        }
        let took = t0.elapsed();
        let used = s.bytes_on_disk().expect("bytes") - base;
        let t1 = Instant::now();
        let st = s.checkpoint_state(&run, n).expect("state");
        let read = t1.elapsed();
        println!(
            "(d) accumulating run, 1,000 steps × 2 KiB text + checkpoint: {:.0} bytes/step ({:.2} MiB total, {:.1} ms/step); last state ({} items) read in {:.1} ms",
            used as f64 / 1000.0,
            used as f64 / 1048576.0,
            took.as_secs_f64() * 1000.0 / 1000.0,
            st["messages"].as_array().map(Vec::len).unwrap_or(0),
            read.as_secs_f64() * 1000.0
        );
        drop(s);
        if std::env::var("FLOW_REPORT_DIR").is_err() {
            let _ = std::fs::remove_file(&path);
        }
    }

    // (c) discovery first page with many runs stored.
    if want("discovery") {
        let path = dir.join("discovery.db");
        let s = open(&path, Synchronous::Normal);
        let text = "{\"id\":\"demo\"}".to_string();
        let (hash, length) = flow_store::source_ref(&text);
        let sources = vec![SourceText {
            module: "demo.json".into(),
            text,
        }];
        let t0 = Instant::now();
        let threads = 8;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (s, sources, hash) = (&s, &sources, &hash);
                scope.spawn(move || {
                    for i in 0..runs_1m / threads {
                        let run = new_run_id();
                        let start = json!({
                            "fact": "Start", "n": 1, "run": run.as_str(), "data": "1.0",
                            "entry": {"module": "demo.json", "function": "main"}, "program": "sha256:00",
                            "sources": [{"module": "demo.json", "hash": hash, "length": length}], "input": {"t": t, "i": i},
                        });
                        let start = flow_store::Fact::from_value(start).expect("a Start");
                        s.create_run(start, sources, Vec::new()).expect("create");
                    }
                });
            }
        });
        println!(
            "    seeded {} runs in {:.1} s",
            runs_1m,
            t0.elapsed().as_secs_f64()
        );
        let mut lat = Vec::new();
        for q in [
            DiscoveryQuery::default(),
            DiscoveryQuery {
                state: Some(RunState::Running),
                ..Default::default()
            },
        ] {
            lat.clear();
            // Warm the page cache first: the runs were just written.
            for _ in 0..200 {
                s.discover(&q).expect("discover");
            }
            for _ in 0..2000 {
                let t = Instant::now();
                let p = s.discover(&q).expect("discover");
                lat.push(t.elapsed());
                assert_eq!(p.runs.len(), 50);
            }
            lat.sort();
            println!(
                "(c) discovery first page (50 rows{}) at {} runs: p50 {:.0} µs, p99 {:.0} µs",
                if q.state.is_some() {
                    ", state filter"
                } else {
                    ""
                },
                runs_1m,
                lat[lat.len() / 2].as_secs_f64() * 1e6,
                lat[lat.len() * 99 / 100].as_secs_f64() * 1e6
            );
        }
        println!(
            "    database: {:.0} MiB",
            s.bytes_on_disk().expect("bytes") as f64 / 1048576.0
        );
        drop(s);
        if std::env::var("FLOW_REPORT_DIR").is_err() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// p50 and p99 of `write 4 KiB + fdatasync` on a file in `dir`.
fn fsync_latency(dir: &Path) -> (Duration, Duration) {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let block = vec![7u8; 4096];
    let mut lat = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&block).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat.sort();
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn postgres_section(dir: &Path, facts: u64, cap: Duration) {
    let url = std::env::var("FLOW_REPORT_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("flow_report_{}", std::process::id());
    let (p50, p99) = fsync_latency(dir);
    println!(
        "(e) fsync latency (4 KiB write + fdatasync, {}): p50 {:.0} µs, p99 {:.0} µs",
        dir.display(),
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    let pg = match PostgresStore::open(PostgresOptions {
        url: url.clone(),
        schema: schema.clone(),
        keys: None,
    }) {
        Ok(s) => s,
        Err(e) => {
            println!("(e) Postgres skipped: {e}");
            return;
        }
    };
    let lite_path = dir.join("append-pg-compare.db");
    let lite = open(&lite_path, Synchronous::Full);
    for runs in [1u64, 100] {
        let (n, d) = append_concurrent(&lite, runs, facts, cap);
        println!("(e) SQLite FULL {runs:3} runs  {}", rate(n, d));
        let (n, d) = append_concurrent(&pg, runs, facts, cap);
        println!("(e) Postgres    {runs:3} runs  {}", rate(n, d));
    }
    let (p50, p99) = fsync_latency(dir);
    println!(
        "(e) fsync latency after: p50 {:.0} µs, p99 {:.0} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    drop(pg);
    drop(lite);
    let _ = std::fs::remove_file(&lite_path);
    drop_schema(&url, &schema);
}

fn drop_schema(url: &str, schema: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            let driver = tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .await;
            drop(client);
            let _ = driver.await;
        }
    });
}
