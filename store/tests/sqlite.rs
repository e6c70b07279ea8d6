//! SQLite-specific tests on real files: corruption detection, blob dedup,
//! storage growth, migrations.

use flow_store::conformance::{
    call_fact, checkpoint_fact, end_fact, new_run_id, reply_fact, start_fact,
};
use flow_store::{AppendFacts, Appending, Error, ReadHistory, RunId, SqliteOptions, SqliteStore};
use serde_json::json;
use std::path::Path;

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

fn create(s: &SqliteStore) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": 1}));
    s.create_run(start.clone(), &sources, Vec::new()).unwrap();
    run
}

/// Flips one byte of the first occurrence of `marker` in the database file.
fn flip_in_file(db: &Path, marker: &[u8]) {
    let mut bytes = std::fs::read(db).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("marker in the database file");
    assert!(
        bytes[at + 1..].windows(marker.len()).all(|w| w != marker),
        "marker appears once"
    );
    bytes[at] ^= 0x01;
    std::fs::write(db, bytes).unwrap();
}

/// Deletes fact `n` of `run` from the database file (the store closed).
fn delete_fact(db: &Path, run: &RunId, n: u64) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute(
        "DELETE FROM facts WHERE n = ?1 AND run_key = (SELECT key FROM runs WHERE id = ?2)",
        rusqlite::params![n as i64, run.as_str()],
    )
    .unwrap();
}

fn corrupt_at(err: Error) -> u64 {
    match err {
        Error::Corrupt { n, .. } => n,
        other => panic!("expected a storage failure naming a fact, got {other}"),
    }
}

/// DESIGN §3 / REQUIREMENTS RES-4: a flipped byte in a fact row is a storage
/// failure naming the fact, never wrong data.
#[test]
fn flipped_byte_in_a_fact_row_names_the_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let run = {
        let s = open(&db);
        let run = create(&s);
        s.append(&run, call_fact(2, 1, json!({"a": 1}))).unwrap();
        s.append(
            &run,
            call_fact(3, 2, json!({"marker": "CORRUPT-ME-IN-FACT-3"})),
        )
        .unwrap();
        s.append(&run, call_fact(4, 3, json!({"a": 3}))).unwrap();
        run
    }; // dropping the store folds the WAL into the file
    flip_in_file(&db, b"CORRUPT-ME-IN-FACT-3");
    let s = open(&db);
    assert_eq!(corrupt_at(s.read_history(&run).unwrap_err()), 3);
    // The tail's catch-up read and a page read fail the same way.
    assert_eq!(corrupt_at(s.read_after(&run, 0, 10).unwrap_err()), 3);
    assert!(
        s.read_after(&run, 3, 10).is_ok(),
        "facts after the damage still link to its recorded hash"
    );
}

/// A flipped byte inside a blob: the fact that uses it is named.
#[test]
fn flipped_byte_in_a_blob_row_names_the_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let big = format!("BLOB-MARKER{}", "z".repeat(4000));
    let run = {
        let s = open(&db);
        let run = create(&s);
        s.append(&run, call_fact(2, 1, json!({"a": 1}))).unwrap();
        s.append(&run, reply_fact(3, 1, json!(big))).unwrap();
        run
    };
    flip_in_file(&db, b"BLOB-MARKER");
    let s = open(&db);
    let err = s.read_history(&run).unwrap_err();
    let msg = err.to_string();
    assert_eq!(corrupt_at(err), 3, "{msg}");
    assert!(msg.contains("blob"), "{msg}");
}

/// Row-level damage through SQL: a changed hash column, a deleted tail row.
#[test]
fn changed_hash_and_missing_rows_are_storage_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let s = open(&db);
    let run = create(&s);
    for n in 2..=5 {
        s.append(&run, call_fact(n, n, json!({"n": n}))).unwrap();
    }
    drop(s);
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute("UPDATE facts SET hash = zeroblob(32) WHERE n = 2", [])
        .unwrap();
    drop(c);
    let s = open(&db);
    assert_eq!(corrupt_at(s.read_history(&run).unwrap_err()), 2);
    drop(s);
    let run2 = {
        let s = open(&db);
        let run2 = create(&s);
        s.append(&run2, call_fact(2, 1, json!({}))).unwrap();
        s.append(&run2, call_fact(3, 2, json!({}))).unwrap();
        run2
    };
    delete_fact(&db, &run2, 3);
    let s = open(&db);
    assert_eq!(corrupt_at(s.read_history(&run2).unwrap_err()), 3);
}

