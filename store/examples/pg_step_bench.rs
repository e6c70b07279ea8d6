//! What a step's commit costs a Postgres store, without a server around it
//! (issue 42's W1 and W2 rows, store side): W1 is one run appending
//! `STEPS` steps one after another (each a Reply, a Checkpoint and a Call
//! in one `append_all`, as a `tool_invoke` loop commits them); W2 is `RUNS`
//! runs doing the same at once, one thread each, `STEPS / 10` steps each.
//! Beside them, in the same run: the fsync of a small file under /tmp, and
//! the floor of a Postgres commit on this server (one single-row INSERT
//! committed on a connection of its own, sequentially).
//!
//! Each variant runs on a schema of its own (dropped after), in `ROUNDS`
//! alternating rounds: as migrated, and with the schema changes named in
//! `VARIANTS` below applied after migration.
//!
//! `cargo run --release -p flow-store --example pg_step_bench -- STEPS RUNS
//! ROUNDS` (default 2000 50 2). `FLOW_BENCH_POSTGRES` names the server
//! (default `postgres://postgres@127.0.0.1:5432/test`).

use common::{fsync_us, median_us, on_connection, run_sql};
use flow_store::conformance::{call_fact, checkpoint_fact, new_run_id, reply_fact, start_fact};
use flow_store::{AppendFacts, Appending, PostgresOptions, PostgresStore, RunId};
use serde_json::json;
use std::time::Instant;

mod common;

/// Schema changes measured against the store as migrated.
const VARIANTS: &[(&str, &str)] = &[
    ("as migrated", ""),
    (
        "foreign keys on facts and host_records (before migration 0021)",
        "ALTER TABLE facts ADD CONSTRAINT facts_run_key_fkey FOREIGN KEY (run_key) REFERENCES runs (key);
         ALTER TABLE host_records ADD CONSTRAINT host_records_run_key_fkey FOREIGN KEY (run_key) REFERENCES runs (key);",
    ),
];

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (steps, runs, rounds) = (arg(1, 2000), arg(2, 50), arg(3, 2));
    let url = std::env::var("FLOW_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    println!(
        "fsync of one small write under /tmp: p50 {:.0} µs; a Postgres commit (one-row INSERT, one connection): p50 {:.0} µs",
        fsync_us(200),
        commit_floor_us(&url)
    );
    println!(
        "| variant | W1: µs/step | W1 CPU µs/step: database, store | W2: {runs} runs at once, steps/s | W2 CPU µs/step: database, store |"
    );
    println!("|---|---|---|---|---|");
    for _ in 0..rounds {
        for (name, change) in VARIANTS {
            let schema = format!("flow_bench_step_{}", std::process::id());
            let store = PostgresStore::open(PostgresOptions {
                url: url.clone(),
                schema: schema.clone(),
                keys: None,
            })
            .expect("open postgres");
            if !change.is_empty() {
                run_sql(&url, &format!("SET search_path = {schema}; {change}"));
            }
            let (w1, w1_cpu) = measured(steps, || w1(&store, steps));
            let (w2, w2_cpu) = measured(runs * (steps / 10), || w2(&store, runs, steps / 10));
            println!("| {name} | {w1:.0} | {w1_cpu} | {w2:.0} | {w2_cpu} |");
            drop(store);
            run_sql(&url, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
        }
    }
}

/// What `f` returns, and the CPU the database's processes and this one
/// spent on each of its `steps`, "db, store" in µs.
fn measured(steps: usize, f: impl FnOnce() -> f64) -> (f64, String) {
    let (db, me) = (postgres_cpu_ms(), own_cpu_ms());
    let out = f();
    let per = |ms: f64| ms * 1e3 / steps as f64;
    let cpu = format!(
        "{:.0}, {:.0}",
        per(postgres_cpu_ms() - db),
        per(own_cpu_ms() - me)
    );
    (out, cpu)
}

/// User + system CPU of every `postgres` process on this machine, ms (0
/// when the server runs elsewhere).
fn postgres_cpu_ms() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .map(|s| stat_cpu_ms(&s))
        .sum()
}

fn own_cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/self/stat").map_or(0.0, |s| stat_cpu_ms(&s))
}

/// utime + stime of a `/proc/PID/stat` line, ms (clock ticks of 10 ms).
fn stat_cpu_ms(stat: &str) -> f64 {
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    ticks * 10.0
}

fn create(s: &PostgresStore) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({}));
    s.create_run(start, &sources, Vec::new()).expect("create");
    s.append(&run, call_fact(2, 1, json!({"i": 0})))
        .expect("first call");
    run
}

/// Step `k` of a run whose last fact is `n`: the Reply to call `k`, a
/// Checkpoint, and call `k + 1`.
fn step(s: &PostgresStore, run: &RunId, n: u64, k: u64) {
    let facts: Vec<Appending> = vec![
        reply_fact(n + 1, k, json!(k)).into(),
        checkpoint_fact(n + 2, json!({"count": k})).into(),
        call_fact(n + 3, k + 1, json!({"count": k})).into(),
    ];
    s.append_all(run, facts).expect("step");
}

/// µs per step of one run.
fn w1(s: &PostgresStore, steps: usize) -> f64 {
    let run = create(s);
    let t = Instant::now();
    for k in 1..=steps as u64 {
        step(s, &run, 2 + 3 * (k - 1), k);
    }
    t.elapsed().as_secs_f64() * 1e6 / steps as f64
}

/// Steps per second of `runs` runs at once.
fn w2(s: &PostgresStore, runs: usize, steps: usize) -> f64 {
    let ids: Vec<RunId> = (0..runs).map(|_| create(s)).collect();
    let t = Instant::now();
    std::thread::scope(|scope| {
        for run in &ids {
            scope.spawn(move || {
                for k in 1..=steps as u64 {
                    step(s, run, 2 + 3 * (k - 1), k);
                }
            });
        }
    });
    (runs * steps) as f64 / t.elapsed().as_secs_f64()
}

/// p50 of 500 one-row INSERTs, each its own transaction, µs.
fn commit_floor_us(url: &str) -> f64 {
    let table = format!("flow_bench_floor_{}", std::process::id());
    on_connection(url, |rt, client| {
        rt.block_on(client.batch_execute(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, v text)"
        )))
        .expect("floor table");
        let insert = rt
            .block_on(client.prepare(&format!("INSERT INTO {table} VALUES ($1, $2)")))
            .expect("prepare");
        let us = median_us((0..500i64).map(|i| {
            let t = Instant::now();
            rt.block_on(client.execute(&insert, &[&i, &"x".repeat(200)]))
                .expect("insert");
            t.elapsed()
        }));
        rt.block_on(client.batch_execute(&format!("DROP TABLE {table}")))
            .expect("drop");
        us
    })
}
