//! Encryption at rest at the store (docs/custody.md "Encryption at rest"),
//! on SQLite and Postgres: a sealed row copied onto another row, or
//! sealed under a data key the store does not hold, is a storage failure
//! naming the row and the key — never another row's plaintext, never
//! garbage; a plaintext store opened with keys reads its old rows and
//! seals its new ones.

mod pg;

use flow_store::conformance::{call_fact, new_run_id, reply_fact, start_fact};
use flow_store::{
    AppendFacts, Error, HostRecords, Keyring, PostgresOptions, PostgresStore, ReadHistory, RunId,
    SqliteOptions, SqliteStore,
};
use serde_json::json;
use std::sync::Arc;

fn keys() -> Arc<Keyring> {
    Arc::new(Keyring::generate("test keys").unwrap())
}

/// A run of three facts, the third's value over 1 KiB (a blob).
fn write_run(s: &(impl AppendFacts + ?Sized)) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "secret"}));
    s.create_run(start, &sources, Vec::new()).unwrap();
    s.append(&run, call_fact(2, 1, json!({"a": "secret"})))
        .unwrap();
    s.append(
        &run,
        reply_fact(3, 1, json!({"big": "secret ".repeat(200)})),
    )
    .unwrap();
    run
}

fn failure_names(e: Error, says: &[&str]) {
    let text = e.to_string();
    assert!(e.is_corruption(), "{text}");
    for s in says {
        assert!(text.contains(s), "{s:?} not in {text}");
    }
}

#[test]
fn sqlite_a_moved_or_foreign_sealed_row_is_a_named_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let opts = SqliteOptions {
        keys: Some(keys()),
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open(&path, opts.clone()).unwrap();
    let run = write_run(&s);
    s.read_history(&run).unwrap();
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    // Fact 2's sealed body onto fact 3: its chain hash does not open it.
    c.execute_batch("UPDATE facts SET body = (SELECT body FROM facts WHERE n = 2) WHERE n = 3")
        .unwrap();
    let s = SqliteStore::open(&path, opts.clone()).unwrap();
    match s.read_history(&run).unwrap_err() {
        e @ Error::Corrupt { n: 3, .. } => failure_names(e, &["moved from another row"]),
        e => panic!("{e}"),
    }
    drop(s);
    // A blob sealed by another store's data key: named by its id.
    let other = tmp.path().join("o.db");
    let o = SqliteStore::open(&other, opts.clone()).unwrap();
    write_run(&o);
    drop(o);
    c.execute_batch(&format!(
        "ATTACH '{}' AS o; UPDATE blobs SET body = (SELECT body FROM o.blobs LIMIT 1);",
        other.display()
    ))
    .unwrap();
    let s = SqliteStore::open(&path, opts).unwrap();
    let hash = s.read_history(&run).unwrap_err();
    failure_names(hash, &["data key", "does not hold"]);
}

#[test]
fn sqlite_plaintext_rows_stay_readable_once_keys_are_given() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let old = write_run(&s);
    assert!(!s.is_sealed());
    drop(s);
    let opts = SqliteOptions {
        keys: Some(keys()),
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open(&path, opts).unwrap();
    assert!(s.is_sealed());
    let new = write_run(&s);
    s.record_host(
        &new,
        flow_store::HostRecord::now(flow_store::HostDetails::Other {
            kind: flow_store::HostRecordKind::Binding,
            details: json!({"secret": "secret"}),
        }),
    )
    .unwrap();
    assert_eq!(s.host_records(&new).unwrap().len(), 1);
    let (a, b) = (s.read_history(&old).unwrap(), s.read_history(&new).unwrap());
    assert_eq!(a.facts.len(), b.facts.len());
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    let clear: i64 = c
        .query_row(
            "SELECT count(*) FROM facts WHERE substr(body, 1, 1) = '{'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(clear, 3, "the old run's facts only");
    // Without the keys it no longer opens at all.
    let e = SqliteStore::open(&path, SqliteOptions::default())
        .err()
        .unwrap();
    failure_names(e, &["encrypted", "--key-file"]);
}

#[test]
fn postgres_a_moved_or_foreign_sealed_row_is_a_named_failure() {
    let Some(db) = pg::TestDb::new() else { return };
    let opts = PostgresOptions {
        keys: Some(keys()),
        ..db.options()
    };
    let schema = opts.schema.clone();
    let s = PostgresStore::open(opts.clone()).unwrap();
    let run = write_run(&s);
    s.read_history(&run).unwrap();
    drop(s);
    db.sql(
        &schema,
        "UPDATE facts SET body = (SELECT body FROM facts WHERE n = 2) WHERE n = 3",
    );
    let s = PostgresStore::open(opts.clone()).unwrap();
    match s.read_history(&run).unwrap_err() {
        e @ Error::Corrupt { n: 3, .. } => failure_names(e, &["moved from another row"]),
        e => panic!("{e}"),
    }
    drop(s);
    // Without a key file an encrypted store does not open, naming its key.
    let e = PostgresStore::open(PostgresOptions {
        keys: None,
        ..opts.clone()
    })
    .err()
    .unwrap();
    failure_names(e, &["encrypted", "--key-file"]);
    // The data key gone from the table: every sealed row names it.
    db.sql(&schema, "DELETE FROM data_keys");
    let s = PostgresStore::open(PostgresOptions { keys: None, ..opts }).unwrap();
    failure_names(
        s.read_history(&run).unwrap_err(),
        &["sealed with data key", "without a key file"],
    );
}
