//! The remote-worker queue on Postgres (tables `workers`, `worker_tools`,
//! `worker_calls`, migration 0006, and `worker_namespaces`, 0020; rules in
//! [`crate::workers`]): servers of
//! one database share it, so a call queued by the server driving its run
//! is handed to a worker connected to any of them, and the reply that
//! worker sends back is read by the driver.
//!
//! * Claims take rows `FOR UPDATE SKIP LOCKED`, so workers polling several
//!   servers at once never wait on each other and never get one call twice.
//! * Every write another server waits for NOTIFYs it on
//!   `flow_workers:<schema>` in its own statement or transaction (so it is
//!   delivered on commit, to every server's LISTEN connection): a call
//!   queued, queued again or cancelled (`q`: held polls look again), an
//!   outcome stored (`o <run> <call>`: its driver looks again), a worker
//!   gone (`*`: every driver looks again), each tagged with the store it
//!   came from so its own are ignored. Nobody polls for them; a slow
//!   safety look remains for a lost notification and for liveness.
//! * The small writes are pipelined (`quick!`): BEGIN, the statements and
//!   COMMIT in one round trip to the database.
//! * Liveness is the database's clock (`clock_timestamp()`), as for leases.
//! * Queue writes commit with `synchronous_commit = off` (`SET LOCAL`):
//!   visible to every server at once, made durable by the next synchronous
//!   commit — a call's next history fact (its Reply) is one, and it flushes
//!   the WAL they are in. A database crash can take a queue row the
//!   history does not depend on; the run, taken up again, settles such a
//!   call as the seed settles a call open at a crash (docs/deploy.md).

use super::PostgresStore;
use crate::error::Result;
use crate::namespace::Namespaces;
use crate::workers::*;
use flow_abi::fact::{CallId, RunId};
use serde_json::Value;
use std::time::Duration;

/// The database's clock in unix ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// Opens a transaction that commits without waiting for the WAL flush.
const BEGIN_QUICK: &str = "BEGIN; SET LOCAL synchronous_commit = off";

/// Runs `sql` with `params` in one transaction committed without waiting
/// for the WAL flush; returns the rows. Pipelined: the statement is
/// prepared first (once per connection), then BEGIN, the statement and
/// COMMIT go out together — one round trip, not four (tokio-postgres
/// sends requests in the order their futures are first polled, and
/// `join!` polls them in order). A statement that fails makes the COMMIT
/// a rollback; its error is the one returned.
macro_rules! quick {
    ($conn:expr, $sql:expr, $params:expr) => {{
        let conn = $conn;
        let st = conn.prepare_cached($sql).await?;
        let params: &[&(dyn tokio_postgres::types::ToSql + Sync)] = $params;
        let (begin, rows, commit) = futures_util::join!(
            conn.batch_execute(BEGIN_QUICK),
            conn.query(&st, params),
            conn.batch_execute("COMMIT")
        );
        begin?;
        let rows = rows?;
        commit?;
        rows
    }};
}

/// Where `($1, $2)` is, with workers live when heard from within `$3` ms.
fn state_sql() -> String {
    format!(
        "SELECT c.worker, c.resend, c.cancel, c.outcome,
            EXISTS (SELECT 1 FROM workers w WHERE w.id = c.worker AND w.seen_ms > {NOW_MS} - $3),
            EXISTS (SELECT 1 FROM worker_tools t JOIN workers w ON w.id = t.worker
                JOIN runs r ON r.id = c.run
                JOIN worker_namespaces n ON n.worker = w.id AND n.namespace IN ('*', r.namespace)
                WHERE t.tool = c.tool AND t.fingerprint = c.fingerprint AND w.seen_ms > {NOW_MS} - $3)
         FROM worker_calls c WHERE c.run = $1 AND c.call = $2"
    )
}

