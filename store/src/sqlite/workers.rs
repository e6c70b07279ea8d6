//! The remote-worker queue on SQLite (tables `workers`, `worker_tools`,
//! `worker_calls`, migration 0006, and `worker_namespaces`, 0020; rules
//! in [`crate::workers`]).
//!
//! Writes go through the queue's own writer (`queue`: one thread, one
//! connection, group commit; a call through a worker makes three of them:
//! queued, claimed, answered), so SQLite's write lock is the claim's lock.
//! That connection runs at `synchronous = NORMAL`: its commits survive a
//! crash of the process (WAL), and become durable on disk with the next
//! commit of the history writer, which syncs the WAL they are in — and a
//! call's next history fact (its Reply) always follows them. What a power
//! loss can take is a queue row the history does not depend on: a run
//! taken up again finds such a call without a row and settles it as the
//! seed settles a call open at a crash (docs/deploy.md "Workers").
//! Reads use the store's read pool.

use super::{SqliteStore, now_ms};
use crate::error::{Error, Result};
use crate::namespace::Namespaces;
use crate::seal::Sealer;
use crate::workers::*;
use flow_abi::fact::{CallId, RunId};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::time::Duration;

impl SqliteStore {
    /// Runs `f` in the queue writer's next batch (see `queue`); `now` is
    /// this host's clock.
    fn queue_write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, i64) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.inner.queue.write(&self.inner.path, f)
    }

    fn queue_read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.with_reader(|c| f(c))
    }
}

fn remote_call(
    seal: &Sealer,
    run: String,
    call: String,
    tool: String,
    fp: String,
    args: String,
) -> Result<RemoteCall> {
    Ok(RemoteCall {
        args: seal.open_worker(&run, &call, "args", args)?,
        run: RunId::parse(&run)?,
        call: CallId::parse(&call)?,
        tool,
        fingerprint: fp,
    })
}

/// Where `(run, call)` is, with workers live when heard from after
/// `since` (ms).
fn state_of(
    c: &Connection,
    seal: &Sealer,
    run: &RunId,
    call: &CallId,
    since: i64,
) -> Result<Option<RemoteCallState>> {
    let row = c
        .prepare_cached(
            "SELECT c.worker, c.resend, c.cancel, c.outcome,
                EXISTS (SELECT 1 FROM workers w WHERE w.id = c.worker AND w.seen_ms > ?3),
                EXISTS (SELECT 1 FROM worker_tools t JOIN workers w ON w.id = t.worker
                    JOIN runs r ON r.id = c.run
                    JOIN worker_namespaces n ON n.worker = w.id AND n.namespace IN ('*', r.namespace)
                    WHERE t.tool = c.tool AND t.fingerprint = c.fingerprint AND w.seen_ms > ?3)
             FROM worker_calls c WHERE c.run = ?1 AND c.call = ?2",
        )?
        .query_row(params![run.as_str(), call.as_str(), since], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, bool>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, bool>(5)?,
            ))
        })
        .optional()?;
    let Some((worker, resend, cancel, outcome, live, served)) = row else {
        return Ok(None);
    };
    Ok(Some(match (outcome, worker) {
        (Some(o), worker) => RemoteCallState::Done {
            outcome: seal.open_worker(run.as_str(), call.as_str(), "outcome", o)?,
            worker,
        },
        (None, Some(worker)) => RemoteCallState::Sent {
            worker,
            live,
            resend,
            cancelled: cancel != 0,
        },
        (None, None) => RemoteCallState::Queued {
            served,
            cancelled: cancel != 0,
        },
    }))
}

impl WorkerQueue for SqliteStore {
    fn observe_queue(&self, _: QueueObserver) {}

