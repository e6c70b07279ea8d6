//! The backend-independent suite, run against SQLite.

use flow_store::{SqliteOptions, SqliteStore, Synchronous, conformance};

#[test]
fn sqlite_passes_the_conformance_suite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut i = 0;
    let root = tmp.path().to_path_buf();
    let mut factory = || {
        i += 1;
        SqliteStore::open(root.join(format!("store-{i}.db")), SqliteOptions::default()).unwrap()
    };
    let failures = conformance::run_suite(&mut factory, &tmp.path().join("scratch"));
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn sqlite_normal_passes_the_conformance_suite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut i = 0;
    let root = tmp.path().to_path_buf();
    let mut factory = || {
        i += 1;
        let opts = SqliteOptions {
            synchronous: Synchronous::Normal,
            ..SqliteOptions::default()
        };
        SqliteStore::open(root.join(format!("store-{i}.db")), opts).unwrap()
    };
    let failures = conformance::run_suite(&mut factory, &tmp.path().join("scratch"));
    assert!(failures.is_empty(), "{failures:#?}");
}
