//! The queries behind verified reads ([`crate::read`]) on one pooled
//! connection, inside one `REPEATABLE READ, READ ONLY` transaction (a
//! consistent snapshot, begun with the first query).
//!
//! A round trip costs far more here than a SQLite page read, so the session
//! fetches blobs together: each batch of fact rows or blob bodies is
//! scanned for the `"blake3:<hex>"` hashes it mentions, and those blobs are
//! loaded with one `= ANY` query per level of nesting. This is only a
//! cache in front of [`ReadDb::load_blob`]; what is verified, and how, is
//! unchanged. Checkpoint walks read the facts before the one asked for in
//! windows of [`WINDOW`] rows.

use super::Shared;
use super::rows::{RUN_COLUMNS, fact_row, fact_row_at, run_columns_at};
use crate::api::RunState;
use crate::error::{Error, Result};
use crate::index::{DiscoveryColumns, HostColumns, RunColumns};
use crate::listing::{Arg, ChildColumns, Dialect, ListingColumns, Sql};
use crate::merkle::collect_refs;
use crate::read::{FactRow, HostPage, ReadDb};
use crate::seal::{Place, Sealer};
use deadpool_postgres::Object;
use flow_abi::fact::RunId;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// Facts read per step of a checkpoint walk.
const WINDOW: u64 = 256;

/// Most blob bytes a session prefetches; past it, blobs load one by one.
const PREFETCH_BUDGET: usize = 256 << 20;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One read: a pooled connection (taken at the first query) and its caches.
pub(super) struct Session {
    shared: Arc<Shared>,
    conn: Option<Object>,
    blobs: HashMap<[u8; 32], Vec<u8>>,
    tried: HashSet<[u8; 32]>,
    prefetched: usize,
    window: Option<(i64, u64, u64)>,
    rows: BTreeMap<u64, Result<FactRow, String>>,
    /// What [`ReadDb::prefetch_calls`] fetched: runs rows by id, facts and
    /// their predecessors' hashes by `(run key, n)`.
    run_rows: HashMap<String, RunColumns>,
    calls: HashMap<(i64, u64), Result<FactRow, String>>,
    hashes: HashMap<(i64, u64), Vec<u8>>,
}

impl Session {
    pub(super) fn new(shared: Arc<Shared>) -> Session {
        Session {
            shared,
            conn: None,
            blobs: HashMap::new(),
            tried: HashSet::new(),
            prefetched: 0,
            window: None,
            rows: BTreeMap::new(),
            run_rows: HashMap::new(),
            calls: HashMap::new(),
            hashes: HashMap::new(),
        }
    }

    /// The store's sealer (reads open rows through it: `crate::seal::read`).
    pub(super) fn seal(&self) -> crate::seal::Sealer {
        self.shared.seal.clone()
    }

