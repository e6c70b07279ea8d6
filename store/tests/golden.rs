//! The stored format must not move (STYLE rule 6, issue 10): archives made by
//! the code of session 1 — every fact kind (Start, Call, Reply, Close,
//! Checkpoint, End), delta checkpoints, value blobs (a 2,002-byte input
//! field) and a fork's Start naming its parent — import, verify, read back
//! and export again byte for byte.
//!
//! `golden/golden.json` is the flow they were made with (two branches race
//! under `wait_for: any`, so the loser's call is closed), by
//! `flow run golden.json --allow` then `flow fork RUN --checkpoint 11 --set
//! 'topic="waves"'` and `flow export`. Never regenerate them: a failure here
//! means stored bytes changed. Both backends are held to it.

#[cfg(feature = "postgres")]
mod pg;

use flow_store::{
    Backend, ImportOutcome, RunId, SqliteOptions, SqliteStore, export_run, import_run,
};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/archives")
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn archives() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(golden())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    assert_eq!(v.len(), 2, "the parent run and its fork");
    v
}

/// Imports every golden archive into `store`, reads it verified and
/// exports it again into `out`: the same files, byte for byte.
fn round_trip<B: Backend>(store: &B, out: &Path) {
    for dir in archives() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let run = RunId::parse(&name).unwrap();
        match import_run(store, &dir).unwrap() {
            ImportOutcome::Imported { run: r, .. } => assert_eq!(r, run),
            other => panic!("{name}: {other:?}"),
        }
        // Verified read: chain and every blob.
        let history = store.read_history(&run).unwrap();
        assert!(!history.facts.is_empty());
        let out = out.join(&name);
        export_run(store, &run, &out).unwrap();
        let (want, got) = (files(&dir), files(&out));
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>(),
            "{name}: the same files"
        );
        for (path, bytes) in &want {
            assert!(got[path] == *bytes, "{name}/{path} differs after re-export");
        }
        // Idempotent: the same archive again changes nothing.
        assert!(matches!(
            import_run(store, &dir).unwrap(),
            ImportOutcome::AlreadyPresent { .. }
        ));
    }
}

#[test]
fn golden_archives_round_trip_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(tmp.path().join("s.db"), SqliteOptions::default()).unwrap();
    round_trip(&store, &tmp.path().join("out"));
}

#[cfg(feature = "postgres")]
#[test]
fn golden_archives_round_trip_byte_for_byte_on_postgres() {
    let Some(db) = pg::TestDb::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    round_trip(&db.store(), &tmp.path().join("out"));
}

/// What the golden archives hold, so a regenerated (moved) archive that
/// lost a feature fails loudly.
#[test]
fn golden_archives_cover_every_fact_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    let (mut delta, mut blob, mut fork) = (false, false, false);
    for dir in archives() {
        let text = fs::read_to_string(dir.join("history.jsonl")).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let f = &v["fact"];
            kinds.insert(f["fact"].as_str().unwrap().to_string());
            delta |= f.get("delta").is_some();
            blob |= line.contains("\"$blob\"");
            fork |= f.get("parent").is_some();
        }
    }
    let all = ["Call", "Checkpoint", "Close", "End", "Reply", "Start"];
    assert_eq!(kinds.iter().map(String::as_str).collect::<Vec<_>>(), all);
    assert!(
        delta && blob && fork,
        "delta {delta}, blob {blob}, fork {fork}"
    );
}
