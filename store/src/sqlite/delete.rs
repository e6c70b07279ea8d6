//! Deleting a run on SQLite (issue 40 item 1, docs/custody.md). A deletion
//! is a command of the single writer (`writer`), so it runs inside one of
//! its transactions, serialized with every append, create and import: the
//! blob references it looks at are all the committed ones and those of the
//! batch's earlier commands, and nothing can add one while it runs.

use super::SqliteStore;
use super::writer::Command;
use crate::api::*;
use crate::error::{Error, Result};
use crate::hash::hash_text;
use crate::index::Head;
use crate::merkle::NewBlob;
use flow_abi::fact::RunId;
use rusqlite::{Connection, OptionalExtension, params};

/// Writes the references of `key`'s run to `blobs` (same transaction as
/// the fact, Start or import that references them).
pub(super) fn insert_refs(conn: &Connection, key: i64, blobs: &[NewBlob]) -> rusqlite::Result<()> {
    if blobs.is_empty() {
        return Ok(());
    }
    let mut st =
        conn.prepare_cached("INSERT OR IGNORE INTO blob_refs (run_key, hash) VALUES (?1, ?2)")?;
    for b in blobs {
        st.execute(params![key, &b.hash[..]])?;
    }
    Ok(())
}

/// Deletes the run whose head (as of this point in the writer's batch) is
/// `head`, inside the writer's open transaction.
pub(super) fn delete(
    conn: &Connection,
    run: &RunId,
    head: &Head,
    how: &Deletion,
    at_ms: i64,
) -> Result<Deleted> {
    let id = run.as_str();
    if !how.force {
        if head.state == RunState::Running {
            return Err(Error::Active {
                run: id.to_string(),
                why: "running".into(),
            });
        }
        let lease: Option<i64> = conn
            .prepare_cached("SELECT expires_ms FROM leases WHERE run = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        if lease.is_some_and(|e| e > at_ms) {
            return Err(Error::Active {
                run: id.to_string(),
                why: "leased by a server".into(),
            });
        }
    }
    let key = head.key;
    let hashes: Vec<Vec<u8>> = conn
        .prepare_cached("SELECT hash FROM blob_refs WHERE run_key = ?1")?
        .query_map([key], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    conn.prepare_cached("DELETE FROM blob_refs WHERE run_key = ?1")?
        .execute([key])?;
    conn.prepare_cached("DELETE FROM holes WHERE run_key = ?1")?
        .execute([key])?;
    let mut blobs_removed = 0u64;
    {
        let mut gc = conn.prepare_cached(
            "DELETE FROM blobs WHERE hash = ?1 AND NOT EXISTS (SELECT 1 FROM blob_refs WHERE hash = ?1)",
        )?;
        for h in &hashes {
            blobs_removed += gc.execute([h])? as u64;
        }
    }
    let facts = conn
        .prepare_cached("DELETE FROM facts WHERE run_key = ?1")?
        .execute([key])? as u64;
    conn.prepare_cached("DELETE FROM host_records WHERE run_key = ?1")?
        .execute([key])?;
    conn.prepare_cached("DELETE FROM waiting_calls WHERE run_key = ?1")?
        .execute([key])?;
    conn.prepare_cached("DELETE FROM run_attrs WHERE run = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM leases WHERE run = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM worker_calls WHERE run = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM runs WHERE key = ?1")?
        .execute([key])?;
    conn.prepare_cached(
        "INSERT INTO deletions (run, state, head_n, head_hash, who, at_ms, facts, blobs_removed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        id,
        head.state.as_str(),
        head.last_n as i64,
        &head.last_hash[..],
        how.who,
        at_ms,
        facts as i64,
        blobs_removed as i64
    ])?;
    Ok(Deleted {
        seq: conn.last_insert_rowid() as u64,
        run: id.to_string(),
        state: head.state,
        head: FactRef {
            n: head.last_n,
            hash: hash_text(&head.last_hash),
        },
        who: how.who.clone(),
        at_ms,
        facts,
        blobs_removed,
    })
}

fn deleted_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Deleted> {
    let state: String = r.get(2)?;
    let hash: Vec<u8> = r.get(4)?;
    let hash: [u8; 32] = hash.try_into().unwrap_or([0; 32]);
    Ok(Deleted {
        seq: r.get::<_, i64>(0)? as u64,
        run: r.get(1)?,
        state: RunState::parse(&state).unwrap_or(RunState::Halted),
        head: FactRef {
            n: r.get::<_, i64>(3)? as u64,
            hash: hash_text(&hash),
        },
        who: r.get(5)?,
        at_ms: r.get(6)?,
        facts: r.get::<_, i64>(7)? as u64,
        blobs_removed: r.get::<_, i64>(8)? as u64,
    })
}

impl DeleteRuns for SqliteStore {
    fn delete_run(&self, run: &RunId, how: &Deletion) -> Result<Deleted> {
        let (run, how) = (run.clone(), how.clone());
        let at_ms = super::now_ms();
        self.send(|reply| Command::Delete {
            run,
            how,
            at_ms,
            reply,
        })
    }

    fn delete_runs(&self, runs: &[RunId], how: &Deletion) -> Vec<Result<Deleted>> {
        let at_ms = super::now_ms();
        let (mut cmds, mut replies) = (Vec::new(), Vec::new());
        for run in runs {
            let (reply, rx) = std::sync::mpsc::sync_channel(1);
            cmds.push(Command::Delete {
                run: run.clone(),
                how: how.clone(),
                at_ms,
                reply,
            });
            replies.push(rx);
        }
        // One batch of the writer: each deletion in a savepoint of its own,
        // one COMMIT (one fsync) for them all.
        self.inner.committer.submit(Command::Many(cmds));
        replies
            .into_iter()
            .map(|rx| rx.recv().map_err(|_| Error::WriterGone)?)
            .collect()
    }

    fn deletions(&self, after: u64, limit: u32) -> Result<Vec<Deleted>> {
        self.with_reader(|c| {
            let rows = c
                .prepare_cached(
                    "SELECT seq, run, state, head_n, head_hash, who, at_ms, facts, blobs_removed FROM deletions WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                )?
                .query_map(params![after as i64, limit as i64], deleted_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn expired_runs(&self, q: &ExpiredQuery) -> Result<Vec<RunId>> {
        let except = serde_json::to_string(&q.except_flows)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.with_reader(|c| {
            let ids = c
                .prepare_cached(
                    "SELECT id FROM runs
                     WHERE state = ?1 AND state_ms < ?2
                       AND (?3 IS NULL OR flow_id = ?3)
                       AND (flow_id IS NULL OR flow_id NOT IN (SELECT value FROM json_each(?4)))
                     ORDER BY state_ms LIMIT ?5",
                )?
                .query_map(
                    params![
                        q.state.as_str(),
                        q.before_ms,
                        q.flow,
                        except,
                        q.limit as i64
                    ],
                    |r| r.get::<_, String>(0),
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            ids.iter()
                .map(|s| RunId::parse(s).map_err(Error::from))
                .collect()
        })
    }
}
