//! The `waiting_calls` rows of SQLite (migration 0013, `crate::waiting`):
//! written by the writer with a `pause` host record, cleared by the run's
//! next fact, a halt or its deletion, all in the writer's transaction; and
//! filled at open for runs paused before the migration.

use crate::api::HostDetails;
use crate::error::Result;
use crate::seal::Sealer;
use crate::waiting::{WaitingRow, rows, rows_of_paused};
use flow_abi::fact::RunId;
use rusqlite::{Connection, params};

/// A host record of run `key` written at `at_ms`: a pause replaces the
/// run's rows, a halt removes them.
pub(super) fn on_host(
    conn: &Connection,
    key: i64,
    run: &RunId,
    details: &HostDetails,
    at_ms: i64,
    seal: &Sealer,
) -> Result<()> {
    match details {
        HostDetails::Pause { open } => {
            let open: Vec<String> = open.iter().map(|c| c.as_str().to_string()).collect();
            pause(conn, key, run, &open, at_ms, seal)
        }
        HostDetails::Halt(_) => clear(conn, key),
        _ => Ok(()),
    }
}

/// Replaces run `key`'s rows by those of its pause at `since_ms` with
/// `open` calls.
fn pause(
    conn: &Connection,
    key: i64,
    run: &RunId,
    open: &[String],
    since_ms: i64,
    seal: &Sealer,
) -> Result<()> {
    let rows = super::read::on(conn, seal, |db| rows(db, key, run, open, since_ms))?;
    clear(conn, key)?;
    insert(conn, key, run, &rows)
}

/// Removes run `key`'s rows: it is no longer paused.
pub(super) fn clear(conn: &Connection, key: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM waiting_calls WHERE run_key = ?1")?
        .execute([key])?;
    Ok(())
}

fn insert(conn: &Connection, key: i64, run: &RunId, rows: &[WaitingRow]) -> Result<()> {
    let mut st = conn.prepare_cached(
        "INSERT OR REPLACE INTO waiting_calls (run_key, call, run, task, node, tool, fact, since_ms, due_ms, namespace)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, namespace FROM runs WHERE key = ?1",
    )?;
    for r in rows {
        st.execute(params![
            key,
            r.call,
            run.as_str(),
            r.task,
            r.node,
            r.tool,
            r.fact as i64,
            r.since_ms,
            r.due_ms
        ])?;
    }
    Ok(())
}

/// Fills the rows of paused runs that have none (runs paused before
/// migration 0013, or by a build without it), in one transaction. Done at
/// every open rather than once in the migration: SQL cannot read the Call
/// facts' canonical text (the store never interprets stored JSON in SQL),
/// and a paused run without rows is found by index (`runs_by_state`), so
/// a store already filled costs one short query.
pub(super) fn backfill(conn: &mut Connection, seal: &Sealer) -> Result<usize> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let missing: Vec<(i64, String)> = {
        let mut st = tx.prepare(
            "SELECT key, id FROM runs WHERE state = 'paused' AND NOT EXISTS (SELECT 1 FROM waiting_calls w WHERE w.run_key = runs.key)",
        )?;
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut filled = 0;
    for (key, id) in missing {
        let Ok(run) = RunId::parse(&id) else { continue };
        // A run whose facts do not read (a storage failure its own reads
        // report) is left without rows rather than failing the open.
        let Ok(rows) = super::read::on(&tx, seal, |db| rows_of_paused(db, &run)) else {
            continue;
        };
        insert(&tx, key, &run, &rows)?;
        filled += usize::from(!rows.is_empty());
    }
    tx.commit()?;
    Ok(filled)
}
