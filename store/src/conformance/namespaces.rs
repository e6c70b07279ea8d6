//! Conformance case: namespaces (issue 40 item 4, migration 0019). A run
//! is created in a namespace, a fork and a nested run inherit their
//! parent's, an import places its runs where it is told; a caller
//! confined to namespaces lists, pages, counts and finds waiting calls of
//! their runs only.

use super::*;
use crate::archive::read_archive;

fn ns(name: &str) -> Namespace {
    Namespace::parse(name).expect("a namespace")
}

fn ids(page: &RunListPage) -> Vec<String> {
    page.runs.iter().map(|r| r.row.run.clone()).collect()
}

/// Every page of `q` one run at a time (keyset paging), in order.
fn paged<B: Backend + ?Sized>(s: &B, q: &RunListQuery) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_runs(&RunListQuery {
                limit: Some(1),
                cursor: cursor.clone(),
                ..q.clone()
            })
            .map_err(e)?;
        out.extend(ids(&page));
        match page.next {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
}

/// The worker queue by namespace: `create` makes a run in a namespace.
fn workers<B: Backend + Sync>(
    s: &B,
    a: &Namespace,
    b: &Namespace,
    create: &dyn Fn(&Namespace) -> Result<RunId, String>,
) -> Result<(), String> {
    use crate::workers::{RemoteCall, RemoteCallState, ServedTool};
    let live = Duration::from_secs(60);
    let (tool, fp) = ("ns.json#t", "sha256:ns");
    let call = |run: &RunId| RemoteCall {
        run: run.clone(),
        call: root_call(1),
        tool: tool.into(),
        fingerprint: fp.into(),
        args: json!({}),
    };
    let serves = [ServedTool {
        tool: tool.into(),
        fingerprint: fp.into(),
        resend: false,
    }];
    let (of_a, of_b) = (create(a)?, create(b)?);
    s.register_worker("w-a", "a", "", &Namespaces::only([a.clone()]), &serves)
        .map_err(e)?;
    let queued = |served| RemoteCallState::Queued {
        served,
        cancelled: false,
    };
    ensure!(
        s.queue_call(&call(&of_b), live).map_err(e)? == queued(false),
        "team-a's worker does not serve team-b's call"
    );
    ensure!(
        s.queue_call(&call(&of_a), live).map_err(e)? == queued(true),
        "team-a's worker serves team-a's call"
    );
    let got = s.claim_calls("w-a", 10).map_err(e)?.calls;
    ensure!(
        got.len() == 1 && got[0].run == of_a,
        "team-a's worker is handed team-a's call only: {got:?}"
    );
    ensure!(
        s.claim_calls("w-a", 10).map_err(e)?.calls.is_empty(),
        "never team-b's"
    );
    // Team-b's call parks (its run pauses) until a worker of team-b comes.
    s.park_calls(&of_b, None).map_err(e)?;
    s.record_host(
        &of_b,
        HostRecord::now(HostDetails::Pause {
            open: vec![root_call(1)],
        }),
    )
    .map_err(e)?;
    ensure!(
        s.parked_runs(live, 10).map_err(e)?.is_empty(),
        "no worker of team-b: nothing to resume"
    );
    s.register_worker("w-b", "b", "", &Namespaces::only([b.clone()]), &serves)
        .map_err(e)?;
    ensure!(
        s.parked_runs(live, 10).map_err(e)? == vec![of_b.clone()],
        "a worker of team-b came: its run is found"
    );
    ensure!(
        s.queue_call(&call(&of_b), live).map_err(e)? == queued(true),
        "queued again, served"
    );
    let got = s.claim_calls("w-b", 10).map_err(e)?.calls;
    ensure!(
        got.len() == 1 && got[0].run == of_b,
        "team-b's worker is handed team-b's call: {got:?}"
    );
    s.register_worker("w-all", "all", "", &Namespaces::All, &serves)
        .map_err(e)?;
    let listed: Vec<(String, Namespaces)> = s
        .live_workers(live)
        .map_err(e)?
        .into_iter()
        .map(|w| (w.id, w.namespaces))
        .collect();
    ensure!(
        listed
            == vec![
                ("w-a".to_string(), Namespaces::only([a.clone()])),
                ("w-all".to_string(), Namespaces::All),
                ("w-b".to_string(), Namespaces::only([b.clone()])),
            ],
        "each worker lists its namespaces: {listed:?}"
    );
    Ok(())
}

