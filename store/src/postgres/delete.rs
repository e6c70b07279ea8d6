//! Deleting a run on Postgres (issue 40 item 1, docs/custody.md), in one
//! transaction on a pooled connection, beside the writer.
//!
//! Several servers write one database, so a deletion must not remove a
//! blob that another transaction is about to reference. Writers take a
//! transaction advisory lock per blob, shared, before they insert the blob
//! and its references (`sql`); a deletion takes the same locks exclusive,
//! in key order, before it looks for other references. Once it holds them,
//! every writer that could reference one of those blobs has committed (its
//! references are visible to the deletion's next statement: READ COMMITTED
//! takes a snapshot per statement) or waits until the deletion commits (and
//! then writes the blob again). The run's own row is locked first (`FOR
//! UPDATE`), as the writer's batches lock it, so an append to the run being
//! deleted is either in before the deletion or refused after it.

use super::{PostgresStore, blob_locks};
use crate::api::*;
use crate::error::{Error, Result};
use crate::hash::hash_text;
use flow_abi::fact::RunId;
use std::collections::{HashMap, HashSet};

/// The database's clock in unix ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

fn deleted_row(r: &tokio_postgres::Row) -> Result<Deleted> {
    let state: String = r.try_get(2)?;
    let hash: Vec<u8> = r.try_get(4)?;
    let hash: [u8; 32] = hash.try_into().unwrap_or([0; 32]);
    Ok(Deleted {
        seq: r.try_get::<_, i64>(0)? as u64,
        run: r.try_get(1)?,
        state: RunState::parse(&state).unwrap_or(RunState::Halted),
        head: FactRef {
            n: r.try_get::<_, i64>(3)? as u64,
            hash: hash_text(&hash),
        },
        who: r.try_get(5)?,
        at_ms: r.try_get(6)?,
        facts: r.try_get::<_, i64>(7)? as u64,
        blobs_removed: r.try_get::<_, i64>(8)? as u64,
    })
}

/// A run a batch deletes: its id, key, state and head.
struct Going {
    id: String,
    key: i64,
    state: RunState,
    last_n: i64,
    last_hash: Vec<u8>,
}

/// Deletes `ids` in one transaction (one run's, or a sweeper's batch):
/// the rows locked in id order, the blobs' locks taken exclusive in key
/// order in one statement ([`blob_locks`]), and one COMMIT. An unknown or (without force) driven run is refused on
/// its own, answered in order; a failed statement fails the whole batch.
async fn delete_batch(
    mut conn: deadpool_postgres::Object,
    ids: Vec<String>,
    how: Deletion,
) -> Result<Vec<Result<Deleted>>> {
    let tx = conn.transaction().await?;
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    let rows = tx
        .query(
            &format!(
                "SELECT r.id, r.key, r.state, r.last_n, r.last_hash, {NOW_MS},
                        (SELECT expires_ms FROM leases WHERE run = r.id)
                 FROM runs r WHERE r.id = ANY($1::text[]) ORDER BY r.id FOR UPDATE"
            ),
            &[&sorted],
        )
        .await?;
    let mut at_ms = 0i64;
    let mut found: HashMap<String, (Going, Option<i64>)> = HashMap::new();
    for r in &rows {
        at_ms = r.try_get(5)?;
        let state: String = r.try_get(2)?;
        let g = Going {
            id: r.try_get(0)?,
            key: r.try_get(1)?,
            state: RunState::parse(&state).unwrap_or(RunState::Halted),
            last_n: r.try_get(3)?,
            last_hash: r.try_get(4)?,
        };
        found.insert(g.id.clone(), (g, r.try_get(6)?));
    }
    // Each asked id: going (its index into `going`) or refused.
    let mut going: Vec<Going> = Vec::new();
    let mut answers: Vec<Result<usize>> = Vec::new();
    for id in &ids {
        let Some((g, lease)) = found.remove(id) else {
            answers.push(Err(Error::UnknownRun(id.clone())));
            continue;
        };
        let why = if how.force {
            None
        } else if g.state == RunState::Running {
            Some("running")
        } else if lease.is_some_and(|e| e > at_ms) {
            Some("leased by a server")
        } else {
            None
        };
        match why {
            Some(why) => answers.push(Err(Error::Active {
                run: id.clone(),
                why: why.into(),
            })),
            None => {
                answers.push(Ok(going.len()));
                going.push(g);
            }
        }
    }
    let keys: Vec<i64> = going.iter().map(|g| g.key).collect();
    let ids_going: Vec<&str> = going.iter().map(|g| g.id.as_str()).collect();
    let refs: Vec<(i64, Vec<u8>)> = tx
        .query(
            "SELECT run_key, hash FROM blob_refs WHERE run_key = ANY($1::int8[])",
            &[&keys],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_>>()?;
    let mut hashes: Vec<Vec<u8>> = refs.iter().map(|(_, h)| h.clone()).collect();
    hashes.sort();
    hashes.dedup();
    blob_locks::lock_exclusive(&tx, &hashes).await?;
    tx.execute(
        "DELETE FROM blob_refs WHERE run_key = ANY($1::int8[])",
        &[&keys],
    )
    .await?;
    tx.execute(
        "DELETE FROM holes WHERE run_key = ANY($1::int8[])",
        &[&keys],
    )
    .await?;
    let removed: HashSet<Vec<u8>> = tx
        .query(
            "DELETE FROM blobs b WHERE b.hash = ANY($1::bytea[])
               AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.hash = b.hash)
             RETURNING b.hash",
            &[&hashes],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let mut facts: HashMap<i64, i64> = HashMap::new();
    for r in tx
        .query(
            "DELETE FROM facts WHERE run_key = ANY($1::int8[]) RETURNING run_key",
            &[&keys],
        )
        .await?
    {
        *facts.entry(r.try_get(0)?).or_default() += 1;
    }
    tx.execute(
        "DELETE FROM host_records WHERE run_key = ANY($1::int8[])",
        &[&keys],
    )
    .await?;
    for table in ["run_attrs", "leases", "worker_calls", "waiting_calls"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE run = ANY($1::text[])"),
            &[&ids_going],
        )
        .await?;
    }
    tx.execute("DELETE FROM runs WHERE key = ANY($1::int8[])", &[&keys])
        .await?;
    // A removed blob is counted for the first deleted run that named it.
    let mut counted: HashSet<&[u8]> = HashSet::new();
    let mut gone: HashMap<i64, i64> = HashMap::new();
    for (k, h) in &refs {
        if removed.contains(h) && counted.insert(h) {
            *gone.entry(*k).or_default() += 1;
        }
    }
    let mut done: Vec<Deleted> = Vec::with_capacity(going.len());
    for g in &going {
        let (f, b) = (
            facts.get(&g.key).copied().unwrap_or(0),
            gone.get(&g.key).copied().unwrap_or(0),
        );
        let seq: i64 = tx
            .query_one(
                "INSERT INTO deletions (run, state, head_n, head_hash, who, at_ms, facts, blobs_removed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq",
                &[&g.id, &g.state.as_str(), &g.last_n, &g.last_hash, &how.who, &at_ms, &f, &b],
            )
            .await?
            .try_get(0)?;
        let hash: [u8; 32] = g.last_hash.clone().try_into().unwrap_or([0; 32]);
        done.push(Deleted {
            seq: seq as u64,
            run: g.id.clone(),
            state: g.state,
            head: FactRef {
                n: g.last_n as u64,
                hash: hash_text(&hash),
            },
            who: how.who.clone(),
            at_ms,
            facts: f as u64,
            blobs_removed: b as u64,
        });
    }
    tx.commit().await?;
    Ok(answers
        .into_iter()
        .map(|a| a.map(|i| done[i].clone()))
        .collect())
}

