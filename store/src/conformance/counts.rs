//! Conformance case: the maintained run counters (migration 0015, issue 38
//! §1, §5) against a brute-force count of the listed runs, through every
//! way a run is made, changes state or goes.

use super::*;
use std::collections::BTreeMap;

/// Every run, through the run query's pages (the brute-force side).
fn all_runs<B: Backend + ?Sized>(s: &B) -> Result<Vec<ListedRun>, String> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_runs(&RunListQuery {
                limit: Some(200),
                cursor,
                ..RunListQuery::default()
            })
            .map_err(e)?;
        out.extend(page.runs);
        match page.next {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
}

/// What `count_runs` must answer for `states` and `flow`, counted from the
/// rows themselves.
fn reference(rows: &[ListedRun], states: &[RunState], flow: Option<&str>) -> RunCounts {
    let of_flow: Vec<&ListedRun> = rows
        .iter()
        .filter(|r| flow.is_none_or(|f| r.flow_id.as_deref() == Some(f)))
        .collect();
    let chosen = |r: &&&ListedRun| states.is_empty() || states.contains(&r.state);
    let mut by_state = BTreeMap::new();
    for r in &of_flow {
        *by_state.entry(r.state.as_str()).or_insert(0u64) += 1;
    }
    let mut by_flow = BTreeMap::new();
    for r in of_flow.iter().filter(chosen) {
        if let Some(f) = &r.flow_id {
            *by_flow.entry(f.clone()).or_insert(0u64) += 1;
        }
    }
    RunCounts {
        total: of_flow.iter().filter(chosen).count() as u64,
        by_state: by_state
            .into_iter()
            .filter_map(|(s, n)| Some((RunState::parse(s)?, n)))
            .collect(),
        by_flow: by_flow.into_iter().collect(),
    }
}

/// Counters, the scan (a filter the counters do not answer, selecting
/// every run) and the reference agree for every state and flow filter.
fn agree<B: Backend + ?Sized>(s: &B, step: &str) -> Result<(), String> {
    let rows = all_runs(s)?;
    // (A flow filter cannot be empty; the run of the flow whose id is "" is
    // checked in `by_flow`, apart from the run with no id.)
    let flows = [None, Some("demo"), Some("other"), Some("absent")];
    let states: [&[RunState]; 4] = [
        &[],
        &[RunState::Running],
        &[RunState::Paused, RunState::Faulted],
        &[RunState::Completed, RunState::Halted],
    ];
    for st in states {
        for flow in flows {
            let q = RunListQuery {
                states: st.to_vec(),
                flow: flow.map(str::to_string),
                ..RunListQuery::default()
            };
            let want = reference(&rows, st, flow);
            let counted = s.count_runs(&q).map_err(e)?;
            ensure!(
                counted == want,
                "{step}: counters for states {st:?} flow {flow:?}: {counted:?}, brute force {want:?}"
            );
            let scanned = s
                .count_runs(&RunListQuery {
                    started: TimeRange {
                        from: Some(0),
                        to: None,
                    },
                    ..q
                })
                .map_err(e)?;
            ensure!(
                scanned == want,
                "{step}: the scan for states {st:?} flow {flow:?}: {scanned:?}, brute force {want:?}"
            );
        }
    }
    Ok(())
}

fn create<B: Backend + ?Sized>(s: &B, doc: &str) -> Result<RunId, String> {
    let run = new_run_id();
    let (start, sources) = start_with_source(&run, "f.json", "main", doc.into(), json!({}));
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    Ok(run)
}

fn host(kind: HostRecordKind) -> HostRecord {
    HostRecord {
        at_ms: None,
        details: HostDetails::Other {
            kind,
            details: json!({}),
        },
    }
}

/// REQ issue 38 §1, §5: counts by state and flow from the counters equal
/// a count of the runs after creates, state changes, a fork, an import
/// and deletions, for runs of a named flow, of a flow whose id is empty
/// and of a root source with no id.
pub(super) fn run_counts<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    let s = new();
    agree(&s, "empty")?;
    let other = r#"{"id":"other","nodes":[]}"#;
    let a = create(&s, other)?;
    let b = create(&s, other)?;
    let c = create(&s, r#"{"id":"","nodes":[]}"#)?;
    let d = create(&s, "not a flow document")?;
    let (e1, n) = seed_run(&s, 1)?;
    agree(&s, "created")?;

    s.record_host(&a, host(HostRecordKind::Pause)).map_err(e)?;
    s.append(&b, end_fact(2, json!("ok"))).map_err(e)?;
    s.append(
        &c,
        Fact::End {
            n: 2,
            ending: FactEnding::Faulted("boom".into()),
        },
    )
    .map_err(e)?;
    s.record_host(&d, host(HostRecordKind::Halt)).map_err(e)?;
    agree(&s, "paused, completed, faulted, halted")?;
    // A paused run going on is running again.
    s.append(&a, call_fact(2, 1, json!({}))).map_err(e)?;
    agree(&s, "resumed")?;

    let (f, start, sources) = fork_start(&e1, n, json!({"fork": 1}));
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    s.append(&f, end_fact(2, json!("forked"))).map_err(e)?;
    agree(&s, "forked")?;

    let dir = scratch.join(b.as_str());
    export_run(&s, &b, &dir).map_err(e)?;
    s.delete_run(&b, &Deletion::by("tester")).map_err(e)?;
    agree(&s, "deleted")?;
    import_run(&s, &dir).map_err(e)?;
    agree(&s, "imported")?;

    s.append(&e1, end_fact(n + 1, json!("done"))).map_err(e)?;
    let out = s.delete_runs(&[b, c, e1], &Deletion::by("tester"));
    ensure!(
        out.iter().all(Result::is_ok),
        "the ended runs are deleted together: {out:?}"
    );
    agree(&s, "deleted together")?;
    let forced = Deletion {
        who: "tester".into(),
        force: true,
    };
    for r in [a, d, f] {
        s.delete_run(&r, &forced).map_err(e)?;
    }
    agree(&s, "all deleted")?;
    ensure!(
        s.count_runs(&RunListQuery::default()).map_err(e)? == RunCounts::default(),
        "no run left, nothing counted"
    );
    Ok(())
}
