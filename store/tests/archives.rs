//! Run archives (DESIGN §6): tamper refusal, and inspection of a directory of
//! archives with the seed's bounds (REQUIREMENTS DISC-1..DISC-26).

use flow_store::conformance::{call_fact, end_fact, new_run_id, reply_fact, start_fact};
use flow_store::{
    AppendFacts, Discover, DiscoveryQuery, Error, HostDetails, HostRecord, HostRecordKind,
    HostRecords, ImportOutcome, ImportRuns, ProblemStatus, RecordStatus, RunId, SqliteOptions,
    SqliteStore, TornTail, export_run, import_run, inspect_archives, read_archive,
};
use serde_json::json;
use std::fs;
use std::path::Path;

fn store(dir: &Path, name: &str) -> SqliteStore {
    SqliteStore::open(dir.join(name), SqliteOptions::default()).unwrap()
}

/// A run with a big reply (so it has value blobs), optionally ended.
fn make_run(s: &SqliteStore, end: bool) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": 1}));
    s.create_run(start.clone(), &sources, Vec::new()).unwrap();
    s.append(&run, call_fact(2, 1, json!({"a": 1}))).unwrap();
    s.append(
        &run,
        reply_fact(3, 1, json!({"text": "TAMPER-ME".repeat(300)})),
    )
    .unwrap();
    s.append(&run, call_fact(4, 2, json!({"a": 2}))).unwrap();
    if end {
        s.append(&run, end_fact(5, json!({"ok": true}))).unwrap();
    }
    run
}

fn refused_fact(e: Error) -> Option<u64> {
    match e {
        Error::ArchiveRefused { fact, .. } => fact,
        other => panic!("expected an archive refusal, got {other}"),
    }
}

fn store_is_empty(s: &SqliteStore) -> bool {
    s.discover(&DiscoveryQuery::default())
        .unwrap()
        .runs
        .is_empty()
}

/// Import "verified before anything is written ... refused when tampered":
/// a flipped byte in a blob file.
#[test]
fn tampered_blob_is_refused_naming_the_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let a = store(tmp.path(), "a.db");
    let run = make_run(&a, true);
    let dir = tmp.path().join("out").join(run.as_str());
    export_run(&a, &run, &dir).unwrap();
    for entry in fs::read_dir(dir.join("blobs")).unwrap() {
        let p = entry.unwrap().path();
        let mut b = fs::read(&p).unwrap();
        if let Some(i) = b.windows(9).position(|w| w == b"TAMPER-ME") {
            b[i] ^= 1;
            fs::write(&p, b).unwrap();
        }
    }
    let b = store(tmp.path(), "b.db");
    assert_eq!(refused_fact(import_run(&b, &dir).unwrap_err()), Some(3));
    assert!(store_is_empty(&b));
}

/// A flipped byte in a middle line, and a torn last line.
#[test]
fn tampered_or_truncated_history_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = store(tmp.path(), "a.db");
    let run = make_run(&a, true);
    let dir = tmp.path().join("out").join(run.as_str());
    export_run(&a, &run, &dir).unwrap();
    let hp = dir.join("history.jsonl");
    let original = fs::read_to_string(&hp).unwrap();
    let b = store(tmp.path(), "b.db");

    // Fact 2's args {"a":1} → {"a":3}: valid JSON, broken chain.
    let tampered = original.replacen("{\"a\":1}", "{\"a\":3}", 1);
    assert_ne!(tampered, original);
    fs::write(&hp, &tampered).unwrap();
    assert_eq!(refused_fact(import_run(&b, &dir).unwrap_err()), Some(2));

    // The last line cut mid-way (REQUIREMENTS CRASH-7 / GAP-HIST-9:
    // truncation): the torn fact is left out and the four before it
    // imported (into a store of their own), the archive saying so.
    let cut = &original[..original.len() - 10];
    fs::write(&hp, cut).unwrap();
    let archive = read_archive(&dir).unwrap();
    assert_eq!(
        archive.torn(),
        Some(&TornTail {
            fact: 5,
            reason: "the last line has no newline".into()
        })
    );
    let c = store(tmp.path(), "c.db");
    assert!(matches!(
        c.import_verified(archive).unwrap(),
        ImportOutcome::Imported { facts: 4, .. }
    ));
    // The whole last line replaced by one that breaks the chain: torn too.
    let last = original.lines().last().unwrap();
    fs::write(
        &hp,
        original.replacen(last, &last.replacen("true", "false", 1), 1),
    )
    .unwrap();
    assert_eq!(read_archive(&dir).unwrap().torn().map(|t| t.fact), Some(5));

    // A run id that differs from the directory name.
    fs::write(&hp, &original).unwrap();
    let other = tmp.path().join("out").join(new_run_id().as_str());
    fs::rename(&dir, &other).unwrap();
    assert_eq!(refused_fact(import_run(&b, &other).unwrap_err()), Some(1));
    assert!(store_is_empty(&b));
    fs::rename(&other, &dir).unwrap();
    assert!(import_run(&b, &dir).is_ok());
}