    /// Runs one query; the first also begins the snapshot (pipelined).
    pub(super) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let shared = self.shared.clone();
        let begin = self.conn.is_none();
        if begin {
            let obj = shared
                .handle
                .block_on(shared.pool.get())
                .map_err(|e| Error::Unavailable(format!("postgres pool: {e}")))?;
            self.conn = Some(obj);
        }
        let conn = self.conn.as_ref().ok_or(Error::WriterGone)?;
        shared.handle.block_on(async {
            let run = async {
                let st = conn.prepare_cached(sql).await?;
                conn.query(&st, params).await
            };
            if begin {
                let (b, rows) = tokio::join!(
                    conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
                    run
                );
                b?;
                Ok(rows?)
            } else {
                Ok(run.await?)
            }
        })
    }

    /// Ends the snapshot and gives the connection back (a connection whose
    /// COMMIT failed is not reused).
    pub(super) fn finish(mut self) {
        if let Some(conn) = self.conn.take() {
            let ok = self
                .shared
                .handle
                .block_on(conn.batch_execute("COMMIT"))
                .is_ok();
            if !ok {
                let _ = Object::take(conn);
            }
        }
    }

    /// Loads the blobs `hashes` name, and then those their bodies name.
    fn fetch_blobs(&mut self, mut hashes: Vec<[u8; 32]>) -> Result<()> {
        loop {
            hashes.retain(|h| !self.blobs.contains_key(h) && self.tried.insert(*h));
            if hashes.is_empty() || self.prefetched > PREFETCH_BUDGET {
                return Ok(());
            }
            let keys: Vec<&[u8]> = hashes.iter().map(|h| &h[..]).collect();
            let rows = self.query(
                "SELECT hash, body FROM blobs WHERE hash = ANY($1::bytea[])",
                &[&keys],
            )?;
            let mut next = Vec::new();
            for r in rows {
                let hash: Vec<u8> = r.try_get(0)?;
                let body: Vec<u8> = r.try_get(1)?;
                let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) else {
                    continue;
                };
                // A sealed body is opened here so that the blobs it names
                // are fetched with it; one that does not open stays as
                // stored, for the read's opening to report.
                let body = if Sealer::is_sealed(&body) {
                    match self.shared.seal.open(Place::Blob(&hash), body.clone()) {
                        Ok(open) => open,
                        Err(_) => body,
                    }
                } else {
                    body
                };
                mentions(&body, &mut next);
                self.prefetched += body.len();
                self.blobs.insert(hash, body);
            }
            hashes = next;
        }
    }

    fn fact_rows(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Result<FactRow, String>>> {
        let rows: Vec<Result<FactRow, String>> =
            self.query(sql, params)?.iter().map(fact_row).collect();
        let mut wanted = Vec::new();
        for (_, _, _, body) in rows.iter().flatten() {
            mentions(body.as_bytes(), &mut wanted);
        }
        self.fetch_blobs(wanted)?;
        Ok(rows)
    }
}

/// Appends every `"blake3:<64 lowercase hex>"` string in `text` to `out`:
/// a value reference's address or a source's hash, in canonical JSON.
fn mentions(text: &[u8], out: &mut Vec<[u8; 32]>) {
    const PAT: &[u8] = b"\"blake3:";
    let mut i = 0;
    while i + PAT.len() + 65 <= text.len() {
        match text[i..].windows(PAT.len()).position(|w| w == PAT) {
            None => return,
            Some(at) => {
                let start = i + at + PAT.len();
                let hex = &text[start..(start + 64).min(text.len())];
                let mut h = [0u8; 32];
                if text.get(start + 64) == Some(&b'"')
                    && hex
                        .iter()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
                    && hex::decode_to_slice(hex, &mut h).is_ok()
                {
                    out.push(h);
                }
                i = start;
            }
        }
    }
}

/// A run's forks and nested runs (`$1`), at most `$2`, by id:
/// runs_by_parent and runs_by_outer (migration 8) serve the two halves,
/// and a run has few children to sort. A union, not an `OR`: with `ORDER
/// BY id LIMIT` over one table, Postgres's generic plan walks the whole id
/// index filtering each row. Public so a test can EXPLAIN it.
pub const CHILDREN_QUERY: &str = "SELECT id, parent_run, parent_checkpoint, outer_run, outer_call, namespace FROM runs WHERE parent_run = $1 \
     UNION SELECT id, parent_run, parent_checkpoint, outer_run, outer_call, namespace FROM runs WHERE outer_run = $1 \
     ORDER BY id LIMIT $2";

