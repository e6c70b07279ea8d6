//! Discovery over the runs index, each row's Start and head verified.

use super::*;

pub(crate) fn discover(db: &mut dyn ReadDb, q: &CheckedDiscovery) -> Result<DiscoveryPage> {
    let after = q.after.as_ref().map(RunId::as_str).unwrap_or("");
    let rows = db.discovery_columns(after, q.limit, q.state)?;
    let keys: Vec<i64> = rows.iter().map(|r| r.key).collect();
    let mut page = discovery_page(rows, q.limit);
    for (row, key) in page.runs.iter_mut().zip(keys) {
        verify_ends(db, key, row)?;
    }
    Ok(page)
}

/// DISC-13: "record is complete when the validated prefix ends in End". A
/// row of the runs index is not taken on its word: the run's Start and the
/// head fact the row reports (`lastFact`) are read and each checked against
/// its recorded chain hash (from its predecessor's), the head against the
/// index's hash, and its kind against the index's ending. A row that does
/// not hold is `unreadable`, its problem naming the fact, with nothing it
/// reported from the unverified facts (ending, lastFact, hostDecision, and
/// entry and program when Start fails). Backend failures are errors.
pub(crate) fn verify_ends(db: &mut dyn ReadDb, key: i64, row: &mut DiscoveryRow) -> Result<()> {
    if row.record == RecordStatus::Unreadable {
        return Ok(());
    }
    let Some(head) = row.last_fact.clone() else {
        return Ok(());
    };
    let run = match RunId::parse(&row.run) {
        Ok(r) => r,
        Err(e) => {
            unreadable(row, true, format!("the run id does not parse: {e}"));
            return Ok(());
        }
    };
    let verdict = |db: &mut dyn ReadDb, n: u64| match linked_fact_hashed(db, key, &run, n) {
        Ok(ok) => Ok(Ok(ok)),
        Err(e @ (Error::Corrupt { .. } | Error::InvalidArgument(_))) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    };
    match verdict(db, 1)? {
        Ok((_, FactKind::Start, _)) => {}
        Ok((_, kind, _)) => {
            let why = format!("fact 1 is a {}, not a Start", kind.as_str());
            unreadable(row, true, why);
            return Ok(());
        }
        Err(why) => {
            unreadable(row, true, why);
            return Ok(());
        }
    }
    let (kind, hash) = match verdict(db, head.n)? {
        Ok((_, kind, h)) => (kind, hash_text(&h)),
        Err(why) => {
            unreadable(row, false, why);
            return Ok(());
        }
    };
    let why = if hash != head.hash {
        format!(
            "fact {}: the runs index holds hash {}, the fact {hash}",
            head.n, head.hash
        )
    } else if (kind == FactKind::End) != row.ending.is_some() {
        format!(
            "fact {}: the runs index says the run {}, the fact is a {}",
            head.n,
            if row.ending.is_some() {
                "ended"
            } else {
                "has not ended"
            },
            kind.as_str()
        )
    } else {
        return Ok(());
    };
    unreadable(row, false, why);
    Ok(())
}

/// Marks a discovery row unreadable, dropping what the unverified facts
/// said (and what Start said, when `start` failed).
fn unreadable(row: &mut DiscoveryRow, start: bool, detail: String) {
    row.record = RecordStatus::Unreadable;
    row.ending = None;
    row.last_fact = None;
    row.host_decision = None;
    if start {
        row.entry = None;
        row.program = None;
    }
    row.problem = Some(Problem {
        component: "facts".into(),
        status: ProblemStatus::Unreadable,
        detail,
    });
}
