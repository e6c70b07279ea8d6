//! Run listings over the runs index, written once for every backend: the
//! dashboard's listing (either order, state and id-prefix filters, the
//! index's other columns) and the changes since a time (what a live feed
//! polls to see other processes' writes). A row is turned into its
//! discovery row by the same code as discovery, so the two never disagree.

use crate::api::*;
use crate::error::{Error, Result};
use crate::index::{DiscoveryColumns, RunColumns};
use crate::read::{ReadDb, run_info};
use flow_abi::fact::RunId;

/// One listed row: the run's id, its index columns and its latest pause or
/// halt record `(kind, at_ms, head_n, head_hash)`.
pub(crate) struct ListingColumns {
    pub id: String,
    pub cols: RunColumns,
    pub decision: Option<(String, i64, i64, Vec<u8>)>,
    pub flow_id: Option<String>,
}

/// A row naming another run: its id, `(parent_run, parent_checkpoint)`
/// and `(outer_run, outer_call)`.
pub(crate) struct ChildColumns {
    pub id: String,
    pub parent: Option<(String, i64)>,
    pub outer: Option<(String, String)>,
    pub namespace: String,
}

/// A run's children (one row may be both a fork and a nested run of it:
/// two entries), from `limit + 1` rows, so `truncated` needs no count.
pub(crate) fn children(db: &mut dyn ReadDb, run: &RunId, limit: u32) -> Result<ChildPage> {
    let rows = db.child_columns(run.as_str(), limit.saturating_add(1))?;
    let truncated = rows.len() > limit as usize;
    let mut children = Vec::new();
    for r in rows.into_iter().take(limit as usize) {
        let namespace = Namespace::parse(&r.namespace)
            .map_err(|_| Error::corrupt(&r.id, 0, "the runs index holds a malformed namespace"))?;
        if let Some((p, cp)) = &r.parent
            && p == run.as_str()
        {
            children.push(ChildRun {
                run: r.id.clone(),
                link: ChildLink::Fork {
                    checkpoint: u64::try_from(*cp).unwrap_or(0),
                },
                namespace: namespace.clone(),
            });
        }
        if let Some((o, call)) = r.outer
            && o == run.as_str()
        {
            children.push(ChildRun {
                run: r.id,
                link: ChildLink::Nested { call },
                namespace,
            });
        }
    }
    Ok(ChildPage {
        children,
        truncated,
    })
}

/// Largest `limit` of [`changed_since`].
pub const CHANGED_MAX: u32 = 10_000;

/// The `[from, to)` id range of the ids starting with `prefix`: ids are
/// ASCII below `~`, so the id index serves it.
pub(crate) fn prefix_range(prefix: &str) -> (String, String) {
    (prefix.to_string(), format!("{prefix}~"))
}

/// A query's argument, bound by the backend.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

/// Generated SQL and its arguments, numbered from 1 (`?N` or `$N`).
#[derive(Clone, Debug)]
pub(crate) struct Sql {
    pub text: String,
    pub args: Vec<Arg>,
}

/// How a backend spells what differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub(crate) fn bind(self, args: &mut Vec<Arg>, a: Arg) -> String {
        args.push(a);
        match self {
            Dialect::Sqlite => format!("?{}", args.len()),
            Dialect::Postgres => format!("${}", args.len()),
        }
    }
}

/// Whether `q`'s page is ordered by start time, then id: with a started
/// range and no search attribute, so that a page reads a page's worth of
/// the `(flow_id, created_ms, …)` or `(created_ms, id)` index rather than
/// the whole range (run ids follow the creating engine's clock, the range
/// the store's, so an id walk cannot stop at the range's ends).
pub(crate) fn by_started(q: &CheckedRunList) -> bool {
    q.attrs.is_empty() && (q.started.from.is_some() || q.started.to.is_some())
}

