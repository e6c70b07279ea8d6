//! Conformance cases: deleting runs (issue 40 item 1, docs/custody.md).

use super::*;
use flow_abi::fact::Parent;

/// Every `blake3:` hash a stored value references as a blob.
pub fn blob_refs_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(h)) = m.get("$blob") {
                out.push(h.clone());
            }
            m.values().for_each(|c| blob_refs_in(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| blob_refs_in(c, out)),
        _ => {}
    }
}

/// The blob hashes a run's stored facts reference directly.
pub fn run_blobs<B: Backend + ?Sized>(store: &B, run: &RunId) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for f in store.read_history(run).map_err(e)?.facts {
        blob_refs_in(&f.stored_json(), &mut out);
    }
    Ok(out)
}

/// A fork of `parent` at its Checkpoint `checkpoint`, as the service
/// makes one: a Start naming the parent, the same source, its own input.
pub fn fork_start(parent: &RunId, checkpoint: u64, input: Value) -> (RunId, Fact, Vec<SourceText>) {
    let run = new_run_id();
    let (mut start, sources) = start_fact(&run, input);
    if let Fact::Start { parent: p, .. } = &mut start {
        *p = Some(Parent {
            run: parent.clone(),
            checkpoint,
        });
    }
    (run, start, sources)
}

/// REQ issue 40 §1: a deletion removes the run and the blobs no other run
/// references; a fork sharing blobs with it stays readable and can go on;
/// a running run is refused without force; the audit log names the head.
pub(super) fn deletion<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    let s = new();
    let shared = json!({"doc": "s".repeat(3000)});
    let own = json!({"doc": "o".repeat(3000)});
    let (a, n) = seed_run(&s, 1).map_err(e)?;
    s.append(&a, reply_fact(n + 1, 9, shared.clone()))
        .map_err(e)?;
    s.append(&a, reply_fact(n + 2, 10, own.clone()))
        .map_err(e)?;
    s.append(&a, checkpoint_fact(n + 3, json!({"k": 1})))
        .map_err(e)?;
    let a_blobs = run_blobs(&s, &a)?;
    ensure!(
        a_blobs.len() == 2,
        "the parent has two value blobs: {a_blobs:?}"
    );

    // A running run is refused without force, and nothing changes.
    let refused = s.delete_run(&a, &Deletion::by("tester"));
    ensure!(
        matches!(refused, Err(Error::Active { .. })),
        "a running run is refused: {refused:?}"
    );
    s.read_history(&a).map_err(e)?;

    // A fork shares the parent's source blob and one value blob.
    let (b, start, sources) = fork_start(&a, n + 3, json!({"q": 1}));
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    s.append(&b, reply_fact(2, 1, shared.clone())).map_err(e)?;

    let dir = scratch.join(a.as_str());
    export_run(&s, &a, &dir).map_err(e)?;
    s.append(&a, end_fact(n + 4, json!("done"))).map_err(e)?;
    let head = s.run_info(&a).map_err(e)?.last_fact;
    let d = s.delete_run(&a, &Deletion::by("tester")).map_err(e)?;
    ensure!(
        d.run == a.as_str()
            && d.head == head
            && d.who == "tester"
            && d.state == RunState::Completed,
        "what the deletion says: {d:?}"
    );
    ensure!(
        d.facts == n + 4 && d.blobs_removed == 2,
        "its facts, its unshared value blob and its own source (the suite's sources name their run) go: {d:?}"
    );
    ensure!(
        matches!(s.run_info(&a), Err(Error::UnknownRun(_))),
        "the deleted run is unknown"
    );
    ensure!(
        s.host_records(&a).map(|r| r.is_empty()).unwrap_or(true),
        "its host records are gone"
    );
    let own_hash = a_blobs
        .iter()
        .find(|h| !run_blobs(&s, &b).unwrap_or_default().contains(h))
        .cloned()
        .ok_or("the unshared blob")?;
    ensure!(
        matches!(s.blob(&own_hash), Err(Error::UnknownBlob(_))),
        "the unshared blob is gone"
    );
    // The fork still verifies, reads its shared value and goes on.
    s.read_history(&b).map_err(e)?;
    let logical = s.logical_history(&b).map_err(e)?;
    ensure!(
        matches!(&logical[1], Fact::Reply { outcome: Outcome::Ok(v), .. } if *v == shared),
        "the fork reads the shared value"
    );
    s.append(&b, reply_fact(3, 2, shared.clone())).map_err(e)?;
    s.read_history(&b).map_err(e)?;
    ensure!(
        s.run_info(&b).map_err(e)?.parent == Some((a.clone(), n + 3)),
        "the fork still names its parent"
    );
    // The audit log.
    let log = s.deletions(0, 10).map_err(e)?;
    ensure!(log == vec![d.clone()], "the audit log: {log:?}");
    ensure!(
        matches!(
            s.delete_run(&a, &Deletion::by("tester")),
            Err(Error::UnknownRun(_))
        ),
        "a second deletion finds no run"
    );
    // Imported again, the run brings its blobs back.
    import_run(&s, &dir).map_err(e)?;
    s.read_history(&a).map_err(e)?;
    // With force, a running run goes; the fork, sharing blobs, stays whole.
    let forced = s
        .delete_run(
            &a,
            &Deletion {
                who: "tester".into(),
                force: true,
            },
        )
        .map_err(e)?;
    ensure!(forced.blobs_removed == 2, "forced: {forced:?}");
    s.read_history(&b).map_err(e)?;
    ensure!(
        s.deletions(d.seq, 10).map_err(e)?.len() == 1,
        "the log pages after a sequence number"
    );
    // The sweeper's question.
    s.append(&b, end_fact(4, json!("done"))).map_err(e)?;
    let q = ExpiredQuery {
        state: RunState::Completed,
        before_ms: i64::MAX,
        flow: None,
        except_flows: Vec::new(),
        limit: 10,
    };
    ensure!(s.expired_runs(&q).map_err(e)? == vec![b.clone()], "expired");
    let q = ExpiredQuery { before_ms: 0, ..q };
    ensure!(s.expired_runs(&q).map_err(e)?.is_empty(), "none before 0");
    let q = ExpiredQuery {
        before_ms: i64::MAX,
        except_flows: vec!["demo".into()],
        ..q
    };
    ensure!(
        s.expired_runs(&q).map_err(e)?.is_empty(),
        "a flow another rule covers is left to it"
    );
    // Together: each done or refused on its own, answered in order.
    let (c1, _) = seed_run(&s, 1).map_err(e)?;
    let (c2, m) = seed_run(&s, 1).map_err(e)?;
    s.append(&c2, end_fact(m + 1, json!("done"))).map_err(e)?;
    let out = s.delete_runs(
        &[c2.clone(), new_run_id(), c1.clone()],
        &Deletion::by("sweeper"),
    );
    ensure!(
        matches!(
            out.as_slice(),
            [Ok(d), Err(Error::UnknownRun(_)), Err(Error::Active { .. })] if d.run == c2.as_str()
        ),
        "a batch of deletions: {out:?}"
    );
    ensure!(
        matches!(s.run_info(&c2), Err(Error::UnknownRun(_))) && s.run_info(&c1).is_ok(),
        "the deleted one is gone, the refused one kept"
    );
    Ok(())
}
