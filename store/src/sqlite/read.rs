//! The queries behind verified reads ([`crate::read`]) on a pooled read
//! connection. Each public read runs in one short read transaction (a
//! consistent snapshot).

use crate::api::RunState;
use crate::error::Result;
use crate::fact::FactKind;
use crate::hash::from_column;
use crate::index::{DiscoveryColumns, HostColumns, RunColumns};
use crate::listing::{Arg, ChildColumns, Dialect, ListingColumns, Sql};
use crate::read::{FactRow, HostPage, ReadDb};
use crate::seal::Sealer;
use crate::seal::read::opened;
use flow_abi::fact::RunId;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, ToSql, params};

/// Runs `f` on a [`ReadDb`] inside a read transaction, its rows opened by
/// `seal`.
pub(super) fn snapshot<T>(
    conn: &mut Connection,
    seal: &Sealer,
    f: impl FnOnce(&mut dyn ReadDb) -> Result<T>,
) -> Result<T> {
    let tx = conn.transaction()?;
    let out = opened(&mut Db(&tx), seal, f);
    // Read-only: ending it cannot lose anything.
    let _ = tx.finish();
    out
}

/// Runs `f` on a [`ReadDb`] over `conn` as it is (the writer's, inside its
/// transaction: it sees what the batch wrote so far).
pub(super) fn on<T>(
    conn: &Connection,
    seal: &Sealer,
    f: impl FnOnce(&mut dyn ReadDb) -> Result<T>,
) -> Result<T> {
    opened(&mut Db(conn), seal, f)
}

struct Db<'a>(&'a Connection);

fn fact_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FactRow> {
    let kind = match r.get_ref(1)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(FactKind::parse),
        _ => None,
    };
    let hash = match r.get_ref(2)? {
        ValueRef::Blob(b) => from_column(b),
        _ => None,
    };
    Ok((r.get(0)?, kind, hash, r.get(3)?))
}

fn rows_of(
    rows: impl Iterator<Item = rusqlite::Result<FactRow>>,
) -> impl Iterator<Item = Result<FactRow, String>> {
    rows.map(|r| r.map_err(|e| e.to_string()))
}

/// A run's forks and nested runs (`?1`), at most `?2`, by id:
/// runs_by_parent and runs_by_outer (migration 8) serve the two halves,
/// and a run has few children to sort. A union, not an `OR`: with `ORDER
/// BY id LIMIT` over one table, Postgres's generic plan walks the whole id
/// index filtering each row. Public so a test can EXPLAIN it.
pub const CHILDREN_QUERY: &str = "SELECT id, parent_run, parent_checkpoint, outer_run, outer_call, namespace FROM runs WHERE parent_run = ?1 \
     UNION SELECT id, parent_run, parent_checkpoint, outer_run, outer_call, namespace FROM runs WHERE outer_run = ?1 \
     ORDER BY id LIMIT ?2";

