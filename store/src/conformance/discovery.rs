//! Conformance cases: Discovery and host records.

use super::*;

/// REQUIREMENTS DISC-4, DISC-5, DISC-7..DISC-12: cursor, limit, fields.
pub(super) fn discovery_cursor_and_limit<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let mut ids = Vec::new();
    for i in 0..7 {
        let (run, n) = seed_run(&s, 1).map_err(e)?;
        if i % 2 == 0 {
            s.append(&run, end_fact(n + 1, json!(i))).map_err(e)?;
        }
        ids.push(run.to_string());
    }
    ids.sort();
    for bad in [Some(0u32), Some(201)] {
        ensure!(
            matches!(
                s.discover(&DiscoveryQuery {
                    limit: bad,
                    ..Default::default()
                }),
                Err(Error::InvalidArgument(_))
            ),
            "limit {bad:?} refused"
        );
    }
    ensure!(
        matches!(
            s.discover(&DiscoveryQuery {
                after: Some("latest".into()),
                ..Default::default()
            }),
            Err(Error::InvalidArgument(_))
        ),
        "after must be a run id"
    );
    let all = s.discover(&DiscoveryQuery::default()).map_err(e)?;
    ensure!(
        all.runs.iter().map(|r| r.run.clone()).collect::<Vec<_>>() == ids,
        "default page lists every run by id"
    );
    ensure!(all.next_after.is_none(), "no nextAfter at the end");
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let p = s
            .discover(&DiscoveryQuery {
                limit: Some(3),
                after: after.clone(),
                state: None,
            })
            .map_err(e)?;
        ensure!(p.runs.len() <= 3, "page bigger than limit");
        seen.extend(p.runs.iter().map(|r| r.run.clone()));
        match p.next_after {
            Some(n) => {
                ensure!(
                    Some(&n) == p.runs.last().map(|r| &r.run),
                    "nextAfter is the last examined id"
                );
                after = Some(n);
            }
            None => break,
        }
    }
    ensure!(seen == ids, "cursor pages cover every run once");
    let done = s
        .discover(&DiscoveryQuery {
            state: Some(RunState::Completed),
            ..Default::default()
        })
        .map_err(e)?;
    ensure!(
        done.runs.len() == 4
            && done
                .runs
                .iter()
                .all(|r| r.record == RecordStatus::Complete && r.ending == Some(Ending::Completed)),
        "state filter"
    );
    let row = serde_json::to_value(&all.runs[0]).map_err(e)?;
    let mut keys: Vec<&str> = row
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort();
    ensure!(
        keys == [
            "ending",
            "entry",
            "historyPresent",
            "hostDecision",
            "lastFact",
            "problem",
            "program",
            "record",
            "run",
            "truncated"
        ],
        "row fields {keys:?}"
    );
    Ok(())
}

/// REQUIREMENTS HOST-3, DISC-17: typed host records; a pause or halt is the
/// host decision only while its head is the last fact.
pub(super) fn host_records_and_decisions<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    // Records made with a Start are stored with it, at its head.
    let fresh = new_run_id();
    let (start, sources) = start_fact(&fresh, json!({}));
    let program_dir = HostDetails::ProgramDir {
        program_dir: "/flows".into(),
    };
    let record = HostRecord {
        at_ms: Some(3),
        details: program_dir.clone(),
    };
    let a = s.create_run(start, &sources, vec![record]).map_err(e)?;
    let rows = s.host_records(&fresh).map_err(e)?;
    ensure!(
        rows.len() == 1
            && rows[0].seq == 1
            && rows[0].at_ms == 3
            && rows[0].head.n == 1
            && rows[0].head.hash == a.hash
            && rows[0].details == program_dir,
        "records made with Start {rows:?}"
    );
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(5),
            details: HostDetails::Other {
                kind: HostRecordKind::Binding,
                details: json!({"tool": "demo.json#tool"}),
            },
        },
    )
    .map_err(e)?;
    let p = s
        .record_host(
            &run,
            HostRecord {
                at_ms: None,
                details: HostDetails::Other {
                    kind: HostRecordKind::Pause,
                    details: json!({}),
                },
            },
        )
        .map_err(e)?;
    ensure!(p.head.n == n && p.seq == 2, "pause head {:?}", p.head);
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Paused,
        "paused"
    );
    let row = |s: &B| -> Result<DiscoveryRow, String> {
        s.discover(&DiscoveryQuery::default())
            .map_err(e)?
            .runs
            .into_iter()
            .find(|r| r.run == run.as_str())
            .ok_or_else(|| "row missing".to_string())
    };
    ensure!(
        row(&s)?.host_decision.map(|d| d.kind) == Some(HostRecordKind::Pause),
        "pause is the host decision"
    );
    s.append(&run, call_fact(n + 1, 9, json!({}))).map_err(e)?;
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Running,
        "running again"
    );
    ensure!(
        row(&s)?.host_decision.is_none(),
        "a stale pause is no decision"
    );
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(9),
            details: HostDetails::Other {
                kind: HostRecordKind::Halt,
                details: json!({"why": "interrupt"}),
            },
        },
    )
    .map_err(e)?;
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Halted,
        "halted"
    );
    let recs = s.host_records(&run).map_err(e)?;
    ensure!(
        recs.len() == 3
            && recs[0].kind() == HostRecordKind::Binding
            && recs[0].at_ms == 5
            && recs[2].details.to_json() == json!({"why": "interrupt"}),
        "records"
    );
    ensure!(
        matches!(
            s.record_host(
                &new_run_id(),
                HostRecord::now(HostDetails::Other {
                    kind: HostRecordKind::Retry,
                    details: json!(1)
                })
            ),
            Err(Error::UnknownRun(_))
        ),
        "unknown run"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts.len() as u64 == n + 1,
        "host records are not facts"
    );
    Ok(())
}

