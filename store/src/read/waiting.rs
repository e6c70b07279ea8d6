//! The inbox's page and count over `waiting_calls` (migration 0013): one
//! ordered index range for the page (`waiting_calls_by_age` or `_by_due`,
//! keyset from the cursor), one count with the same filters.

use super::ReadDb;
use crate::api::{Namespace, RunInfo, WaitingCall, WaitingPage, WaitingQuery, WaitingSort};
use crate::error::{Error, Result};
use crate::listing::{Arg, Dialect, Sql};
use flow_abi::fact::{CallId, Fact, RunId};

/// A `waiting_calls` row as read: run, call, task, node, tool, fact,
/// since_ms, due_ms.
pub(crate) type WaitingColumns = (
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    Option<i64>,
);

/// The columns a page selects, in [`WaitingColumns`] order.
pub(crate) const COLUMNS: &str =
    "w.run, w.call, w.task, w.node, w.tool, w.fact, w.since_ms, w.due_ms";

fn bind(d: Dialect, args: &mut Vec<Arg>, a: Arg) -> String {
    args.push(a);
    match d {
        Dialect::Sqlite => format!("?{}", args.len()),
        Dialect::Postgres => format!("${}", args.len()),
    }
}

fn key(sort: WaitingSort) -> &'static str {
    match sort {
        WaitingSort::Age => "w.since_ms",
        WaitingSort::Due => "COALESCE(w.due_ms, 9223372036854775807)",
    }
}

/// [`key`] over a page's selected columns (the merge of namespaces).
fn merged_key(sort: WaitingSort) -> &'static str {
    match sort {
        WaitingSort::Age => "since_ms",
        WaitingSort::Due => "COALESCE(due_ms, 9223372036854775807)",
    }
}

/// The WHERE conditions of `q` (the cursor when `cursor`), in namespace
/// `ns` when one is named.
fn filters(
    q: &WaitingQuery,
    d: Dialect,
    cursor: bool,
    ns: Option<&Namespace>,
    args: &mut Vec<Arg>,
) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(ns) = ns {
        let p = bind(d, args, Arg::Text(ns.as_str().into()));
        w.push(format!("w.namespace = {p}"));
    }
    if let Some(r) = &q.run {
        let p = bind(d, args, Arg::Text(r.to_string()));
        w.push(format!("w.run_key = (SELECT key FROM runs WHERE id = {p})"));
    }
    for (col, v) in [("w.node", &q.node), ("w.tool", &q.tool)] {
        if let Some(v) = v {
            let p = bind(d, args, Arg::Text(v.clone()));
            w.push(format!("{col} = {p}"));
        }
    }
    if let Some(t) = q.since_at_most {
        let p = bind(d, args, Arg::Int(t));
        w.push(format!("w.since_ms <= {p}"));
    }
    if let Some(t) = q.due_before {
        let p = bind(d, args, Arg::Int(t));
        w.push(format!("w.due_ms < {p}"));
    }
    if cursor && let Some(c) = &q.after {
        let k = bind(d, args, Arg::Int(c.key));
        let r = bind(d, args, Arg::Text(c.run.clone()));
        let call = bind(d, args, Arg::Text(c.call.clone()));
        w.push(format!(
            "({}, w.run, w.call) > ({k}, {r}, {call})",
            key(q.sort)
        ));
    }
    w
}

fn where_clause(w: &[String]) -> String {
    if w.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", w.join(" AND "))
    }
}

