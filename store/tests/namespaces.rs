//! Namespaces in the store (issue 40 item 4, migration 0019) on a real
//! SQLite file and the real Postgres: the conformance case `namespaces`
//! on both (a run's namespace, inheritance by forks and nested runs,
//! confined listings, pages, counts and waiting calls, imports into a
//! namespace), and a store written before the migration, whose every run
//! comes back in `default`.

#[cfg(feature = "postgres")]
mod pg;
mod undo;

use flow_store::conformance::{cases, seed_run};
use flow_store::{Backend, Namespace, Namespaces, RunListQuery, SqliteOptions, SqliteStore};
use undo::*;

/// Runs the conformance case `namespaces` on stores from `factory`.
fn case<B: Backend + Sync>(factory: &mut dyn FnMut() -> B, scratch: &std::path::Path) {
    let (_, run) = cases::<B>()
        .into_iter()
        .find(|(name, _)| *name == "namespaces")
        .expect("the namespaces case");
    if let Err(msg) = run(factory, scratch) {
        panic!("namespaces: {msg}");
    }
}

#[test]
fn sqlite_keeps_namespaces_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let mut i = 0;
    case(
        &mut || {
            i += 1;
            SqliteStore::open(root.join(format!("s{i}.db")), SqliteOptions::default()).unwrap()
        },
        &tmp.path().join("scratch"),
    );
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_keeps_namespaces_apart() {
    let Some(db) = pg::TestDb::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    case(
        &mut || flow_store::PostgresStore::open(db.options()).unwrap(),
        tmp.path(),
    );
}

/// The runs of a store written before migration 19 are in `default`, and
/// counted there, once it is applied.
#[test]
fn runs_stored_before_namespaces_are_in_default() {
    let confined = |name: &str| RunListQuery {
        namespaces: Namespaces::only([Namespace::parse(name).unwrap()]),
        ..RunListQuery::default()
    };
    let check = |s: &dyn Backend, runs: &[flow_store::RunId]| {
        for r in runs {
            assert_eq!(s.run_info(r).unwrap().namespace.as_str(), "default");
        }
        assert_eq!(s.count_runs(&confined("default")).unwrap().total, 3);
        assert_eq!(s.list_runs(&confined("default")).unwrap().runs.len(), 3);
        assert_eq!(s.count_runs(&confined("other")).unwrap().total, 0);
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let runs: Vec<_> = (0..3).map(|_| seed_run(&s, 1).unwrap().0).collect();
    drop(s);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(UNDO_15_SQLITE)
        .unwrap();
    check(
        &SqliteStore::open(&path, SqliteOptions::default()).unwrap(),
        &runs,
    );
    #[cfg(feature = "postgres")]
    if let Some(db) = pg::TestDb::new() {
        let options = db.options();
        let s = flow_store::PostgresStore::open(options.clone()).unwrap();
        let runs: Vec<_> = (0..3).map(|_| seed_run(&s, 1).unwrap().0).collect();
        drop(s);
        db.sql(&options.schema, UNDO_15_POSTGRES);
        check(&flow_store::PostgresStore::open(options).unwrap(), &runs);
    }
}
