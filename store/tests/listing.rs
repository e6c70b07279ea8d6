//! The run listing (newest or oldest first, keyset paging, state and id
//! prefix filters, the index's other columns) and the changes feed, on a
//! real SQLite file and on the real Postgres (issue 13: one behaviour, two
//! backends); discovery is the listing in id order.

#[cfg(feature = "postgres")]
mod pg;

use flow_store::conformance::{checkpoint_fact, end_fact, new_run_id, start_fact};
use flow_store::{
    Backend, DiscoveryQuery, HostDetails, HostRecord, HostRecordKind, RunId, RunListQuery,
    RunOrder, RunState, SqliteOptions, SqliteStore,
};
use serde_json::json;

fn sqlite(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(dir.join("s.db"), SqliteOptions::default()).unwrap()
}

/// Runs `check` with a store maker whose stores share one database (so a
/// second handle is "another process"), on SQLite then on Postgres.
fn on_both(check: impl Fn(&dyn Fn() -> Box<dyn Backend>)) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().to_path_buf();
    check(&move || Box::new(sqlite(&path)) as Box<dyn Backend>);
    #[cfg(feature = "postgres")]
    if let Some(db) = pg::TestDb::new() {
        let options = db.options();
        check(&move || {
            Box::new(flow_store::PostgresStore::open(options.clone()).unwrap()) as Box<dyn Backend>
        });
    }
}

fn create(s: &dyn Backend) -> RunId {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": 1}));
    s.create_run(start.clone(), &sources, Vec::new()).unwrap();
    run
}

fn ids(p: &flow_store::RunListPage) -> Vec<String> {
    p.runs.iter().map(|r| r.row.run.clone()).collect()
}

#[test]
fn newest_first_pages_by_keyset_and_filters() {
    on_both(newest_first);
}

fn newest_first(new: &dyn Fn() -> Box<dyn Backend>) {
    let s = new();
    let s = &*s;
    let runs: Vec<RunId> = (0..5).map(|_| create(s)).collect();
    s.append(&runs[1], end_fact(2, json!(1))).unwrap();
    s.record_host(
        &runs[3],
        HostRecord {
            at_ms: None,
            details: HostDetails::Other {
                kind: HostRecordKind::Pause,
                details: json!({}),
            },
        },
    )
    .unwrap();

    let q = |cursor: Option<String>| RunListQuery {
        limit: Some(2),
        cursor,
        order: RunOrder::Newest,
        ..RunListQuery::default()
    };
    let p1 = s.list_runs(&q(None)).unwrap();
    assert_eq!(ids(&p1), vec![runs[4].to_string(), runs[3].to_string()]);
    assert_eq!(p1.runs[1].state, RunState::Paused);
    assert!(p1.runs[1].row.host_decision.is_some());
    let p2 = s.list_runs(&q(p1.next.clone())).unwrap();
    assert_eq!(ids(&p2), vec![runs[2].to_string(), runs[1].to_string()]);
    assert_eq!(p2.runs[1].state, RunState::Completed);
    let p3 = s.list_runs(&q(p2.next.clone())).unwrap();
    assert_eq!(ids(&p3), vec![runs[0].to_string()]);
    assert_eq!(p3.next, None);

    let paused = s
        .list_runs(&RunListQuery {
            state: Some(RunState::Paused),
            order: RunOrder::Newest,
            ..RunListQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&paused), vec![runs[3].to_string()]);

    let whole = runs[2].to_string();
    let by_prefix = s
        .list_runs(&RunListQuery {
            prefix: Some(whole.clone()),
            ..RunListQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&by_prefix), vec![whole.clone()]);
    let all = s
        .list_runs(&RunListQuery {
            prefix: Some("run-".into()),
            ..RunListQuery::default()
        })
        .unwrap();
    assert_eq!(all.runs.len(), 5);
    assert!(
        all.runs
            .iter()
            .all(|r| r.created_ms > 0 && r.updated_ms >= r.created_ms)
    );
}

#[test]
fn discovery_is_the_listing_in_id_order() {
    on_both(discovery_order);
}

