//! Conformance case: the calls paused runs wait on (migration 0013, issue
//! 38 §1): written with the pause record, read back filtered, sorted and
//! paged, cleared by the run's next fact, by a halt and by a deletion.

use super::*;

fn query() -> WaitingQuery {
    WaitingQuery {
        limit: 100,
        ..WaitingQuery::default()
    }
}

fn calls<B: Backend + ?Sized>(s: &B, q: &WaitingQuery) -> Result<Vec<(String, String)>, String> {
    let page = s.waiting_calls(q).map_err(e)?;
    Ok(page
        .calls
        .iter()
        .map(|c| (c.run.to_string(), c.call.to_string()))
        .collect())
}

/// A run with an open Call (fact `n + 1`) and a deadline on it, paused.
fn paused<B: Backend + ?Sized>(s: &B, at_ms: i64) -> Result<(RunId, u64), String> {
    let (run, n) = seed_run(s, 1).map_err(e)?;
    s.append(&run, call_fact(n + 1, 7, json!({"prompt": "ok?"})))
        .map_err(e)?;
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(at_ms),
            details: HostDetails::Timeout {
                call: root_call(7),
                due_ms: at_ms + 60_000,
            },
        },
    )
    .map_err(e)?;
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(at_ms),
            details: HostDetails::Pause {
                open: vec![root_call(7)],
            },
        },
    )
    .map_err(e)?;
    Ok((run, n + 1))
}

/// REQ issue 38 §1, §2: the waiting calls index follows each pause.
pub(super) fn waiting_calls<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _scratch: &Path,
) -> Result<(), String> {
    let s = new();
    let (a, fa) = paused(&s, 1_000)?;
    let (b, _) = paused(&s, 2_000)?;
    let (c, _) = paused(&s, 3_000)?;
    let page = s.waiting_calls(&query()).map_err(e)?;
    ensure!(page.total == 3, "three paused runs: {page:?}");
    let first = &page.calls[0];
    ensure!(
        first.run == a
            && first.fact == fa
            && first.node == "step"
            && first.tool == "demo.json#tool"
            && first.task == "root"
            && first.since_ms == 1_000
            && first.due_ms == Some(61_000),
        "the row of the pause: {first:?}"
    );
    let id = |r: &RunId| (r.to_string(), root_call(7).as_str().to_string());
    ensure!(
        calls(&s, &query())? == [id(&a), id(&b), id(&c)],
        "oldest first"
    );

    // The page's details in one read: each Call, expanded, with its run's
    // row; a fact that is not there is that entry's error alone.
    let at: Vec<(RunId, u64)> = page.calls.iter().map(|w| (w.run.clone(), w.fact)).collect();
    let mut asked = at.clone();
    asked.push((a.clone(), fa + 40));
    let got = s.calls_at(&asked).map_err(e)?;
    ensure!(got.len() == 4, "one answer each: {}", got.len());
    for ((run, n), read) in at.iter().zip(&got) {
        let (fact, info) = read.as_ref().map_err(|x| format!("{run} fact {n}: {x}"))?;
        ensure!(
            matches!(fact, Fact::Call { call, args, .. } if *call == root_call(7) && args["prompt"] == "ok?")
                && info.state == RunState::Paused
                && info.last_fact.n == *n,
            "the Call of {run} and its row: {fact:?}"
        );
    }
    ensure!(
        got[3].is_err(),
        "a fact past the head is an error of its own"
    );

    // Filters, count and keyset paging.
    let q = WaitingQuery {
        tool: Some("demo.json#tool".into()),
        since_at_most: Some(2_000),
        ..query()
    };
    ensure!(calls(&s, &q)? == [id(&a), id(&b)], "tool and age filter");
    let other = WaitingQuery {
        node: Some("elsewhere".into()),
        ..query()
    };
    ensure!(
        s.waiting_calls(&other).map_err(e)?.total == 0,
        "no such node"
    );
    let one = WaitingQuery {
        limit: 1,
        sort: WaitingSort::Due,
        ..query()
    };
    let p1 = s.waiting_calls(&one).map_err(e)?;
    ensure!(p1.more && p1.total == 3, "a page of one of three: {p1:?}");
    let next = WaitingQuery {
        after: Some(p1.calls[0].cursor(WaitingSort::Due)),
        ..one.clone()
    };
    ensure!(calls(&s, &next)? == [id(&b)], "the page after the cursor");

    // The next fact clears a run's rows; a halt and a deletion too.
    s.append(&a, reply_fact(fa + 1, 7, json!({"ok": true})))
        .map_err(e)?;
    s.record_host(
        &b,
        HostRecord::now(HostDetails::Halt(Halt {
            by: Some("test".into()),
            reason: None,
            force: None,
            outer: None,
        })),
    )
    .map_err(e)?;
    ensure!(
        calls(&s, &query())? == [id(&c)],
        "resumed and halted runs go"
    );
    let forced = Deletion {
        force: true,
        ..Deletion::by("tester")
    };
    s.delete_run(&c, &forced).map_err(e)?;
    ensure!(
        s.waiting_calls(&query()).map_err(e)?.total == 0,
        "a deleted run's rows go"
    );

    // A call made long before the pause is found too (the rows are read
    // back from the head a growing window at a time), and calls whose ids
    // begin with an open one's (c1:root#70 …) are not taken for it.
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    s.append(&run, call_fact(n + 1, 7, json!({"prompt": "early"})))
        .map_err(e)?;
    let mut last = n + 1;
    for k in 70..110 {
        s.append(&run, call_fact(last + 1, k, json!({"i": k})))
            .map_err(e)?;
        s.append(&run, reply_fact(last + 2, k, json!(k)))
            .map_err(e)?;
        last += 2;
    }
    s.append(&run, call_fact(last + 1, 200, json!({"prompt": "late"})))
        .map_err(e)?;
    s.record_host(
        &run,
        HostRecord {
            at_ms: Some(5_000),
            details: HostDetails::Pause {
                open: vec![root_call(7), root_call(200)],
            },
        },
    )
    .map_err(e)?;
    let rows = s.waiting_calls(&query()).map_err(e)?.calls;
    let mut got: Vec<(String, u64)> = rows.iter().map(|c| (c.call.to_string(), c.fact)).collect();
    got.sort_by_key(|(_, fact)| *fact);
    ensure!(
        got == [
            (root_call(7).to_string(), n + 1),
            (root_call(200).to_string(), last + 1)
        ],
        "an early and a late open call, each at its Call: {got:?}"
    );
    Ok(())
}