impl DeleteRuns for PostgresStore {
    fn delete_run(&self, run: &RunId, how: &Deletion) -> Result<Deleted> {
        let (ids, how) = (vec![run.to_string()], how.clone());
        self.on_pool(move |conn| delete_batch(conn, ids, how))?
            .pop()
            .unwrap_or_else(|| Err(Error::UnknownRun(run.to_string())))
    }

    fn delete_runs(&self, runs: &[RunId], how: &Deletion) -> Vec<Result<Deleted>> {
        let (ids, how) = (
            runs.iter().map(RunId::to_string).collect::<Vec<_>>(),
            how.clone(),
        );
        let n = ids.len();
        match self.on_pool(move |conn| delete_batch(conn, ids, how)) {
            Ok(out) => out,
            Err(e) => {
                let msg = e.to_string();
                (0..n)
                    .map(|_| Err(Error::CommitFailed(msg.clone())))
                    .collect()
            }
        }
    }

    fn deletions(&self, after: u64, limit: u32) -> Result<Vec<Deleted>> {
        let (after, limit) = (after as i64, limit as i64);
        self.on_pool(move |conn| async move {
            conn.query(
                "SELECT seq, run, state, head_n, head_hash, who, at_ms, facts, blobs_removed
                 FROM deletions WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &limit],
            )
            .await?
            .iter()
            .map(deleted_row)
            .collect()
        })
    }

    fn expired_runs(&self, q: &ExpiredQuery) -> Result<Vec<RunId>> {
        let q = q.clone();
        self.on_pool(move |conn| async move {
            let limit = q.limit as i64;
            conn.query(
                "SELECT id FROM runs
                 WHERE state = $1 AND state_ms < $2
                   AND ($3::text IS NULL OR flow_id = $3)
                   AND (flow_id IS NULL OR NOT (flow_id = ANY($4::text[])))
                 ORDER BY state_ms LIMIT $5",
                &[
                    &q.state.as_str(),
                    &q.before_ms,
                    &q.flow,
                    &q.except_flows,
                    &limit,
                ],
            )
            .await?
            .iter()
            .map(|r| {
                let id: String = r.try_get(0)?;
                RunId::parse(&id).map_err(Error::from)
            })
            .collect()
        })
    }
}