fn discovery_order(new: &dyn Fn() -> Box<dyn Backend>) {
    let s = new();
    let s = &*s;
    for _ in 0..3 {
        create(s);
    }
    let d = s
        .discover(&DiscoveryQuery {
            limit: Some(2),
            ..DiscoveryQuery::default()
        })
        .unwrap();
    let l = s
        .list_runs(&RunListQuery {
            limit: Some(2),
            ..RunListQuery::default()
        })
        .unwrap();
    assert_eq!(
        d.runs,
        l.runs.into_iter().map(|r| r.row).collect::<Vec<_>>()
    );
    assert_eq!(d.next_after, l.next);
}

#[test]
fn bad_listing_arguments_are_refused() {
    on_both(bad_arguments);
}

fn bad_arguments(new: &dyn Fn() -> Box<dyn Backend>) {
    let s = new();
    for prefix in ["", "RUN-", "run-%", &"r".repeat(31)] {
        let e = s
            .list_runs(&RunListQuery {
                prefix: Some(prefix.to_string()),
                ..RunListQuery::default()
            })
            .unwrap_err();
        assert!(
            matches!(e, flow_store::Error::InvalidArgument(_)),
            "{prefix:?}: {e}"
        );
    }
    assert!(
        s.list_runs(&RunListQuery {
            cursor: Some("nope".into()),
            ..RunListQuery::default()
        })
        .is_err()
    );
    assert!(s.runs_changed_since(0, 0).is_err());
    assert!(s.runs_changed_since(0, 10_001).is_err());
}

/// What a live feed polls: rows whose state changed at or after a time
/// (a start, a pause, an end), oldest change first, including writes made
/// through another handle (another process). A fact that leaves the state
/// as it was moves `updated_ms` only (issue 16: a step's commit writes no
/// index page of the runs table).
#[test]
fn changes_since_a_time_include_other_handles_writes() {
    on_both(changes_since);
}

fn changes_since(new: &dyn Fn() -> Box<dyn Backend>) {
    let pause = || std::thread::sleep(std::time::Duration::from_millis(5));
    let s = new();
    let a = create(&*s);
    let b = create(&*s);
    let c = create(&*s);
    let since = s.runs_changed_since(0, 100).unwrap();
    assert_eq!(since.len(), 3);
    assert!(since.iter().all(|i| i.state_ms == i.created_ms));
    let t = since.iter().map(|i| i.state_ms).max().unwrap() + 1;
    pause();
    let other = new();
    other.append(&a, end_fact(2, json!(0))).unwrap();
    other
        .append(&c, checkpoint_fact(2, json!({"i": 1})))
        .unwrap();
    let changed = s.runs_changed_since(t, 100).unwrap();
    assert_eq!(changed.len(), 1, "only a's state changed: {changed:?}");
    assert_eq!(changed[0].run, a);
    assert_eq!(changed[0].state, RunState::Completed);
    assert!(changed[0].state_ms >= t);
    let c_info = s.run_info(&c).unwrap();
    assert!(c_info.updated_ms >= t && c_info.state_ms < t, "{c_info:?}");
    // A pause changes the state; the append that resumes it changes it back.
    let t = changed[0].state_ms + 1;
    pause();
    other
        .record_host(
            &c,
            HostRecord {
                at_ms: None,
                details: HostDetails::Other {
                    kind: HostRecordKind::Pause,
                    details: json!({}),
                },
            },
        )
        .unwrap();
    let paused = s.runs_changed_since(t, 100).unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!((&paused[0].run, paused[0].state), (&c, RunState::Paused));
    let t = paused[0].state_ms + 1;
    pause();
    other
        .append(&c, checkpoint_fact(3, json!({"i": 2})))
        .unwrap();
    let resumed = s.runs_changed_since(t, 100).unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!((&resumed[0].run, resumed[0].state), (&c, RunState::Running));
    assert!(!resumed.iter().any(|i| i.run == b));
    let b_created = since.iter().find(|i| i.run == b).unwrap().state_ms;
    assert_eq!(s.run_info(&b).unwrap().state_ms, b_created);
}