/// The run query's FROM and WHERE for `q` (one state, or none), with
/// the id column the rows are ordered by (after the start time when
/// [`by_started`]). Every filter is a column an index leads with
/// (docs/store.md, "The run query"): a search attribute drives the query
/// from `run_attrs` (name, value, run), which hands its runs in id order;
/// otherwise the runs index's own indexes serve it.
fn filters(
    q: &CheckedRunList,
    d: Dialect,
    (ns, state): (Option<&Namespace>, Option<RunState>),
    cursor: bool,
    args: &mut Vec<Arg>,
) -> (String, Vec<String>, &'static str) {
    let mut w = Vec::new();
    let mut from = String::new();
    let order = if q.attrs.is_empty() {
        from.push_str("runs r");
        "r.id"
    } else {
        for (i, (name, value)) in q.attrs.iter().enumerate() {
            let n = d.bind(args, Arg::Text(name.clone()));
            let v = d.bind(args, Arg::Text(value.clone()));
            if i == 0 {
                from.push_str("run_attrs a0 JOIN runs r ON r.id = a0.run");
                w.push(format!("a0.name = {n} AND a0.value = {v}"));
            } else {
                from.push_str(&format!(
                    " JOIN run_attrs a{i} ON a{i}.run = r.id AND a{i}.name = {n} AND a{i}.value = {v}"
                ));
            }
        }
        "a0.run"
    };
    let mut eq = |col: &str, a: Arg, w: &mut Vec<String>| {
        let p = d.bind(args, a);
        w.push(format!("{col} = {p}"));
    };
    if let Some(n) = ns {
        eq("r.namespace", Arg::Text(n.as_str().into()), &mut w);
    }
    if let Some(s) = state {
        eq("r.state", Arg::Text(s.as_str().into()), &mut w);
    }
    if let Some(f) = &q.flow {
        eq("r.flow_id", Arg::Text(f.clone()), &mut w);
    }
    if let Some(m) = &q.entry_module {
        eq("r.entry_module", Arg::Text(m.clone()), &mut w);
    }
    if let Some(f) = &q.entry_function {
        eq("r.entry_function", Arg::Text(f.clone()), &mut w);
    }
    if let Some(p) = &q.fork_of {
        eq("r.parent_run", Arg::Text(p.clone()), &mut w);
    }
    if let Some(o) = &q.nested_in {
        eq("r.outer_run", Arg::Text(o.clone()), &mut w);
    }
    for (col, r) in [("r.created_ms", q.started), ("r.updated_ms", q.updated)] {
        if let Some(f) = r.from {
            let p = d.bind(args, Arg::Int(f));
            w.push(format!("{col} >= {p}"));
        }
        if let Some(t) = r.to {
            let p = d.bind(args, Arg::Int(t));
            w.push(format!("{col} < {p}"));
        }
    }
    if let Some(f) = &q.fault {
        let p = d.bind(args, Arg::Text(f.clone()));
        w.push(match d {
            Dialect::Sqlite => format!("instr(r.fault, {p}) > 0"),
            Dialect::Postgres => format!("strpos(r.fault, {p}) > 0"),
        });
    }
    // The runs waiting on a node or Tool, from `waiting_calls` by its
    // (node, run_key) or (tool, run_key) index.
    for (col, v) in [("node", &q.waiting_node), ("tool", &q.waiting_tool)] {
        if let Some(v) = v {
            let p = d.bind(args, Arg::Text(v.clone()));
            w.push(format!(
                "r.key IN (SELECT run_key FROM waiting_calls WHERE {col} = {p})"
            ));
        }
    }
    if let Some(p) = &q.prefix {
        let (lo, hi) = prefix_range(p);
        let lo = d.bind(args, Arg::Text(lo));
        let hi = d.bind(args, Arg::Text(hi));
        w.push(format!("{order} >= {lo} AND {order} < {hi}"));
    }
    if cursor && let Some(c) = &q.cursor {
        let cmp = match q.order {
            RunOrder::Oldest => ">",
            RunOrder::Newest => "<",
        };
        let p = d.bind(args, Arg::Text(c.to_string()));
        if by_started(q) {
            // After the cursor run's start time and id; a cursor run
            // deleted since is placed by its id's time (its creating
            // engine's clock, the store's but for an import).
            let t = d.bind(args, Arg::Int(c.millis() as i64));
            let at = format!("COALESCE((SELECT c.created_ms FROM runs c WHERE c.id = {p}), {t})");
            let edge = match q.order {
                RunOrder::Oldest => ">=",
                RunOrder::Newest => "<=",
            };
            w.push(format!(
                "r.created_ms {edge} {at} AND (r.created_ms {cmp} {at} OR {order} {cmp} {p})"
            ));
        } else {
            w.push(format!("{order} {cmp} {p}"));
        }
    }
    (from, w, order)
}

