//! The Postgres backend on the real server: the conformance suite, the
//! migrations, corruption detection, fencing between writers, the live
//! tail across processes' notifications, and use from a tokio app.

#![cfg(feature = "postgres")]

mod pg;

use flow_abi::fact::CallId;
use flow_store::conformance::root_call;
use flow_store::conformance::{self, call_fact, end_fact, new_run_id, reply_fact, start_fact};
use flow_store::{
    AppendFacts, Error, Halt, HostDetails, HostRecord, HostRecords, ListRuns, Memory,
    PostgresOptions, PostgresStore, ReadHistory, RunId, RunState, Subscribe, TailEvent,
    WaitingQuery,
};
use pg::TestDb;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

fn create(s: &PostgresStore) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": 1}));
    s.create_run(start.clone(), &sources, Vec::new()).unwrap();
    run
}

fn corrupt_at(err: Error) -> u64 {
    match err {
        Error::Corrupt { n, .. } => n,
        other => panic!("expected a storage failure naming a fact, got {other}"),
    }
}

/// STYLE rule 4: one conformance suite, two backends.
#[test]
fn postgres_passes_the_conformance_suite() {
    let Some(db) = TestDb::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut factory = || db.store();
    let failures = conformance::run_suite(&mut factory, &tmp.path().join("scratch"));
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The suite again with encryption at rest on (docs/custody.md).
#[test]
fn postgres_sealed_passes_the_conformance_suite() {
    let Some(db) = TestDb::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let keys = std::sync::Arc::new(flow_store::Keyring::generate("test keys").unwrap());
    let mut factory = || {
        let opts = PostgresOptions {
            keys: Some(keys.clone()),
            ..db.options()
        };
        let s = PostgresStore::open(opts).unwrap();
        assert!(s.is_sealed());
        s
    };
    let failures = conformance::run_suite(&mut factory, &tmp.path().join("scratch"));
    assert!(failures.is_empty(), "{failures:#?}");
}

fn versions(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect()
}

/// STYLE rule 11: both dialects have the same numbered migrations.
#[test]
fn migration_folders_list_the_same_versions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let sqlite = versions(&root.join("sqlite"));
    let postgres = versions(&root.join("postgres"));
    assert!(!sqlite.is_empty());
    assert_eq!(
        sqlite, postgres,
        "migrations/sqlite and migrations/postgres"
    );
    assert_eq!(
        flow_store::sqlite::schema_version(),
        flow_store::postgres::schema_version()
    );
    // The highest file is the build's version (a number may be missing
    // while another branch's migration is being merged: 0018).
    let highest: i64 = sqlite
        .last()
        .and_then(|n| n.get(..4))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert_eq!(
        highest,
        flow_store::postgres::schema_version(),
        "every file is in the build's list"
    );
}

/// Migrations are recorded with checksums; an edited or newer schema is refused.
#[test]
fn migrations_are_recorded_and_checked() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let run = {
        let s = PostgresStore::open(opts.clone()).unwrap();
        let run = create(&s);
        s.append(&run, end_fact(2, json!(1))).unwrap();
        run
    };
    let s = PostgresStore::open(opts.clone()).unwrap();
    assert_eq!(s.run_info(&run).unwrap().last_fact.n, 2, "reopened, kept");
    drop(s);
    db.sql(
        &opts.schema,
        "UPDATE schema_migrations SET checksum = 'x' WHERE version = 1",
    );
    assert!(matches!(
        PostgresStore::open(opts.clone()),
        Err(Error::Schema(_))
    ));
    db.sql(
        &opts.schema,
        "DELETE FROM schema_migrations; INSERT INTO schema_migrations VALUES (99, 'future', 'x', 0)",
    );
    assert!(matches!(
        PostgresStore::open(opts.clone()),
        Err(Error::Schema(_))
    ));
}

