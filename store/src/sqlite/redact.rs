//! Redacting values of a run on SQLite (issue 40 item 2, docs/custody.md
//! "Holes"). The blobs the targets reach are found on a read snapshot
//! first (`crate::redact::reached`); the redaction itself is a command of
//! the single writer, serialized with every append, create, import and
//! deletion as a deletion is: the references it looks at are all the
//! committed ones and those of the batch's earlier commands.
//!
//! The bytes must leave the file, not only the table: the command runs
//! with `PRAGMA secure_delete` on (a deleted blob's cells and overflow
//! pages are overwritten with zeros), and the store truncates the WAL
//! right after the batch commits (the frames that held the blob's pages
//! before go with it).

use super::SqliteStore;
use super::writer::Command;
use crate::api::*;
use crate::error::{Error, Result};
use crate::hash::hash_text;
use crate::index::Head;
use crate::redact::ValuePath;
use flow_abi::fact::RunId;
use rusqlite::{Connection, OptionalExtension, params};

/// What the writer is asked: the run, its holes to be, the audit's
/// words.
pub(crate) struct Holes {
    pub hashes: Vec<[u8; 32]>,
    pub paths: Vec<String>,
    pub who: String,
}

/// Makes `holes` holes of the run whose head (as of this point in the
/// writer's batch) is `head`, inside the writer's open transaction.
pub(super) fn redact(
    conn: &Connection,
    run: &RunId,
    head: &Head,
    holes: &Holes,
    at_ms: i64,
) -> Result<Redacted> {
    let id = run.as_str();
    let lease: Option<i64> = conn
        .prepare_cached("SELECT expires_ms FROM leases WHERE run = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    if head.state == RunState::Running || lease.is_some_and(|e| e > at_ms) {
        return Err(Error::Redaction(format!(
            "run {id} is being driven: its driver holds its values; halt it first (`flow halt {id}`), or redact once it pauses or ends"
        )));
    }
    conn.execute_batch("PRAGMA secure_delete = ON")?;
    let done = write(conn, run, head.key, holes, at_ms);
    conn.execute_batch("PRAGMA secure_delete = OFF")?;
    done
}

fn write(conn: &Connection, run: &RunId, key: i64, holes: &Holes, at_ms: i64) -> Result<Redacted> {
    let mut blobs_removed = 0u64;
    {
        let mut hole =
            conn.prepare_cached("INSERT OR IGNORE INTO holes (run_key, hash) VALUES (?1, ?2)")?;
        let mut unref =
            conn.prepare_cached("DELETE FROM blob_refs WHERE run_key = ?1 AND hash = ?2")?;
        let mut gc = conn.prepare_cached(
            "DELETE FROM blobs WHERE hash = ?1 AND NOT EXISTS (SELECT 1 FROM blob_refs WHERE hash = ?1)",
        )?;
        for h in &holes.hashes {
            hole.execute(params![key, &h[..]])?;
            unref.execute(params![key, &h[..]])?;
            blobs_removed += gc.execute([&h[..]])? as u64;
        }
    }
    let hashes: Vec<String> = holes.hashes.iter().map(hash_text).collect();
    let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(
        "INSERT INTO redactions (run, who, at_ms, paths, hashes, blobs_removed) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        run.as_str(),
        holes.who,
        at_ms,
        json(&holes.paths),
        json(&hashes),
        blobs_removed as i64
    ])?;
    Ok(Redacted {
        seq: conn.last_insert_rowid() as u64,
        run: run.to_string(),
        who: holes.who.clone(),
        at_ms,
        paths: holes.paths.clone(),
        hashes,
        blobs_removed,
    })
}

fn redacted_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Redacted> {
    let list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    Ok(Redacted {
        seq: r.get::<_, i64>(0)? as u64,
        run: r.get(1)?,
        who: r.get(2)?,
        at_ms: r.get(3)?,
        paths: list(r.get(4)?),
        hashes: list(r.get(5)?),
        blobs_removed: r.get::<_, i64>(6)? as u64,
    })
}

impl Redact for SqliteStore {
    fn redact(&self, run: &RunId, how: &Redaction) -> Result<Redacted> {
        let hashes = self.reached(run, &how.targets)?;
        let holes = Holes {
            hashes,
            paths: how.targets.iter().map(|t| t.to_string()).collect(),
            who: how.who.clone(),
        };
        let at_ms = super::now_ms();
        let run = run.clone();
        let done = self.send(|reply| Command::Redact {
            run,
            holes,
            at_ms,
            reply,
        })?;
        // The WAL still holds the pages the blobs were in before: fold it
        // into the file (whose freed cells are zeroed) and truncate it.
        self.send(Command::Checkpoint)?;
        Ok(done)
    }

    fn redactions(&self, after: u64, limit: u32) -> Result<Vec<Redacted>> {
        self.with_reader(|c| {
            let rows = c
                .prepare_cached(
                    "SELECT seq, run, who, at_ms, paths, hashes, blobs_removed FROM redactions WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                )?
                .query_map(params![after as i64, limit as i64], redacted_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn reached(&self, run: &RunId, targets: &[ValuePath]) -> Result<Vec<[u8; 32]>> {
        self.snapshot(|db| crate::redact::reached(db, run, targets))
    }
}
