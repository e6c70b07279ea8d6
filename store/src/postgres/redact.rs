//! Redacting values of a run on Postgres (issue 40 item 2, docs/custody.md
//! "Holes"), in one transaction on a pooled connection, beside the writer.
//! The blobs the targets reach are found on a read snapshot first
//! (`crate::redact::reached`); then, as a deletion does (`delete`), the
//! run's row is locked (`FOR UPDATE`) and the blobs' advisory locks are
//! taken exclusive in key order before the run's references go and any
//! blob no other run references is deleted: a writer about to reference
//! one of them has committed (its reference is seen, the blob stays) or
//! waits and writes it again after the commit.
//!
//! A deleted row stays in the table's pages as a dead tuple until `VACUUM`
//! reclaims it, and in the WAL until it is recycled: flowd runs no VACUUM
//! (it would scan the table on every redaction); docs/custody.md says what
//! the operator runs.

use super::{PostgresStore, blob_locks};
use crate::api::*;
use crate::error::{Error, Result};
use crate::hash::hash_text;
use crate::redact::ValuePath;
use flow_abi::fact::RunId;

/// The database's clock in unix ms.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

fn redacted_row(r: &tokio_postgres::Row) -> Result<Redacted> {
    let list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    Ok(Redacted {
        seq: r.try_get::<_, i64>(0)? as u64,
        run: r.try_get(1)?,
        who: r.try_get(2)?,
        at_ms: r.try_get(3)?,
        paths: list(r.try_get(4)?),
        hashes: list(r.try_get(5)?),
        blobs_removed: r.try_get::<_, i64>(6)? as u64,
    })
}

/// Makes `hashes` holes of run `id` in one transaction on `conn`.
async fn redact_one(
    mut conn: deadpool_postgres::Object,
    id: String,
    hashes: Vec<[u8; 32]>,
    paths: Vec<String>,
    who: String,
) -> Result<Redacted> {
    let tx = conn.transaction().await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT key, state, {NOW_MS}, (SELECT expires_ms FROM leases WHERE run = r.id)
                 FROM runs r WHERE id = $1 FOR UPDATE"
            ),
            &[&id],
        )
        .await?
        .ok_or_else(|| Error::UnknownRun(id.clone()))?;
    let key: i64 = row.try_get(0)?;
    let state: String = row.try_get(1)?;
    let at_ms: i64 = row.try_get(2)?;
    let lease: Option<i64> = row.try_get(3)?;
    if RunState::parse(&state) == Some(RunState::Running) || lease.is_some_and(|e| e > at_ms) {
        return Err(Error::Redaction(format!(
            "run {id} is being driven: its driver holds its values; halt it first (`flow halt {id}`), or redact once it pauses or ends"
        )));
    }
    let raw: Vec<Vec<u8>> = hashes.iter().map(|h| h.to_vec()).collect();
    blob_locks::lock_exclusive(&tx, &raw).await?;
    tx.execute(
        "INSERT INTO holes (run_key, hash) SELECT $1, h FROM unnest($2::bytea[]) AS h ON CONFLICT DO NOTHING",
        &[&key, &raw],
    )
    .await?;
    tx.execute(
        "DELETE FROM blob_refs WHERE run_key = $1 AND hash = ANY($2::bytea[])",
        &[&key, &raw],
    )
    .await?;
    let blobs_removed = tx
        .execute(
            "DELETE FROM blobs b WHERE b.hash = ANY($1::bytea[])
               AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.hash = b.hash)",
            &[&raw],
        )
        .await? as i64;
    let texts: Vec<String> = hashes.iter().map(hash_text).collect();
    let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    let seq: i64 = tx
        .query_one(
            "INSERT INTO redactions (run, who, at_ms, paths, hashes, blobs_removed)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
            &[
                &id,
                &who,
                &at_ms,
                &json(&paths),
                &json(&texts),
                &blobs_removed,
            ],
        )
        .await?
        .try_get(0)?;
    tx.commit().await?;
    Ok(Redacted {
        seq: seq as u64,
        run: id,
        who,
        at_ms,
        paths,
        hashes: texts,
        blobs_removed: blobs_removed as u64,
    })
}

impl Redact for PostgresStore {
    fn redact(&self, run: &RunId, how: &Redaction) -> Result<Redacted> {
        let hashes = self.reached(run, &how.targets)?;
        let paths = how.targets.iter().map(|t| t.to_string()).collect();
        let (id, who) = (run.to_string(), how.who.clone());
        self.on_pool(move |conn| redact_one(conn, id, hashes, paths, who))
    }

    fn redactions(&self, after: u64, limit: u32) -> Result<Vec<Redacted>> {
        let (after, limit) = (after as i64, limit as i64);
        self.on_pool(move |conn| async move {
            conn.query(
                "SELECT seq, run, who, at_ms, paths, hashes, blobs_removed
                 FROM redactions WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &limit],
            )
            .await?
            .iter()
            .map(redacted_row)
            .collect()
        })
    }

    fn reached(&self, run: &RunId, targets: &[ValuePath]) -> Result<Vec<[u8; 32]>> {
        let (r, targets) = (run.clone(), targets.to_vec());
        self.snapshot(move |s| crate::redact::reached(s, &r, &targets))
    }
}