/// DISC-24: "A missing root is reported without being created." DISC-5:
/// invalid arguments are refused before inspection.
#[test]
fn missing_root_is_reported_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("nope");
    let page = inspect_archives(&root, &DiscoveryQuery::default()).unwrap();
    assert!(page.runs.is_empty());
    assert_eq!(page.problems.len(), 1);
    assert_eq!(page.problems[0].status, ProblemStatus::NotCreated);
    assert!(!root.exists());
    assert!(matches!(
        inspect_archives(
            &root,
            &DiscoveryQuery {
                limit: Some(0),
                ..Default::default()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        inspect_archives(
            &root,
            &DiscoveryQuery {
                after: Some("x".into()),
                ..Default::default()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
}

/// DISC-8..DISC-17: statuses, truncation, run id mismatch, host decision,
/// ordering and cursor.
#[test]
fn inspection_statuses() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path(), "a.db");
    let root = tmp.path().join("runs");
    let complete = make_run(&s, true);
    let incomplete = make_run(&s, false);
    s.record_host(
        &incomplete,
        HostRecord {
            at_ms: Some(7),
            details: HostDetails::Other {
                kind: HostRecordKind::Pause,
                details: json!({}),
            },
        },
    )
    .unwrap();
    let truncated = make_run(&s, false);
    let bad_middle = make_run(&s, true);
    let mismatched_src = make_run(&s, true);
    for r in [
        &complete,
        &incomplete,
        &truncated,
        &bad_middle,
        &mismatched_src,
    ] {
        export_run(&s, r, &root.join(r.as_str())).unwrap();
    }
    // Torn tail: half a line appended.
    let tp = root.join(truncated.as_str()).join("history.jsonl");
    let mut t = fs::read(&tp).unwrap();
    t.extend_from_slice(b"{\"fact\":{\"fact\":\"Call\"");
    fs::write(&tp, t).unwrap();
    // A bad line before the tail.
    let bp = root.join(bad_middle.as_str()).join("history.jsonl");
    let b = fs::read_to_string(&bp)
        .unwrap()
        .replacen("{\"a\":1}", "{\"a\":3}", 1);
    fs::write(&bp, b).unwrap();
    // A directory whose name differs from its Start's run.
    let mismatched = new_run_id();
    fs::rename(
        root.join(mismatched_src.as_str()),
        root.join(mismatched.as_str()),
    )
    .unwrap();
    // Not started: an empty directory, and an empty history.
    let empty_dir = new_run_id();
    fs::create_dir(root.join(empty_dir.as_str())).unwrap();
    let empty_hist = new_run_id();
    fs::create_dir(root.join(empty_hist.as_str())).unwrap();
    fs::write(root.join(empty_hist.as_str()).join("history.jsonl"), b"").unwrap();
    // Ignored: dot entries and names that are not run ids.
    fs::create_dir(root.join(".hidden")).unwrap();
    fs::write(root.join("README"), b"x").unwrap();

    let page = inspect_archives(&root, &DiscoveryQuery::default()).unwrap();
    assert!(page.problems.is_empty(), "{:?}", page.problems);
    let row = |id: &RunId| page.runs.iter().find(|r| r.run == id.as_str()).unwrap();
    assert_eq!(page.runs.len(), 7);
    let mut ids: Vec<_> = page.runs.iter().map(|r| r.run.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        page.runs.iter().map(|r| r.run.clone()).collect::<Vec<_>>(),
        "rows ordered by id"
    );

    let c = row(&complete);
    assert_eq!(
        (c.record, c.truncated, c.history_present),
        (RecordStatus::Complete, false, true)
    );
    assert_eq!(c.ending, Some(flow_store::Ending::Completed));
    assert_eq!(c.last_fact.as_ref().unwrap().n, 5);
    assert_eq!(c.entry.as_ref().unwrap().module, "demo.json");
    assert_eq!(c.program.as_deref(), Some("sha256:00"));
    let i = row(&incomplete);
    assert_eq!(i.record, RecordStatus::Incomplete);
    assert_eq!(
        i.host_decision.as_ref().map(|d| d.kind),
        Some(HostRecordKind::Pause)
    );
    let t = row(&truncated);
    assert_eq!((t.record, t.truncated), (RecordStatus::Incomplete, true));
    assert_eq!(t.last_fact.as_ref().unwrap().n, 4);
    let bm = row(&bad_middle);
    assert_eq!(bm.record, RecordStatus::Unreadable);
    assert_eq!(bm.problem.as_ref().unwrap().component, "history.jsonl");
    assert!(bm.last_fact.is_none());
    assert_eq!(row(&mismatched).record, RecordStatus::Unreadable);
    let e = row(&empty_dir);
    assert_eq!(
        (e.record, e.history_present),
        (RecordStatus::NotStarted, false)
    );
    let eh = row(&empty_hist);
    assert_eq!(
        (eh.record, eh.history_present),
        (RecordStatus::NotStarted, true)
    );

    // Cursor: unreadable and not-started rows consume page slots (DISC-8).
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let p = inspect_archives(
            &root,
            &DiscoveryQuery {
                limit: Some(2),
                after: after.clone(),
                state: None,
            },
        )
        .unwrap();
        assert!(p.runs.len() <= 2);
        seen.extend(p.runs.iter().map(|r| r.run.clone()));
        match p.next_after {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    // Inspection changed nothing.
    assert!(!root.join(".flow").exists());
}

/// DISC-19: "Component payloads are limited to 4 MiB with one additional
/// overflow-probe byte, included in the cumulative 16 MiB page-read ceiling."
#[test]
fn component_and_page_read_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("runs");
    let mib = 1usize << 20;
    // Exactly 4 MiB of bad lines: read whole, so unreadable (not limited).
    let exact = new_run_id();
    // 4 MiB + 1: the probe byte shows the bound.
    let over = new_run_id();
    for (id, len) in [(&exact, 4 * mib), (&over, 4 * mib + 1)] {
        fs::create_dir_all(root.join(id.as_str())).unwrap();
        let mut b = vec![b'x'; len];
        for i in (99..len).step_by(100) {
            b[i] = b'\n';
        }
        fs::write(root.join(id.as_str()).join("history.jsonl"), b).unwrap();
    }
    let page = inspect_archives(&root, &DiscoveryQuery::default()).unwrap();
    let row = |id: &RunId| {
        page.runs
            .iter()
            .find(|r| r.run == id.as_str())
            .unwrap()
            .clone()
    };
    assert_eq!(row(&exact).record, RecordStatus::Unreadable);
    let o = row(&over);
    assert_eq!(o.record, RecordStatus::InspectionLimited);
    assert_eq!(o.problem.unwrap().status, ProblemStatus::InspectionLimited);

    // The 16 MiB ceiling: five 3.5 MiB histories; the fifth cannot be read.
    let root2 = tmp.path().join("runs2");
    let mut ids: Vec<RunId> = (0..5).map(|_| new_run_id()).collect();
    ids.sort();
    for id in &ids {
        fs::create_dir_all(root2.join(id.as_str())).unwrap();
        let mut b = vec![b'y'; 7 * mib / 2];
        for i in (99..b.len()).step_by(100) {
            b[i] = b'\n';
        }
        fs::write(root2.join(id.as_str()).join("history.jsonl"), b).unwrap();
    }
    let page = inspect_archives(&root2, &DiscoveryQuery::default()).unwrap();
    let records: Vec<_> = page.runs.iter().map(|r| r.record).collect();
    assert_eq!(
        records,
        [
            RecordStatus::Unreadable,
            RecordStatus::Unreadable,
            RecordStatus::Unreadable,
            RecordStatus::Unreadable,
            RecordStatus::InspectionLimited
        ]
    );
}

/// DISC-21: "Directory scanning examines at most 10,000 non-dot entries
/// before interpreting their names."
#[test]
fn at_most_10000_entries_are_examined() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("runs");
    fs::create_dir(&root).unwrap();
    for i in 0..10_000 {
        fs::write(root.join(format!("entry-{i:05}")), b"").unwrap();
    }
    fs::write(root.join(".dot"), b"").unwrap();
    let page = inspect_archives(&root, &DiscoveryQuery::default()).unwrap();
    assert!(
        page.problems.is_empty(),
        "10,000 entries are within the bound"
    );
    fs::write(root.join("one-more"), b"").unwrap();
    let page = inspect_archives(&root, &DiscoveryQuery::default()).unwrap();
    assert_eq!(page.problems.len(), 1);
    assert_eq!(page.problems[0].component, "root");
    assert_eq!(page.problems[0].status, ProblemStatus::InspectionLimited);
}
