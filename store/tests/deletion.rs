//! Deleting runs (issue 40 item 1, docs/custody.md) on both backends:
//! random interleavings of append, fork, import and delete never remove a
//! blob a kept run references, and leave no blob that none does; a
//! deletion racing another writer's appends of the same blob keeps it;
//! migration 0012 back-fills the references of stored runs.

mod pg;

use flow_store::conformance::{
    blob_refs_in, end_fact, fork_start, new_run_id, reply_fact, start_fact,
};
use flow_store::{
    Backend, DeleteRuns, Deletion, ListRuns, ReadHistory, RunId, SqliteOptions, SqliteStore,
    Synchronous, export_run, import_run,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;

/// Values over 1 KiB (blobs), one with a nested blob.
fn value(i: usize) -> Value {
    let c = ["a", "b", "c", "d"][i % 4];
    match i % 4 {
        0 => json!({"doc": c.repeat(2000), "inner": {"x": "n".repeat(1500)}}),
        _ => json!({"doc": c.repeat(1500 + 100 * i)}),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(usize),
    Append(usize, usize),
    Fork(usize, usize),
    End(usize),
    Delete(usize),
    Reimport(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize).prop_map(Op::Create),
        (0..8usize, 0..4usize).prop_map(|(r, v)| Op::Append(r, v)),
        (0..8usize, 0..4usize).prop_map(|(r, v)| Op::Fork(r, v)),
        (0..8usize).prop_map(Op::End),
        (0..8usize).prop_map(Op::Delete),
        (0..8usize).prop_map(Op::Reimport),
    ]
}

struct Model {
    run: RunId,
    n: u64,
    ended: bool,
    alive: bool,
    archive: Option<std::path::PathBuf>,
}

/// Every blob a run's stored facts reach: their references, the blobs
/// nested in those, and the Start's sources.
fn reachable<B: Backend>(s: &B, run: &RunId, out: &mut BTreeSet<String>) {
    let mut todo = Vec::new();
    for f in s.read_history(run).expect("a kept run verifies").facts {
        blob_refs_in(&f.stored_json(), &mut todo);
        if let flow_store::Fact::Start { sources, .. } = &f.fact {
            out.extend(sources.iter().map(|m| m.hash.clone()));
        }
    }
    while let Some(h) = todo.pop() {
        if out.insert(h.clone()) {
            let body = s.blob(&h).expect("a kept run's blob is there");
            let v: Value = serde_json::from_slice(&body).unwrap();
            blob_refs_in(&v, &mut todo);
        }
    }
}

/// Runs `ops`; after each, every kept run verifies and reads back whole;
/// at the end the store holds exactly the blobs the kept runs reach.
fn play<B: Backend>(s: &B, scratch: &Path, ops: &[Op], blob_count: &dyn Fn() -> u64) {
    let mut runs: Vec<Model> = Vec::new();
    for op in ops {
        let pick = |i: usize| (!runs.is_empty()).then(|| i % runs.len());
        match *op {
            Op::Create(v) => {
                let run = new_run_id();
                let (start, src) = start_fact(&run, value(v));
                s.create_run(start, &src, Vec::new()).unwrap();
                runs.push(Model {
                    run,
                    n: 1,
                    ended: false,
                    alive: true,
                    archive: None,
                });
            }
            Op::Append(r, v) => {
                if let Some(i) = pick(r).filter(|&i| runs[i].alive && !runs[i].ended) {
                    let m = &mut runs[i];
                    s.append(&m.run, reply_fact(m.n + 1, m.n, value(v)))
                        .unwrap();
                    m.n += 1;
                }
            }
            Op::Fork(r, v) => {
                if let Some(i) = pick(r).filter(|&i| runs[i].alive) {
                    let mut input = value(v);
                    input["parent_doc"] = value(r % 4);
                    let (run, start, src) = fork_start(&runs[i].run, 1, input);
                    s.create_run(start, &src, Vec::new()).unwrap();
                    runs.push(Model {
                        run,
                        n: 1,
                        ended: false,
                        alive: true,
                        archive: None,
                    });
                }
            }
            Op::End(r) => {
                if let Some(i) = pick(r).filter(|&i| runs[i].alive && !runs[i].ended) {
                    let m = &mut runs[i];
                    s.append(&m.run, end_fact(m.n + 1, json!("done"))).unwrap();
                    m.n += 1;
                    m.ended = true;
                }
            }
            Op::Delete(r) => {
                if let Some(i) = pick(r).filter(|&i| runs[i].alive) {
                    let m = &mut runs[i];
                    let dir = scratch.join(format!("{}-{}", m.run, m.n));
                    export_run(s, &m.run, &dir).unwrap();
                    m.archive = Some(dir);
                    let how = Deletion {
                        who: "proptest".into(),
                        force: true,
                    };
                    // One at a time, or as the sweeper does, in a batch.
                    if r % 2 == 0 {
                        s.delete_run(&m.run, &how).unwrap();
                    } else {
                        let out = s.delete_runs(std::slice::from_ref(&m.run), &how);
                        assert!(matches!(out.as_slice(), [Ok(_)]), "{out:?}");
                    }
                    m.alive = false;
                }
            }
            Op::Reimport(r) => {
                if let Some(i) = pick(r).filter(|&i| !runs[i].alive) {
                    let m = &mut runs[i];
                    import_run(s, m.archive.as_ref().unwrap()).unwrap();
                    m.alive = true;
                }
            }
        }
        for m in runs.iter().filter(|m| m.alive) {
            s.logical_history(&m.run)
                .expect("a kept run reads back whole");
        }
    }
    let mut kept = BTreeSet::new();
    for m in runs.iter().filter(|m| m.alive) {
        reachable(s, &m.run, &mut kept);
    }
    assert_eq!(
        blob_count(),
        kept.len() as u64,
        "the store holds exactly the blobs its kept runs reach"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// REQ issue 40 "Must hold": no blob referenced by a kept run is ever
    /// removed (SQLite).
    #[test]
    fn sqlite_deletions_keep_every_blob_a_kept_run_references(ops in prop::collection::vec(op(), 1..40)) {
        let tmp = tempfile::tempdir().unwrap();
        let opts = SqliteOptions { synchronous: Synchronous::Normal, ..SqliteOptions::default() };
        let s = SqliteStore::open(tmp.path().join("flow.db"), opts).unwrap();
        play(&s, tmp.path(), &ops, &|| s.blob_count().unwrap());
    }

    /// The same on Postgres.
    #[test]
    fn postgres_deletions_keep_every_blob_a_kept_run_references(ops in prop::collection::vec(op(), 1..30)) {
        let Some(db) = pg::TestDb::new() else { return Ok(()) };
        let tmp = tempfile::tempdir().unwrap();
        let s = db.store();
        play(&s, tmp.path(), &ops, &|| s.blob_count().unwrap());
    }
}

/// A deletion racing appends of the same blob by another writer: `keeper`
/// appends the shared value over and over while runs that reference it are
/// created and deleted beside it; the keeper verifies and reads it at the end.
fn race<A: Backend + Sync, D: Backend + Sync>(writer: &A, deleter: &D) {
    let shared = json!({"doc": "z".repeat(5000)});
    let keeper = new_run_id();
    let (start, src) = start_fact(&keeper, json!({"q": 0}));
    writer.create_run(start, &src, Vec::new()).unwrap();
    std::thread::scope(|t| {
        t.spawn(|| {
            for n in 2..=120u64 {
                writer
                    .append(&keeper, reply_fact(n, n, shared.clone()))
                    .unwrap();
            }
        });
        t.spawn(|| {
            for i in 0..40 {
                let run = new_run_id();
                let (start, src) = start_fact(&run, shared.clone());
                deleter.create_run(start, &src, Vec::new()).unwrap();
                deleter.append(&run, end_fact(2, shared.clone())).unwrap();
                if i % 2 == 0 {
                    deleter.delete_run(&run, &Deletion::by("race")).unwrap();
                } else {
                    let out = deleter.delete_runs(&[run], &Deletion::by("race"));
                    assert!(matches!(out.as_slice(), [Ok(_)]), "{out:?}");
                }
            }
        });
    });
    let facts = writer.logical_history(&keeper).unwrap();
    assert_eq!(facts.len(), 120);
    deleter.read_history(&keeper).unwrap();
}

#[test]
fn sqlite_a_deletion_racing_appends_of_its_blob_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(tmp.path().join("flow.db"), SqliteOptions::default()).unwrap();
    race(&s, &s);
}

/// Two stores on one schema: two servers' writers and deletions.
#[test]
fn postgres_a_deletion_racing_another_servers_appends_keeps_the_blob() {
    let Some(db) = pg::TestDb::new() else { return };
    let opts = db.options();
    let a = flow_store::PostgresStore::open(opts.clone()).unwrap();
    let b = flow_store::PostgresStore::open(opts).unwrap();
    race(&a, &b);
}

/// Migration 0012 back-fills the references of runs stored before it: the
/// same rows the writer makes.
#[test]
fn sqlite_migration_backfills_the_references_of_stored_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("flow.db");
    let refs = |c: &rusqlite::Connection| -> Vec<(i64, Vec<u8>)> {
        c.prepare("SELECT run_key, hash FROM blob_refs ORDER BY run_key, hash")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    {
        let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let tmp2 = tempfile::tempdir().unwrap();
        play(
            &s,
            tmp2.path(),
            &[
                Op::Create(0),
                Op::Append(0, 1),
                Op::Fork(0, 2),
                Op::Append(1, 0),
                Op::Create(3),
            ],
            &|| s.blob_count().unwrap(),
        );
    }
    let c = rusqlite::Connection::open(&path).unwrap();
    let written = refs(&c);
    assert!(written.len() >= 8, "{written:?}");
    c.execute_batch(
        "DROP TABLE blob_refs; DROP TABLE deletions; DELETE FROM schema_migrations WHERE version = 12;",
    )
    .unwrap();
    drop(c);
    drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(refs(&c), written);
}

/// Migration 0012 on Postgres: after the back-fill, deleting the runs one
/// by one keeps every other run whole and leaves no blob at the end.
#[test]
fn postgres_migration_backfills_the_references_of_stored_runs() {
    let Some(db) = pg::TestDb::new() else { return };
    let opts = db.options();
    let runs: Vec<RunId> = {
        let s = flow_store::PostgresStore::open(opts.clone()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        play(
            &s,
            tmp.path(),
            &[
                Op::Create(0),
                Op::Append(0, 1),
                Op::Fork(0, 2),
                Op::Append(1, 0),
                Op::Create(3),
            ],
            &|| s.blob_count().unwrap(),
        );
        let q = flow_store::RunListQuery::default();
        s.list_runs(&q)
            .unwrap()
            .runs
            .into_iter()
            .map(|r| RunId::parse(&r.row.run).unwrap())
            .collect()
    };
    assert_eq!(runs.len(), 3);
    db.sql(
        &opts.schema,
        "DROP TABLE blob_refs; DROP TABLE deletions; DELETE FROM schema_migrations WHERE version = 12;",
    );
    let s = flow_store::PostgresStore::open(opts).unwrap();
    for (i, run) in runs.iter().enumerate() {
        let how = Deletion {
            who: "test".into(),
            force: true,
        };
        s.delete_run(run, &how).unwrap();
        for kept in &runs[i + 1..] {
            s.logical_history(kept)
                .expect("a kept run reads back whole");
        }
    }
    assert_eq!(s.blob_count().unwrap(), 0);
}
