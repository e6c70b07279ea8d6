//! The waiting calls index (migration 0013) on a real SQLite file: its
//! rows are written in the pause record's transaction and cleared by the
//! run's next append; a store whose rows are missing (paused before the
//! migration, or by an older build) gets them back at open.

use flow_store::conformance::{call_fact, reply_fact, root_call, seed_run};
use flow_store::{
    AppendFacts, HostDetails, HostRecord, HostRecords, ListRuns, SqliteOptions, SqliteStore,
    WaitingQuery,
};
use serde_json::json;
use std::path::Path;

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

fn waiting(s: &SqliteStore) -> Vec<(String, String, u64)> {
    let q = WaitingQuery {
        limit: 100,
        ..WaitingQuery::default()
    };
    s.waiting_calls(&q)
        .unwrap()
        .calls
        .into_iter()
        .map(|c| (c.run.to_string(), c.node, c.fact))
        .collect()
}

fn rows_in_file(db: &Path) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("SELECT COUNT(*) FROM waiting_calls", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn rows_come_with_the_pause_go_with_the_next_fact_and_are_back_filled() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flow.db");
    let s = open(&db);
    let (run, n) = seed_run(&s, 1).unwrap();
    s.append(&run, call_fact(n + 1, 5, json!({"prompt": "ok?"})))
        .unwrap();
    assert!(waiting(&s).is_empty(), "running: nothing waits");
    s.record_host(
        &run,
        HostRecord::now(HostDetails::Pause {
            open: vec![root_call(5)],
        }),
    )
    .unwrap();
    assert_eq!(waiting(&s), [(run.to_string(), "step".into(), n + 1)]);

    // Rows gone as if paused before migration 0013: the next open fills
    // them from the pause record and the Call fact.
    drop(s);
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM waiting_calls", [])
        .unwrap();
    assert_eq!(rows_in_file(&db), 0);
    let s = open(&db);
    assert_eq!(waiting(&s), [(run.to_string(), "step".into(), n + 1)]);

    // The answer's Reply clears them, in its own transaction.
    s.append(&run, reply_fact(n + 2, 5, json!({"ok": true})))
        .unwrap();
    assert!(waiting(&s).is_empty());
    drop(s);
    assert_eq!(rows_in_file(&db), 0);
}
