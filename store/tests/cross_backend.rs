//! Archives move between backends (issue 12 §1): a run exported from a
//! SQLite store imports into a Postgres store and reads back identical —
//! the same stored facts, hashes, blobs, host records and state — and the
//! other way round.

#![cfg(feature = "postgres")]

mod pg;

use flow_store::conformance::{
    call_fact, checkpoint_fact, end_fact, new_run_id, reply_fact, start_fact,
};
use flow_store::{
    Backend, HostDetails, HostRecord, HostRecordKind, ImportOutcome, RunId, SqliteOptions,
    SqliteStore, export_run, import_run,
};
use serde_json::json;
use std::path::Path;

/// A run with value blobs, checkpoint deltas, host records and an End.
fn make_run<B: Backend>(s: &B) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "x".repeat(3000)}));
    s.create_run(start.clone(), &sources, Vec::new()).unwrap();
    let mut msgs = Vec::new();
    let mut n = 1;
    for k in 1..=6u64 {
        s.append(&run, call_fact(n + 1, k, json!({"k": k})))
            .unwrap();
        s.append(
            &run,
            reply_fact(
                n + 2,
                k,
                json!({"text": format!("{k}{}", "r".repeat(1500))}),
            ),
        )
        .unwrap();
        msgs.push(json!(format!("{k}{}", "m".repeat(1200))));
        s.append(
            &run,
            checkpoint_fact(n + 3, json!({"messages": msgs, "k": k})),
        )
        .unwrap();
        n += 3;
    }
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(7),
            details: HostDetails::Other {
                kind: HostRecordKind::Approval,
                details: json!({"by": "me"}),
            },
        },
    )
    .unwrap();
    s.append(&run, end_fact(n + 1, json!({"ok": true})))
        .unwrap();
    run
}

/// Exports from `a`, imports into `b`, and compares everything.
fn round_trip<A: Backend, B: Backend>(a: &A, b: &B, dir: &Path) {
    let run = make_run(a);
    let dir = dir.join(run.as_str());
    export_run(a, &run, &dir).unwrap();
    assert!(matches!(
        import_run(b, &dir).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    assert!(matches!(
        import_run(b, &dir).unwrap(),
        ImportOutcome::AlreadyPresent { .. }
    ));
    let ha = a.read_history(&run).unwrap().facts;
    let hb = b.read_history(&run).unwrap().facts;
    assert_eq!(ha, hb, "stored facts and hashes");
    for (fa, fb) in ha.iter().zip(&hb) {
        assert_eq!(
            a.expand_fact(&run, fa).unwrap(),
            b.expand_fact(&run, fb).unwrap()
        );
        if fa.kind() == flow_store::FactKind::Checkpoint {
            assert_eq!(
                a.checkpoint_state(&run, fa.n).unwrap(),
                b.checkpoint_state(&run, fb.n).unwrap()
            );
        }
    }
    let (ia, ib) = (a.run_info(&run).unwrap(), b.run_info(&run).unwrap());
    assert_eq!(
        (ia.state, ia.ending, ia.last_fact, ia.entry, ia.program),
        (ib.state, ib.ending, ib.last_fact, ib.entry, ib.program)
    );
    assert_eq!(a.host_records(&run).unwrap(), b.host_records(&run).unwrap());
    // And back: b's export is byte for byte a's.
    let again = dir.with_extension("again");
    export_run(b, &run, &again).unwrap();
    for file in ["history.jsonl", "host.jsonl"] {
        assert_eq!(
            std::fs::read(dir.join(file)).unwrap(),
            std::fs::read(again.join(file)).unwrap(),
            "{file}"
        );
    }
}

#[test]
fn a_sqlite_archive_imports_into_postgres_and_back() {
    let Some(db) = pg::TestDb::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let lite = SqliteStore::open(tmp.path().join("a.db"), SqliteOptions::default()).unwrap();
    let pg = db.store();
    round_trip(&lite, &pg, &tmp.path().join("to-pg"));
    round_trip(&pg, &lite, &tmp.path().join("to-sqlite"));
}