/// A history long enough to be read in several windows and parsed ahead
/// on a thread of its own (read.rs): damage far into it is still named by
/// the fact it hit, on every read that walks it, and a walk that stops
/// early stops.
#[test]
fn long_histories_name_the_damaged_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    // Longer than the read's windows (2,048 rows): the damage is found in
    // the third window, the gap just after the first.
    let append = |s: &SqliteStore, run: &RunId, facts: u64, marker: u64| {
        let all: Vec<Appending> = (2..=facts)
            .map(|n| {
                let args = if n == marker {
                    json!({"marker": format!("CORRUPT-ME-IN-FACT-{n}")})
                } else {
                    json!({"n": n})
                };
                call_fact(n, n, args).into()
            })
            .collect();
        for chunk in all.chunks(500) {
            s.append_all(run, chunk.to_vec()).unwrap();
        }
    };
    let (run, gap) = {
        let s = open(&db);
        let run = create(&s);
        append(&s, &run, 5000, 4500);
        let gap = create(&s);
        append(&s, &gap, 3000, 0);
        (run, gap)
    };
    let s = open(&db);
    assert_eq!(s.read_history(&run).unwrap().facts.len(), 5000);
    let mut seen = 0;
    s.walk_logical(&run, &mut |_, _| {
        seen += 1;
        seen < 10
    })
    .unwrap();
    assert_eq!(seen, 10, "the visitor's false ends the walk");
    drop(s);
    flip_in_file(&db, b"CORRUPT-ME-IN-FACT-4500");
    delete_fact(&db, &gap, 2049);
    let s = open(&db);
    assert_eq!(corrupt_at(s.read_history(&run).unwrap_err()), 4500);
    let mut seen = 0;
    let err = s
        .walk_logical(&run, &mut |f, _| {
            seen = f.n();
            true
        })
        .unwrap_err();
    assert_eq!(
        (corrupt_at(err), seen),
        (4500, 4499),
        "every fact before it was handed on"
    );
    assert_eq!(corrupt_at(s.read_history(&gap).unwrap_err()), 2049);
    assert_eq!(corrupt_at(s.logical_history(&gap).unwrap_err()), 2049);
}

/// A long walk (several windows, parsed ahead) reads the history as it was
/// when the walk began: facts appended while it goes on are not in it, and
/// it agrees with the runs index it read.
#[test]
fn a_long_walk_reads_the_history_as_it_began() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(&tmp.path().join("s.db"));
    let run = create(&s);
    let calls = |from: u64, to: u64| -> Vec<Appending> {
        (from..=to)
            .map(|n| call_fact(n, n, json!({"n": n})).into())
            .collect()
    };
    for chunk in calls(2, 5000).chunks(500) {
        s.append_all(&run, chunk.to_vec()).unwrap();
    }
    let mut seen = Vec::new();
    s.walk_logical(&run, &mut |f, _| {
        // Appended once the walk has handed on its first fact.
        if f.n() == 1 {
            s.append_all(&run, calls(5001, 5100)).unwrap();
        }
        seen.push(f.n());
        true
    })
    .unwrap();
    assert_eq!(seen, (1..=5000).collect::<Vec<_>>());
    assert_eq!(s.read_history(&run).unwrap().facts.len(), 5100);
}

/// DESIGN §3: "Equal values share one blob across facts, runs and forks."
#[test]
fn equal_values_share_one_blob_across_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(&tmp.path().join("s.db"));
    let shared = json!({"doc": "s".repeat(100 * 1024)});
    let mut counts = Vec::new();
    for _ in 0..20 {
        let run = create(&s);
        s.append(&run, call_fact(2, 1, shared.clone())).unwrap();
        s.append(&run, reply_fact(3, 1, shared.clone())).unwrap();
        s.append(&run, checkpoint_fact(4, json!({"doc": shared.clone()})))
            .unwrap();
        counts.push(s.blob_count().unwrap());
    }
    // Each run adds only its own source blob; the 100 KiB value is one row.
    for w in counts.windows(2) {
        assert_eq!(w[1] - w[0], 1, "blob rows {counts:?}");
    }
}

