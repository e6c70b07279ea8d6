//! What the run counters (migration 0014) cost Postgres commits when many
//! servers write at once (issue 38 §5): W stores on one schema (each a
//! server's writer, committing in groups), T threads each, every thread
//! making runs of one flow and ending them (a create and a state change,
//! two commits per run), for S seconds — once with the counters' triggers
//! dropped, once as migrated (triggers insert deltas, folded every ~1,000
//! commands), once with triggers updating the counter rows in place (the
//! design rejected: every commit of the flow waits on one hot row per
//! state until the commit before it is durable).
//!
//! `cargo run --release -p flow-store --example count_contention_bench --
//! W T S` (default 4 4 10). `FLOW_BENCH_POSTGRES` names the server
//! (default `postgres://postgres@127.0.0.1:5432/test`); each variant uses
//! a schema of its own and drops it. Results: docs/store.md, "Run counts".

use flow_store::conformance::{end_fact, new_run_id, start_with_source};
use flow_store::{AppendFacts, ListRuns, PostgresOptions, PostgresStore, RunListQuery};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

mod common;
use common::{fsync_us, run_sql};

/// The counters' triggers dropped: the cost without them.
const NO_TRIGGERS: &str = "DROP TRIGGER run_counts_insert ON runs;
    DROP TRIGGER run_counts_delete ON runs; DROP TRIGGER run_counts_update ON runs;";

/// The same triggers writing the counter rows in place.
const IN_PLACE: &str = "
CREATE OR REPLACE FUNCTION run_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts (namespace, has_flow, flow, state, n)
    SELECT namespace, flow_id IS NOT NULL, COALESCE(flow_id, ''), state, COUNT(*) FROM new_runs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (namespace, has_flow, flow, state) DO UPDATE SET n = run_counts.n + excluded.n;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION run_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE namespace = OLD.namespace AND has_flow = (OLD.flow_id IS NOT NULL)
      AND flow = COALESCE(OLD.flow_id, '') AND state = OLD.state;
    INSERT INTO run_counts (namespace, has_flow, flow, state, n)
    VALUES (NEW.namespace, NEW.flow_id IS NOT NULL, COALESCE(NEW.flow_id, ''), NEW.state, 1)
    ON CONFLICT (namespace, has_flow, flow, state) DO UPDATE SET n = run_counts.n + 1;
    RETURN NULL;
END $$;";

/// The deltas written per row on insert too (no transition table).
const ROW_DELTAS: &str = "DROP TRIGGER run_counts_insert ON runs;
CREATE FUNCTION run_counts_row_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (namespace, has_flow, flow, state, delta)
    VALUES (NEW.namespace, NEW.flow_id IS NOT NULL, COALESCE(NEW.flow_id, ''), NEW.state, 1);
    RETURN NULL;
END $$;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs FOR EACH ROW EXECUTE FUNCTION run_counts_row_inserted();";

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (writers, threads, secs) = (arg(1, 4), arg(2, 4), arg(3, 10));
    let url = std::env::var("FLOW_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let fsync = fsync_us(100) / 1000.0;
    println!(
        "{writers} writers × {threads} threads, {secs} s each (fsync of one small write under /tmp: p50 {:.2} ms)",
        fsync
    );
    println!("| counters | commits/s | runs/s |");
    println!("|---|---|---|");
    for (name, change) in [
        ("none (triggers dropped)", Some(NO_TRIGGERS)),
        ("deltas, folded (as migrated)", None),
        ("rows updated in place", Some(IN_PLACE)),
        ("deltas, per row on insert too", Some(ROW_DELTAS)),
        ("none (triggers dropped), again", Some(NO_TRIGGERS)),
        ("deltas, folded (as migrated), again", None),
    ] {
        let schema = format!("flow_bench_contention_{}", std::process::id());
        let options = PostgresOptions {
            url: url.clone(),
            schema: schema.clone(),
            keys: None,
        };
        let stores: Vec<PostgresStore> = (0..writers)
            .map(|_| PostgresStore::open(options.clone()).expect("open postgres"))
            .collect();
        if let Some(sql) = change {
            run_sql(&url, &format!("SET search_path = {schema}; {sql}"));
        }
        let runs = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for s in &stores {
                for _ in 0..threads {
                    let (runs, stop) = (&runs, &stop);
                    scope.spawn(move || {
                        let doc = json!({"id": "orders", "nodes": []}).to_string();
                        while !stop.load(Ordering::Relaxed) {
                            let run = new_run_id();
                            let (start, sources) = start_with_source(
                                &run,
                                "orders.json",
                                "main",
                                doc.clone(),
                                json!({}),
                            );
                            s.create_run(start, &sources, Vec::new()).expect("create");
                            s.append(&run, end_fact(2, json!("ok"))).expect("end");
                            runs.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
        });
        let n = runs.load(Ordering::Relaxed);
        // The counters still count every run (not for the dropped ones).
        let counted = stores[0]
            .count_runs(&RunListQuery::default())
            .expect("counts")
            .total;
        assert!(
            change == Some(NO_TRIGGERS) || counted == n,
            "{name}: {counted} of {n}"
        );
        println!(
            "| {name} | {:.0} | {:.0} |",
            2.0 * n as f64 / secs as f64,
            n as f64 / secs as f64
        );
        drop(stores);
        run_sql(&url, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    }
}
