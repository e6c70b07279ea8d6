//! Conformance case: run leases (docs/deploy.md "Leases").

use super::*;

fn held(c: LeaseClaim) -> Result<u64, String> {
    match c {
        LeaseClaim::Held { epoch } => Ok(epoch),
        other => Err(format!("expected the lease, got {other:?}")),
    }
}

/// One holder at a time; a holder claims again with a new epoch; renewals
/// and releases of another epoch or holder change nothing; an expired
/// lease of a running run is taken over once; a released lease of a
/// running run is handed over, of an ended run removed.
pub(super) fn leases<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let long = Duration::from_secs(60);
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    let e1 = held(s.claim_lease(&run, "a", long).map_err(e)?)?;
    match s.claim_lease(&run, "b", long).map_err(e)? {
        LeaseClaim::HeldBy {
            holder,
            expires_in_ms,
        } => ensure!(
            holder == "a" && expires_in_ms > 50_000,
            "held by {holder} for {expires_in_ms} ms"
        ),
        other => return Err(format!("b got {other:?} while a holds it")),
    }
    let e2 = held(s.claim_lease(&run, "a", long).map_err(e)?)?;
    ensure!(e2 > e1, "a claim again has a new epoch ({e1} then {e2})");
    // Without holding the caller's thread: the same answers.
    let (tx, rx) = std::sync::mpsc::channel();
    s.claim_lease_then(&run, "b", long, Box::new(move |r| drop(tx.send(r))));
    match rx.recv().map_err(e)?.map_err(e)? {
        LeaseClaim::HeldBy { holder, .. } => ensure!(holder == "a", "held by {holder}"),
        other => return Err(format!("b got {other:?} through claim_lease_then")),
    }
    let (tx, rx) = std::sync::mpsc::channel();
    s.release_lease_then(&run, "b", e2, Box::new(move |r| drop(tx.send(r))));
    rx.recv().map_err(e)?.map_err(e)?;
    ensure!(
        s.renew_leases("a", &[(run.clone(), e2)], long).map_err(e)? == vec![run.clone()],
        "another holder's release_lease_then let go of a's lease"
    );
    let renewed = s.renew_leases("a", &[(run.clone(), e1)], long).map_err(e)?;
    ensure!(renewed.is_empty(), "an old epoch renewed: {renewed:?}");
    ensure!(
        s.renew_leases("b", &[(run.clone(), e2)], long)
            .map_err(e)?
            .is_empty(),
        "another holder renewed"
    );
    ensure!(
        s.renew_leases("a", &[(run.clone(), e2)], long).map_err(e)? == vec![run.clone()],
        "the holder renews"
    );
    ensure!(
        s.claim_expired("b", long, 10).map_err(e)?.is_empty(),
        "a live lease is not taken over"
    );

    // Expiry: a lease that ran out is taken over, once.
    let (other, _) = seed_run(&s, 0).map_err(e)?;
    let old = held(
        s.claim_lease(&other, "a", Duration::from_millis(1))
            .map_err(e)?,
    )?;
    std::thread::sleep(Duration::from_millis(30));
    let taken = s.claim_expired("b", long, 10).map_err(e)?;
    ensure!(
        taken.len() == 1 && taken[0].0 == other,
        "the expired lease taken over: {taken:?}"
    );
    ensure!(
        s.claim_expired("c", long, 10).map_err(e)?.is_empty(),
        "taken over twice"
    );
    ensure!(
        s.renew_leases("a", &[(other.clone(), old)], long)
            .map_err(e)?
            .is_empty(),
        "the old holder renews a lease taken over"
    );
    s.release_lease(&other, "a", old).map_err(e)?;
    ensure!(
        matches!(s.claim_lease(&other, "c", long).map_err(e)?, LeaseClaim::HeldBy { holder, .. } if holder == "b"),
        "the old holder's release changed the new holder's lease"
    );

    // Released while running: handed over at once.
    s.release_lease(&run, "a", e2).map_err(e)?;
    let taken = s.claim_expired("b", long, 10).map_err(e)?;
    ensure!(
        taken.iter().any(|(r, _)| *r == run),
        "a released running run is handed over: {taken:?}"
    );

    // Released after End: removed; expired leases of ended runs stay put.
    let eb = taken
        .iter()
        .find(|(r, _)| *r == run)
        .map(|(_, e)| *e)
        .unwrap_or(0);
    s.append(&run, end_fact(n + 1, json!(null))).map_err(e)?;
    s.release_lease(&run, "b", eb).map_err(e)?;
    ensure!(
        held(s.claim_lease(&run, "c", long).map_err(e)?)? == 1,
        "the released lease of an ended run was removed"
    );
    let (ended, m) = seed_run(&s, 0).map_err(e)?;
    s.claim_lease(&ended, "a", Duration::from_millis(1))
        .map_err(e)?;
    s.append(&ended, end_fact(m + 1, json!(null))).map_err(e)?;
    std::thread::sleep(Duration::from_millis(30));
    ensure!(
        !s.claim_expired("b", long, 10)
            .map_err(e)?
            .iter()
            .any(|(r, _)| *r == ended),
        "an ended run is never taken over"
    );
    Ok(())
}