/// A run's children by the index (issue 36): forks name their parent, a
/// nested run its outer run; in id order, at most the limit, `truncated`
/// past it; a run with none, or one nobody names, has none.
pub(super) fn children_by_index<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (parent, _) = seed_run(&s, 1).map_err(e)?;
    let (other, _) = seed_run(&s, 1).map_err(e)?;
    let mut want = Vec::new();
    for i in 0..4u64 {
        let run = new_run_id();
        let (mut start, sources) = start_fact(&run, json!({"i": i}));
        let link = if let Fact::Start {
            parent: p, outer, ..
        } = &mut start
        {
            if i % 2 == 0 {
                *p = Some(flow_abi::fact::Parent {
                    run: parent.clone(),
                    checkpoint: 4,
                });
                ChildLink::Fork { checkpoint: 4 }
            } else {
                *outer = Some(flow_abi::fact::Outer {
                    run: parent.clone(),
                    call: root_call(i),
                });
                ChildLink::Nested {
                    call: root_call(i).to_string(),
                }
            }
        } else {
            return Err("start_fact gives a Start".into());
        };
        s.create_run(start, &sources, Vec::new()).map_err(e)?;
        want.push(ChildRun {
            run: run.to_string(),
            link,
            namespace: Namespace::default(),
        });
    }
    want.sort_by(|a, b| a.run.cmp(&b.run));
    let all = s.children(&parent, 10).map_err(e)?;
    ensure!(
        all == ChildPage {
            children: want.clone(),
            truncated: false
        },
        "children of the parent: {all:?}, want {want:?}"
    );
    let first = s.children(&parent, 3).map_err(e)?;
    ensure!(
        first.children == want[..3] && first.truncated,
        "three children and truncated: {first:?}"
    );
    for (run, what) in [
        (&other, "a run without children"),
        (&new_run_id(), "no run"),
    ] {
        let none = s.children(run, 10).map_err(e)?;
        ensure!(none == ChildPage::default(), "{what}: {none:?}");
    }
    Ok(())
}

/// Host records given with a step's facts commit with them, after them:
/// each record's head is the step's last fact, and a timing record
/// changes no run state (issue 38 §3).
pub(super) fn host_records_ride_with_facts<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    let timing = HostDetails::Timing(CallTiming {
        call: root_call(9),
        route: Some("process".into()),
        worker: None,
        attempt: Some(1),
        sent_ms: Some(10),
        replied_ms: Some(20),
        via: None,
        by: None,
    });
    let stderr = HostDetails::Stderr {
        call: Some(root_call(9)),
        tool: "crash".into(),
        text: "Traceback (most recent call last):\n".into(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    s.append_all_with_then(
        &run,
        vec![call_fact(n + 1, 9, json!({})).into()],
        vec![
            HostRecord {
                at_ms: Some(21),
                details: timing.clone(),
            },
            HostRecord::now(stderr.clone()),
        ],
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let a = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(e)?
        .map_err(e)?;
    ensure!(a.len() == 1 && a[0].n == n + 1, "appended {a:?}");
    let rows = s.host_records(&run).map_err(e)?;
    let got: Vec<_> = rows.iter().map(|r| &r.details).collect();
    ensure!(got == vec![&timing, &stderr], "records {rows:?}");
    ensure!(
        rows.iter()
            .all(|r| r.head.n == a[0].n && r.head.hash == a[0].hash),
        "each record's head is the step's last fact: {rows:?}"
    );
    ensure!(rows[0].at_ms == 21, "the caller's clock is kept");
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Running,
        "a timing record changes no state"
    );
    Ok(())
}
