//! The maintained run counters (migration 0015, issue 38 §1, §5) on a real
//! SQLite file and the real Postgres: back-filled by the migration from the
//! runs a database already holds, and on Postgres the triggers' deltas
//! folded into the base rows when a store opens, every count unchanged.
//! (The counters through every kind of change, on both backends, are the
//! conformance case `run_counts`.)

#[cfg(feature = "postgres")]
mod pg;
mod undo;

use flow_abi::fact::Ending;
use flow_store::conformance::{call_fact, end_fact, new_run_id, start_with_source};
use flow_store::{
    Backend, Fact, HostDetails, HostRecord, HostRecordKind, ListRuns, RunListQuery, RunState,
    SqliteOptions, SqliteStore, TimeRange,
};
use serde_json::json;
use undo::*;

/// `n` runs of three flows (and some with no flow id) in every state.
fn seed(s: &dyn Backend, n: u64) {
    for i in 0..n {
        let run = new_run_id();
        let doc = match i % 4 {
            3 => "no flow document".to_string(),
            k => json!({"id": format!("flow{k}"), "nodes": []}).to_string(),
        };
        let (start, sources) = start_with_source(&run, "f.json", "main", doc, json!({"i": i}));
        s.create_run(start, &sources, Vec::new()).unwrap();
        let host = |kind| HostRecord {
            at_ms: None,
            details: HostDetails::Other {
                kind,
                details: json!({}),
            },
        };
        match i % 5 {
            0 => drop(s.append(&run, end_fact(2, json!(i))).unwrap()),
            1 => drop(
                s.append(
                    &run,
                    Fact::End {
                        n: 2,
                        ending: Ending::Faulted("boom".into()),
                    },
                )
                .unwrap(),
            ),
            2 => drop(s.record_host(&run, host(HostRecordKind::Pause)).unwrap()),
            3 => drop(s.record_host(&run, host(HostRecordKind::Halt)).unwrap()),
            _ => drop(s.append(&run, call_fact(2, 1, json!({}))).unwrap()),
        }
    }
}

/// The counters answer every state and flow filter as the scan does (a
/// started range from 0 selects every run and is answered by the scan).
fn agree(s: &dyn Backend) {
    let states: [&[RunState]; 3] = [
        &[],
        &[RunState::Paused],
        &[RunState::Completed, RunState::Faulted],
    ];
    for st in states {
        for flow in [None, Some("flow1"), Some("flow9")] {
            let q = RunListQuery {
                states: st.to_vec(),
                flow: flow.map(str::to_string),
                ..RunListQuery::default()
            };
            let scanned = RunListQuery {
                started: TimeRange {
                    from: Some(0),
                    to: None,
                },
                ..q.clone()
            };
            assert_eq!(
                s.count_runs(&q).unwrap(),
                s.count_runs(&scanned).unwrap(),
                "states {st:?}, flow {flow:?}"
            );
        }
    }
    assert!(s.count_runs(&RunListQuery::default()).unwrap().total > 0);
}

#[test]
fn migration_15_backfills_the_counters() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    seed(&s, 40);
    drop(s);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(UNDO_15_SQLITE)
        .unwrap();
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    agree(&s);
    seed(&s, 7);
    agree(&s);
    #[cfg(feature = "postgres")]
    if let Some(db) = pg::TestDb::new() {
        let options = db.options();
        let s = flow_store::PostgresStore::open(options.clone()).unwrap();
        seed(&s, 40);
        drop(s);
        db.sql(&options.schema, UNDO_15_POSTGRES);
        let s = flow_store::PostgresStore::open(options).unwrap();
        agree(&s);
        seed(&s, 7);
        agree(&s);
    }
}

/// Rows of a table in `schema`.
#[cfg(feature = "postgres")]
fn rows(url: &str, schema: &str, table: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let n: i64 = client
            .query_one(&format!("SELECT COUNT(*) FROM {schema}.{table}"), &[])
            .await
            .unwrap()
            .get(0);
        drop(client);
        let _ = driver.await;
        n
    })
}

/// REQ issue 38 §5: a store's writes leave deltas; a store opening on the
/// schema folds them into the base rows; counts read the same before and
/// after, from either store, and go on following new writes.
#[cfg(feature = "postgres")]
#[test]
fn postgres_deltas_fold_when_a_store_opens() {
    let Some(db) = pg::TestDb::new() else {
        return;
    };
    let options = db.options();
    let a = flow_store::PostgresStore::open(options.clone()).unwrap();
    seed(&a, 30);
    assert!(rows(&db.url, &options.schema, "run_count_deltas") > 0);
    let before = a.count_runs(&RunListQuery::default()).unwrap();
    agree(&a);
    let b = flow_store::PostgresStore::open(options.clone()).unwrap();
    assert_eq!(rows(&db.url, &options.schema, "run_count_deltas"), 0);
    assert!(rows(&db.url, &options.schema, "run_counts") > 0);
    assert_eq!(b.count_runs(&RunListQuery::default()).unwrap(), before);
    agree(&a);
    seed(&b, 9);
    seed(&a, 3);
    agree(&a);
    agree(&b);
    assert_eq!(
        a.count_runs(&RunListQuery::default()).unwrap().total,
        before.total + 12
    );
}