fn state_row(
    seal: &crate::seal::Sealer,
    run: &str,
    call: &str,
    r: &tokio_postgres::Row,
) -> Result<RemoteCallState> {
    let worker: Option<String> = r.try_get(0)?;
    let cancel: i16 = r.try_get(2)?;
    let outcome: Option<String> = r.try_get(3)?;
    Ok(match (outcome, worker) {
        (Some(o), worker) => RemoteCallState::Done {
            outcome: seal.open_worker(run, call, "outcome", o)?,
            worker,
        },
        (None, Some(worker)) => RemoteCallState::Sent {
            worker,
            live: r.try_get(4)?,
            resend: r.try_get(1)?,
            cancelled: cancel != 0,
        },
        (None, None) => RemoteCallState::Queued {
            served: r.try_get(5)?,
            cancelled: cancel != 0,
        },
    })
}

impl PostgresStore {
    fn queue_channel(&self) -> String {
        super::queue_notes::channel(&self.inner.schema)
    }
}

impl WorkerQueue for PostgresStore {
    fn observe_queue(&self, observer: QueueObserver) {
        self.inner.queue.add(observer);
    }

    fn register_worker(
        &self,
        id: &str,
        name: &str,
        owner: &str,
        namespaces: &Namespaces,
        tools: &[ServedTool],
    ) -> Result<()> {
        let (id, name, owner) = (id.to_string(), name.to_string(), owner.to_string());
        let namespaces = namespace_rows(namespaces);
        let names: Vec<String> = tools.iter().map(|t| t.tool.clone()).collect();
        let fps: Vec<String> = tools.iter().map(|t| t.fingerprint.clone()).collect();
        let resend: Vec<bool> = tools.iter().map(|t| t.resend).collect();
        self.on_pool(move |mut conn| async move {
            let tx = conn.transaction().await?;
            tx.execute(
                &format!(
                    "INSERT INTO workers (id, name, seen_ms, owner) VALUES ($1, $2, {NOW_MS}, $3)
                     ON CONFLICT (id) DO UPDATE SET name = excluded.name, seen_ms = excluded.seen_ms, owner = excluded.owner"
                ),
                &[&id, &name, &owner],
            )
            .await?;
            tx.execute("DELETE FROM worker_tools WHERE worker = $1", &[&id])
                .await?;
            tx.execute(
                "INSERT INTO worker_tools (worker, tool, fingerprint, resend)
                 SELECT $1, t.tool, t.fp, t.resend FROM unnest($2::text[], $3::text[], $4::bool[]) AS t(tool, fp, resend)
                 ON CONFLICT (worker, tool) DO UPDATE SET fingerprint = excluded.fingerprint, resend = excluded.resend",
                &[&id, &names, &fps, &resend],
            )
            .await?;
            tx.execute("DELETE FROM worker_namespaces WHERE worker = $1", &[&id])
                .await?;
            tx.execute(
                "INSERT INTO worker_namespaces (worker, namespace) SELECT $1, unnest($2::text[])",
                &[&id, &namespaces],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn worker_owner(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        let row = self.on_pool(move |conn| async move {
            Ok(conn
                .query_opt("SELECT owner FROM workers WHERE id = $1", &[&id])
                .await?)
        })?;
        row.map(|r| r.try_get(0)).transpose().map_err(Into::into)
    }

    fn touch_worker(&self, id: &str, within: Duration) -> Result<bool> {
        let (id, within) = (id.to_string(), millis(within));
        self.on_pool(move |conn| async move {
            let rows = quick!(
                conn,
                &format!(
                    "UPDATE workers SET seen_ms = {NOW_MS} WHERE id = $1 AND seen_ms > {NOW_MS} - $2 RETURNING id"
                ),
                &[&id, &within]
            );
            Ok(rows.len() == 1)
        })
    }

    fn remove_worker(&self, id: &str) -> Result<()> {
        let (id, chan, note) = (
            id.to_string(),
            self.queue_channel(),
            self.inner.queue.everyone(),
        );
        self.on_pool(move |conn| async move {
            conn.query(
                "WITH gone AS (UPDATE workers SET seen_ms = 0 WHERE id = $1 RETURNING id)
                 SELECT pg_notify($2, $3)::text FROM gone",
                &[&id, &chan, &note],
            )
            .await?;
            Ok(())
        })
    }

    fn live_workers(&self, within: Duration) -> Result<Vec<WorkerInfo>> {
        let within = millis(within);
        let rows = self.on_pool(move |conn| async move {
            Ok(conn
                .query(
                    &format!(
                        "SELECT w.id, w.name, {NOW_MS} - w.seen_ms, t.tool, t.fingerprint, t.resend,
                            ARRAY(SELECT n.namespace FROM worker_namespaces n WHERE n.worker = w.id ORDER BY n.namespace)
                         FROM workers w LEFT JOIN worker_tools t ON t.worker = w.id
                         WHERE w.seen_ms > {NOW_MS} - $1 ORDER BY w.id, t.tool"
                    ),
                    &[&within],
                )
                .await?)
        })?;
        let mut out: Vec<WorkerInfo> = Vec::new();
        for r in rows {
            let id: String = r.try_get(0)?;
            if out.last().is_none_or(|w| w.id != id) {
                out.push(WorkerInfo {
                    id,
                    name: r.try_get(1)?,
                    tools: Vec::new(),
                    seen_ms_ago: r.try_get::<_, i64>(2)?.max(0),
                    namespaces: namespaces_of(&r.try_get::<_, Vec<String>>(6)?)?,
                });
            }
            let tool: Option<String> = r.try_get(3)?;
            let fp: Option<String> = r.try_get(4)?;
            let resend: Option<bool> = r.try_get(5)?;
            if let (Some(w), Some(tool), Some(fingerprint)) = (out.last_mut(), tool, fp) {
                w.tools.push(ServedTool {
                    tool,
                    fingerprint,
                    resend: resend.unwrap_or(false),
                });
            }
        }
        Ok(out)
    }

    fn queue_call(&self, call: &RemoteCall, within: Duration) -> Result<RemoteCallState> {
        let c = call.clone();
        let args = self.inner.shared.seal.seal_worker(
            call.run.as_str(),
            call.call.as_str(),
            "args",
            flow_abi::json::canonical(&call.args),
        )?;
        let within_ms = millis(within);
        let begin = format!(
            "{BEGIN_QUICK}; SELECT pg_notify('{}', '{}')",
            self.queue_channel(),
            self.inner.queue.queued()
        );
        let row = self.on_pool(move |conn| async move {
            let run = c.run.to_string();
            // A new row, or a cancel or park of a call never sent
            // withdrawn; then where the call is, in the same transaction,
            // pipelined as `quick!` is. The note goes with the BEGIN (the
            // channel is a checked schema name, the origin digits and
            // dots: no quoting needed).
            let insert = conn
                .prepare_cached(&format!(
                    "INSERT INTO worker_calls (run, call, tool, fingerprint, args, queued_ms)
                     VALUES ($1, $2, $3, $4, $5, {NOW_MS})
                     ON CONFLICT (run, call) DO UPDATE SET cancel = 0, parked = FALSE
                        WHERE worker_calls.worker IS NULL AND worker_calls.outcome IS NULL"
                ))
                .await?;
            let state = conn.prepare_cached(&state_sql()).await?;
            let (row_params, state_params) = (
                [
                    &run as _,
                    &c.call.as_str() as _,
                    &c.tool as _,
                    &c.fingerprint as _,
                    &args as _,
                ],
                [&run as _, &c.call.as_str() as _, &within_ms as _],
            );
            let (begin, inserted, row, commit) = futures_util::join!(
                conn.batch_execute(&begin),
                conn.execute(&insert, &row_params),
                conn.query_opt(&state, &state_params),
                conn.batch_execute("COMMIT")
            );
            begin?;
            inserted?;
            let row = row?;
            commit?;
            Ok(row)
        })?;
        match row {
            Some(r) => state_row(
                &self.inner.shared.seal,
                call.run.as_str(),
                call.call.as_str(),
                &r,
            ),
            None => Err(crate::error::Error::Schema(
                "worker queue: a call queued is not there".into(),
            )),
        }
    }

    fn claim_calls(&self, worker: &str, limit: u32) -> Result<Claimed> {
        let (worker, limit) = (worker.to_string(), i64::from(limit));
        let (calls, cancels) = self.on_pool(move |conn| async move {
            // Pipelined as `quick!` is: one round trip.
            let claim = conn
                .prepare_cached(
                    "WITH picked AS (
                        SELECT c.run, c.call, t.resend FROM worker_calls c JOIN worker_tools t
                           ON t.worker = $1 AND t.tool = c.tool AND t.fingerprint = c.fingerprint
                        JOIN runs r ON r.id = c.run AND r.ending IS NULL
                        JOIN worker_namespaces n ON n.worker = $1 AND n.namespace IN ('*', r.namespace)
                        WHERE c.worker IS NULL AND c.outcome IS NULL AND c.cancel = 0 AND NOT c.parked
                        ORDER BY c.queued_ms, c.run, c.call LIMIT $2
                        FOR UPDATE OF c SKIP LOCKED)
                     UPDATE worker_calls w SET worker = $1, resend = picked.resend FROM picked
                     WHERE w.run = picked.run AND w.call = picked.call
                     RETURNING w.run, w.call, w.tool, w.fingerprint, w.args",
                )
                .await?;
            let told = conn
                .prepare_cached(
                    "UPDATE worker_calls SET cancel = 2 WHERE worker = $1 AND cancel = 1 RETURNING run, call",
                )
                .await?;
            let (claim_params, told_params) = ([&worker as _, &limit as _], [&worker as _]);
            let (begin, calls, cancels, commit) = futures_util::join!(
                conn.batch_execute(BEGIN_QUICK),
                conn.query(&claim, &claim_params),
                conn.query(&told, &told_params),
                conn.batch_execute("COMMIT")
            );
            begin?;
            let (calls, cancels) = (calls?, cancels?);
            commit?;
            Ok((calls, cancels))
        })?;
        let mut out = Claimed::default();
        for r in calls {
            let (run, call): (String, String) = (r.try_get(0)?, r.try_get(1)?);
            let args = self
                .inner
                .shared
                .seal
                .open_worker(&run, &call, "args", r.try_get(4)?)?;
            out.calls.push(RemoteCall {
                run: RunId::parse(&run)?,
                call: CallId::parse(&call)?,
                tool: r.try_get(2)?,
                fingerprint: r.try_get(3)?,
                args,
            });
        }
        for r in cancels {
            out.cancels
                .push((RunId::parse(r.try_get(0)?)?, CallId::parse(r.try_get(1)?)?));
        }
        out.calls
            .sort_by(|a, b| (&a.run, &a.call).cmp(&(&b.run, &b.call)));
        out.cancels.sort();
        Ok(out)
    }

    fn reply_call(
        &self,
        worker: &str,
        run: &RunId,
        call: &CallId,
        outcome: &Value,
    ) -> Result<bool> {
        let (worker, run, call) = (worker.to_string(), run.to_string(), call.to_string());
        let text = self.inner.shared.seal.seal_worker(
            &run,
            &call,
            "outcome",
            flow_abi::json::canonical(outcome),
        )?;
        let (chan, note) = (self.queue_channel(), self.inner.queue.settled(&run, &call));
        self.on_pool(move |conn| async move {
            let rows = quick!(
                conn,
                "WITH set AS (UPDATE worker_calls SET outcome = $1
                    WHERE run = $2 AND call = $3 AND worker = $4 AND outcome IS NULL RETURNING run)
                 SELECT pg_notify($5, $6)::text FROM set",
                &[&text, &run, &call, &worker, &chan, &note]
            );
            Ok(rows.len() == 1)
        })
    }

    fn reply_calls(&self, worker: &str, replies: &[(RunId, CallId, Value)]) -> Result<Vec<bool>> {
        // One statement for the batch (the round trips of one reply each
        // were most of a busy worker's cost); a call named twice keeps the
        // first reply, as one at a time would.
        let mut seen = std::collections::HashSet::new();
        let first: Vec<bool> = replies
            .iter()
            .map(|(run, call, _)| seen.insert((run.as_str(), call.as_str())))
            .collect();
        let (mut runs, mut calls, mut outcomes, mut notes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for ((run, call, outcome), _) in replies.iter().zip(&first).filter(|(_, f)| **f) {
            runs.push(run.to_string());
            calls.push(call.to_string());
            outcomes.push(self.inner.shared.seal.seal_worker(
                run.as_str(),
                call.as_str(),
                "outcome",
                flow_abi::json::canonical(outcome),
            )?);
            notes.push(self.inner.queue.settled(run.as_str(), call.as_str()));
        }
        let (worker, chan) = (worker.to_string(), self.queue_channel());
        let rows = self.on_pool(move |conn| async move {
            Ok(quick!(
                conn,
                "WITH r AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
                        AS r(run, call, outcome, note)),
                    set AS (UPDATE worker_calls c SET outcome = r.outcome FROM r
                        WHERE c.run = r.run AND c.call = r.call AND c.worker = $1 AND c.outcome IS NULL
                        RETURNING c.run, c.call, r.note)
                 SELECT run, call, pg_notify($6, note)::text FROM set",
                &[&worker, &runs, &calls, &outcomes, &notes, &chan]
            ))
        })?;
        let mut admitted = std::collections::HashSet::new();
        for r in rows {
            admitted.insert((r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?));
        }
        Ok(replies
            .iter()
            .zip(first)
            .map(|((run, call, _), first)| {
                first && admitted.contains(&(run.to_string(), call.to_string()))
            })
            .collect())
    }

    fn call_state(
        &self,
        run: &RunId,
        call: &CallId,
        within: Duration,
    ) -> Result<Option<RemoteCallState>> {
        let (run, call) = (run.to_string(), call.to_string());
        let (r, c, within) = (run.clone(), call.clone(), millis(within));
        let row = self.on_pool(move |conn| async move {
            Ok(conn.query_opt(&state_sql(), &[&r, &c, &within]).await?)
        })?;
        let seal = &self.inner.shared.seal;
        row.as_ref()
            .map(|r| state_row(seal, &run, &call, r))
            .transpose()
    }

    fn settle_call(
        &self,
        run: &RunId,
        call: &CallId,
        worker: Option<&str>,
        outcome: Option<&Value>,
    ) -> Result<bool> {
        let (run, call) = (run.to_string(), call.to_string());
        let worker = worker.map(str::to_string);
        let outcome = outcome
            .map(|o| {
                let text = flow_abi::json::canonical(o);
                self.inner
                    .shared
                    .seal
                    .seal_worker(&run, &call, "outcome", text)
            })
            .transpose()?;
        let chan = self.queue_channel();
        let (settled, queued) = (
            self.inner.queue.settled(&run, &call),
            self.inner.queue.queued(),
        );
        self.on_pool(move |conn| async move {
            let rows = match (outcome, &worker) {
                (Some(o), _) => quick!(
                    conn,
                    "WITH set AS (UPDATE worker_calls SET outcome = $4
                        WHERE run = $1 AND call = $2 AND worker IS NOT DISTINCT FROM $3 AND outcome IS NULL
                        RETURNING run)
                     SELECT pg_notify($5, $6)::text FROM set",
                    &[&run, &call, &worker, &o, &chan, &settled]
                ),
                (None, Some(_)) => quick!(
                    conn,
                    "WITH set AS (UPDATE worker_calls SET worker = NULL, resend = FALSE, cancel = 0
                        WHERE run = $1 AND call = $2 AND worker = $3 AND outcome IS NULL RETURNING run)
                     SELECT pg_notify($4, $5)::text FROM set",
                    &[&run, &call, &worker, &chan, &queued]
                ),
                (None, None) => Vec::new(),
            };
            Ok(rows.len() == 1)
        })
    }