impl ReadDb for Session {
    fn run_columns(&mut self, run: &RunId) -> Result<Option<RunColumns>> {
        if let Some(c) = self.run_rows.get(run.as_str()) {
            return Ok(Some(c.clone()));
        }
        let rows = self.query(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
            &[&run.as_str()],
        )?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(run_columns_at(r, 0)?))
    }

    fn facts_after(
        &mut self,
        key: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Result<FactRow, String>>> {
        if limit == 1
            && let Some(row) = self.calls.get(&(key, after + 1))
        {
            return Ok(vec![row.clone()]);
        }
        self.fact_rows(
            "SELECT n, kind, hash, body FROM facts WHERE run_key = $1 AND n > $2 ORDER BY n LIMIT $3",
            &[&key, &(after as i64), &i64::from(limit)],
        )
    }

    fn fact_range(&mut self, key: i64, from: u64, to: u64) -> Result<Vec<Result<FactRow, String>>> {
        let cached = matches!(self.window, Some((k, lo, hi)) if k == key && lo <= from && to <= hi);
        if !cached {
            let lo = to.saturating_sub(WINDOW - 1).min(from);
            let rows = self.query(
                "SELECT n, kind, hash, body FROM facts WHERE run_key = $1 AND n BETWEEN $2 AND $3 ORDER BY n",
                &[&key, &(lo as i64), &(to as i64)],
            )?;
            self.rows.clear();
            for (i, r) in rows.iter().enumerate() {
                let row = fact_row(r);
                // A row whose number cannot be read keeps its place.
                let n = row.as_ref().map(|r| r.0 as u64).unwrap_or(lo + i as u64);
                self.rows.insert(n, row);
            }
            self.window = Some((key, lo, to));
        }
        Ok(self.rows.range(from..=to).map(|(_, r)| r.clone()).collect())
    }

    fn fact_hash(&mut self, key: i64, n: u64) -> Result<Option<Vec<u8>>> {
        if let Some(h) = self.hashes.get(&(key, n)) {
            return Ok(Some(h.clone()));
        }
        let rows = self.query(
            "SELECT hash FROM facts WHERE run_key = $1 AND n = $2",
            &[&key, &(n as i64)],
        )?;
        rows.first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(Error::from)
    }

    fn last_checkpoint(&mut self, key: i64) -> Result<Option<u64>> {
        let rows = self.query(
            "SELECT n FROM facts WHERE run_key = $1 AND kind = 'Checkpoint' ORDER BY n DESC LIMIT 1",
            &[&key],
        )?;
        rows.first()
            .map(|r| r.try_get::<_, i64>(0).map(|n| n as u64))
            .transpose()
            .map_err(Error::from)
    }

    fn load_blob(&mut self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        if let Some(b) = self.blobs.get(hash) {
            return Ok(Some(b.clone()));
        }
        let rows = self.query("SELECT body FROM blobs WHERE hash = $1", &[&&hash[..]])?;
        rows.first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(Error::from)
    }

    fn holes(&mut self, key: i64) -> Result<Vec<[u8; 32]>> {
        let rows = self.query("SELECT hash FROM holes WHERE run_key = $1", &[&key])?;
        let mut out = Vec::new();
        for r in rows {
            let h: Vec<u8> = r.try_get(0)?;
            if let Some(h) = crate::hash::from_column(&h) {
                out.push(h);
            }
        }
        Ok(out)
    }

    fn blob_referenced_in(
        &mut self,
        hash: &[u8; 32],
        namespaces: &[crate::namespace::Namespace],
    ) -> Result<bool> {
        let names: Vec<&str> = namespaces.iter().map(|n| n.as_str()).collect();
        let rows = self.query(
            "SELECT EXISTS (SELECT 1 FROM blob_refs b JOIN runs r ON r.key = b.run_key
                WHERE b.hash = $1 AND r.namespace = ANY($2::text[]))",
            &[&&hash[..], &names],
        )?;
        rows.first()
            .map(|r| r.try_get(0))
            .transpose()?
            .ok_or(Error::WriterGone)
    }

    /// One query: each `(run, n)`'s runs row, fact and predecessor's hash.
    fn prefetch_calls(&mut self, at: &[(RunId, u64)]) -> Result<()> {
        if at.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = at.iter().map(|(r, _)| r.as_str()).collect();
        let ns: Vec<i64> = at.iter().map(|(_, n)| *n as i64).collect();
        let cols: Vec<String> = RUN_COLUMNS.split(", ").map(|c| format!("r.{c}")).collect();
        let rows = self.query(
            &format!(
                "SELECT q.id, q.n, {}, f.n, f.kind, f.hash, f.body, p.hash
                 FROM unnest($1::text[], $2::int8[]) AS q(id, n)
                 JOIN runs r ON r.id = q.id
                 LEFT JOIN facts f ON f.run_key = r.key AND f.n = q.n
                 LEFT JOIN facts p ON p.run_key = r.key AND p.n = q.n - 1",
                cols.join(", ")
            ),
            &[&ids, &ns],
        )?;
        let mut wanted = Vec::new();
        for r in &rows {
            let id: String = r.try_get(0)?;
            let n = r.try_get::<_, i64>(1)? as u64;
            let run = run_columns_at(r, 2)?;
            let key = run.key;
            if r.try_get::<_, Option<i64>>(19)?.is_some() {
                let row = fact_row_at(r, 19);
                if let Ok((_, _, _, body)) = &row {
                    mentions(body.as_bytes(), &mut wanted);
                }
                self.calls.insert((key, n), row);
            }
            if let Some(h) = r.try_get::<_, Option<Vec<u8>>>(23)? {
                self.hashes.insert((key, n.saturating_sub(1)), h);
            }
            self.run_rows.insert(id, run);
        }
        self.fetch_blobs(wanted)
    }

    fn prefetch(&mut self, values: &[&Value]) -> Result<()> {
        let mut refs = Vec::new();
        for v in values {
            // A malformed reference is for the verification to report.
            let _ = collect_refs(v, &mut refs);
        }
        self.fetch_blobs(refs.into_iter().map(|(h, _)| h).collect())
    }

    fn host_columns(&mut self, key: i64, page: HostPage) -> Result<Vec<HostColumns>> {
        let rows = self.query(
            "SELECT seq, kind, at_ms, head_n, head_hash, details FROM host_records WHERE run_key = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&key, &page.after, &page.sql_limit()],
        )?;
        rows.iter()
            .map(|r| {
                Ok(HostColumns {
                    seq: r.try_get(0)?,
                    kind: r.try_get(1)?,
                    at_ms: r.try_get(2)?,
                    head_n: r.try_get(3)?,
                    head_hash: r.try_get(4)?,
                    details: r.try_get(5)?,
                })
            })
            .collect()
    }

    /// One query: the page's rows with their latest pause or halt record.
    fn discovery_columns(
        &mut self,
        after: &str,
        limit: u32,
        state: Option<RunState>,
    ) -> Result<Vec<DiscoveryColumns>> {
        let take = i64::from(limit) + 1;
        let rows = self.query(
            "SELECT r.id, r.entry_module, r.entry_function, r.program, r.ending, r.last_n, r.last_hash,
                    d.kind, d.at_ms, d.head_n, d.head_hash, r.imported_ms, r.key
             FROM runs r
             LEFT JOIN LATERAL (
                 SELECT kind, at_ms, head_n, head_hash FROM host_records h
                 WHERE h.run_key = r.key AND h.kind IN ('pause', 'halt') ORDER BY seq DESC LIMIT 1
             ) d ON true
             WHERE r.id > $1 AND ($3::text IS NULL OR r.state = $3)
             ORDER BY r.id LIMIT $2",
            &[&after, &take, &state.map(RunState::as_str)],
        )?;
        rows.iter()
            .map(|r| {
                let kind: Option<String> = r.try_get(7)?;
                Ok(DiscoveryColumns {
                    key: r.try_get(12)?,
                    id: r.try_get(0)?,
                    entry_module: r.try_get(1)?,
                    entry_function: r.try_get(2)?,
                    program: r.try_get(3)?,
                    ending: r.try_get(4)?,
                    last_n: r.try_get(5)?,
                    last_hash: r.try_get(6)?,
                    decision: match kind {
                        Some(k) => Some((k, r.try_get(8)?, r.try_get(9)?, r.try_get(10)?)),
                        None => None,
                    },
                })
            })
            .collect()
    }
    /// One query: the page's rows with their latest pause or halt record.
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn query_ids(&mut self, sql: &Sql) -> Result<Vec<String>> {
        let args = bound(&sql.args);
        let rows = self.query(&sql.text, &args)?;
        Ok(rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?)
    }

    fn group_counts(&mut self, sql: &Sql) -> Result<Vec<(Option<String>, i64)>> {
        let args = bound(&sql.args);
        let rows = self.query(&sql.text, &args)?;
        Ok(rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<std::result::Result<_, tokio_postgres::Error>>()?)
    }

    fn waiting_rows(&mut self, sql: &Sql) -> Result<Vec<crate::read::waiting::WaitingColumns>> {
        let args = bound(&sql.args);
        let rows = self.query(&sql.text, &args)?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                    r.try_get(5)?,
                    r.try_get(6)?,
                    r.try_get(7)?,
                ))
            })
            .collect::<std::result::Result<_, tokio_postgres::Error>>()?)
    }

    fn listing_rows(&mut self, ids: &[String]) -> Result<Vec<ListingColumns>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.query(
            "SELECT r.id, r.key, r.state, r.entry_module, r.entry_function, r.program, r.parent_run, r.parent_checkpoint, r.outer_run, r.outer_call, r.ending, r.last_n, r.last_hash, r.created_ms, r.updated_ms,
                    d.kind, d.at_ms, d.head_n, d.head_hash, r.imported_ms, r.state_ms, r.flow_id, r.namespace
             FROM runs r
             LEFT JOIN LATERAL (
                 SELECT kind, at_ms, head_n, head_hash FROM host_records h
                 WHERE h.run_key = r.key AND h.kind IN ('pause', 'halt') ORDER BY seq DESC LIMIT 1
             ) d ON true
             WHERE r.id = ANY($1::text[])",
            &[&ids],
        )?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for r in &rows {
            let kind: Option<String> = r.try_get(15)?;
            let id: String = r.try_get(0)?;
            by_id.insert(
                id.clone(),
                ListingColumns {
                    id,
                    cols: RunColumns {
                        key: r.try_get(1)?,
                        state: r.try_get(2)?,
                        entry_module: r.try_get(3)?,
                        entry_function: r.try_get(4)?,
                        program: r.try_get(5)?,
                        parent_run: r.try_get(6)?,
                        parent_checkpoint: r.try_get(7)?,
                        outer_run: r.try_get(8)?,
                        outer_call: r.try_get(9)?,
                        ending: r.try_get(10)?,
                        last_n: r.try_get(11)?,
                        last_hash: r.try_get(12)?,
                        created_ms: r.try_get(13)?,
                        updated_ms: r.try_get(14)?,
                        state_ms: r.try_get(20)?,
                        imported_ms: r.try_get(19)?,
                        namespace: r.try_get(22)?,
                    },
                    decision: match kind {
                        Some(k) => Some((k, r.try_get(16)?, r.try_get(17)?, r.try_get(18)?)),
                        None => None,
                    },
                    flow_id: r.try_get(21)?,
                },
            );
        }
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    fn changed_ids(&mut self, since_ms: i64, limit: u32) -> Result<Vec<String>> {
        let rows = self.query(
            "SELECT id FROM runs WHERE state_ms >= $1 ORDER BY state_ms, id LIMIT $2",
            &[&since_ms, &i64::from(limit)],
        )?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    fn child_columns(&mut self, run: &str, limit: u32) -> Result<Vec<ChildColumns>> {
        let rows = self.query(CHILDREN_QUERY, &[&run, &i64::from(limit)])?;
        rows.iter()
            .map(|r| {
                let parent: Option<String> = r.try_get(1)?;
                let cp: Option<i64> = r.try_get(2)?;
                let outer: Option<String> = r.try_get(3)?;
                let call: Option<String> = r.try_get(4)?;
                Ok(ChildColumns {
                    id: r.try_get(0)?,
                    parent: parent.zip(cp),
                    outer: outer.zip(call),
                    namespace: r.try_get(5)?,
                })
            })
            .collect()
    }
}

/// A run query's arguments as tokio-postgres binds them.
fn bound(args: &[Arg]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter()
        .map(|a| match a {
            Arg::Text(t) => t as &(dyn ToSql + Sync),
            Arg::Int(i) => i as &(dyn ToSql + Sync),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn mentions_finds_hashes_in_canonical_text() {
        let h = "ab".repeat(32);
        let text = format!(
            "{{\"a\":{{\"$blob\":\"blake3:{h}\",\"length\":3}},\"b\":\"blake3:{h}\",\"c\":\"blake3:12\",\"d\":\"\\\"blake3:{}\\\"\"}}",
            "cd".repeat(32)
        );
        let mut out = Vec::new();
        mentions(text.as_bytes(), &mut out);
        assert_eq!(out, vec![[0xab; 32], [0xab; 32]]);
    }
}
