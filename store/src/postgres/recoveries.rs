//! The recoveries' record on Postgres (migration 0014), timed by the
//! database's clock as the leases are. Beginning a recovery takes a
//! transaction advisory lock on its flow, so two servers beginning one at
//! once see each other. A recovery's forks are written by the writer with
//! each fork's Start (`sql::write`).

use super::PostgresStore;
use crate::api::{
    NewRecovery, Recoveries, RecoveryBegun, RecoveryFork, RecoveryRow, RecoveryStatus,
};
use crate::error::Result;
use std::time::Duration;
use tokio_postgres::Row;

/// The database's clock in unix ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

const ROW: &str = "SELECT id, flow, program, who, started_ms, expires_ms, ended_ms, report, \
                   (extract(epoch from clock_timestamp()) * 1000)::bigint FROM recoveries";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn row(r: &Row) -> Result<RecoveryRow> {
    let (expires, ended): (Option<i64>, Option<i64>) = (r.try_get(5)?, r.try_get(6)?);
    Ok(RecoveryRow {
        id: r.try_get(0)?,
        flow: r.try_get(1)?,
        program: r.try_get(2)?,
        who: r.try_get(3)?,
        started_ms: r.try_get(4)?,
        ended_ms: ended,
        status: RecoveryStatus::of(ended, expires, r.try_get(8)?),
        report: r.try_get(7)?,
    })
}

fn fork_row(r: &Row) -> Result<RecoveryFork> {
    Ok(RecoveryFork {
        fork: r.try_get(0)?,
        recovery: r.try_get(1)?,
        run: r.try_get(2)?,
        checkpoint: r.try_get::<_, i64>(3)? as u64,
    })
}

impl Recoveries for PostgresStore {
    fn begin_recovery(&self, new: &NewRecovery, ttl: Duration) -> Result<RecoveryBegun> {
        let (new, ttl) = (new.clone(), ms(ttl));
        self.on_pool(move |mut conn| async move {
            let tx = conn.transaction().await?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('flowd-recovery:' || $1, 0))",
                &[&new.flow],
            )
            .await?;
            let held = tx
                .query_opt(
                    &format!(
                        "{ROW} WHERE flow = $1 AND ended_ms IS NULL AND expires_ms > {NOW_MS} LIMIT 1"
                    ),
                    &[&new.flow],
                )
                .await?;
            if let Some(held) = held {
                return Ok(RecoveryBegun::HeldBy(row(&held)?));
            }
            tx.execute(
                &format!(
                    "INSERT INTO recoveries (id, flow, program, who, started_ms, expires_ms)
                     VALUES ($1, $2, $3, $4, {NOW_MS}, {NOW_MS} + $5)"
                ),
                &[&new.id, &new.flow, &new.program, &new.who, &ttl],
            )
            .await?;
            tx.commit().await?;
            Ok(RecoveryBegun::Holding)
        })
    }

    fn renew_recovery(&self, id: &str, ttl: Duration) -> Result<bool> {
        let (id, ttl) = (id.to_string(), ms(ttl));
        self.on_pool(move |conn| async move {
            let n = conn
                .execute(
                    &format!(
                        "UPDATE recoveries SET expires_ms = {NOW_MS} + $2 WHERE id = $1 AND ended_ms IS NULL"
                    ),
                    &[&id, &ttl],
                )
                .await?;
            Ok(n == 1)
        })
    }

    fn end_recovery(&self, id: &str, report: &str) -> Result<()> {
        let (id, report) = (id.to_string(), report.to_string());
        self.on_pool(move |conn| async move {
            conn.execute(
                &format!(
                    "UPDATE recoveries SET ended_ms = {NOW_MS}, expires_ms = NULL, report = $2 WHERE id = $1"
                ),
                &[&id, &report],
            )
            .await?;
            Ok(())
        })
    }

    fn recoveries(&self, before_ms: Option<i64>, limit: u32) -> Result<Vec<RecoveryRow>> {
        let (before, limit) = (before_ms.unwrap_or(i64::MAX), limit as i64);
        self.on_pool(move |conn| async move {
            conn.query(
                &format!("{ROW} WHERE started_ms < $1 ORDER BY started_ms DESC, id DESC LIMIT $2"),
                &[&before, &limit],
            )
            .await?
            .iter()
            .map(row)
            .collect()
        })
    }

    fn recovery(&self, id: &str) -> Result<Option<(RecoveryRow, Vec<RecoveryFork>)>> {
        let id = id.to_string();
        self.on_pool(move |conn| async move {
            let Some(r) = conn
                .query_opt(&format!("{ROW} WHERE id = $1"), &[&id])
                .await?
            else {
                return Ok(None);
            };
            let forks = conn
                .query(
                    "SELECT fork, recovery, run, checkpoint FROM recovery_forks WHERE recovery = $1 ORDER BY fork",
                    &[&id],
                )
                .await?
                .iter()
                .map(fork_row)
                .collect::<Result<Vec<_>>>()?;
            Ok(Some((row(&r)?, forks)))
        })
    }

    fn recovery_of(&self, fork: &str) -> Result<Option<RecoveryFork>> {
        let fork = fork.to_string();
        self.on_pool(move |conn| async move {
            conn.query_opt(
                "SELECT fork, recovery, run, checkpoint FROM recovery_forks WHERE fork = $1",
                &[&fork],
            )
            .await?
            .as_ref()
            .map(fork_row)
            .transpose()
        })
    }
}