/// DESIGN §3 "Checkpoints": a run whose `append` list gains one 2 KiB text
/// per step grows linearly on disk, not quadratically.
#[test]
fn accumulating_list_grows_linearly() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(&tmp.path().join("s.db"));
    let run = create(&s);
    let mut msgs: Vec<serde_json::Value> = Vec::new();
    let mut n = 1;
    let mut sizes = vec![s.bytes_on_disk().unwrap()];
    for step in 0..300u64 {
        let text = format!("{step:05}{}", "t".repeat(2043));
        msgs.push(json!(text));
        n += 1;
        s.append(
            &run,
            checkpoint_fact(n, json!({"messages": msgs, "step": step})),
        )
        .unwrap();
        if step % 100 == 99 {
            sizes.push(s.bytes_on_disk().unwrap());
        }
    }
    let first = sizes[1] - sizes[0];
    let third = sizes[3] - sizes[2];
    // Quadratic growth would make the third hundred steps ~5x the first.
    assert!(
        third < first * 3 / 2 + 64 * 1024,
        "growth per 100 steps: {sizes:?}"
    );
    assert!(third / 100 < 4000, "bytes per step {}", third / 100);
    assert_eq!(
        s.checkpoint_state(&run, n).unwrap()["messages"]
            .as_array()
            .unwrap()
            .len(),
        300
    );
    s.read_history(&run).unwrap();
}

/// STYLE rule 11: migrations are recorded; an edited or newer schema is refused.
#[test]
fn migrations_are_recorded_and_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let run = {
        let s = open(&db);
        let run = create(&s);
        s.append(&run, end_fact(2, json!(1))).unwrap();
        run
    };
    // Reopening applies nothing twice and keeps the data.
    let s = open(&db);
    assert_eq!(s.run_info(&run).unwrap().last_fact.n, 2);
    drop(s);
    let c = rusqlite::Connection::open(&db).unwrap();
    let v: i64 = c
        .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(v, flow_store::sqlite::schema_version());
    c.execute(
        "UPDATE schema_migrations SET checksum = 'x' WHERE version = 1",
        [],
    )
    .unwrap();
    drop(c);
    assert!(matches!(
        SqliteStore::open(&db, SqliteOptions::default()),
        Err(Error::Schema(_))
    ));
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute("DELETE FROM schema_migrations", []).unwrap();
    c.execute(
        "INSERT INTO schema_migrations VALUES (99, 'future', 'x', 0)",
        [],
    )
    .unwrap();
    drop(c);
    assert!(matches!(
        SqliteStore::open(&db, SqliteOptions::default()),
        Err(Error::Schema(_))
    ));
}

/// Group commit: refused commands in a batch are rolled back alone; the
/// accepted ones around them commit (issue 3 §2, DESIGN §7 "changes nothing").
#[test]
fn refusals_inside_a_group_commit_leave_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(&tmp.path().join("s.db"));
    let runs: Vec<RunId> = (0..6).map(|_| create(&s)).collect();
    std::thread::scope(|scope| {
        for (t, run) in runs.iter().enumerate() {
            let s = &s;
            scope.spawn(move || {
                for n in 2..60u64 {
                    if t % 2 == 0 {
                        // Wrong numbers and unknown runs, interleaved with good facts.
                        assert!(s.append(run, call_fact(n + 5, 1, json!({}))).is_err());
                        assert!(s.append(&new_run_id(), call_fact(n, 1, json!({}))).is_err());
                    }
                    s.append(run, call_fact(n, n, json!({"t": t, "n": n})))
                        .unwrap();
                }
            });
        }
    });
    for run in &runs {
        let h = s.read_history(run).unwrap();
        assert_eq!(h.facts.len(), 59);
        assert!(
            h.facts
                .iter()
                .skip(1)
                .all(|f| f.fact.value().map(|a| &a["n"]) == Some(&json!(f.n)))
        );
    }
}

