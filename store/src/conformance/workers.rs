//! Conformance case: the remote-worker queue (crate::workers, docs/deploy.md
//! "Workers").

use super::*;
use crate::workers::*;

fn served(tool: &str, fp: &str, resend: bool) -> ServedTool {
    ServedTool {
        tool: tool.into(),
        fingerprint: fp.into(),
        resend,
    }
}

fn remote(run: &RunId, k: u64, tool: &str, fp: &str) -> RemoteCall {
    RemoteCall {
        run: run.clone(),
        call: root_call(k),
        tool: tool.into(),
        fingerprint: fp.into(),
        args: json!({"k": k, "n": 1.5}),
    }
}

fn state<B: Backend>(s: &B, c: &RemoteCall, within: Duration) -> Result<RemoteCallState, String> {
    s.call_state(&c.run, &c.call, within)
        .map_err(e)?
        .ok_or_else(|| format!("{} is not queued", c.call))
}

/// Calls are handed out once, only to a worker serving their declaration
/// with their fingerprint; an outcome is stored once, from the worker the
/// call went to; a lost worker's call is settled or queued again by the
/// host, and a late reply then dropped; a cancel withdraws a queued call
/// and reaches the worker of a sent one; parked calls of paused runs are
/// found once a worker serves them; ended runs' calls are swept.
pub(super) fn workers<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let live = Duration::from_secs(60);
    let (run, n) = seed_run(&s, 0).map_err(e)?;
    let fp = "sha256:aa";
    ensure!(
        s.live_workers(live).map_err(e)?.is_empty(),
        "a new store has no workers"
    );
    let parked = remote(&run, 1, "t.json#a", fp);
    ensure!(
        s.queue_call(&parked, live).map_err(e)?
            == RemoteCallState::Queued {
                served: false,
                cancelled: false
            },
        "a new call is queued"
    );
    ensure!(
        state(&s, &parked, live)?
            == RemoteCallState::Queued {
                served: false,
                cancelled: false
            },
        "no worker serves it: {:?}",
        state(&s, &parked, live)?
    );
    ensure!(
        s.call_state(&run, &root_call(99), live)
            .map_err(e)?
            .is_none(),
        "a call never queued has no state"
    );

    // A worker with another fingerprint is handed nothing.
    s.register_worker(
        "w-old",
        "old",
        "",
        &Namespaces::All,
        &[served("t.json#a", "sha256:bb", false)],
    )
    .map_err(e)?;
    ensure!(
        s.claim_calls("w-old", 10).map_err(e)?.calls.is_empty(),
        "a call went to a worker of another fingerprint"
    );
    ensure!(
        s.parked_runs(live, 10).map_err(e)?.is_empty(),
        "a running run is not parked"
    );

    // Its drive parks it; the run pauses; a fitting worker arrives: the
    // run is found, and the call is handed out once queued again.
    ensure!(
        s.park_calls(&run, Some(&parked.call)).map_err(e)? == 1,
        "parked"
    );
    s.record_host(
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
    s.register_worker(
        "w1",
        "one",
        "tag-a",
        &Namespaces::All,
        &[served("t.json#a", fp, true)],
    )
    .map_err(e)?;
    ensure!(
        s.worker_owner("w1").map_err(e)?.as_deref() == Some("tag-a")
            && s.worker_owner("w-old").map_err(e)?.as_deref() == Some("")
            && s.worker_owner("w-none").map_err(e)?.is_none(),
        "each worker keeps the owner it registered with"
    );
    ensure!(
        s.parked_runs(live, 10).map_err(e)? == vec![run.clone()],
        "a paused run with a parked call a live worker serves is found"
    );
    ensure!(
        s.claim_calls("w1", 10).map_err(e)?.calls.is_empty(),
        "a parked call was handed out"
    );
    ensure!(
        s.queue_call(&parked, live).map_err(e)?
            == RemoteCallState::Queued {
                served: true,
                cancelled: false
            },
        "queued again (resumed), a live worker serving it"
    );
    ensure!(
        s.parked_runs(live, 10).map_err(e)?.is_empty(),
        "a resumed run is parked no more"
    );
    let workers = s.live_workers(live).map_err(e)?;
    ensure!(
        workers.len() == 2
            && workers[1].id == "w1"
            && workers[1].tools == vec![served("t.json#a", fp, true)],
        "live workers: {workers:?}"
    );

    // Claimed once, args as queued.
    let got = s.claim_calls("w1", 10).map_err(e)?;
    ensure!(got.calls == vec![parked.clone()], "claimed: {got:?}");
    ensure!(
        s.claim_calls("w1", 10).map_err(e)?.calls.is_empty(),
        "a call claimed twice"
    );
    ensure!(
        state(&s, &parked, live)?
            == RemoteCallState::Sent {
                worker: "w1".into(),
                live: true,
                resend: true,
                cancelled: false
            },
        "sent: {:?}",
        state(&s, &parked, live)?
    );

    // One outcome, from the worker it went to.
    let ok = json!({"Ok": {"x": 1}});
    ensure!(
        !s.reply_call("w-old", &run, &parked.call, &ok).map_err(e)?,
        "another worker's reply was admitted"
    );
    ensure!(
        s.reply_call("w1", &run, &parked.call, &ok).map_err(e)?,
        "the worker's reply was not admitted"
    );
    ensure!(
        !s.reply_call("w1", &run, &parked.call, &json!({"Ok": 2}))
            .map_err(e)?,
        "a second reply was admitted"
    );
    ensure!(
        state(&s, &parked, live)?
            == RemoteCallState::Done {
                outcome: ok.clone(),
                worker: Some("w1".into()),
            },
        "the first reply stays"
    );
    ensure!(
        !s.settle_call(&run, &parked.call, Some("w1"), None)
            .map_err(e)?,
        "an answered call was queued again"
    );

    // A lost worker: queued again (resend), then settled; a late reply is
    // dropped.
    let c2 = remote(&run, 2, "t.json#a", fp);
    s.queue_call(&c2, live).map_err(e)?;
    ensure!(
        s.claim_calls("w1", 1).map_err(e)?.calls.len() == 1,
        "the second call is claimed"
    );
    ensure!(
        matches!(s.queue_call(&c2, live).map_err(e)?, RemoteCallState::Sent { ref worker, .. } if worker == "w1"),
        "queued again, a sent call stays sent"
    );
    let short = Duration::from_millis(1);
    std::thread::sleep(Duration::from_millis(20));
    ensure!(
        matches!(
            state(&s, &c2, short)?,
            RemoteCallState::Sent { live: false, .. }
        ),
        "a worker not heard from within the time is not live"
    );
    ensure!(
        !s.touch_worker("w1", short).map_err(e)?,
        "a lost worker came back to life"
    );
    ensure!(
        s.settle_call(&run, &c2.call, Some("w1"), None).map_err(e)?,
        "queued again"
    );
    ensure!(
        matches!(state(&s, &c2, live)?, RemoteCallState::Queued { .. }),
        "queued again: {:?}",
        state(&s, &c2, live)?
    );
    ensure!(
        !s.settle_call(&run, &c2.call, Some("w1"), None).map_err(e)?,
        "queued again twice"
    );
    s.register_worker(
        "w2",
        "two",
        "tag-b",
        &Namespaces::All,
        &[served("t.json#a", fp, false)],
    )
    .map_err(e)?;
    ensure!(
        s.claim_calls("w2", 5).map_err(e)?.calls == vec![c2.clone()],
        "the new worker takes the call queued again"
    );
    let unknown = json!({"Unknown": "the worker was lost"});
    ensure!(
        s.settle_call(&run, &c2.call, Some("w2"), Some(&unknown))
            .map_err(e)?,
        "settled"
    );
    ensure!(
        !s.reply_call("w2", &run, &c2.call, &ok).map_err(e)?,
        "a reply after the host settled the call was admitted"
    );
    ensure!(
        state(&s, &c2, live)?
            == RemoteCallState::Done {
                outcome: unknown,
                worker: Some("w2".into()),
            },
        "the host's decision stays"
    );

    // A call never sent is settled as never sent, not once it is claimed.
    let c4 = remote(&run, 4, "t.json#a", fp);
    s.queue_call(&c4, live).map_err(e)?;
    let not_run = json!({"NotRun": "no worker"});
    ensure!(
        !s.settle_call(&run, &c4.call, Some("w2"), Some(&not_run))
            .map_err(e)?,
        "a call never sent was settled as another worker's"
    );
    ensure!(
        s.settle_call(&run, &c4.call, None, Some(&not_run))
            .map_err(e)?,
        "a call never sent is settled"
    );
    ensure!(
        s.claim_calls("w2", 5).map_err(e)?.calls.is_empty(),
        "a settled call was handed out"
    );
    let c5 = remote(&run, 5, "t.json#a", fp);
    s.queue_call(&c5, live).map_err(e)?;
    s.claim_calls("w2", 5).map_err(e)?;
    ensure!(
        !s.settle_call(&run, &c5.call, None, Some(&not_run))
            .map_err(e)?,
        "a claimed call was settled as never sent"
    );
    s.reply_call("w2", &run, &c5.call, &ok).map_err(e)?;

    // Cancels: a queued call is never handed out (until queued again); a
    // sent one is told to its worker once.
    let c3 = remote(&run, 3, "t.json#a", fp);
    s.queue_call(&c3, live).map_err(e)?;
    s.cancel_call(&run, &c3.call).map_err(e)?;
    ensure!(
        s.claim_calls("w2", 5).map_err(e)? == Claimed::default(),
        "a withdrawn call was handed out"
    );
    s.queue_call(&c3, live).map_err(e)?;
    ensure!(
        s.claim_calls("w2", 5).map_err(e)?.calls == vec![c3.clone()],
        "queued again after a cancel, it is handed out"
    );
    s.cancel_call(&run, &c3.call).map_err(e)?;
    let told = s.claim_calls("w2", 5).map_err(e)?;
    ensure!(
        told.calls.is_empty() && told.cancels == vec![(run.clone(), c3.call.clone())],
        "the cancel reaches the worker: {told:?}"
    );
    ensure!(
        s.claim_calls("w2", 5).map_err(e)?.cancels.is_empty(),
        "a cancel told twice"
    );
    ensure!(
        matches!(
            state(&s, &c3, live)?,
            RemoteCallState::Sent {
                cancelled: true,
                ..
            }
        ),
        "a cancelled sent call stays until its outcome"
    );

    // A halted run's calls are parked (not found as parked: the run is
    // not paused) until it is resumed.
    let (halted, _) = seed_run(&s, 0).map_err(e)?;
    let (h1, h2) = (
        remote(&halted, 1, "t.json#a", fp),
        remote(&halted, 2, "t.json#a", fp),
    );
    s.queue_call(&h1, live).map_err(e)?;
    s.queue_call(&h2, live).map_err(e)?;
    ensure!(
        s.park_calls(&halted, None).map_err(e)? == 2,
        "every queued call of the run is parked"
    );
    s.record_host(
        &halted,
        HostRecord {
            at_ms: None,
            details: HostDetails::Other {
                kind: HostRecordKind::Halt,
                details: json!({}),
            },
        },
    )
    .map_err(e)?;
    ensure!(
        s.claim_calls("w1", 5).map_err(e)?.calls.is_empty(),
        "a halted run's call was handed out"
    );
    ensure!(
        !s.parked_runs(live, 10).map_err(e)?.contains(&halted),
        "a halted run is resumed by no worker"
    );

    // A batch of replies: each admitted once, in order — a second reply
    // to one call in the batch, and one for a call never sent, dropped.
    let (c7, c8) = (
        remote(&run, 7, "t.json#a", fp),
        remote(&run, 8, "t.json#a", fp),
    );
    s.queue_call(&c7, live).map_err(e)?;
    s.queue_call(&c8, live).map_err(e)?;
    let got = s.claim_calls("w2", 5).map_err(e)?.calls;
    ensure!(
        got.contains(&c7) && got.contains(&c8),
        "both claimed: {got:?}"
    );
    let batch = vec![
        (run.clone(), c7.call.clone(), json!({"Ok": 7})),
        (run.clone(), c7.call.clone(), json!({"Ok": 77})),
        (run.clone(), c8.call.clone(), json!({"Failed": 8})),
        (run.clone(), root_call(99), json!({"Ok": 9})),
    ];
    ensure!(
        s.reply_calls("w2", &batch).map_err(e)? == vec![true, false, true, false],
        "a batch's replies each admitted once"
    );
    ensure!(
        state(&s, &c7, live)?
            == RemoteCallState::Done {
                outcome: json!({"Ok": 7}),
                worker: Some("w2".into()),
            }
            && state(&s, &c8, live)?
                == RemoteCallState::Done {
                    outcome: json!({"Failed": 8}),
                    worker: Some("w2".into()),
                },
        "the first replies stand"
    );

    // An ended run's queued call is handed out no more.
    let c6 = remote(&run, 6, "t.json#a", fp);
    s.queue_call(&c6, live).map_err(e)?;

    // A worker that leaves is lost at once; swept after the run ends.
    s.remove_worker("w2").map_err(e)?;
    ensure!(
        !s.live_workers(live)
            .map_err(e)?
            .iter()
            .any(|w| w.id == "w2"),
        "a worker that left is live"
    );
    s.append(&run, end_fact(n + 1, json!(null))).map_err(e)?;
    ensure!(
        s.claim_calls("w1", 5).map_err(e)?.calls.is_empty(),
        "an ended run's call was handed out"
    );
    ensure!(s.sweep_workers(live).map_err(e)? >= 3, "nothing swept");
    ensure!(
        s.call_state(&run, &parked.call, live).map_err(e)?.is_none(),
        "an ended run's calls stay"
    );
    ensure!(
        s.live_workers(live).map_err(e)?.len() == 2,
        "live workers were swept"
    );
    Ok(())
}
