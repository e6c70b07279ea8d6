//! Run leases on Postgres (table `leases`, migration 0005): each operation
//! is one statement on a pooled connection, timed by the database's clock
//! (`clock_timestamp()`), so the servers' own clocks never decide who holds
//! a run. Expired leases are taken with `FOR UPDATE SKIP LOCKED`, so
//! servers scanning at once never wait on each other and never take the
//! same run.

use super::PostgresStore;
use crate::api::{LeaseClaim, LeaseDone, Leases};
use crate::error::{Error, Result};
use flow_abi::fact::RunId;
use std::time::Duration;

/// The database's clock in unix ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Leases for PostgresStore {
    fn claim_lease(&self, run: &RunId, holder: &str, ttl: Duration) -> Result<LeaseClaim> {
        let (run, holder, ttl) = (run.to_string(), holder.to_string(), ms(ttl));
        self.on_pool(move |conn| claim(conn, run, holder, ttl))
    }

    fn claim_lease_then(
        &self,
        run: &RunId,
        holder: &str,
        ttl: Duration,
        done: LeaseDone<LeaseClaim>,
    ) {
        let (run, holder, ttl) = (run.to_string(), holder.to_string(), ms(ttl));
        self.on_pool_then(move |conn| claim(conn, run, holder, ttl), done)
    }

    fn renew_leases(
        &self,
        holder: &str,
        leases: &[(RunId, u64)],
        ttl: Duration,
    ) -> Result<Vec<RunId>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let holder = holder.to_string();
        let runs: Vec<String> = leases.iter().map(|(r, _)| r.to_string()).collect();
        let epochs: Vec<i64> = leases.iter().map(|(_, e)| *e as i64).collect();
        let ttl = ms(ttl);
        let rows = self.on_pool(move |conn| async move {
            Ok(conn
                .query(
                    &format!(
                        "UPDATE leases l SET expires_ms = {NOW_MS} + $2
                         FROM unnest($3::text[], $4::bigint[]) AS t(run, epoch)
                         WHERE l.run = t.run AND l.epoch = t.epoch AND l.holder = $1
                         RETURNING l.run"
                    ),
                    &[&holder, &ttl, &runs, &epochs],
                )
                .await?)
        })?;
        let mut held = Vec::with_capacity(rows.len());
        for r in rows {
            held.push(RunId::parse(&r.try_get::<_, String>(0)?)?);
        }
        held.sort();
        Ok(held)
    }

    fn release_lease(&self, run: &RunId, holder: &str, epoch: u64) -> Result<()> {
        let (run, holder, epoch) = (run.to_string(), holder.to_string(), epoch as i64);
        self.on_pool(move |conn| release(conn, run, holder, epoch))
    }

    fn release_lease_then(&self, run: &RunId, holder: &str, epoch: u64, done: LeaseDone<()>) {
        let (run, holder, epoch) = (run.to_string(), holder.to_string(), epoch as i64);
        self.on_pool_then(move |conn| release(conn, run, holder, epoch), done)
    }

    fn claim_expired(&self, holder: &str, ttl: Duration, limit: u32) -> Result<Vec<(RunId, u64)>> {
        let (holder, ttl, limit) = (holder.to_string(), ms(ttl), i64::from(limit));
        let rows = self.on_pool(move |conn| async move {
            Ok(conn
                .query(
                    &format!(
                        "UPDATE leases SET holder = $1, epoch = epoch + 1, expires_ms = {NOW_MS} + $2
                         WHERE run IN (SELECT l.run FROM leases l JOIN runs r ON r.id = l.run
                            WHERE l.expires_ms <= {NOW_MS} AND r.state = 'running' AND r.outer_run IS NULL
                            ORDER BY l.expires_ms, l.run LIMIT $3
                            FOR UPDATE OF l SKIP LOCKED)
                         RETURNING run, epoch"
                    ),
                    &[&holder, &ttl, &limit],
                )
                .await?)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let epoch: i64 = r.try_get(1)?;
            out.push((RunId::parse(&r.try_get::<_, String>(0)?)?, epoch as u64));
        }
        out.sort();
        Ok(out)
    }
}

/// Claims `run`'s lease on `conn` ([`Leases::claim_lease`]).
async fn claim(
    conn: deadpool_postgres::Object,
    run: String,
    holder: String,
    ttl: i64,
) -> Result<LeaseClaim> {
    let claim = format!(
        "INSERT INTO leases (run, holder, epoch, expires_ms) VALUES ($1, $2, 1, {NOW_MS} + $3)
         ON CONFLICT (run) DO UPDATE SET holder = excluded.holder,
            epoch = leases.epoch + 1, expires_ms = excluded.expires_ms
         WHERE leases.expires_ms <= {NOW_MS} OR leases.holder = excluded.holder
         RETURNING epoch"
    );
    // A lease released between the two statements is claimed on the next
    // round.
    for _ in 0..3 {
        if let Some(row) = conn.query_opt(&claim, &[&run, &holder, &ttl]).await? {
            let epoch: i64 = row.try_get(0)?;
            return Ok(LeaseClaim::Held {
                epoch: epoch as u64,
            });
        }
        let other = conn
            .query_opt(
                &format!("SELECT holder, expires_ms - {NOW_MS} FROM leases WHERE run = $1"),
                &[&run],
            )
            .await?;
        if let Some(row) = other {
            return Ok(LeaseClaim::HeldBy {
                holder: row.try_get(0)?,
                expires_in_ms: row.try_get(1)?,
            });
        }
    }
    Err(Error::Conflict(format!(
        "the lease of {run} changes hands too often to claim"
    )))
}

/// Lets go of `run`'s lease of `epoch` on `conn` ([`Leases::release_lease`]).
async fn release(
    conn: deadpool_postgres::Object,
    run: String,
    holder: String,
    epoch: i64,
) -> Result<()> {
    // One statement: the run's state decides between handing the lease over
    // (still running) and removing it.
    conn.execute(
        "WITH driven AS (SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND state = 'running') AS running),
         handed AS (UPDATE leases SET expires_ms = 0
            WHERE run = $1 AND holder = $2 AND epoch = $3 AND (SELECT running FROM driven))
         DELETE FROM leases
         WHERE run = $1 AND holder = $2 AND epoch = $3 AND NOT (SELECT running FROM driven)",
        &[&run, &holder, &epoch],
    )
    .await?;
    Ok(())
}
