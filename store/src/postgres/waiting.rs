//! The `waiting_calls` rows of Postgres (migration 0013, `crate::waiting`).
//! A pause's rows are read before its batch (the Call facts and deadline
//! records it names were committed before the pause was recorded), then
//! written by the batch's pipelined round trip with the `pause` record:
//! the run's old rows deleted, the new ones inserted (`sql`). A later fact,
//! a halt or the run's deletion removes them in the same way. Runs paused
//! before the migration are filled in at open.

use super::Shared;
use super::read::Session;
use super::sql::Rows;
use super::writer::Command;
use crate::api::{HostDetails, RunState};
use crate::error::{Error, Result};
use crate::waiting::{WaitingRow, rows, rows_of_paused};
use flow_abi::fact::RunId;
use std::collections::HashMap;
use std::sync::Arc;

/// The rows of each pause in `cmds`, by run id. A run whose rows cannot be
/// read is left out: its pause is recorded without rows (and filled in at
/// the next open).
pub(super) fn load(shared: &Arc<Shared>, cmds: &[Command]) -> HashMap<String, Vec<WaitingRow>> {
    let mut out = HashMap::new();
    for c in cmds {
        let Command::Host {
            run, record, at_ms, ..
        } = c
        else {
            continue;
        };
        let HostDetails::Pause { open } = &record.details else {
            continue;
        };
        let open: Vec<String> = open.iter().map(|c| c.as_str().to_string()).collect();
        let mut s = Session::new(shared.clone());
        let seal = s.seal();
        let got = crate::seal::read::opened(&mut s, &seal, |db| {
            db.run_columns(run).and_then(|cols| match cols {
                Some(cols) => rows(db, cols.key, run, &open, *at_ms),
                None => Ok(Vec::new()),
            })
        });
        s.finish();
        if let Ok(rows) = got {
            out.insert(run.to_string(), rows);
        }
    }
    out
}

/// A host record of run `id` decided in a batch: a pause replaces the
/// run's rows by those `load` read, a halt removes them.
pub(super) fn on_host(
    rows: &mut Rows,
    waits: &mut HashMap<String, Vec<WaitingRow>>,
    id: &str,
    details: &HostDetails,
) {
    if !matches!(details, HostDetails::Halt(_) | HostDetails::Pause { .. }) {
        return;
    }
    rows.unwait.insert(id.to_string());
    rows.waiting.retain(|(r, _)| r != id);
    if let Some(w) = waits.remove(id) {
        rows.waiting
            .extend(w.into_iter().map(|x| (id.to_string(), x)));
    }
}

/// A fact appended to run `id`, which was in `state`: a paused run's rows
/// go.
pub(super) fn on_append(rows: &mut Rows, id: &str, state: RunState) {
    if state == RunState::Paused {
        rows.unwait.insert(id.to_string());
        rows.waiting.retain(|(r, _)| r != id);
    }
}

/// Fills the rows of paused runs that have none (runs paused before
/// migration 0013), reading each from its latest pause record. Done at
/// every open rather than in the migration's SQL, which cannot read the
/// Call facts' canonical text; a store already filled costs one query.
/// Blocking (it runs where `PostgresStore::start` does).
pub(super) fn backfill(shared: &Arc<Shared>) -> Result<()> {
    let conn = shared
        .handle
        .block_on(shared.pool.get())
        .map_err(|e| Error::Unavailable(format!("postgres pool: {e}")))?;
    let missing = shared.handle.block_on(conn.query(
        "SELECT id FROM runs r WHERE state = 'paused' AND NOT EXISTS (SELECT 1 FROM waiting_calls w WHERE w.run_key = r.key)",
        &[],
    ))?;
    for row in missing {
        let id: String = row.try_get(0)?;
        let Ok(run) = RunId::parse(&id) else { continue };
        let mut s = Session::new(shared.clone());
        let rows = crate::seal::read::opened(&mut s, &shared.seal, |db| rows_of_paused(db, &run));
        s.finish();
        // A run whose facts do not read (a storage failure its own reads
        // report) is left without rows rather than failing the open.
        let Ok(rows) = rows else { continue };
        for w in rows {
            let fact = w.fact as i64;
            shared.handle.block_on(conn.execute(
                "INSERT INTO waiting_calls (run_key, call, run, task, node, tool, fact, since_ms, due_ms, namespace)
                 SELECT key, $2, id, $3, $4, $5, $6, $7, $8, namespace FROM runs WHERE id = $1 AND state = 'paused'
                 ON CONFLICT DO NOTHING",
                &[&id, &w.call, &w.task, &w.node, &w.tool, &fact, &w.since_ms, &w.due_ms],
            ))?;
        }
    }
    Ok(())
}