impl ReadDb for Db<'_> {
    fn run_columns(&mut self, run: &RunId) -> Result<Option<RunColumns>> {
        Ok(self
            .0
            .prepare_cached(
                "SELECT key, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, imported_ms, namespace
                 FROM runs WHERE id = ?1",
            )?
            .query_row([run.as_str()], |r| {
                Ok(RunColumns {
                    key: r.get(0)?,
                    state: r.get(1)?,
                    entry_module: r.get(2)?,
                    entry_function: r.get(3)?,
                    program: r.get(4)?,
                    parent_run: r.get(5)?,
                    parent_checkpoint: r.get(6)?,
                    outer_run: r.get(7)?,
                    outer_call: r.get(8)?,
                    ending: r.get(9)?,
                    last_n: r.get(10)?,
                    last_hash: r.get(11)?,
                    created_ms: r.get(12)?,
                    updated_ms: r.get(13)?,
                    state_ms: r.get(14)?,
                    imported_ms: r.get(15)?,
                    namespace: r.get(16)?,
                })
            })
            .optional()?)
    }

    fn facts_after(
        &mut self,
        key: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Result<FactRow, String>>> {
        let mut st = self.0.prepare_cached("SELECT n, kind, hash, body FROM facts WHERE run_key = ?1 AND n > ?2 ORDER BY n LIMIT ?3")?;
        // A window of rows is sized once, not grown row by row.
        let mut rows = Vec::with_capacity(limit.min(4096) as usize);
        rows.extend(rows_of(st.query_map(
            params![key, after as i64, i64::from(limit)],
            fact_row,
        )?));
        Ok(rows)
    }

    fn fact_range(&mut self, key: i64, from: u64, to: u64) -> Result<Vec<Result<FactRow, String>>> {
        let mut st = self.0.prepare_cached("SELECT n, kind, hash, body FROM facts WHERE run_key = ?1 AND n BETWEEN ?2 AND ?3 ORDER BY n")?;
        Ok(rows_of(st.query_map(params![key, from as i64, to as i64], fact_row)?).collect())
    }

    fn fact_hash(&mut self, key: i64, n: u64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .0
            .prepare_cached("SELECT hash FROM facts WHERE run_key = ?1 AND n = ?2")?
            .query_row(params![key, n as i64], |r| r.get(0))
            .optional()?)
    }

    fn last_checkpoint(&mut self, key: i64) -> Result<Option<u64>> {
        let n: Option<i64> = self
            .0
            .prepare_cached(
                "SELECT n FROM facts WHERE run_key = ?1 AND kind = 'Checkpoint' ORDER BY n DESC LIMIT 1",
            )?
            .query_row([key], |r| r.get(0))
            .optional()?;
        Ok(n.map(|n| n as u64))
    }

    fn load_blob(&mut self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .0
            .prepare_cached("SELECT body FROM blobs WHERE hash = ?1")?
            .query_row([&hash[..]], |r| r.get::<_, Vec<u8>>(0))
            .optional()?)
    }

    fn holes(&mut self, key: i64) -> Result<Vec<[u8; 32]>> {
        let mut st = self
            .0
            .prepare_cached("SELECT hash FROM holes WHERE run_key = ?1")?;
        let rows = st.query_map([key], |r| r.get::<_, Vec<u8>>(0))?;
        let mut out = Vec::new();
        for h in rows {
            if let Some(h) = from_column(&h?) {
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
        // The names as a JSON array, for json_each: one statement whatever
        // their number.
        let names =
            serde_json::Value::from(namespaces.iter().map(|n| n.as_str()).collect::<Vec<_>>())
                .to_string();
        Ok(self
            .0
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM blob_refs b JOIN runs r ON r.key = b.run_key
                    WHERE b.hash = ?1 AND r.namespace IN (SELECT value FROM json_each(?2)))",
            )?
            .query_row(rusqlite::params![&hash[..], names], |r| r.get(0))?)
    }

    fn host_columns(&mut self, key: i64, page: HostPage) -> Result<Vec<HostColumns>> {
        let mut st = self.0.prepare_cached("SELECT seq, kind, at_ms, head_n, head_hash, details FROM host_records WHERE run_key = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")?;
        let limit = page.sql_limit().unwrap_or(-1);
        let rows = st.query_map(rusqlite::params![key, page.after, limit], |r| {
            Ok(HostColumns {
                seq: r.get(0)?,
                kind: r.get(1)?,
                at_ms: r.get(2)?,
                head_n: r.get(3)?,
                head_hash: r.get(4)?,
                details: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn discovery_columns(
        &mut self,
        after: &str,
        limit: u32,
        state: Option<RunState>,
    ) -> Result<Vec<DiscoveryColumns>> {
        let take = i64::from(limit) + 1;
        let cols = "key, id, entry_module, entry_function, program, ending, last_n, last_hash";
        let sql = match state {
            Some(_) => {
                format!("SELECT {cols} FROM runs WHERE state = ?3 AND id > ?1 ORDER BY id LIMIT ?2")
            }
            None => format!("SELECT {cols} FROM runs WHERE id > ?1 ORDER BY id LIMIT ?2"),
        };
        let mut st = self.0.prepare_cached(&sql)?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok((
                r.get::<_, i64>(0)?,
                DiscoveryColumns {
                    key: r.get(0)?,
                    id: r.get(1)?,
                    entry_module: r.get(2)?,
                    entry_function: r.get(3)?,
                    program: r.get(4)?,
                    ending: r.get(5)?,
                    last_n: r.get(6)?,
                    last_hash: r.get(7)?,
                    decision: None,
                },
            ))
        };
        let rows: Vec<(i64, DiscoveryColumns)> = match state {
            Some(s) => st
                .query_map(params![after, take, s.as_str()], map)?
                .collect::<rusqlite::Result<_>>()?,
            None => st
                .query_map(params![after, take], map)?
                .collect::<rusqlite::Result<_>>()?,
        };
        let page = limit as usize;
        let mut hd = self.0.prepare_cached(
            "SELECT kind, at_ms, head_n, head_hash FROM host_records WHERE run_key = ?1 AND kind IN ('pause', 'halt') ORDER BY seq DESC LIMIT 1",
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, (key, mut row)) in rows.into_iter().enumerate() {
            if i < page {
                row.decision = hd
                    .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()?;
            }
            out.push(row);
        }
        Ok(out)
    }

    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn query_ids(&mut self, sql: &Sql) -> Result<Vec<String>> {
        let mut st = self.0.prepare_cached(&sql.text)?;
        let args = bound(&sql.args);
        Ok(st
            .query_map(args.as_slice(), |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn group_counts(&mut self, sql: &Sql) -> Result<Vec<(Option<String>, i64)>> {
        let mut st = self.0.prepare_cached(&sql.text)?;
        let args = bound(&sql.args);
        Ok(st
            .query_map(args.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn waiting_rows(&mut self, sql: &Sql) -> Result<Vec<crate::read::waiting::WaitingColumns>> {
        let mut st = self.0.prepare_cached(&sql.text)?;
        let args = bound(&sql.args);
        Ok(st
            .query_map(args.as_slice(), |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn listing_rows(&mut self, ids: &[String]) -> Result<Vec<ListingColumns>> {
        let mut st = self.0.prepare_cached(
            "SELECT id, key, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, imported_ms, flow_id, namespace
             FROM runs WHERE id = ?1",
        )?;
        let mut hd = self.0.prepare_cached(
            "SELECT kind, at_ms, head_n, head_hash FROM host_records WHERE run_key = ?1 AND kind IN ('pause', 'halt') ORDER BY seq DESC LIMIT 1",
        )?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let row = st
                .query_row([id], |r| {
                    Ok((
                        RunColumns {
                            key: r.get(1)?,
                            state: r.get(2)?,
                            entry_module: r.get(3)?,
                            entry_function: r.get(4)?,
                            program: r.get(5)?,
                            parent_run: r.get(6)?,
                            parent_checkpoint: r.get(7)?,
                            outer_run: r.get(8)?,
                            outer_call: r.get(9)?,
                            ending: r.get(10)?,
                            last_n: r.get(11)?,
                            last_hash: r.get(12)?,
                            created_ms: r.get(13)?,
                            updated_ms: r.get(14)?,
                            state_ms: r.get(15)?,
                            imported_ms: r.get(16)?,
                            namespace: r.get(18)?,
                        },
                        r.get::<_, Option<String>>(17)?,
                    ))
                })
                .optional()?;
            let Some((cols, flow_id)) = row else { continue };
            let decision = hd
                .query_row([cols.key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()?;
            out.push(ListingColumns {
                id: id.clone(),
                cols,
                decision,
                flow_id,
            });
        }
        Ok(out)
    }

    fn changed_ids(&mut self, since_ms: i64, limit: u32) -> Result<Vec<String>> {
        let mut st = self.0.prepare_cached(
            "SELECT id FROM runs WHERE state_ms >= ?1 ORDER BY state_ms, id LIMIT ?2",
        )?;
        Ok(st
            .query_map(params![since_ms, i64::from(limit)], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn child_columns(&mut self, run: &str, limit: u32) -> Result<Vec<ChildColumns>> {
        let mut st = self.0.prepare_cached(CHILDREN_QUERY)?;
        Ok(st
            .query_map(params![run, i64::from(limit)], |r| {
                let parent: Option<String> = r.get(1)?;
                let cp: Option<i64> = r.get(2)?;
                let outer: Option<String> = r.get(3)?;
                let call: Option<String> = r.get(4)?;
                Ok(ChildColumns {
                    id: r.get(0)?,
                    parent: parent.zip(cp),
                    outer: outer.zip(call),
                    namespace: r.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }
}

/// A run query's arguments as rusqlite binds them.
fn bound(args: &[Arg]) -> Vec<&dyn ToSql> {
    args.iter()
        .map(|a| match a {
            Arg::Text(t) => t as &dyn ToSql,
            Arg::Int(i) => i as &dyn ToSql,
        })
        .collect()
}
