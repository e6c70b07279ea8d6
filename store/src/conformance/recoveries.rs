//! Conformance case: the record of bulk recoveries (issue 39 §2,
//! migration 0014) — one recovery of a flow at a time, its lock renewed,
//! ended or expired; the forks it made written with their Starts.

use super::*;

fn begin<B: Backend + ?Sized>(
    s: &B,
    id: &str,
    flow: &str,
    ttl: Duration,
) -> Result<RecoveryBegun, String> {
    let new = NewRecovery {
        id: id.into(),
        flow: flow.into(),
        program: "sha256:fixed".into(),
        who: "cli".into(),
    };
    s.begin_recovery(&new, ttl).map_err(e)
}

/// A second recovery of a flow is refused while the first holds it (another
/// flow's is not); a renewal holds it, an end lets it go and keeps the
/// report; an expired lock lets the flow be recovered again and shows the
/// old one interrupted; a fork whose Start carries a `recovery` record is
/// listed by that recovery and names it; newest first, paged by time.
pub(super) fn recoveries<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let long = Duration::from_secs(60);
    ensure!(
        begin(&s, "rec-a", "f", long)? == RecoveryBegun::Holding,
        "the first recovery of f holds it"
    );
    match begin(&s, "rec-b", "f", long)? {
        RecoveryBegun::HeldBy(r) => ensure!(
            r.id == "rec-a" && r.status == RecoveryStatus::Running && r.who == "cli",
            "held by {r:?}"
        ),
        other => return Err(format!("a second recovery of f began: {other:?}")),
    }
    ensure!(
        begin(&s, "rec-g", "g", long)? == RecoveryBegun::Holding,
        "another flow's recovery is not held up"
    );
    ensure!(s.renew_recovery("rec-a", long).map_err(e)?, "renewed");

    // A fork made by rec-a: recorded with its Start.
    let (parent, n) = seed_run(&s, 1).map_err(e)?;
    let (fork, start, sources) = fork_start(&parent, n, json!({"q": 2}));
    let by = HostRecord::now(HostDetails::Recovered {
        recovery: "rec-a".into(),
    });
    s.create_run(start, &sources, vec![by]).map_err(e)?;
    let want = RecoveryFork {
        fork: fork.to_string(),
        recovery: "rec-a".into(),
        run: parent.to_string(),
        checkpoint: n,
    };
    let of = s.recovery_of(fork.as_str()).map_err(e)?;
    ensure!(of.as_ref() == Some(&want), "recovery_of the fork: {of:?}");
    ensure!(
        s.recovery_of(parent.as_str()).map_err(e)?.is_none(),
        "the parent was not made by a recovery"
    );
    let kinds: Vec<HostRecordKind> = s
        .host_records(&fork)
        .map_err(e)?
        .iter()
        .map(HostRecordRow::kind)
        .collect();
    ensure!(
        kinds.contains(&HostRecordKind::Recovery),
        "the fork's records: {kinds:?}"
    );

    s.end_recovery("rec-a", r#"{"counts":{}}"#).map_err(e)?;
    ensure!(
        !s.renew_recovery("rec-a", long).map_err(e)?,
        "an ended recovery is not renewed"
    );
    let (row, forks) = s.recovery("rec-a").map_err(e)?.ok_or("rec-a is recorded")?;
    ensure!(
        row.status == RecoveryStatus::Ended
            && row.ended_ms.is_some()
            && row.report.as_deref() == Some(r#"{"counts":{}}"#),
        "ended: {row:?}"
    );
    ensure!(forks == vec![want], "rec-a's forks: {forks:?}");
    ensure!(
        begin(&s, "rec-b", "f", long)? == RecoveryBegun::Holding,
        "f is free once rec-a ended"
    );

    // Expiry: a lock not renewed in time lets the flow go.
    ensure!(
        begin(&s, "rec-x", "h", Duration::from_millis(1))? == RecoveryBegun::Holding,
        "rec-x holds h"
    );
    std::thread::sleep(Duration::from_millis(30));
    let (x, _) = s.recovery("rec-x").map_err(e)?.ok_or("rec-x is recorded")?;
    ensure!(x.status == RecoveryStatus::Interrupted, "expired: {x:?}");
    ensure!(
        begin(&s, "rec-y", "h", long)? == RecoveryBegun::Holding,
        "h is free once rec-x's lock expired"
    );
    ensure!(s.recovery("rec-nope").map_err(e)?.is_none(), "unknown");

    // Newest first; `before` pages back.
    let all = s.recoveries(None, 10).map_err(e)?;
    let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    ensure!(ids.len() == 5, "every recovery listed: {ids:?}");
    ensure!(
        all.windows(2).all(|w| w[0].started_ms >= w[1].started_ms),
        "newest first: {all:?}"
    );
    let last = all.last().map(|r| r.started_ms).unwrap_or_default();
    let older = s.recoveries(Some(last + 1), 10).map_err(e)?;
    ensure!(
        older.iter().all(|r| r.started_ms <= last) && !older.is_empty(),
        "before pages back: {older:?}"
    );
    Ok(())
}