/// The runs of `q`'s namespaces, as a condition (a count's: one pass over
/// the selected range, not a branch per namespace).
fn in_namespaces(q: &CheckedRunList, d: Dialect, args: &mut Vec<Arg>, w: &mut Vec<String>) {
    if let Some(names) = q.namespaces.listed() {
        let ps: Vec<String> = names
            .iter()
            .map(|n| d.bind(args, Arg::Text(n.as_str().into())))
            .collect();
        w.push(format!("r.namespace IN ({})", ps.join(", ")));
    }
}

pub(crate) fn where_clause(w: &[String]) -> String {
    if w.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", w.join(" AND "))
    }
}

/// The ids of up to `limit + 1` runs of a page, in its order. Several
/// states, and several namespaces of a confined caller, are one branch
/// each (each an ordered index range: `runs_by_namespace_state` and its
/// siblings of migration 0019), merged: a page reads at most `namespaces
/// × states × (limit + 1)` index entries.
pub(crate) fn page_sql(q: &CheckedRunList, d: Dialect) -> Sql {
    let dir = match q.order {
        RunOrder::Oldest => "ASC",
        RunOrder::Newest => "DESC",
    };
    let take = i64::from(q.limit) + 1;
    let mut args = Vec::new();
    let states: Vec<Option<RunState>> = if q.states.is_empty() {
        vec![None]
    } else {
        q.states.iter().copied().map(Some).collect()
    };
    let namespaces: Vec<Option<&Namespace>> = match q.namespaces.listed() {
        None => vec![None],
        Some(names) => names.iter().map(Some).collect(),
    };
    let branches: Vec<(Option<&Namespace>, Option<RunState>)> = namespaces
        .iter()
        .flat_map(|n| states.iter().map(move |s| (*n, *s)))
        .collect();
    let mut parts = Vec::new();
    let started = by_started(q);
    for s in &branches {
        let (from, w, order) = filters(q, d, *s, true, &mut args);
        let lim = d.bind(&mut args, Arg::Int(take));
        parts.push(if started {
            format!(
                "SELECT {order} AS id, r.created_ms AS t FROM {from}{} ORDER BY r.created_ms {dir}, {order} {dir} LIMIT {lim}",
                where_clause(&w)
            )
        } else {
            format!(
                "SELECT {order} AS id FROM {from}{} ORDER BY {order} {dir} LIMIT {lim}",
                where_clause(&w)
            )
        });
    }
    let text = if parts.len() == 1 {
        parts.remove(0)
    } else {
        let lim = d.bind(&mut args, Arg::Int(take));
        let (cols, by) = if started {
            ("id, t", format!("t {dir}, id {dir}"))
        } else {
            ("id", format!("id {dir}"))
        };
        let union: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| format!("SELECT {cols} FROM ({p}) b{i}"))
            .collect();
        format!("{} ORDER BY {by} LIMIT {lim}", union.join(" UNION ALL "))
    };
    Sql { text, args }
}

/// Counts by state (the state filter left out) and by flow (every filter),
/// over the runs index; no by-flow query when one flow is named (see
/// [`count_runs`]).
pub(crate) fn count_sql(q: &CheckedRunList, d: Dialect) -> (Sql, Option<Sql>) {
    let mut args = Vec::new();
    let (from, mut w, _) = filters(q, d, (None, None), false, &mut args);
    in_namespaces(q, d, &mut args, &mut w);
    // One pass over the selected index range counting each state, not a
    // `GROUP BY` (on SQLite a sort of every selected entry by state when
    // the range's index does not lead with it, e.g. flow + started).
    let states = [
        RunState::Running,
        RunState::Paused,
        RunState::Completed,
        RunState::Faulted,
        RunState::Halted,
    ];
    let counted: Vec<String> = states
        .iter()
        .enumerate()
        .map(|(i, s)| format!("COUNT(*) FILTER (WHERE r.state = '{}') AS s{i}", s.as_str()))
        .collect();
    let rows: Vec<String> = states
        .iter()
        .enumerate()
        .map(|(i, s)| format!("SELECT '{}', s{i} FROM c", s.as_str()))
        .collect();
    let by_state = Sql {
        text: format!(
            "WITH c AS MATERIALIZED (SELECT {} FROM {from}{}) {}",
            counted.join(", "),
            where_clause(&w),
            rows.join(" UNION ALL ")
        ),
        args,
    };
    if q.flow.is_some() {
        return (by_state, None);
    }
    let mut args = Vec::new();
    let (from, mut w, _) = filters(q, d, (None, None), false, &mut args);
    in_namespaces(q, d, &mut args, &mut w);
    if !q.states.is_empty() {
        let ps: Vec<String> = q
            .states
            .iter()
            .map(|s| d.bind(&mut args, Arg::Text(s.as_str().into())))
            .collect();
        w.push(format!("r.state IN ({})", ps.join(", ")));
    }
    w.push("r.flow_id IS NOT NULL".into());
    let by_flow = Sql {
        text: format!(
            "SELECT r.flow_id, COUNT(*) FROM {from}{} GROUP BY r.flow_id",
            where_clause(&w)
        ),
        args,
    };
    (by_state, Some(by_flow))
}