/// An append the database itself refuses (its number was taken by another
/// handle on the file, as a second process would: this handle's head is
/// stale) changes nothing — not its fact, not its blob — and the writer
/// goes on. Appends run without a savepoint of their own (issue 16): the
/// fact's INSERT is refused whole, before its blobs are written.
#[test]
fn an_append_the_database_refuses_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let (a, b) = (open(&db), open(&db));
    let (run, other) = (create(&a), create(&a));
    a.append(&run, checkpoint_fact(2, json!({"x": 1}))).unwrap();
    b.append(&run, checkpoint_fact(3, json!({"x": 2}))).unwrap();
    let long = "refused".repeat(300);
    let err = a
        .append(&run, checkpoint_fact(3, json!({"x": 3, "s": long})))
        .unwrap_err();
    assert!(!err.is_corruption(), "{err}");
    a.append(&other, checkpoint_fact(2, json!({"y": 1})))
        .unwrap();
    let h = a.read_history(&run).unwrap();
    assert_eq!(h.facts.len(), 3);
    assert_eq!(h.facts[2].fact.value(), Some(&json!({"x": 2})));
    assert_eq!(a.read_history(&other).unwrap().facts.len(), 2);
    drop((a, b));
    let c = rusqlite::Connection::open(&db).unwrap();
    let blobs: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM blobs WHERE instr(body, 'refusedrefused') > 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(blobs, 0);
}

/// A create the database refuses after its first write changes nothing —
/// not its run, not its Start's blob — and the writer goes on. Creates and
/// host records run without a savepoint of their own (issue 42): every
/// check comes before the first write, and a failure after it rolls the
/// batch back whole. Here the key the new run gets was taken in the facts
/// table by another handle on the file, so its Start's INSERT fails after
/// its blob and run row were written.
#[test]
fn a_create_the_database_refuses_after_its_first_write_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let s = open(&db);
    let first = create(&s);
    let raw = rusqlite::Connection::open(&db).unwrap();
    raw.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    let next: i64 = raw
        .query_row("SELECT MAX(key) + 1 FROM runs", [], |r| r.get(0))
        .unwrap();
    let stray = |sql: &str| raw.execute(sql, [next]).unwrap();
    stray(
        "INSERT INTO facts (run_key, n, kind, hash, body) VALUES (?1, 1, 'start', zeroblob(32), '{}')",
    );
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"s": "refused".repeat(300)}));
    let err = s
        .create_run(start.clone(), &sources, Vec::new())
        .unwrap_err();
    assert!(!err.is_corruption(), "{err}");
    assert!(
        matches!(s.run_info(&run), Err(Error::UnknownRun(_))),
        "the refused run is not there"
    );
    let count = |sql: &str| -> i64 { raw.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM runs"), 1);
    assert_eq!(
        count("SELECT COUNT(*) FROM blobs WHERE instr(body, 'refusedrefused') > 0"),
        0
    );
    // The writer goes on: the run's facts and the same create, once the
    // stray row is gone.
    s.append(&first, call_fact(2, 1, json!({}))).unwrap();
    stray("DELETE FROM facts WHERE run_key = ?1");
    s.create_run(start, &sources, Vec::new()).unwrap();
    assert_eq!(s.read_history(&run).unwrap().facts.len(), 1);
    assert_eq!(count("SELECT COUNT(*) FROM runs"), 2);
}

/// Two processes opening a new store at once (a `flow run` and a `flow
/// runs`) both get it: the migrations are applied once, in one IMMEDIATE
/// transaction, and the other opener finds them recorded. (Before, the
/// second applied migration 1 again and failed: a storage failure, exit 5.)
#[test]
fn concurrent_opens_of_a_new_store_all_succeed() {
    for _ in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let db = std::sync::Arc::new(tmp.path().join("s.db"));
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (db, start) = (db.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    open(&db)
                        .run_info(&new_run_id())
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        for o in openers {
            let e = o.join().unwrap();
            assert!(
                e.as_deref().is_some_and(|e| e.contains("unknown run")),
                "an opener failed: {e:?}"
            );
        }
    }
}