/// DESIGN §3 / REQUIREMENTS RES-4: damaged rows are storage failures naming
/// the fact, never wrong data.
#[test]
fn damaged_rows_are_storage_failures_naming_the_fact() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let s = PostgresStore::open(opts.clone()).unwrap();
    let run = create(&s);
    s.append(&run, call_fact(2, 1, json!({"a": 1}))).unwrap();
    s.append(&run, call_fact(3, 2, json!({"marker": "CORRUPT-ME"})))
        .unwrap();
    s.append(
        &run,
        reply_fact(4, 2, json!(format!("BLOB{}", "z".repeat(4000)))),
    )
    .unwrap();
    s.append(&run, call_fact(5, 3, json!({"a": 3}))).unwrap();
    s.read_history(&run).unwrap();
    // A changed byte in a fact body.
    db.sql(
        &opts.schema,
        "UPDATE facts SET body = replace(body, 'CORRUPT-ME', 'CORRUPT-ME!') WHERE n = 3",
    );
    assert_eq!(corrupt_at(s.read_history(&run).unwrap_err()), 3);
    assert_eq!(corrupt_at(s.read_after(&run, 0, 10).unwrap_err()), 3);
    assert!(
        s.read_after(&run, 3, 10).is_ok(),
        "facts after the damage still link to its recorded hash"
    );
    db.sql(
        &opts.schema,
        "UPDATE facts SET body = replace(body, 'CORRUPT-ME!', 'CORRUPT-ME') WHERE n = 3",
    );
    s.read_history(&run).unwrap();
    // A flipped byte in a blob: the fact that uses it is named.
    db.sql(
        &opts.schema,
        "UPDATE blobs SET body = overlay(body placing '\\x59'::bytea from 3 for 1) WHERE position('\\x424c4f42'::bytea in body) > 0",
    );
    let err = s.read_history(&run).unwrap_err();
    let msg = err.to_string();
    assert_eq!(corrupt_at(err), 4, "{msg}");
    assert!(msg.contains("blob"), "{msg}");
    // A zeroed hash column, a deleted row.
    let run2 = create(&s);
    for n in 2..=4 {
        s.append(&run2, call_fact(n, n, json!({"n": n}))).unwrap();
    }
    let key = format!("(SELECT key FROM runs WHERE id = '{run2}')");
    db.sql(
        &opts.schema,
        &format!("UPDATE facts SET hash = '\\x00'::bytea WHERE n = 2 AND run_key = {key}"),
    );
    assert_eq!(corrupt_at(s.read_history(&run2).unwrap_err()), 2);
    db.sql(
        &opts.schema,
        &format!("DELETE FROM facts WHERE n = 2 AND run_key = {key}"),
    );
    assert_eq!(corrupt_at(s.read_history(&run2).unwrap_err()), 2);
}