/// The page's SQL: up to `limit + 1` rows in the sort's order. Confined
/// to namespaces, one ordered range of a namespace-led index each
/// (migration 0019), merged: a page reads at most `namespaces × (limit +
/// 1)` index entries.
pub(crate) fn page_sql(q: &WaitingQuery, d: Dialect) -> Sql {
    let mut args = Vec::new();
    let take = i64::from(q.limit) + 1;
    let branches: Vec<Option<&Namespace>> = match q.namespaces.listed() {
        None => vec![None],
        Some(names) => names.iter().map(Some).collect(),
    };
    let mut parts = Vec::new();
    for ns in branches {
        let w = filters(q, d, true, ns, &mut args);
        let lim = bind(d, &mut args, Arg::Int(take));
        parts.push(format!(
            "SELECT {COLUMNS} FROM waiting_calls w{} ORDER BY {}, w.run, w.call LIMIT {lim}",
            where_clause(&w),
            key(q.sort)
        ));
    }
    let text = if parts.len() == 1 {
        parts.remove(0)
    } else {
        let lim = bind(d, &mut args, Arg::Int(take));
        let union: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| format!("SELECT * FROM ({p}) b{i}"))
            .collect();
        format!(
            "{} ORDER BY {}, run, call LIMIT {lim}",
            union.join(" UNION ALL "),
            merged_key(q.sort)
        )
    };
    Sql { text, args }
}

/// The count's SQL, as one `(NULL, count)` group.
pub(crate) fn count_sql(q: &WaitingQuery, d: Dialect) -> Sql {
    let mut args = Vec::new();
    let mut w = filters(q, d, false, None, &mut args);
    if let Some(names) = q.namespaces.listed() {
        let ps: Vec<String> = names
            .iter()
            .map(|n| bind(d, &mut args, Arg::Text(n.as_str().into())))
            .collect();
        w.push(format!("w.namespace IN ({})", ps.join(", ")));
    }
    let text = format!(
        "SELECT CAST(NULL AS TEXT), COUNT(*) FROM waiting_calls w{}",
        where_clause(&w)
    );
    Sql { text, args }
}

/// A page of `q` and its count, read in one snapshot.
pub(crate) fn page(db: &mut dyn ReadDb, q: &WaitingQuery) -> Result<WaitingPage> {
    if !(1..=1000).contains(&q.limit) {
        return Err(Error::InvalidArgument(format!(
            "limit must be from 1 to 1000, not {}",
            q.limit
        )));
    }
    if q.namespaces.listed().is_some_and(<[_]>::is_empty) {
        return Ok(WaitingPage {
            calls: Vec::new(),
            more: false,
            total: 0,
        });
    }
    let d = db.dialect();
    let mut rows = db.waiting_rows(&page_sql(q, d))?;
    let more = rows.len() > q.limit as usize;
    rows.truncate(q.limit as usize);
    let total = db
        .group_counts(&count_sql(q, d))?
        .first()
        .map_or(0, |(_, n)| *n as u64);
    let calls = rows
        .into_iter()
        .map(|(run, call, task, node, tool, fact, since_ms, due_ms)| {
            let run = RunId::parse(&run)
                .map_err(|e| Error::corrupt(&run, 0, format!("waiting_calls: {e}")))?;
            let call = CallId::parse(&call).map_err(|e| {
                Error::corrupt(run.as_str(), fact as u64, format!("waiting_calls: {e}"))
            })?;
            Ok(WaitingCall {
                run,
                call,
                task,
                node,
                tool,
                fact: fact as u64,
                since_ms,
                due_ms,
            })
        })
        .collect::<Result<_>>()?;
    Ok(WaitingPage { calls, more, total })
}

/// Each `(run, n)`'s fact — a waiting call's Call — checked against its
/// predecessor's recorded hash and expanded, with its run's row: the inbox
/// page's details, read in one snapshot (on Postgres the rows and facts in
/// one query: [`ReadDb::prefetch_calls`]). One that does not read is its
/// own error, not the page's.
pub(crate) fn calls_at(
    db: &mut dyn ReadDb,
    at: &[(RunId, u64)],
) -> Result<Vec<Result<(Fact, RunInfo)>>> {
    db.prefetch_calls(at)?;
    Ok(at
        .iter()
        .map(|(run, n)| {
            let info = super::run_info(db, run)?;
            let stored = super::read_after(db, run, n.saturating_sub(1), 1)?
                .into_iter()
                .next()
                .filter(|f| f.n == *n)
                .ok_or_else(|| {
                    Error::corrupt(run.as_str(), *n, "the waiting call's fact is missing")
                })?;
            let mut fact = stored.fact;
            if let Some(v) = fact.value_mut() {
                *v = super::expand(db, run, v)?;
            }
            Ok((fact, info))
        })
        .collect())
}
