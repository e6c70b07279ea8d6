//! Conformance case: holes (issue 40 item 2, docs/custody.md "Holes").

use super::*;
use crate::redact::ValuePath;

fn paths(ps: &[&str]) -> Result<Vec<ValuePath>, String> {
    ps.iter().map(|p| ValuePath::parse(p)).collect()
}

fn redaction(ps: &[&str]) -> Result<Redaction, String> {
    Ok(Redaction {
        who: "tester".into(),
        targets: paths(ps)?,
    })
}

/// REQ HOST-2, GAP-HIST-3: a redacted value becomes a hole: the chain
/// still verifies, a read shows the hole's marker, a read that needs the
/// value is refused with `Hole`, a blob another run shares stays for it,
/// an inline value or a running run is refused, and each redaction has
/// its audit row.
pub(super) fn holes<B: Backend + Sync>(new: &mut dyn FnMut() -> B, _: &Path) -> Result<(), String> {
    let s = new();
    let secret = format!("secret-{}", "s".repeat(3000));
    let shared = json!({"doc": "h".repeat(3000)});
    let a = new_run_id();
    let (start, sources) = start_fact(&a, json!({"q": "hi", "doc": secret}));
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    s.append(
        &a,
        checkpoint_fact(2, json!({"doc": secret, "note": shared})),
    )
    .map_err(e)?;
    let (b, _) = seed_run(&s, 0).map_err(e)?;
    s.append(&b, reply_fact(2, 1, shared.clone())).map_err(e)?;

    // A running run is refused and nothing changes.
    let refused = s.redact(&a, &redaction(&["/input/doc"])?);
    ensure!(
        matches!(refused, Err(Error::Redaction(_))),
        "a running run is refused: {refused:?}"
    );
    s.append(&a, end_fact(3, json!("done"))).map_err(e)?;

    // Inline values, unknown paths and unknown runs are refused.
    for bad in ["/input/q", "/input/nope", "/state/k"] {
        let r = s.redact(&a, &redaction(&[bad])?);
        ensure!(
            matches!(&r, Err(Error::InvalidArgument(_))),
            "{bad} is refused: {r:?}"
        );
    }
    let r = s.redact(&new_run_id(), &redaction(&["/input/doc"])?);
    ensure!(
        matches!(r, Err(Error::UnknownRun(_))),
        "an unknown run: {r:?}"
    );
    ensure!(
        s.holes(&a).map_err(e)?.is_empty() && s.redactions(0, 10).map_err(e)?.is_empty(),
        "refusals change nothing"
    );

    // The input's big value (also in the Checkpoint: one blob) goes.
    let d = s.redact(&a, &redaction(&["/input/doc"])?).map_err(e)?;
    ensure!(
        d.hashes.len() == 1 && d.blobs_removed == 1 && d.who == "tester",
        "one blob, only this run's, went: {d:?}"
    );
    let h = s.read_history(&a).map_err(e)?;
    ensure!(h.facts.len() == 3, "the chain verifies with its hole");
    ensure!(
        matches!(s.blob(&d.hashes[0]), Err(Error::UnknownBlob(_))),
        "the blob is gone"
    );
    let start = s.expand_fact(&a, &h.facts[0]).map_err(e)?;
    let Fact::Start { input, .. } = start else {
        return Err("fact 1 is a Start".into());
    };
    ensure!(
        input["doc"] == json!({"$hole": d.hashes[0], "length": secret.len() + 2})
            && input["q"] == json!("hi"),
        "the input shows the hole: {input}"
    );
    let walked = s.walk_logical(&a, &mut |_, _| true);
    ensure!(
        matches!(&walked, Err(Error::Hole { n: 1, .. })),
        "a walk that needs the value meets the hole at fact 1: {walked:?}"
    );
    let page = s.history_page(&a, &HistoryQuery::default()).map_err(e)?;
    ensure!(page.facts.len() == 3, "a page shows the run with its hole");

    // A blob another run shares stays for it.
    let d2 = s.redact(&a, &redaction(&["/state/note/doc"])?).map_err(e)?;
    ensure!(
        d2.blobs_removed == 0 && d2.hashes.len() == 1,
        "the shared blob is a hole of this run only: {d2:?}"
    );
    ensure!(
        matches!(s.checkpoint_state(&a, 2), Err(Error::Hole { .. })),
        "the state that needs it is refused"
    );
    let logical = s.logical_history(&b).map_err(e)?;
    ensure!(
        matches!(&logical[1], Fact::Reply { outcome: Outcome::Ok(v), .. } if *v == shared),
        "the other run still reads the shared value"
    );
    ensure!(
        s.blob(&d2.hashes[0]).is_ok(),
        "the shared blob is still stored"
    );
    let shown = s
        .expand(&a, &json!({"x": {"$blob": d2.hashes[0], "length": 3010}}))
        .map_err(e)?;
    ensure!(
        shown["x"]["$hole"] == json!(d2.hashes[0]),
        "this run's read of it answers the hole: {shown}"
    );

    // By hash, idempotent; an unknown hash is refused.
    let again = s
        .redact(&a, &redaction(&[d2.hashes[0].as_str()])?)
        .map_err(e)?;
    ensure!(again.blobs_removed == 0, "again: nothing more goes");
    let other = format!("blake3:{}", "0".repeat(64));
    ensure!(
        matches!(
            s.redact(&a, &redaction(&[other.as_str()])?),
            Err(Error::InvalidArgument(_))
        ),
        "a hash the run does not reach is refused"
    );
    let mut holes = vec![d.hashes[0].clone(), d2.hashes[0].clone()];
    holes.sort();
    ensure!(s.holes(&a).map_err(e)? == holes, "the run's holes");
    let log = s.redactions(0, 10).map_err(e)?;
    ensure!(
        log == vec![d.clone(), d2.clone(), again.clone()],
        "the audit log: {log:?}"
    );

    // Deleting the run takes its holes; the shared blob stays for b.
    s.delete_run(&a, &Deletion::by("tester")).map_err(e)?;
    s.read_history(&b).map_err(e)?;
    ensure!(s.blob(&d2.hashes[0]).is_ok(), "b's blob stays");
    sensitive(&s)
}