/// The fencing the multi-server lease relies on: an append is checked
/// against the stored head inside its transaction, so a writer whose view is
/// stale is refused and the history never forks.
#[test]
fn a_stale_writer_is_refused_by_the_stored_head() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let a = PostgresStore::open(opts.clone()).unwrap();
    let b = PostgresStore::open(opts.clone()).unwrap();
    let run = create(&a);
    a.append(&run, call_fact(2, 1, json!({"by": "a"}))).unwrap();
    // b never saw fact 2 written; it still cannot write another fact 2.
    assert!(matches!(
        b.append(&run, call_fact(2, 1, json!({"by": "b"}))),
        Err(Error::WrongNumber { expected: 3, .. })
    ));
    b.append(&run, call_fact(3, 2, json!({"by": "b"}))).unwrap();
    assert!(matches!(
        a.append(&run, call_fact(3, 2, json!({"by": "a"}))),
        Err(Error::WrongNumber { expected: 4, .. })
    ));
    // Two writers racing on one run: every number is taken exactly once.
    let won = std::thread::scope(|scope| {
        let hs: Vec<_> = [&a, &b]
            .into_iter()
            .enumerate()
            .map(|(w, s)| {
                let run = &run;
                scope.spawn(move || {
                    let mut won = Vec::new();
                    for n in 4..60u64 {
                        if s.append(run, call_fact(n, n, json!({"w": w}))).is_ok() {
                            won.push(n);
                        }
                    }
                    won
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<u64>>()
    });
    let h = a.read_history(&run).unwrap();
    let last = h.facts.len() as u64;
    let mut won = won;
    won.sort();
    assert_eq!(won, (4..=last).collect::<Vec<_>>(), "each number once");
    assert_eq!(b.read_history(&run).unwrap().facts, h.facts);
    // A run created by both: one wins, the other is told it exists.
    let run2 = new_run_id();
    let (start, sources) = start_fact(&run2, json!({}));
    a.create_run(start.clone(), &sources, Vec::new()).unwrap();
    assert!(matches!(
        b.create_run(start.clone(), &sources, Vec::new()),
        Err(Error::RunExists(_))
    ));
}

/// A writer decides a batch in one round trip against the heads it
/// remembers only while each run's row is as it left it: a pause another
/// writer recorded (a host record, no new fact) moves the row, so the next
/// append is decided against the head read again — which says paused, so
/// the append clears the pause's waiting call — and host records number
/// on after the other writer's.
#[test]
fn a_remembered_head_another_writer_moved_is_read_again() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let a = PostgresStore::open(opts.clone()).unwrap();
    let b = PostgresStore::open(opts.clone()).unwrap();
    let run = create(&a);
    a.append(&run, call_fact(2, 7, json!({}))).unwrap();
    let pause = HostRecord {
        at_ms: None,
        details: HostDetails::Pause {
            open: vec![root_call(7)],
        },
    };
    b.record_host(&run, pause).unwrap();
    let waiting = WaitingQuery {
        limit: 10,
        ..WaitingQuery::default()
    };
    assert_eq!(a.waiting_calls(&waiting).unwrap().total, 1);
    a.append(&run, reply_fact(3, 7, json!({"ok": true})))
        .unwrap();
    assert_eq!(a.run_info(&run).unwrap().state, RunState::Running);
    assert_eq!(a.waiting_calls(&waiting).unwrap().total, 0, "cleared");
    b.append(&run, call_fact(4, 8, json!({}))).unwrap();
    let halt = HostRecord::now(HostDetails::Halt(Halt {
        by: Some("test".into()),
        reason: None,
        force: None,
        outer: None,
    }));
    a.record_host(&run, halt).unwrap();
    let seqs: Vec<u64> = a
        .host_records(&run)
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(b.run_info(&run).unwrap().state, RunState::Halted);
}

/// LIVE-3 across stores: a tail on one store sees the facts another store
/// (another process, in production) appends, through LISTEN/NOTIFY.
#[test]
fn a_tail_sees_facts_appended_through_another_store() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let writer = PostgresStore::open(opts.clone()).unwrap();
    let reader = PostgresStore::open(opts.clone()).unwrap();
    let run = create(&writer);
    let mut tail = reader.subscribe(&run, 1).unwrap();
    let got = std::thread::scope(|scope| {
        scope.spawn(|| {
            for n in 2..=10u64 {
                std::thread::sleep(Duration::from_millis(20));
                writer
                    .append(&run, call_fact(n, n, json!({"n": n})))
                    .unwrap();
            }
            writer.append(&run, end_fact(11, json!(null))).unwrap();
        });
        let mut got = Vec::new();
        loop {
            // Long enough that a missed notification shows as Idle.
            match tail.next_event(Duration::from_secs(30)).unwrap() {
                TailEvent::Fact(f) => got.push(f.n),
                TailEvent::Ended => break,
                TailEvent::Idle => panic!("no notification reached the tail (got {got:?})"),
            }
        }
        got
    });
    assert_eq!(got, (2..=11).collect::<Vec<_>>());
}

/// Issue 36 §4: the worker queue's writes reach every store of the schema
/// as notes, delivered on commit: a call queued (`Queued`), a reply
/// admitted (`Settled` naming the call), a call settled by the host, a
/// worker gone (`Everyone`). A reply dropped sends nothing.
#[test]
fn queue_notes_reach_another_store() {
    use flow_store::{QueueNote, RemoteCall, ServedTool, WorkerQueue};
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let writer = PostgresStore::open(opts.clone()).unwrap();
    let other = PostgresStore::open(opts).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    other.observe_queue(std::sync::Arc::new(move |n: &QueueNote| {
        let _ = tx.lock().unwrap().send(n.clone());
    }));
    // The writer's own notes do not come back to it (it woke its own).
    let (own_tx, own) = std::sync::mpsc::channel();
    let own_tx = std::sync::Mutex::new(own_tx);
    writer.observe_queue(std::sync::Arc::new(move |n: &QueueNote| {
        let _ = own_tx.lock().unwrap().send(n.clone());
    }));
    let next = || rx.recv_timeout(Duration::from_secs(30)).expect("a note");
    let run = create(&writer);
    let live = Duration::from_secs(60);
    let fp = "sha256:aa";
    writer
        .register_worker(
            "w1",
            "one",
            "",
            &flow_store::Namespaces::All,
            &[ServedTool {
                tool: "t.json#a".into(),
                fingerprint: fp.into(),
                resend: false,
            }],
        )
        .unwrap();
    let id = |k: u64| CallId::new("root", k).unwrap();
    let call = |k: u64| RemoteCall {
        run: run.clone(),
        call: id(k),
        tool: "t.json#a".into(),
        fingerprint: fp.into(),
        args: json!({"k": k}),
    };
    writer.queue_call(&call(1), live).unwrap();
    assert_eq!(next(), QueueNote::Queued);
    assert_eq!(writer.claim_calls("w1", 5).unwrap().calls.len(), 1);
    assert!(
        writer
            .reply_call("w1", &run, &id(1), &json!({"Ok": 1}))
            .unwrap()
    );
    assert_eq!(
        next(),
        QueueNote::Settled {
            run: run.clone(),
            call: id(1)
        }
    );
    assert!(
        !writer
            .reply_call("w1", &run, &id(1), &json!({"Ok": 2}))
            .unwrap()
    );
    writer.queue_call(&call(2), live).unwrap();
    assert_eq!(next(), QueueNote::Queued, "a dropped reply sends nothing");
    assert!(
        writer
            .settle_call(&run, &id(2), None, Some(&json!({"NotRun": "no"})))
            .unwrap()
    );
    assert_eq!(
        next(),
        QueueNote::Settled {
            run: run.clone(),
            call: id(2)
        }
    );
    writer.remove_worker("w1").unwrap();
    assert_eq!(next(), QueueNote::Everyone);
    assert!(
        own.try_iter().all(|n| n == QueueNote::Resync),
        "a store heard its own notes"
    );
}

/// Refused commands inside a group commit are rolled back alone; the
/// accepted ones around them commit (issue 3 §2, DESIGN §7).
#[test]
fn refusals_inside_a_group_commit_leave_the_rest() {
    let Some(db) = TestDb::new() else { return };
    let s = db.store();
    let runs: Vec<RunId> = (0..6).map(|_| create(&s)).collect();
    std::thread::scope(|scope| {
        for (t, run) in runs.iter().enumerate() {
            let s = &s;
            scope.spawn(move || {
                for n in 2..40u64 {
                    if t % 2 == 0 {
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
        assert_eq!(h.facts.len(), 39);
        assert!(
            h.facts
                .iter()
                .skip(1)
                .all(|f| f.fact.value().map(|a| &a["n"]) == Some(&json!(f.n)))
        );
    }
}

/// The synchronous API inside a tokio app: called from `spawn_blocking` on
/// a one-worker runtime (and a current-thread one), opened and dropped
/// there and inside async tasks, it finishes and never deadlocks.
#[test]
fn works_from_spawn_blocking_in_a_tokio_app() {
    let Some(db) = TestDb::new() else { return };
    for flavor in ["multi_thread", "current_thread"] {
        let rt = match flavor {
            "multi_thread" => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(64)
                .enable_all()
                .build()
                .unwrap(),
            _ => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        let opts = db.options();
        rt.block_on(async {
            let o = opts.clone();
            let store = tokio::task::spawn_blocking(move || PostgresStore::open(o).unwrap())
                .await
                .unwrap();
            let work = async {
                let mut tasks = Vec::new();
                for t in 0..16u64 {
                    let s = store.clone();
                    tasks.push(tokio::task::spawn_blocking(move || {
                        let run = create(&s);
                        let mut tail = s.subscribe(&run, 1).unwrap();
                        for n in 2..12u64 {
                            s.append(&run, call_fact(n, n, json!({"t": t}))).unwrap();
                            assert!(matches!(
                                tail.next_event(Duration::from_secs(30)).unwrap(),
                                TailEvent::Fact(f) if f.n == n
                            ));
                        }
                        s.history_page(&run, &Default::default()).unwrap();
                        s.read_history(&run).unwrap().facts.len()
                    }));
                }
                for t in tasks {
                    assert_eq!(t.await.unwrap(), 11);
                }
            };
            tokio::time::timeout(Duration::from_secs(120), work)
                .await
                .unwrap_or_else(|_| panic!("{flavor}: the store deadlocked inside spawn_blocking"));
            // The last handle dropped inside an async task.
            tokio::spawn(async move { drop(store) }).await.unwrap();
        });
    }
}

/// DESIGN §4 memory stores from Postgres: overwrite, merge, canonical keys.
#[test]
fn memory_reads_and_merges() {
    let Some(db) = TestDb::new() else { return };
    let s = db.store();
    let key = json!({"b": 1, "a": [1.50, "x"]});
    assert_eq!(s.memory_read("m", &key).unwrap(), None);
    s.memory_write("m", &key, &json!({"x": 1, "y": 2}), false)
        .unwrap();
    s.memory_write(
        "m",
        &json!({"a": [1.5, "x"], "b": 1}),
        &json!({"y": 3, "z": 4}),
        true,
    )
    .unwrap();
    assert_eq!(
        s.memory_read("m", &key).unwrap(),
        Some(json!({"x": 1, "y": 3, "z": 4}))
    );
    s.memory_write("m", &key, &json!("plain"), false).unwrap();
    assert_eq!(s.memory_read("m", &key).unwrap(), Some(json!("plain")));
    assert_eq!(s.memory_read("other", &key).unwrap(), None);
    // Concurrent merges of different fields lose none.
    std::thread::scope(|scope| {
        for t in 0..8 {
            let s = &s;
            scope.spawn(move || {
                let mut field = serde_json::Map::new();
                field.insert(format!("f{t}"), json!(t));
                s.memory_write("c", &json!("k"), &serde_json::Value::Object(field), true)
                    .unwrap();
            });
        }
    });
    let v = s.memory_read("c", &json!("k")).unwrap().unwrap();
    assert_eq!(v.as_object().unwrap().len(), 8, "{v}");
}

/// DESIGN §3: "Equal values share one blob across facts, runs and forks."
#[test]
fn equal_values_share_one_blob_across_runs() {
    let Some(db) = TestDb::new() else { return };
    let s = db.store();
    let shared = json!({"doc": "s".repeat(100 * 1024)});
    let mut counts = Vec::new();
    for _ in 0..5 {
        let run = create(&s);
        s.append(&run, call_fact(2, 1, shared.clone())).unwrap();
        s.append(&run, reply_fact(3, 1, shared.clone())).unwrap();
        counts.push(s.blob_count().unwrap());
    }
    for w in counts.windows(2) {
        assert_eq!(w[1] - w[0], 1, "blob rows {counts:?}");
    }
}

/// Text with quotes, backslashes, dollar quotes, statement fragments and
/// any Unicode, in facts, blobs and host records, is stored and read back
/// exactly as sent.
#[test]
fn text_that_looks_like_sql_is_stored_as_sent() {
    let Some(db) = TestDb::new() else { return };
    let s = db.store();
    let hostile = "it's \\x00 \\' $$ $q$ '); DROP TABLE facts; -- \n\t 𝄞 é \u{1}";
    let run = create(&s);
    let small = json!({"text": hostile, hostile: [hostile]});
    let large = json!({"doc": hostile.repeat(2000)});
    s.append(&run, call_fact(2, 1, small.clone())).unwrap();
    s.append(&run, reply_fact(3, 1, large.clone())).unwrap();
    let halt = HostRecord::now(HostDetails::Halt(Halt {
        by: Some(hostile.into()),
        reason: Some(hostile.into()),
        force: None,
        outer: None,
    }));
    s.record_host(&run, halt).unwrap();
    let facts = s.logical_history(&run).unwrap();
    assert_eq!(facts[1], call_fact(2, 1, small));
    assert_eq!(facts[2], reply_fact(3, 1, large));
    let records = s.host_records(&run).unwrap();
    let HostDetails::Halt(h) = &records[0].details else {
        panic!("a halt, got {:?}", records[0].details)
    };
    assert_eq!(
        (h.by.as_deref(), h.reason.as_deref()),
        (Some(hostile), Some(hostile))
    );
    assert_eq!(s.run_info(&run).unwrap().state, RunState::Halted);
}

/// Bad options and an unreachable server are clear errors.
#[test]
fn bad_options_and_unreachable_servers_are_refused_clearly() {
    for schema in ["", "Bad", "1x", "a-b", "pg_x", &"s".repeat(49)] {
        let r = PostgresStore::open(PostgresOptions {
            url: pg::DEFAULT_URL.into(),
            schema: schema.into(),
            keys: None,
        });
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{schema:?}");
    }
    assert!(matches!(
        PostgresStore::open(PostgresOptions {
            url: "not a url at all ::".into(),
            schema: "s".into(),
            keys: None,
        }),
        Err(Error::InvalidArgument(_))
    ));
    let err = PostgresStore::open(PostgresOptions {
        url: "postgres://postgres@127.0.0.1:1/test".into(),
        schema: "s".into(),
        keys: None,
    })
    .err()
    .expect("port 1 is closed");
    let msg = err.to_string();
    assert!(
        matches!(err, Error::Unavailable(_)) && msg.contains("127.0.0.1:1/test"),
        "{msg}"
    );
}

/// The store outlives its connections: after every backend of the store is
/// terminated (a restarted server looks the same), appends, reads and a
/// tail fed by another store's notifications carry on.
#[test]
fn connections_lost_are_replaced() {
    let Some(db) = TestDb::new() else { return };
    let opts = db.options();
    let writer = PostgresStore::open(opts.clone()).unwrap();
    let reader = PostgresStore::open(opts.clone()).unwrap();
    let run = create(&writer);
    writer.append(&run, call_fact(2, 1, json!({}))).unwrap();
    reader.read_history(&run).unwrap();
    let app = format!("flow-store:{}", opts.schema);
    // Two writers and two listeners at least, then all of them killed.
    db.sql(
        &opts.schema,
        &format!(
            "DO $$ BEGIN IF (SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}') < 4
             THEN RAISE EXCEPTION 'the store''s connections are not named'; END IF; END $$;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}'"
        ),
    );
    // Let each connection task see its socket close.
    std::thread::sleep(Duration::from_millis(300));
    writer.append(&run, call_fact(3, 2, json!({}))).unwrap();
    assert_eq!(reader.read_history(&run).unwrap().facts.len(), 3);
    let mut tail = reader.subscribe(&run, 3).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // After the listener's reconnection delay.
            std::thread::sleep(Duration::from_secs(2));
            writer.append(&run, call_fact(4, 3, json!({}))).unwrap();
        });
        match tail.next_event(Duration::from_secs(30)).unwrap() {
            TailEvent::Fact(f) => assert_eq!(f.n, 4),
            other => panic!("the tail did not recover: {other:?}"),
        }
    });
}