/// REQ issue 40 §4 (HOST-2: who can read a history belongs to the host).
pub(super) fn namespaces<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    let s = new();
    let (a, b) = (ns("team-a"), ns("team-b"));
    let create = |at: &Namespace| -> Result<RunId, String> {
        let run = new_run_id();
        let (start, sources) = start_fact(&run, json!({"q": "hi"}));
        s.create_run_in(at, start, &sources, Vec::new())
            .map_err(e)?;
        Ok(run)
    };
    let a1 = create(&a)?;
    let b1 = create(&b)?;
    let a2 = create(&a)?;
    let d1 = seed_run(&s, 1)?.0;
    for (run, want) in [(&a1, &a), (&b1, &b), (&d1, &Namespace::default())] {
        let got = s.run_info(run).map_err(e)?.namespace;
        ensure!(got == *want, "{run} is in {got}, not {want}");
    }

    // A fork and a nested run live beside their parent, whatever their
    // creator gives.
    s.append(&b1, checkpoint_fact(2, json!({"k": 1})))
        .map_err(e)?;
    let (fork, start, sources) = fork_start(&b1, 2, json!({"forked": true}));
    s.create_run_in(&a, start, &sources, Vec::new())
        .map_err(e)?;
    let nested = new_run_id();
    let (mut start, sources) = start_fact(&nested, json!({"nested": true}));
    if let Fact::Start { outer, .. } = &mut start {
        *outer = Some(flow_abi::fact::Outer {
            run: a1.clone(),
            call: root_call(1),
        });
    }
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    ensure!(
        s.run_info(&fork).map_err(e)?.namespace == b,
        "a fork is in its parent's namespace"
    );
    ensure!(
        s.run_info(&nested).map_err(e)?.namespace == a,
        "a nested run is in its outer run's namespace"
    );

    // Listings: each namespace an index range, merged in id order, in
    // either direction and page by page.
    let only = |names: &[&Namespace]| RunListQuery {
        namespaces: Namespaces::only(names.iter().map(|n| (*n).clone())),
        ..RunListQuery::default()
    };
    let mut want_a = vec![a1.to_string(), a2.to_string(), nested.to_string()];
    want_a.sort();
    let mut want_b = vec![b1.to_string(), fork.to_string()];
    want_b.sort();
    let mut want_ab: Vec<String> = want_a.iter().chain(&want_b).cloned().collect();
    want_ab.sort();
    for (q, want) in [
        (only(&[&a]), &want_a),
        (only(&[&b]), &want_b),
        (only(&[&a, &b]), &want_ab),
    ] {
        let got = ids(&s.list_runs(&q).map_err(e)?);
        ensure!(got == *want, "{:?}: {got:?}, want {want:?}", q.namespaces);
        ensure!(paged(&s, &q)? == *want, "{:?} paged", q.namespaces);
        let mut newest = paged(
            &s,
            &RunListQuery {
                order: RunOrder::Newest,
                ..q.clone()
            },
        )?;
        newest.reverse();
        ensure!(newest == *want, "{:?} newest first", q.namespaces);
        let flowed = RunListQuery {
            flow: Some("demo".into()),
            states: vec![RunState::Running],
            ..q.clone()
        };
        ensure!(
            paged(&s, &flowed)? == *want,
            "{:?} with flow and state filters",
            q.namespaces
        );
    }
    let listed = s.list_runs(&only(&[&a])).map_err(e)?;
    ensure!(
        listed.runs.iter().all(|r| r.namespace == a),
        "each row names its namespace"
    );
    let everything = ids(&s.list_runs(&RunListQuery::default()).map_err(e)?);
    ensure!(everything.len() == 6, "every namespace: {everything:?}");
    let nothing = RunListQuery {
        namespaces: Namespaces::only([]),
        ..RunListQuery::default()
    };
    ensure!(
        s.list_runs(&nothing).map_err(e)?.runs.is_empty()
            && s.count_runs(&nothing).map_err(e)?.total == 0,
        "no namespace, no run"
    );

    // Counts: the counters (states and flow) and the scan (a started
    // range) agree, per namespace.
    for (q, n) in [
        (only(&[&a]), 3),
        (only(&[&b]), 2),
        (only(&[&a, &b]), 5),
        (RunListQuery::default(), 6),
    ] {
        let counted = s.count_runs(&q).map_err(e)?;
        let scanned = s
            .count_runs(&RunListQuery {
                started: TimeRange {
                    from: Some(0),
                    to: None,
                },
                ..q.clone()
            })
            .map_err(e)?;
        ensure!(
            counted.total == n && counted == scanned,
            "{:?}: {counted:?} / {scanned:?}, want {n}",
            q.namespaces
        );
    }

    // The inbox: a paused run's calls only in its namespace's.
    s.append(&b1, call_fact(3, 7, json!({"prompt": "ok?"})))
        .map_err(e)?;
    s.record_host(
        &b1,
        HostRecord::now(HostDetails::Pause {
            open: vec![root_call(7)],
        }),
    )
    .map_err(e)?;
    let waiting = |names: Namespaces| {
        s.waiting_calls(&WaitingQuery {
            limit: 10,
            namespaces: names,
            ..WaitingQuery::default()
        })
    };
    let of_a = waiting(Namespaces::only([a.clone()])).map_err(e)?;
    let of_b = waiting(Namespaces::only([b.clone(), a.clone()])).map_err(e)?;
    let of_all = waiting(Namespaces::All).map_err(e)?;
    ensure!(
        of_a.total == 0 && of_a.calls.is_empty(),
        "team-a waits on nothing: {of_a:?}"
    );
    ensure!(
        of_b.total == 1 && of_b.calls.len() == 1 && of_b.calls[0].run == b1,
        "team-b's call: {of_b:?}"
    );
    ensure!(of_all.total == 1, "every namespace: {of_all:?}");
    let paused = RunListQuery {
        states: vec![RunState::Paused],
        ..only(&[&a])
    };
    ensure!(
        s.count_runs(&paused).map_err(e)?.total == 0,
        "team-a has no paused run"
    );

    // Workers: a call is handed to, and counted as served by, only a
    // worker of its run's namespace (or of every one).
    workers(&s, &a, &b, &create)?;

    // An import goes where it is told; matching a stored run moves
    // nothing.
    let dir = scratch.join("ns-export");
    export_run(&s, &a2, &dir).map_err(e)?;
    let c = new();
    let there = ns("imported");
    c.import_verified_all_in(&there, vec![read_archive(&dir).map_err(e)?])
        .map_err(e)?;
    ensure!(
        c.run_info(&a2).map_err(e)?.namespace == there,
        "an import is placed in its namespace"
    );
    c.import_verified_all(vec![read_archive(&dir).map_err(e)?])
        .map_err(e)?;
    ensure!(
        c.run_info(&a2).map_err(e)?.namespace == there,
        "a matched import moves nothing"
    );
    ensure!(
        c.count_runs(&only(&[&there])).map_err(e)?.total == 1
            && c.count_runs(&only(&[&Namespace::default()]))
                .map_err(e)?
                .total
                == 0,
        "counted in its namespace"
    );
    Ok(())
}
