//! The recoveries' record on SQLite (migration 0014): each operation one
//! IMMEDIATE transaction on a side connection, timed by this host's clock,
//! as the leases are. A recovery's forks are written by the writer with
//! each fork's Start ([`insert_fork`]).

use super::{SqliteStore, now_ms};
use crate::api::{
    NewRecovery, Recoveries, RecoveryBegun, RecoveryFork, RecoveryRow, RecoveryStatus,
};
use crate::error::Result;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use std::time::Duration;

const ROW: &str =
    "SELECT id, flow, program, who, started_ms, expires_ms, ended_ms, report FROM recoveries";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn row(now: i64) -> impl Fn(&Row<'_>) -> rusqlite::Result<RecoveryRow> {
    move |r| {
        let (expires, ended): (Option<i64>, Option<i64>) = (r.get(5)?, r.get(6)?);
        Ok(RecoveryRow {
            id: r.get(0)?,
            flow: r.get(1)?,
            program: r.get(2)?,
            who: r.get(3)?,
            started_ms: r.get(4)?,
            ended_ms: ended,
            status: RecoveryStatus::of(ended, expires, now),
            report: r.get(7)?,
        })
    }
}

fn fork_row(r: &Row<'_>) -> rusqlite::Result<RecoveryFork> {
    Ok(RecoveryFork {
        fork: r.get(0)?,
        recovery: r.get(1)?,
        run: r.get(2)?,
        checkpoint: r.get::<_, i64>(3)? as u64,
    })
}

/// Records that `fork` (its Start being written) was made by `recovery`
/// from `run`'s `checkpoint`: the writer's, in the Start's transaction.
pub(super) fn insert_fork(
    conn: &Connection,
    recovery: &str,
    fork: &str,
    parent: Option<&(String, u64)>,
) -> rusqlite::Result<()> {
    let (run, checkpoint) = parent.map_or(("", 0), |(r, n)| (r.as_str(), *n as i64));
    conn.prepare_cached(
        "INSERT INTO recovery_forks (fork, recovery, run, checkpoint) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (fork) DO NOTHING",
    )?
    .execute(params![fork, recovery, run, checkpoint])?;
    Ok(())
}

impl Recoveries for SqliteStore {
    fn begin_recovery(&self, new: &NewRecovery, ttl: Duration) -> Result<RecoveryBegun> {
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let held = tx
            .prepare_cached(&format!(
                "{ROW} WHERE flow = ?1 AND ended_ms IS NULL AND expires_ms > ?2 LIMIT 1"
            ))?
            .query_row(params![new.flow, now], row(now))
            .optional()?;
        if let Some(held) = held {
            return Ok(RecoveryBegun::HeldBy(held));
        }
        tx.prepare_cached(
            "INSERT INTO recoveries (id, flow, program, who, started_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            new.id,
            new.flow,
            new.program,
            new.who,
            now,
            now.saturating_add(ms(ttl))
        ])?;
        tx.commit()?;
        Ok(RecoveryBegun::Holding)
    }

    fn renew_recovery(&self, id: &str, ttl: Duration) -> Result<bool> {
        let conn = self.side_connection()?;
        let now = now_ms();
        let n = conn
            .prepare_cached(
                "UPDATE recoveries SET expires_ms = ?2 WHERE id = ?1 AND ended_ms IS NULL",
            )?
            .execute(params![id, now.saturating_add(ms(ttl))])?;
        Ok(n == 1)
    }

    fn end_recovery(&self, id: &str, report: &str) -> Result<()> {
        let conn = self.side_connection()?;
        conn.prepare_cached(
            "UPDATE recoveries SET ended_ms = ?2, expires_ms = NULL, report = ?3 WHERE id = ?1",
        )?
        .execute(params![id, now_ms(), report])?;
        Ok(())
    }

    fn recoveries(&self, before_ms: Option<i64>, limit: u32) -> Result<Vec<RecoveryRow>> {
        let now = now_ms();
        self.with_reader(|c| {
            Ok(c.prepare_cached(&format!(
                "{ROW} WHERE started_ms < ?1 ORDER BY started_ms DESC, id DESC LIMIT ?2"
            ))?
            .query_map(
                params![before_ms.unwrap_or(i64::MAX), limit as i64],
                row(now),
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn recovery(&self, id: &str) -> Result<Option<(RecoveryRow, Vec<RecoveryFork>)>> {
        let now = now_ms();
        self.with_reader(|c| {
            let Some(r) = c
                .prepare_cached(&format!("{ROW} WHERE id = ?1"))?
                .query_row(params![id], row(now))
                .optional()?
            else {
                return Ok(None);
            };
            let forks = c
                .prepare_cached(
                    "SELECT fork, recovery, run, checkpoint FROM recovery_forks WHERE recovery = ?1 ORDER BY fork",
                )?
                .query_map(params![id], fork_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Some((r, forks)))
        })
    }

    fn recovery_of(&self, fork: &str) -> Result<Option<RecoveryFork>> {
        self.with_reader(|c| {
            Ok(c.prepare_cached(
                "SELECT fork, recovery, run, checkpoint FROM recovery_forks WHERE fork = ?1",
            )?
            .query_row(params![fork], fork_row)
            .optional()?)
        })
    }
}
