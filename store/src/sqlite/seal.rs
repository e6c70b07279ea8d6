//! Encryption at rest on SQLite (`crate::seal`): the store's data keys
//! loaded (and the first one made) at open, and `flow keys rotate`.

use super::now_ms;
use crate::error::Result;
use crate::seal::{DataKeyRow, Keyring, Place, Sealer, new_data_key, rewrap};
use rusqlite::{Connection, TransactionBehavior, params};

/// Rows sealed in one transaction of a rotation.
const SEAL_BATCH: usize = 256;

fn data_keys(conn: &Connection) -> Result<Vec<DataKeyRow>> {
    let mut st =
        conn.prepare("SELECT id, master, wrapped FROM data_keys ORDER BY created_ms, id")?;
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The store's sealer: with a keyring, its data keys opened (the first one
/// made, wrapped by the active master key, when it has none: from then on
/// the store is encrypted); without, off — or the named failure of an
/// encrypted store opened without its keys.
pub(super) fn load(conn: &mut Connection, ring: Option<&Keyring>) -> Result<Sealer> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut rows = data_keys(&tx)?;
    if let (Some(ring), true) = (ring, rows.is_empty()) {
        let row = new_data_key(ring)?;
        tx.execute(
            "INSERT INTO data_keys (id, master, wrapped, created_ms) VALUES (?1, ?2, ?3, ?4)",
            params![row.0, row.1, row.2, now_ms()],
        )?;
        rows.push(row);
    }
    let sealer = Sealer::load(&rows, ring)?;
    tx.commit()?;
    Ok(sealer)
}

/// What `flow keys rotate` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rotated {
    /// The master key every data key is wrapped by now.
    pub master: String,
    /// Data keys re-wrapped (those wrapped by another master key).
    pub rewrapped: usize,
    /// Plaintext rows sealed, by table: rows written before encryption.
    pub sealed_blobs: u64,
    pub sealed_facts: u64,
    pub sealed_host_records: u64,
    pub sealed_memory: u64,
}

/// Re-wraps every data key under `ring`'s active master key (one
/// transaction: nothing else moves), then seals the rows still in
/// plaintext, a batch a transaction. Safe to interrupt and run again: a
/// data key is wrapped by one master key or the other, and a row is
/// sealed or not, at every commit. Safe beside a running server on the
/// same file: SQLite serializes the transactions, and a row is only
/// replaced by its own sealed bytes (`WHERE body = old`).
pub(super) fn rotate(conn: &mut Connection, ring: &Keyring) -> Result<Rotated> {
    // The plaintext a sealed row replaces is zeroed in its page rather
    // than left in free space, and the WAL is emptied at the end: the
    // file keeps no copy of it (a backup taken before still does).
    conn.execute_batch("PRAGMA secure_delete = ON;")?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let rows = data_keys(&tx)?;
    let new = rewrap(ring, &rows)?;
    for (id, master, wrapped) in &new {
        tx.execute(
            "UPDATE data_keys SET master = ?2, wrapped = ?3 WHERE id = ?1",
            params![id, master, wrapped],
        )?;
    }
    tx.commit()?;
    let seal = load(conn, Some(ring))?;
    let mut out = Rotated {
        master: ring.active().to_string(),
        rewrapped: new.len(),
        ..Rotated::default()
    };
    out.sealed_blobs = seal_blobs(conn, &seal)?;
    out.sealed_facts = seal_facts(conn, &seal)?;
    out.sealed_host_records = seal_host(conn, &seal)?;
    out.sealed_memory = seal_memory(conn, &seal)?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(out)
}

/// Runs `step` in IMMEDIATE transactions until it seals no more rows; the
/// rows sealed.
fn batches(
    conn: &mut Connection,
    mut step: impl FnMut(&Connection) -> Result<usize>,
) -> Result<u64> {
    let mut total = 0u64;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = step(&tx)?;
        tx.commit()?;
        total += n as u64;
        if n < SEAL_BATCH {
            return Ok(total);
        }
    }
}

fn seal_blobs(conn: &mut Connection, seal: &Sealer) -> Result<u64> {
    let mut after = 0i64;
    batches(conn, |c| {
        let rows: Vec<(i64, Vec<u8>, Vec<u8>)> = c
            .prepare_cached(
                "SELECT id, hash, body FROM blobs WHERE id > ?1 AND substr(body, 1, 1) <> x'FF' ORDER BY id LIMIT ?2",
            )?
            .query_map(params![after, SEAL_BATCH as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        for (id, hash, body) in &rows {
            after = *id;
            let Some(h) = crate::hash::from_column(hash) else {
                continue;
            };
            let sealed = seal.seal(Place::Blob(&h), body)?;
            c.prepare_cached("UPDATE blobs SET body = ?2 WHERE id = ?1 AND body = ?3")?
                .execute(params![id, &sealed[..], body])?;
        }
        Ok(rows.len())
    })
}

fn seal_facts(conn: &mut Connection, seal: &Sealer) -> Result<u64> {
    let mut after = 0i64;
    batches(conn, |c| {
        let rows: Vec<(i64, Vec<u8>, String)> = c
            .prepare_cached(
                "SELECT rowid, hash, body FROM facts WHERE rowid > ?1 AND substr(body, 1, 1) <> '~' ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![after, SEAL_BATCH as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        for (rowid, hash, body) in &rows {
            after = *rowid;
            let Some(h) = crate::hash::from_column(hash) else {
                continue;
            };
            let sealed = seal.seal_text(Place::Fact(&h), body)?;
            c.prepare_cached("UPDATE facts SET body = ?2 WHERE rowid = ?1 AND body = ?3")?
                .execute(params![rowid, &*sealed, body])?;
        }
        Ok(rows.len())
    })
}

fn seal_host(conn: &mut Connection, seal: &Sealer) -> Result<u64> {
    let mut after = 0i64;
    batches(conn, |c| {
        let rows: Vec<(i64, i64, String, Vec<u8>, String)> = c
            .prepare_cached(
                "SELECT rowid, seq, kind, head_hash, details FROM host_records WHERE rowid > ?1 AND substr(details, 1, 1) <> '~' ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![after, SEAL_BATCH as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        for (rowid, seq, kind, head, details) in &rows {
            after = *rowid;
            let sealed = seal.seal_text(Place::Host(head, *seq, kind), details)?;
            c.prepare_cached(
                "UPDATE host_records SET details = ?2 WHERE rowid = ?1 AND details = ?3",
            )?
            .execute(params![rowid, &*sealed, details])?;
        }
        Ok(rows.len())
    })
}

fn seal_memory(conn: &mut Connection, seal: &Sealer) -> Result<u64> {
    let mut after: Option<(String, String)> = None;
    batches(conn, |c| {
        let (s0, k0) = after.clone().unwrap_or_default();
        let rows: Vec<(String, String, String)> = c
            .prepare_cached(
                "SELECT store, key, value FROM memory WHERE (store, key) > (?1, ?2) AND substr(value, 1, 1) <> '~' ORDER BY store, key LIMIT ?3",
            )?
            .query_map(params![s0, k0, SEAL_BATCH as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        for (store, key, value) in &rows {
            let sealed = seal.seal_text(Place::Memory(store, key), value)?;
            c.prepare_cached(
                "UPDATE memory SET value = ?3 WHERE store = ?1 AND key = ?2 AND value = ?4",
            )?
            .execute(params![store, key, &*sealed, value])?;
            after = Some((store.clone(), key.clone()));
        }
        Ok(rows.len())
    })
}