    fn register_worker(
        &self,
        id: &str,
        name: &str,
        owner: &str,
        namespaces: &Namespaces,
        tools: &[ServedTool],
    ) -> Result<()> {
        let (id, name, owner, tools) = (
            id.to_string(),
            name.to_string(),
            owner.to_string(),
            tools.to_vec(),
        );
        let namespaces = namespace_rows(namespaces);
        self.queue_write(move |tx, now| {
            tx.execute(
                "INSERT INTO workers (id, name, seen_ms, owner) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, seen_ms = excluded.seen_ms, owner = excluded.owner",
                params![id, name, now, owner],
            )?;
            tx.execute("DELETE FROM worker_tools WHERE worker = ?1", params![id])?;
            let mut st = tx.prepare_cached(
                "INSERT INTO worker_tools (worker, tool, fingerprint, resend) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (worker, tool) DO UPDATE SET fingerprint = excluded.fingerprint, resend = excluded.resend",
            )?;
            for t in &tools {
                st.execute(params![id, t.tool, t.fingerprint, t.resend])?;
            }
            tx.execute("DELETE FROM worker_namespaces WHERE worker = ?1", params![id])?;
            let mut st = tx.prepare_cached(
                "INSERT INTO worker_namespaces (worker, namespace) VALUES (?1, ?2)",
            )?;
            for n in &namespaces {
                st.execute(params![id, n])?;
            }
            Ok(())
        })
    }

    fn worker_owner(&self, id: &str) -> Result<Option<String>> {
        self.queue_read(|c| {
            Ok(c.prepare_cached("SELECT owner FROM workers WHERE id = ?1")?
                .query_row(params![id], |r| r.get(0))
                .optional()?)
        })
    }

    fn touch_worker(&self, id: &str, within: Duration) -> Result<bool> {
        let id = id.to_string();
        self.queue_write(move |tx, now| {
            let n = tx.execute(
                "UPDATE workers SET seen_ms = ?1 WHERE id = ?2 AND seen_ms > ?3",
                params![now, id, now - millis(within)],
            )?;
            Ok(n == 1)
        })
    }

    fn remove_worker(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.queue_write(move |tx, _| {
            tx.execute("UPDATE workers SET seen_ms = 0 WHERE id = ?1", params![id])?;
            Ok(())
        })
    }

