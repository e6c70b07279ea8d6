//! Reads over the runs index: discovery (seed "Stored-run discovery"), the
//! dashboard's run listing (either order, state and id-prefix filters, the
//! index's other columns) and the changes since a time (what a live feed
//! polls to see other processes' writes). Discovery is the listing in id
//! order with the extra columns dropped, so the two never disagree.

use super::read::{run_row, snapshot};
use crate::api::*;
use crate::error::Result;
use crate::hash::{from_column, hash_text};
use crate::id::RunId;
use rusqlite::{Connection, OptionalExtension, ToSql};

pub(super) fn discover(conn: &mut Connection, q: &CheckedDiscovery) -> Result<DiscoveryPage> {
    let list = CheckedRunList {
        limit: q.limit,
        cursor: q.after.clone(),
        order: RunOrder::Oldest,
        state: q.state,
        prefix: None,
    };
    let page = list_runs(conn, &list)?;
    Ok(DiscoveryPage {
        runs: page.runs.into_iter().map(|r| r.row).collect(),
        next_after: page.next,
        problems: Vec::new(),
    })
}

/// The columns a listing reads, in this order.
const COLS: &str = "key, id, state, entry_module, entry_function, program, ending, last_n, last_hash, parent_run, parent_checkpoint, outer_run, outer_call, created_ms, updated_ms";

pub(super) fn list_runs(conn: &mut Connection, q: &CheckedRunList) -> Result<RunListPage> {
    snapshot(conn, |c| {
        let mut wheres: Vec<String> = Vec::new();
        let mut args: Vec<Box<dyn ToSql>> = Vec::new();
        let (cmp, dir) = match q.order {
            RunOrder::Oldest => (">", "ASC"),
            RunOrder::Newest => ("<", "DESC"),
        };
        if let Some(c) = &q.cursor {
            args.push(Box::new(c.as_str().to_string()));
            wheres.push(format!("id {cmp} ?{}", args.len()));
        }
        if let Some(s) = q.state {
            args.push(Box::new(s.as_str()));
            wheres.push(format!("state = ?{}", args.len()));
        }
        if let Some(p) = &q.prefix {
            // Ids are ASCII below `~`, so [p, p~) is exactly the ids
            // starting with p, and the id index serves it.
            args.push(Box::new(p.clone()));
            wheres.push(format!("id >= ?{}", args.len()));
            args.push(Box::new(format!("{p}~")));
            wheres.push(format!("id < ?{}", args.len()));
        }
        args.push(Box::new(i64::from(q.limit) + 1));
        let take = args.len();
        let filter = if wheres.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", wheres.join(" AND "))
        };
        let sql = format!("SELECT {COLS} FROM runs {filter} ORDER BY id {dir} LIMIT ?{take}");
        let mut st = c.prepare_cached(&sql)?;
        let params: Vec<&dyn ToSql> = args.iter().map(|a| a.as_ref()).collect();
        let rows: Vec<Cols> = st
            .query_map(params.as_slice(), cols)?
            .collect::<rusqlite::Result<_>>()?;
        let more = rows.len() > q.limit as usize;
        let mut out = Vec::with_capacity(rows.len());
        let mut hd = c.prepare_cached(
            "SELECT kind, at_ms, head_n, head_hash FROM host_records WHERE run_key = ?1 AND kind IN ('pause', 'halt') ORDER BY seq DESC LIMIT 1",
        )?;
        for r in rows.into_iter().take(q.limit as usize) {
            let ending = match r.ending.as_deref() {
                Some("completed") => Some(Ending::Completed),
                Some("faulted") => Some(Ending::Faulted),
                _ => None,
            };
            let decision: Option<(String, i64, i64, Vec<u8>)> = hd
                .query_row([r.key], |x| {
                    Ok((x.get(0)?, x.get(1)?, x.get(2)?, x.get(3)?))
                })
                .optional()?;
            let host_decision = decision
                .filter(|(_, _, n, h)| *n == r.last_n && *h == r.last_hash)
                .and_then(|(k, at, _, _)| {
                    HostRecordKind::parse(&k).map(|kind| HostDecision { kind, at_ms: at })
                });
            let last_fact = from_column(&r.last_hash).map(|h| FactRef {
                n: r.last_n as u64,
                hash: hash_text(&h),
            });
            let problem = last_fact.is_none().then(|| Problem {
                component: "runs".into(),
                status: ProblemStatus::Unreadable,
                detail: "the runs index holds a malformed hash".into(),
            });
            out.push(ListedRun {
                row: DiscoveryRow {
                    run: r.id,
                    history_present: true,
                    record: if problem.is_some() {
                        RecordStatus::Unreadable
                    } else if ending.is_some() {
                        RecordStatus::Complete
                    } else {
                        RecordStatus::Incomplete
                    },
                    truncated: false,
                    ending,
                    entry: Some(Entry {
                        module: r.module,
                        function: r.function,
                    }),
                    program: Some(r.program),
                    last_fact,
                    host_decision,
                    problem,
                },
                // The table's CHECK admits only the five states.
                state: RunState::parse(&r.state).unwrap_or(RunState::Running),
                parent: r.parent_run.zip(r.parent_checkpoint.map(|c| c as u64)),
                outer: r.outer_run.zip(r.outer_call),
                created_ms: r.created_ms,
                updated_ms: r.updated_ms,
            });
        }
        let next = if more {
            out.last().map(|r| r.row.run.clone())
        } else {
            None
        };
        Ok(RunListPage { runs: out, next })
    })
}

/// Largest `limit` of [`changed_since`].
pub const CHANGED_MAX: u32 = 10_000;

pub(super) fn changed_since(
    conn: &mut Connection,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<RunInfo>> {
    if !(1..=CHANGED_MAX).contains(&limit) {
        return Err(crate::Error::InvalidArgument(format!(
            "limit must be from 1 to {CHANGED_MAX}, not {limit}"
        )));
    }
    snapshot(conn, |c| {
        let ids: Vec<String> = c
            .prepare_cached(
                "SELECT id FROM runs WHERE updated_ms >= ?1 ORDER BY updated_ms, id LIMIT ?2",
            )?
            .query_map(rusqlite::params![since_ms, i64::from(limit)], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            // A malformed id or row names nothing a feed can report.
            let Ok(run) = RunId::parse(&id) else {
                continue;
            };
            if let Ok(r) = run_row(c, &run) {
                out.push(r.info);
            }
        }
        Ok(out)
    })
}

struct Cols {
    key: i64,
    id: String,
    state: String,
    module: String,
    function: String,
    program: String,
    ending: Option<String>,
    last_n: i64,
    last_hash: Vec<u8>,
    parent_run: Option<String>,
    parent_checkpoint: Option<i64>,
    outer_run: Option<String>,
    outer_call: Option<String>,
    created_ms: i64,
    updated_ms: i64,
}

fn cols(r: &rusqlite::Row<'_>) -> rusqlite::Result<Cols> {
    Ok(Cols {
        key: r.get(0)?,
        id: r.get(1)?,
        state: r.get(2)?,
        module: r.get(3)?,
        function: r.get(4)?,
        program: r.get(5)?,
        ending: r.get(6)?,
        last_n: r.get(7)?,
        last_hash: r.get(8)?,
        parent_run: r.get(9)?,
        parent_checkpoint: r.get(10)?,
        outer_run: r.get(11)?,
        outer_call: r.get(12)?,
        created_ms: r.get(13)?,
        updated_ms: r.get(14)?,
    })
}
