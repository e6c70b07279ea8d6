//! The `std/memory` key-value stores on Postgres (DESIGN §4), their
//! values sealed when the store is encrypted (docs/custody.md).

use super::PostgresStore;
use crate::error::{Error, Result};
use crate::sqlite::now_ms;
use serde_json::Value;

impl crate::api::Memory for PostgresStore {
    fn memory_read(&self, store: &str, key: &Value) -> Result<Option<Value>> {
        let key = flow_abi::json::canonical(key);
        let store = store.to_string();
        let text: Option<String> = self.read({
            let (store, key) = (store.clone(), key.clone());
            move |s| {
                let rows = s.query(
                    "SELECT value FROM memory WHERE store = $1 AND key = $2",
                    &[&store, &key],
                )?;
                Ok(rows.first().map(|r| r.try_get(0)).transpose()?)
            }
        })?;
        self.inner.shared.seal.open_memory(&store, &key, text)
    }

    /// Memory writes are rare and small: each is its own transaction on a
    /// pooled connection, serialized per key by an advisory lock so two
    /// merges (from any server) cannot lose each other's fields.
    fn memory_write(&self, store: &str, key: &Value, value: &Value, merge: bool) -> Result<()> {
        let key = flow_abi::json::canonical(key);
        let (store, value) = (store.to_string(), value.clone());
        let seal = self.inner.shared.seal.clone();
        self.on_pool(move |conn| async move {
                conn.batch_execute("BEGIN").await?;
                let body = async {
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(10) || $2, 0))",
                        &[&store, &key],
                    )
                    .await?;
                    let mut value = value;
                    if merge {
                        let old: Option<String> = conn
                            .query_opt(
                                "SELECT value FROM memory WHERE store = $1 AND key = $2",
                                &[&store, &key],
                            )
                            .await?
                            .map(|r| r.try_get(0))
                            .transpose()?;
                        value = seal.merged_memory(&store, &key, old, value)?;
                    }
                    conn.execute(
                        "INSERT INTO memory (store, key, value, updated_ms) VALUES ($1, $2, $3, $4)
                         ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                        &[
                            &store,
                            &key,
                            &&*seal.seal_text(
                                crate::seal::Place::Memory(&store, &key),
                                &flow_abi::json::canonical(&value),
                            )?,
                            &now_ms(),
                        ],
                    )
                    .await?;
                    Ok::<(), Error>(())
                }
                .await;
                match body {
                    Ok(()) => Ok(conn.batch_execute("COMMIT").await?),
                    Err(e) => {
                        let _ = conn.batch_execute("ROLLBACK").await;
                        Err(e)
                    }
                }
        })
    }
}
