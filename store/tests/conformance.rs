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

/// Encryption at rest (docs/custody.md): the whole suite again with every
/// value column sealed — each case reads back exactly what a plaintext
/// store gives.
#[test]
fn sqlite_sealed_passes_the_conformance_suite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut i = 0;
    let root = tmp.path().to_path_buf();
    let keys = std::sync::Arc::new(flow_store::Keyring::generate("test keys").unwrap());
    let mut factory = || {
        i += 1;
        let opts = SqliteOptions {
            keys: Some(keys.clone()),
            ..SqliteOptions::default()
        };
        let s = SqliteStore::open(root.join(format!("store-{i}.db")), opts).unwrap();
        assert!(s.is_sealed());
        s
    };
    let failures = conformance::run_suite(&mut factory, &tmp.path().join("scratch"));
    assert!(failures.is_empty(), "{failures:#?}");
}