/// Issue 40 item 2: fields a flow declares in `runtime_hints.sensitive`
/// are blobs whatever their size, in the input and in every Checkpoint
/// (snapshot and delta), so that they can become holes.
fn sensitive<B: Backend + Sync>(s: &B) -> Result<(), String> {
    let run = new_run_id();
    let doc = json!({"id": "s", "runtime_hints": {"sensitive": ["/input/ssn", "/state/ssn", "/state/log"]}});
    let ssn = "123-45-6789";
    let (start, sources) = start_with_source(
        &run,
        "s.json",
        "main",
        doc.to_string(),
        json!({"ssn": ssn, "q": 1}),
    );
    s.create_run(start, &sources, Vec::new()).map_err(e)?;
    s.append(
        &run,
        checkpoint_fact(2, json!({"ssn": ssn, "k": 1, "log": []})),
    )
    .map_err(e)?;
    s.append(
        &run,
        checkpoint_fact(3, json!({"ssn": "other", "k": 2, "log": [ssn]})),
    )
    .map_err(e)?;
    s.append(&run, end_fact(4, json!("done"))).map_err(e)?;
    let h = s.read_history(&run).map_err(e)?;
    for (i, f) in h.facts.iter().enumerate().take(3) {
        ensure!(
            !f.body.contains(ssn) && f.body.contains("$blob"),
            "fact {}: the sensitive value is a blob: {}",
            i + 1,
            f.body
        );
    }
    ensure!(
        s.checkpoint_state(&run, 3).map_err(e)? == json!({"ssn": "other", "k": 2, "log": [ssn]}),
        "the state reads back"
    );
    let d = s.redact(&run, &redaction(&["/input/ssn"])?).map_err(e)?;
    ensure!(d.hashes.len() == 1, "one blob: {d:?}");
    s.read_history(&run).map_err(e)?;
    ensure!(
        matches!(s.checkpoint_state(&run, 2), Err(Error::Hole { .. })),
        "the state's copy is the same blob: a hole too"
    );
    Ok(())
}