pub(crate) fn list_runs(db: &mut dyn ReadDb, q: &CheckedRunList) -> Result<RunListPage> {
    if q.none {
        return Ok(RunListPage {
            runs: Vec::new(),
            next: None,
        });
    }
    let ids = db.query_ids(&page_sql(q, db.dialect()))?;
    let more = ids.len() > q.limit as usize;
    let shown = &ids[..ids.len().min(q.limit as usize)];
    let rows = db.listing_rows(shown)?;
    let mut runs = Vec::with_capacity(rows.len());
    for ListingColumns {
        id,
        cols,
        decision,
        flow_id,
    } in rows
    {
        let key = cols.key;
        let mut row = DiscoveryColumns {
            key,
            id,
            entry_module: cols.entry_module,
            entry_function: cols.entry_function,
            program: cols.program,
            ending: cols.ending,
            last_n: cols.last_n,
            last_hash: cols.last_hash,
            decision,
        }
        .row();
        crate::read::verify_ends(db, key, &mut row)?;
        let namespace = Namespace::parse(&cols.namespace).map_err(|_| {
            Error::corrupt(
                &row.run,
                cols.last_n.max(0) as u64,
                "the runs index holds a malformed namespace",
            )
        })?;
        runs.push(ListedRun {
            namespace,
            row,
            // The table's CHECK admits only the five states.
            state: RunState::parse(&cols.state).unwrap_or(RunState::Running),
            parent: cols
                .parent_run
                .zip(cols.parent_checkpoint.map(|c| c as u64)),
            outer: cols.outer_run.zip(cols.outer_call),
            created_ms: cols.created_ms,
            updated_ms: cols.updated_ms,
            flow_id,
        });
    }
    let next = if more { shown.last().cloned() } else { None };
    Ok(RunListPage { runs, next })
}

pub(crate) fn count_runs(db: &mut dyn ReadDb, q: &CheckedRunList) -> Result<RunCounts> {
    if q.none {
        return Ok(RunCounts::default());
    }
    let (by_state, by_flow) = if crate::run_counts::answers(q) {
        crate::run_counts::count_sql(q, db.dialect())
    } else {
        count_sql(q, db.dialect())
    };
    let mut counts = RunCounts::default();
    for (s, n) in db.group_counts(&by_state)? {
        // A state no selected run has is left out (either query names it
        // with 0).
        if n == 0 {
            continue;
        }
        if let Some(s) = s.as_deref().and_then(RunState::parse) {
            if q.states.is_empty() || q.states.contains(&s) {
                counts.total += n as u64;
            }
            counts.by_state.push((s, n as u64));
        }
    }
    counts.by_state.sort_by_key(|(s, _)| s.as_str());
    match (&q.flow, by_flow) {
        // One flow named: its by-flow count is the total, the same filters
        // with the state filter applied, which the by-state counts already
        // hold. One pass over the selected range instead of two (the flow
        // + started-range count at 1,000,000 runs read ~106,000 index
        // entries twice).
        (Some(f), _) => {
            if counts.total > 0 {
                counts.by_flow.push((f.clone(), counts.total));
            }
        }
        (None, Some(by_flow)) => {
            for (f, n) in db.group_counts(&by_flow)? {
                if let Some(f) = f {
                    counts.by_flow.push((f, n as u64));
                }
            }
            counts.by_flow.sort();
        }
        (None, None) => {}
    }
    Ok(counts)
}

pub(crate) fn changed_since(
    db: &mut dyn ReadDb,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<RunInfo>> {
    if !(1..=CHANGED_MAX).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit must be from 1 to {CHANGED_MAX}, not {limit}"
        )));
    }
    let ids = db.changed_ids(since_ms, limit)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        // A malformed id or row names nothing a feed can report.
        let Ok(run) = RunId::parse(&id) else {
            continue;
        };
        if let Ok(info) = run_info(db, &run) {
            out.push(info);
        }
    }
    Ok(out)
}
