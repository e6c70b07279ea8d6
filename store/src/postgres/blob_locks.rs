//! The blobs' advisory locks a deletion (`delete`) and a redaction
//! (`redact`) take exclusive before they take blobs away from runs: the
//! writers take them shared before they insert a blob and its references
//! (`sql`), so once held, every writer that could reference one of those
//! blobs has committed or waits (docs/custody.md "Concurrency").

use crate::api::blob_lock_key;
use crate::error::Result;
use tokio_postgres::Transaction;

/// Takes the locks of `hashes` exclusive, in key order, in one statement:
/// two such transactions never hold each other's next key.
pub(super) async fn lock_exclusive(tx: &Transaction<'_>, hashes: &[Vec<u8>]) -> Result<()> {
    let keys: Vec<i64> = hashes.iter().map(|h| blob_lock_key(h)).collect();
    tx.execute(
        "SELECT count(pg_advisory_xact_lock(k))
         FROM (SELECT DISTINCT k FROM unnest($1::int8[]) AS k ORDER BY k) AS s",
        &[&keys],
    )
    .await?;
    Ok(())
}
