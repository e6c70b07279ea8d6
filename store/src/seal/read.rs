//! Reads through a [`Sealer`]: a [`ReadDb`] whose fact bodies, blobs and
//! host-record details come back opened, so everything `crate::read`
//! verifies, it verifies on the plaintext exactly as on a plaintext store.
//! A row that does not open is a storage failure naming the row and the
//! data key (a fact's in place, as its checks report it).

use super::{Place, Sealer};
use crate::api::*;
use crate::error::{Error, Result};
use crate::index::{DiscoveryColumns, HostColumns, RunColumns};
use crate::read::{FactRow, HostPage, ReadDb};
use flow_abi::fact::RunId;
use serde_json::Value;

/// Runs `f` on `db` with its rows opened by `seal`.
pub(crate) fn opened<T>(
    db: &mut dyn ReadDb,
    seal: &Sealer,
    f: impl FnOnce(&mut dyn ReadDb) -> Result<T>,
) -> Result<T> {
    f(&mut Opened { db, seal })
}

struct Opened<'a> {
    db: &'a mut dyn ReadDb,
    seal: &'a Sealer,
}

impl Opened<'_> {
    fn facts(&self, rows: Vec<Result<FactRow, String>>) -> Vec<Result<FactRow, String>> {
        rows.into_iter()
            .map(|row| {
                let (n, kind, hash, body) = row?;
                if !Sealer::is_sealed_text(&body) {
                    return Ok((n, kind, hash, body));
                }
                let h = hash.ok_or("sealed fact with a malformed hash column")?;
                let body = self.seal.open_text(Place::Fact(&h), body)?;
                Ok((n, kind, hash, body))
            })
            .collect()
    }
}

impl ReadDb for Opened<'_> {
    fn run_columns(&mut self, run: &RunId) -> Result<Option<RunColumns>> {
        self.db.run_columns(run)
    }

    fn facts_after(
        &mut self,
        key: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Result<FactRow, String>>> {
        let rows = self.db.facts_after(key, after, limit)?;
        Ok(self.facts(rows))
    }

    fn fact_range(&mut self, key: i64, from: u64, to: u64) -> Result<Vec<Result<FactRow, String>>> {
        let rows = self.db.fact_range(key, from, to)?;
        Ok(self.facts(rows))
    }

    fn fact_hash(&mut self, key: i64, n: u64) -> Result<Option<Vec<u8>>> {
        self.db.fact_hash(key, n)
    }

    fn last_checkpoint(&mut self, key: i64) -> Result<Option<u64>> {
        self.db.last_checkpoint(key)
    }

    fn holes(&mut self, key: i64) -> Result<Vec<[u8; 32]>> {
        self.db.holes(key)
    }

    fn load_blob(&mut self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        let Some(stored) = self.db.load_blob(hash)? else {
            return Ok(None);
        };
        self.seal
            .open(Place::Blob(hash), stored)
            .map(Some)
            .map_err(|reason| Error::CorruptBlob {
                hash: crate::hash::hash_text(hash),
                reason,
            })
    }

    fn blob_referenced_in(
        &mut self,
        hash: &[u8; 32],
        namespaces: &[crate::namespace::Namespace],
    ) -> Result<bool> {
        self.db.blob_referenced_in(hash, namespaces)
    }

    fn prefetch(&mut self, values: &[&Value]) -> Result<()> {
        self.db.prefetch(values)
    }

    fn prefetch_calls(&mut self, at: &[(RunId, u64)]) -> Result<()> {
        self.db.prefetch_calls(at)
    }

    fn host_columns(&mut self, key: i64, page: HostPage) -> Result<Vec<HostColumns>> {
        let mut rows = self.db.host_columns(key, page)?;
        for c in &mut rows {
            if !Sealer::is_sealed_text(&c.details) {
                continue;
            }
            let stored = std::mem::take(&mut c.details);
            c.details = self
                .seal
                .open_text(Place::Host(&c.head_hash, c.seq, &c.kind), stored)
                .map_err(|reason| {
                    Error::Sealed(format!(
                        "host record {} ({}, at fact {}): {reason}",
                        c.seq, c.kind, c.head_n
                    ))
                })?;
        }
        Ok(rows)
    }

    fn discovery_columns(
        &mut self,
        after: &str,
        limit: u32,
        state: Option<RunState>,
    ) -> Result<Vec<DiscoveryColumns>> {
        self.db.discovery_columns(after, limit, state)
    }

    fn dialect(&self) -> crate::listing::Dialect {
        self.db.dialect()
    }

    fn query_ids(&mut self, sql: &crate::listing::Sql) -> Result<Vec<String>> {
        self.db.query_ids(sql)
    }

    fn listing_rows(&mut self, ids: &[String]) -> Result<Vec<crate::listing::ListingColumns>> {
        self.db.listing_rows(ids)
    }

    fn group_counts(&mut self, sql: &crate::listing::Sql) -> Result<Vec<(Option<String>, i64)>> {
        self.db.group_counts(sql)
    }

    fn waiting_rows(
        &mut self,
        sql: &crate::listing::Sql,
    ) -> Result<Vec<crate::read::waiting::WaitingColumns>> {
        self.db.waiting_rows(sql)
    }

    fn changed_ids(&mut self, since_ms: i64, limit: u32) -> Result<Vec<String>> {
        self.db.changed_ids(since_ms, limit)
    }

    fn child_columns(
        &mut self,
        run: &str,
        limit: u32,
    ) -> Result<Vec<crate::listing::ChildColumns>> {
        self.db.child_columns(run, limit)
    }
}