    fn cancel_call(&self, run: &RunId, call: &CallId) -> Result<()> {
        let (run, call, chan) = (run.to_string(), call.to_string(), self.queue_channel());
        let note = self.inner.queue.queued();
        self.on_pool(move |conn| async move {
            quick!(
                conn,
                "WITH set AS (UPDATE worker_calls SET cancel = 1
                    WHERE run = $1 AND call = $2 AND cancel = 0 AND outcome IS NULL RETURNING run)
                 SELECT pg_notify($3, $4)::text FROM set",
                &[&run, &call, &chan, &note]
            );
            Ok(())
        })
    }

    fn park_calls(&self, run: &RunId, call: Option<&CallId>) -> Result<u64> {
        let (run, call) = (run.to_string(), call.map(CallId::to_string));
        self.on_pool(move |conn| async move {
            let rows = quick!(
                conn,
                "UPDATE worker_calls SET parked = TRUE
                 WHERE run = $1 AND ($2::text IS NULL OR call = $2) AND worker IS NULL AND outcome IS NULL
                 RETURNING run",
                &[&run, &call]
            );
            Ok(rows.len() as u64)
        })
    }

    fn parked_runs(&self, within: Duration, limit: u32) -> Result<Vec<RunId>> {
        let (within, limit) = (millis(within), i64::from(limit));
        let rows = self.on_pool(move |conn| async move {
            Ok(conn
                .query(
                    &format!(
                        "SELECT DISTINCT c.run FROM worker_calls c JOIN runs r ON r.id = c.run
                         WHERE c.parked AND c.worker IS NULL AND c.outcome IS NULL AND c.cancel = 0 AND r.state = 'paused'
                           AND EXISTS (SELECT 1 FROM worker_tools t JOIN workers w ON w.id = t.worker
                              JOIN worker_namespaces n ON n.worker = w.id AND n.namespace IN ('*', r.namespace)
                              WHERE t.tool = c.tool AND t.fingerprint = c.fingerprint AND w.seen_ms > {NOW_MS} - $1)
                         ORDER BY c.run LIMIT $2"
                    ),
                    &[&within, &limit],
                )
                .await?)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(RunId::parse(&r.try_get::<_, String>(0)?)?);
        }
        Ok(out)
    }

    fn sweep_workers(&self, forget: Duration) -> Result<u64> {
        let forget = millis(forget);
        self.on_pool(move |mut conn| async move {
            let tx = conn.transaction().await?;
            let calls = tx
                .execute(
                    "DELETE FROM worker_calls c USING runs r WHERE r.id = c.run AND r.ending IS NOT NULL",
                    &[],
                )
                .await?;
            let tools = tx
                .execute(
                    &format!(
                        "DELETE FROM worker_tools WHERE worker IN (SELECT id FROM workers WHERE seen_ms <= {NOW_MS} - $1)"
                    ),
                    &[&forget],
                )
                .await?;
            tx.execute(
                &format!(
                    "DELETE FROM worker_namespaces WHERE worker IN (SELECT id FROM workers WHERE seen_ms <= {NOW_MS} - $1)"
                ),
                &[&forget],
            )
            .await?;
            let workers = tx
                .execute(
                    &format!("DELETE FROM workers WHERE seen_ms <= {NOW_MS} - $1"),
                    &[&forget],
                )
                .await?;
            tx.commit().await?;
            Ok(calls + tools + workers)
        })
    }
}
