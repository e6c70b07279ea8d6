//! Conformance cases: Archive export and verified import.

use super::*;

/// DESIGN §6 "Run archives": export, verified import, idempotent, conflicts refused.
pub(super) fn archive_round_trip<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    let a = new();
    let (run, n) = seed_run(&a, 3).map_err(e)?;
    a.append(
        &run,
        reply_fact(
            n + 1,
            77,
            json!({"doc": "q".repeat(4000), "inner": {"x": "r".repeat(2000)}}),
        ),
    )
    .map_err(e)?;
    a.record_host(
        &run,
        HostRecord {
            at_ms: Some(1),
            details: HostDetails::Other {
                kind: HostRecordKind::Pause,
                details: json!({}),
            },
        },
    )
    .map_err(e)?;
    let dir = scratch.join(run.as_str());
    let summary = export_run(&a, &run, &dir).map_err(e)?;
    ensure!(
        summary.facts == n + 1 && summary.blobs >= 3,
        "summary {summary:?}"
    );
    let again = export_run(&a, &run, &dir).map_err(e)?;
    ensure!(again == summary, "export is repeatable");
    let b = new();
    let out = import_run(&b, &dir).map_err(e)?;
    ensure!(
        matches!(out, ImportOutcome::Imported { facts, .. } if facts == n + 1),
        "imported {out:?}"
    );
    ensure!(
        matches!(
            import_run(&b, &dir).map_err(e)?,
            ImportOutcome::AlreadyPresent { .. }
        ),
        "import is idempotent"
    );
    let ha = a.read_history(&run).map_err(e)?.facts;
    let hb = b.read_history(&run).map_err(e)?.facts;
    ensure!(ha == hb, "imported history differs");
    ensure!(
        b.run_info(&run).map_err(e)?.state == RunState::Paused,
        "host decision imported"
    );
    ensure!(
        b.run_info(&run).map_err(e)?.imported_ms.is_some()
            && a.run_info(&run).map_err(e)?.imported_ms.is_none(),
        "an imported run is marked imported; a created one is not"
    );
    ensure!(
        b.host_records(&run).map_err(e)?.len() == 1,
        "host records imported"
    );
    ensure!(
        a.expand_fact(&run, &ha[n as usize]).map_err(e)?
            == b.expand_fact(&run, &hb[n as usize]).map_err(e)?,
        "blobs imported"
    );
    // The same run id with another history is refused.
    a.append(&run, call_fact(n + 2, 78, json!({}))).map_err(e)?;
    export_run(&a, &run, &dir).map_err(e)?;
    ensure!(
        matches!(import_run(&b, &dir), Err(Error::Conflict(_))),
        "conflict refused"
    );
    Ok(())
}

/// docs/custody.md "archives of several runs": a run, its fork and the
/// fork's nested run in one root, found by
/// [`crate::archive::lineage_runs`] (recursively; another run left out);
/// imported all or nothing (a conflict in one run writes none), then
/// idempotently.
pub(super) fn archive_several_runs<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    use crate::archive::{export_runs, import_runs, lineage_runs};
    let a = new();
    let (parent, _) = seed_run(&a, 2).map_err(e)?;
    let (other, _) = seed_run(&a, 1).map_err(e)?;
    let fork = new_run_id();
    let (mut start, sources) = start_fact(&fork, json!({"forked": true}));
    if let Fact::Start { parent: p, .. } = &mut start {
        *p = Some(flow_abi::fact::Parent {
            run: parent.clone(),
            checkpoint: 2,
        });
    }
    a.create_run(start, &sources, Vec::new()).map_err(e)?;
    let nested = new_run_id();
    let (mut start, sources) = start_fact(&nested, json!({"nested": true}));
    if let Fact::Start { outer, .. } = &mut start {
        *outer = Some(flow_abi::fact::Outer {
            run: fork.clone(),
            call: root_call(1),
        });
    }
    a.create_run(start, &sources, Vec::new()).map_err(e)?;
    let runs = lineage_runs(&a, &parent).map_err(e)?;
    let mut want = vec![parent.clone(), fork.clone(), nested.clone()];
    want.sort();
    ensure!(
        runs == want,
        "lineage {runs:?}, want {want:?} (not {other})"
    );
    let root = scratch.join("root");
    let s = export_runs(&a, &runs, &root).map_err(e)?;
    ensure!(s.facts >= 4, "summary {s:?}");
    // A store that holds another history under the fork's id refuses the
    // whole archive and gains nothing.
    let b = new();
    let (mut clash, sources) = start_fact(&fork, json!({"another": true}));
    if let Fact::Start { parent: p, .. } = &mut clash {
        *p = None;
    }
    b.create_run(clash, &sources, Vec::new()).map_err(e)?;
    let refused = import_runs(&b, &root);
    ensure!(
        matches!(refused, Err(Error::Conflict(_))),
        "conflict refused: {refused:?}"
    );
    ensure!(
        matches!(b.run_info(&parent), Err(Error::UnknownRun(_))),
        "nothing written: the parent is in the store"
    );
    let c = new();
    let out = import_runs(&c, &root).map_err(e)?;
    ensure!(
        out.len() == 3
            && out
                .iter()
                .all(|o| matches!(o, ImportOutcome::Imported { .. })),
        "imported {out:?}"
    );
    let again = import_runs(&c, &root).map_err(e)?;
    ensure!(
        again
            .iter()
            .all(|o| matches!(o, ImportOutcome::AlreadyPresent { .. })),
        "idempotent: {again:?}"
    );
    for r in &runs {
        ensure!(
            a.read_history(r).map_err(e)?.facts == c.read_history(r).map_err(e)?.facts,
            "{r}: imported history differs"
        );
    }
    ensure!(
        c.children(&parent, 10).map_err(e)?.children.len() == 1
            && c.children(&fork, 10).map_err(e)?.children.len() == 1,
        "the fork and the nested run are children after import"
    );
    Ok(())
}
