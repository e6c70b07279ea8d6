//! Run leases on SQLite (table `leases`, migration 0005). One process owns
//! a SQLite file's drives, so the run service does not ask for leases
//! there; they are implemented all the same (the same rules as Postgres,
//! the same conformance case), each operation one IMMEDIATE transaction on
//! a side connection, timed by this host's clock.

use super::{SqliteStore, now_ms};
use crate::api::{LeaseClaim, Leases};
use crate::error::Result;
use flow_abi::fact::RunId;
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use std::time::Duration;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Leases for SqliteStore {
    fn claim_lease(&self, run: &RunId, holder: &str, ttl: Duration) -> Result<LeaseClaim> {
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let granted: Option<i64> = tx
            .prepare_cached(
                "INSERT INTO leases (run, holder, epoch, expires_ms) VALUES (?1, ?2, 1, ?3)
                 ON CONFLICT (run) DO UPDATE SET holder = excluded.holder,
                    epoch = leases.epoch + 1, expires_ms = excluded.expires_ms
                 WHERE leases.expires_ms <= ?4 OR leases.holder = excluded.holder
                 RETURNING epoch",
            )?
            .query_row(
                params![run.as_str(), holder, now.saturating_add(ms(ttl)), now],
                |r| r.get(0),
            )
            .optional()?;
        let claim = match granted {
            Some(epoch) => LeaseClaim::Held {
                epoch: epoch as u64,
            },
            None => {
                let (holder, expires): (String, i64) = tx.query_row(
                    "SELECT holder, expires_ms FROM leases WHERE run = ?1",
                    params![run.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                LeaseClaim::HeldBy {
                    holder,
                    expires_in_ms: expires - now,
                }
            }
        };
        tx.commit()?;
        Ok(claim)
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
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let until = now_ms().saturating_add(ms(ttl));
        let mut held = Vec::new();
        {
            let mut st = tx.prepare_cached(
                "UPDATE leases SET expires_ms = ?1 WHERE run = ?2 AND holder = ?3 AND epoch = ?4",
            )?;
            for (run, epoch) in leases {
                if st.execute(params![until, run.as_str(), holder, *epoch as i64])? == 1 {
                    held.push(run.clone());
                }
            }
        }
        tx.commit()?;
        Ok(held)
    }

    fn release_lease(&self, run: &RunId, holder: &str, epoch: u64) -> Result<()> {
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let key = params![run.as_str(), holder, epoch as i64];
        tx.execute(
            "UPDATE leases SET expires_ms = 0 WHERE run = ?1 AND holder = ?2 AND epoch = ?3
             AND EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND state = 'running')",
            key,
        )?;
        tx.execute(
            "DELETE FROM leases WHERE run = ?1 AND holder = ?2 AND epoch = ?3
             AND NOT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND state = 'running')",
            key,
        )?;
        tx.commit()?;
        Ok(())
    }

    fn claim_expired(&self, holder: &str, ttl: Duration, limit: u32) -> Result<Vec<(RunId, u64)>> {
        let mut conn = self.side_connection()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let mut out = Vec::new();
        {
            // The IMMEDIATE transaction is the lock SKIP LOCKED gives on
            // Postgres: one claimer at a time.
            let mut st = tx.prepare_cached(
                "UPDATE leases SET holder = ?1, epoch = epoch + 1, expires_ms = ?2
                 WHERE run IN (SELECT l.run FROM leases l JOIN runs r ON r.id = l.run
                    WHERE l.expires_ms <= ?3 AND r.state = 'running' AND r.outer_run IS NULL
                    ORDER BY l.expires_ms, l.run LIMIT ?4)
                 RETURNING run, epoch",
            )?;
            let rows = st.query_map(
                params![holder, now.saturating_add(ms(ttl)), now, limit],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )?;
            for row in rows {
                let (run, epoch) = row?;
                out.push((RunId::parse(&run)?, epoch as u64));
            }
        }
        tx.commit()?;
        out.sort();
        Ok(out)
    }
}
