//! W2 across servers (issue 12 §5): 50 runs × 100 durable steps started at
//! once over HTTP (`POST /v1/runs` with `wait`, each until it pauses after
//! its 100 `inc` steps through the Python Tool), through
//! - one `flow serve` on SQLite (the embedded default),
//! - one `flow serve --postgres` (a fresh schema),
//! - two `flow serve --postgres` sharing one fresh schema, 25 runs each.
//!
//! Printed: steps/s of each and the fsync latency of the data disk. Every
//! server is a release child process on 127.0.0.1:0, ended by its pid.
//!
//! Run: `cargo build --release -p flow-toolkit --bin flow-example-calc &&
//! cargo bench -p flowd --bench scale`. Postgres: `FLOW_TEST_POSTGRES` or
//! `postgres://postgres@127.0.0.1:5432/test`. Not part of CI.

// The harness serves every bench; this one uses a part of it.
#[allow(dead_code)]
mod harness;

#[path = "../../tests/common/mod.rs"]
mod common;

use flowd::http::listing::StateName;
use harness::{Server, Table, flows};
use serde_json::json;

const RUNS: usize = 50;
const STEPS: usize = 100;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().to_path_buf();
    let tools = flows::write_bindings(&root, &harness::release_dir());
    let mut table = Table::default();
    let fsync_dir = root.join("fsync");
    std::fs::create_dir_all(&fsync_dir).expect("fsync dir");
    table.row(
        "fsync latency (4 KiB write + fsync, median of 200, the data disk)",
        format!("{:.0} µs", harness::fsync_probe(&fsync_dir)),
        "—",
    );
    table.note(format!("load average at the start: {}", harness::load()));
    rt.block_on(async {
        let s = Server::start(&root.join("sqlite"), std::slice::from_ref(&tools));
        let rate = w2(&[&s]).await;
        table.row(
            "W2 (50 runs × 100 steps, Python Tool), one server, SQLite",
            format!("{rate:.0} steps/s"),
            "—",
        );
        drop(s);
        for servers in [1, 2] {
            let db = common::Schema::new().expect("a Postgres to measure on");
            let pg = [
                "--postgres",
                db.url.as_str(),
                "--postgres-schema",
                db.name.as_str(),
            ];
            let started: Vec<Server> = (0..servers)
                .map(|i| {
                    Server::start_with(
                        &root.join(format!("pg{servers}-{i}")),
                        std::slice::from_ref(&tools),
                        &pg,
                    )
                })
                .collect();
            let refs: Vec<&Server> = started.iter().collect();
            let rate = w2(&refs).await;
            table.row(
                format!("W2 (50 runs × 100 steps, Python Tool), {servers} server(s), one Postgres"),
                format!("{rate:.0} steps/s"),
                "scales with servers",
            );
            drop(started);
            drop(db);
        }
    });
    table.note(format!("load average at the end: {}", harness::load()));
    table.print();
}

/// Starts the runs at once, spread over `servers`, and waits for each to
/// pause: steps per second over the whole.
async fn w2(servers: &[&Server]) -> f64 {
    let body = harness::start_request(
        flows::counter_loop(STEPS + 10),
        flows::PY_MODULE,
        json!({"i": 0, "n": STEPS}),
        Some(600),
    );
    harness::concurrent_runs(servers, &body, RUNS, STEPS, StateName::Paused).await
}
