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
        a.expand_fact(&ha[n as usize]).map_err(e)? == b.expand_fact(&hb[n as usize]).map_err(e)?,
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