    fn live_workers(&self, within: Duration) -> Result<Vec<WorkerInfo>> {
        self.queue_read(|c| {
            let now = now_ms();
            let mut st = c.prepare_cached(
                "SELECT w.id, w.name, w.seen_ms, t.tool, t.fingerprint, t.resend
                 FROM workers w LEFT JOIN worker_tools t ON t.worker = w.id
                 WHERE w.seen_ms > ?1 ORDER BY w.id, t.tool",
            )?;
            let rows = st.query_map(params![now - millis(within)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<bool>>(5)?,
                ))
            })?;
            let mut out: Vec<WorkerInfo> = Vec::new();
            let mut served = c.prepare_cached(
                "SELECT namespace FROM worker_namespaces WHERE worker = ?1 ORDER BY namespace",
            )?;
            for row in rows {
                let (id, name, seen, tool, fp, resend) = row?;
                if out.last().is_none_or(|w| w.id != id) {
                    let rows = served
                        .query_map(params![id], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    out.push(WorkerInfo {
                        id,
                        name,
                        tools: Vec::new(),
                        seen_ms_ago: (now - seen).max(0),
                        namespaces: namespaces_of(&rows)?,
                    });
                }
                if let (Some(w), Some(tool), Some(fingerprint)) = (out.last_mut(), tool, fp) {
                    w.tools.push(ServedTool {
                        tool,
                        fingerprint,
                        resend: resend.unwrap_or(false),
                    });
                }
            }
            Ok(out)
        })
    }

    fn queue_call(&self, call: &RemoteCall, within: Duration) -> Result<RemoteCallState> {
        let seal = self.inner.seal.clone();
        let args = seal.seal_worker(
            call.run.as_str(),
            call.call.as_str(),
            "args",
            flow_abi::json::canonical(&call.args),
        )?;
        let call = call.clone();
        self.queue_write(move |tx, now| {
            let n = tx.execute(
                "INSERT INTO worker_calls (run, call, tool, fingerprint, args, queued_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (run, call) DO NOTHING",
                params![
                    call.run.as_str(),
                    call.call.as_str(),
                    call.tool,
                    call.fingerprint,
                    args,
                    now
                ],
            )?;
            if n == 0 {
                // Queued again: a cancel or park of a call never sent is
                // withdrawn.
                tx.execute(
                    "UPDATE worker_calls SET cancel = 0, parked = 0
                     WHERE run = ?1 AND call = ?2 AND worker IS NULL AND outcome IS NULL",
                    params![call.run.as_str(), call.call.as_str()],
                )?;
            }
            state_of(tx, &seal, &call.run, &call.call, now - millis(within))?
                .ok_or_else(|| Error::Schema("worker queue: a call queued is not there".into()))
        })
    }

    fn claim_calls(&self, worker: &str, limit: u32) -> Result<Claimed> {
        // A claim that finds nothing takes no write lock.
        let any: bool = self.queue_read(|c| {
            Ok(c.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM worker_calls c JOIN worker_tools t
                    ON t.worker = ?1 AND t.tool = c.tool AND t.fingerprint = c.fingerprint
                    JOIN runs r ON r.id = c.run AND r.ending IS NULL
                    JOIN worker_namespaces n ON n.worker = ?1 AND n.namespace IN ('*', r.namespace)
                    WHERE c.worker IS NULL AND c.outcome IS NULL AND c.cancel = 0 AND c.parked = 0)
                 OR EXISTS (SELECT 1 FROM worker_calls WHERE worker = ?1 AND cancel = 1)",
            )?
            .query_row(params![worker], |r| r.get(0))?)
        })?;
        if !any {
            return Ok(Claimed::default());
        }
        let (worker, seal) = (worker.to_string(), self.inner.seal.clone());
        self.queue_write(move |tx, _| {
            let mut out = Claimed::default();
            {
                let mut st = tx.prepare_cached(
                    "UPDATE worker_calls SET worker = ?1,
                        resend = (SELECT t.resend FROM worker_tools t WHERE t.worker = ?1 AND t.tool = worker_calls.tool)
                     WHERE (run, call) IN (SELECT c.run, c.call FROM worker_calls c JOIN worker_tools t
                        ON t.worker = ?1 AND t.tool = c.tool AND t.fingerprint = c.fingerprint
                        JOIN runs r ON r.id = c.run AND r.ending IS NULL
                        JOIN worker_namespaces n ON n.worker = ?1 AND n.namespace IN ('*', r.namespace)
                        WHERE c.worker IS NULL AND c.outcome IS NULL AND c.cancel = 0 AND c.parked = 0
                        ORDER BY c.queued_ms, c.run, c.call LIMIT ?2)
                     RETURNING run, call, tool, fingerprint, args",
                )?;
                let rows = st.query_map(params![worker, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get::<_, String>(4)?))
                })?;
                for row in rows {
                    let (run, call, tool, fp, args) = row?;
                    out.calls.push(remote_call(&seal, run, call, tool, fp, args)?);
                }
            }
            {
                let mut st = tx.prepare_cached(
                    "UPDATE worker_calls SET cancel = 2 WHERE worker = ?1 AND cancel = 1
                     RETURNING run, call",
                )?;
                let rows = st.query_map(params![worker], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })?;
                for row in rows {
                    let (run, call) = row?;
                    out.cancels.push((RunId::parse(&run)?, CallId::parse(&call)?));
                }
            }
            // RETURNING order is not the subquery's.
            out.calls.sort_by(|a, b| (&a.run, &a.call).cmp(&(&b.run, &b.call)));
            out.cancels.sort();
            Ok(out)
        })
    }

    fn reply_call(
        &self,
        worker: &str,
        run: &RunId,
        call: &CallId,
        outcome: &Value,
    ) -> Result<bool> {
        let text = flow_abi::json::canonical(outcome);
        let text = self
            .inner
            .seal
            .seal_worker(run.as_str(), call.as_str(), "outcome", text)?;
        let (worker, run, call) = (worker.to_string(), run.clone(), call.to_string());
        self.queue_write(move |tx, _| {
            let n = tx.execute(
                "UPDATE worker_calls SET outcome = ?1
                 WHERE run = ?2 AND call = ?3 AND worker = ?4 AND outcome IS NULL",
                params![text, run.as_str(), call, worker],
            )?;
            Ok(n == 1)
        })
    }

    fn call_state(
        &self,
        run: &RunId,
        call: &CallId,
        within: Duration,
    ) -> Result<Option<RemoteCallState>> {
        self.queue_read(|c| state_of(c, &self.inner.seal, run, call, now_ms() - millis(within)))
    }

    fn settle_call(
        &self,
        run: &RunId,
        call: &CallId,
        worker: Option<&str>,
        outcome: Option<&Value>,
    ) -> Result<bool> {
        let (run, call, worker) = (run.clone(), call.to_string(), worker.map(str::to_string));
        let outcome = outcome
            .map(|o| {
                let text = flow_abi::json::canonical(o);
                self.inner
                    .seal
                    .seal_worker(run.as_str(), &call, "outcome", text)
            })
            .transpose()?;
        self.queue_write(move |tx, _| {
            let key = (run.as_str(), call.as_str(), worker.as_deref());
            let n = match &outcome {
                Some(o) => tx.execute(
                    "UPDATE worker_calls SET outcome = ?4
                     WHERE run = ?1 AND call = ?2 AND worker IS ?3 AND outcome IS NULL",
                    params![key.0, key.1, key.2, o],
                )?,
                None if worker.is_some() => tx.execute(
                    "UPDATE worker_calls SET worker = NULL, resend = 0, cancel = 0
                     WHERE run = ?1 AND call = ?2 AND worker = ?3 AND outcome IS NULL",
                    params![key.0, key.1, key.2],
                )?,
                None => 0,
            };
            Ok(n == 1)
        })
    }

    fn cancel_call(&self, run: &RunId, call: &CallId) -> Result<()> {
        let (run, call) = (run.clone(), call.to_string());
        self.queue_write(move |tx, _| {
            tx.execute(
                "UPDATE worker_calls SET cancel = 1
                 WHERE run = ?1 AND call = ?2 AND cancel = 0 AND outcome IS NULL",
                params![run.as_str(), call],
            )?;
            Ok(())
        })
    }

    fn park_calls(&self, run: &RunId, call: Option<&CallId>) -> Result<u64> {
        let (run, call) = (run.clone(), call.map(CallId::to_string));
        self.queue_write(move |tx, _| {
            let n = tx.execute(
                "UPDATE worker_calls SET parked = 1
                 WHERE run = ?1 AND (?2 IS NULL OR call = ?2) AND worker IS NULL AND outcome IS NULL",
                params![run.as_str(), call],
            )?;
            Ok(n as u64)
        })
    }

    fn parked_runs(&self, within: Duration, limit: u32) -> Result<Vec<RunId>> {
        self.queue_read(|c| {
            let mut st = c.prepare_cached(
                "SELECT DISTINCT c.run FROM worker_calls c JOIN runs r ON r.id = c.run
                 WHERE c.parked = 1 AND c.worker IS NULL AND c.outcome IS NULL AND c.cancel = 0 AND r.state = 'paused'
                   AND EXISTS (SELECT 1 FROM worker_tools t JOIN workers w ON w.id = t.worker
                      JOIN worker_namespaces n ON n.worker = w.id AND n.namespace IN ('*', r.namespace)
                      WHERE t.tool = c.tool AND t.fingerprint = c.fingerprint AND w.seen_ms > ?1)
                 ORDER BY c.run LIMIT ?2",
            )?;
            let rows = st.query_map(params![now_ms() - millis(within), limit], |r| {
                r.get::<_, String>(0)
            })?;
            let mut out = Vec::new();
            for r in rows {
                out.push(RunId::parse(&r?)?);
            }
            Ok(out)
        })
    }

    fn sweep_workers(&self, forget: Duration) -> Result<u64> {
        self.queue_write(move |tx, now| {
            let calls = tx.execute(
                "DELETE FROM worker_calls WHERE run IN
                    (SELECT c.run FROM worker_calls c JOIN runs r ON r.id = c.run WHERE r.ending IS NOT NULL)",
                [],
            )?;
            let before = now - millis(forget);
            let tools = tx.execute(
                "DELETE FROM worker_tools WHERE worker IN (SELECT id FROM workers WHERE seen_ms <= ?1)",
                params![before],
            )?;
            tx.execute(
                "DELETE FROM worker_namespaces WHERE worker IN (SELECT id FROM workers WHERE seen_ms <= ?1)",
                params![before],
            )?;
            let workers = tx.execute("DELETE FROM workers WHERE seen_ms <= ?1", params![before])?;
            Ok((calls + tools + workers) as u64)
        })
    }
}
